//! The rate-limit layer in an axum app: a bucket per client, wherever the address comes
//! from, and no shared bucket for requests without one.
#![cfg(feature = "rate-limit")]

use axum::extract::ConnectInfo;
use axum::{body::Body, routing::get, Router};
use gatehouse_layers::client::ClientAddr;
use gatehouse_layers::rate_limit::{RateLimitLayer, RateLimiter};
use http::{Request, StatusCode};
use std::net::{IpAddr, SocketAddr};
use tower::ServiceExt;

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(layer)
}

async fn status(app: &Router, req: Request<Body>) -> StatusCode {
    app.clone().oneshot(req).await.unwrap().status()
}

fn from(addr: &str) -> Request<Body> {
    let mut req = Request::get("/").body(Body::empty()).unwrap();
    req.extensions_mut()
        .insert(ClientAddr(addr.parse::<SocketAddr>().unwrap()));
    req
}

#[tokio::test]
async fn each_client_address_has_its_own_bucket() {
    let app = app(RateLimitLayer::new(RateLimiter::new(0.001, 1)));
    assert_eq!(status(&app, from("192.0.2.1:1000")).await, StatusCode::OK);
    // Another connection of the same client shares its bucket.
    assert_eq!(
        status(&app, from("192.0.2.1:1001")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(status(&app, from("192.0.2.2:1000")).await, StatusCode::OK);

    // axum's ConnectInfo, when there is no ClientAddr.
    let mut req = Request::get("/").body(Body::empty()).unwrap();
    req.extensions_mut()
        .insert(ConnectInfo("192.0.2.3:1000".parse::<SocketAddr>().unwrap()));
    assert_eq!(status(&app, req).await, StatusCode::OK);
    let mut req = Request::get("/").body(Body::empty()).unwrap();
    req.extensions_mut()
        .insert(ConnectInfo("192.0.2.3:1000".parse::<SocketAddr>().unwrap()));
    assert_eq!(status(&app, req).await, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn requests_without_an_address_are_not_lumped_together() {
    let limiter = RateLimiter::new(0.001, 1);
    let app = app(RateLimitLayer::new(limiter.clone()));
    for _ in 0..3 {
        let req = Request::get("/").body(Body::empty()).unwrap();
        assert_eq!(status(&app, req).await, StatusCode::OK);
    }
    assert_eq!(limiter.unkeyed(), 3);
    // Clients with addresses are limited as ever.
    assert_eq!(status(&app, from("192.0.2.9:1")).await, StatusCode::OK);
    assert_eq!(
        status(&app, from("192.0.2.9:1")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(limiter.unkeyed(), 3);
}

#[tokio::test]
async fn a_key_function_chooses_the_bucket() {
    let limiter = RateLimiter::new(0.001, 1);
    let layer = RateLimitLayer::with_key(limiter.clone(), |parts| {
        parts
            .headers
            .get("x-client")?
            .to_str()
            .ok()?
            .parse::<IpAddr>()
            .ok()
    });
    let app = app(layer);
    let with = |ip: &str| {
        Request::get("/")
            .header("x-client", ip)
            .body(Body::empty())
            .unwrap()
    };
    assert_eq!(status(&app, with("203.0.113.1")).await, StatusCode::OK);
    assert_eq!(
        status(&app, with("203.0.113.1")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(status(&app, with("203.0.113.2")).await, StatusCode::OK);
    // The key function decides alone: a ClientAddr isn't looked at.
    assert_eq!(status(&app, from("203.0.113.1:5")).await, StatusCode::OK);
    assert_eq!(limiter.unkeyed(), 1);
}
