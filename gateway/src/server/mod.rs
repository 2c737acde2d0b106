//! The server core: listeners, accept loops, connections, runtime modes and shutdown.
//!
//! [`start`] binds every listener before it returns, so that a bind failure is reported
//! at once, then serves on background threads; [`Handle::shutdown`] drains.

mod coalesce;
mod conn;
pub(crate) mod front;
mod h2send;
mod http3;
pub mod listener;
mod park;
pub mod proxy_protocol;
mod service;

use crate::admin;
use crate::router::GatewayRouter;
use crate::rt::{set_worker_slot, spawn_on_own_runtime};
pub use crate::rt::{worker_slot, workers};
use crate::static_files::sendfile;
use crate::tls::acme::{Acme, AcmeStatus};
use crate::tls::Tls;
use front::Front;
use gatehouse_config::{Config, RuntimeMode};
use gatehouse_layers::acme::ChallengeTokens;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::TokioTimer;
use std::future::Future;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::watch;

pub use crate::admin::Reloader;
use service::Fronted;
pub use service::{Http3Body, RouterParts, Serve, Tower, TowerFuture};

/// State shared by every runtime.
pub(crate) struct Shared {
    pub(crate) reloader: std::sync::Mutex<Option<Reloader>>,
    pub(crate) draining: AtomicBool,
    /// Set when the drain timeout has passed: runtimes stop with connections still open.
    forced: AtomicBool,
    connections: AtomicUsize,
    /// When a refused connection was last logged, in 10-second units.
    refusal_logged: std::sync::atomic::AtomicU64,
    shutdown: watch::Sender<bool>,
    /// `/metrics`, when metrics are on.
    pub(crate) exporter: std::sync::OnceLock<crate::metrics::Exporter>,
    /// The gateway's router, for the admin listener's cache purge.
    router: Option<GatewayRouter>,
}

impl Shared {
    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Resolves once every connection has closed, or the drain timeout has passed.
    pub(crate) async fn drained(&self) {
        while self.connections.load(Ordering::SeqCst) > 0 && !self.forced.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl admin::ServerView for Shared {
    fn reloader(&self) -> Option<Reloader> {
        self.reloader.lock().ok().and_then(|r| r.clone())
    }

    fn exporter(&self) -> Option<&crate::metrics::Exporter> {
        self.exporter.get()
    }

    fn caches(&self) -> Vec<crate::router::RouteCaches> {
        self.router.as_ref().map(|r| r.caches()).unwrap_or_default()
    }

    fn is_draining(&self) -> bool {
        Shared::is_draining(self)
    }

    fn drained(&self) -> impl Future<Output = ()> + Send + '_ {
        Shared::drained(self)
    }
}

/// The HTTP/2 limits, the same over TLS (ALPN) and h2c; the two builders share no type.
/// Each has a flood test in `tests/h2_floods.rs`.
macro_rules! h2_limits {
    ($b:expr, $config:expr) => {
        $b.timer(TokioTimer::new())
            .max_header_list_size($config.limits.max_header_bytes as u32)
            .max_concurrent_streams(256)
            // Rapid reset (CVE-2023-44487): more than 20 streams reset by the client before
            // they were answered is a GOAWAY(ENHANCE_YOUR_CALM).
            .max_pending_accept_reset_streams(20)
            // Streams the server itself had to reset for the client's errors.
            .max_local_error_reset_streams(1024)
            // What a stream may queue for a client that doesn't read (RFC 9113 §5.2 flow
            // control bounds the rest); PING and SETTINGS floods are held back by h2 not
            // reading further frames until its owed PONG or ACK is written.
            .max_send_buf_size(400 * 1024)
    };
}

/// Per-connection settings, built once.
struct ConnSettings {
    builder: http1::Builder,
    h2: http2::Builder<InlineFirst>,
    /// HTTP/1.1 or HTTP/2 by prior knowledge, on plain listeners with `h2c`.
    auto: hyper_util::server::conn::auto::Builder<InlineFirst>,
    keep_alive: Duration,
    header_read: Duration,
    /// 0: no limit.
    max_connections: usize,
    /// What HTTP/2 response bodies may hold unsent, over all connections.
    h2_send: Arc<h2send::Pool>,
    /// `proxy_protocol`: the peers that must send a PROXY header (and only they may).
    proxy_from: Option<Arc<gatehouse_layers::cidr::CidrSet>>,
}

impl ConnSettings {
    fn new(config: &Config) -> ConnSettings {
        let mut builder = http1::Builder::new();
        builder
            .keep_alive(true)
            // Queue body chunks as they are, never copied into hyper's buffer: sendfile markers
            // must reach the socket's writer untouched (see gatehouse_layers::static_files::sendfile).
            .writev(true)
            .max_buf_size(config.limits.max_header_bytes.max(8192))
            .max_header_size(config.limits.max_header_bytes)
            .header_read_timeout(None);
        // `pipeline_flush` must stay off: with it, hyper skips a flush while it holds
        // unread bytes, and a connection let go then (server::park) would drop a response.
        // hyper keeps up to 100 headers on the stack; another limit costs a heap allocation
        // per request, so only set it when asked.
        if config.limits.max_headers != 100 {
            builder.max_headers(config.limits.max_headers);
        }
        let exec = InlineFirst {
            stall: config.timeouts.keep_alive,
        };
        let mut h2 = http2::Builder::new(exec);
        h2_limits!(h2, config);
        let mut auto = hyper_util::server::conn::auto::Builder::new(exec);
        auto.http1()
            .keep_alive(true)
            .writev(true)
            .max_buf_size(config.limits.max_header_bytes.max(8192))
            .header_read_timeout(None);
        if config.limits.max_headers != 100 {
            auto.http1().max_headers(config.limits.max_headers);
        }
        h2_limits!(auto.http2(), config);
        ConnSettings {
            builder,
            h2,
            auto,
            keep_alive: config.timeouts.keep_alive,
            header_read: config.timeouts.header_read,
            max_connections: config.limits.max_connections,
            h2_send: h2send::Pool::new(
                config.limits.h2_send_buffer,
                config.limits.h2_send_buffer_total,
            ),
            proxy_from: config.proxy_protocol.then(|| {
                Arc::new(gatehouse_layers::cidr::CidrSet::new(
                    config
                        .proxy_protocol_from
                        .iter()
                        .filter_map(|c| gatehouse_config::parse_cidr(c)),
                ))
            }),
        }
    }
}

/// hyper's HTTP/2 server hands each stream to an executor. This one polls the stream once
/// where it stands, inside the connection's task, and spawns it only if it isn't done. A
/// response from memory (a cached file, a redirect) is then complete before the connection
/// flushes, so the answers to the requests that came in one read leave in one write, not
/// one write each: measured on h2-1k, a third of the writes.
///
/// A spawned stream is ended (and so reset by h2) once its response has waited `stall`, the
/// send timeout, for the client to take its next chunk (see [`h2send`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct InlineFirst {
    stall: Duration,
}

