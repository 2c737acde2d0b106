//! gatehouse's config-driven router mounted in a plain axum app, served by `axum::serve`:
//! the routes of `gatehouse.toml` answer what the app's own routes don't, with their
//! access logs and per-route metrics. Behind a TLS terminator, the app says so with a
//! [`ConnInfo`] extension, and the gateway's proxies then send `X-Forwarded-Proto: https`.
//!
//! ```text
//! cargo run --release --example gatehouse_in_axum -- 127.0.0.1:3000 [--behind-https]
//! ```

use axum::routing::get;
use axum::Extension;
use gatehouse::proxy::ConnInfo;
use gatehouse::GatewayRouter;
use std::net::SocketAddr;

/// The app: `/healthz` and `/metrics` of its own, and the gateway for everything else.
pub fn app(gateway: GatewayRouter, behind_https: bool) -> axum::Router {
    let app = axum::Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(metrics))
        .fallback_service(gateway);
    if behind_https {
        // The peer stays unset here: the gateway then takes it from axum's ConnectInfo.
        app.layer(Extension(ConnInfo {
            peer: None,
            https: true,
        }))
    } else {
        app
    }
}

/// The process's metrics, the gateway's routes' among them, in Prometheus's text format.
async fn metrics() -> String {
    use gatehouse_layers::metrics::{installed, render};
    installed().map(render).unwrap_or_default()
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:3000".into());
    let behind_https = args.any(|a| a == "--behind-https");
    let config = gatehouse_config::Loader::new()
        .load()
        .map_err(|e| e.to_string())?;
    if config.metrics.enabled {
        // Before the router is built, so that its routes' handles record.
        gatehouse::metrics::install()?;
    }
    let gateway = gatehouse::router::build(&config).map_err(|e| e.to_string())?;
    // Active health checks, if any route has them.
    gateway.spawn_background();
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    println!("listening on http://{addr}");
    let app = app(gateway.clone(), behind_https);
    let served = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await;
    gateway.close_logs();
    served.map_err(|e| e.to_string())
}
