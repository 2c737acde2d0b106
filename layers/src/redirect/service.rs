use super::{RedirectRule, ResponseFuture};
use crate::template::Vars;
use bytes::Bytes;
use http::header::{CONTENT_LENGTH, LOCATION};
use http::{HeaderValue, Request, Response, StatusCode};
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// The Service of [`RedirectLayer`](super::RedirectLayer).
#[derive(Clone, Debug)]
pub struct Redirect<S> {
    pub(super) inner: S,
    pub(super) rules: Arc<[RedirectRule]>,
}

/// The redirect `req` gets, if a rule matches it.
pub(crate) fn answer<B>(rules: &[RedirectRule], req: &Request<B>) -> Option<Response<Bytes>> {
    let path = req.uri().path();
    let (rule, location) = rules.iter().find_map(|r| match &r.literal {
        // A fixed target: no captures made, nothing rendered.
        Some(loc) => r.matches.is_match(path).then(|| (r, Ok(loc.clone()))),
        None => {
            let caps = if r.to.uses_captures() {
                r.matches.captures(path)?
            } else if r.matches.is_match(path) {
                Vec::new()
            } else {
                return None;
            };
            let target = r.to.render(&Vars::of(req), Some(&caps));
            Some((r, HeaderValue::try_from(target)))
        }
    })?;
    let mut res = Response::new(Bytes::new());
    match location {
        Ok(loc) => {
            *res.status_mut() = rule.status;
            res.headers_mut().insert(LOCATION, loc);
        }
        // The request's own values (its host) made a target no field can carry.
        Err(_) => *res.status_mut() = StatusCode::BAD_REQUEST,
    }
    res.headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
    Some(res)
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for Redirect<S>
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
        match answer(&self.rules, &req) {
            Some(res) => ResponseFuture::answer(res.map(ResB::from)),
            None => ResponseFuture::inner(self.inner.call(req)),
        }
    }
}