impl<F> hyper::rt::Executor<F> for InlineFirst
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, fut: F) {
        let mut fut = Box::pin(fut);
        // A future polled with a no-op waker that returns Pending has registered nothing
        // that will wake it; the spawned task polls it again at once, with a real waker.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        // A panic in a stream's future ends that stream alone (h2 resets it when the future
        // is dropped), as it does once the stream's own task polls it. Uncaught here, in
        // the connection's task, it ended every stream on the connection.
        let (polled, gate) = h2send::watch(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.as_mut().poll(&mut cx)))
        });
        match polled {
            Ok(Poll::Pending) => {
                tokio::spawn(h2send::Stalls::new(fut, gate, self.stall));
            }
            Ok(Poll::Ready(())) => {}
            // Its drop may panic too: caught, as tokio catches a task's.
            Err(_) => {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(fut)));
            }
        }
    }
}

/// What kind of listener a socket came from.
struct ListenerKind {
    front: Arc<Front>,
    tls: Option<Arc<Tls>>,
    h2c: bool,
    open: metrics::Gauge,
    refused: metrics::Counter,
    handshakes: metrics::Counter,
    handshake_failures: metrics::Counter,
}

impl ListenerKind {
    fn new(front: Front, tls: Option<Arc<Tls>>, h2c: bool) -> ListenerKind {
        let label = if tls.is_some() { "https" } else { "http" };
        Self::labelled(front, tls, h2c, label)
    }

    /// `label`: the `listener` label of its metrics (`quic` for HTTP/3).
    fn labelled(front: Front, tls: Option<Arc<Tls>>, h2c: bool, label: &'static str) -> Self {
        ListenerKind {
            front: Arc::new(front),
            tls,
            h2c,
            open: metrics::gauge!("gatehouse_connections_open", "listener" => label),
            refused: metrics::counter!("gatehouse_connections_refused_total", "listener" => label),
            handshakes: metrics::counter!("gatehouse_tls_handshakes_total", "listener" => label),
            handshake_failures: metrics::counter!(
                "gatehouse_tls_handshake_failures_total",
                "listener" => label
            ),
        }
    }
}

/// A running server.
pub struct Handle {
    addrs: Vec<SocketAddr>,
    https_addrs: Vec<SocketAddr>,
    admin_addr: SocketAddr,
    tls: Option<Arc<Tls>>,
    acme: Option<Arc<AcmeStatus>>,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    drain: Duration,
}

/// An error from [`start`]: which address failed and why.
#[derive(Debug)]
pub struct BindError {
    pub addr: SocketAddr,
    pub what: &'static str,
    pub error: io::Error,
}

impl std::fmt::Display for BindError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.what == "tls" {
            // A certificate or TLS setting: the message names the key and file.
            return write!(f, "{}", self.error);
        }
        write!(
            f,
            "cannot listen on {} ({}): {}",
            self.addr, self.what, self.error
        )
    }
}

impl std::error::Error for BindError {}

impl Handle {
    /// The public listeners' addresses (with the ports the kernel chose for port 0).
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// The HTTPS listeners' addresses.
    pub fn https_addrs(&self) -> &[SocketAddr] {
        &self.https_addrs
    }

    /// The TLS side (certificates, reload), when `[tls]` is configured.
    pub fn tls(&self) -> Option<&Arc<Tls>> {
        self.tls.as_ref()
    }

