//! Upstreams and how one is chosen: selection only. Whether an upstream may be chosen is
//! its health's business ([`super::health`]).

use http::uri::{Authority, Scheme};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// One upstream server and its live state.
#[derive(Debug)]
pub struct Upstream {
    pub scheme: Scheme,
    pub authority: Authority,
    /// `Host` for a request to this upstream, made once rather than per request.
    pub(crate) host: Option<http::HeaderValue>,
    pub weight: u32,
    /// Requests sent and not yet answered in full: counted only under least_requests,
    /// which reads it.
    pub(crate) in_flight: AtomicU32,
    /// Passive health: consecutive failures, and until when (ms on [`super::health::now_ms`])
    /// the upstream is ejected.
    pub(crate) fails: AtomicU32,
    pub(crate) down_until: AtomicU64,
    /// Active health: taken out by the checker.
    pub(crate) check_down: AtomicBool,
    pub(crate) check_streak: AtomicU32,
    pub(crate) metrics: UpstreamMetrics,
}

/// An upstream's metric handles, labelled with its address once, when it is made.
#[derive(Debug)]
pub(crate) struct UpstreamMetrics {
    pub(crate) requests: &'static gatehouse_layers::metrics::ShardedCounter,
    pub(crate) failures: metrics::Counter,
    pub(crate) response: &'static gatehouse_layers::metrics::LatencyHistogram,
    pub(crate) ejections: metrics::Counter,
}

impl UpstreamMetrics {
    fn new(authority: &Authority) -> UpstreamMetrics {
        let labels = [("upstream", authority.to_string())];
        UpstreamMetrics {
            requests: gatehouse_layers::metrics::sharded_counter(
                "gatehouse_upstream_requests_total",
                "upstream",
                &labels[0].1,
            ),
            failures: metrics::counter!("gatehouse_upstream_failures_total", &labels),
            response: gatehouse_layers::metrics::latency_histogram(
                "gatehouse_upstream_response_seconds",
                "Time from sending a request upstream to its response head.",
                "upstream",
                &labels[0].1,
            ),
            ejections: metrics::counter!("gatehouse_upstream_ejections_total", &labels),
        }
    }
}

impl Upstream {
    pub fn new(scheme: Scheme, authority: Authority, weight: u32) -> Upstream {
        let metrics = UpstreamMetrics::new(&authority);
        Upstream {
            scheme,
            host: http::HeaderValue::from_str(authority.as_str()).ok(),
            authority,
            weight: weight.max(1),
            in_flight: AtomicU32::new(0),
            fails: AtomicU32::new(0),
            down_until: AtomicU64::new(0),
            check_down: AtomicBool::new(false),
            check_streak: AtomicU32::new(0),
            metrics,
        }
    }

    pub fn available(&self, now_ms: u64) -> bool {
        !self.check_down.load(Ordering::Relaxed)
            && self.down_until.load(Ordering::Relaxed) <= now_ms
    }

    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }
}

/// What `policy = "hash"` hashes.
#[derive(Debug, Clone)]
pub enum HashOn {
    ClientIp,
    Header(http::HeaderName),
    Cookie(String),
}

impl HashOn {
    pub fn parse(s: &str) -> Option<HashOn> {
        if s == "client_ip" {
            return Some(HashOn::ClientIp);
        }
        if let Some(h) = s.strip_prefix("header:") {
            return http::HeaderName::from_bytes(h.as_bytes())
                .ok()
                .map(HashOn::Header);
        }
        s.strip_prefix("cookie:")
            .filter(|c| !c.is_empty())
            .map(|c| HashOn::Cookie(c.to_owned()))
    }
}

#[derive(Debug)]
pub enum Selector {
    /// The smooth weighted order (as nginx's), computed once, walked by an atomic counter.
    RoundRobin {
        order: Vec<usize>,
        next: AtomicUsize,
    },
    /// Power of two choices on requests in flight, relative to weight.
    LeastRequests,
    /// A consistent-hash ring: 100 points per unit of weight.
    Hash {
        ring: Vec<(u64, usize)>,
        on: HashOn,
        fallback: Box<Selector>,
    },
}

impl Selector {
    pub fn round_robin(ups: &[Arc<Upstream>]) -> Selector {
        let total: i64 = ups.iter().map(|u| u.weight as i64).sum();
        let mut current = vec![0i64; ups.len()];
        let mut order = Vec::with_capacity(total as usize);
        for _ in 0..total {
            for (c, u) in current.iter_mut().zip(ups) {
                *c += u.weight as i64;
            }
            let Some((best, _)) = current
                .iter()
                .enumerate()
                .max_by_key(|&(i, c)| (*c, -(i as i64)))
            else {
                break;
            };
            current[best] -= total;
            order.push(best);
        }
        Selector::RoundRobin {
            order,
            next: AtomicUsize::new(0),
        }
    }

