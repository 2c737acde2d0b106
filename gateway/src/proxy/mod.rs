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

pub mod balance;
mod h1;
/// gatehouse's own HTTP/1.1 client reading a response from bytes, for the fuzz target.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub use h1::fuzzing as h1_fuzzing;
pub mod headers;
pub mod health;
mod pool;

use crate::body::GateBody;
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
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub(crate) type Client =
    hyper_util::client::legacy::Client<hyper_rustls::HttpsConnector<HttpConnector>, ReqBody>;

/// A request body on its way upstream: most requests have none, and need no box.
pub enum ReqBody {
    Empty,
    Boxed(axum::body::Body),
    /// A body whose progress is watched, to tell whose fault a failure was.
    Tracked(axum::body::Body, Arc<Progress>),
}

impl ReqBody {
    /// The body, watched when it has anything to send.
    fn tracked(self) -> (ReqBody, Option<Arc<Progress>>) {
        match self {
            ReqBody::Boxed(b) => {
                let p = Arc::new(Progress::default());
                (ReqBody::Tracked(b, p.clone()), Some(p))
            }
            other => (other, None),
        }
    }
}

/// How far a request body has gone upstream: still sending, waiting on the client for
/// more (its last poll was pending), or sent in full, and when.
#[derive(Default)]
pub struct Progress {
    state: AtomicU8,
    /// [`health::now_ms`] when the body was sent in full; written before `state` says so.
    sent_at: AtomicU64,
}

impl Progress {
    const SENDING: u8 = 0;
    const AWAITING_CLIENT: u8 = 1;
    const SENT: u8 = 2;

    fn set(&self, state: u8) {
        let was = self.state.load(Ordering::Relaxed);
        if was == state || was == Progress::SENT {
            return;
        }
        if state == Progress::SENT {
            self.sent_at.store(health::now_ms(), Ordering::Relaxed);
        }
        self.state.store(state, Ordering::Release);
    }

    fn get(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }

    /// When the body was sent in full, if it was.
    fn sent_at(&self) -> Option<u64> {
        (self.get() == Progress::SENT).then(|| self.sent_at.load(Ordering::Relaxed))
    }
}

/// Whose fault a failed attempt was. Only the upstream's count towards `max_fails`: a
/// client that stalls its upload (or that the upstream gave up on for stalling it) must
/// not be able to eject an upstream for everyone.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Blame {
    /// The upstream's: it was refused, reset, or sent a bad head, or it sent no head in
    /// time for a request sent in full.
    Upstream,
    /// The body was still being sent and the upstream not reading it: no response head
    /// in time, but the request never arrived whole. Not counted.
    Unsent,
    /// The body was waiting on the client when it failed or timed out. Not counted.
    Client,
}

impl Blame {
    /// For an attempt that timed out (`timeout`) or failed, by how far its body had got.
    fn of(progress: Option<&Progress>, timeout: bool) -> Blame {
        match progress.map(Progress::get) {
            None | Some(Progress::SENT) => Blame::Upstream,
            Some(Progress::AWAITING_CLIENT) => Blame::Client,
            // Only a response head timeout needs the request fully sent (a reset or a
            // bad head mid-upload is still the upstream's).
            Some(_) if timeout => Blame::Unsent,
            Some(_) => Blame::Upstream,
        }
    }
}

impl Body for ReqBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        match self.get_mut() {
            ReqBody::Empty => std::task::Poll::Ready(None),
            ReqBody::Boxed(b) => Pin::new(b).poll_frame(cx),
            ReqBody::Tracked(b, p) => {
                use std::task::Poll;
                let polled = Pin::new(&mut *b).poll_frame(cx);
                p.set(match &polled {
                    Poll::Pending => Progress::AWAITING_CLIENT,
                    Poll::Ready(None) => Progress::SENT,
                    Poll::Ready(Some(Ok(_))) if b.is_end_stream() => Progress::SENT,
                    Poll::Ready(Some(_)) => Progress::SENDING,
                });
                polled
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ReqBody::Empty => true,
            ReqBody::Boxed(b) => b.is_end_stream(),
            ReqBody::Tracked(b, p) => {
                let end = b.is_end_stream();
                if end {
                    p.set(Progress::SENT);
                }
                end
            }
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            ReqBody::Empty => http_body::SizeHint::with_exact(0),
            ReqBody::Boxed(b) | ReqBody::Tracked(b, _) => b.size_hint(),
        }
    }
}
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What the proxy needs to know about the client's connection.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConnInfo {
    pub peer: Option<SocketAddr>,
    pub https: bool,
}