    /// ACME ordering outcomes, when `[acme]` is configured.
    pub fn acme_status(&self) -> Option<&Arc<AcmeStatus>> {
        self.acme.as_ref()
    }

    /// Stops accepting, lets in-flight requests finish within the drain timeout, then
    /// stops. Returns whether every connection finished in time.
    pub fn shutdown(self) -> bool {
        self.shared.draining.store(true, Ordering::SeqCst);
        let _ = self.shared.shutdown.send(true);
        let deadline = Instant::now() + self.drain;
        let mut clean = true;
        while self.shared.connections.load(Ordering::SeqCst) > 0 {
            if Instant::now() >= deadline {
                clean = false;
                self.shared.forced.store(true, Ordering::SeqCst);
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        for t in self.threads {
            let _ = t.join();
        }
        clean
    }

    /// What `POST /reload` on the admin listener runs.
    pub fn set_reloader(&self, f: Reloader) {
        if let Ok(mut r) = self.shared.reloader.lock() {
            *r = Some(f);
        }
    }

    /// Connections open now.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }
}

/// Binds the listeners and starts serving `router`.
pub fn start(config: &Config, router: GatewayRouter) -> Result<Handle, BindError> {
    start_with(config, router.clone(), Some(router))
}

/// Binds the listeners of `config` and serves `service` on them, as [`start`] serves the
/// gateway's router: the same runtimes, TLS, HTTP/2, limits, drain, admin listener and
/// `/metrics` (without per-route figures, which are the router's). `config.routes` is not
/// read. Each request carries its connection in its extensions, as a
/// [`ConnInfo`](crate::proxy::ConnInfo), as axum's `ConnectInfo<SocketAddr>` and as
/// gatehouse-layers' `ClientAddr`.
///
/// ```no_run
/// use axum::routing::get;
/// let config = gatehouse_config::Config::default();
/// let app = axum::Router::new().route("/", get(|| async { "hello\n" }));
/// let handle = gatehouse::server::serve(&config, app).expect("bind");
/// handle.shutdown();
/// ```
pub fn serve<S, B>(config: &Config, service: S) -> Result<Handle, BindError>
where
    Tower<S>: Serve,
    S: tower_service::Service<http::Request<hyper::body::Incoming>, Response = http::Response<B>>,
{
    start_with(config, Tower(service), None)
}

fn start_with<T: Serve>(
    config: &Config,
    svc: T,
    router: Option<GatewayRouter>,
) -> Result<Handle, BindError> {
    // instant-acme builds its HTTPS client from the process's default provider, which rustls
    // can't pick by itself with two compiled in (see gateway/Cargo.toml). An application
    // that installed its own keeps it.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let workers = workers(config);
    let per_core = config.runtime == RuntimeMode::PerCore;
    let groups = if per_core { workers } else { 1 };

    let tls_err = |addr: SocketAddr| {
        move |e: String| BindError {
            addr,
            what: "tls",
            error: io::Error::other(e),
        }
    };
    let first_tls = config
        .tls
        .as_ref()
        .and_then(|t| t.listen.first().copied())
        .unwrap_or(config.admin_listen);
    let tls = match &config.tls {
        Some(_) => Some(Tls::new(config).map_err(tls_err(first_tls))?),
        None => None,
    };
    let tokens = config.acme.as_ref().map(|_| ChallengeTokens::new());
    let acme = match (&config.acme, &tls, &tokens) {
        (Some(a), Some(t), Some(tokens)) => {
            Some(Acme::new(a, t.store.clone(), tokens.clone()).map_err(tls_err(first_tls))?)
        }
        _ => None,
    };

    // Bind everything first: a failure must be reported before anything runs.
    let mut by_addr: Vec<(bool, Vec<TcpListener>, Option<Arc<listener::Steering>>)> = Vec::new();
    let quic = match tls.as_ref().and_then(|t| t.quic.clone()) {
        Some(q) => Some(Arc::new(
            http3::H3Settings::new(config, q).map_err(tls_err(first_tls))?,
        )),
        None => None,
    };
    let mut udp_sockets = Vec::new();
    let http3_asked = config.tls.as_ref().is_some_and(|t| t.http3 == Some(true));
    // HTTPS ports whose UDP twin could not be bound: not advertised by Alt-Svc.
    let mut no_quic_ports = Vec::new();
    let mut addrs = Vec::new();
    let mut https_addrs = Vec::new();
    let tls_listen = config.tls.as_ref().map_or(&[][..], |t| &t.listen[..]);
    for (is_tls, list) in [(false, &config.listen[..]), (true, tls_listen)] {
        for &addr in list {
            let mut tries = 0;
            let (group, steering, actual) = loop {
                let (group, steering) = listener::bind_group(addr, groups, config.steer_by_cpu)
                    .map_err(|error| BindError {
                        addr,
                        what: if is_tls { "https" } else { "http" },
                        error,
                    })?;
                let actual = group[0].local_addr().unwrap_or(addr);
                if !is_tls || quic.is_none() {
                    break (group, steering, actual);
                }
                match listener::bind_udp_group(actual, groups) {
                    Ok(udp) => {
                        udp_sockets.push((actual, udp));
                        break (group, steering, actual);
                    }
                    // Port 0: the kernel chose a TCP port whose UDP twin is taken (by any
                    // client's socket); let it choose again.
                    Err(e)
                        if addr.port() == 0
                            && e.kind() == std::io::ErrorKind::AddrInUse
                            && tries < 16 =>
                    {
                        tries += 1;
                    }
                    // Asked for: a start that cannot serve it fails, as for TCP.
                    Err(error) if http3_asked => {
                        return Err(BindError {
                            addr: actual,
                            what: "http3 (udp)",
                            error,
                        })
                    }
                    // On by default only: TCP is served, without advertising HTTP/3 there
                    // (a VPN holding 443/udp must not stop a server that started before).
                    Err(error) => {
                        tracing::warn!(
                            "http3: udp {actual}: {error}; serving HTTPS there without HTTP/3 (set tls.http3 = true to make this an error)"
                        );
                        no_quic_ports.push(actual.port());
                        break (group, steering, actual);
                    }
                }
            };
            if is_tls {
                https_addrs.push(actual);
            } else {
                addrs.push(actual);
            }
            by_addr.push((is_tls, group, steering));
        }
    }
    let admin_listener = listener::bind(config.admin_listen, false).map_err(|error| BindError {
        addr: config.admin_listen,
        what: "admin",
        error,
    })?;
    let admin_addr = admin_listener.local_addr().unwrap_or(config.admin_listen);

    let (tx, rx) = watch::channel(false);
    let shared = Arc::new(Shared {
        reloader: std::sync::Mutex::new(None),
        draining: AtomicBool::new(false),
        forced: AtomicBool::new(false),
        connections: AtomicUsize::new(0),
        refusal_logged: std::sync::atomic::AtomicU64::new(u64::MAX),
        shutdown: tx,
        exporter: std::sync::OnceLock::new(),
        router: router.clone(),
    });

    let settings = Arc::new(ConnSettings::new(config));

    let redirect = match (&config.tls, https_addrs.first()) {
        (Some(t), Some(a)) if t.redirect_http => Some((a.port() != 443).then_some(a.port())),
        _ => None,
    };
    let plain_kind = Arc::new(ListenerKind::new(
        Front {
            hsts: None,
            alt_svc: None,
            redirect,
            acme: tokens,
            // sendfile markers need hyper's HTTP/1 writer, which the h2c path may not use.
            sendfile: !config.h2c,
            max_uri_bytes: config.limits.max_uri_bytes,
            protocols: Default::default(),
        },
        None,
        config.h2c,
    ));
    let tls_front = |alt_svc| Front {
        hsts: tls.as_ref().and_then(|t| t.hsts.clone()),
        alt_svc,
        redirect: None,
        acme: None,
        sendfile: false,
        max_uri_bytes: config.limits.max_uri_bytes,
        protocols: Default::default(),
    };
    // One kind per HTTPS port: each advertises HTTP/3 on its own (RFC 7838 §3: an
    // alt-authority without a host is the same host, on that port).
    let mut tls_kinds: Vec<(u16, Arc<ListenerKind>)> = Vec::new();
    for a in &https_addrs {
        if tls_kinds.iter().any(|(p, _)| *p == a.port()) {
            continue;
        }
        // Static bytes: it is cloned for every response, on every runtime, and a shared
        // count would be two atomic operations on one cache line per response.
        let alt_svc = quic
            .as_ref()
            .filter(|_| !no_quic_ports.contains(&a.port()))
            .and_then(|_| {
                let text: &'static str =
                    Box::leak(format!("h3=\":{}\"; ma=86400", a.port()).into_boxed_str());
                http::HeaderValue::from_maybe_shared(bytes::Bytes::from_static(text.as_bytes()))
                    .ok()
            });
        let kind = ListenerKind::new(tls_front(alt_svc), tls.clone(), false);
        tls_kinds.push((a.port(), Arc::new(kind)));
    }
    let quic_kind = Arc::new(ListenerKind::labelled(
        tls_front(None),
        tls.clone(),
        false,
        "quic",
    ));
    let acme_status = acme.as_ref().map(|a| a.status.clone());
    if let Some(e) = crate::metrics::Exporter::new(router.clone(), tls.clone(), acme_status.clone())
    {
        let _ = shared.exporter.set(e);
    }

    let mut threads = Vec::new();
    // Per core: listener i of each address goes to runtime i.
    type Steered = Option<(usize, Arc<listener::Steering>)>;
    let mut per_runtime: Vec<Vec<(Arc<ListenerKind>, TcpListener, Steered)>> =
        (0..groups).map(|_| Vec::new()).collect();
    for (is_tls, group, steering) in by_addr {
        let port = group[0].local_addr().map_or(0, |a| a.port());
        let kind = match tls_kinds.iter().find(|(p, _)| is_tls && *p == port) {
            Some((_, k)) => k,
            None => &plain_kind,
        };
        for (i, l) in group.into_iter().enumerate() {
            per_runtime[i].push((kind.clone(), l, steering.clone().map(|s| (i, s))));
        }
    }
    // And socket i of each address's UDP group, with its number and the group's size.
    let mut udp_per_runtime: Vec<Vec<(std::net::UdpSocket, http3::Steer)>> =
        (0..groups).map(|_| Vec::new()).collect();
    for (_, group) in udp_sockets {
        let of = group.len();
        for (i, socket) in group.into_iter().enumerate() {
            udp_per_runtime[i].push((socket, http3::Steer { index: i, of }));
        }
    }
    for (i, listeners) in per_runtime.into_iter().enumerate() {
        let rt = if per_core {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
        } else {
            let next = std::sync::atomic::AtomicUsize::new(0);
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .thread_name("gatehouse-worker")
                // The workers start first; the blocking pool's threads wrap around.
                .on_thread_start(move || {
                    set_worker_slot(next.fetch_add(1, Ordering::Relaxed) % workers)
                })
                .enable_all()
                .build()
        }
        .map_err(|error| BindError {
            addr: addrs[0],
            what: "runtime",
            error,
        })?;
        let (svc, router, settings, shared, rx) = (
            svc.clone(),
            router.clone(),
            settings.clone(),
            shared.clone(),
            rx.clone(),
        );
        let watch = if i == 0 { tls.clone() } else { None };
        // HTTP/3: socket i of each address's group, and its own endpoint.
        let udp = std::mem::take(&mut udp_per_runtime[i]);
        let (quic, quic_kind) = (quic.clone(), quic_kind.clone());
        let name = format!("gatehouse-{i}");
        let t = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                if per_core {
                    set_worker_slot(i);
                }
                rt.block_on(async move {
                    if let (0, Some(r)) = (i, &router) {
                        r.spawn_background();
                    }
                    if let Some(t) = &watch {
                        t.spawn_watch();
                    }
                    let mut loops = Vec::new();
                    for (socket, steer) in udp {
                        if let Some(q) = &quic {
                            loops.push(tokio::spawn(http3::serve(
                                socket,
                                steer,
                                quic_kind.clone(),
                                svc.clone(),
                                q.clone(),
                                settings.h2_send.clone(),
                                shared.clone(),
                                rx.clone(),
                            )));
                        }
                    }
                    for (kind, l, steered) in listeners {
                        let l = match tokio::net::TcpListener::from_std(l) {
                            Ok(l) => l,
                            Err(e) => {
                                tracing::error!("listener: {e}");
                                continue;
                            }
                        };
                        loops.push(tokio::spawn(accept_loop(
                            l,
                            kind,
                            svc.clone(),
                            settings.clone(),
                            shared.clone(),
                            rx.clone(),
                            steered,
                        )));
                    }
                    for l in loops {
                        let _ = l.await;
                    }
                    // Keep the runtime alive while its connections drain.
                    shared.drained().await;
                });
                // Connections still open after the drain timeout are dropped with the runtime.
                rt.shutdown_timeout(Duration::from_millis(100));
            })
            .map_err(|error| BindError {
                addr: addrs[0],
                what: "thread",
                error,
            })?;
        threads.push(t);
    }

