//! Answers ACME HTTP-01 challenges (RFC 8555 §8.3) in front of any Service.
//!
//! An ACME client puts each challenge's token and key authorization into a shared
//! [`ChallengeTokens`]; while it is there, `GET /.well-known/acme-challenge/<token>` is
//! answered with the key authorization, and every other request goes on to the inner
//! Service untouched. Place the layer before routing, so that a redirect to HTTPS or an
//! authentication layer can't get in the CA's way.
//!
//! ```
//! use axum::{routing::get, Router};
//! use gatehouse_layers::acme::{AcmeChallengeLayer, ChallengeTokens};
//!
//! let tokens = ChallengeTokens::new();
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(AcmeChallengeLayer::new(tokens.clone()));
//! // The ACME client, while a challenge is pending:
//! tokens.insert("token123", "token123.thumbprint");
//! ```

mod layer;
mod service;

pub use crate::answer::ResponseFuture;
pub use layer::AcmeChallengeLayer;
pub use service::AcmeChallenge;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// The path prefix of RFC 8555 §8.3.
pub const CHALLENGE_PREFIX: &str = "/.well-known/acme-challenge/";

/// Pending HTTP-01 challenges: token → key authorization. Cheap to clone; clones share.
#[derive(Clone, Default, Debug)]
pub struct ChallengeTokens {
    inner: Arc<RwLock<HashMap<String, String>>>,
}

impl ChallengeTokens {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts answering `token` with `key_authorization`.
    pub fn insert(&self, token: impl Into<String>, key_authorization: impl Into<String>) {
        if let Ok(mut m) = self.inner.write() {
            m.insert(token.into(), key_authorization.into());
        }
    }

    /// Stops answering `token`.
    pub fn remove(&self, token: &str) {
        if let Ok(mut m) = self.inner.write() {
            m.remove(token);
        }
    }

    /// The key authorization for `token`, if it is pending.
    pub fn get(&self, token: &str) -> Option<String> {
        self.inner.read().ok()?.get(token).cloned()
    }

    /// Whether the request is for the challenge path at all (whatever its token).
    pub fn is_challenge<B>(req: &Request<B>) -> bool {
        req.uri().path().starts_with(CHALLENGE_PREFIX)
    }

    /// The answer to a challenge request: 200 with the key authorization, 404 for a token
    /// that isn't pending, 405 for a method other than GET or HEAD. `None` if the request
    /// is not for the challenge path.
    pub fn respond<B>(&self, req: &Request<B>) -> Option<Response<Bytes>> {
        let token = req.uri().path().strip_prefix(CHALLENGE_PREFIX)?;
        let mut res = Response::new(Bytes::new());
        if req.method() != Method::GET && req.method() != Method::HEAD {
            *res.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
            res.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            return Some(res);
        }
        match self.get(token) {
            Some(ka) => {
                res.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/octet-stream"),
                );
                res.headers_mut()
                    .insert(header::CONTENT_LENGTH, HeaderValue::from(ka.len()));
                if req.method() == Method::GET {
                    *res.body_mut() = Bytes::from(ka);
                }
            }
            None => {
                *res.status_mut() = StatusCode::NOT_FOUND;
                res.headers_mut()
                    .insert(header::CONTENT_LENGTH, HeaderValue::from(0));
            }
        }
        Some(res)
    }
}