/// One worker's pools, by upstream: `None` for an upstream hyper-util's client reaches.
type WorkerPools = Box<[Option<Arc<pool::Pool>>]>;

/// A route's proxy. Cheap to clone.
#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

struct Inner {
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
    forwarded: bool,
    health_check: Option<gatehouse_config::HealthCheckConfig>,
    /// Set when a reload replaced this proxy: its health checks stop.
    retired: Arc<std::sync::atomic::AtomicBool>,
    checks_started: std::sync::atomic::AtomicBool,
    http2: bool,
    /// Put which upstream answered, and how fast, in the response (for an access log).
    upstream_info: bool,
}

pub type ProxyFuture = Pin<Box<dyn Future<Output = Result<Response<GateBody>, Infallible>> + Send>>;

impl Proxy {
    /// The proxy for a validated `[routes.proxy]` table.
    /// Records the upstream and its response time in each response's extensions.
    pub fn with_upstream_info(mut self) -> Proxy {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.upstream_info = true;
        }
        self
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
                retries: cfg.retries,
                trusted: headers::trusted(&cfg.trusted_proxies),
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

/// A pooled client for a route's upstreams; the TLS configuration is built once, shared.
fn client(cfg: &ProxyConfig, tls: rustls::ClientConfig) -> Client {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(cfg.connect_timeout));
    // The TLS layer over it takes https:// URLs.
    connector.enforce_http(false);
    // Built once per route: roots, client certificate and ALPN; the connector sets SNI
    // to each upstream's host.
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(connector);
    hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_idle_timeout(cfg.pool_idle_timeout)
        .pool_max_idle_per_host(cfg.pool_max_idle)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .http2_only(cfg.http2)
        // A response head larger than this is a 502, as nginx's "upstream sent too
        // big header"; hyper's default would take (and pass on) some 400 KiB.
        .http1_max_buf_size(max_buf(cfg))
        .http2_max_header_list_size(cfg.max_response_header_bytes.min(u32::MAX as usize) as u32)
        .build(connector)
}

/// The most an upstream's HTTP/1 response head may take (hyper's floor is 8 KiB).
fn max_buf(cfg: &ProxyConfig) -> usize {
    cfg.max_response_header_bytes.max(8192)
}

