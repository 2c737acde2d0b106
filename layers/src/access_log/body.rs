use super::{AccessLog, Record};
use bytes::Buf;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};

/// A response body that counts what it hands out and writes the request's line when it
/// ends, or when it is dropped before its end (then marked aborted).
pub struct LogBody<B> {
    inner: B,
    pending: Option<(Box<Record>, AccessLog)>,
    /// The inner body said it had nothing more.
    ended: bool,
}

impl<B: Body> LogBody<B> {
    pub fn new(inner: B, record: Box<Record>, log: AccessLog) -> Self {
        let ended = inner.is_end_stream();
        LogBody {
            inner,
            pending: Some((record, log)),
            ended,
        }
    }
}

impl<B> LogBody<B> {
    /// A body that logs nothing.
    pub fn passthrough(inner: B) -> Self {
        LogBody {
            inner,
            pending: None,
            ended: false,
        }
    }

    fn finish(&mut self, aborted: bool) {
        if let Some((mut r, log)) = self.pending.take() {
            r.aborted = aborted;
            log.log(&r);
        }
    }
}

impl<B> Drop for LogBody<B> {
    fn drop(&mut self) {
        // hyper drops a body once it has taken as many bytes as Content-Length says,
        // without asking for its end: `ended` tells that from a cut-off response.
        let aborted = !self.ended;
        self.finish(aborted);
    }
}

impl<B: Body + Unpin> Body for LogBody<B> {
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
                if let (Some(data), Some((r, _))) = (frame.data_ref(), this.pending.as_mut()) {
                    r.bytes += data.remaining() as u64;
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
