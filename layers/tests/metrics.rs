//! The metrics layer alone in an axum app: counts by route, method and status, bytes,
//! durations, and a request dropped before its response.
#![cfg(feature = "metrics")]

use axum::{body::Body, routing::get, Router};
use gatehouse_layers::metrics::{install, render, MetricsLayer};
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use std::time::Duration;
use tower::ServiceExt;

fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{series} missing from:\n{text}"))
}

#[tokio::test]
async fn the_layer_counts_what_it_serves() {
    let prometheus = install().unwrap();
    // Again (another app in the process): the same recorder, not an error.
    install().unwrap();
    assert!(gatehouse_layers::metrics::installed().is_some());
    let app: Router = Router::new()
        .route("/", get(|| async { "hello" }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(10)).await;
                "late"
            }),
        )
        .layer(MetricsLayer::new("home"));
    for _ in 0..2 {
        let r = app
            .clone()
            .oneshot(Request::get("/").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        r.into_body().collect().await.unwrap();
    }
    let r = app
        .clone()
        .oneshot(Request::post("/nowhere").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    r.into_body().collect().await.unwrap();
    // A client that goes away before the answer.
    let fut = app
        .clone()
        .oneshot(Request::get("/slow").body(Body::empty()).unwrap());
    let _ = tokio::time::timeout(Duration::from_millis(20), fut).await;

    let text = render(&prometheus);
    let req = |m: &str, s: &str| {
        value(
            &text,
            &format!(
                "gatehouse_http_requests_total{{route=\"home\",method=\"{m}\",status=\"{s}\"}}"
            ),
        )
    };
    assert_eq!(req("GET", "200"), 2.0);
    assert_eq!(req("POST", "404"), 1.0);
    assert_eq!(req("GET", "499"), 1.0);
    assert_eq!(
        value(&text, "gatehouse_http_response_bytes_total{route=\"home\"}"),
        10.0
    );
    assert_eq!(
        value(
            &text,
            "gatehouse_http_request_duration_seconds_count{route=\"home\"}"
        ),
        4.0
    );
    assert_eq!(value(&text, "gatehouse_http_requests_in_flight"), 0.0);
}
