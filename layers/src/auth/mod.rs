//! Authentication, one check per route: HTTP Basic (RFC 7617) from an htpasswd file
//! ([`BasicAuth`]), Bearer JWTs (RFC 7519) with keys from a file or a JWKS URL
//! ([`JwtAuth`]), or a subrequest to an auth service ([`ForwardAuth`]). [`AuthLayer`]
//! puts any of them in front of a Service.
//!
//! Missing or wrong credentials get 401 with a `WWW-Authenticate` challenge, valid ones
//! that aren't let in get 403, and neither says why (that goes to the log at debug level).
//! A check that must wait (bcrypt on the blocking pool, a JWKS fetch, the auth service)
//! does so without holding up other requests; a cached Basic success or a JWT whose key is
//! known is decided inline, without allocating a future.
//!
//! ```
//! use axum::{routing::get, Router};
//! use gatehouse_layers::auth::{AuthLayer, BasicAuth};
//! # let dir = tempfile::tempdir().unwrap();
//! # let users = dir.path().join("users.htpasswd");
//! # std::fs::write(&users, "ann:{SHA}/vNB+F2HQ559kaLUZbmHHvZrXpg=\n").unwrap(); // "s3cret"
//!
//! let auth = BasicAuth::open(&users, "admin area", std::time::Duration::from_secs(60))
//!     .expect("htpasswd");
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "secret" }))
//!     .layer(AuthLayer::new(auth));
//! # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! # rt.block_on(async {
//! #     use tower::ServiceExt;
//! #     let req = http::Request::get("/").body(axum::body::Body::empty()).unwrap();
//! #     assert_eq!(app.clone().oneshot(req).await.unwrap().status(), 401);
//! #     let req = http::Request::get("/")
//! #         .header("authorization", "Basic YW5uOnMzY3JldA==")
//! #         .body(axum::body::Body::empty())
//! #         .unwrap();
//! #     assert_eq!(app.oneshot(req).await.unwrap().status(), 200);
//! # });
//! ```

mod basic;
mod error;
pub mod forward;
mod future;
mod htpasswd;
pub mod jwt;
mod layer;
mod service;

pub use basic::{BasicAuth, Pending, Verdict};
pub use error::AuthError;
pub use forward::{ForwardAuth, ForwardOptions};
pub use future::ResponseFuture;
pub use htpasswd::Htpasswd;
pub use jwt::{JwksOptions, JwtAuth, JwtOptions};
pub use layer::AuthLayer;
pub use service::RequireAuth;

use bytes::Bytes;
use http::header::WWW_AUTHENTICATE;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;

/// One route's authentication. Cheap to clone; clones share caches and keys.
#[derive(Clone, Debug)]
pub enum Auth {
    Basic(BasicAuth),
    Jwt(JwtAuth),
    Forward(ForwardAuth),
}

impl From<BasicAuth> for Auth {
    fn from(a: BasicAuth) -> Auth {
        Auth::Basic(a)
    }
}

impl From<JwtAuth> for Auth {
    fn from(a: JwtAuth) -> Auth {
        Auth::Jwt(a)
    }
}

impl From<ForwardAuth> for Auth {
    fn from(a: ForwardAuth) -> Auth {
        Auth::Forward(a)
    }
}

/// A check that has to wait: on success, the headers to add to the request.
pub type AuthFuture = Pin<Box<dyn Future<Output = Result<Grant, Response<Bytes>>> + Send>>;

/// The outcome of [`Auth::check`].
pub enum Check {
    /// Let in; any headers the check sets are already on the request.
    Allow,
    /// Answer this instead of serving the request.
    Deny(Response<Bytes>),
    /// Decided later: await, then [`Grant::apply`] the headers or answer the response.
    Wait(AuthFuture),
}

/// Request headers a successful check sets (forwarded JWT claims, an auth service's
/// answer headers).
#[derive(Debug, Default)]
pub struct Grant {
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl Grant {
    pub fn apply(self, h: &mut HeaderMap) {
        for (name, value) in self.headers {
            h.append(name, value);
        }
    }
}

/// What is known of the client beyond its request, for forward auth's
/// `X-Forwarded-For` and `X-Forwarded-Proto`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Client {
    pub ip: Option<IpAddr>,
    pub https: bool,
}

impl Auth {
    /// Whether `other` is a clone of this same check.
    pub fn same(&self, other: &Auth) -> bool {
        let id = |a: &Auth| match a {
            Auth::Basic(a) => a.id(),
            Auth::Jwt(a) => a.id(),
            Auth::Forward(a) => a.id(),
        };
        id(self) == id(other)
    }

    /// Checks a request. Headers the check may set are first removed from it, so that a
    /// client can't send its own.
    pub fn check<B>(&self, req: &mut Request<B>, client: Client) -> Check {
        match self {
            Auth::Basic(a) => match a.check(req.headers()) {
                Verdict::Allowed => Check::Allow,
                Verdict::Verify(p) => {
                    let a = a.clone();
                    Check::Wait(Box::pin(async move {
                        let b = a.clone();
                        // bcrypt takes milliseconds by design: never on the event loop.
                        let v = tokio::task::spawn_blocking(move || b.verify(p))
                            .await
                            .unwrap_or(Verdict::Unauthorized);
                        match v {
                            Verdict::Allowed => Ok(Grant::default()),
                            v => Err(a.refusal(&v)),
                        }
                    }))
                }
                v => Check::Deny(a.refusal(&v)),
            },
            Auth::Jwt(a) => a.check_request(req.headers_mut()),
            Auth::Forward(a) => a.check(req, client),
        }
    }
}

/// 401 with `challenge` in `WWW-Authenticate` (RFC 7235 §3.1), and no word on what was
/// wrong: Basic's and Bearer's answer alike.
pub(crate) fn unauthorized(challenge: &HeaderValue) -> Response<Bytes> {
    let mut res = crate::text_response(StatusCode::UNAUTHORIZED, "unauthorized\n");
    res.headers_mut()
        .insert(WWW_AUTHENTICATE, challenge.clone());
    res
}

/// 403: the credentials are good, the user isn't let in.
pub(crate) fn forbidden() -> Response<Bytes> {
    crate::text_response(StatusCode::FORBIDDEN, "forbidden\n")
}
