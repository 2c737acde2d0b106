//! An upstream connection: connecting, one exchange (the head written, the response's
//! read), and the reads a body asks of it.

use super::*;

/// An upstream connection between exchanges. Boxed once when connected, so that the
/// response body holding it stays small: every response is moved several times on its way
/// to the client, and this is the largest body it can carry.
pub(crate) type Conn = Box<ConnState>;

pub(crate) struct ConnState {
    pub(super) io: TcpStream,
    /// Read buffer: empty between exchanges.
    pub(super) buf: BytesMut,
    /// The buffer of the last request head sent, kept for its capacity.
    pub(super) wbuf: Vec<u8>,
    /// The response timer, left registered from one exchange to the next: see [`within`].
    pub(super) timer: Pin<Box<tokio::time::Sleep>>,
    /// The worker slot whose runtime the timer belongs to.
    pub(super) slot: usize,
}

/// The answer did not come before the deadline.
pub(crate) struct TimedOut;

impl ConnState {
    /// Nothing to read and not closed.
    pub(crate) fn is_quiet(&self) -> bool {
        matches!(self.io.try_read(&mut [0u8; 1]), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

/// Sends a bodiless request, on `conn` (checked out of `pool` when the head was encoded)
/// or a new connection, and returns the response once its head has arrived.
///
/// A pooled connection may have been closed by the upstream since its last use; when it
/// fails before a byte of the response arrives the request goes again, once, on a new
/// connection. That is safe only because the request is idempotent and has no body.
///
/// Past `deadline` without a response head, `TimedOut` (the connection is dropped).
pub(crate) async fn send(
    pool: &Arc<Pool>,
    authority: &Authority,
    conn: Option<Conn>,
    out: &mut Outgoing,
    deadline: tokio::time::Instant,
) -> Result<Result<Response<Body>, SendError>, TimedOut> {
    let mut pooled = conn;
    loop {
        let (mut conn, reused) = match pooled.take() {
            Some(mut c) => {
                // A timer is its runtime's: polled once that runtime has shut down, it
                // panics. A pool is another runtime's only through `pools.first()`, the
                // fallback for a slot without pools of its own.
                let slot = crate::rt::worker_slot();
                if c.slot != slot {
                    c.timer = Box::pin(tokio::time::sleep_until(deadline));
                    c.slot = slot;
                }
                (c, true)
            }
            None => {
                // Boxed, timer and all: a new connection is rare, and the future of every
                // request would otherwise make room for it.
                let made = Box::pin(tokio::time::timeout_at(
                    deadline,
                    connect(authority, pool.settings(), deadline),
                ))
                .await;
                match made {
                    Ok(Ok(c)) => (c, false),
                    Ok(Err(e)) => return Ok(Err(e)),
                    Err(_) => return Err(TimedOut),
                }
            }
        };
        let ConnState { io, buf, timer, .. } = &mut *conn;
        let max_buf = pool.settings().max_buf;
        let exchanged = within(
            timer,
            deadline,
            exchange(io, buf, &out.bytes, max_buf, &mut out.spare),
        )
        .await
        .ok_or(TimedOut)?;
        match exchanged {
            Ok(head) => {
                // The head's buffer goes with the connection, for the next request's.
                conn.wbuf = std::mem::take(&mut out.bytes);
                return Ok(head
                    .into_response(conn, pool, out.head_request)
                    .map_err(SendError::Io));
            }
            Err(Failed::BeforeResponse(_)) if reused => {}
            Err(Failed::BeforeResponse(e) | Failed::Other(e)) => return Ok(Err(SendError::Io(e))),
        }
    }
}

pin_project_lite::pin_project! {
    /// Runs `fut` until `deadline`, on a connection's own timer (`None` past it). The timer
    /// is not taken out of the runtime's timer wheel between exchanges: it stays at an
    /// earlier exchange's deadline, never later than this one's (deadlines only grow on a
    /// connection), and when it fires before this deadline it is set to it. Registering a
    /// timer for each request and removing it after cost ~450 instructions a proxied
    /// request (callgrind); now it is one poll. Once per `response_timeout` a connection's
    /// timer fires early and is set again; if the connection is idle then, the wake-up goes,
    /// for nothing, to the task that last polled it (whose memory that waker keeps until
    /// then, or until the connection's next exchange: at most one task per idle connection).
    struct Within<'a, F> {
        timer: &'a mut Pin<Box<tokio::time::Sleep>>,
        deadline: tokio::time::Instant,
        #[pin]
        fut: F,
    }
}

fn within<F: Future>(
    timer: &mut Pin<Box<tokio::time::Sleep>>,
    deadline: tokio::time::Instant,
    fut: F,
) -> Within<'_, F> {
    if timer.deadline() > deadline {
        timer.as_mut().reset(deadline);
    }
    Within {
        timer,
        deadline,
        fut,
    }
}

impl<F: Future> Future for Within<'_, F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(v) = this.fut.poll(cx) {
            return Poll::Ready(Some(v));
        }
        loop {
            ready!(this.timer.as_mut().poll(cx));
            if tokio::time::Instant::now() >= *this.deadline {
                return Poll::Ready(None);
            }
            this.timer.as_mut().reset(*this.deadline);
        }
    }
}

