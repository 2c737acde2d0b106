//! A rate limit per client address: a token bucket for each, refilled at `rate` requests
//! a second up to `burst`. A request finding its bucket empty gets 429 Too Many Requests
//! (RFC 6585 §4) with `Retry-After` (RFC 9110 §10.2.3) in whole seconds, and never
//! reaches the Service.
//!
//! IPv6 clients are limited by their /64, the block one host is usually given, so that a
//! client can't escape its limit by changing addresses within it. The buckets live in 16
//! lock-sharded maps; a full bucket is the same as none, so when a shard grows past its
//! share of `max_clients` the full ones are dropped, and if that isn't enough (a flood of
//! distinct addresses) half the shard is: memory stays bounded, at the price of those
//! clients starting again from a full bucket.
//!
//! ```
//! use axum::{routing::get, Router};
//! use gatehouse_layers::rate_limit::{RateLimitLayer, RateLimiter};
//!
//! // 10 requests a second per client, bursts of 20.
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::new(RateLimiter::new(10.0, 20)));
//! # let _ = app;
//! ```
//!
//! A client is known by [`client_addr`](crate::client::client_addr): a
//! [`ClientAddr`](crate::client::ClientAddr) request extension, else axum's
//! `ConnectInfo<SocketAddr>` (serve the app with
//! `into_make_service_with_connect_info::<SocketAddr>()`). Behind a proxy, give
//! [`RateLimitLayer::with_key`] a function that finds the client some other way.
//!
//! A request with no address is not limited, as nginx's `limit_req` doesn't count a request
//! whose key is empty: one bucket for all of them would let one client starve every other.
//! That is never silent: the first such request is logged as a warning, and
//! [`RateLimiter::unkeyed`] counts them.

mod layer;
mod service;

pub use crate::answer::ResponseFuture;
pub use layer::RateLimitLayer;
pub use service::RateLimit;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SHARDS: usize = 16;

/// Token buckets by client address. Cheap to clone; clones share the buckets.
#[derive(Clone)]
pub struct RateLimiter {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimiter")
            .field("rate", &self.inner.rate)
            .field("burst", &self.inner.burst)
            .finish()
    }
}

struct Inner {
    /// Tokens a millisecond.
    per_ms: f64,
    rate: f64,
    burst: f64,
    epoch: Instant,
    per_shard: usize,
    shards: [Mutex<HashMap<IpAddr, Bucket>>; SHARDS],
    unkeyed: AtomicU64,
}

#[derive(Clone, Copy)]
struct Bucket {
    tokens: f64,
    at_ms: u64,
}

impl RateLimiter {
    /// `rate` requests a second (more than 0), bursts of `burst` (at least 1), for up to
    /// 100,000 clients tracked at once.
    pub fn new(rate: f64, burst: u32) -> RateLimiter {
        Self::with_capacity(rate, burst, 100_000)
    }

    pub fn with_capacity(rate: f64, burst: u32, max_clients: usize) -> RateLimiter {
        let rate = if rate.is_finite() && rate > 0.0 {
            rate
        } else {
            1.0
        };
        RateLimiter {
            inner: Arc::new(Inner {
                per_ms: rate / 1000.0,
                rate,
                burst: f64::from(burst.max(1)),
                epoch: Instant::now(),
                per_shard: (max_clients / SHARDS).max(16),
                shards: std::array::from_fn(|_| Mutex::new(HashMap::new())),
                unkeyed: AtomicU64::new(0),
            }),
        }
    }

    /// Takes a token for `client`: `Err` with how long until one is there when the bucket
    /// is empty.
    pub fn check(&self, client: IpAddr) -> Result<(), Duration> {
        let i = &self.inner;
        let key = bucket_key(client);
        let now = i.epoch.elapsed().as_millis() as u64;
        let mut shard = i.shards[shard_of(key)]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if shard.len() >= i.per_shard && !shard.contains_key(&key) {
            let (burst, per_ms) = (i.burst, i.per_ms);
            // `now` was read before the lock: another thread may have stamped a bucket
            // later since.
            shard.retain(|_, b| b.tokens + now.saturating_sub(b.at_ms) as f64 * per_ms < burst);
            if shard.len() >= i.per_shard {
                // A flood of distinct clients: forget half, in no order (amortised O(1)
                // per new client; those forgotten start again with a full bucket).
                let mut keep = i.per_shard / 2;
                shard.retain(|_, _| {
                    keep = keep.saturating_sub(1);
                    keep > 0
                });
            }
        }
        let b = shard.entry(key).or_insert(Bucket {
            tokens: i.burst,
            at_ms: now,
        });
        b.tokens = (b.tokens + now.saturating_sub(b.at_ms) as f64 * i.per_ms).min(i.burst);
        // Never back in time: another thread may have stamped it after `now` was read.
        b.at_ms = b.at_ms.max(now);
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - b.tokens) / i.rate))
        }
    }
}

