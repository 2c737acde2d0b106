//! The common proxied exchange — an idempotent request with no body, to a plain-HTTP/1.1
//! upstream — done in the request's own task.
//!
//! hyper's client drives each upstream connection from a task of its own and hands the
//! request and response across a channel: about 17,700 instructions per proxied 1 KiB
//! response, nearly half of the request's. Here the request's task writes the head and
//! parses the response's, and the response body reads the socket itself, so there is no
//! second task, no channel and no extra wake-up. Requests with a body, upgrades and
//! everything else keep hyper's client ([`super::pool`]).
//!
//! Framing follows RFC 9112 §6.3; 1xx responses are skipped (RFC 9110 §15.2), as
//! hyper's client does.

#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;

use super::headers::Forwarding;
use super::pool::{Pool, SendError, Settings};
use bytes::{Buf, Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, HOST, TRANSFER_ENCODING};
use http::uri::Authority;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Response, StatusCode, Version};
use std::future::Future;
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// As many response header fields as hyper's client accepts.
const MAX_HEADERS: usize = 100;
/// A chunk-size line or trailer field longer than this is an error, not a wait for more.
const MAX_LINE: usize = 4096;
const INIT_BUF: usize = 8192;
/// The most a body read asks for at once.
const READ_CHUNK: usize = 64 * 1024;
/// A body dropped unread with at most this much of it left is read to its end, so that
/// its connection can carry the next request (see `Body::salvage`).
pub(super) const SALVAGE_MAX: u64 = 64 * 1024;
/// How long the rest of such a body may take to arrive before its connection is closed.
pub(super) const SALVAGE_TIME: std::time::Duration = std::time::Duration::from_secs(1);

/// An upstream connection between exchanges. Boxed once when connected, so that the
/// response body holding it stays small: every response is moved several times on its way
/// to the client, and this is the largest body it can carry.
pub(crate) type Conn = Box<ConnState>;

pub(crate) struct ConnState {
    io: TcpStream,
    /// Read buffer: empty between exchanges.
    buf: BytesMut,
    /// The buffer of the last request head sent, kept for its capacity.
    wbuf: Vec<u8>,
    /// The response timer, left registered from one exchange to the next: see [`within`].
    timer: Pin<Box<tokio::time::Sleep>>,
    /// The worker slot whose runtime the timer belongs to.
    slot: usize,
}

/// The answer did not come before the deadline.
pub(crate) struct TimedOut;

