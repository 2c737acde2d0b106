use crate::template::RequestIdText;
use http::{HeaderName, HeaderValue, Response};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

pin_project! {
    /// The response future of [`RequestIdService`](super::RequestIdService).
    pub struct ResponseFuture<F> {
        #[pin]
        pub(super) inner: F,
        pub(super) id: Option<(HeaderName, HeaderValue, bool)>,
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut res = std::task::ready!(this.inner.poll(cx))?;
        if let Some((name, id, extension)) = this.id.take() {
            if extension {
                res.extensions_mut().insert(RequestIdText(id.clone()));
            }
            // The client is told the ID its request was logged and forwarded with, not
            // whatever the upstream echoed.
            res.headers_mut().insert(name, id);
        }
        Poll::Ready(Ok(res))
    }
}