impl ConnState {
    /// The buffer the connection's last request head was encoded in, for the next one's.
    pub(crate) fn take_wbuf(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.wbuf)
    }
}

pub(super) async fn connect(
    authority: &Authority,
    settings: &Settings,
    deadline: tokio::time::Instant,
) -> Result<Conn, SendError> {
    let io = crate::proxy::pool::connect_tcp(authority, settings).await?;
    Ok(Box::new(ConnState {
        timer: Box::pin(tokio::time::sleep_until(deadline)),
        slot: crate::rt::worker_slot(),
        io,
        buf: BytesMut::with_capacity(INIT_BUF),
        wbuf: Vec::new(),
    }))
}

pub(super) enum Failed {
    /// The connection failed before any of the response: on a reused connection, the
    /// upstream had most likely closed it while it was idle.
    BeforeResponse(io::Error),
    Other(io::Error),
}

pub(super) async fn exchange(
    sock: &mut TcpStream,
    buf: &mut BytesMut,
    head: &[u8],
    max_buf: usize,
    spare: &mut HeaderMap,
) -> Result<Head, Failed> {
    sock.write_all(head).await.map_err(Failed::BeforeResponse)?;
    buf.clear();
    let mut received = false;
    loop {
        if !buf.is_empty() {
            match final_head(buf, spare).map_err(Failed::Other)? {
                Some(head) => return Ok(head),
                None if buf.len() >= max_buf => {
                    return Err(Failed::Other(invalid("response head too large")))
                }
                None => {}
            }
        }
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(INIT_BUF);
        }
        let n = tokio_util::io::read_buf(sock, buf).await;
        match n {
            Ok(0) if !received => {
                return Err(Failed::BeforeResponse(io::ErrorKind::UnexpectedEof.into()))
            }
            Ok(0) => return Err(Failed::Other(invalid("connection closed in response head"))),
            Ok(_) => received = true,
            Err(e) if !received => return Err(Failed::BeforeResponse(e)),
            Err(e) => return Err(Failed::Other(e)),
        }
    }
}

impl ConnState {
    /// Reads what the socket already holds, up to `upto` buffered bytes, without waiting.
    /// The read is made directly: tokio's cached readiness may not yet know of bytes that
    /// came just after the head.
    pub(super) fn read_now(&mut self, upto: usize) {
        use std::io::Read;
        let sock = socket2::SockRef::from(&self.io);
        while self.buf.len() < upto {
            let have = self.buf.len();
            // One byte more than the message, to see bytes past it.
            self.buf.resize(upto + 1, 0);
            let got = (&*sock).read(&mut self.buf[have..]);
            let n = got.unwrap_or(0);
            self.buf.truncate(have + n);
            if n == 0 {
                return;
            }
        }
    }

    /// Reads until `upto` bytes are buffered (or one more, which is wrong framing).
    pub(super) async fn read_to(&mut self, upto: usize) -> io::Result<()> {
        use tokio::io::AsyncReadExt;
        while self.buf.len() < upto {
            self.buf.reserve(upto + 1 - self.buf.len());
            if self.io.read_buf(&mut self.buf).await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        Ok(())
    }
}
