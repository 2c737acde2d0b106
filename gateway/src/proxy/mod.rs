//! The reverse proxy Service: a route's requests go to a pool of upstreams over pooled
//! keep-alive connections, bodies streaming both ways.
//!
//! - Selection ([`balance`]): weighted round robin, least requests (power of two choices),
//!   or a consistent hash of the client IP, a header or a cookie.
//! - Health ([`health`]): passive (consecutive failures that are the upstream's fault, not
//!   a client's stalled upload, eject an upstream for a cooldown, unless it is the route's
//!   last available one) and active (a periodic request to a health path). With every
//!   upstream out, they are tried anyway, as nginx does.
//! - Headers ([`headers`]): hop-by-hop fields removed both ways, `Via` added, and the
//!   client's address passed on in `X-Forwarded-For` (appended to a trusted proxy's chain,
//!   replacing an untrusted client's claim), `X-Forwarded-Proto`, `X-Forwarded-Host` and,
//!   when asked, `Forwarded`.
//! - Failures: refused or reset → 502, no response head in time → 504 (408 when it was
//!   the client's upload that stalled), each with a short body naming no upstream. An
//!   idempotent request with no body that could not be sent at all (the connection
//!   failed) is tried on the next upstream.
//!
//! The files: this one holds [`Proxy`] and its Service; `client` hyper-util's clients
//! and TLS; `request` readies a request (its body, the forwarding fields);
//! `attempt` picks upstreams and runs the attempts, retries and timeouts; `upgrade`
//! the WebSocket tunnel; `body` the response bodies; `h1` the own HTTP/1.1 client and
//! `pool` its connections.

pub mod balance;
mod h1;
/// gatehouse's own HTTP/1.1 client reading a response from bytes, for the fuzz target.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub use h1::fuzzing as h1_fuzzing;
mod attempt;
mod body;
mod client;
pub mod error;
pub mod headers;
pub mod health;
mod pool;
mod request;
mod upgrade;

use attempt::*;
use body::*;
pub use body::{BodyIdle, ProxyBody, UpstreamBody};
use client::*;
pub use error::{ErrorKind, ProxyError};
use request::*;
pub use request::{Progress, ReqBody};
use upgrade::*;

use crate::http_util::plain;
use balance::{HashOn, Selector, Upstream};
use bytes::Bytes;
use gatehouse_config::{Policy, ProxyConfig};
use gatehouse_layers::access_log::UpstreamInfo;
use health::Passive;
use http::header::{CONNECTION, CONTENT_LENGTH, COOKIE, HOST, UPGRADE};
use http::uri::{PathAndQuery, Scheme};
use http::{HeaderValue, Method, Request, Response, StatusCode, Uri};
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What the proxy needs to know about the client's connection. gatehouse's server puts
/// one in every request's extensions; an app that serves the proxy or the router itself
/// may insert one to say the request came over HTTPS.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConnInfo {
    pub peer: Option<SocketAddr>,
    pub https: bool,
}

impl ConnInfo {
    /// Puts the connection into `req`'s extensions as a Service under `gatehouse::serve`
    /// (or a mounted app) reads it: itself, axum's `ConnectInfo<SocketAddr>`, and
    /// gatehouse-layers' `ClientAddr` (what its layers read first) and `Https`.
    pub(crate) fn insert_into<B>(self, req: &mut Request<B>) {
        let ext = req.extensions_mut();
        if let Some(peer) = self.peer {
            ext.insert(axum::extract::ConnectInfo(peer));
            ext.insert(gatehouse_layers::client::ClientAddr(peer));
        }
        ext.insert(gatehouse_layers::client::Https(self.https));
        ext.insert(self);
    }

    /// The connection of a request served by someone else's server: its [`ConnInfo`]
    /// extension, with the peer taken from axum's `ConnectInfo<SocketAddr>` when the
    /// extension names none.
    pub fn of<B>(req: &Request<B>) -> ConnInfo {
        let mut conn = req
            .extensions()
            .get::<ConnInfo>()
            .copied()
            .unwrap_or_default();
        if conn.peer.is_none() {
            conn.peer = req
                .extensions()
                .get::<axum::extract::ConnectInfo<SocketAddr>>()
                .map(|c| c.0);
        }
        conn
    }
}

/// The proxy as a tower Service, say mounted with axum's `nest_service`: the client's
/// connection is read with [`ConnInfo::of`].
impl<B> tower_service::Service<Request<B>> for Proxy
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = ProxyFuture;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> ProxyFuture {
        let conn = ConnInfo::of(&req);
        self.serve(req, conn)
    }
}

