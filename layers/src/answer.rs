use http::Response;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

pin_project! {
    /// The response future of the layers that either answer a request themselves or pass
    /// it on: [`AcmeChallenge`](crate::acme::AcmeChallenge) (a challenge's key
    /// authorization), [`RateLimit`](crate::rate_limit::RateLimit) (429) and
    /// [`IpFilter`](crate::ip_filter::IpFilter) (403). Their answer, or the Service's
    /// response.
    pub struct ResponseFuture<F, B> {
        #[pin]
        kind: Kind<F, B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, B> {
        Inner { #[pin] future: F },
        Answered { response: Option<Response<B>> },
    }
}

impl<F, B> ResponseFuture<F, B> {
    pub(crate) fn inner(future: F) -> Self {
        ResponseFuture {
            kind: Kind::Inner { future },
        }
    }

    pub(crate) fn answer(response: Response<B>) -> Self {
        ResponseFuture {
            kind: Kind::Answered {
                response: Some(response),
            },
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
            KindProj::Inner { future } => future.poll(cx),
            KindProj::Answered { response } => match response.take() {
                Some(r) => Poll::Ready(Ok(r)),
                None => panic!("ResponseFuture polled after completion"),
            },
        }
    }
}