fn tls_config(cfg: &ProxyConfig) -> std::io::Result<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |what: &str, e: &dyn std::fmt::Display| std::io::Error::other(format!("{what}: {e}"));
    let mut roots = rustls::RootCertStore::empty();
    match cfg.tls_roots {
        gatehouse_config::TlsRoots::Webpki => {
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        }
        gatehouse_config::TlsRoots::System => {
            let found = rustls_native_certs::load_native_certs();
            for e in &found.errors {
                tracing::warn!("system roots: {e}");
            }
            roots.add_parsable_certificates(found.certs);
        }
    }
    if let Some(ca) = &cfg.tls_ca {
        let certs =
            CertificateDer::pem_file_iter(ca).map_err(|e| bad(&ca.display().to_string(), &e))?;
        for c in certs {
            let c = c.map_err(|e| bad(&ca.display().to_string(), &e))?;
            roots
                .add(c)
                .map_err(|e| bad(&ca.display().to_string(), &e))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("tls", &e))?
        .with_root_certificates(roots);
    Ok(match (&cfg.tls_client_cert, &cfg.tls_client_key) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .and_then(|i| i.collect::<Result<Vec<_>, _>>())
                .map_err(|e| bad(&cert.display().to_string(), &e))?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| bad(&key.display().to_string(), &e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| bad("client certificate", &e))?
        }
        _ => builder.with_no_client_auth(),
    })
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

    /// Readies the request's head for its upstreams (RFC 9110 §7.6: hop-by-hop fields out,
    /// the forwarding fields in), and notes what every attempt shares. `Err` is the answer
    /// when the request can't go at all.
    ///
    /// With `own_client` (the request may go over [`h1`]), the forwarding fields of the
    /// common case are left for the head's encoding ([`headers::Forwarding`]).
    fn prepare(
        &self,
        parts: &mut http::request::Parts,
        bodiless: bool,
        conn: ConnInfo,
        own_client: bool,
    ) -> Result<Prepared, Refused> {
        if self.max_body > 0 {
            let declared = parts
                .headers
                .get(CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
            if declared.is_some_and(|n| n > self.max_body) {
                return Err(Refused(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "request body too large\n",
                ));
            }
        }
        // RFC 9110 §7.8: an upgrade (WebSocket) keeps its Connection/Upgrade pair, which
        // is otherwise hop-by-hop; the client's side of the tunnel is taken here.
        let hop = headers::HopScan::of(&parts.headers);
        let upgrade = if hop.connection() {
            requested_upgrade(&parts.headers, &self.upgrades)
        } else {
            None
        };
        let client_upgrade = upgrade
            .as_ref()
            .and_then(|_| parts.extensions.remove::<hyper::upgrade::OnUpgrade>());
        let host_field = parts.headers.get(HOST).cloned();
        let client_host = host_field.clone().or_else(|| {
            parts
                .uri
                .authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        });
        headers::remove_scanned(&mut parts.headers, hop);
        // X-Forwarded-Host is the Host that is left: a `Connection` field may have named it.
        let host_field = if hop.connection() {
            parts.headers.get(HOST).cloned()
        } else {
            host_field
        };
        // Only a request that can be sent again as it was may go to another upstream: an
        // idempotent method (RFC 9110 §9.2.2) and no body to replay.
        let replayable = matches!(
            parts.method,
            Method::GET
                | Method::HEAD
                | Method::OPTIONS
                | Method::TRACE
                | Method::PUT
                | Method::DELETE
        ) && bodiless;
        let peer = conn.peer.map(|p| p.ip());
        let scheme = if conn.https { "https" } else { "http" };
        // A hash on a header reads the map as it is sent.
        let hashes_header = matches!(
            &self.selector,
            Selector::Hash {
                on: HashOn::Header(_),
                ..
            }
        );
        let fwd = if own_client && replayable && client_upgrade.is_none() && !hashes_header {
            headers::Forwarding::direct(
                host_field.as_ref(),
                peer,
                scheme,
                &self.trusted,
                self.forwarded,
                parts.version,
            )
        } else {
            None
        };
        if fwd.is_none() {
            headers::forward(
                &mut parts.headers,
                peer,
                scheme,
                &self.trusted,
                self.forwarded,
            );
            headers::add_via(&mut parts.headers, parts.version);
        }
        if let (Some(u), Some(_)) = (&upgrade, &client_upgrade) {
            parts
                .headers
                .insert(CONNECTION, HeaderValue::from_static("upgrade"));
            parts.headers.insert(UPGRADE, u.clone());
        }
        let key = match &self.selector {
            Selector::Hash { on, .. } => hash_key(on, parts, conn),
            _ => None,
        };
        Ok(Prepared {
            client_upgrade,
            client_host,
            key,
            replayable,
            fwd,
        })
    }

    /// The Host an upstream is sent: the client's (the default), or the upstream's own.
    fn host_for<'a>(
        &self,
        client_host: Option<&'a HeaderValue>,
        up: &'a Upstream,
    ) -> Option<&'a HeaderValue> {
        match client_host {
            Some(h) if self.keep_host => Some(h),
            _ => up.host.as_ref(),
        }
    }

    /// Picks the first upstream and encodes the request head for it, so that nothing of
    /// the client's request is kept past the call.
    fn start_bare(
        &self,
        pools: &[Option<Arc<pool::Pool>>],
        parts: &mut http::request::Parts,
        prep: Prepared,
    ) -> Result<Bare, Refused> {
        let i = self
            .selector
            .pick(&self.upstreams, health::now_ms(), &[], prep.key)
            .ok_or(Refused(
                StatusCode::SERVICE_UNAVAILABLE,
                "no upstream available\n",
            ))?;
        let Some(pool) = pools.get(i).cloned().flatten() else {
            return Err(Refused(StatusCode::BAD_GATEWAY, "bad gateway\n"));
        };
        let mut conn = pool.checkout_h1();
        let buf = match conn.as_mut() {
            Some(c) => c.take_wbuf(),
            None => Vec::with_capacity(512),
        };
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let mut out = h1::Outgoing::encode(
            buf,
            &parts.method,
            path,
            self.host_for(prep.client_host.as_ref(), &self.upstreams[i]),
            &parts.headers,
            prep.fwd.as_ref(),
        );
        out.recycle(std::mem::take(&mut parts.headers));
        Ok(Bare {
            // Counted as it is picked, so that the next request's pick sees it.
            guard: self.count_in(&self.upstreams[i]),
            out,
            conn,
            pool,
            first: i,
            key: prep.key,
            client_host: prep.client_host.is_some(),
        })
    }

    /// The bodiless, idempotent exchange over this crate's own HTTP/1.1 client ([`h1`]),
    /// tried on the next upstream when a connection can't be made.
    async fn forward_bare(self: Arc<Self>, mut bare: Bare) -> Response<GateBody> {
        let mut tried = Tried::default();
        let may_retry = self.retries > 0 && self.upstreams.len() > 1;
        let mut i = bare.first;
        loop {
            tried.push(i);
            let up = &self.upstreams[i];
            // The first upstream was counted when it was picked.
            let guard = if tried.len() == 1 {
                bare.guard.take()
            } else {
                self.count_in(up)
            };
            let asked = std::time::Instant::now();
            up.metrics.requests.increment(1);
            // As `tokio::time::timeout` does, a deadline past what an Instant holds is far.
            let deadline = tokio::time::Instant::from_std(asked)
                .checked_add(self.response_timeout)
                .unwrap_or_else(|| tokio::time::Instant::now() + FAR);
            let sent = h1::send(
                &bare.pool,
                &up.authority,
                bare.conn.take(),
                &mut bare.out,
                deadline,
            )
            .await;
            let e = match sent {
                Ok(Ok(res)) => {
                    let res = res.map(UpstreamRes::H1);
                    return self.answered(up, res, guard, asked, None, &mut None);
                }
                Ok(Err(e)) => e,
                Err(_) => return self.timed_out(up, Blame::Upstream),
            };
            if let Err(r) = self.failed(up, &e, may_retry, &tried, Blame::Upstream) {
                return r.response();
            }
            let Some(next) = self.selector.pick(
                &self.upstreams,
                health::now_ms(),
                tried.as_slice(),
                bare.key,
            ) else {
                return plain(StatusCode::BAD_GATEWAY, "bad gateway\n");
            };
            // The client's Host stays; an upstream's own is the next one's.
            if !(bare.client_host && self.keep_host) {
                bare.out.set_host(self.upstreams[next].host.as_ref());
            }
            let Some(pool) = self.h1_pools().and_then(|p| p.get(next).cloned().flatten()) else {
                return plain(StatusCode::BAD_GATEWAY, "bad gateway\n");
            };
            bare.conn = pool.checkout_h1();
            bare.pool = pool;
            i = next;
        }
    }

    /// Counts a request against its upstream until its response is done with, when the
    /// policy picks by load: a count every worker writes, so kept only when read.
    fn count_in(&self, up: &Arc<Upstream>) -> Option<InFlight> {
        if !matches!(self.selector, Selector::LeastRequests) {
            return None;
        }
        up.in_flight.fetch_add(1, Ordering::Relaxed);
        Some(InFlight(up.clone()))
    }

    /// A response came: it goes back to the client (or, a 101, becomes a tunnel).
    fn answered(
        &self,
        up: &Arc<Upstream>,
        res: Response<UpstreamRes>,
        guard: Option<InFlight>,
        asked: std::time::Instant,
        lent: Option<pool::Lent>,
        client_upgrade: &mut Option<hyper::upgrade::OnUpgrade>,
    ) -> Response<GateBody> {
        let took = asked.elapsed();
        up.metrics.response.record(took);
        self.passive.succeeded(up);
        if res.status() == StatusCode::SWITCHING_PROTOCOLS {
            // Only to a protocol the route allows (and so asked for): never h2c.
            let allowed = res
                .headers()
                .get(UPGRADE)
                .is_some_and(|v| allowed_protocols(v, &self.upgrades).is_some());
            if let (Some(client_side), true) = (client_upgrade.take(), allowed) {
                return tunnel(res, client_side);
            }
            // A 101 nobody asked for can't be relayed.
            return plain(StatusCode::BAD_GATEWAY, "bad gateway\n");
        }
        let mut res = respond(res, guard, self.body_idle, lent);
        if self.upstream_info {
            res.extensions_mut().insert(UpstreamInfo {
                addr: up.authority.clone(),
                time: took,
            });
        }
        res
    }

    /// Runs an exchange until its response head, or `Err` past the response timeout. That
    /// counts from the request sent: while its body is still on its way it counts from the
    /// start, and once the body is sent the upstream has a whole `response_timeout` from
    /// then. A client trickling its body to end just before the deadline would otherwise
    /// leave the upstream no time, and a 504 held against it.
    async fn within_response_timeout<F: Future>(
        &self,
        exchange: F,
        progress: Option<&Progress>,
    ) -> Result<F::Output, tokio::time::error::Elapsed> {
        let mut exchange = std::pin::pin!(exchange);
        let mut deadline = tokio::time::Instant::now() + self.response_timeout;
        loop {
            let elapsed = match tokio::time::timeout_at(deadline, exchange.as_mut()).await {
                Ok(out) => return Ok(out),
                Err(e) => e,
            };
            let Some(sent_at) = progress.and_then(Progress::sent_at) else {
                return Err(elapsed);
            };
            let due = sent_at.saturating_add(self.response_timeout.as_millis() as u64);
            let left = due.saturating_sub(health::now_ms());
            if left == 0 {
                return Err(elapsed);
            }
            deadline = tokio::time::Instant::now() + Duration::from_millis(left);
        }
    }

    /// No response head within the response timeout. A client that stalled its upload
    /// gets 408 (RFC 9110 §15.5.9: its request did not arrive in time), and only a request
    /// sent in full holds the silence against the upstream.
    fn timed_out(&self, up: &Upstream, blame: Blame) -> Response<GateBody> {
        if blame == Blame::Client {
            tracing::debug!(upstream = %up.authority, "the client's body stalled for {:?}", self.response_timeout);
            return plain(StatusCode::REQUEST_TIMEOUT, "request timeout\n");
        }
        tracing::warn!(upstream = %up.authority, "no response within {:?}", self.response_timeout);
        if blame == Blame::Upstream {
            up.metrics.failures.increment(1);
            self.passive.failed(&self.upstreams, up);
        }
        plain(StatusCode::GATEWAY_TIMEOUT, "gateway timeout\n")
    }

    /// An attempt failed: `Ok` when it may go to another upstream, else the answer.
    fn failed(
        &self,
        up: &Upstream,
        e: &pool::SendError,
        may_retry: bool,
        tried: &Tried,
        blame: Blame,
    ) -> Result<(), Refused> {
        if caused_by::<http_body_util::LengthLimitError>(e) {
            return Err(Refused(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request body too large\n",
            ));
        }
        // The client's own body failed (it went away mid-upload): not the upstream's
        // fault, so it isn't held against it.
        if client_body_failed(e) {
            return Err(Refused(
                StatusCode::BAD_REQUEST,
                "the request body could not be read\n",
            ));
        }
        if blame == Blame::Client {
            // Most likely the upstream gave up on the stalled upload; it may be fine.
            tracing::debug!(upstream = %up.authority, "failed while the client's body stalled: {e}");
            return Err(Refused(StatusCode::BAD_GATEWAY, "bad gateway\n"));
        }
        tracing::warn!(upstream = %up.authority, "upstream request failed: {e}");
        up.metrics.failures.increment(1);
        self.passive.failed(&self.upstreams, up);
        let n = tried.len();
        let again = e.is_connect()
            && may_retry
            && n <= self.retries as usize
            && n < self.upstreams.len().min(Tried::MAX);
        if again {
            Ok(())
        } else {
            Err(Refused(StatusCode::BAD_GATEWAY, "bad gateway\n"))
        }
    }

    /// Every other exchange: with a body, an upgrade, HTTP/2 or TLS to the upstream — over
    /// hyper's client.
    async fn forward(
        self: Arc<Self>,
        parts: http::request::Parts,
        body: ReqBody,
        prep: Prepared,
    ) -> Response<GateBody> {
        let Prepared {
            mut client_upgrade,
            client_host,
            key,
            replayable,
            // Already applied to the map (`serve`).
            fwd: _,
        } = prep;
        let path: PathAndQuery = parts
            .uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        let (body, progress) = body.tracked();
        let mut body = Some(body);
        let mut tried = Tried::default();
        // The request is copied for a second attempt only when one can happen.
        let may_retry = replayable && self.retries > 0 && self.upstreams.len() > 1;
        let mut spare = Some(parts);
        loop {
            let now = health::now_ms();
            let Some(i) = self
                .selector
                .pick(&self.upstreams, now, tried.as_slice(), key)
            else {
                return if tried.len() == 0 {
                    plain(StatusCode::SERVICE_UNAVAILABLE, "no upstream available\n")
                } else {
                    plain(StatusCode::BAD_GATEWAY, "bad gateway\n")
                };
            };
            tried.push(i);
            let up = &self.upstreams[i];
            let next = if may_retry {
                spare.clone()
            } else {
                spare.take()
            };
            let Some(mut p) = next else {
                return plain(StatusCode::BAD_GATEWAY, "bad gateway\n");
            };
            let pool = self.pool(i);
            // RFC 9112 §3.2.1: to an origin server, the target in origin form; hyper-util's
            // client wants the absolute form, to pick its connection by.
            p.uri = match pool {
                Some(_) => Uri::from(path.clone()),
                None => {
                    let uri = Uri::builder()
                        .scheme(up.scheme.clone())
                        .authority(up.authority.clone())
                        .path_and_query(path.clone())
                        .build();
                    let Ok(uri) = uri else {
                        return plain(StatusCode::BAD_REQUEST, "bad request\n");
                    };
                    uri
                }
            };
            p.version = if self.http2 {
                http::Version::HTTP_2
            } else {
                http::Version::HTTP_11
            };
            if let Some(h) = self.host_for(client_host.as_ref(), up) {
                p.headers.insert(HOST, h.clone());
            }
            let b = body.take().unwrap_or(ReqBody::Empty);
            let guard = self.count_in(up);
            let asked = std::time::Instant::now();
            up.metrics.requests.increment(1);
            let exchange = async {
                match pool {
                    // Boxed: rarer, and it would make every request's future larger.
                    Some(pool) => {
                        Box::pin(pool::send(pool, &up.authority, Request::from_parts(p, b)))
                            .await
                            .map(|(res, lent)| (res.map(UpstreamRes::Hyper), Some(lent)))
                    }
                    None => match self.client().request(Request::from_parts(p, b)).await {
                        Ok(res) => Ok((res.map(UpstreamRes::Hyper), None)),
                        Err(e) => Err(pool::SendError::Client(e)),
                    },
                }
            };
            let sent = self
                .within_response_timeout(exchange, progress.as_deref())
                .await;
            let e = match sent {
                Ok(Ok((res, lent))) => {
                    return self.answered(up, res, guard, asked, lent, &mut client_upgrade);
                }
                Ok(Err(e)) => e,
                Err(_) => return self.timed_out(up, Blame::of(progress.as_deref(), true)),
            };
            let blame = Blame::of(progress.as_deref(), false);
            if let Err(r) = self.failed(up, &e, may_retry, &tried, blame) {
                return r.response();
            }
            body = Some(ReqBody::Empty);
        }
    }
}

