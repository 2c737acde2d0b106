use http::Response;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

type Checking<B, E> = Pin<Box<dyn Future<Output = Result<Response<B>, E>> + Send>>;

pin_project! {
    /// The response future of [`RequireAuth`](super::RequireAuth): the Service's response
    /// when the check passed at once, the 401 or 403 when it failed at once, or a check
    /// that must wait (then the Service is called when it passes).
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        kind: Kind<F, B, E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, B, E> {
        Inner { #[pin] future: F },
        Answered { response: Option<Response<B>> },
        Checking { future: Checking<B, E> },
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    pub(super) fn inner(future: F) -> Self {
        ResponseFuture {
            kind: Kind::Inner { future },
        }
    }

    pub(super) fn answer(response: Response<B>) -> Self {
        ResponseFuture {
            kind: Kind::Answered {
                response: Some(response),
            },
        }
    }

    pub(super) fn checking(future: Checking<B, E>) -> Self {
        ResponseFuture {
            kind: Kind::Checking { future },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
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
            KindProj::Checking { future } => future.as_mut().poll(cx),
        }
    }
}
