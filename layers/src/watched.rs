//! A response body that counts the bytes it hands out and reports once, when it ends or
//! is dropped, how many went and whether it was cut off: what the access log and the
//! metrics both need, from one count when both watch the same body.

use bytes::Buf;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};

/// Told of a body's end: the bytes sent, and whether it stopped before its end (an error,
/// or dropped by the server before the last byte).
pub trait OnEnd {
    fn on_end(self, bytes: u64, aborted: bool);
}

impl<E: OnEnd> OnEnd for Option<E> {
    fn on_end(self, bytes: u64, aborted: bool) {
        if let Some(e) = self {
            e.on_end(bytes, aborted);
        }
    }
}

/// Two watchers of one body.
pub struct Both<A, B>(pub A, pub B);

impl<A: OnEnd, B: OnEnd> OnEnd for Both<A, B> {
    fn on_end(self, bytes: u64, aborted: bool) {
        self.0.on_end(bytes, aborted);
        self.1.on_end(bytes, aborted);
    }
}

/// A body reporting its end to `E`. See the [module docs](self).
pub struct Watched<B, E: OnEnd> {
    inner: B,
    watcher: Option<E>,
    bytes: u64,
    /// The inner body said it had nothing more.
    ended: bool,
}

impl<B: Body, E: OnEnd> Watched<B, E> {
    pub fn new(inner: B, watcher: E) -> Self {
        let ended = inner.is_end_stream();
        Watched {
            inner,
            watcher: Some(watcher),
            bytes: 0,
            ended,
        }
    }
}

impl<B, E: OnEnd> Watched<B, E> {
    /// A body nobody watches.
    pub fn passthrough(inner: B) -> Self {
        Watched {
            inner,
            watcher: None,
            bytes: 0,
            ended: false,
        }
    }

    /// The body watched.
    pub fn get_mut(&mut self) -> &mut B {
        &mut self.inner
    }

    fn finish(&mut self, aborted: bool) {
        if let Some(w) = self.watcher.take() {
            w.on_end(self.bytes, aborted);
        }
    }
}

impl<B, E: OnEnd> Drop for Watched<B, E> {
    fn drop(&mut self) {
        // hyper drops a body once it has taken as many bytes as Content-Length says,
        // without asking for its end: `ended` tells that from a cut-off response.
        let aborted = !self.ended;
        self.finish(aborted);
    }
}

impl<B: Body + Unpin, E: OnEnd + Unpin> Body for Watched<B, E> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = &mut *self;
        let res = Pin::new(&mut this.inner).poll_frame(cx);
        match &res {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.bytes += data.remaining() as u64;
                }
                this.ended = this.inner.is_end_stream();
                if this.ended {
                    this.finish(false);
                }
            }
            Poll::Ready(None) => {
                this.ended = true;
                this.finish(false);
            }
            Poll::Ready(Some(Err(_))) => this.finish(true),
            Poll::Pending => {}
        }
        res
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
