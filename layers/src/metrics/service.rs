use super::{MetricsBody, ResponseFuture, RouteMetrics};
use http::{Request, Response};
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// The Service of [`MetricsLayer`](super::MetricsLayer).
#[derive(Clone, Debug)]
pub struct Metrics<S> {
    pub(crate) inner: S,
    pub(crate) metrics: Arc<RouteMetrics>,
}

impl<S, ReqB, B> Service<Request<ReqB>> for Metrics<S>
where
    S: Service<Request<ReqB>, Response = Response<B>>,
    B: http_body::Body,
{
    type Response = Response<MetricsBody<B>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let started = self.metrics.start(req.method());
        ResponseFuture::new(self.inner.call(req), self.metrics.clone(), started)
    }
}
