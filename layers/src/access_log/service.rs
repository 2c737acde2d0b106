use super::{AccessLog, LogBody, Record, ResponseFuture};
use http::{Request, Response};
use std::task::{Context, Poll};
use tower_service::Service;

/// The Service of [`AccessLogLayer`](super::AccessLogLayer). (Not `AccessLog`: that name
/// is the destination and format a layer logs with.)
#[derive(Clone, Debug)]
pub struct AccessLogging<S> {
    pub(crate) inner: S,
    pub(crate) log: AccessLog,
}

impl<S, ReqB, B> Service<Request<ReqB>> for AccessLogging<S>
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

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        if self.log.shows_cache_status() {
            req.extensions_mut()
                .insert(crate::upstream::CacheStatusWanted);
        }
        let remote = crate::client::client_addr(&req);
        let record = Box::new(Record::start(&req, remote));
        ResponseFuture::new(self.inner.call(req), record, self.log.clone())
    }
}