    pub fn hash(ups: &[Arc<Upstream>], on: HashOn) -> Selector {
        let mut ring = Vec::new();
        for (i, u) in ups.iter().enumerate() {
            for v in 0..(100 * u.weight) {
                let point = fnv1a(format!("{}#{v}", u.authority).as_bytes());
                ring.push((point, i));
            }
        }
        ring.sort_unstable();
        Selector::Hash {
            ring,
            on,
            fallback: Box::new(Selector::round_robin(ups)),
        }
    }

    /// An upstream not in `tried`, available if any is; `key` is the hash key (the hash
    /// policy falls back to round robin without one).
    ///
    /// Availability is a preference, not a ban: when every untried upstream is marked down
    /// (passively or by the health checks) they are tried anyway, in the policy's order, as
    /// nginx does ("no live upstreams" resets the marks). A mark can be stale (the upstream
    /// came back before its `fail_timeout` ran out) and a route with nowhere else to go is
    /// better served by trying than by a 503 to everyone.
    pub fn pick(
        &self,
        ups: &[Arc<Upstream>],
        now_ms: u64,
        tried: &[usize],
        key: Option<u64>,
    ) -> Option<usize> {
        let untried = |i: usize| !tried.contains(&i);
        let ok = |i: usize| ups[i].available(now_ms) && untried(i);
        match self {
            Selector::RoundRobin { order, next } => {
                if order.is_empty() {
                    return None;
                }
                // One upstream: nothing to rotate, no shared count to write, and nothing to
                // prefer it to.
                if ups.len() == 1 {
                    return untried(0).then_some(0);
                }
                let start = next.fetch_add(1, Ordering::Relaxed);
                let at = |k: usize| order[(start + k) % order.len()];
                (0..order.len())
                    .map(at)
                    .find(|&i| ok(i))
                    .or_else(|| (0..order.len()).map(at).find(|&i| untried(i)))
            }
            Selector::LeastRequests => {
                let mut live: Vec<usize> = (0..ups.len()).filter(|&i| ok(i)).collect();
                if live.is_empty() {
                    live = (0..ups.len()).filter(|&i| untried(i)).collect();
                }
                match live.len() {
                    0 => None,
                    1 => Some(live[0]),
                    n => {
                        let a = live[rand_below(n)];
                        let mut b = live[rand_below(n - 1)];
                        if b == a {
                            b = live[n - 1];
                        }
                        // in_flight / weight, compared without division.
                        let load =
                            |i: usize| ups[i].in_flight() as u64 * 1000 / ups[i].weight as u64;
                        Some(if load(b) < load(a) { b } else { a })
                    }
                }
            }
            Selector::Hash { ring, fallback, .. } => {
                let Some(h) = key else {
                    return fallback.pick(ups, now_ms, tried, None);
                };
                if ring.is_empty() {
                    return None;
                }
                let start = ring.partition_point(|&(p, _)| p < h);
                let at = |k: usize| ring[(start + k) % ring.len()].1;
                (0..ring.len())
                    .map(at)
                    .find(|&i| ok(i))
                    .or_else(|| (0..ring.len()).map(at).find(|&i| untried(i)))
            }
        }
    }
}

/// FNV-1a: stable across processes and restarts, so a key maps to the same upstream on
/// every gatehouse in front of a pool.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    // A final mix, so that nearby keys spread over the ring.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51afd7ed558ccd);
    h ^= h >> 33;
    h
}

