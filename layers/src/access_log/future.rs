use super::{AccessLog, LogBody, Record};
use http::Response;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

pin_project! {
    /// Completes the record with the response's status, and wraps its body to count it.
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        record: Option<Box<Record>>,
        log: AccessLog,
    }

    impl<F> PinnedDrop for ResponseFuture<F> {
        fn drop(this: Pin<&mut Self>) {
            // Dropped before a response: the client went away while it was being made.
            let this = this.project();
            if let Some(r) = this.record.take() {
                this.log.log_abandoned(r);
            }
        }
    }
}

impl<F> ResponseFuture<F> {
    pub(super) fn new(inner: F, record: Box<Record>, log: AccessLog) -> Self {
        ResponseFuture {
            inner,
            record: Some(record),
            log,
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: http_body::Body,
{
    type Output = Result<Response<LogBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let res = ready!(this.inner.poll(cx));
        let Some(mut record) = this.record.take() else {
            return Poll::Ready(res.map(|r| r.map(|b| LogBody::passthrough(b))));
        };
        match res {
            Ok(res) => {
                record.respond(res.status(), res.extensions());
                let log = this.log.clone();
                Poll::Ready(Ok(
                    res.map(|b| LogBody::new(b, super::LogEnd { record, log }))
                ))
            }
            Err(e) => {
                record.status = 500;
                this.log.log(&record);
                Poll::Ready(Err(e))
            }
        }
    }
}
