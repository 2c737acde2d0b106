use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

type BoxFuture<R, E> = Pin<Box<dyn Future<Output = Result<R, E>> + Send>>;

pin_project! {
    /// Response future of [`OpenFileCache`](super::OpenFileCache): the inner future on a hit,
    /// a boxed load-then-call on a miss.
    pub struct ResponseFuture<F, R, E> {
        #[pin]
        kind: Kind<F, R, E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, R, E> {
        Inner { #[pin] fut: F },
        Boxed { fut: BoxFuture<R, E> },
    }
}

impl<F, R, E> ResponseFuture<F, R, E> {
    pub(crate) fn inner(fut: F) -> Self {
        ResponseFuture {
            kind: Kind::Inner { fut },
        }
    }

    pub(crate) fn boxed(fut: BoxFuture<R, E>) -> Self {
        ResponseFuture {
            kind: Kind::Boxed { fut },
        }
    }
}

impl<F, R, E> Future for ResponseFuture<F, R, E>
where
    F: Future<Output = Result<R, E>>,
{
    type Output = Result<R, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Inner { fut } => fut.poll(cx),
            KindProj::Boxed { fut } => fut.as_mut().poll(cx),
        }
    }
}