    let admin_shared = shared.clone();
    let admin_rx = rx.clone();
    let admin_settings = admin::Settings::new(config, admin_addr);
    let t = spawn_on_own_runtime("gatehouse-admin", async move {
        admin::serve(admin_listener, admin_shared, admin_rx, admin_settings).await
    })
    .map_err(|error| BindError {
        addr: admin_addr,
        what: "thread",
        error,
    })?;
    threads.push(t);
    if let Some(a) = acme {
        a.spawn().map_err(|error| BindError {
            addr: first_tls,
            what: "thread",
            error,
        })?;
    }

    Ok(Handle {
        addrs,
        https_addrs,
        admin_addr,
        tls,
        acme: acme_status,
        shared,
        threads,
        drain: config.timeouts.drain,
    })
}

struct ConnGuard(Arc<Shared>, Arc<ListenerKind>);

pin_project_lite::pin_project! {
    /// A connection's task: its future, and the guard that counts it open until it ends.
    struct Open<F> {
        #[pin]
        conn: F,
        _guard: ConnGuard,
    }
}

impl<F: Future<Output = ()>> Future for Open<F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.project().conn.poll(cx)
    }
}

impl ConnGuard {
    /// One more open connection, past `limits.max_connections` if need be: the
    /// connection counted already, from the moment an upgrade is agreed (hyper then lets
    /// it go).
    fn again(shared: &Arc<Shared>, kind: &Arc<ListenerKind>) -> crate::http_util::ConnHold {
        shared.connections.fetch_add(1, Ordering::SeqCst);
        kind.open.increment(1.0);
        crate::http_util::ConnHold::new(
            Box::new(ConnGuard(shared.clone(), kind.clone())),
            shared.shutdown.subscribe(),
        )
    }
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.1.open.decrement(1.0);
        self.0.connections.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A connection on a listener with `proxy_protocol`: from a peer in `from`, its PROXY
/// header is read and the client it names is the connection's peer from then on (logs,
/// IP rules, rate limits, `X-Forwarded-For`); from anyone else, or with a broken header,
/// it is closed.
#[allow(clippy::too_many_arguments)]
async fn serve_proxied<T: Serve>(
    mut stream: tokio::net::TcpStream,
    balancer: SocketAddr,
    from: Arc<gatehouse_layers::cidr::CidrSet>,
    kind: Arc<ListenerKind>,
    svc: Fronted<T>,
    settings: Arc<ConnSettings>,
    guard: ConnGuard,
    rx: watch::Receiver<bool>,
) {
    if !from.contains(balancer.ip()) {
        tracing::debug!(peer = %balancer, "not in proxy_protocol_from: connection closed");
        return;
    }
    let Some(peer) = proxy_protocol::read_header(&mut stream, balancer, settings.header_read).await
    else {
        return;
    };
    match &kind.tls {
        Some(tls) => Box::pin(serve_tls(stream, peer, &kind, tls, svc, &settings, rx)).await,
        None if kind.h2c => Box::pin(serve_h2c(stream, peer, svc, &settings, rx)).await,
        None => {
            let shared = Some(guard.0.clone());
            Box::pin(serve_connection(stream, peer, svc, &settings, shared, rx)).await
        }
    }
    drop(guard);
}

async fn accept_loop<T: Serve>(
    listener: tokio::net::TcpListener,
    kind: Arc<ListenerKind>,
    svc: T,
    settings: Arc<ConnSettings>,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
    steered: Option<(usize, Arc<listener::Steering>)>,
) {
    if *shutdown.borrow() {
        return;
    }
    let fd = std::os::fd::AsRawFd::as_raw_fd(&listener);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    if let Some((index, steering)) = &steered {
                        steering.accepted(*index, fd);
                    }
                    let open = shared.connections.fetch_add(1, Ordering::SeqCst);
                    if settings.max_connections > 0 && open >= settings.max_connections {
                        // Over the limit: closed at once, which costs less than keeping it
                        // waiting in the backlog.
                        shared.connections.fetch_sub(1, Ordering::SeqCst);
                        kind.refused.increment(1);
                        drop(stream);
                        let now = crate::proxy::health::now_ms() / 10_000;
                        if shared.refusal_logged.swap(now, Ordering::Relaxed) != now {
                            tracing::warn!(
                                "limits.max_connections ({}) reached: closing new connections",
                                settings.max_connections
                            );
                        }
                        continue;
                    }
                    kind.open.increment(1.0);
                    let guard = ConnGuard(shared.clone(), kind.clone());
                    let (settings, rx) = (settings.clone(), shutdown.clone());
                    let svc = Fronted::new(kind.front.clone(), svc.clone())
                        .counting(shared.clone(), kind.clone());
                    if let Some(from) = settings.proxy_from.clone() {
                        tokio::spawn(serve_proxied(stream, peer, from, kind.clone(), svc, settings, guard, rx));
                        continue;
                    }
                    // Each kind is its own task, so the task holds only the state of the
                    // kind it serves (a plain connection's is half a TLS one's), which is
                    // most of an idle connection's memory; a plain connection's is spawned
                    // as is, with no box and no enclosing future beside it.
                    match &kind.tls {
                        Some(_) => {
                            let kind = kind.clone();
                            tokio::spawn(async move {
                                if let Some(tls) = &kind.tls {
                                    Box::pin(serve_tls(stream, peer, &kind, tls, svc, &settings, rx))
                                        .await
                                }
                                drop(guard);
                            });
                        }
                        // hyper-util's auto connection borrows its builder from `settings`.
                        None if kind.h2c => {
                            tokio::spawn(async move {
                                Box::pin(serve_h2c(stream, peer, svc, &settings, rx)).await;
                                drop(guard);
                            });
                        }
                        None => {
                            let shared = Some(guard.0.clone());
                            tokio::spawn(Open {
                                conn: serve_connection(stream, peer, svc, &settings, shared, rx),
                                _guard: guard,
                            });
                        }
                    }
                }
                Err(e) => {
                    // EMFILE and friends: back off rather than spin; the listener stays.
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
            _ = shutdown.changed() => break,
        }
    }
}