/// One worker's pools, by upstream: `None` for an upstream hyper-util's client reaches.
type WorkerPools = Box<[Option<Arc<pool::Pool>>]>;

/// A route's proxy. Cheap to clone.
#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

struct Inner {
    /// When, in [`health::now_ms`] tens of seconds, a connection that failed for want of
    /// this process's own descriptors or ports was last logged: once per 10 s.
    shortage_logged: AtomicU64,
    upstreams: Vec<Arc<Upstream>>,
    selector: Selector,
    /// One client (and so one connection pool) per worker slot: in `per-core` mode each
    /// runtime uses the pool whose connections its own tasks drive, so a proxied request
    /// never wakes another thread.
    clients: Box<[Client]>,
    /// Per worker slot, per upstream: the pools for `http://` upstreams over HTTP/1.1
    /// (empty when the route speaks HTTP/2 to its upstreams).
    pools: Box<[WorkerPools]>,
    passive: Passive,
    keep_host: bool,
    /// Lower-case protocol names (`websocket`) a client may upgrade to; never `h2c`.
    upgrades: Box<[Box<str>]>,
    max_body: u64,
    response_timeout: Duration,
    body_idle: Duration,
    retries: u32,
    trusted: headers::Trusted,
    /// The client-address fields (`X-Real-IP`…) the route's header rules set: sent as
    /// set, where a client's own are dropped.
    route_claims: u16,
    forwarded: bool,
    health_check: Option<gatehouse_config::HealthCheckConfig>,
    /// Set when a reload replaced this proxy: its health checks stop.
    retired: Arc<std::sync::atomic::AtomicBool>,
    checks_started: std::sync::atomic::AtomicBool,
    http2: bool,
    /// Put which upstream answered, and how fast, in the response (for an access log).
    upstream_info: bool,
}

pub type ProxyFuture =
    Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, Infallible>> + Send>>;

