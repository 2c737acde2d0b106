//! A shared HTTP cache's rules (RFC 9111, with RFC 5861's stale windows), for a response
//! cache in front of proxied routes.
//!
//! This is the first part of gatehouse's response cache: [`policy`] decides what may be
//! stored, for how long it is fresh, how old a stored response is, and whether it may
//! answer a request as it is, after revalidation, or stale. The store and the Layer that
//! use it (with request coalescing, `Vary`, purging and metrics) are not written yet.
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

pub mod policy;
