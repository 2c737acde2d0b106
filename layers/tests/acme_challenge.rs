//! The ACME HTTP-01 layer in an axum app.
#![cfg(feature = "acme")]

use axum::{body::Body, routing::get, Router};
use gatehouse_layers::acme::{AcmeChallengeLayer, ChallengeTokens};
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use tower::ServiceExt;

fn app(tokens: &ChallengeTokens) -> Router {
    Router::new()
        .route("/", get(|| async { "home" }))
        .fallback(|| async { (StatusCode::IM_A_TEAPOT, "inner") })
        .layer(AcmeChallengeLayer::new(tokens.clone()))
}

async fn send(app: Router, method: Method, path: &str) -> (StatusCode, String) {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .body(Body::empty())
        .unwrap();
    let res = app.oneshot(req).await.unwrap();
    let status = res.status();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn a_pending_token_is_answered_with_its_key_authorization() {
    let tokens = ChallengeTokens::new();
    tokens.insert("tok-1", "tok-1.thumb");
    let (s, b) = send(
        app(&tokens),
        Method::GET,
        "/.well-known/acme-challenge/tok-1",
    )
    .await;
    assert_eq!((s, b.as_str()), (StatusCode::OK, "tok-1.thumb"));

    // Once removed it is a 404, answered by the layer, not the app's fallback.
    tokens.remove("tok-1");
    let (s, _) = send(
        app(&tokens),
        Method::GET,
        "/.well-known/acme-challenge/tok-1",
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn other_requests_reach_the_app_and_other_methods_get_405() {
    let tokens = ChallengeTokens::new();
    tokens.insert("t", "t.k");
    assert_eq!(
        send(app(&tokens), Method::GET, "/").await,
        (StatusCode::OK, "home".into())
    );
    assert_eq!(
        send(app(&tokens), Method::GET, "/.well-known/other")
            .await
            .0,
        StatusCode::IM_A_TEAPOT
    );
    assert_eq!(
        send(app(&tokens), Method::POST, "/.well-known/acme-challenge/t")
            .await
            .0,
        StatusCode::METHOD_NOT_ALLOWED
    );
}