impl Proxy {
    /// The proxy for a validated `[routes.proxy]` table.
    /// Records the upstream and its response time in each response's extensions.
    pub fn with_upstream_info(mut self) -> Proxy {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.upstream_info = true;
        }
        self
    }

    /// Sends these fields as the route's header rules set them, where the proxy drops a
    /// client's own claim of its address (`X-Real-IP`, `True-Client-IP`, `X-Client-IP`).
    pub fn keeping_fields<'a>(
        mut self,
        names: impl IntoIterator<Item = &'a http::HeaderName>,
    ) -> Proxy {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.route_claims = headers::claims_set(names);
        }
        self
    }

    /// For a cache in front of a proxy that trusts proxies (whose key then holds the
    /// forwarding fields, see `router::cache_layer`): takes off what a peer it does not
    /// trust claimed in them, which the proxy would replace or drop anyway. Kept, such a
    /// claim filed the upstream's answer to the real request under another request's key
    /// (`X-Forwarded-Proto: https` over plain HTTP stored a redirect to https for the
    /// trusted load balancer's https clients; found in review).
    pub(crate) fn drop_untrusted_claims<B>(
        &self,
        req: &mut http::Request<B>,
        peer: Option<IpAddr>,
    ) {
        let trusted = &self.inner.trusted;
        if trusted.is_empty() || peer.is_some_and(|p| trusted.contains(p)) {
            return;
        }
        headers::drop_forwarding(req.headers_mut(), self.inner.route_claims);
    }

    pub fn new(cfg: &ProxyConfig) -> std::io::Result<Proxy> {
        Proxy::with_slots(cfg, 1)
    }

    /// The proxy with one connection pool per worker slot ([`crate::rt::worker_slot`]).
    pub fn with_slots(cfg: &ProxyConfig, slots: usize) -> std::io::Result<Proxy> {
        let mut upstreams = Vec::new();
        for u in &cfg.upstreams {
            let uri: Uri = u.url.parse().map_err(std::io::Error::other)?;
            let authority = uri
                .authority()
                .cloned()
                .ok_or_else(|| std::io::Error::other(format!("{}: no host", u.url)))?;
            let scheme = uri.scheme().cloned().unwrap_or(Scheme::HTTP);
            upstreams.push(Arc::new(Upstream::new(scheme, authority, u.weight)));
        }
        let selector = match cfg.policy {
            Policy::RoundRobin => Selector::round_robin(&upstreams),
            Policy::LeastRequests => Selector::LeastRequests,
            Policy::Hash => Selector::hash(
                &upstreams,
                HashOn::parse(&cfg.hash_on).unwrap_or(HashOn::ClientIp),
            ),
        };
        let slots = slots.max(1);
        let tls = tls_config(cfg)?;
        let clients = (0..slots).map(|_| client(cfg, tls.clone())).collect();
        let settings = pool::Settings {
            connect_timeout: cfg.connect_timeout,
            idle_timeout: cfg.pool_idle_timeout,
            max_idle: cfg.pool_max_idle,
            max_buf: max_buf(cfg),
        };
        let pools = if cfg.http2 {
            Box::default()
        } else {
            (0..slots)
                .map(|_| {
                    upstreams
                        .iter()
                        .map(|u| {
                            (u.scheme == Scheme::HTTP).then(|| Arc::new(pool::Pool::new(settings)))
                        })
                        .collect()
                })
                .collect()
        };
        Ok(Proxy {
            inner: Arc::new(Inner {
                upstreams,
                selector,
                clients,
                pools,
                passive: Passive {
                    max_fails: cfg.max_fails,
                    fail_timeout: cfg.fail_timeout,
                },
                keep_host: cfg.keep_host,
                upgrades: cfg
                    .upgrades
                    .iter()
                    .map(|u| u.to_ascii_lowercase().into_boxed_str())
                    .filter(|u| &**u != "h2c" && !u.starts_with("h2c/"))
                    .collect(),
                max_body: cfg.max_body_bytes,
                response_timeout: cfg.response_timeout,
                upstream_info: false,
                body_idle: cfg.body_idle_timeout,
                shortage_logged: AtomicU64::new(u64::MAX),
                retries: cfg.retries,
                trusted: headers::trusted(&cfg.trusted_proxies),
                route_claims: 0,
                forwarded: cfg.forwarded,
                health_check: cfg.health_check.clone(),
                retired: Arc::new(std::sync::atomic::AtomicBool::new(false)),
                checks_started: std::sync::atomic::AtomicBool::new(false),
                http2: cfg.http2,
            }),
        })
    }

    /// The upstreams, in configuration order (their live state, for tests and metrics).
    pub fn upstreams(&self) -> &[Arc<Upstream>] {
        &self.inner.upstreams
    }

    /// Starts the active health checks, if configured, on the current runtime.
    pub fn spawn_health_checks(&self) {
        // Once per pool, whoever asks first (the server's start or a reload).
        if self.inner.checks_started.swap(true, Ordering::Relaxed) {
            return;
        }
        if let Some(cfg) = &self.inner.health_check {
            let ups = self.inner.upstreams.clone();
            let client = self.inner.clients[0].clone();
            let retired = self.inner.retired.clone();
            tokio::spawn(health::run_checks(ups, client, cfg.clone(), retired));
        }
    }

    /// Stops this proxy's background work (it was replaced by a reload).
    pub fn retire(&self) {
        self.inner.retired.store(true, Ordering::Relaxed);
    }

    pub fn serve<B>(&self, req: Request<B>, conn: ConnInfo) -> ProxyFuture
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        use futures_util::FutureExt;
        let (mut parts, body) = req.into_parts();
        let inner = &self.inner;
        let pools = inner.h1_pools();
        let mut prep = match inner.prepare(&mut parts, body.is_end_stream(), conn, pools.is_some())
        {
            Ok(prep) => prep,
            Err(r) => return Box::pin(std::future::ready(Ok(r.response()))),
        };
        if let Some(pools) = pools.filter(|_| prep.bare()) {
            // Decided and encoded here, in the call: see `h1::Outgoing`.
            return match inner.start_bare(pools, &mut parts, prep) {
                Ok(bare) => Box::pin(inner.clone().forward_bare(bare).map(Ok)),
                Err(r) => Box::pin(std::future::ready(Ok(r.response()))),
            };
        }
        if let Some(f) = prep.fwd.take() {
            f.apply(&mut parts.headers);
        }
        let body = if body.is_end_stream() {
            ReqBody::Empty
        } else if inner.max_body > 0 {
            ReqBody::Boxed(axum::body::Body::new(Limited::new(
                body,
                inner.max_body as usize,
            )))
        } else {
            ReqBody::Boxed(axum::body::Body::new(body.map_err(Into::into)))
        };
        Box::pin(inner.clone().forward(parts, body, prep).map(Ok))
    }
}

impl Inner {
    /// This worker's client; a slot past the pools built (a reload that changed nothing
    /// yet, or a thread that is no worker) shares the first.
    fn client(&self) -> &Client {
        let slot = crate::rt::worker_slot();
        self.clients.get(slot).unwrap_or(&self.clients[0])
    }

    /// The pool for upstream `i` on this worker, when it is reached over plain HTTP/1.1.
    fn pool(&self, i: usize) -> Option<&Arc<pool::Pool>> {
        let slot = crate::rt::worker_slot();
        let pools = self.pools.get(slot).or_else(|| self.pools.first())?;
        pools.get(i)?.as_ref()
    }

