//! What a proxy says of the upstream that answered, for the layers above it.

use std::time::Duration;

/// Which upstream answered a proxied request and how long it took to answer (from the
/// request sent to the response head), put in the response's extensions by a proxy.
#[derive(Clone, Debug)]
pub struct UpstreamInfo {
    pub addr: http::uri::Authority,
    pub time: Duration,
}

/// What a response cache did for a request, put in the response's extensions by
/// [`cache`](crate::cache) for the access log's `$cache_status` (nginx's
/// `$upstream_cache_status` words).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CacheStatus {
    /// Served from a fresh stored response.
    Hit,
    /// Fetched from the upstream (and stored, if it was storable).
    Miss,
    /// A stale stored response served: while it is refreshed, or because the upstream
    /// failed.
    Stale,
    /// A stale stored response the upstream confirmed with a 304.
    Revalidated,
    /// Not looked up: a method or request the cache does not answer.
    Bypass,
}

impl CacheStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheStatus::Hit => "HIT",
            CacheStatus::Miss => "MISS",
            CacheStatus::Stale => "STALE",
            CacheStatus::Revalidated => "REVALIDATED",
            CacheStatus::Bypass => "BYPASS",
        }
    }
}
