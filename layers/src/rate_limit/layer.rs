use super::{RateLimit, RateLimiter};
use http::request::Parts;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use tower_layer::Layer;

/// What a request is limited by: its bucket's key, or `None` to let it through uncounted.
pub(crate) type KeyFn = Arc<dyn Fn(&Parts) -> Option<IpAddr> + Send + Sync>;

/// Limits each client to a [`RateLimiter`]'s rate. See the [module docs](super).
#[derive(Clone)]
pub struct RateLimitLayer {
    limiter: RateLimiter,
    key: KeyFn,
}

impl fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("limiter", &self.limiter)
            .finish_non_exhaustive()
    }
}

impl RateLimitLayer {
    /// Limits by the client's address (see [`client_addr`](crate::client::client_addr)).
    pub fn new(limiter: RateLimiter) -> Self {
        Self::with_key(limiter, |parts: &Parts| {
            crate::client::client_addr_in(&parts.extensions).map(|a| a.ip())
        })
    }

    /// Limits by the address `key` gives for a request, such as the client behind a
    /// trusted proxy ([`cidr::client_ip`](crate::cidr::client_ip)). A request it gives
    /// `None` for is not limited, as with [`new`](Self::new).
    pub fn with_key<F>(limiter: RateLimiter, key: F) -> Self
    where
        F: Fn(&Parts) -> Option<IpAddr> + Send + Sync + 'static,
    {
        RateLimitLayer {
            limiter,
            key: Arc::new(key),
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            limiter: self.limiter.clone(),
            key: self.key.clone(),
        }
    }
}