/// Not an `async fn`: the future it returns is the connection's whole state, with nothing
/// held twice (an `async fn` keeps its moved-from locals beside the future it awaits, which
/// tripled an idle connection's task). `shared` counts the open connections, above
/// [`park::PARK_ABOVE`] of which an idle one parks; `None` never parks.
fn serve_connection<T: Serve>(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    svc: Fronted<T>,
    settings: &Arc<ConnSettings>,
    shared: Option<Arc<Shared>>,
    shutdown: watch::Receiver<bool>,
) -> impl Future<Output = ()> {
    // Head and small body go out in one writev; without NODELAY, Nagle and delayed ACKs
    // would hold each response back by ~40 ms.
    let _ = stream.set_nodelay(true);
    let (state, svc) = conn::ConnService::new(svc, peer, false, None);
    let channel = Arc::new(sendfile::Channel::default());
    let conn = park::Parking::new(stream, channel, svc, settings.clone(), shared);
    Drive::new(conn, |c| c.graceful(), state, settings, shutdown)
}

/// A cleartext listener that also takes HTTP/2 with prior knowledge (`h2c`).
fn serve_h2c<'a, T: Serve>(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    svc: Fronted<T>,
    settings: &'a ConnSettings,
    shutdown: watch::Receiver<bool>,
) -> impl Future<Output = ()> + 'a {
    let _ = stream.set_nodelay(true);
    let (state, svc) = conn::ConnService::new(svc, peer, false, Some(&settings.h2_send));
    let io = conn::TrackedIo::new(stream, state.clone(), None);
    let conn = settings.auto.serve_connection_with_upgrades(io, svc);
    Drive::new(conn, |c| c.graceful_shutdown(), state, settings, shutdown)
}

