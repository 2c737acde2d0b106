use super::{AllowHeaders, Policy, ResponseFuture};
use http::header::{
    ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_MAX_AGE,
    ACCESS_CONTROL_REQUEST_HEADERS, ACCESS_CONTROL_REQUEST_METHOD, ORIGIN,
};
use http::{Method, Request, Response};
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// The Service of [`CorsLayer`](super::CorsLayer).
#[derive(Clone, Debug)]
pub struct Cors<S> {
    pub(super) inner: S,
    pub(super) policy: Arc<Policy>,
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for Cors<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    ResB: Default,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResB>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let h = req.headers();
        let origin = h.get(ORIGIN);
        let allow = self.policy.allow(origin);
        // A preflight (Fetch §3.2.2): answered here, before auth and the Service.
        if req.method() == Method::OPTIONS
            && origin.is_some()
            && h.contains_key(ACCESS_CONTROL_REQUEST_METHOD)
        {
            let p = &*self.policy;
            let mut res = Response::new(ResB::default());
            let out = res.headers_mut();
            p.fields(out, allow);
            out.insert(ACCESS_CONTROL_ALLOW_METHODS, p.methods.clone());
            match &p.headers {
                AllowHeaders::Any => {
                    if let Some(asked) = h.get(ACCESS_CONTROL_REQUEST_HEADERS) {
                        out.insert(ACCESS_CONTROL_ALLOW_HEADERS, asked.clone());
                    }
                }
                AllowHeaders::List(Some(v)) => {
                    out.insert(ACCESS_CONTROL_ALLOW_HEADERS, v.clone());
                }
                AllowHeaders::List(None) => {}
            }
            if let Some(age) = &p.max_age {
                out.insert(ACCESS_CONTROL_MAX_AGE, age.clone());
            }
            return ResponseFuture::preflight(res);
        }
        ResponseFuture::inner(self.inner.call(req), allow, self.policy.clone())
    }
}
