//! Forward auth, as nginx `auth_request` and Traefik ForwardAuth: each request is first
//! put to an auth service, as a subrequest with the original method, the chosen request
//! headers, and `X-Forwarded-Method`, `-Proto`, `-Host`, `-Uri` and `-For` (plus nginx's
//! `X-Original-URI`), without the body.
//!
//! - 2xx: the request goes on, with the chosen headers of the answer copied onto it (a
//!   client's own headers of those names are removed first, whatever the answer).
//! - 401, 403, or a redirect (to a login page): that answer goes back to the client, with
//!   its body and its `WWW-Authenticate`, `Location`, `Set-Cookie` and `Content-Type`.
//! - Anything else, no answer within the timeout, or no connection: 503. A failing auth
//!   service never lets a request in.
//!
//! A request marked `Early-Data: 1` (it came in TLS or QUIC early data, RFC 8470) is put
//! to the auth service marked so too (§5.1), and the service's 425 Too Early goes back to
//! the client (§5.2), which sends it again once its handshake is done.

use super::{AuthError, Check, Client, Grant};
use bytes::Bytes;
use http::header::{
    CONTENT_LENGTH, CONTENT_TYPE, COOKIE, HOST, LOCATION, SET_COOKIE, WWW_AUTHENTICATE,
};
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use std::sync::Arc;
use std::time::Duration;

/// Options of a [`ForwardAuth`].
#[derive(Clone, Debug)]
pub struct ForwardOptions {
    /// Request headers passed to the auth service.
    pub request_headers: Vec<String>,
    /// Headers of a 2xx answer copied onto the request.
    pub response_headers: Vec<String>,
    /// How long the auth service may take to answer.
    pub timeout: Duration,
    /// Peers whose `X-Forwarded-For` names the client the auth service is told of
    /// ([`client_ip`](crate::cidr::client_ip)); from anyone else, the peer is the client.
    pub trusted_proxies: Vec<(std::net::IpAddr, u8)>,
}

impl Default for ForwardOptions {
    fn default() -> Self {
        ForwardOptions {
            request_headers: vec!["authorization".into(), "cookie".into()],
            response_headers: Vec::new(),
            timeout: Duration::from_secs(5),
            trusted_proxies: Vec::new(),
        }
    }
}

/// Asks an auth service about each request. Cheap to clone; clones share connections.
#[derive(Clone)]
pub struct ForwardAuth {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ForwardAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForwardAuth")
            .field("url", &self.inner.url.as_str())
            .finish()
    }
}

struct Inner {
    url: reqwest::Url,
    client: reqwest::Client,
    request_headers: Vec<HeaderName>,
    response_headers: Vec<HeaderName>,
    trusted: crate::cidr::CidrSet,
}

/// An answer's body passed back to the client is cut off here.
const BODY_MAX: usize = 64 * 1024;

static X_FORWARDED_METHOD: HeaderName = HeaderName::from_static("x-forwarded-method");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
static X_FORWARDED_URI: HeaderName = HeaderName::from_static("x-forwarded-uri");
static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_ORIGINAL_URI: HeaderName = HeaderName::from_static("x-original-uri");
static EARLY_DATA: HeaderName = HeaderName::from_static("early-data");

impl ForwardAuth {
    /// Identifies this check among clones of others.
    pub(super) fn id(&self) -> usize {
        Arc::as_ptr(&self.inner) as *const () as usize
    }

