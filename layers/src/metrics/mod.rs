//! Request metrics for Prometheus, through the `metrics` crate: per route, the requests by
//! method and status, their duration (a histogram from 50 µs to 10 s), the body bytes
//! sent, and the requests in flight.
//!
//! | metric (with the default prefix, `gatehouse`) | labels |
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
//! no-ops); [`install`] installs `metrics-exporter-prometheus`'s with these buckets
//! ([`install_with_prefix`] to name the metrics `myapp_http_requests_total` and so on), and
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
mod future;
mod histogram;
mod layer;
pub mod process;
mod route;
mod service;

pub use body::{MetricsBody, MetricsEnd};
pub use future::ResponseFuture;
pub use histogram::{latency_histogram, LatencyHistogram};
pub use layer::MetricsLayer;
pub use route::{refresh, sharded_counter, RouteMetrics, ShardedCounter, Started};
pub use service::Metrics;

pub use metrics_exporter_prometheus::PrometheusHandle;

/// Histogram buckets of request durations, in seconds: 50 µs to 10 s.
pub const DURATION_BUCKETS: [f64; 17] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0,
];

/// The prefix of the metric names unless [`install_with_prefix`] says otherwise: the
/// dashboards in the repository's `dashboards/` query these names.
pub const DEFAULT_PREFIX: &str = "gatehouse";

/// The names of the metrics with [`DEFAULT_PREFIX`].
pub const REQUESTS: &str = "gatehouse_http_requests_total";
pub const DURATION: &str = "gatehouse_http_request_duration_seconds";
const DURATION_HELP: &str = "Time from a request's arrival to the end of its response body.";
pub const BYTES: &str = "gatehouse_http_response_bytes_total";
pub const IN_FLIGHT: &str = "gatehouse_http_requests_in_flight";

/// The metric names in use: the process has one recorder, so one set of names.
#[derive(Debug)]
pub(crate) struct Names {
    prefix: &'static str,
    pub(crate) requests: &'static str,
    pub(crate) duration: &'static str,
    pub(crate) bytes: &'static str,
    pub(crate) in_flight: &'static str,
}

static DEFAULT_NAMES: Names = Names {
    prefix: DEFAULT_PREFIX,
    requests: REQUESTS,
    duration: DURATION,
    bytes: BYTES,
    in_flight: IN_FLIGHT,
};

static NAMES: std::sync::OnceLock<Names> = std::sync::OnceLock::new();

/// The names [`install_with_prefix`] chose, or the default ones before it is called.
pub(crate) fn names() -> &'static Names {
    NAMES.get().unwrap_or(&DEFAULT_NAMES)
}

/// The prefix of the metric names in use.
pub fn prefix() -> &'static str {
    names().prefix
}

/// Why the recorder could not be installed.
#[derive(Debug)]
#[non_exhaustive]
pub enum InstallError {
    /// The prefix is not the start of a Prometheus metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`).
    BadPrefix(String),
    /// The recorder is installed already, with other names.
    OtherPrefix {
        installed: &'static str,
        asked: String,
    },
    /// `metrics-exporter-prometheus` refused, or another recorder holds the `metrics` crate.
    Recorder(metrics_exporter_prometheus::BuildError),
}

impl std::fmt::Display for InstallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InstallError::BadPrefix(p) => write!(f, "{p:?} is not a Prometheus metric name prefix"),
            InstallError::OtherPrefix { installed, asked } => write!(
                f,
                "the metrics recorder is installed with prefix {installed:?}, not {asked:?}"
            ),
            InstallError::Recorder(e) => write!(f, "installing the metrics recorder: {e}"),
        }
    }
}

impl std::error::Error for InstallError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            InstallError::Recorder(e) => Some(e),
            _ => None,
        }
    }
}

/// Installs the Prometheus recorder globally, with [`DURATION_BUCKETS`] for every
/// histogram and the names in the [module docs](self), and returns the handle that
/// renders `/metrics`; called again (by a second app in the process, or a test), it
/// returns the same handle. It fails only when another recorder holds the `metrics`
/// crate. Histogram samples are folded into their buckets when rendering; call
/// [`PrometheusHandle::run_upkeep`] every few seconds as well if scrapes may be rare, to
/// bound the memory they hold.
pub fn install() -> Result<PrometheusHandle, InstallError> {
    install_with_prefix(DEFAULT_PREFIX)
}

/// [`install`], with the metrics named `{prefix}_http_requests_total` and so on. Called
/// again with another prefix, it fails: layers made since count under the first names.
pub fn install_with_prefix(prefix: &str) -> Result<PrometheusHandle, InstallError> {
    let valid = prefix.chars().enumerate().all(|(i, c)| {
        c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
    });
    if prefix.is_empty() || !valid {
        return Err(InstallError::BadPrefix(prefix.to_string()));
    }
    static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _once = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(h) = HANDLE.get() {
        let installed = names().prefix;
        if installed != prefix {
            return Err(InstallError::OtherPrefix {
                installed,
                asked: prefix.to_string(),
            });
        }
        return Ok(h.clone());
    }
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets(&DURATION_BUCKETS)
        .map_err(InstallError::Recorder)?
        .install_recorder()
        .map_err(InstallError::Recorder)?;
    if prefix != DEFAULT_PREFIX {
        // Once per process (the recorder is installed once): the names live as long.
        let name = |suffix: &str| -> &'static str {
            Box::leak(format!("{prefix}_{suffix}").into_boxed_str())
        };
        let _ = NAMES.set(Names {
            prefix: Box::leak(prefix.into()),
            requests: name("http_requests_total"),
            duration: name("http_request_duration_seconds"),
            bytes: name("http_response_bytes_total"),
            in_flight: name("http_requests_in_flight"),
        });
    }
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
    let n = names();
    describe_counter!(
        n.requests,
        "Requests answered, by route, method and status."
    );
    describe_counter!(n.bytes, Unit::Bytes, "Response body bytes sent.");
    describe_gauge!(
        n.in_flight,
        "Requests received and not yet answered in full."
    );
}