/// A request answered by the proxy itself: a status and a short body naming no upstream.
struct Refused(StatusCode, &'static str);

impl Refused {
    fn response(self) -> Response<GateBody> {
        plain(self.0, self.1)
    }
}

/// A deadline that never comes: about 30 years, as tokio's own.
const FAR: Duration = Duration::from_secs(86400 * 365 * 30);

/// What every attempt at a request shares, once its head is ready.
struct Prepared {
    client_upgrade: Option<hyper::upgrade::OnUpgrade>,
    client_host: Option<HeaderValue>,
    key: Option<u64>,
    replayable: bool,
    /// The forwarding fields, when they are not in the map yet.
    fwd: Option<headers::Forwarding>,
}

impl Prepared {
    /// Whether the request may go over [`h1`]: bodiless, idempotent, not an upgrade.
    fn bare(&self) -> bool {
        self.replayable && self.client_upgrade.is_none()
    }
}

/// A bodiless request on its way over [`h1`]: its head encoded, the upstream's pool, and
/// an idle connection out of it, if there was one.
struct Bare {
    /// The first upstream's in-flight count, under least_requests.
    guard: Option<InFlight>,
    out: h1::Outgoing,
    conn: Option<h1::Conn>,
    pool: Arc<pool::Pool>,
    first: usize,
    key: Option<u64>,
    /// The client sent a Host (kept unless the route sends the upstream's).
    client_host: bool,
}

impl Drop for Bare {
    /// A connection checked out for a request that never went (its client left before the
    /// future first ran) is still clean: it goes back.
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool.give_back_h1(conn);
        }
    }
}

