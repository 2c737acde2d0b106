use super::layer::KeyFn;
use super::{too_many_requests, RateLimiter, ResponseFuture};
use bytes::Bytes;
use http::{Request, Response};
use std::fmt;
use std::task::{Context, Poll};
use tower_service::Service;

/// The Service of [`RateLimitLayer`](super::RateLimitLayer).
#[derive(Clone)]
pub struct RateLimit<S> {
    pub(super) inner: S,
    pub(super) limiter: RateLimiter,
    pub(super) key: KeyFn,
}

impl<S: fmt::Debug> fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("limiter", &self.limiter)
            .finish_non_exhaustive()
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for RateLimit<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    ResB: From<Bytes>,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResB>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let (parts, body) = req.into_parts();
        let key = (self.key)(&parts);
        let req = Request::from_parts(parts, body);
        let Some(key) = key else {
            self.limiter.pass_unkeyed();
            return ResponseFuture::inner(self.inner.call(req));
        };
        match self.limiter.check(key) {
            Ok(()) => ResponseFuture::inner(self.inner.call(req)),
            Err(wait) => ResponseFuture::answer(too_many_requests(wait).map(ResB::from)),
        }
    }
}