/// How much encrypted output a TLS connection may hold before a write waits. rustls's
/// default, 64 KiB, makes a large body one `writev` per 64 KiB; 256 KiB quarters that. The
/// memory is held only while a body is larger than the socket takes at once.
const TLS_BUFFER: usize = 256 * 1024;

async fn serve_tls<T: Serve>(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    kind: &ListenerKind,
    tls: &Tls,
    svc: Fronted<T>,
    settings: &ConnSettings,
    shutdown: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.config.clone());
    let stream = match tokio::time::timeout(tls.handshake_timeout, acceptor.accept(stream)).await {
        Ok(Ok(mut s)) => {
            kind.handshakes.increment(1);
            s.get_mut().1.set_buffer_limit(Some(TLS_BUFFER));
            s
        }
        Ok(Err(e)) => {
            kind.handshake_failures.increment(1);
            tracing::debug!("tls handshake from {peer}: {e}");
            return;
        }
        Err(_) => {
            kind.handshake_failures.increment(1);
            tracing::debug!("tls handshake from {peer}: timed out");
            return;
        }
    };
    let alpn = stream.get_ref().1.alpn_protocol();
    if alpn == Some(crate::tls::certs::ACME_TLS_ALPN) {
        // RFC 8737 §3: the handshake itself was the answer; no HTTP follows.
        let mut stream = stream;
        let _ = tokio::io::AsyncWriteExt::shutdown(&mut stream).await;
        return;
    }
    let h2 = alpn == Some(b"h2");
    let pool = h2.then_some(&settings.h2_send);
    let (state, svc) = conn::ConnService::new(svc, peer, true, pool);
    if h2 {
        let io = coalesce::Coalesced::new(stream, state.clone());
        let io = conn::TrackedIo::new(io, state.clone(), None);
        let conn = coalesce::Counted::new(settings.h2.serve_connection(io, svc), state.clone());
        Drive::new(
            conn,
            |c| c.inner().graceful_shutdown(),
            state,
            settings,
            shutdown,
        )
        .await
    } else {
        let io = conn::TrackedIo::new(stream, state.clone(), None);
        let conn = settings.builder.serve_connection(io, svc).with_upgrades();
        Drive::new(conn, |c| c.graceful_shutdown(), state, settings, shutdown).await
    }
}

