//! Keep-alive connections to plain-HTTP/1.1 upstreams, one pool per worker and upstream.
//!
//! hyper-util's pooled client costs a third of a proxied request's user time: a connect
//! future built (and dropped) on every checkout, a pool map keyed by scheme and authority
//! under one lock, and a task spawned per request to put the connection back. Here the
//! upstream is already chosen, so its pool is a slot in a list; a connection goes back when
//! its response body ends. `https://` and HTTP/2 upstreams keep hyper-util's client.

use super::ReqBody;
use gatehouse_layers::clock::coarse_ms;
use http::uri::Authority;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One upstream's idle connections, for one worker.
pub(crate) struct Pool {
    settings: Settings,
    idle: Mutex<IdleSet>,
    /// Whether a task is closing this pool's connections as they pass the idle timeout;
    /// changed only under the lock.
    reaping: AtomicBool,
}

/// Connections are kept apart by who drives them: hyper's, each with its task, for
/// requests with a body; and [`super::h1`]'s, bare sockets, for the rest.
#[derive(Default)]
struct IdleSet {
    hyper: Vec<Idle>,
    h1: Vec<IdleH1>,
}

impl IdleSet {
    fn len(&self) -> usize {
        self.hyper.len() + self.h1.len()
    }
}

struct Idle {
    tx: http1::SendRequest<ReqBody>,
    /// [`coarse_ms`] when it went idle: read once going in and once coming out of the
    /// pool, on every proxied request.
    since: u64,
}

struct IdleH1 {
    conn: super::h1::Conn,
    /// [`coarse_ms`] when it went idle: read once going in and once coming out of the
    /// pool, on every proxied request.
    since: u64,
}

/// How connections are opened and kept.
#[derive(Clone, Copy)]
pub(crate) struct Settings {
    pub connect_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_idle: usize,
    pub max_buf: usize,
}

/// Why a request got no response.
#[derive(Debug)]
pub(crate) enum SendError {
    /// No connection could be made: nothing of the request was sent.
    Connect(std::io::Error),
    Http(hyper::Error),
    /// From [`super::h1`]: the exchange failed, or the response was malformed.
    Io(std::io::Error),
    /// From hyper-util's client (`https://` and HTTP/2 upstreams).
    Client(hyper_util::client::legacy::Error),
}

impl SendError {
    pub(crate) fn is_connect(&self) -> bool {
        match self {
            SendError::Connect(_) => true,
            SendError::Http(_) | SendError::Io(_) => false,
            SendError::Client(e) => e.is_connect(),
        }
    }
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Connect(e) => write!(f, "connect: {e}"),
            SendError::Http(e) => write!(f, "{e}"),
            SendError::Io(e) => write!(f, "{e}"),
            SendError::Client(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for SendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SendError::Connect(e) => Some(e),
            SendError::Http(e) => Some(e),
            SendError::Io(e) => Some(e),
            SendError::Client(e) => Some(e),
        }
    }
}

/// A connection lent to one request; it goes back to its pool when the response body has
/// been read to its end, and is closed if the body is dropped before that.
pub(crate) struct Lent {
    tx: http1::SendRequest<ReqBody>,
    pool: Arc<Pool>,
}

impl Lent {
    pub(crate) fn give_back(self) {
        let Lent { tx, pool } = self;
        if tx.is_closed() {
            return;
        }
        pool.keep(|idle| {
            idle.hyper.push(Idle {
                tx,
                since: coarse_ms(),
            })
        });
    }
}

/// Whether a connection idle since a given [`coarse_ms`] is still within `timeout`.
fn fresh_within(timeout: Duration) -> impl Fn(u64) -> bool {
    let now = coarse_ms();
    let timeout = timeout.as_millis() as u64;
    move |since| now.saturating_sub(since) < timeout
}

/// Closes the pool's connections idle for `timeout` (dropping the last sender closes
/// one), until the pool is empty; the next connection given back starts it again.
async fn reap(pool: Arc<Pool>) {
    let timeout = pool.settings.idle_timeout;
    loop {
        tokio::time::sleep(timeout / 4).await;
        let mut idle = pool.lock();
        let fresh = fresh_within(timeout);
        idle.hyper.retain(|c| !c.tx.is_closed() && fresh(c.since));
        idle.h1.retain(|c| fresh(c.since));
        if idle.len() == 0 {
            pool.reaping.store(false, Ordering::Relaxed);
            return;
        }
    }
}

