use super::store::{Entry, Flight, Key, ResponseStore};
use crate::upstream::StoredVersion;
use bytes::{Bytes, BytesMut};
use http::header::HeaderName;
use http::{HeaderMap, StatusCode};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

pin_project! {
    /// A [`Cache`](super::Cache)'s response body: a stored response's, from memory, or the
    /// inner Service's, copied into the store as it is sent when it may be stored.
    pub struct CacheBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Stored { data: Option<Bytes> },
        Inner { #[pin] inner: B, fill: Option<Box<Fill>> },
        // Boxed, to be moved into a task (rare: a range's miss).
        Cut { inner: Option<Pin<Box<B>>>, fill: Option<Box<Fill>>, window: Window },
    }
}

/// The part of an inner body a client asked for with `Range` when the whole is fetched
/// to be stored: `skip` bytes are dropped, then `left` are sent.
#[derive(Clone, Copy, Debug)]
struct Window {
    skip: u64,
    left: u64,
}

/// What a [`CacheBody`] is, for a server that sends each kind its own cheapest way.
pub enum Split<B> {
    /// From the store: the bytes, or none.
    Stored(Option<Bytes>),
    /// The inner body, not being stored.
    Passing(B),
    /// The inner body, copied into the store as it is read.
    Filling(CacheBody<B>),
}