fn rand_below(n: usize) -> usize {
    use std::cell::Cell;
    thread_local! {
        static STATE: Cell<u64> = Cell::new({
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0x9e3779b97f4a7c15, |d| d.as_nanos() as u64);
            t | 1
        });
    }
    STATE.with(|s| {
        // xorshift64*
        let mut x = s.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        (x.wrapping_mul(0x2545f4914f6cdd1d) >> 33) as usize % n.max(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ups(weights: &[u32]) -> Vec<Arc<Upstream>> {
        weights
            .iter()
            .enumerate()
            .map(|(i, &w)| {
                Arc::new(Upstream::new(
                    Scheme::HTTP,
                    format!("10.0.0.{i}:80").parse().unwrap(),
                    w,
                ))
            })
            .collect()
    }

    #[test]
    fn round_robin_is_smooth_and_weighted() {
        let u = ups(&[5, 1, 1]);
        let s = Selector::round_robin(&u);
        let picks: Vec<usize> = (0..7).map(|_| s.pick(&u, 0, &[], None).unwrap()).collect();
        assert_eq!(picks, [0, 0, 1, 0, 2, 0, 0]);
    }

    #[test]
    fn unavailable_and_tried_are_skipped() {
        let u = ups(&[1, 1, 1]);
        let s = Selector::round_robin(&u);
        u[1].check_down.store(true, Ordering::Relaxed);
        for _ in 0..10 {
            let p = s.pick(&u, 0, &[0], None).unwrap();
            assert_eq!(p, 2);
        }
        u[2].down_until.store(100, Ordering::Relaxed);
        assert_eq!(s.pick(&u, 100, &[0], None), Some(2));
        // Every untried one down: they are tried anyway, and only the tried are skipped.
        for _ in 0..10 {
            assert!(matches!(s.pick(&u, 50, &[0], None), Some(1 | 2)));
        }
        assert_eq!(s.pick(&u, 50, &[0, 2], None), Some(1));
        assert_eq!(s.pick(&u, 50, &[0, 1, 2], None), None);
    }

    /// With every upstream marked down, each policy still picks one: round robin and the
    /// hash in the order they would with none down.
    #[test]
    fn with_every_upstream_down_each_policy_still_picks() {
        let u = ups(&[1, 1, 1]);
        let h = Selector::hash(&u, HashOn::ClientIp);
        let key = |k: u64| Some(fnv1a(&k.to_le_bytes()));
        let up: Vec<Option<usize>> = (0..100).map(|k| h.pick(&u, 0, &[], key(k))).collect();
        for x in &u[..] {
            x.check_down.store(true, Ordering::Relaxed);
        }
        let down: Vec<Option<usize>> = (0..100).map(|k| h.pick(&u, 0, &[], key(k))).collect();
        assert_eq!(up, down);
        assert!(down.iter().all(Option::is_some));
        let rr = Selector::round_robin(&u);
        let picks: Vec<Option<usize>> = (0..6).map(|_| rr.pick(&u, 0, &[], None)).collect();
        assert_eq!(
            picks,
            [Some(0), Some(1), Some(2), Some(0), Some(1), Some(2)]
        );
        assert!(Selector::LeastRequests.pick(&u, 0, &[], None).is_some());
        assert_eq!(Selector::LeastRequests.pick(&u, 0, &[0, 2], None), Some(1));
        // A route's only upstream, however long it is marked down for.
        let one = ups(&[1]);
        one[0].down_until.store(u64::MAX, Ordering::Relaxed);
        let s = Selector::round_robin(&one);
        assert_eq!(s.pick(&one, 0, &[], None), Some(0));
        assert_eq!(s.pick(&one, 0, &[0], None), None);
    }

    #[test]
    fn least_requests_prefers_the_idle() {
        let u = ups(&[1, 1]);
        u[0].in_flight.store(10, Ordering::Relaxed);
        let s = Selector::LeastRequests;
        for _ in 0..20 {
            assert_eq!(s.pick(&u, 0, &[], None), Some(1));
        }
    }

    #[test]
    fn hash_is_consistent_and_moves_few_keys() {
        let u = ups(&[1, 1, 1, 1]);
        let s = Selector::hash(&u, HashOn::ClientIp);
        let before: Vec<usize> = (0..1000u64)
            .map(|k| s.pick(&u, 0, &[], Some(fnv1a(&k.to_le_bytes()))).unwrap())
            .collect();
        let again: Vec<usize> = (0..1000u64)
            .map(|k| s.pick(&u, 0, &[], Some(fnv1a(&k.to_le_bytes()))).unwrap())
            .collect();
        assert_eq!(before, again);
        for i in 0..4 {
            let n = before.iter().filter(|&&p| p == i).count();
            assert!((150..350).contains(&n), "upstream {i}: {n} of 1000");
        }
        // Take one out: only its keys move.
        u[2].check_down.store(true, Ordering::Relaxed);
        for k in 0..1000u64 {
            let p = s.pick(&u, 0, &[], Some(fnv1a(&k.to_le_bytes()))).unwrap();
            if before[k as usize] != 2 {
                assert_eq!(p, before[k as usize]);
            } else {
                assert_ne!(p, 2);
            }
        }
    }
}
