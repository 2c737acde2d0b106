use super::{BasicAuth, Verdict};
use bytes::Bytes;
use http::{Request, Response};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tower_layer::Layer;
use tower_service::Service;

/// Requires HTTP Basic credentials from a [`BasicAuth`] for every request.
#[derive(Clone, Debug)]
pub struct BasicAuthLayer {
    auth: BasicAuth,
}

impl BasicAuthLayer {
    pub fn new(auth: BasicAuth) -> Self {
        BasicAuthLayer { auth }
    }
}

impl<S> Layer<S> for BasicAuthLayer {
    type Service = BasicAuthService<S>;

    fn layer(&self, inner: S) -> BasicAuthService<S> {
        BasicAuthService {
            inner,
            auth: self.auth.clone(),
        }
    }
}

/// The Service of [`BasicAuthLayer`].
#[derive(Clone, Debug)]
pub struct BasicAuthService<S> {
    inner: S,
    auth: BasicAuth,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, ReqB, ResB> Service<Request<ReqB>> for BasicAuthService<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    ReqB: Send + 'static,
    ResB: From<Bytes> + Send + 'static,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<ResB>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let auth = self.auth.clone();
        match auth.check(req.headers()) {
            Verdict::Allowed => Box::pin(self.inner.call(req)),
            Verdict::Unauthorized => {
                let res = auth.unauthorized().map(ResB::from);
                Box::pin(async move { Ok(res) })
            }
            Verdict::Verify(p) => {
                // The inner Service was made ready for this call: take it, leave a clone.
                let clone = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, clone);
                Box::pin(async move {
                    let a = auth.clone();
                    let ok = tokio::task::spawn_blocking(move || a.verify(p))
                        .await
                        .unwrap_or(false);
                    if ok {
                        inner.call(req).await
                    } else {
                        Ok(auth.unauthorized().map(ResB::from))
                    }
                })
            }
        }
    }
}
