//! One HTTP/1.1 connection: hyper over the socket, with the two timers nginx users expect.
//!
//! - `keep_alive`: how long a connection may sit idle, with no request in progress and no
//!   byte of a new one arriving.
//! - `header_read`: how long a request head may take from its first byte (slowloris).
//!
//! hyper's own header timer allocates and registers a timer for every request. Here one
//! timer per connection ticks at a fraction of the shorter timeout and reads three counters
//! that the request path keeps with relaxed atomics: bytes arrived ([`TrackedIo`]), requests
//! started ([`ConnService`]) and responses finished ([`ConnBody`]'s drop). The timeouts are
//! so enforced to within one tick.

use super::h2send;
use super::service::{FrontFuture, Fronted, Serve};
use crate::body::{BoxError, GateBody, ObservedBody};
use crate::static_files::sendfile::Channel;
use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// What the request path tells the connection's watchdog.
#[derive(Default)]
pub(crate) struct ConnState {
    got_bytes: AtomicBool,
    wrote_bytes: AtomicBool,
    started: AtomicU64,
    in_flight: AtomicU32,
    /// Polls of an HTTP/2-over-TLS connection so far (see [`super::coalesce`]).
    pub(crate) epoch: std::sync::atomic::AtomicU32,
    /// Requests whose Service has not produced a response head yet (a proxy waiting on its
    /// upstream): their silence is the Service's to time out, not the watchdog's.
    awaiting_head: AtomicU32,
    /// On a connection that may speak HTTP/2: what its response bodies may hold unsent.
    h2_send: Option<h2send::ConnBudget>,
    /// On a plain HTTP/1.1 connection that may park (see [`super::park`]): hyper's last
    /// read found the socket empty; and hyper is being let go, so its shutdown must leave
    /// the socket open.
    pub(crate) read_waiting: AtomicBool,
    /// On every connection: the last write was refused (bytes wait on the client).
    pub(crate) write_waiting: AtomicBool,
    pub(crate) parking: AtomicBool,
    /// A request may upgrade (`Upgrade`, or CONNECT): hyper then hands its socket
    /// to the upgrade when it shuts down, even when the response refused it, so this
    /// connection never parks.
    pub(crate) upgrade_asked: AtomicBool,
    /// Park only once more requests than this have started: hyper may still be reading a
    /// request's body after its response ends (a shutdown then would end keep-alive, or
    /// leave body bytes to be read as a head), but it has finished with it once the next
    /// head is read. Also set when a new hyper takes over (see `super::park`).
    pub(crate) hold_until: AtomicU64,
    /// hyper could not read a head as a request and answered it with this status itself
    /// (0: it did not); set as the connection ends, logged as its Service is dropped.
    pub(crate) unread: AtomicU16,
}

impl ConnState {
    /// Requests started on the connection so far.
    pub(crate) fn started(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }

    /// Requests whose response body has not ended.
    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }
}

/// A connection's byte stream: TCP, or TLS over TCP (which can't sendfile).
pub(crate) trait Socket: AsyncRead + AsyncWrite + Unpin {
    fn tcp(&self) -> Option<&TcpStream>;
}

impl Socket for TcpStream {
    fn tcp(&self) -> Option<&TcpStream> {
        Some(self)
    }
}

impl Socket for tokio_rustls::server::TlsStream<TcpStream> {
    fn tcp(&self) -> Option<&TcpStream> {
        None
    }
}

pin_project_lite::pin_project! {
    /// The socket as hyper sees it: reads are noted for the watchdog, and writes that
    /// carry a file marker go out with `sendfile` (see [`super::sendfile`]).
    pub(crate) struct TrackedIo<S> {
        #[pin]
        stream: S,
        state: Arc<ConnState>,
        sendfile: Option<Arc<Channel>>,
        // May park: reads and writes are noted in `state`, and `prefix` is read first
        // (bytes a parked hyper had read and not used).
        park: bool,
        prefix: Bytes,
    }
}

