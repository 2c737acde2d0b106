use super::{Page, ResponseFuture};
use http::{Request, Response, StatusCode};
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// The Service of [`ErrorPagesLayer`](super::ErrorPagesLayer).
#[derive(Clone, Debug)]
pub struct ErrorPages<S> {
    pub(super) inner: S,
    pub(super) pages: Arc<[(StatusCode, Page)]>,
    pub(super) intercept_upstream: bool,
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for ErrorPages<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    ResB: From<bytes::Bytes>,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        ResponseFuture {
            inner: self.inner.call(req),
            pages: Some(self.pages.clone()),
            intercept_upstream: self.intercept_upstream,
        }
    }
}
