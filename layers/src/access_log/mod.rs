//! Access logs: nginx-compatible lines (`combined`, `common`), JSON, or a template, written
//! without the request ever waiting on the disk, and without losing a line.
//!
//! A line is written when the response body has been sent, with the real byte count; a
//! response cut off mid-body is logged and marked (`aborted` at the end of a combined or
//! common line, `"aborted":true` in JSON). Lines go to a [`LogWriter`], which batches them on
//! a thread of its own; see [`writer`] for how nothing is lost. `Authorization`, cookies
//! and every other header but `Host`, `Referer`, `User-Agent` and `X-Request-Id` are never
//! read, so no format can put a credential in a line.
//!
//! ```
//! use axum::{routing::get, Router};
//! use gatehouse_layers::access_log::{AccessLog, AccessLogLayer, Destination, Format, LogWriter};
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("access.log");
//!
//! let writer = LogWriter::open(Destination::File(path.clone()), None, 8 << 20).unwrap();
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(AccessLogLayer::new(AccessLog::new(writer.clone(), Format::Combined)));
//! # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
//! # rt.block_on(async {
//! #     use tower::ServiceExt;
//! #     let req = http::Request::get("/").body(axum::body::Body::empty()).unwrap();
//! #     let res = app.oneshot(req).await.unwrap();
//! #     http_body_util::BodyExt::collect(res.into_body()).await.unwrap();
//! # });
//! // At shutdown, after the server has drained:
//! writer.close();
//! # let log = std::fs::read_to_string(&path).unwrap();
//! # assert!(log.contains("\"GET / HTTP/1.1\" 200 5"), "{log}");
//! ```
//!
//! The client's address is [`client_addr`](crate::client::client_addr)'s: a [`ClientAddr`]
//! request extension, else axum's `ConnectInfo` (with the `axum` feature).

mod body;
pub mod format;
mod future;
mod layer;
mod service;
pub mod writer;

pub use crate::client::ClientAddr;
pub use body::{LogBody, LogEnd};
pub use format::{Field, Format, FormatError, Record, UpstreamInfo};
pub use future::ResponseFuture;
pub use layer::AccessLogLayer;
pub use service::AccessLogging;
pub use writer::{Destination, LogWriter, Rotation};

use std::sync::Arc;

/// A destination and a format: what a route (or an app) logs with. Cheap to clone (one
/// reference count, taken per request).
#[derive(Clone, Debug)]
pub struct AccessLog {
    inner: Arc<(LogWriter, Format)>,
    /// Whether lines show a cache's status: then requests ask a cache below for it
    /// ([`CacheStatusWanted`](crate::upstream::CacheStatusWanted)).
    cache_status: bool,
}

impl AccessLog {
    pub fn new(writer: LogWriter, format: Format) -> Self {
        AccessLog {
            cache_status: format.shows_cache_status(),
            inner: Arc::new((writer, format)),
        }
    }

    /// Whether its lines show a response cache's status.
    pub fn shows_cache_status(&self) -> bool {
        self.cache_status
    }

    pub fn writer(&self) -> &LogWriter {
        &self.inner.0
    }

    /// Writes the line of a request whose client went away before its response head:
    /// nginx's 499, marked aborted.
    pub fn log_abandoned(&self, mut r: Box<Record>) -> bool {
        r.status = 499;
        r.aborted = true;
        self.log(&r)
    }

    /// Writes `r`'s line. False if it was dropped (the writer is too far behind).
    pub fn log(&self, r: &Record) -> bool {
        let (writer, format) = &*self.inner;
        writer.append(|out| format.write(r, out))
    }
}