/// The upstreams tried so far, on the stack: at most [`Tried::MAX`] attempts.
#[derive(Default)]
struct Tried {
    buf: [usize; Tried::MAX],
    n: usize,
}

impl Tried {
    const MAX: usize = 16;

    fn push(&mut self, i: usize) {
        if let Some(slot) = self.buf.get_mut(self.n) {
            *slot = i;
            self.n += 1;
        }
    }

    fn len(&self) -> usize {
        self.n
    }

    fn as_slice(&self) -> &[usize] {
        &self.buf[..self.n]
    }
}

/// The protocols a client asks to upgrade to that the route allows, if it asks
/// (`Connection: upgrade` and `Upgrade`, RFC 9110 §7.8), over HTTP/1.1. Anything else
/// (`h2c` above all, whose bytes would reach the upstream past the route's checks) is
/// dropped with the rest of the hop-by-hop fields, and the request goes as a plain one.
fn requested_upgrade(h: &http::HeaderMap, allowed: &[Box<str>]) -> Option<HeaderValue> {
    let asks = h.get_all(CONNECTION).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        })
    });
    let mut values = h.get_all(UPGRADE).iter();
    match (asks, values.next(), values.next()) {
        (true, Some(v), None) => allowed_protocols(v, allowed),
        _ => None,
    }
}

