//! Request metrics for Prometheus, through the `metrics` crate: per route, the requests by
//! method and status, their duration (a histogram from 50 µs to 10 s), the body bytes
//! sent, and the requests in flight.
//!
//! | metric | labels |
//! |---|---|
//! | `gatehouse_http_requests_total` | `route`, `method`, `status` |
//! | `gatehouse_http_request_duration_seconds` (histogram) | `route` |
//! | `gatehouse_http_response_bytes_total` | `route` |
//! | `gatehouse_http_requests_in_flight` (gauge) | |
//!
//! Labels are bounded: `route` is a name given when the layer is made, `method` one of the
//! nine of RFC 9110 §9 or `OTHER`, `status` the code. Handles are registered once per
//! route, method and status and kept, and counts go to per-thread slots handed to the
//! recorder at scrape time ([`refresh`]); the duration histogram is this crate's own
//! ([`LatencyHistogram`]), also per thread, and rendered by [`render`]. A request costs a
//! few uncontended atomic adds: no lock, no label hashing, no allocation. A request is counted
//! when its response body has been sent (or dropped: then as sent so far); one dropped
//! before it had a response counts as status 499, as nginx logs it.
//!
//! A recorder must be installed before the layer is made (handles made earlier stay
//! no-ops); [`install`] installs `metrics-exporter-prometheus`'s with these buckets, and
//! [`render`] makes the `/metrics` page: these metrics, any others recorded through the
//! `metrics` crate, and the process's own ([`process`]).
//!
//! ```
//! use axum::{routing::get, Router};
//! use gatehouse_layers::metrics::{install, render, MetricsLayer};
//!
//! let prometheus = install().expect("no other recorder");
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(MetricsLayer::new("home"))
//!     .route("/metrics", get(move || std::future::ready(render(&prometheus))));
//! # let _ = app;
//! ```

mod body;
mod histogram;
mod layer;
pub mod process;
mod route;
mod service;

pub use body::{MetricsBody, MetricsEnd};
pub use histogram::{latency_histogram, LatencyHistogram};
pub use layer::MetricsLayer;
pub use route::{refresh, sharded_counter, RouteMetrics, ShardedCounter, Started};
pub use service::{Metrics, ResponseFuture};

pub use metrics_exporter_prometheus::PrometheusHandle;

/// Histogram buckets of request durations, in seconds: 50 µs to 10 s.
pub const DURATION_BUCKETS: [f64; 17] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0,
];

pub const REQUESTS: &str = "gatehouse_http_requests_total";
pub const DURATION: &str = "gatehouse_http_request_duration_seconds";
const DURATION_HELP: &str = "Time from a request's arrival to the end of its response body.";
pub const BYTES: &str = "gatehouse_http_response_bytes_total";
pub const IN_FLIGHT: &str = "gatehouse_http_requests_in_flight";

/// Installs the Prometheus recorder globally, with [`DURATION_BUCKETS`] for every
/// histogram, and returns the handle that renders `/metrics`; called again (by a second
/// app in the process, or a test), it returns the same handle. It fails only when another
/// recorder holds the `metrics` crate. Histogram samples are folded into their buckets
/// when rendering; call [`PrometheusHandle::run_upkeep`] every few seconds as well if
/// scrapes may be rare, to bound the memory they hold.
pub fn install() -> Result<PrometheusHandle, String> {
    static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _once = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(h) = HANDLE.get() {
        return Ok(h.clone());
    }
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets(&DURATION_BUCKETS)
        .map_err(|e| e.to_string())?
        .install_recorder()
        .map_err(|e| e.to_string())?;
    describe();
    Ok(HANDLE.get_or_init(|| handle).clone())
}

static HANDLE: std::sync::OnceLock<PrometheusHandle> = std::sync::OnceLock::new();

/// The handle [`install`] returned, if it has been called.
pub fn installed() -> Option<&'static PrometheusHandle> {
    HANDLE.get()
}

/// The `/metrics` page: brings the request counts up to date ([`refresh`]), then renders
/// everything recorded, the latency histograms ([`latency_histogram`]), and the process's
/// own figures.
pub fn render(handle: &PrometheusHandle) -> String {
    refresh();
    let mut out = handle.render();
    histogram::render(&mut out);
    process::render(&mut out);
    out
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, Unit};
    describe_counter!(REQUESTS, "Requests answered, by route, method and status.");
    describe_counter!(BYTES, Unit::Bytes, "Response body bytes sent.");
    describe_gauge!(IN_FLIGHT, "Requests received and not yet answered in full.");
}
