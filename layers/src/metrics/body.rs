use super::{RouteMetrics, Started};
use bytes::Buf;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// A response body that counts what it hands out and records the request when it ends or
/// is dropped.
pub struct MetricsBody<B, M = Arc<RouteMetrics>>
where
    M: AsRef<RouteMetrics>,
{
    inner: B,
    pending: Option<(M, Started, u16)>,
    bytes: u64,
}

impl<B, M: AsRef<RouteMetrics>> MetricsBody<B, M> {
    pub fn new(inner: B, metrics: M, started: Started, status: u16) -> Self {
        MetricsBody {
            inner,
            pending: Some((metrics, started, status)),
            bytes: 0,
        }
    }

    /// A body that records nothing.
    pub fn passthrough(inner: B) -> Self {
        MetricsBody {
            inner,
            pending: None,
            bytes: 0,
        }
    }

    fn finish(&mut self) {
        if let Some((m, s, status)) = self.pending.take() {
            m.as_ref().finish(s, status, self.bytes);
        }
    }
}

impl<B, M: AsRef<RouteMetrics>> Drop for MetricsBody<B, M> {
    fn drop(&mut self) {
        self.finish();
    }
}

impl<B: Body + Unpin, M: AsRef<RouteMetrics> + Unpin> Body for MetricsBody<B, M> {
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
                if this.inner.is_end_stream() {
                    this.finish();
                }
            }
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => this.finish(),
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
