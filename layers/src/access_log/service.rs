use super::{AccessLog, ClientAddr, LogBody, Record};
use http::{Request, Response};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tower_service::Service;

/// The Service of [`AccessLogLayer`](super::AccessLogLayer).
#[derive(Clone, Debug)]
pub struct AccessLogService<S> {
    pub(crate) inner: S,
    pub(crate) log: AccessLog,
}

impl<S, ReqB, B> Service<Request<ReqB>> for AccessLogService<S>
where
    S: Service<Request<ReqB>, Response = Response<B>>,
    B: http_body::Body,
{
    type Response = Response<LogBody<B>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let remote = req.extensions().get::<ClientAddr>().map(|c| c.0);
        let record = Box::new(Record::start(&req, remote));
        ResponseFuture {
            inner: self.inner.call(req),
            record: Some(record),
            log: self.log.clone(),
        }
    }
}

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
