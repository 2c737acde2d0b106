use super::{Auth, Check, Client, ResponseFuture};
use bytes::Bytes;
use http::{Request, Response};
use std::task::{Context, Poll};
use tower_service::Service;

/// The Service of [`AuthLayer`](super::AuthLayer). (Not `Auth`: that name is the check
/// itself, which the gateway uses without a Service.)
#[derive(Clone, Debug)]
pub struct RequireAuth<S> {
    pub(super) inner: S,
    pub(super) auth: Auth,
}

/// The client's address (see [`client_addr`](crate::client::client_addr)), and whether the
/// request came over HTTPS ([`is_https`](crate::client::is_https)).
fn client<B>(req: &Request<B>) -> Client {
    Client {
        ip: crate::client::client_addr(req).map(|a| a.ip()),
        https: crate::client::is_https(req),
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for RequireAuth<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    ReqB: Send + 'static,
    ResB: From<Bytes> + Send + 'static,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResB, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        let c = client(&req);
        match self.auth.check(&mut req, c) {
            Check::Allow => ResponseFuture::inner(self.inner.call(req)),
            Check::Deny(res) => ResponseFuture::answer(res.map(ResB::from)),
            Check::Wait(check) => {
                // The inner Service was made ready for this call: take it, leave a clone.
                let clone = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, clone);
                ResponseFuture::checking(Box::pin(async move {
                    match check.await {
                        Ok(grant) => {
                            grant.apply(req.headers_mut());
                            inner.call(req).await
                        }
                        Err(res) => Ok(res.map(ResB::from)),
                    }
                }))
            }
        }
    }
}
