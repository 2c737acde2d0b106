//! A shared HTTP response cache (RFC 9111, with RFC 5861's stale windows), for a proxy or
//! any Service whose responses the origin marks cacheable.
//!
//! [`Cache`] keys a GET by scheme, host and target (and any configured request fields or
//! cookies), with `Vary` honoured by secondary keys (§4.1). Then:
//!
//! - **a fresh stored response** answers at once, from memory, with `Age`; a HEAD gets
//!   its head, a single byte range a 206, a matching `If-None-Match` or
//!   `If-Modified-Since` a 304;
//! - **a miss** goes upstream once however many GETs want the key: the others wait for
//!   the response to be stored (nginx's `proxy_cache_lock`), up to a timeout after which
//!   they go themselves; so does the revalidation of a stale entry;
//! - **a stale response** is revalidated with its `ETag` or `Last-Modified`, and a 304
//!   updates its stored head (§4.3.4). Within `stale-while-revalidate` it is served at
//!   once and refreshed in the background; within `stale-if-error` it stands in for an
//!   upstream error (500, 502, 503, 504 or a failure);
//! - **an unsafe method's success** removes the entries for its target and a same-host
//!   `Location` or `Content-Location` (§4.4).
//!
//! What may be stored is [`policy::storable`]'s decision (§3): `no-store`, `private`,
//! `Authorization` and `Set-Cookie` as a shared cache treats them. Requests with
//! `Authorization` bypass the cache unless [`CacheLayer::store_authorized`] keys by it.
//! Responses larger than [`CacheLayer::max_object_bytes`] pass through unstored. The
//! store ([`ResponseStore`]) is bounded by bytes and by entries.
//!
//! A response to a request carrying
//! [`CacheStatusWanted`](crate::upstream::CacheStatusWanted) (the access log adds it when
//! its format shows `$cache_status`) carries a [`CacheStatus`](crate::upstream::CacheStatus)
//! in its extensions, and, when asked, every response a `Cache-Status` field (RFC 9211).
//! A response being filed into the store, or served from it to a request
//! carrying [`StoredVersionWanted`](crate::upstream::StoredVersionWanted), also carries its
//! [`StoredVersion`](crate::upstream::StoredVersion): the compression layer above makes each
//! variant of it once and drops them when the entry leaves the store.
//!
//! # Example
//!
//! ```
//! use axum::{routing::get, Router};
//! use gatehouse_layers::cache::CacheLayer;
//! use std::time::Duration;
//!
//! let cache = CacheLayer::new()
//!     .limits(32 << 20, 10_000)
//!     .stale_if_error(Duration::from_secs(300))
//!     .cache_status_header(true);
//! let store = cache.store().clone(); // purge with store.invalidate(..) or purge_prefix(..)
//! let app: Router = Router::new()
//!     .route("/", get(|| async { ([("cache-control", "max-age=60")], "hello") }))
//!     .layer(cache);
//! # let _ = (app, store);
//! ```
//!
//! The rules alone are in [`policy`]:
//!
//! ```
//! use gatehouse_layers::cache::policy::{self, CacheControl, Use};
//! use http::{HeaderMap, HeaderValue, StatusCode};
//! use std::time::{Duration, SystemTime};
//!
//! let mut response = HeaderMap::new();
//! response.insert("cache-control", HeaderValue::from_static("max-age=600, stale-if-error=60"));
//! let cc = CacheControl::parse(&response);
//! let now = SystemTime::now();
//! let lifetime = policy::freshness_lifetime(StatusCode::OK, &response, &cc, now, Duration::ZERO);
//! assert_eq!(lifetime, Duration::from_secs(600));
//! let fresh = policy::usable(Duration::from_secs(10), lifetime, &CacheControl::default(), &cc,
//!     Duration::ZERO, Duration::ZERO);
//! assert_eq!(fresh, Use::Serve);
//! ```

mod body;
mod disk;
mod future;
mod key;
mod lane;
mod layer;
pub mod policy;
mod service;
mod store;

pub use body::{CacheBody, Split};
pub use future::ResponseFuture;
pub use layer::{CacheLayer, DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES, DEFAULT_MAX_OBJECT_BYTES};
pub use service::Cache;
pub use store::{ResponseStore, Stats};