    /// An auth service at `url` (`http://` or `https://`). Needs a tokio runtime when
    /// checking.
    pub fn new(url: &str, o: &ForwardOptions) -> Result<ForwardAuth, AuthError> {
        let bad_url = |problem: String| AuthError::Url {
            url: url.to_string(),
            problem,
        };
        let parsed = reqwest::Url::parse(url).map_err(|e| bad_url(e.to_string()))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
            return Err(bad_url("not an http:// or https:// URL".into()));
        }
        let names = |list: &[String]| {
            list.iter()
                .map(|h| {
                    HeaderName::try_from(h.as_str()).map_err(|_| AuthError::HeaderName(h.clone()))
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let client = reqwest::Client::builder()
            .timeout(o.timeout)
            // The auth service's redirects go to the client, not followed here.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(AuthError::Client)?;
        Ok(ForwardAuth {
            inner: Arc::new(Inner {
                url: parsed,
                client,
                request_headers: names(&o.request_headers)?,
                response_headers: names(&o.response_headers)?,
                trusted: crate::cidr::CidrSet::new(o.trusted_proxies.iter().copied()),
            }),
        })
    }

    pub(crate) fn check<B>(&self, req: &mut Request<B>, client: Client) -> Check {
        let i = &self.inner;
        for h in &i.response_headers {
            req.headers_mut().remove(h);
        }
        let mut sub = HeaderMap::new();
        for h in &i.request_headers {
            if *h == COOKIE {
                // An HTTP/2 or HTTP/3 client's cookie fields, as the one an HTTP/1.1
                // service expects.
                if let Some(v) = crate::fields::joined_cookie(req.headers()) {
                    sub.insert(COOKIE, v);
                }
                continue;
            }
            for v in req.headers().get_all(h) {
                sub.append(h.clone(), v.clone());
            }
        }
        if let Ok(v) = HeaderValue::from_str(req.method().as_str()) {
            sub.insert(X_FORWARDED_METHOD.clone(), v);
        }
        sub.insert(
            X_FORWARDED_PROTO.clone(),
            HeaderValue::from_static(if client.https { "https" } else { "http" }),
        );
        let host = match req.uri().authority() {
            Some(a) => HeaderValue::from_str(a.as_str()).ok(),
            None => req.headers().get(HOST).cloned(),
        };
        if let Some(h) = host {
            sub.insert(X_FORWARDED_HOST.clone(), h);
        }
        let uri = req.uri().path_and_query().map_or("/", |p| p.as_str());
        if let Ok(v) = HeaderValue::from_str(uri) {
            sub.insert(X_FORWARDED_URI.clone(), v.clone());
            sub.insert(X_ORIGINAL_URI.clone(), v);
        }
        // The client the route's IP rules see behind the same proxies, not the balancer
        // every request comes through (which an auth service may trust as internal).
        if let Some(peer) = client.ip {
            let ip = crate::cidr::client_ip(peer, req.headers(), &i.trusted);
            if let Ok(v) = HeaderValue::from_str(&ip.to_string()) {
                sub.insert(X_FORWARDED_FOR.clone(), v);
            }
        }
        let early = req.headers().get(&EARLY_DATA).is_some_and(|v| v == "1");
        if early {
            sub.insert(EARLY_DATA.clone(), HeaderValue::from_static("1"));
        }
        let sent = i
            .client
            .request(req.method().clone(), i.url.clone())
            .headers(sub)
            .send();
        let me = self.clone();
        Check::Wait(Box::pin(async move {
            match sent.await {
                Ok(answer) => me.answer(answer, early).await,
                Err(e) => {
                    tracing::warn!("forward auth {}: {e}", me.inner.url);
                    Err(unavailable())
                }
            }
        }))
    }

    async fn answer(
        &self,
        mut a: reqwest::Response,
        early: bool,
    ) -> Result<Grant, Response<Bytes>> {
        let status = a.status();
        if status.is_success() {
            let mut grant = Grant::default();
            for h in &self.inner.response_headers {
                for v in a.headers().get_all(h) {
                    grant.headers.push((h.clone(), v.clone()));
                }
            }
            return Ok(grant);
        }
        let passed = matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN)
            || status.is_redirection()
            || (early && status == StatusCode::TOO_EARLY);
        if !passed {
            tracing::warn!("forward auth {}: answered {status}", self.inner.url);
            return Err(unavailable());
        }
        let mut body = Vec::new();
        loop {
            match a.chunk().await {
                Ok(Some(c)) if body.len() + c.len() <= BODY_MAX => body.extend_from_slice(&c),
                Ok(Some(_)) => break,
                Ok(None) => break,
                // The verdict is known; a body cut short is only a shorter page.
                Err(_) => break,
            }
        }
        let mut res = Response::new(Bytes::from(body));
        *res.status_mut() = status;
        let h = res.headers_mut();
        for name in [WWW_AUTHENTICATE, LOCATION, SET_COOKIE, CONTENT_TYPE] {
            for v in a.headers().get_all(&name) {
                h.append(name.clone(), v.clone());
            }
        }
        let len = res.body().len();
        res.headers_mut()
            .insert(CONTENT_LENGTH, HeaderValue::from(len));
        Err(res)
    }
}

fn unavailable() -> Response<Bytes> {
    crate::text_response(
        StatusCode::SERVICE_UNAVAILABLE,
        "authentication unavailable\n",
    )
}