impl<S: Socket> TrackedIo<S> {
    pub(crate) fn new(
        stream: S,
        state: Arc<ConnState>,
        sendfile: Option<Arc<Channel>>,
    ) -> TokioIo<Self> {
        TokioIo::new(TrackedIo {
            stream,
            state,
            sendfile,
            park: false,
            prefix: Bytes::new(),
        })
    }

    /// The socket of a connection that may park, with `prefix` to be read before it.
    pub(crate) fn parkable(
        stream: S,
        state: Arc<ConnState>,
        sendfile: Option<Arc<Channel>>,
        prefix: Bytes,
    ) -> TokioIo<Self> {
        TokioIo::new(TrackedIo {
            stream,
            state,
            sendfile,
            park: true,
            prefix,
        })
    }

    /// The socket and its sendfile channel back, once hyper has let go of them.
    pub(crate) fn into_parts(self) -> (S, Option<Arc<Channel>>) {
        (self.stream, self.sendfile)
    }
}

impl<S: Socket> AsyncRead for TrackedIo<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        if !this.prefix.is_empty() {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix.split_to(n));
            this.state.got_bytes.store(true, Ordering::Relaxed);
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let res = this.stream.poll_read(cx, buf);
        if buf.filled().len() > before {
            this.state.got_bytes.store(true, Ordering::Relaxed);
        }
        if *this.park {
            this.state
                .read_waiting
                .store(res.is_pending(), Ordering::Relaxed);
        }
        res
    }
}

/// Writes of at most this many bytes in several pieces (a small response's head and body)
/// are copied into one and sent with `send`: in the kernel, `writev`'s own cost (the iovec
/// import, `vfs_writev`) is more than copying a few KiB, about 1.5% of a proxied 1 KiB
/// request's CPU in a profile.
const GATHER_MAX: usize = 4096;

/// Plain TCP's vectored write: one `send` of the pieces copied together when they are
/// few bytes, else `writev`. A partial write reports what was sent, as `writev` would.
fn poll_gathered<S: Socket>(
    mut stream: Pin<&mut S>,
    cx: &mut Context<'_>,
    bufs: &[io::IoSlice<'_>],
) -> Poll<io::Result<usize>> {
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    if bufs.len() < 2 || total > GATHER_MAX {
        return stream.poll_write_vectored(cx, bufs);
    }
    // Per thread, so that nothing is zeroed or allocated per write.
    thread_local! {
        static ONE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let gathered = ONE.try_with(|one| {
        let mut one = one.try_borrow_mut().ok()?;
        one.clear();
        for b in bufs {
            one.extend_from_slice(b);
        }
        Some(stream.as_mut().poll_write(cx, &one))
    });
    match gathered {
        Ok(Some(res)) => res,
        _ => stream.poll_write_vectored(cx, bufs),
    }
}

fn note_write(state: &ConnState, res: &Poll<io::Result<usize>>) {
    // On every connection, not only those that may park: the watchdog reads it too.
    state
        .write_waiting
        .store(res.is_pending(), Ordering::Relaxed);
    if let Poll::Ready(Ok(n)) = res {
        if *n > 0 {
            state.wrote_bytes.store(true, Ordering::Relaxed);
        }
    }
}

impl<S: Socket> AsyncWrite for TrackedIo<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        let tcp = this.stream.as_ref().get_ref().tcp();
        let res = match (this.sendfile, tcp) {
            (Some(ch), Some(tcp)) => match ch.poll_write(tcp, cx, &[io::IoSlice::new(buf)]) {
                Some(res) => res,
                None => this.stream.poll_write(cx, buf),
            },
            _ => this.stream.poll_write(cx, buf),
        };
        note_write(this.state, &res);
        res
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        let tcp = this.stream.as_ref().get_ref().tcp();
        let res = match (this.sendfile, tcp) {
            (Some(ch), Some(tcp)) => match ch.poll_write(tcp, cx, bufs) {
                Some(res) => res,
                None => poll_gathered(this.stream, cx, bufs),
            },
            (None, Some(_)) => poll_gathered(this.stream, cx, bufs),
            _ => this.stream.poll_write_vectored(cx, bufs),
        };
        note_write(this.state, &res);
        res
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().stream.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.project();
        if *this.park && this.state.parking.load(Ordering::Relaxed) {
            // hyper is being let go while the connection stays open (see super::park).
            return Poll::Ready(Ok(()));
        }
        // A shutdown fails only on a socket already broken (TCP: ENOTCONN; TLS: its
        // close_notify's write), which the connection's end leaves as it is. hyper would
        // return that error in place of a head's it answered itself (400, 414, 431), and
        // the head's access-log line is written from that one.
        this.stream.poll_shutdown(cx).map(|done| {
            if let Err(e) = done {
                tracing::trace!("shutdown: {e}");
            }
            Ok(())
        })
    }
}

