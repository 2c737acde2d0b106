//! An axum app of your own, served by gatehouse's server with [`gatehouse::serve`]: a
//! handler of its own, gatehouse's `StaticFiles` and `Proxy` mounted with `nest_service`,
//! and gatehouse's layers over all of it. The server brings what the config-driven gateway
//! has: per-core runtimes, TLS and HTTP/2, the limits and timeouts, the drain, the admin
//! listener and `/metrics`.
//!
//! ```text
//! cargo run --release --example axum_on_gatehouse -- examples/site [http://127.0.0.1:3000]
//! ```
//! then `curl localhost:8080/whoami`, `curl localhost:8080/static/`, and with an upstream,
//! `curl localhost:8080/api/...`. Settings (listeners, TLS, limits) come from
//! `gatehouse.toml` and `GATEHOUSE_*` as for the gateway; its routes are not read.

use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::Extension;
use gatehouse::proxy::{ConnInfo, Proxy};
use gatehouse::static_files::StaticFiles;
use gatehouse_layers::metrics::MetricsLayer;
use gatehouse_layers::open_file_cache::Resolver;
use gatehouse_layers::precompress::PrecompressLayer;
use std::net::SocketAddr;
use std::path::Path;

/// The app: `/whoami`, the files under `site` at `/static`, and, given an upstream, a
/// proxy to it at `/api`; compressed, and counted as the route `app`.
pub fn app(site: &Path, upstream: Option<&str>) -> Result<axum::Router, String> {
    let files =
        StaticFiles::new(Resolver::new(site).map_err(|e| format!("{}: {e}", site.display()))?);
    let mut app = axum::Router::new()
        .route("/whoami", get(whoami))
        .nest_service("/static", files);
    if let Some(url) = upstream {
        app = app.nest_service("/api", proxy_to(url)?);
    }
    Ok(app
        .layer(PrecompressLayer::new())
        .layer(MetricsLayer::new("app")))
}

/// A proxy to `url`, configured as a route's `[routes.proxy]` table would be.
fn proxy_to(url: &str) -> Result<Proxy, String> {
    let config = gatehouse_config::Loader::new()
        .no_default_file()
        .no_env()
        .toml_str(format!(
            "[[routes]]\npath = \"/api\"\n[routes.proxy]\nupstreams = [{{ url = {url:?} }}]\n"
        ))
        .load()
        .map_err(|e| e.to_string())?;
    let route = config.routes.first().and_then(|r| r.proxy.as_ref());
    let proxy = route.ok_or("no proxy route")?;
    Proxy::new(proxy).map_err(|e| e.to_string())
}

/// The client as gatehouse's server saw it: its address (axum's `ConnectInfo`, which
/// gatehouse's server fills in as `axum::serve` does) and whether it came over HTTPS.
async fn whoami(
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Extension(conn): Extension<ConnInfo>,
) -> String {
    let scheme = if conn.https { "https" } else { "http" };
    format!("{} {scheme}\n", peer.ip())
}

#[allow(dead_code)]
fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let site = args.next().unwrap_or_else(|| "examples/site".into());
    let upstream = args.next();
    // The site is the root too: with no routes, the config names no other directory.
    let config = gatehouse_config::Loader::new()
        .cli("root", site.clone())
        .load()
        .map_err(|e| e.to_string())?;
    if config.metrics.enabled {
        gatehouse::metrics::install()?;
    }
    let handle = gatehouse::serve(&config, app(Path::new(&site), upstream.as_deref())?)
        .map_err(|e| e.to_string())?;
    for a in handle.addrs() {
        println!("listening on http://{a}");
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let _ = tokio::signal::ctrl_c().await;
    });
    handle.shutdown();
    Ok(())
}
