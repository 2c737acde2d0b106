//! Idle keep-alive connections that hold no buffer.
//!
//! hyper keeps a read buffer and a write buffer (8 KiB each) for an HTTP/1.1 connection's
//! whole life, where nginx frees its buffers while a keep-alive connection waits. With many
//! connections open, a plain HTTP/1.1 connection that goes idle is let go by hyper: once
//! its last response is written and the socket has nothing more to read, hyper is asked to
//! shut down gracefully (an idle hyper connection closes at once and writes nothing), its
//! shutdown of the socket is skipped ([`TrackedIo`]'s `poll_shutdown`), and what is left
//! is kept: the socket, the connection's Service, and any bytes of a next head that hyper
//! had read. When the socket becomes readable a new hyper connection takes over, reading
//! those bytes first. The watchdog ticks over both states, so `keep_alive` and
//! `header_read` hold as before, and a drain closes a parked connection at once.
//!
//! Parking costs a hyper connection's setup per request, so it only happens above
//! [`PARK_ABOVE`] open connections in the process, where memory is what runs out.

use super::conn::{ConnService, ConnState, TrackedIo};
use super::service::Serve;
use super::{ConnSettings, Shared};
use crate::static_files::sendfile::{Channel, Scope};
use bytes::Bytes;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::net::TcpStream;

/// Open connections (over the process) above which an idle plain HTTP/1.1 connection
/// parks. Below it, hyper keeps its buffers and a keep-alive request costs no setup.
pub(crate) const PARK_ABOVE: usize = 512;

/// What a parked connection reads itself before a hyper takes over (most heads whole).
const FIRST_READ: usize = 2048;

type Io = TokioIo<TrackedIo<TcpStream>>;
type Hyper<T> = Scope<http1::UpgradeableConnection<Io, ConnService<T>>>;
pub(crate) type Error = Box<dyn std::error::Error + Send + Sync>;

enum Phase<T: Serve> {
    // Boxed: a parked connection's task then holds only the socket and the Service.
    Serving(Box<Hyper<T>>),
    Parked(TcpStream, Arc<Channel>, ConnService<T>),
    Done,
}

/// A plain HTTP/1.1 connection, served by hyper while it is busy and parked while idle.
pub(crate) struct Parking<T: Serve> {
    phase: Phase<T>,
    state: Arc<ConnState>,
    settings: Arc<ConnSettings>,
    /// Where the open connections are counted; `None`: never park.
    shared: Option<Arc<Shared>>,
    /// A drain began: hyper is ending keep-alive, and the connection must not park.
    draining: bool,
}

impl<T: Serve> Parking<T> {
    pub(crate) fn new(
        stream: TcpStream,
        channel: Arc<Channel>,
        service: ConnService<T>,
        settings: Arc<ConnSettings>,
        shared: Option<Arc<Shared>>,
    ) -> Self {
        let state = service.state.clone();
        // Among many connections, a new one waits for its first bytes without a hyper:
        // clients that connect ahead of their requests would otherwise each hold one.
        let phase = if many(shared.as_ref()) {
            Phase::Parked(stream, channel, service)
        } else {
            Phase::Serving(serve(&settings, stream, channel, service, Bytes::new()))
        };
        Parking {
            phase,
            state,
            settings,
            shared,
            draining: false,
        }
    }

    /// Drain: a serving connection finishes its exchange and closes, a parked one closes.
    pub(crate) fn graceful(self: Pin<&mut Self>) {
        let this = self.get_mut();
        this.draining = true;
        match &mut this.phase {
            Phase::Serving(conn) => Pin::new(&mut **conn).inner().graceful_shutdown(),
            Phase::Parked(..) => this.phase = Phase::Done,
            Phase::Done => {}
        }
    }
}

/// hyper is idle: its last response is out, and its last read found nothing.
fn should_park(s: &ConnState, shared: Option<&Arc<Shared>>) -> bool {
    s.read_waiting.load(Ordering::Relaxed)
            && !s.write_waiting.load(Ordering::Relaxed)
            && s.in_flight() == 0
            // A new hyper isn't idle before its first whole head, nor is one whose
            // request has a body it may still be reading (see `ConnState::hold_until`).
            && s.started() > s.hold_until.load(Ordering::Relaxed)
            && !s.upgrade_asked.load(Ordering::Relaxed)
            && many(shared)
}

fn many(shared: Option<&Arc<Shared>>) -> bool {
    shared.is_some_and(|s| s.connections.load(Ordering::Relaxed) > PARK_ABOVE)
}