/// The protocols of an `Upgrade` value that are in `allowed` (by name, or name/version),
/// as one value; `None` when there are none.
fn allowed_protocols(v: &HeaderValue, allowed: &[Box<str>]) -> Option<HeaderValue> {
    let v = v.to_str().ok()?;
    let kept: Vec<&str> = v
        .split(',')
        .map(str::trim)
        .filter(|p| {
            let lower = p.to_ascii_lowercase();
            let name = lower.split('/').next().unwrap_or("");
            name != "h2c" && allowed.iter().any(|a| **a == *lower || **a == *name)
        })
        .collect();
    if kept.is_empty() {
        return None;
    }
    HeaderValue::from_str(&kept.join(", ")).ok()
}

/// Relays a 101 and joins the two upgraded connections until either side closes.
fn tunnel(
    mut res: Response<UpstreamRes>,
    client_side: hyper::upgrade::OnUpgrade,
) -> Response<GateBody> {
    let upstream_side = hyper::upgrade::on(&mut res);
    let proto = res.headers().get(UPGRADE).cloned();
    tokio::spawn(async move {
        match (client_side.await, upstream_side.await) {
            (Ok(c), Ok(u)) => {
                let mut c = hyper_util::rt::TokioIo::new(c);
                let mut u = hyper_util::rt::TokioIo::new(u);
                if let Err(e) = tokio::io::copy_bidirectional(&mut c, &mut u).await {
                    tracing::debug!("tunnel closed: {e}");
                }
            }
            (Err(e), _) | (_, Err(e)) => tracing::debug!("upgrade failed: {e}"),
        }
    });
    let (mut parts, _) = res.into_parts();
    headers::remove_hop_by_hop(&mut parts.headers);
    parts
        .headers
        .insert(CONNECTION, HeaderValue::from_static("upgrade"));
    if let Some(p) = proto {
        parts.headers.insert(UPGRADE, p);
    }
    headers::add_via(&mut parts.headers, parts.version);
    Response::from_parts(parts, GateBody::empty())
}

