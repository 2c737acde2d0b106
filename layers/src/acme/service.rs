use super::{ChallengeTokens, ResponseFuture};
use bytes::Bytes;
use http::{Request, Response};
use std::task::{Context, Poll};
use tower_service::Service;

/// Answers ACME HTTP-01 challenges, and passes everything else to `S`.
#[derive(Clone, Debug)]
pub struct AcmeChallenge<S> {
    inner: S,
    tokens: ChallengeTokens,
}

impl<S> AcmeChallenge<S> {
    pub fn new(inner: S, tokens: ChallengeTokens) -> Self {
        AcmeChallenge { inner, tokens }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for AcmeChallenge<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: From<Bytes>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        match self.tokens.respond(&req) {
            Some(res) => ResponseFuture::answer(res.map(ResBody::from)),
            None => ResponseFuture::inner(self.inner.call(req)),
        }
    }
}