impl<B> CacheBody<B> {
    pub(crate) fn stored(data: Bytes) -> Self {
        CacheBody {
            kind: Kind::Stored {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }

    pub(crate) fn empty() -> Self {
        CacheBody {
            kind: Kind::Stored { data: None },
        }
    }

    pub fn split(self) -> Split<B> {
        match self.kind {
            Kind::Stored { data } => Split::Stored(data),
            Kind::Inner { inner, fill: None } => Split::Passing(inner),
            kind @ (Kind::Inner { .. } | Kind::Cut { .. }) => Split::Filling(CacheBody { kind }),
        }
    }
}

impl<B: Body> CacheBody<B> {
    /// `inner`, copied into the store by `fill` as it streams. A body that is already
    /// over is stored at once: hyper never polls it.
    pub(crate) fn filling(inner: B, fill: Option<Box<Fill>>) -> Self {
        let fill = match fill {
            Some(f) if inner.is_end_stream() => {
                f.finish();
                None
            }
            f => f,
        };
        CacheBody {
            kind: Kind::Inner { inner, fill },
        }
    }

    /// Only `len` bytes from `first` of an inner body. Once they are sent, the rest of a
    /// body being stored is read into the store by a task of its own: a server stops
    /// reading a body at its announced length, and the client's part may end long before
    /// the whole.
    pub(crate) fn window(self, first: u64, len: u64) -> Self
    where
        B: Body<Data = Bytes> + Send + 'static,
    {
        match self.kind {
            // Nothing to send (a 416): a server would not even poll it.
            Kind::Inner { inner, fill } if len == 0 => {
                read_behind(Some(Box::pin(inner)), fill);
                CacheBody::empty()
            }
            Kind::Inner { inner, fill } => CacheBody {
                kind: Kind::Cut {
                    inner: Some(Box::pin(inner)),
                    fill,
                    window: Window {
                        skip: first,
                        left: len,
                    },
                },
            },
            kind => CacheBody { kind },
        }
    }
}

/// How long the rest of a range's whole may take to come once the range is sent.
const READ_BEHIND_FOR: Duration = Duration::from_secs(60);

/// Reads the rest of `inner` into `fill` on the runtime, then stores it; without one, or
/// if `inner` is over, stores what `fill` has when it is whole.
fn read_behind<B>(inner: Option<Pin<Box<B>>>, fill: Option<Box<Fill>>)
where
    B: Body<Data = Bytes> + Send + 'static,
{
    let (Some(mut inner), Some(mut fill)) = (inner, fill) else {
        return;
    };
    if inner.is_end_stream() {
        fill.finish();
        return;
    }
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let read = async move {
        loop {
            match std::future::poll_fn(|cx| inner.as_mut().poll_frame(cx)).await {
                Some(Ok(f)) => {
                    if let Some(d) = f.data_ref() {
                        if !fill.take(d) {
                            return;
                        }
                    }
                }
                Some(Err(_)) => return,
                None => break,
            }
        }
        fill.finish();
    };
    // Bytes are bounded by the fill (`max_object_bytes`); time by this, for an upstream
    // that trickles: no client waits on it, and it holds an upstream connection.
    rt.spawn(tokio::time::timeout(READ_BEHIND_FOR, read));
}

/// What a response being stored needs once its body has all come: where it goes, its head,
/// and the body so far. Dropped unfinished (the body failed, grew too large, or was not
/// read to its end), it stores nothing; either way its [`Flight`] ends, and the requests
/// waiting for it look again.
pub(crate) struct Fill {
    pub store: ResponseStore,
    pub key: Key,
    pub vary: Vec<HeaderName>,
    /// The request's values of the fields `vary` names ([`super::key::selecting`]).
    pub selecting: std::sync::Arc<[u8]>,
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub exchange: super::policy::Exchange,
    pub heuristic_max: Duration,
    pub max: u64,
    pub buf: BytesMut,
    /// Bytes of the store's budget for responses being copied in that this one holds
    /// ([`ResponseStore::reserve`]): many large misses at once cannot grow memory past it.
    pub reserved: u64,
    /// Held until the copy is stored or dropped: its waiters then look again.
    pub _flight: Option<Flight>,
    /// The version the entry will be, already on the response being copied: removed if
    /// the copy is never stored.
    pub version: Option<StoredVersion>,
}

impl Fill {
    pub(crate) fn finish(mut self: Box<Self>) {
        // Its length as stored, whatever framing it came with: a hit need not set it.
        let len = http::HeaderValue::from(self.buf.len());
        self.headers.insert(http::header::CONTENT_LENGTH, len);
        let entry = Entry::new(
            self.status,
            std::mem::take(&mut self.headers),
            std::mem::take(&mut self.buf).freeze(),
            self.exchange,
            self.heuristic_max,
            self.version.take().unwrap_or_else(StoredVersion::new),
        )
        .with_selecting(self.selecting.clone());
        let vary = std::mem::take(&mut self.vary);
        self.store.insert(self.key.clone(), vary, entry);
        // Dropped after the entry is in: the flight's waiters find it.
    }

    /// Takes `d` into the copy, within `max` and the store's budget; false when it may not.
    fn take(&mut self, d: &[u8]) -> bool {
        let need = self.buf.len() as u64 + d.len() as u64;
        if need > self.max {
            return false;
        }
        if need > self.reserved {
            if !self.store.reserve(need - self.reserved) {
                return false;
            }
            self.reserved = need;
        }
        self.buf.extend_from_slice(d);
        true
    }
}

impl Drop for Fill {
    fn drop(&mut self) {
        if let Some(v) = self.version.take() {
            v.remove();
        }
        self.store.release(self.reserved);
    }
}

impl<B> Body for CacheBody<B>
where
    B: Body<Data = Bytes> + Send + 'static,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Stored { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            KindProj::Inner { mut inner, fill } => {
                let frame = ready!(inner.as_mut().poll_frame(cx));
                match &frame {
                    Some(Ok(f)) => {
                        if let (Some(d), Some(fl)) = (f.data_ref(), fill.as_mut()) {
                            if !fl.take(d) {
                                *fill = None;
                            }
                        }
                        if inner.is_end_stream() {
                            if let Some(fl) = fill.take() {
                                fl.finish();
                            }
                        }
                    }
                    Some(Err(_)) => *fill = None,
                    None => {
                        if let Some(fl) = fill.take() {
                            fl.finish();
                        }
                    }
                }
                Poll::Ready(frame)
            }
            KindProj::Cut {
                inner,
                fill,
                window,
            } => loop {
                let Some(body) = inner.as_mut() else {
                    return Poll::Ready(None);
                };
                if window.left == 0 {
                    read_behind(inner.take(), fill.take());
                    return Poll::Ready(None);
                }
                let d = match ready!(body.as_mut().poll_frame(cx)) {
                    Some(Ok(f)) => match f.into_data() {
                        Ok(d) => d,
                        // Trailers belong to the whole, not to a part of it.
                        Err(_) => continue,
                    },
                    Some(Err(e)) => {
                        *fill = None;
                        return Poll::Ready(Some(Err(e)));
                    }
                    None => {
                        read_behind(inner.take(), fill.take());
                        return Poll::Ready(None);
                    }
                };
                if let Some(fl) = fill.as_mut() {
                    if !fl.take(&d) {
                        *fill = None;
                    }
                }
                let len = d.len() as u64;
                if window.skip >= len {
                    window.skip -= len;
                    continue;
                }
                let start = window.skip as usize;
                let end = (window.skip + window.left).min(len) as usize;
                window.skip = 0;
                window.left -= (end - start) as u64;
                if window.left == 0 {
                    read_behind(inner.take(), fill.take());
                }
                return Poll::Ready(Some(Ok(Frame::data(d.slice(start..end)))));
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Stored { data } => data.is_none(),
            Kind::Inner { inner, .. } => inner.is_end_stream(),
            Kind::Cut { inner, window, .. } => inner.is_none() || window.left == 0,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Stored { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            Kind::Inner { inner, .. } => inner.size_hint(),
            Kind::Cut { window, .. } => SizeHint::with_exact(window.left),
        }
    }
}
