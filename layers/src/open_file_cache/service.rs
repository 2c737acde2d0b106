use super::future::ResponseFuture;
use super::FileCache;
use http::{Method, Request};
use std::task::{Context, Poll};
use tower_service::Service;

/// The middleware made by [`OpenFileCacheLayer`](super::OpenFileCacheLayer).
#[derive(Debug, Clone)]
pub struct OpenFileCache<S> {
    inner: S,
    cache: FileCache,
}

impl<S> OpenFileCache<S> {
    pub fn new(inner: S, cache: FileCache) -> Self {
        OpenFileCache { inner, cache }
    }

    pub fn cache(&self) -> &FileCache {
        &self.cache
    }
}

impl<S, B> Service<Request<B>> for OpenFileCache<S>
where
    S: Service<Request<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return ResponseFuture::inner(self.inner.call(req));
        }
        // A hit is answered here, on the event loop, with no hand-off.
        if let Some(resolved) = self.cache.lookup(req.uri().path()) {
            req.extensions_mut().insert(resolved);
            return ResponseFuture::inner(self.inner.call(req));
        }
        // `inner` was made ready by poll_ready: take it, leave a fresh clone behind.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let cache = self.cache.clone();
        ResponseFuture::boxed(Box::pin(async move {
            let resolved = cache.load(req.uri().path()).await;
            req.extensions_mut().insert(resolved);
            inner.call(req).await
        }))
    }
}