/// A parked connection's first bytes: `None` if there were none after all, an error if
/// the client closed or reset it. Apart and never inlined, so that its buffer is not part
/// of every poll's stack frame.
#[inline(never)]
fn first_bytes(stream: &TcpStream) -> Option<Result<Bytes, ()>> {
    let mut first = [0u8; FIRST_READ];
    loop {
        return match stream.try_read(&mut first) {
            Ok(n) if n > 0 => Some(Ok(Bytes::copy_from_slice(&first[..n]))),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            _ => Some(Err(())),
        };
    }
}

fn serve<T: Serve>(
    settings: &ConnSettings,
    stream: TcpStream,
    channel: Arc<Channel>,
    service: ConnService<T>,
    prefix: Bytes,
) -> Box<Hyper<T>> {
    let state = service.state.clone();
    // A new hyper is busy until it has read a whole head (shut down before, it would only
    // end keep-alive): it may be let go once another request has started.
    state
        .hold_until
        .fetch_max(state.started(), Ordering::Relaxed);
    let io = TrackedIo::parkable(stream, state, Some(channel.clone()), prefix);
    // with_upgrades: a proxied WebSocket (or other HTTP/1.1 upgrade) takes the socket over
    // after its 101; the tunnel then lives in its own task.
    Box::new(Scope::new(
        settings
            .builder
            .serve_connection(io, service)
            .with_upgrades(),
        channel,
    ))
}

impl<T: Serve> Future for Parking<T> {
    type Output = Result<(), Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            match &mut this.phase {
                Phase::Serving(conn) => {
                    let res = match Pin::new(&mut *conn).poll(cx) {
                        Poll::Ready(res) => res,
                        Poll::Pending => {
                            if this.state.parking.load(Ordering::Relaxed) {
                                // Asked to shut down and still busy (a request body left
                                // unread): hyper ends keep-alive and closes for real.
                                this.state.parking.store(false, Ordering::Relaxed);
                                return Poll::Pending;
                            }
                            if this.draining || !should_park(&this.state, this.shared.as_ref()) {
                                return Poll::Pending;
                            }
                            this.state.parking.store(true, Ordering::Relaxed);
                            Pin::new(&mut **conn).inner().graceful_shutdown();
                            continue;
                        }
                    };
                    if !this.state.parking.swap(false, Ordering::Relaxed) || res.is_err() {
                        return Poll::Ready(res.map_err(Into::into));
                    }
                    let Phase::Serving(conn) = std::mem::replace(&mut this.phase, Phase::Done)
                    else {
                        return Poll::Ready(Ok(()));
                    };
                    let Some(parts) = (*conn).into_inner().into_parts() else {
                        return Poll::Ready(Ok(()));
                    };
                    let (stream, channel) = parts.io.into_inner().into_parts();
                    let Some(channel) = channel else {
                        return Poll::Ready(Ok(()));
                    };
                    this.phase = if parts.read_buf.is_empty() {
                        Phase::Parked(stream, channel, parts.service)
                    } else {
                        // Part of a next head had arrived: a new hyper reads it first, and
                        // keeps the connection until that head is complete.
                        Phase::Serving(serve(
                            &this.settings,
                            stream,
                            channel,
                            parts.service,
                            parts.read_buf,
                        ))
                    };
                }
                Phase::Parked(stream, ..) => {
                    ready!(stream.poll_read_ready(cx))?;
                    // Read before a hyper is made: tokio's readiness may be a false
                    // positive (every new connection was reported readable before its
                    // first byte, measured), and a new hyper that has read no head can't be
                    // let go again (shut down then, hyper only ends keep-alive), so it
                    // would hold its buffers until the client's first request.
                    let first = match first_bytes(stream) {
                        Some(Ok(first)) => first,
                        // Readiness is cleared: the next poll waits for bytes.
                        None => continue,
                        // The client closed or reset an idle connection: it just ends, as
                        // hyper ends one (no error to log).
                        Some(Err(())) => {
                            this.phase = Phase::Done;
                            return Poll::Ready(Ok(()));
                        }
                    };
                    let Phase::Parked(stream, channel, service) =
                        std::mem::replace(&mut this.phase, Phase::Done)
                    else {
                        return Poll::Ready(Ok(()));
                    };
                    this.state.read_waiting.store(false, Ordering::Relaxed);
                    this.phase =
                        Phase::Serving(serve(&this.settings, stream, channel, service, first));
                }
                Phase::Done => return Poll::Ready(Ok(())),
            }
        }
    }
}
