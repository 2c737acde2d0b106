use super::{IpRules, ResponseFuture};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// The Service of [`IpFilterLayer`](super::IpFilterLayer).
#[derive(Clone, Debug)]
pub struct IpFilter<S> {
    pub(super) inner: S,
    pub(super) rules: Arc<IpRules>,
}

impl<S> IpFilter<S> {
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for IpFilter<S>
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
        let peer = crate::client::client_addr(&req);
        if self.rules.allows(peer, req.headers()) {
            ResponseFuture::inner(self.inner.call(req))
        } else {
            let res = crate::text_response(StatusCode::FORBIDDEN, "forbidden\n");
            ResponseFuture::answer(res.map(ResB::from))
        }
    }
}
