//! CORS (the Fetch standard's CORS protocol): tower-http's
//! [`CorsLayer`](tower_http::cors::CorsLayer), re-exported so that gatehouse's routes and
//! your app use the same one. It answers preflights (`OPTIONS` with
//! `Access-Control-Request-Method`) itself, adds `Access-Control-Allow-Origin` and the
//! rest to the responses of allowed origins, and `Vary: Origin, Access-Control-Request-*`
//! to every response, so that caches keep one answer per origin.
//!
//! gatehouse uses tower-http's layer rather than one of its own: measured on a static-1k
//! route, it costs what the issue allowed (see `docs/src/rules.md`).
//!
//! A configuration it would refuse by panicking (credentials with a `*`) is refused when
//! gatehouse's configuration is loaded.
//!
//! ```
//! use axum::{routing::get, Router};
//! use gatehouse_layers::cors::{AllowOrigin, CorsLayer};
//! use http::{HeaderValue, Method};
//!
//! let cors = CorsLayer::new()
//!     .allow_origin(AllowOrigin::list([HeaderValue::from_static("https://app.example.com")]))
//!     .allow_methods([Method::GET, Method::PUT])
//!     .allow_credentials(true);
//! let app: Router = Router::new().route("/", get(|| async { "hello" })).layer(cors);
//! # let _ = app;
//! ```

pub use tower_http::cors::*;