impl Pool {
    pub(crate) fn new(settings: Settings) -> Pool {
        Pool {
            settings,
            idle: Mutex::default(),
            reaping: AtomicBool::new(false),
        }
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, IdleSet> {
        // A panic while holding the lock leaves plain lists: still usable.
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds an idle connection with `put` unless the pool is full, and starts the reaper.
    /// Outside a runtime (a response dropped after its runtime stopped) the connection is
    /// closed instead: no reaper could be started, and `tokio::spawn` would panic.
    fn keep(self: Arc<Self>, put: impl FnOnce(&mut IdleSet)) {
        let mut idle = self.lock();
        if idle.len() >= self.settings.max_idle {
            return;
        }
        // The runtime is looked for only when a reaper is to start, not on every return.
        if self.reaping.load(Ordering::Relaxed) {
            put(&mut idle);
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        put(&mut idle);
        if !self.reaping.swap(true, Ordering::Relaxed) {
            drop(idle);
            rt.spawn(reap(self));
        }
    }

    pub(crate) fn give_back_h1(self: &Arc<Self>, conn: super::h1::Conn) {
        self.clone().keep(|idle| {
            idle.h1.push(IdleH1 {
                conn,
                since: coarse_ms(),
            })
        });
    }

    /// The most recently used bare connection not past the idle timeout and quiet: one
    /// the upstream has closed, or sent anything on (a 408 before closing, a body it
    /// should not have sent), is dropped. hyper's client has a task watching each idle
    /// connection for that; here it is checked at checkout, and tokio answers from the
    /// readiness it already knows, without a syscall, unless the socket had an event.
    pub(crate) fn checkout_h1(&self) -> Option<super::h1::Conn> {
        let fresh = fresh_within(self.settings.idle_timeout);
        let mut idle = self.lock();
        while let Some(c) = idle.h1.pop() {
            if fresh(c.since) && c.conn.is_quiet() {
                return Some(c.conn);
            }
        }
        None
    }

    /// The most recently used connection still open, if any; stale ones are dropped.
    fn checkout(&self) -> Option<http1::SendRequest<ReqBody>> {
        let fresh = fresh_within(self.settings.idle_timeout);
        let mut idle = self.lock();
        while let Some(c) = idle.hyper.pop() {
            if !c.tx.is_closed() && fresh(c.since) {
                return Some(c.tx);
            }
        }
        None
    }
}

/// Sends `req` (its URI in origin form) to `authority` over a pooled connection, or a new
/// one. A request a pooled connection could not take (the upstream had closed it) is sent
/// again on another: hyper hands it back only when nothing of it was written.
pub(crate) async fn send(
    pool: &Arc<Pool>,
    authority: &Authority,
    mut req: Request<ReqBody>,
) -> Result<(Response<Incoming>, Lent), SendError> {
    while let Some(mut tx) = pool.checkout() {
        // Ready once the connection has finished the previous exchange.
        if tx.ready().await.is_err() {
            continue;
        }
        match tx.try_send_request(req).await {
            Ok(res) => return Ok((res, lend(tx, pool))),
            Err(mut e) => match e.take_message() {
                Some(r) => req = r,
                None => return Err(SendError::Http(e.into_error())),
            },
        }
    }
    // Boxed: the connect's state is a third of this future's, and most requests reuse.
    let mut tx = Box::pin(connect(authority, &pool.settings)).await?;
    let res = tx.send_request(req).await.map_err(SendError::Http)?;
    Ok((res, lend(tx, pool)))
}

fn lend(tx: http1::SendRequest<ReqBody>, pool: &Arc<Pool>) -> Lent {
    Lent {
        tx,
        pool: pool.clone(),
    }
}

pub(crate) async fn connect_tcp(
    authority: &Authority,
    settings: &Settings,
) -> Result<tokio::net::TcpStream, SendError> {
    let host = authority.host();
    // An IPv6 literal comes bracketed in a URI; the resolver wants it bare.
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let port = authority.port_u16().unwrap_or(80);
    let stream = tokio::time::timeout(
        settings.connect_timeout,
        tokio::net::TcpStream::connect((host, port)),
    )
    .await
    .map_err(|_| {
        SendError::Connect(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "connect timed out",
        ))
    })?
    .map_err(SendError::Connect)?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

async fn connect(
    authority: &Authority,
    settings: &Settings,
) -> Result<http1::SendRequest<ReqBody>, SendError> {
    let stream = connect_tcp(authority, settings).await?;
    let (tx, conn) = http1::Builder::new()
        .max_buf_size(settings.max_buf)
        .handshake::<_, ReqBody>(hyper_util::rt::TokioIo::new(stream))
        .await
        .map_err(SendError::Http)?;
    // On this worker's runtime: the request's task and the connection's share a thread.
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!("upstream connection: {e}");
        }
    });
    Ok(tx)
}