impl ConnState {
    /// Nothing to read and not closed.
    pub(crate) fn is_quiet(&self) -> bool {
        matches!(self.io.try_read(&mut [0u8; 1]), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

/// A request head encoded for an upstream (RFC 9112 §3): the request-line, `Host` as the
/// first field (§3.2 asks for it first), the other fields, the forwarding fields when they
/// are written here ([`Forwarding`]), the empty line.
///
/// It is encoded while the request is first handled, so that nothing of the client's
/// request — whose fields are slices of the client connection's read buffer — outlives
/// that call: hyper reads the connection again while the response is awaited, and a
/// buffer still shared would have to be a new one.
pub(crate) struct Outgoing {
    bytes: Vec<u8>,
    /// Where the `Host` field line lies, to put another upstream's in its place.
    host: std::ops::Range<usize>,
    head_request: bool,
    /// An empty map with room, to take the response's fields: see [`Outgoing::recycle`].
    spare: HeaderMap,
}

impl Outgoing {
    /// Encodes into `buf` (cleared; given for its capacity). `headers` are sent as they
    /// are, but for `Host`, which is `host`, and the fields `fwd` replaces.
    pub(crate) fn encode(
        mut buf: Vec<u8>,
        method: &Method,
        path: &str,
        host: Option<&HeaderValue>,
        headers: &HeaderMap,
        fwd: Option<&Forwarding>,
    ) -> Outgoing {
        buf.clear();
        buf.extend_from_slice(method.as_str().as_bytes());
        buf.push(b' ');
        buf.extend_from_slice(path.as_bytes());
        buf.extend_from_slice(b" HTTP/1.1\r\n");
        let start = buf.len();
        host_line(&mut buf, host);
        let host = start..buf.len();
        for (name, value) in headers {
            if name == HOST || (fwd.is_some() && Forwarding::replaces(name)) {
                continue;
            }
            buf.extend_from_slice(name.as_str().as_bytes());
            buf.extend_from_slice(b": ");
            buf.extend_from_slice(value.as_bytes());
            buf.extend_from_slice(b"\r\n");
        }
        if let Some(f) = fwd {
            f.write(&mut buf);
        }
        buf.extend_from_slice(b"\r\n");
        Outgoing {
            bytes: buf,
            host,
            head_request: method == Method::HEAD,
            spare: HeaderMap::new(),
        }
    }

    /// Keeps the request's map, emptied now (its values are slices of the client's read
    /// buffer), for the response's fields. hyper's HTTP/1 server keeps each response's map
    /// for the connection's next request, so one map goes round and round: no allocation
    /// for either head once it has grown to fit. (hyper's HTTP/2 server keeps none: there
    /// the response's map is the request's, and each request's is new.)
    pub(crate) fn recycle(&mut self, mut map: HeaderMap) {
        map.clear();
        self.spare = map;
    }

    /// Puts `host` in the place of the `Host` field (none: no field).
    pub(crate) fn set_host(&mut self, host: Option<&HeaderValue>) {
        let mut line = Vec::with_capacity(64);
        host_line(&mut line, host);
        let end = self.host.start + line.len();
        self.bytes.splice(self.host.clone(), line);
        self.host = self.host.start..end;
    }

    #[cfg(test)]
    fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

fn host_line(out: &mut Vec<u8>, host: Option<&HeaderValue>) {
    if let Some(h) = host {
        out.extend_from_slice(b"host: ");
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(b"\r\n");
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

async fn connect(
    authority: &Authority,
    settings: &Settings,
    deadline: tokio::time::Instant,
) -> Result<Conn, SendError> {
    let io = super::pool::connect_tcp(authority, settings).await?;
    Ok(Box::new(ConnState {
        timer: Box::pin(tokio::time::sleep_until(deadline)),
        slot: crate::rt::worker_slot(),
        io,
        buf: BytesMut::with_capacity(INIT_BUF),
        wbuf: Vec::new(),
    }))
}

enum Failed {
    /// The connection failed before any of the response: on a reused connection, the
    /// upstream had most likely closed it while it was idle.
    BeforeResponse(io::Error),
    Other(io::Error),
}

fn invalid(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// A parsed response head. The hop-by-hop fields (RFC 9110 §7.6.1) are left out of
/// `headers` as it is built, and what they say about framing is kept here instead.
struct Head {
    status: StatusCode,
    version: Version,
    headers: HeaderMap,
    /// `Transfer-Encoding` was present, and whether its last coding is chunked.
    transfer: Option<bool>,
    /// `Content-Length`: `Err` when invalid or when several disagree (RFC 9112 §6.3).
    length: Option<Result<u64, ()>>,
    /// `Connection: close`.
    close: bool,
    /// A `Connection` field naming other fields was kept, for them to be removed.
    names_others: bool,
}

async fn exchange(
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

/// Parses heads off the front of `buf` until a final one, skipping 1xx (RFC 9110 §15.2),
/// or returns `None` for more.
fn final_head(buf: &mut BytesMut, spare: &mut HeaderMap) -> io::Result<Option<Head>> {
    loop {
        match parse_into(buf, spare)? {
            Some(head) if head.status.is_informational() => {
                // A 101 is never asked for on this path (upgrades go through hyper).
                if head.status == StatusCode::SWITCHING_PROTOCOLS {
                    return Err(invalid("101 to a request without Upgrade"));
                }
                // Its map, emptied, is the final head's.
                let mut map = head.headers;
                map.clear();
                *spare = map;
                if buf.is_empty() {
                    return Ok(None);
                }
            }
            head => return Ok(head),
        }
    }
}

#[cfg(test)]
fn parse(buf: &mut BytesMut) -> io::Result<Option<Head>> {
    parse_into(buf, &mut HeaderMap::new())
}

/// Parses a complete head off the front of `buf`, or returns `None` for more. The fields
/// go into `spare` (taken; left empty), grown as needed.
fn parse_into(buf: &mut BytesMut, spare: &mut HeaderMap) -> io::Result<Option<Head>> {
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut res = httparse::Response::new(&mut []);
    // Where each field's name and value lie in the head, so the values can be slices of
    // one shared buffer rather than a copy each.
    let mut spans = [(0u32, 0u32, 0u32, 0u32); MAX_HEADERS];
    let base = buf.as_ptr() as usize;
    let parsed = httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut res, buf, &mut slots);
    let (len, code, minor, n) = match parsed {
        Ok(httparse::Status::Complete(len)) => {
            for (s, h) in spans.iter_mut().zip(res.headers.iter()) {
                let name = h.name.as_ptr() as usize - base;
                let value = h.value.as_ptr() as usize - base;
                *s = (
                    name as u32,
                    (name + h.name.len()) as u32,
                    value as u32,
                    (value + h.value.len()) as u32,
                );
            }
            (
                len,
                res.code.unwrap_or(0),
                res.version.unwrap_or(1),
                res.headers.len(),
            )
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad response head: {e}"),
            ))
        }
    };
    let status = StatusCode::from_u16(code).map_err(|_| invalid("bad status code"))?;
    let bytes = buf.split_to(len).freeze();
    let mut headers = std::mem::take(spare);
    if !headers.is_empty() {
        headers.clear();
    }
    headers.reserve(n + 1);
    let mut head = Head {
        status,
        version: if minor == 0 {
            Version::HTTP_10
        } else {
            Version::HTTP_11
        },
        headers,
        transfer: None,
        length: None,
        close: false,
        names_others: false,
    };
    let spans = &spans[..n];
    let ascii = bytes.is_ascii();
    // Without the memo (the thread is ending, or it is in use) the names are made anew.
    let mut fill = |names: Option<&mut Names>| fields(&mut head, &bytes, ascii, spans, names);
    match NAMES.try_with(|m| fill(m.try_borrow_mut().ok().as_deref_mut())) {
        Ok(done) => done?,
        Err(_) => fill(None)?,
    }
    Ok(Some(head))
}

/// Takes the fields of a head into `head`: framing and hop-by-hop ones noted, the rest
/// kept with values sliced from `bytes` (`ascii`: all of it is).
fn fields(
    head: &mut Head,
    bytes: &Bytes,
    ascii: bool,
    spans: &[(u32, u32, u32, u32)],
    mut names: Option<&mut Names>,
) -> io::Result<()> {
    for (i, &(ns, ne, vs, ve)) in spans.iter().enumerate() {
        let name = name_at(names.as_deref_mut(), i, &bytes[ns as usize..ne as usize])?;
        let raw = &bytes[vs as usize..ve as usize];
        if name == CONNECTION {
            let mut others = false;
            for t in raw.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                if t.eq_ignore_ascii_case(b"close") {
                    head.close = true;
                } else if !t.is_empty() && !t.eq_ignore_ascii_case(b"keep-alive") {
                    others = true;
                }
            }
            // The fields it names go too: kept for `remove_hop_by_hop` to find them.
            if !others {
                continue;
            }
            head.names_others = true;
        } else if name == TRANSFER_ENCODING {
            // Codings are tokens (RFC 9112 §6.1): a field with other bytes names none that
            // can be trusted, and a reader taking it as text (hyper's client) would not
            // see the `chunked` at its end: another framing than this one.
            if !ascii && !raw.is_ascii() {
                return Err(invalid("Transfer-Encoding not ASCII"));
            }
            let last = raw.rsplit(|&b| b == b',').next().unwrap_or_default();
            head.transfer = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
            continue;
        } else if super::headers::is_hop_by_hop(&name) {
            continue;
        } else if name == CONTENT_LENGTH {
            head.length = Some(match (content_length(raw), head.length) {
                (Some(n), None) => Ok(n),
                (Some(n), Some(Ok(m))) if n == m => Ok(n),
                _ => Err(()),
            });
        }
        let slice = bytes.slice(vs as usize..ve as usize);
        // Checking each value byte by byte again cost ~450 instructions a response, and
        // httparse already took it only if every byte is HTAB, SP, VCHAR or obs-text (its
        // `is_header_value_token`, RFC 9110 §5.5), the bytes `HeaderValue` allows. In an
        // all-ASCII head (one check over the whole of it) a value is then also the valid
        // UTF-8 that `from_maybe_shared_unchecked` asks for; else each is checked.
        let value = if ascii {
            // SAFETY: ASCII, so valid UTF-8, and every byte one httparse accepted above.
            unsafe { HeaderValue::from_maybe_shared_unchecked(slice) }
        } else {
            HeaderValue::from_maybe_shared(slice).map_err(|_| invalid("bad header value"))?
        };
        head.headers.append(name, value);
    }
    Ok(())
}

/// The names of the last response head parsed on this thread, by position, as the
/// upstream spelled them: an upstream sends the same fields in the same order on every
/// response, and comparing the bytes costs a fraction of `HeaderName::from_bytes`
/// (lowercasing, then matching against the standard names): about 800 instructions of a
/// proxied request's eight-field head (callgrind).
struct Names([(Vec<u8>, Option<HeaderName>); NAME_SLOTS]);

const NAME_SLOTS: usize = 16;

thread_local! {
    static NAMES: std::cell::RefCell<Names> =
        std::cell::RefCell::new(Names(std::array::from_fn(|_| (Vec::new(), None))));
}

/// The field name spelled `raw`, the `i`th of its head.
fn name_at(names: Option<&mut Names>, i: usize, raw: &[u8]) -> io::Result<HeaderName> {
    let Some((seen, name)) = names.and_then(|m| m.0.get_mut(i)) else {
        return HeaderName::from_bytes(raw).map_err(|_| invalid("bad header name"));
    };
    if let Some(n) = name.as_ref().filter(|_| seen.as_slice() == raw) {
        return Ok(n.clone());
    }
    let n = HeaderName::from_bytes(raw).map_err(|_| invalid("bad header name"))?;
    if raw.len() <= 64 {
        seen.clear();
        seen.extend_from_slice(raw);
        *name = Some(n.clone());
    }
    Ok(n)
}

impl Head {
    fn into_response(
        mut self,
        conn: Conn,
        pool: &Arc<Pool>,
        head_request: bool,
    ) -> io::Result<Response<Body>> {
        let (state, keep) = self.framing(head_request)?;
        let mut body = Body {
            conn: Some(conn),
            pool: pool.clone(),
            state,
            keep,
            names_others: self.names_others,
        };
        if matches!(body.state, State::Length(0)) {
            body.finish();
        }
        let mut res = Response::new(body);
        *res.status_mut() = self.status;
        *res.version_mut() = self.version;
        *res.headers_mut() = self.headers;
        Ok(res)
    }

    /// RFC 9112 §6.3: how the body is delimited, and §9.3 whether the connection may be
    /// used again after it.
    fn framing(&mut self, head_request: bool) -> io::Result<(State, bool)> {
        // RFC 9112 §6.1: Transfer-Encoding in an HTTP/1.0 message is faulty framing.
        if self.version == Version::HTTP_10 && self.transfer.is_some() {
            return Err(invalid("Transfer-Encoding in an HTTP/1.0 response"));
        }
        let mut keep = self.version == Version::HTTP_11 && !self.close;
        let state = if head_request
            || self.status == StatusCode::NO_CONTENT
            || self.status == StatusCode::NOT_MODIFIED
        {
            State::Length(0)
        } else if let Some(chunked) = self.transfer {
            // A response with both is a smuggling attempt or a broken upstream: the
            // connection is not trusted again (§6.3, point 3).
            if self.length.is_some() {
                keep = false;
                self.headers.remove(CONTENT_LENGTH);
            }
            if chunked {
                State::Chunked(Chunk::Size)
            } else {
                keep = false;
                State::Eof
            }
        } else {
            match self.length {
                Some(Ok(n)) => State::Length(n),
                Some(Err(())) => return Err(invalid("invalid Content-Length")),
                None => {
                    keep = false;
                    State::Eof
                }
            }
        };
        Ok((state, keep))
    }
}

fn content_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

enum State {
    /// This many body bytes are still to come.
    Length(u64),
    Chunked(Chunk),
    /// Delimited by the upstream closing the connection.
    Eof,
    Done,
}

/// RFC 9112 §7.1: where a chunked body's decoder is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Chunk {
    Size,
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    Trailers,
}

/// An upstream response's body, read from the connection by whoever polls it; the
/// connection goes back to its pool at the body's end.
pub(crate) struct Body {
    conn: Option<Conn>,
    pool: Arc<Pool>,
    state: State,
    /// Whether the connection may carry another exchange after this one.
    keep: bool,
    names_others: bool,
}

impl Body {
    /// The head kept a `Connection` field naming other fields: they are still to go (all
    /// the other hop-by-hop fields were left out as it was parsed).
    pub(crate) fn hop_fields_left(&self) -> bool {
        self.names_others
    }

    fn finish(&mut self) {
        self.state = State::Done;
        if let Some(conn) = self.conn.take() {
            // Bytes past the end of the message mean the framing was wrong: not reused.
            if self.keep && conn.buf.is_empty() {
                self.pool.give_back_h1(conn);
            }
        }
    }

    fn fail(&mut self, e: io::Error) -> Poll<Option<Result<http_body::Frame<Bytes>, io::Error>>> {
        self.state = State::Done;
        self.conn = None;
        Poll::Ready(Some(Err(e)))
    }

    /// Reads more into the buffer: `Ok(false)` at the end of the stream.
    fn poll_fill(&mut self, cx: &mut Context<'_>, want: u64) -> Poll<io::Result<bool>> {
        let Some(conn) = self.conn.as_mut() else {
            return Poll::Ready(Ok(false));
        };
        let want = (want as usize).clamp(INIT_BUF, READ_CHUNK);
        if conn.buf.capacity() - conn.buf.len() < want / 2 {
            conn.buf.reserve(want);
        }
        let n = ready!(tokio_util::io::poll_read_buf(
            Pin::new(&mut conn.io),
            cx,
            &mut conn.buf
        ))?;
        Poll::Ready(Ok(n > 0))
    }

    /// Dropped before its end: a response the client won't get whole, or one answered
    /// from elsewhere (a compressed variant already cached). When at most `SALVAGE_MAX`
    /// bytes of a `Content-Length` body are left, they are read and discarded, and the
    /// connection goes back to its pool (RFC 9112 §9.3: it is reusable once this message
    /// has been read): at once when they are already here — the common case, a small body
    /// sent with its head — else from a task given `SALVAGE_TIME`. Otherwise, or for a
    /// chunked or close-delimited body, the connection is closed.
    fn salvage(&mut self, rest: u64) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        if !self.keep || rest > SALVAGE_MAX {
            return;
        }
        let rest = rest as usize;
        conn.read_now(rest);
        match conn.buf.len() {
            n if n == rest => {
                conn.buf.clear();
                self.pool.give_back_h1(conn);
            }
            // Bytes past the message: the framing was wrong.
            n if n > rest => {}
            _ => {
                let Ok(rt) = tokio::runtime::Handle::try_current() else {
                    return;
                };
                let pool = self.pool.clone();
                rt.spawn(async move {
                    let read = tokio::time::timeout(SALVAGE_TIME, conn.read_to(rest)).await;
                    if matches!(read, Ok(Ok(()))) && conn.buf.len() == rest {
                        conn.buf.clear();
                        pool.give_back_h1(conn);
                    }
                });
            }
        }
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        if let State::Length(rest) = self.state {
            self.salvage(rest);
        }
    }
}

impl ConnState {
    /// Reads what the socket already holds, up to `upto` buffered bytes, without waiting.
    /// The read is made directly: tokio's cached readiness may not yet know of bytes that
    /// came just after the head.
    fn read_now(&mut self, upto: usize) {
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
    async fn read_to(&mut self, upto: usize) -> io::Result<()> {
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

/// The position of the first CRLF in `b`.
fn line_end(b: &[u8]) -> Option<usize> {
    b.windows(2).position(|w| w == b"\r\n")
}

/// `field-name ":" field-value` (RFC 9110 §5.1, §5.5): a token, then HTAB, SP, VCHAR or
/// obs-text, as httparse takes a head's fields.
fn field_line(line: &[u8]) -> bool {
    let Some(colon) = line.iter().position(|&b| b == b':') else {
        return false;
    };
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    let tchar = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    !name.is_empty() && name.iter().all(tchar) && value.iter().all(|&b| field_text(b))
}

/// HTAB, SP, VCHAR, obs-text: no control but HTAB (a bare CR or LF among them).
fn field_text(b: u8) -> bool {
    b == b'\t' || (b >= b' ' && b != 0x7f)
}

/// A chunk-size line (§7.1): hex digits, then optional extensions, which are ignored.
/// Only blanks may come between the two (§7.1.1: BWS before `;`).
fn chunk_size(line: &[u8]) -> Option<u64> {
    let digits = line
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(line.len());
    let rest = &line[digits..];
    let blanks = rest
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(rest.len());
    let ext = &rest[blanks..];
    if digits == 0 || digits > 16 || !(ext.is_empty() || ext[0] == b';') {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(&line[..digits]).ok()?, 16).ok()
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, io::Error>>> {
        let this = &mut *self;
        loop {
            let step = match this.conn.as_mut() {
                _ if matches!(this.state, State::Done) => return Poll::Ready(None),
                Some(conn) => decode(&mut this.state, &mut conn.buf),
                None => return this.fail(io::ErrorKind::UnexpectedEof.into()),
            };
            let want = match step {
                Ok(Step::Data(data)) => {
                    if matches!(this.state, State::Length(0)) {
                        this.finish();
                    }
                    return Poll::Ready(Some(Ok(http_body::Frame::data(data))));
                }
                Ok(Step::Again) => continue,
                Ok(Step::End) => {
                    this.finish();
                    return Poll::Ready(None);
                }
                Ok(Step::More(n)) => n,
                Err(e) => return this.fail(e),
            };
            match ready!(this.poll_fill(cx, want)) {
                Ok(true) => {}
                Ok(false) if matches!(this.state, State::Eof) => {
                    this.state = State::Done;
                    this.conn = None;
                    return Poll::Ready(None);
                }
                Ok(false) => {
                    return this.fail(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the upstream closed the connection mid-body",
                    ))
                }
                Err(e) => return this.fail(e),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Done | State::Length(0))
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self.state {
            State::Length(n) => http_body::SizeHint::with_exact(n),
            State::Done => http_body::SizeHint::with_exact(0),
            _ => http_body::SizeHint::default(),
        }
    }
}

enum Step {
    Data(Bytes),
    /// The state moved on: look again.
    Again,
    End,
    /// Needs more bytes; about this many are coming.
    More(u64),
}

/// The next step of reading a body from `buf`, whose state is `state`.
fn decode(state: &mut State, buf: &mut BytesMut) -> io::Result<Step> {
    match *state {
        State::Done | State::Length(0) => Ok(Step::End),
        State::Length(n) if !buf.is_empty() => {
            let take = usize::try_from(n).map_or(buf.len(), |n| n.min(buf.len()));
            *state = State::Length(n - take as u64);
            Ok(Step::Data(buf.split_to(take).freeze()))
        }
        State::Length(n) => Ok(Step::More(n)),
        State::Eof if !buf.is_empty() => Ok(Step::Data(buf.split().freeze())),
        State::Eof => Ok(Step::More(READ_CHUNK as u64)),
        State::Chunked(c) => chunked_step(state, c, buf),
    }
}

fn chunked_step(state: &mut State, c: Chunk, buf: &mut BytesMut) -> io::Result<Step> {
    let next = match c {
        Chunk::Size | Chunk::Trailers => {
            let Some(end) = line_end(buf) else {
                if buf.len() > MAX_LINE {
                    return Err(invalid("chunk-size line or trailer too long"));
                }
                return Ok(Step::More(0));
            };
            let line = buf.split_to(end + 2);
            let line = &line[..end];
            if c == Chunk::Trailers {
                // Trailer fields are not forwarded; the empty line ends the message.
                if line.is_empty() {
                    return Ok(Step::End);
                }
                // But they must be field lines (RFC 9112 §7.1.2): anything else says the
                // body is not framed as the upstream meant, a head smuggled after the
                // last chunk, say.
                if !field_line(line) {
                    return Err(invalid("bad trailer field"));
                }
                Chunk::Trailers
            } else {
                // No control but HTAB in it, extensions included (RFC 9112 §7.1.1: tokens
                // and quoted strings): a reader ending lines at a bare CR or LF (§2.2)
                // would see another chunk there.
                if !line.iter().all(|&b| field_text(b)) {
                    return Err(invalid("bad chunk-size line"));
                }
                match chunk_size(line) {
                    Some(0) => Chunk::Trailers,
                    Some(n) => Chunk::Data(n),
                    None => return Err(invalid("bad chunk size")),
                }
            }
        }
        Chunk::Data(n) => {
            if buf.is_empty() {
                return Ok(Step::More(n));
            }
            let take = usize::try_from(n).map_or(buf.len(), |n| n.min(buf.len()));
            let data = buf.split_to(take).freeze();
            let left = n - take as u64;
            *state = State::Chunked(if left == 0 {
                Chunk::DataEnd
            } else {
                Chunk::Data(left)
            });
            return Ok(Step::Data(data));
        }
        Chunk::DataEnd => {
            if buf.len() < 2 {
                return Ok(Step::More(0));
            }
            if &buf[..2] != b"\r\n" {
                return Err(invalid("chunk data not followed by CRLF"));
            }
            buf.advance(2);
            Chunk::Size
        }
    };
    *state = State::Chunked(next);
    Ok(Step::Again)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_size_lines() {
        assert_eq!(chunk_size(b"1a"), Some(26));
        assert_eq!(chunk_size(b"FF;name=value"), Some(255));
        assert_eq!(chunk_size(b"0"), Some(0));
        assert_eq!(chunk_size(b""), None);
        assert_eq!(chunk_size(b"x1"), None);
        assert_eq!(chunk_size(b"1x"), None);
        // 17 hex digits would overflow a u64.
        assert_eq!(chunk_size(b"10000000000000000"), None);
        // Blanks only before extensions, or at the end.
        assert_eq!(chunk_size(b"5 \t;a=b"), Some(5));
        assert_eq!(chunk_size(b"5\t"), Some(5));
        assert_eq!(chunk_size(b"5 x"), None);
        assert_eq!(chunk_size(b"5 5"), None);
        assert_eq!(chunk_size(b"5 =a"), None);
    }

    #[test]
    fn chunk_extensions_hold_no_line_break_or_control() {
        assert_eq!(
            chunked(b"5;a=\"b\tc\\\xff\"\r\nhello\r\n0\r\n\r\n").unwrap(),
            b"hello"
        );
        // Read up to the CRLF, a bare CR or LF was taken for part of the extension; a
        // reader ending the line there would take "xyz" for data (RFC 9112 §2.2).
        for ext in [
            &b"\rxyz"[..],
            b"\nxyz",
            b"=a\rb",
            b"=a\nb",
            b"=\x00",
            b"=\x1b",
            b"=\x7f",
        ] {
            let mut b = b"5;".to_vec();
            b.extend_from_slice(ext);
            b.extend_from_slice(b"\r\nhello\r\n0\r\n\r\n");
            assert!(chunked(&b).is_err(), "{:?}", String::from_utf8_lossy(ext));
            let mut last = b"2\r\nok\r\n0;".to_vec();
            last.extend_from_slice(ext);
            last.extend_from_slice(b"\r\n\r\n");
            assert!(
                chunked(&last).is_err(),
                "{:?}",
                String::from_utf8_lossy(ext)
            );
        }
    }

    /// A chunked body read from `bytes` (all of it there at once), or the error.
    fn chunked(bytes: &[u8]) -> io::Result<Vec<u8>> {
        let mut buf = BytesMut::from(bytes);
        let mut state = State::Chunked(Chunk::Size);
        let mut body = Vec::new();
        loop {
            match decode(&mut state, &mut buf)? {
                Step::Data(d) => body.extend_from_slice(&d),
                Step::Again => {}
                Step::End => return Ok(body),
                Step::More(_) => return Err(io::ErrorKind::UnexpectedEof.into()),
            }
        }
    }

    #[test]
    fn trailer_sections_are_field_lines() {
        let with = |trailers: &[u8]| {
            let mut b = b"2\r\nok\r\n0\r\n".to_vec();
            b.extend_from_slice(trailers);
            chunked(&b)
        };
        assert_eq!(with(b"\r\n").unwrap(), b"ok");
        assert_eq!(
            with(b"X-Sum: 1\r\nExpires: a\t\xff b\r\nE:\r\n\r\n").unwrap(),
            b"ok"
        );
        for bad in [
            &b"X-S w: 1"[..],
            b"X-Sum : 1",
            b": 1",
            b"no colon",
            b" X: folded",
            b"HTTP/1.1 200 OK",
            b"X: a\x00b",
            b"X: a\rb",
            b"X: a\nb",
            b"X: a\x7f",
        ] {
            let mut t = bad.to_vec();
            t.extend_from_slice(b"\r\n\r\n");
            assert!(with(&t).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn content_lengths() {
        assert_eq!(content_length(b"0"), Some(0));
        assert_eq!(content_length(b"1024"), Some(1024));
        assert_eq!(content_length(b""), None);
        assert_eq!(content_length(b"+5"), None);
        assert_eq!(content_length(b"5 "), None);
        assert_eq!(content_length(b"99999999999999999999"), None);
    }

    #[test]
    fn heads_parse_with_shared_values_and_need_their_empty_line() {
        let mut b = BytesMut::from(&b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: b\r\n"[..]);
        assert!(parse(&mut b).unwrap().is_none());
        b.extend_from_slice(b"\r\nok");
        let h = parse(&mut b).unwrap().unwrap();
        assert_eq!(h.status, StatusCode::OK);
        assert_eq!(h.headers["content-length"], "2");
        assert_eq!(h.headers["x-a"], "b");
        assert_eq!(h.length, Some(Ok(2)));
        assert_eq!(&b[..], b"ok");
        // Hop-by-hop fields are noted, not kept; one naming another field is kept so
        // that the field it names can be removed too.
        let mut b = BytesMut::from(
            &b"HTTP/1.1 200 OK\r\nConnection: close, x-priv\r\nKeep-Alive: 5\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"[..],
        );
        let h = parse(&mut b).unwrap().unwrap();
        assert!(h.close);
        assert_eq!(h.transfer, Some(true));
        assert_eq!(h.length, Some(Err(())));
        assert_eq!(h.headers.get("keep-alive"), None);
        assert_eq!(h.headers.get("transfer-encoding"), None);
        assert_eq!(h.headers["connection"], "close, x-priv");
        let mut bad = BytesMut::from(&b"SSH-2.0-OpenSSH\r\n\r\n"[..]);
        assert!(parse(&mut bad).is_err());
        // ASCII values are taken unchecked after httparse: what it lets through is what
        // HeaderValue allows (tab, obs-text), and it refuses the rest (DEL, controls) —
        // at every offset, so through its 8-, 16- and 32-byte matchers too.
        let mut b = BytesMut::from(&b"HTTP/1.1 200 OK\r\nX-A: a\tb\xe9\r\n\r\n"[..]);
        let h = parse(&mut b).unwrap().unwrap();
        assert_eq!(h.headers["x-a"].as_bytes(), b"a\tb\xe9");
        for at in [0, 1, 7, 8, 15, 16, 31, 32, 40, 63, 64, 70] {
            for c in [0x7fu8, 0x01, 0x00, 0x1f, b'\r'] {
                let mut head = b"HTTP/1.1 200 OK\r\nX-A: ".to_vec();
                head.extend(std::iter::repeat_n(b'v', at));
                head.push(c);
                head.extend(std::iter::repeat_n(b'w', 40));
                head.extend_from_slice(b"\r\n\r\n");
                assert!(
                    parse(&mut BytesMut::from(&head[..])).is_err(),
                    "{c:#x} at {at}"
                );
            }
            // (A value's leading tab would be whitespace around it, not part of it.)
            let mut head = b"HTTP/1.1 200 OK\r\nX-A: v".to_vec();
            head.extend(std::iter::repeat_n(b'v', at));
            head.extend_from_slice(b"\t\xff~ w\r\n\r\n");
            let h = parse(&mut BytesMut::from(&head[..])).unwrap().unwrap();
            assert!(h.headers["x-a"].as_bytes().ends_with(b"\t\xff~ w"), "{at}");
        }
    }

    #[test]
    fn transfer_codings_are_ascii() {
        let te = |value: &[u8]| {
            let mut head = b"HTTP/1.1 200 OK\r\nX-A: \xe9\r\nTransfer-Encoding: ".to_vec();
            head.extend_from_slice(value);
            head.extend_from_slice(b"\r\n\r\n");
            parse(&mut BytesMut::from(&head[..])).map(|h| h.unwrap().transfer)
        };
        assert_eq!(te(b"gzip, chunked").unwrap(), Some(true));
        assert_eq!(te(b"chunked, gzip").unwrap(), Some(false));
        // Chunked here, and read to the close by hyper's client, which takes the field as
        // text: refused.
        assert!(te(b"k\x8c, chunked").is_err());
        assert!(te(b"chunked\xff").is_err());
    }

    #[test]
    fn names_remembered_by_position_are_only_reused_for_the_same_bytes() {
        let names = |head: &[u8]| -> Vec<String> {
            let mut b = BytesMut::from(head);
            let h = parse(&mut b).unwrap().unwrap();
            h.headers.keys().map(|k| k.to_string()).collect()
        };
        let first = b"HTTP/1.1 200 OK\r\nServer: a\r\nX-One: 1\r\nContent-Length: 0\r\n\r\n";
        for _ in 0..2 {
            assert_eq!(names(first), ["server", "x-one", "content-length"]);
        }
        // Same positions, other names (one of the same length, one only in case).
        assert_eq!(
            names(b"HTTP/1.1 200 OK\r\nX-Two: 2\r\nX-Abc: 1\r\ncontent-LENGTH: 0\r\n\r\n"),
            ["x-two", "x-abc", "content-length"]
        );
        assert_eq!(names(first), ["server", "x-one", "content-length"]);
        // Past the remembered slots; a bad name (refused by httparse itself).
        let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..NAME_SLOTS + 4 {
            many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(names(&many).len(), NAME_SLOTS + 4);
        assert_eq!(
            names(&many)[NAME_SLOTS + 3],
            format!("x-{}", NAME_SLOTS + 3)
        );
        let mut bad = BytesMut::from(&b"HTTP/1.1 200 OK\r\nServer: a\r\nX\x7fOne: 1\r\n\r\n"[..]);
        assert!(parse(&mut bad).is_err());
    }

    #[test]
    fn the_requests_map_takes_the_responses_fields() {
        let mut req = HeaderMap::with_capacity(24);
        req.insert("host", HeaderValue::from_static("site"));
        req.insert("x-from-the-client", HeaderValue::from_static("1"));
        let room = req.capacity();
        let mut out = Outgoing::encode(Vec::new(), &Method::GET, "/", None, &req, None);
        out.recycle(req);
        // Emptied at once: nothing of the client's buffer is held while the response is
        // awaited.
        assert!(out.spare.is_empty());
        let mut b = BytesMut::from(&b"HTTP/1.1 200 OK\r\nX-A: 1\r\nContent-Length: 0\r\n\r\n"[..]);
        let h = parse_into(&mut b, &mut out.spare).unwrap().unwrap();
        let names: Vec<&str> = h.headers.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["x-a", "content-length"]);
        assert_eq!(h.headers.capacity(), room, "the map was reallocated");
        // A spare that still holds fields (never by `recycle`) is emptied first.
        let mut stale = HeaderMap::new();
        stale.insert("x-stale", HeaderValue::from_static("1"));
        let mut b = BytesMut::from(&b"HTTP/1.1 204 No Content\r\nX-B: 2\r\n\r\n"[..]);
        let h = parse_into(&mut b, &mut stale).unwrap().unwrap();
        assert_eq!(h.headers.len(), 1);
        assert!(h.headers.get("x-stale").is_none());
    }

    #[test]
    fn request_heads_are_encoded_in_origin_form() {
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("up"));
        h.append("x-n", HeaderValue::from_static("1"));
        h.append("x-n", HeaderValue::from_static("2"));
        h.insert("x-a", HeaderValue::from_static("b"));
        let host = HeaderValue::from_static("client.example");
        let mut out = Outgoing::encode(Vec::new(), &Method::GET, "/a?b=c", Some(&host), &h, None);
        // The given Host, first, in place of the one among the fields.
        assert_eq!(
            out.as_bytes(),
            b"GET /a?b=c HTTP/1.1\r\nhost: client.example\r\nx-n: 1\r\nx-n: 2\r\nx-a: b\r\n\r\n"
        );
        assert!(!out.head_request);
        out.set_host(Some(&HeaderValue::from_static("up:8080")));
        assert_eq!(
            out.as_bytes(),
            b"GET /a?b=c HTTP/1.1\r\nhost: up:8080\r\nx-n: 1\r\nx-n: 2\r\nx-a: b\r\n\r\n"
        );
        out.set_host(None);
        assert_eq!(
            out.as_bytes(),
            b"GET /a?b=c HTTP/1.1\r\nx-n: 1\r\nx-n: 2\r\nx-a: b\r\n\r\n"
        );
        out.set_host(Some(&host));
        assert_eq!(
            out.as_bytes(),
            b"GET /a?b=c HTTP/1.1\r\nhost: client.example\r\nx-n: 1\r\nx-n: 2\r\nx-a: b\r\n\r\n"
        );
        let head = Outgoing::encode(out.bytes, &Method::HEAD, "/", None, &HeaderMap::new(), None);
        assert_eq!(head.as_bytes(), b"HEAD / HTTP/1.1\r\n\r\n");
        assert!(head.head_request);
    }

    /// The fields a head carries, each name's values in order (how a recipient combines
    /// them, RFC 9110 §5.3), names sorted.
    fn fields_of(head: &[u8]) -> Vec<(String, Vec<String>)> {
        let mut slots = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut slots);
        assert!(matches!(req.parse(head), Ok(httparse::Status::Complete(_))));
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for f in req.headers.iter() {
            let name = f.name.to_ascii_lowercase();
            let value = String::from_utf8_lossy(f.value).into_owned();
            match out.iter_mut().find(|(n, _)| *n == name) {
                Some((_, vs)) => vs.push(value),
                None => out.push((name, vec![value])),
            }
        }
        out.sort();
        out
    }

    #[test]
    fn forwarding_written_into_the_head_is_what_the_map_would_send() {
        use super::super::headers::{add_via, forward, remove_hop_by_hop, trusted};
        let untrusted = trusted(&[]);
        let claims: [&[(&str, &str)]; 5] = [
            &[],
            &[("host", "site.example"), ("accept", "*/*")],
            &[
                ("host", "site.example"),
                ("x-forwarded-for", "6.6.6.6"),
                ("x-forwarded-for", "7.7.7.7"),
                ("x-forwarded-proto", "https"),
                ("x-forwarded-host", "evil"),
                ("forwarded", "for=6.6.6.6"),
                ("via", "1.0 other"),
                ("x-kept", "1"),
            ],
            &[
                ("via", "1.1 a"),
                ("via", "2 b"),
                ("x-forwarded-host", "evil"),
            ],
            // Host named hop-by-hop: still the upstream's Host line, but no X-Forwarded-Host.
            &[
                ("host", "site.example"),
                ("connection", "host"),
                ("x-forwarded-host", "evil"),
            ],
        ];
        let peers = [
            Some("192.0.2.7".parse().unwrap()),
            Some("2001:db8::1".parse().unwrap()),
            Some("::ffff:10.1.2.3".parse().unwrap()),
            None,
        ];
        let versions = [Version::HTTP_10, Version::HTTP_11, Version::HTTP_2];
        for claim in claims {
            let mut client = HeaderMap::new();
            for (k, v) in claim {
                client.append(*k, HeaderValue::from_static(v));
            }
            // As `prepare` has them: the Host line from the client's map, the rest from the
            // map with the hop-by-hop fields gone.
            let host = client.get("host");
            let mut h = client.clone();
            remove_hop_by_hop(&mut h);
            for peer in peers {
                for scheme in ["http", "https"] {
                    for version in versions {
                        let mut mapped = h.clone();
                        forward(&mut mapped, peer, scheme, &untrusted, false);
                        add_via(&mut mapped, version);
                        let want =
                            Outgoing::encode(Vec::new(), &Method::GET, "/", host, &mapped, None);
                        let fwd = Forwarding::direct(
                            h.get("host"),
                            peer,
                            scheme,
                            &untrusted,
                            false,
                            version,
                        )
                        .expect("an untrusted peer's fields go straight in");
                        let got =
                            Outgoing::encode(Vec::new(), &Method::GET, "/", host, &h, Some(&fwd));
                        let ctx = format!("{claim:?} {peer:?} {scheme} {version:?}");
                        assert_eq!(fields_of(&got.bytes), fields_of(&want.bytes), "{ctx}");
                        // And the map's way, for a request that goes over hyper's client.
                        let mut applied = h.clone();
                        fwd.apply(&mut applied);
                        assert_eq!(applied, mapped, "{ctx}");
                    }
                }
            }
        }
        // A trusted peer's chain, and RFC 7239, are left to the map.
        let all = trusted(&["0.0.0.0/0".to_string()]);
        let peer = peers[0];
        assert!(Forwarding::direct(None, peer, "http", &all, false, Version::HTTP_11).is_none());
        assert!(
            Forwarding::direct(None, peer, "http", &untrusted, true, Version::HTTP_11).is_none()
        );
    }
}
