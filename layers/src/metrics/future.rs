use super::{MetricsBody, RouteMetrics, Started};
use http::Response;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

pin_project! {
    /// Takes the response's status, and wraps its body to count it.
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        pending: Option<(Arc<RouteMetrics>, Started)>,
    }

    impl<F> PinnedDrop for ResponseFuture<F> {
        fn drop(this: Pin<&mut Self>) {
            // Dropped before a response: the client went away while it was being made.
            if let Some((m, s)) = this.project().pending.take() {
                m.finish(s, 499, 0);
            }
        }
    }
}

impl<F> ResponseFuture<F> {
    pub(super) fn new(inner: F, metrics: Arc<RouteMetrics>, started: Started) -> Self {
        ResponseFuture {
            inner,
            pending: Some((metrics, started)),
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: http_body::Body,
{
    type Output = Result<Response<MetricsBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let res = ready!(this.inner.poll(cx));
        let Some((m, s)) = this.pending.take() else {
            return Poll::Ready(res.map(|r| r.map(MetricsBody::passthrough)));
        };
        match res {
            Ok(res) => {
                let status = res.status().as_u16();
                Poll::Ready(Ok(res.map(|b| {
                    MetricsBody::new(
                        b,
                        super::MetricsEnd {
                            metrics: m,
                            started: s,
                            status,
                        },
                    )
                })))
            }
            Err(e) => {
                m.finish(s, 500, 0);
                Poll::Ready(Err(e))
            }
        }
    }
}
