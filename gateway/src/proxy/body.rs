//! What the proxy answers with, and an upstream's response body as it streams.

use super::*;

/// What the proxy answers with: an upstream's body as it streams, or the proxy's own
/// message (a 502, a 504) from memory.
pub enum ProxyBody {
    Empty,
    Full(Option<Bytes>),
    Upstream(UpstreamBody),
}

impl ProxyBody {
    pub fn empty() -> Self {
        ProxyBody::Empty
    }
}

impl From<Bytes> for ProxyBody {
    fn from(b: Bytes) -> Self {
        ProxyBody::Full(Some(b))
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ProxyBody::Empty => std::task::Poll::Ready(None),
            ProxyBody::Full(b) => std::task::Poll::Ready(
                b.take()
                    .filter(|b| !b.is_empty())
                    .map(|b| Ok(http_body::Frame::data(b))),
            ),
            ProxyBody::Upstream(b) => Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Empty => true,
            ProxyBody::Full(b) => b.as_ref().is_none_or(|b| b.is_empty()),
            ProxyBody::Upstream(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            ProxyBody::Empty => http_body::SizeHint::with_exact(0),
            ProxyBody::Full(b) => {
                http_body::SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64))
            }
            ProxyBody::Upstream(b) => b.size_hint(),
        }
    }
}

/// An upstream's response body, counted against the upstream until it is dropped, and cut
/// off when it sends nothing for `idle`.
pub struct UpstreamBody {
    pub(super) inner: UpstreamRes,
    pub(super) _guard: Option<InFlight>,
    pub(super) idle: Duration,
    /// The pooled connection it came on, given back once the body has ended.
    pub(super) lent: Option<pool::Lent>,
    /// Made on the first wait only: most bodies arrive with their head and never wait.
    pub(super) timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// Who reads an upstream's body off its connection.
pub(super) enum UpstreamRes {
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
    pub(super) fn give_back(&mut self) {
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

pub(super) fn respond(
    res: Response<UpstreamRes>,
    guard: Option<InFlight>,
    idle: Duration,
    lent: Option<pool::Lent>,
) -> Response<ProxyBody> {
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
    let body = ProxyBody::Upstream(body);
    Response::from_parts(parts, body)
}
