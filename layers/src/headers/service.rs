use super::{HeaderRules, ResponseFuture};
use crate::template::{host_of, Vars};
use http::{Request, Response};
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// The Service of [`HeadersLayer`](super::HeadersLayer).
#[derive(Clone, Debug)]
pub struct Headers<S> {
    pub(super) inner: S,
    pub(super) request: Arc<[HeaderRules]>,
    pub(super) response: Arc<[HeaderRules]>,
    /// Some response rule reads the request's variables: they are kept for it.
    pub(super) capture: bool,
}

/// What a response rule's variables read of the request, kept until the response.
#[derive(Debug)]
pub(super) struct Captured {
    pub(super) uri: http::Uri,
    pub(super) host: Option<Box<str>>,
    pub(super) remote: Option<std::net::SocketAddr>,
    pub(super) https: bool,
    pub(super) request_id: Option<Arc<str>>,
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for Headers<S>
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
        if !self.request.is_empty() {
            // The variables are read from the request before any rule changes it.
            let uri = req.uri().clone();
            let host: Option<Box<str>> = host_of(&req).map(Into::into);
            let of = Vars::of(&req);
            let (remote, https) = (of.remote, of.https);
            let id: Option<Box<str>> = of.request_id.map(Into::into);
            let vars = Vars {
                uri: &uri,
                host: host.as_deref(),
                remote,
                https,
                request_id: id.as_deref(),
                upstream: None,
            };
            for r in self.request.iter() {
                r.apply(req.headers_mut(), &vars);
            }
        }
        let captured = self.capture.then(|| {
            let vars = Vars::of(&req);
            Box::new(Captured {
                uri: req.uri().clone(),
                host: host_of(&req).map(Into::into),
                remote: vars.remote,
                https: vars.https,
                request_id: vars.request_id.map(Arc::from),
            })
        });
        ResponseFuture {
            inner: self.inner.call(req),
            rules: (!self.response.is_empty()).then(|| (self.response.clone(), captured)),
        }
    }
}