fn hash_key(on: &HashOn, parts: &http::request::Parts, conn: ConnInfo) -> Option<u64> {
    match on {
        HashOn::ClientIp => conn
            .peer
            .map(|p| balance::fnv1a(p.ip().to_string().as_bytes())),
        HashOn::Header(name) => parts
            .headers
            .get(name)
            .map(|v| balance::fnv1a(v.as_bytes())),
        HashOn::Cookie(name) => parts
            .headers
            .get_all(COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|c| c.trim().split_once('='))
            .find(|(k, _)| k == name)
            .map(|(_, v)| balance::fnv1a(v.as_bytes())),
    }
}

/// An error and its sources, outermost first.
fn chain<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e), |err| err.source())
}

/// An error hyper's client reports as the user's: the request body it was sending failed.
fn client_body_failed(e: &(dyn std::error::Error + 'static)) -> bool {
    chain(e).any(|err| {
        err.downcast_ref::<hyper::Error>()
            .is_some_and(|h| h.is_user())
    })
}

fn caused_by<E: std::error::Error + 'static>(e: &(dyn std::error::Error + 'static)) -> bool {
    chain(e).any(|err| err.is::<E>())
}

/// Counts a request against its upstream until the response body is done with.
pub(crate) struct InFlight(Arc<Upstream>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An upstream's response body, counted against the upstream until it is dropped, and cut
/// off when it sends nothing for `idle`.
pub struct UpstreamBody {
    inner: UpstreamRes,
    _guard: Option<InFlight>,
    idle: Duration,
    /// The pooled connection it came on, given back once the body has ended.
    lent: Option<pool::Lent>,
    /// Made on the first wait only: most bodies arrive with their head and never wait.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// Who reads an upstream's body off its connection.
enum UpstreamRes {
    Hyper(hyper::body::Incoming),
    H1(h1::Body),
    /// Taken away to be read out (see `UpstreamBody`'s `Drop`).
    Taken,
}

impl Body for UpstreamRes {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            UpstreamRes::Hyper(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
            UpstreamRes::H1(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
            UpstreamRes::Taken => std::task::Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamRes::Hyper(b) => b.is_end_stream(),
            UpstreamRes::H1(b) => b.is_end_stream(),
            UpstreamRes::Taken => true,
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            UpstreamRes::Hyper(b) => b.size_hint(),
            UpstreamRes::H1(b) => b.size_hint(),
            UpstreamRes::Taken => http_body::SizeHint::with_exact(0),
        }
    }
}

/// The error an idle upstream body ends with.
#[derive(Debug)]
pub struct BodyIdle(Duration);

impl std::fmt::Display for BodyIdle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the upstream sent nothing for {:?}", self.0)
    }
}