/// A listener's Service as one connection's hyper Service: counts requests in and
/// responses out.
pub(crate) struct ConnService<T: Serve> {
    pub(crate) svc: Fronted<T>,
    pub(crate) state: Arc<ConnState>,
    pub(crate) conn: crate::proxy::ConnInfo,
}

impl<T: Serve> ConnService<T> {
    /// The Service of a new connection from `peer`, and the state its watchdog reads;
    /// `h2_send` on one that may speak HTTP/2.
    pub(crate) fn new(
        svc: Fronted<T>,
        peer: std::net::SocketAddr,
        https: bool,
        h2_send: Option<&Arc<h2send::Pool>>,
    ) -> (Arc<ConnState>, ConnService<T>) {
        let state = Arc::new(ConnState {
            h2_send: h2_send.map(|p| h2send::ConnBudget::new(p.clone())),
            ..ConnState::default()
        });
        let svc = ConnService {
            svc,
            state: state.clone(),
            conn: crate::proxy::ConnInfo {
                peer: Some(peer),
                https,
            },
        };
        (state, svc)
    }
}

impl<T: Serve> Drop for ConnService<T> {
    fn drop(&mut self) {
        // A head hyper answered itself never reached the Service: it is logged here, where
        // the listener's Service and the peer are, and where it costs an idle connection
        // nothing more.
        let status = self.state.unread.swap(0, Ordering::Relaxed);
        if let Ok(status) = http::StatusCode::from_u16(status) {
            self.svc.unread(status, self.conn);
        }
    }
}

impl<T: Serve> hyper::service::Service<Request<hyper::body::Incoming>> for ConnService<T> {
    type Response = Response<ConnBody>;
    type Error = Infallible;
    type Future = ConnFuture<T::Future>;

    fn call(&self, mut req: Request<hyper::body::Incoming>) -> Self::Future {
        let started = self.state.started.fetch_add(1, Ordering::Relaxed) + 1;
        if !hyper::body::Body::is_end_stream(req.body()) {
            self.state.hold_until.store(started, Ordering::Relaxed);
        }
        self.state.in_flight.fetch_add(1, Ordering::Relaxed);
        self.state.awaiting_head.fetch_add(1, Ordering::Relaxed);
        // hyper's own mark of a request that may upgrade (an `Upgrade` header on HTTP/1.1,
        // or CONNECT): a look at extensions that are usually empty.
        if req
            .extensions()
            .get::<hyper::upgrade::OnUpgrade>()
            .is_some()
        {
            self.state.upgrade_asked.store(true, Ordering::Relaxed);
            if let Some(count) = self.svc.count() {
                req.extensions_mut().insert(count);
            }
        }
        let h2 = req.version() == http::Version::HTTP_2;
        ConnFuture {
            inner: self.svc.serve(req, self.conn),
            state: Some(self.state.clone()),
            h2,
            sendfile: self.svc.sendfile(),
        }
    }
}

