use super::body::CacheBody;
use super::service::{mark, Wants};
use crate::upstream::CacheStatus;
use http::Response;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

type Boxed<B, E> = Pin<Box<dyn Future<Output = Result<Response<CacheBody<B>>, E>> + Send>>;

pin_project! {
    /// The response future of [`Cache`](super::Cache). A hit is ready at once, and a
    /// request the cache does not answer is the inner future's, unboxed; only a miss or a
    /// revalidation, which go to the upstream anyway, are boxed.
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        kind: Kind<F, B, E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, B, E> {
        Ready { res: Option<Response<CacheBody<B>>> },
        Pass { #[pin] fut: F, header: bool, wants: Wants },
        Boxed { fut: Boxed<B, E> },
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    pub(crate) fn ready(res: Response<CacheBody<B>>) -> Self {
        ResponseFuture {
            kind: Kind::Ready { res: Some(res) },
        }
    }

    pub(crate) fn pass(fut: F, header: bool, wants: Wants) -> Self {
        ResponseFuture {
            kind: Kind::Pass { fut, header, wants },
        }
    }

    pub(crate) fn boxed(fut: Boxed<B, E>) -> Self {
        ResponseFuture {
            kind: Kind::Boxed { fut },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: http_body::Body,
{
    type Output = Result<Response<CacheBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Ready { res } => match res.take() {
                Some(res) => Poll::Ready(Ok(res)),
                None => Poll::Pending,
            },
            KindProj::Pass { fut, header, wants } => {
                let res = ready!(fut.poll(cx))?;
                let mut res = res.map(|b| CacheBody::filling(b, None));
                mark(&mut res, CacheStatus::Bypass, *header, *wants, "fwd=bypass");
                Poll::Ready(Ok(res))
            }
            KindProj::Boxed { fut } => fut.as_mut().poll(cx),
        }
    }
}