impl std::error::Error for BodyIdle {}

impl UpstreamBody {
    fn give_back(&mut self) {
        if let Some(l) = self.lent.take() {
            l.give_back();
        }
    }
}

/// As `h1::Body` does for its own connections: a body over hyper's client dropped before
/// its end (the client went away, or the compressed variant was already cached) with at
/// most `SALVAGE_MAX` bytes left is read out by a task given `SALVAGE_TIME`, so that an
/// HTTP/1 connection goes back to the pool instead of being closed (RFC 9112 §9.3). Which
/// version the upstream spoke is not kept (a field would make every body larger, see
/// `body::tests`): an HTTP/2 stream or a closing connection is read out too, for nothing.
impl Drop for UpstreamBody {
    fn drop(&mut self) {
        if !matches!(self.inner, UpstreamRes::Hyper(_)) || self.inner.is_end_stream() {
            return;
        }
        let small = self
            .inner
            .size_hint()
            .exact()
            .is_some_and(|n| n <= h1::SALVAGE_MAX);
        if !small {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let UpstreamRes::Hyper(mut body) = std::mem::replace(&mut self.inner, UpstreamRes::Taken)
        else {
            return;
        };
        let lent = self.lent.take();
        rt.spawn(async move {
            let read_out = async {
                while let Some(frame) = body.frame().await {
                    frame?;
                }
                Ok::<(), hyper::Error>(())
            };
            let done = tokio::time::timeout(h1::SALVAGE_TIME, read_out).await;
            // hyper-util's pool takes its connection back by itself; this crate's pool
            // needs it given.
            if let (Ok(Ok(())), Some(l)) = (done, lent) {
                l.give_back();
            }
        });
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        use std::task::Poll;
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                if let Some(t) = this.timer.as_mut() {
                    t.as_mut().reset(tokio::time::Instant::now() + this.idle);
                }
                match &frame {
                    None => this.give_back(),
                    Some(Ok(_)) if this.inner.is_end_stream() => this.give_back(),
                    // A failed body leaves the connection mid-message: it is dropped.
                    Some(Err(_)) => this.lent = None,
                    Some(Ok(_)) => {}
                }
                Poll::Ready(frame)
            }
            Poll::Pending => {
                let idle = this.idle;
                let t = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                match t.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyIdle(idle))))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

fn respond(
    res: Response<UpstreamRes>,
    guard: Option<InFlight>,
    idle: Duration,
    lent: Option<pool::Lent>,
) -> Response<GateBody> {
    let (mut parts, body) = res.into_parts();
    // The own client's parse already left the hop-by-hop fields out, keeping only a
    // `Connection` that names others.
    let hop_fields = match &body {
        UpstreamRes::H1(b) => b.hop_fields_left(),
        _ => true,
    };
    if hop_fields {
        headers::remove_hop_by_hop(&mut parts.headers);
    }
    headers::add_via(&mut parts.headers, parts.version);
    parts.version = http::Version::HTTP_11;
    let mut body = UpstreamBody {
        inner: body,
        _guard: guard,
        idle,
        lent,
        timer: None,
    };
    // A body known empty (HEAD, 204, 304, `Content-Length: 0`) may never be polled.
    if body.inner.is_end_stream() {
        body.give_back();
    }
    let body = GateBody::Upstream(body);
    Response::from_parts(parts, body)
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
