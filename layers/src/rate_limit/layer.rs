use super::{too_many_requests, RateLimiter};
use bytes::Bytes;
use futures_util::future::{Either, Ready};
use http::{Request, Response};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::task::{Context, Poll};
use tower_layer::Layer;
use tower_service::Service;

/// Limits each client to a [`RateLimiter`]'s rate. See the [module docs](super).
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    limiter: RateLimiter,
}

impl RateLimitLayer {
    pub fn new(limiter: RateLimiter) -> Self {
        RateLimitLayer { limiter }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            limiter: self.limiter.clone(),
        }
    }
}

/// The Service of [`RateLimitLayer`].
#[derive(Clone, Debug)]
pub struct RateLimit<S> {
    inner: S,
    limiter: RateLimiter,
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for RateLimit<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    ResB: From<Bytes>,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = Either<S::Future, Ready<Result<Response<ResB>, S::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let client = req
            .extensions()
            .get::<axum::extract::ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip());
        match self.limiter.check(client) {
            Ok(()) => Either::Left(self.inner.call(req)),
            Err(wait) => Either::Right(futures_util::future::ready(Ok(
                too_many_requests(wait).map(ResB::from)
            ))),
        }
    }
}