pin_project_lite::pin_project! {
    /// Runs a connection to its end, closing it when its watchdog says so, and shutting it
    /// down gracefully when the server drains. Written out by hand rather than as an
    /// `async fn` with `select!`, which held the connection twice: this is most of what an
    /// idle connection costs.
    struct Drive<C, G> {
        #[pin]
        conn: C,
        #[pin]
        sleep: tokio::time::Sleep,
        // The timer holds no waker yet (new, or just reset): it must be polled.
        arm: bool,
        dog: conn::Watchdog,
        graceful: G,
        shutdown: watch::Receiver<bool>,
        started: bool,
        draining: bool,
    }
}

impl<C, G: Fn(Pin<&mut C>)> Drive<C, G> {
    fn new(
        conn: C,
        graceful: G,
        state: Arc<conn::ConnState>,
        settings: &ConnSettings,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        let dog = conn::Watchdog::new(state, settings.keep_alive, settings.header_read);
        Drive {
            conn,
            sleep: tokio::time::sleep(dog.tick()),
            arm: true,
            dog,
            graceful,
            shutdown,
            started: false,
            draining: false,
        }
    }
}

/// The status hyper answered a head with itself when it could not read it as a request
/// (its h1 `Server::on_error`): 400, 414 for a target over 64 KiB, 431 for a head too
/// large. hyper says which only in its error's text.
fn unread_status(e: &dyn std::any::Any) -> Option<http::StatusCode> {
    let e = match e.downcast_ref::<hyper::Error>() {
        Some(e) => e,
        None => e
            .downcast_ref::<park::Error>()?
            .downcast_ref::<hyper::Error>()?,
    };
    if !e.is_parse() || e.is_parse_version_h2() || e.is_parse_status() {
        return None;
    }
    let text = e.to_string();
    if e.is_parse_too_large() {
        Some(if text.starts_with("URI") {
            http::StatusCode::URI_TOO_LONG
        } else {
            http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
        })
    } else if text.starts_with("internal") {
        // hyper's own fault: it answers nothing.
        None
    } else {
        Some(http::StatusCode::BAD_REQUEST)
    }
}

