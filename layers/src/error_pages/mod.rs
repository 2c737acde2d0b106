//! Error pages: a response with a mapped status (`404`, `502`…) gets the page's body in
//! place of its own, keeping its status. nginx's `error_page`, Caddy's `handle_errors`.
//!
//! As nginx without `proxy_intercept_errors`, an upstream's own response is passed on as
//! it is (its body may be an API's JSON error): a response is an upstream's when it carries
//! an [`UpstreamInfo`](crate::upstream::UpstreamInfo), which gatehouse's proxy puts on the
//! responses it relays. [`ErrorPagesLayer::intercept_upstream`] replaces those too.
//!
//! Pages are given as bytes: read once when the layer is made (gatehouse reads them from
//! the route's root when its configuration is loaded, and again on reload).
//!
//! ```
//! use axum::{routing::get, Router};
//! use bytes::Bytes;
//! use gatehouse_layers::error_pages::ErrorPagesLayer;
//! use http::{HeaderValue, StatusCode};
//!
//! let pages = ErrorPagesLayer::new().page(
//!     StatusCode::NOT_FOUND,
//!     Bytes::from_static(b"<h1>Not here</h1>"),
//!     HeaderValue::from_static("text/html; charset=utf-8"),
//! );
//! let app: Router = Router::new().route("/", get(|| async { "hello" })).layer(pages);
//! # let _ = app;
//! ```

mod future;
mod layer;
mod service;

pub use future::ResponseFuture;
pub use layer::ErrorPagesLayer;
pub use service::ErrorPages;

use bytes::Bytes;
use http::HeaderValue;

/// A page: its body and type.
#[derive(Clone, Debug)]
pub(crate) struct Page {
    pub(crate) body: Bytes,
    pub(crate) content_type: HeaderValue,
}
