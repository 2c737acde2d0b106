use super::Policy;
use http::header::ACCESS_CONTROL_EXPOSE_HEADERS;
use http::{HeaderValue, Response};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

pin_project! {
    /// The response future of [`Cors`](super::Cors).
    pub struct ResponseFuture<F, B> {
        #[pin]
        kind: Kind<F, B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, B> {
        Inner { #[pin] fut: F, allow: Option<HeaderValue>, policy: Arc<Policy> },
        Preflight { res: Option<Response<B>> },
    }
}

impl<F, B> ResponseFuture<F, B> {
    pub(super) fn inner(fut: F, allow: Option<HeaderValue>, policy: Arc<Policy>) -> Self {
        ResponseFuture {
            kind: Kind::Inner { fut, allow, policy },
        }
    }

    pub(super) fn preflight(res: Response<B>) -> Self {
        ResponseFuture {
            kind: Kind::Preflight { res: Some(res) },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Inner { fut, allow, policy } => {
                let mut res = std::task::ready!(fut.poll(cx))?;
                let h = res.headers_mut();
                let allowed = allow.is_some();
                policy.fields(h, allow.take());
                if let (true, Some(e)) = (allowed, &policy.expose) {
                    h.insert(ACCESS_CONTROL_EXPOSE_HEADERS, e.clone());
                }
                Poll::Ready(Ok(res))
            }
            KindProj::Preflight { res } => match res.take() {
                Some(r) => Poll::Ready(Ok(r)),
                None => panic!("ResponseFuture polled after completion"),
            },
        }
    }
}
