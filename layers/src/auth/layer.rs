use super::{Auth, Check, Client};
use bytes::Bytes;
use futures_util::future::{Either, Ready};
use http::{Request, Response};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use tower_layer::Layer;
use tower_service::Service;

/// Requires every request to pass an [`Auth`] check (Basic, JWT or forward auth).
#[derive(Clone, Debug)]
pub struct AuthLayer {
    auth: Auth,
}

impl AuthLayer {
    pub fn new(auth: impl Into<Auth>) -> Self {
        AuthLayer { auth: auth.into() }
    }
}

impl<S> Layer<S> for AuthLayer {
    type Service = AuthService<S>;

    fn layer(&self, inner: S) -> AuthService<S> {
        AuthService {
            inner,
            auth: self.auth.clone(),
        }
    }
}

/// The Service of [`AuthLayer`].
#[derive(Clone, Debug)]
pub struct AuthService<S> {
    inner: S,
    auth: Auth,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The client's address, when the app was served with axum's `ConnectInfo`.
fn client<B>(req: &Request<B>) -> Client {
    Client {
        ip: req
            .extensions()
            .get::<axum::extract::ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip()),
        https: req.uri().scheme() == Some(&http::uri::Scheme::HTTPS),
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for AuthService<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    ReqB: Send + 'static,
    ResB: From<Bytes> + Send + 'static,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = Either<
        Either<S::Future, Ready<Result<Response<ResB>, S::Error>>>,
        BoxFuture<Result<Response<ResB>, S::Error>>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        let c = client(&req);
        match self.auth.check(&mut req, c) {
            Check::Allow => Either::Left(Either::Left(self.inner.call(req))),
            Check::Deny(res) => Either::Left(Either::Right(futures_util::future::ready(Ok(
                res.map(ResB::from)
            )))),
            Check::Wait(check) => {
                // The inner Service was made ready for this call: take it, leave a clone.
                let clone = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, clone);
                Either::Right(Box::pin(async move {
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
