//! The server core: listeners, accept loops, connections, runtime modes and shutdown.
//!
//! [`start`] binds every listener before it returns, so that a bind failure is reported
//! at once, then serves on background threads; [`Handle::shutdown`] drains.

mod conn;
pub mod listener;
pub(crate) mod sendfile;

use crate::admin;
use crate::router::GatewayRouter as Router;
use gatehouse_config::{Config, RuntimeMode};
use hyper::server::conn::http1;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// State shared by every runtime.
/// Re-reads the configuration and swaps the routes; `Err` names what is wrong (the old
/// configuration stays).
pub type Reloader = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

pub(crate) struct Shared {
    pub(crate) reloader: std::sync::Mutex<Option<Reloader>>,
    pub(crate) draining: AtomicBool,
    /// Set when the drain timeout has passed: runtimes stop with connections still open.
    forced: AtomicBool,
    connections: AtomicUsize,
    shutdown: watch::Sender<bool>,
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

/// Per-connection settings, built once.
struct ConnSettings {
    builder: http1::Builder,
    keep_alive: Duration,
    header_read: Duration,
}

/// A running server.
pub struct Handle {
    addrs: Vec<SocketAddr>,
    admin_addr: SocketAddr,
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
pub fn start(config: &Config, router: Router) -> Result<Handle, BindError> {
    let workers = if config.workers == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        config.workers
    };
    let per_core = config.runtime == RuntimeMode::PerCore;
    let groups = if per_core { workers } else { 1 };

    // Bind everything first: a failure must be reported before anything runs.
    let mut by_addr: Vec<Vec<TcpListener>> = Vec::new();
    let mut addrs = Vec::new();
    for &addr in &config.listen {
        let group = listener::bind_group(addr, groups).map_err(|error| BindError {
            addr,
            what: "http",
            error,
        })?;
        addrs.push(group[0].local_addr().unwrap_or(addr));
        by_addr.push(group);
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
        shutdown: tx,
    });

    let mut builder = http1::Builder::new();
    builder
        .keep_alive(true)
        // Queue body chunks as they are, never copied into hyper's buffer: sendfile markers
        // must reach the socket's writer untouched (see server::sendfile).
        .writev(true)
        .max_buf_size(config.limits.max_header_bytes.max(8192))
        .max_header_size(config.limits.max_header_bytes)
        .header_read_timeout(None);
    // hyper keeps up to 100 headers on the stack; another limit costs a heap allocation
    // per request, so only set it when asked.
    if config.limits.max_headers != 100 {
        builder.max_headers(config.limits.max_headers);
    }
    let settings = Arc::new(ConnSettings {
        builder,
        keep_alive: config.timeouts.keep_alive,
        header_read: config.timeouts.header_read,
    });

    let mut threads = Vec::new();
    // Per core: listener i of each address goes to runtime i.
    let mut per_runtime: Vec<Vec<TcpListener>> = (0..groups).map(|_| Vec::new()).collect();
    for group in by_addr {
        for (i, l) in group.into_iter().enumerate() {
            per_runtime[i].push(l);
        }
    }
    for (i, listeners) in per_runtime.into_iter().enumerate() {
        let rt = if per_core {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
        } else {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .thread_name("gatehouse-worker")
                .enable_all()
                .build()
        }
        .map_err(|error| BindError {
            addr: addrs[0],
            what: "runtime",
            error,
        })?;
        let (router, settings, shared, rx) =
            (router.clone(), settings.clone(), shared.clone(), rx.clone());
        let name = format!("gatehouse-{i}");
        let t = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                rt.block_on(async move {
                    if i == 0 {
                        router.spawn_background();
                    }
                    let mut loops = Vec::new();
                    for l in listeners {
                        let l = match tokio::net::TcpListener::from_std(l) {
                            Ok(l) => l,
                            Err(e) => {
                                tracing::error!("listener: {e}");
                                continue;
                            }
                        };
                        loops.push(tokio::spawn(accept_loop(
                            l,
                            router.clone(),
                            settings.clone(),
                            shared.clone(),
                            rx.clone(),
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
    let t = std::thread::Builder::new()
        .name("gatehouse-admin".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!("admin runtime: {e}");
                    return;
                }
            };
            rt.block_on(admin::serve(admin_listener, admin_shared, admin_rx));
        })
        .map_err(|error| BindError {
            addr: admin_addr,
            what: "thread",
            error,
        })?;
    threads.push(t);

    Ok(Handle {
        addrs,
        admin_addr,
        shared,
        threads,
        drain: config.timeouts.drain,
    })
}

struct ConnGuard(Arc<Shared>);

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    router: Router,
    settings: Arc<ConnSettings>,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    if *shutdown.borrow() {
        return;
    }
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    shared.connections.fetch_add(1, Ordering::SeqCst);
                    let guard = ConnGuard(shared.clone());
                    let (router, settings, rx) = (router.clone(), settings.clone(), shutdown.clone());
                    tokio::spawn(async move {
                        serve_connection(stream, peer, router, &settings, rx).await;
                        drop(guard);
                    });
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

async fn serve_connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    router: Router,
    settings: &ConnSettings,
    shutdown: watch::Receiver<bool>,
) {
    // Head and small body go out in one writev; without NODELAY, Nagle and delayed ACKs
    // would hold each response back by ~40 ms.
    let _ = stream.set_nodelay(true);
    let state = Arc::new(conn::ConnState::default());
    let channel = Arc::new(sendfile::Channel::default());
    let io = conn::TrackedIo::new(stream, state.clone(), Some(channel.clone()));
    let svc = conn::ConnService {
        router,
        state: state.clone(),
        conn: crate::proxy::ConnInfo {
            peer: Some(peer),
            https: false,
        },
    };
    // with_upgrades: a proxied WebSocket (or other HTTP/1.1 upgrade) takes the socket over
    // after its 101; the tunnel then lives in its own task.
    let conn = sendfile::Scope::new(
        settings.builder.serve_connection(io, svc).with_upgrades(),
        channel,
    );
    tokio::pin!(conn);
    let mut dog = conn::Watchdog::new(state, settings.keep_alive, settings.header_read);
    let sleep = tokio::time::sleep(dog.tick());
    tokio::pin!(sleep);
    let mut draining = *shutdown.borrow();
    if draining {
        conn.as_mut().inner().graceful_shutdown();
    }
    loop {
        tokio::select! {
            biased;
            res = conn.as_mut() => {
                if let Err(e) = res {
                    tracing::debug!("connection: {e}");
                }
                return;
            }
            _ = sleep.as_mut() => {
                if dog.on_tick() == conn::Verdict::Close {
                    // Idle past keep_alive, a head too slow, or a response that stopped
                    // moving: drop the connection.
                    return;
                }
                // Drain is noticed on the tick (at most a second late) rather than by
                // polling the channel on every wake-up of a busy connection.
                if !draining && *shutdown.borrow() {
                    draining = true;
                    conn.as_mut().inner().graceful_shutdown();
                }
                sleep.as_mut().reset(tokio::time::Instant::now() + dog.tick());
            }
        }
    }
}