impl RateLimiter {
    /// Requests [`RateLimit`] let through unlimited because it found no key for them.
    pub fn unkeyed(&self) -> u64 {
        self.inner.unkeyed.load(Ordering::Relaxed)
    }

    fn pass_unkeyed(&self) {
        if self.inner.unkeyed.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::warn!(
                "rate limit: a request with no client address (no ClientAddr or ConnectInfo \
                 extension) is not limited; pass the address, or use RateLimitLayer::with_key"
            );
        }
    }
}

/// The address a client is limited by: an IPv6 client by its /64.
fn bucket_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
        v4 => v4,
    }
}

fn shard_of(ip: IpAddr) -> usize {
    let folded = match ip {
        IpAddr::V4(v4) => u32::from(v4) as u64,
        IpAddr::V6(v6) => {
            let b = u128::from(v6);
            (b >> 64) as u64 ^ b as u64
        }
    };
    // Multiplicative hash: neighbouring addresses land in different shards.
    (folded.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize % SHARDS
}

/// 429 with `Retry-After` in whole seconds, at least 1.
pub fn too_many_requests(wait: Duration) -> http::Response<bytes::Bytes> {
    let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
    let mut res = crate::text_response(http::StatusCode::TOO_MANY_REQUESTS, "too many requests\n");
    res.headers_mut()
        .insert(http::header::RETRY_AFTER, http::HeaderValue::from(secs));
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_shard_stamped_after_now_does_not_overflow() {
        // As when other threads stamp buckets between this one's clock read and its lock.
        let l = RateLimiter::with_capacity(1.0, 1, 16 * SHARDS);
        let new: IpAddr = "192.0.2.200".parse().unwrap();
        let shard = shard_of(bucket_key(new));
        {
            let mut s = l.inner.shards[shard].lock().unwrap();
            let mut n = 0u32;
            while s.len() < l.inner.per_shard {
                let ip = IpAddr::from([10, (n >> 16) as u8, (n >> 8) as u8, n as u8]);
                n += 1;
                if shard_of(bucket_key(ip)) == shard {
                    s.insert(
                        bucket_key(ip),
                        Bucket {
                            tokens: 0.0,
                            at_ms: u64::MAX / 2,
                        },
                    );
                }
            }
        }
        assert!(l.check(new).is_ok());
    }

    #[test]
    fn a_burst_then_the_rate() {
        let l = RateLimiter::new(2.0, 3);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        for _ in 0..3 {
            assert!(l.check(a).is_ok());
        }
        let wait = l.check(a).unwrap_err();
        assert!(
            wait <= Duration::from_millis(500) && wait > Duration::ZERO,
            "{wait:?}"
        );
        // Another client has its own bucket.
        assert!(l.check("192.0.2.2".parse().unwrap()).is_ok());
        std::thread::sleep(Duration::from_millis(550));
        assert!(l.check(a).is_ok(), "refilled at 2/s");
        assert!(l.check(a).is_err());
    }

    #[test]
    fn an_ipv6_client_is_limited_by_its_64() {
        let l = RateLimiter::new(1.0, 1);
        assert!(l.check("2001:db8:1:2::1".parse().unwrap()).is_ok());
        assert!(l.check("2001:db8:1:2::ffff".parse().unwrap()).is_err());
        assert!(l.check("2001:db8:1:3::1".parse().unwrap()).is_ok());
        // An IPv4-mapped address is its IPv4 address.
        assert!(l.check("198.51.100.7".parse().unwrap()).is_ok());
        assert!(l.check("::ffff:198.51.100.7".parse().unwrap()).is_err());
    }

    #[test]
    fn the_map_stays_bounded() {
        let l = RateLimiter::with_capacity(1000.0, 5, 16 * 16);
        for n in 0..10_000u32 {
            let _ = l.check(IpAddr::from(n.to_be_bytes()));
        }
        std::thread::sleep(Duration::from_millis(20));
        let _ = l.check("203.0.113.9".parse().unwrap());
        let held: usize = l.inner.shards.iter().map(|s| s.lock().unwrap().len()).sum();
        assert!(held <= 16 * 16 + 16, "{held} buckets held");
    }

    #[test]
    fn retry_after_is_whole_seconds() {
        let r = too_many_requests(Duration::from_millis(200));
        assert_eq!(r.status(), 429);
        assert_eq!(r.headers()["retry-after"], "1");
        assert_eq!(
            too_many_requests(Duration::from_millis(2100)).headers()["retry-after"],
            "3"
        );
    }
}
