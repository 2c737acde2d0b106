//! The metric names with a prefix of the app's own (a process of its own: the recorder
//! and its names are per process).
#![cfg(feature = "metrics")]

use axum::{body::Body, routing::get, Router};
use gatehouse_layers::metrics::{
    install, install_with_prefix, prefix, render, InstallError, MetricsLayer,
};
use http::Request;
use http_body_util::BodyExt;
use tower::ServiceExt;

#[tokio::test]
async fn the_prefix_names_every_request_metric() {
    assert!(matches!(
        install_with_prefix("9lives"),
        Err(InstallError::BadPrefix(_))
    ));
    let prometheus = install_with_prefix("myapp").unwrap();
    assert_eq!(prefix(), "myapp");
    // One recorder, one set of names: asking for the default ones now is an error.
    match install() {
        Err(InstallError::OtherPrefix { installed, asked }) => {
            assert_eq!((installed, asked.as_str()), ("myapp", "gatehouse"));
        }
        other => panic!("{other:?}"),
    }
    install_with_prefix("myapp").unwrap();

    let app: Router = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(MetricsLayer::new("home"));
    let r = app
        .oneshot(Request::get("/").body(Body::empty()).unwrap())
        .await
        .unwrap();
    r.into_body().collect().await.unwrap();

    let text = render(&prometheus);
    for series in [
        "myapp_http_requests_total{route=\"home\",method=\"GET\",status=\"200\"} 1",
        "myapp_http_response_bytes_total{route=\"home\"} 5",
        "myapp_http_request_duration_seconds_count{route=\"home\"} 1",
        "myapp_http_requests_in_flight 0",
    ] {
        assert!(
            text.lines().any(|l| l == series),
            "{series} missing from:\n{text}"
        );
    }
    assert!(!text.contains("gatehouse_http_"), "{text}");
}