pin_project_lite::pin_project! {
    pub(crate) struct ConnFuture<F> {
        #[pin]
        inner: FrontFuture<F>,
        state: Option<Arc<ConnState>>,
        h2: bool,
        sendfile: bool,
    }

    impl<F> PinnedDrop for ConnFuture<F> {
        fn drop(this: Pin<&mut Self>) {
            // Dropped before a response was made (the connection went away).
            let this = this.project();
            if let Some(state) = this.state.take() {
                state.in_flight.fetch_sub(1, Ordering::Relaxed);
                state.awaiting_head.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

impl<F> Future for ConnFuture<F>
where
    F: Future<Output = (http::response::Parts, ObservedBody)>,
{
    type Output = Result<Response<ConnBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let (parts, mut inner) = std::task::ready!(this.inner.poll_parts(cx));
        let state = this.state.take();
        if let Some(s) = &state {
            s.awaiting_head.fetch_sub(1, Ordering::Relaxed);
        }
        let body = inner.get_mut();
        // This body is written to the socket as it is, so a file may go by sendfile, as long
        // as hyper will send all of it: a marker it cut short at Content-Length would leave
        // its extent pending forever.
        if let (true, GateBody::File(f)) = (*this.sendfile, &mut *body) {
            let declared = parts
                .headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
            if declared == Some(f.remaining()) {
                f.allow_sendfile();
            }
        }
        // An HTTP/2 body that reads as it goes (not one already in memory) takes what it
        // reads from the connection's budget.
        let gate = match (&*body, &state) {
            _ if !*this.h2 => None,
            (GateBody::Empty | GateBody::Full(_), _) | (_, None) => None,
            (_, Some(s)) => s.h2_send.as_ref().map(|b| b.gate()),
        };
        Poll::Ready(Ok(Response::from_parts(
            parts,
            ConnBody { inner, state, gate },
        )))
    }
}

type Inner = ObservedBody;

/// A response body whose drop marks the end of the request for the watchdog.
pub(crate) struct ConnBody {
    inner: Inner,
    state: Option<Arc<ConnState>>,
    gate: Option<Box<h2send::Gate>>,
}

impl ConnBody {
    /// An HTTP/3 response body: one that reads as it goes takes what it reads from its
    /// connection's budget, as an HTTP/2 body does (see [`h2send`]).
    pub(crate) fn http3(mut inner: Inner, budget: &h2send::ConnBudget) -> ConnBody {
        let gate = match inner.get_mut() {
            GateBody::Empty | GateBody::Full(_) => None,
            _ => Some(budget.gate()),
        };
        ConnBody {
            inner,
            state: None,
            gate,
        }
    }
}

impl Drop for ConnBody {
    fn drop(&mut self) {
        if let Some(state) = self.state.take() {
            state.in_flight.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Body for ConnBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        match this.gate.as_mut() {
            None => Pin::new(&mut this.inner).poll_frame(cx),
            Some(gate) => poll_gated(gate, &mut this.inner, cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream() && self.gate.as_ref().is_none_or(|g| g.unsent() == 0)
    }

    fn size_hint(&self) -> SizeHint {
        match &self.gate {
            Some(g) if g.unsent() > 0 => {
                let (unsent, inner) = (g.unsent() as u64, self.inner.size_hint());
                let mut h = SizeHint::new();
                h.set_lower(inner.lower() + unsent);
                if let Some(u) = inner.upper() {
                    h.set_upper(u + unsent);
                }
                h
            }
            _ => self.inner.size_hint(),
        }
    }
}

/// An HTTP/2 body's next frame: the next slice of what was read, once the last one has
/// been written; else a read, once the budgets grant its memory (a file's no larger than
/// was granted).
fn poll_gated(
    gate: &mut h2send::Gate,
    inner: &mut Inner,
    cx: &mut Context<'_>,
) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
    use crate::static_files::body::{CHUNK, READ_PAD};
    if let Some(slice) = std::task::ready!(gate.poll_slice(cx)) {
        return Poll::Ready(Some(Ok(Frame::data(slice))));
    }
    let (want, pad) = match inner.get_mut() {
        GateBody::File(f) => (f.remaining().min(CHUNK as u64) + READ_PAD as u64, READ_PAD),
        _ => {
            let upper = inner.size_hint().upper();
            (
                upper.map_or(h2send::UNSIZED_GRANT as u64, |u| {
                    u.min(h2send::UNSIZED_GRANT as u64)
                }),
                0,
            )
        }
    };
    let grant = std::task::ready!(gate.poll_grant(cx, want as u32));
    if let GateBody::File(f) = inner.get_mut() {
        // Short of the rest of the file, whole pages, so that the next read starts on a page
        // too: the kernel's copy from mid-page offsets took 1.8 times the samples.
        let room = grant.saturating_sub(pad);
        if room as u64 >= f.remaining() {
            f.set_max_chunk(room);
        } else {
            f.set_max_chunk((room & !(READ_PAD - 1)).max(READ_PAD));
        }
    }
    let res = std::task::ready!(Pin::new(&mut *inner).poll_frame(cx));
    let res = match res {
        Some(Ok(frame)) => match frame.into_data() {
            // Nothing held: the grant is kept for the next read.
            Ok(data) if data.is_empty() => Some(Ok(Frame::data(data))),
            Ok(data) => {
                let charge = data.len() + pad;
                Some(Ok(Frame::data(gate.lease(data, charge))))
            }
            Err(frame) => {
                gate.release();
                Some(Ok(frame))
            }
        },
        other => {
            gate.release();
            other
        }
    };
    Poll::Ready(res)
}

/// The per-connection timer's view of the connection, advanced once per tick.
pub(crate) struct Watchdog {
    state: Arc<ConnState>,
    tick: Duration,
    keep_alive: u32,
    header_read: u32,
    last_started: u64,
    idle_ticks: u32,
    head_ticks: Option<u32>,
    stalled_ticks: u32,
}

/// What the connection should do after a tick.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Continue,
    /// Idle past keep_alive, a head slower than header_read, or a response that made no
    /// progress for keep_alive (like nginx's send_timeout): close it.
    Close,
}

impl Watchdog {
    pub(crate) fn new(state: Arc<ConnState>, keep_alive: Duration, header_read: Duration) -> Self {
        // Four ticks to the shorter timeout: each is enforced within a quarter of it.
        let shorter = keep_alive.min(header_read);
        let tick = (shorter / 4).clamp(Duration::from_millis(5), Duration::from_secs(1));
        let ticks = |d: Duration| (d.as_nanos() / tick.as_nanos()).max(1) as u32;
        Watchdog {
            state,
            tick,
            keep_alive: ticks(keep_alive),
            header_read: ticks(header_read),
            last_started: 0,
            idle_ticks: 0,
            head_ticks: None,
            stalled_ticks: 0,
        }
    }

    /// The state the connection's requests report to.
    pub(crate) fn state(&self) -> &ConnState {
        &self.state
    }

    pub(crate) fn tick(&self) -> Duration {
        self.tick
    }

    pub(crate) fn on_tick(&mut self) -> Verdict {
        let s = &self.state;
        let got_bytes = s.got_bytes.swap(false, Ordering::Relaxed);
        let wrote = s.wrote_bytes.swap(false, Ordering::Relaxed);
        let started = s.started.load(Ordering::Relaxed);
        let busy = s.in_flight.load(Ordering::Relaxed) > 0;
        if started != self.last_started || wrote {
            // A head completed, or bytes went out: hyper drops a body when it has handed
            // out its last chunk, which may still be being written (a sendfile extent can
            // be megabytes), so writes count as activity in their own right.
            self.last_started = started;
            self.idle_ticks = 0;
            self.head_ticks = None;
            self.stalled_ticks = 0;
            return Verdict::Continue;
        }
        if busy && s.awaiting_head.load(Ordering::Relaxed) > 0 {
            // Waiting on the Service (an upstream), which has timeouts of its own.
            self.idle_ticks = 0;
            self.head_ticks = None;
            self.stalled_ticks = 0;
            return Verdict::Continue;
        }
        if busy {
            // A response in progress that neither reads nor writes: a client that stopped
            // reading, or a handler that stopped producing.
            self.idle_ticks = 0;
            self.head_ticks = None;
            // Bytes read are progress (an upload the response waits on), unless the
            // response's own bytes wait on a client that doesn't read them: one body byte a
            // tick then held the connection, and the upstream's behind it, for ever.
            let blocked = s.write_waiting.load(Ordering::Relaxed);
            self.stalled_ticks += if got_bytes && !blocked { 0 } else { 1 };
            return if self.stalled_ticks > self.keep_alive {
                Verdict::Close
            } else {
                Verdict::Continue
            };
        }
        self.stalled_ticks = 0;
        if got_bytes || self.head_ticks.is_some() {
            // Bytes of a head that hasn't completed: header_read runs from the first tick
            // that saw them.
            let t = self.head_ticks.get_or_insert(0);
            *t += 1;
            return if *t > self.header_read {
                Verdict::Close
            } else {
                Verdict::Continue
            };
        }
        self.idle_ticks += 1;
        if self.idle_ticks > self.keep_alive {
            Verdict::Close
        } else {
            Verdict::Continue
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket that takes at most `room` bytes a write and notes how it was written to.
    #[derive(Default)]
    struct Recorder {
        room: usize,
        sends: Vec<Vec<u8>>,
        vectored: usize,
    }

    impl AsyncRead for Recorder {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    impl AsyncWrite for Recorder {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let n = buf.len().min(self.room);
            self.sends.push(buf[..n].to_vec());
            Poll::Ready(Ok(n))
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[io::IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            self.vectored += 1;
            Poll::Ready(Ok(bufs
                .iter()
                .map(|b| b.len())
                .sum::<usize>()
                .min(self.room)))
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    impl Socket for Recorder {
        fn tcp(&self) -> Option<&TcpStream> {
            None
        }
    }

    fn gather(room: usize, pieces: &[&[u8]]) -> (Recorder, usize) {
        let mut r = Recorder {
            room,
            ..Default::default()
        };
        let bufs: Vec<io::IoSlice<'_>> = pieces.iter().map(|p| io::IoSlice::new(p)).collect();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let n = match poll_gathered(Pin::new(&mut r), &mut cx, &bufs) {
            Poll::Ready(Ok(n)) => n,
            other => panic!("{other:?}"),
        };
        (r, n)
    }

    #[test]
    fn a_small_head_and_body_go_out_in_one_send() {
        let (r, n) = gather(usize::MAX, &[b"HTTP/1.1 200 OK\r\n\r\n", &[7u8; 1024]]);
        assert_eq!(n, 19 + 1024);
        assert_eq!(r.vectored, 0);
        assert_eq!(r.sends.len(), 1);
        assert!(r.sends[0].starts_with(b"HTTP/1.1 200 OK\r\n\r\n"));
        assert!(r.sends[0][19..].iter().all(|&b| b == 7));
        // A short write reports what went, as writev would.
        let (r, n) = gather(10, &[b"abcdefgh", b"ijklmnop"]);
        assert_eq!((n, r.sends[0].as_slice()), (10, &b"abcdefghij"[..]));
    }

    #[test]
    fn large_or_single_writes_stay_vectored() {
        let big = vec![1u8; GATHER_MAX];
        let (r, n) = gather(usize::MAX, &[b"head", &big]);
        assert_eq!((n, r.vectored, r.sends.len()), (GATHER_MAX + 4, 1, 0));
        let (r, _) = gather(usize::MAX, &[b"only"]);
        assert_eq!((r.vectored, r.sends.len()), (1, 0));
    }

    /// A client that sends a head hyper can't read and resets the connection once it has
    /// the 400: its shutdown fails.
    struct Gone(Option<&'static [u8]>);

    impl AsyncRead for Gone {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            if let Some(head) = self.0.take() {
                buf.put_slice(head);
            }
            Poll::Ready(Ok(()))
        }
    }

    impl AsyncWrite for Gone {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()))
        }
    }

    impl Socket for Gone {
        fn tcp(&self) -> Option<&TcpStream> {
            None
        }
    }

    /// hyper's error is still the head's when the client resets after the 400: the line
    /// that logs it is written from that error.
    #[tokio::test]
    async fn a_client_gone_after_hypers_400_still_gets_its_line() {
        for (head, status) in [
            (&b"GET /a b c HTTP/1.1\r\n\r\n"[..], 400),
            (&b"BAD\x01 / HTTP/1.1\r\nHost: a\r\n\r\n"[..], 400),
        ] {
            let io = TrackedIo::new(Gone(Some(head)), Arc::new(ConnState::default()), None);
            let served = hyper::server::conn::http1::Builder::new()
                .serve_connection(
                    io,
                    hyper::service::service_fn(|_| async {
                        Ok::<_, Infallible>(Response::new(http_body_util::Empty::<Bytes>::new()))
                    }),
                )
                .await;
            let e = served.expect_err("hyper could not read the head");
            assert_eq!(
                super::super::unread_status(&e).map(|s| s.as_u16()),
                Some(status),
                "{e}"
            );
        }
    }

    fn dog(keep_alive_ms: u64, header_ms: u64) -> (Watchdog, Arc<ConnState>) {
        let state = Arc::new(ConnState::default());
        let d = Watchdog::new(
            state.clone(),
            Duration::from_millis(keep_alive_ms),
            Duration::from_millis(header_ms),
        );
        (d, state)
    }

    #[test]
    fn idle_closes_after_keep_alive_ticks() {
        let (mut d, _) = dog(400, 10_000);
        assert_eq!(d.tick(), Duration::from_millis(100));
        let verdicts: Vec<_> = (0..6).map(|_| d.on_tick()).collect();
        assert_eq!(verdicts.iter().position(|v| *v == Verdict::Close), Some(4));
    }

    #[test]
    fn a_slow_head_closes_after_header_read_even_with_a_long_keep_alive() {
        let (mut d, s) = dog(60_000, 400);
        for i in 0..10 {
            s.got_bytes.store(true, Ordering::Relaxed);
            if d.on_tick() == Verdict::Close {
                assert_eq!(i, 4);
                return;
            }
        }
        panic!("never closed");
    }

    #[test]
    fn writes_keep_it_open_and_a_stalled_response_is_closed() {
        let (mut d, s) = dog(200, 200);
        // Writing the tail of a response after hyper dropped its body.
        for _ in 0..20 {
            s.wrote_bytes.store(true, Ordering::Relaxed);
            assert_eq!(d.on_tick(), Verdict::Continue);
        }
        // A response in flight that stops moving.
        s.in_flight.store(1, Ordering::Relaxed);
        let verdicts: Vec<_> = (0..8).map(|_| d.on_tick()).collect();
        assert_eq!(verdicts.iter().position(|v| *v == Verdict::Close), Some(4));
    }

    #[test]
    fn a_client_trickling_its_body_while_not_reading_the_response_is_closed() {
        let (mut d, s) = dog(200, 200);
        s.in_flight.store(1, Ordering::Relaxed);
        // An upload the response waits on: its bytes are progress.
        for _ in 0..20 {
            s.got_bytes.store(true, Ordering::Relaxed);
            assert_eq!(d.on_tick(), Verdict::Continue);
        }
        // The response's bytes wait on the client: its trickle is not.
        s.write_waiting.store(true, Ordering::Relaxed);
        let verdicts: Vec<_> = (0..8)
            .map(|_| {
                s.got_bytes.store(true, Ordering::Relaxed);
                d.on_tick()
            })
            .collect();
        assert_eq!(verdicts.iter().position(|v| *v == Verdict::Close), Some(4));
    }

    #[test]
    fn requests_and_responses_in_flight_keep_it_open() {
        let (mut d, s) = dog(200, 200);
        s.in_flight.store(1, Ordering::Relaxed);
        for _ in 0..20 {
            s.wrote_bytes.store(true, Ordering::Relaxed);
            assert_eq!(d.on_tick(), Verdict::Continue);
        }
        s.in_flight.store(0, Ordering::Relaxed);
        for _ in 0..3 {
            s.started.fetch_add(1, Ordering::Relaxed);
            s.got_bytes.store(true, Ordering::Relaxed);
            assert_eq!(d.on_tick(), Verdict::Continue);
        }
    }
}
