//! An axum app with handlers of its own and four of gatehouse's layers over them: the
//! precompressed cache, the access log, Basic auth on `/admin`, and the metrics layer with
//! its `/metrics`. `src/main.rs` serves it; `tests/layers.rs` shows each layer working.

use axum::routing::get;
use axum::Router;
use gatehouse_layers::access_log::{AccessLog, AccessLogLayer, Destination, Format, LogWriter};
use gatehouse_layers::auth::{AuthLayer, BasicAuth};
use gatehouse_layers::metrics::MetricsLayer;
use gatehouse_layers::precompress::PrecompressLayer;
use http::header::{CONTENT_TYPE, ETAG};
use std::path::PathBuf;
use std::time::Duration;

/// Where the app keeps its files.
pub struct Options {
    pub htpasswd: PathBuf,
    pub access_log: PathBuf,
}

/// The app, and what its owner needs at shutdown.
pub struct App {
    pub router: Router,
    /// Close after the server has drained, so that every line is written.
    pub log: LogWriter,
}

/// A script worth compressing, with a version (strong `ETag`) to cache its encodings by.
pub const SCRIPT: &str = include_str!("../../../bench/app.js");

pub fn app(o: &Options) -> Result<App, String> {
    // Once per process; a second app (a test) gets the same handle.
    let metrics = gatehouse_layers::metrics::install().map_err(|e| e.to_string())?;
    let log = LogWriter::open(Destination::File(o.access_log.clone()), None, 8 << 20)
        .map_err(|e| format!("{}: {e}", o.access_log.display()))?;
    let auth = BasicAuth::open(&o.htpasswd, "admin", Duration::from_secs(60))
        .map_err(|e| e.to_string())?;

    let admin = Router::new()
        .route("/admin", get(|| async { "the admin area\n" }))
        .layer(AuthLayer::new(auth));
    let router = Router::new()
        .route("/", get(|| async { "hello from the app\n" }))
        .route(
            "/app.js",
            get(|| async {
                (
                    [
                        (CONTENT_TYPE, "application/javascript"),
                        (ETAG, "\"app-v1\""),
                    ],
                    SCRIPT,
                )
            }),
        )
        .merge(admin)
        .layer(PrecompressLayer::new())
        .layer(AccessLogLayer::new(AccessLog::new(
            log.clone(),
            Format::Combined,
        )))
        .layer(MetricsLayer::new("app"))
        // Outside the layers: scrapes aren't counted, logged or compressed.
        .route(
            "/metrics",
            get(move || std::future::ready(gatehouse_layers::metrics::render(&metrics))),
        );
    Ok(App { router, log })
}