impl<C, E, G> Future for Drive<C, G>
where
    C: Future<Output = Result<(), E>>,
    E: std::fmt::Display + 'static,
    G: Fn(Pin<&mut C>),
{
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        let mut this = self.project();
        if !*this.started {
            *this.started = true;
            if *this.shutdown.borrow() {
                *this.draining = true;
                (this.graceful)(this.conn.as_mut());
            }
        }
        loop {
            if let std::task::Poll::Ready(res) = this.conn.as_mut().poll(cx) {
                if let Err(e) = res {
                    tracing::debug!("connection: {e}");
                    if let Some(status) = unread_status(&e) {
                        this.dog
                            .state()
                            .unread
                            .store(status.as_u16(), Ordering::Relaxed);
                    }
                }
                return std::task::Poll::Ready(());
            }
            // A timer that holds this task's waker wakes it when it fires: until then
            // polling it on every wake-up of a busy connection (twice a proxied request)
            // only costs its coop budget and waker checks, ~230 instructions a request.
            if !*this.arm && !this.sleep.is_elapsed() {
                return std::task::Poll::Pending;
            }
            *this.arm = false;
            // Outside the coop budget: with the task's budget spent, `Sleep::poll` returns
            // Pending without taking the waker, and this timer would never wake the task.
            let mut sleep = tokio::task::coop::unconstrained(this.sleep.as_mut());
            std::task::ready!(Pin::new(&mut sleep).poll(cx));
            if this.dog.on_tick() == conn::Verdict::Close {
                // Idle past keep_alive, a head too slow, or a response that stopped
                // moving: drop the connection.
                return std::task::Poll::Ready(());
            }
            // Drain is noticed on the tick (at most a second late) rather than by polling
            // the channel on every wake-up of a busy connection.
            if !*this.draining && *this.shutdown.borrow() {
                *this.draining = true;
                (this.graceful)(this.conn.as_mut());
            }
            this.sleep
                .as_mut()
                .reset(tokio::time::Instant::now() + this.dog.tick());
            *this.arm = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream whose first poll (in the connection's task) panics does not unwind into
    /// the connection, and the next stream is polled and spawned as before: the watch of
    /// [`h2send`] was left as it was.
    #[tokio::test]
    async fn a_panic_in_a_streams_first_poll_stays_in_that_stream() {
        let exec = InlineFirst {
            stall: Duration::from_secs(1),
        };
        hyper::rt::Executor::execute(&exec, async {
            if std::hint::black_box(true) {
                panic!("a stream's bug, on purpose");
            }
        });
        let (tx, rx) = tokio::sync::oneshot::channel();
        hyper::rt::Executor::execute(&exec, async move {
            tokio::task::yield_now().await;
            let _ = tx.send(());
        });
        let done = tokio::time::timeout(Duration::from_secs(5), rx).await;
        assert!(matches!(done, Ok(Ok(()))), "{done:?}");
    }

    /// The watchdog's timer is polled only when just set or fired, so that one poll must
    /// leave it holding the task's waker even when the connection spent the task's coop
    /// budget first (`Sleep::poll` then returns Pending without taking the waker): else an
    /// idle connection would never be closed.
    #[tokio::test]
    async fn the_watchdog_ticks_after_the_connection_spends_the_budget() {
        let mut config = Config::default();
        config.timeouts.keep_alive = Duration::from_millis(100);
        config.timeouts.header_read = Duration::from_millis(100);
        let settings = ConnSettings::new(&config);
        let state = Arc::new(conn::ConnState::default());
        let (_tx, shutdown) = watch::channel(false);
        // A connection with nothing to do that uses up the budget on every poll.
        let spender = std::future::poll_fn(|cx| loop {
            let mut spend = std::pin::pin!(tokio::task::coop::consume_budget());
            if spend.as_mut().poll(cx).is_pending() {
                return std::task::Poll::<Result<(), std::io::Error>>::Pending;
            }
        });
        let drive = Drive::new(spender, |_| {}, state, &settings, shutdown);
        let closed = tokio::time::timeout(Duration::from_secs(3), drive).await;
        assert!(closed.is_ok(), "the idle connection was never closed");
    }

    /// An idle connection's memory is mostly its task. The state a plain HTTP/1.1
    /// connection is served with holds hyper's connection boxed, so that a parked one is
    /// its socket, its Service, its timer and watchdog and little else; an `async fn`
    /// around it once held hyper's connection three times (2,656 bytes against 736).
    #[tokio::test]
    async fn a_parked_connection_holds_no_hyper_connection() {
        let config = Config::default();
        let settings = Arc::new(ConnSettings::new(&config));
        let router = crate::router::build(&config).expect("router");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let _client = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (stream, peer) = listener.accept().await.expect("accept");
        let front = Front {
            sendfile: true,
            max_uri_bytes: 8192,
            ..Front::default()
        };
        let svc = Fronted::new(Arc::new(front), router);
        let (_tx, rx) = watch::channel(false);
        let fut = serve_connection(stream, peer, svc, &settings, None, rx);
        let held = std::mem::size_of_val(&fut);
        let parked = std::mem::size_of::<tokio::net::TcpStream>()
            + std::mem::size_of::<conn::ConnService<GatewayRouter>>()
            + std::mem::size_of::<tokio::time::Sleep>()
            + std::mem::size_of::<conn::Watchdog>()
            + 96;
        assert!(
            held <= parked,
            "the connection's future is {held} bytes, against {parked} for what it must hold"
        );
    }
}