    /// This worker's pools when every upstream has one (all are `http://` upstreams spoken
    /// to over HTTP/1.1): then a simple request never needs hyper's client.
    fn h1_pools(&self) -> Option<&[Option<Arc<pool::Pool>>]> {
        let slot = crate::rt::worker_slot();
        let pools = self.pools.get(slot).or_else(|| self.pools.first())?;
        pools.iter().all(Option::is_some).then_some(&pools[..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// least_requests reads the counts as it picks: a request is counted from its pick,
    /// in the call, not from its future's first poll, so that a burst of requests called
    /// before any is polled (HTTP/2 streams) sees the earlier ones.
    #[test]
    fn least_requests_counts_a_request_from_its_pick() {
        let up = |url: &str| gatehouse_config::UpstreamConfig {
            url: url.into(),
            weight: 1,
        };
        let cfg = ProxyConfig {
            upstreams: vec![up("http://127.0.0.1:9"), up("http://127.0.0.1:10")],
            policy: Policy::LeastRequests,
            ..ProxyConfig::default()
        };
        let proxy = Proxy::new(&cfg).expect("proxy");
        let call = || {
            let req = Request::new(http_body_util::Empty::<Bytes>::new());
            proxy.serve(req, ConnInfo::default())
        };
        let counts = || -> Vec<u32> { proxy.upstreams().iter().map(|u| u.in_flight()).collect() };
        let (a, b) = (call(), call());
        assert_eq!(counts().iter().sum::<u32>(), 2, "{:?}", counts());
        // The second pick saw the first: one each.
        assert_eq!(counts(), [1, 1]);
        drop((a, b));
        assert_eq!(
            counts(),
            [0, 0],
            "a future dropped unpolled uncounts its request"
        );
    }

    /// The common request's future is boxed once per request: kept within glibc's
    /// per-thread cache (chunks up to 1032 bytes), its allocation takes no lock and no
    /// bin search, and what is moved into the box stays small.
    #[test]
    fn the_bare_exchange_fits_a_small_allocation() {
        let cfg = ProxyConfig {
            upstreams: vec![gatehouse_config::UpstreamConfig {
                url: "http://127.0.0.1:9".into(),
                weight: 1,
            }],
            ..ProxyConfig::default()
        };
        let proxy = Proxy::new(&cfg).expect("proxy");
        let (mut parts, ()) = Request::new(()).into_parts();
        let prep = Prepared {
            client_upgrade: None,
            client_host: None,
            key: None,
            replayable: true,
            fwd: None,
        };
        let pools = proxy.inner.h1_pools().expect("an http upstream has a pool");
        let Ok(bare) = proxy.inner.start_bare(pools, &mut parts, prep) else {
            panic!("the upstream is available");
        };
        let fut = proxy.inner.clone().forward_bare(bare);
        let size = std::mem::size_of_val(&fut);
        assert!(size <= 1000, "forward_bare's future is {size} bytes");
    }

    fn two_slot_proxy() -> Proxy {
        let up = |url: &str| gatehouse_config::UpstreamConfig {
            url: url.into(),
            weight: 1,
        };
        let cfg = ProxyConfig {
            upstreams: vec![up("http://127.0.0.1:9"), up("https://127.0.0.1:9")],
            ..ProxyConfig::default()
        };
        Proxy::with_slots(&cfg, 2).expect("proxy")
    }

    /// On a thread running worker `slot`: which client, and which pool for upstream 0, and
    /// whether upstream 1 (https) has a pool.
    fn picked(proxy: &Proxy, slot: usize) -> (Option<usize>, Option<usize>, bool) {
        let inner = proxy.inner.clone();
        std::thread::spawn(move || {
            crate::rt::set_worker_slot(slot);
            let c = inner.client();
            let client = inner.clients.iter().position(|x| std::ptr::eq(x, c));
            let p = inner.pool(0).expect("a pool for http://");
            let pool = inner
                .pools
                .iter()
                .position(|ps| ps[0].as_ref().is_some_and(|x| Arc::ptr_eq(x, p)));
            (client, pool, inner.pool(1).is_some())
        })
        .join()
        .expect("thread")
    }

    #[test]
    fn each_worker_takes_its_own_pool() {
        let proxy = two_slot_proxy();
        assert_eq!(proxy.inner.clients.len(), 2);
        assert_eq!(picked(&proxy, 0), (Some(0), Some(0), false));
        assert_eq!(picked(&proxy, 1), (Some(1), Some(1), false));
        // A runtime the proxy has no pool for (the config reloaded to fewer) shares the first.
        assert_eq!(picked(&proxy, 7), (Some(0), Some(0), false));
    }
}
