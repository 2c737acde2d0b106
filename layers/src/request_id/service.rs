use super::{acceptable, generate, ResponseFuture};
use crate::cidr::CidrSet;
use http::{HeaderName, Request, Response};
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// The Service of [`RequestIdLayer`](super::RequestIdLayer).
#[derive(Clone, Debug)]
pub struct RequestIdService<S> {
    pub(super) inner: S,
    pub(super) header: HeaderName,
    pub(super) trusted: Arc<CidrSet>,
    pub(super) extension: bool,
    pub(super) request_extension: bool,
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for RequestIdService<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        let trusted = !self.trusted.is_empty()
            && crate::client::client_addr(&req).is_some_and(|p| self.trusted.contains(p.ip()));
        let id = match req.headers().get(&self.header) {
            Some(v) if trusted && acceptable(v) => v.clone(),
            _ => generate(),
        };
        // Any other field of the name goes: the Service sees the one ID.
        req.headers_mut().insert(self.header.clone(), id.clone());
        // One extension: templates read tower-http's (each insert costs an allocation).
        if self.request_extension {
            req.extensions_mut()
                .insert(tower_http::request_id::RequestId::new(id.clone()));
        }
        ResponseFuture {
            inner: self.inner.call(req),
            id: Some((self.header.clone(), id, self.extension)),
        }
    }
}
