//! What a listener answers before routing: ACME HTTP-01 challenges, and on plain listeners
//! of a server with `tls.redirect_http`, a redirect to HTTPS for everything else.

use crate::body::GateBody;
use crate::router::strip_port;
use crate::static_files::plain;
use gatehouse_layers::acme::ChallengeTokens;
use http::header::{HOST, LOCATION};
use http::{HeaderValue, Request, Response, StatusCode};

/// One listener's settings, shared by its connections.
#[derive(Default)]
pub(crate) struct Front {
    /// Added to every response of an HTTPS listener.
    pub(crate) hsts: Option<HeaderValue>,
    /// Redirect to HTTPS on this port (`None` inside: 443, left out of the URL).
    pub(crate) redirect: Option<Option<u16>>,
    pub(crate) acme: Option<ChallengeTokens>,
    /// Plain HTTP/1.1 only: file bodies may go out with sendfile.
    pub(crate) sendfile: bool,
    /// A longer request target gets 414 (RFC 9110 §15.5.15).
    pub(crate) max_uri_bytes: usize,
}

impl Front {
    pub(crate) fn intercepts(&self) -> bool {
        self.redirect.is_some() || self.acme.is_some()
    }

    /// The 4xx for a request refused before routing, if it is one:
    /// - 414 for a target longer than the limit (RFC 9110 §15.5.15);
    /// - 400 for an HTTP/1.1 request without exactly one `Host` (RFC 9112 §3.2).
    ///
    /// (A body framed by both `Content-Length` and `Transfer-Encoding` never gets here:
    /// hyper reads it by `Transfer-Encoding` alone and closes the connection after the
    /// response, as RFC 9112 §6.1 allows.)
    pub(crate) fn refuse<B>(&self, req: &Request<B>) -> Option<Response<GateBody>> {
        let len = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
        if self.max_uri_bytes > 0 && len > self.max_uri_bytes {
            return Some(plain(StatusCode::URI_TOO_LONG, "URI too long\n"));
        }
        if req.version() == http::Version::HTTP_11 {
            let mut hosts = req.headers().get_all(HOST).iter();
            if hosts.next().is_none() || hosts.next().is_some() {
                return Some(plain(StatusCode::BAD_REQUEST, "bad request: Host\n"));
            }
        }
        None
    }

    /// The response to give instead of routing, if any.
    pub(crate) fn intercept<B>(&self, req: &Request<B>) -> Option<Response<GateBody>> {
        if let Some(tokens) = &self.acme {
            if let Some(res) = tokens.respond(req) {
                return Some(res.map(GateBody::full));
            }
        }
        let port = self.redirect?;
        Some(redirect(req, port))
    }
}

/// 308 to the same host, path and query over https (RFC 9110 §15.4.9: the method and body
/// are kept, unlike a 301).
fn redirect<B>(req: &Request<B>, port: Option<u16>) -> Response<GateBody> {
    let host = req
        .uri()
        .host()
        .or_else(|| req.headers().get(HOST)?.to_str().ok())
        .map(strip_port)
        .filter(|h| !h.is_empty());
    let Some(host) = host else {
        return plain(StatusCode::BAD_REQUEST, "a Host header is required\n");
    };
    let pq = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let mut loc = String::with_capacity(host.len() + pq.len() + 16);
    loc.push_str("https://");
    loc.push_str(host);
    if let Some(p) = port {
        loc.push(':');
        loc.push_str(&p.to_string());
    }
    loc.push_str(pq);
    match HeaderValue::from_str(&loc) {
        Ok(v) => {
            let mut res = plain(StatusCode::PERMANENT_REDIRECT, "moved to https\n");
            res.headers_mut().insert(LOCATION, v);
            res
        }
        Err(_) => plain(StatusCode::BAD_REQUEST, "bad Host header\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(uri: &str, host: Option<&str>) -> Request<()> {
        let mut b = Request::builder().uri(uri);
        if let Some(h) = host {
            b = b.header(HOST, h);
        }
        b.body(()).unwrap()
    }

    fn location(r: &Response<GateBody>) -> &str {
        r.headers().get(LOCATION).unwrap().to_str().unwrap()
    }

    #[test]
    fn redirects_keep_path_and_query_and_swap_the_port() {
        let r = redirect(&req("/a/b?x=1&y", Some("example.com:8080")), Some(8443));
        assert_eq!(r.status(), StatusCode::PERMANENT_REDIRECT);
        assert_eq!(location(&r), "https://example.com:8443/a/b?x=1&y");
        let r = redirect(&req("/", Some("example.com")), None);
        assert_eq!(location(&r), "https://example.com/");
        let r = redirect(&req("/x", Some("[::1]:80")), None);
        assert_eq!(location(&r), "https://[::1]/x");
        let r = redirect(&req("/x", None), None);
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn acme_challenges_are_answered_not_redirected() {
        let tokens = ChallengeTokens::new();
        tokens.insert("abc", "abc.key");
        let f = Front {
            redirect: Some(None),
            acme: Some(tokens),
            ..Front::default()
        };
        let r = f
            .intercept(&req("/.well-known/acme-challenge/abc", Some("a.test")))
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let r = f
            .intercept(&req("/.well-known/acme-challenge/zzz", Some("a.test")))
            .unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        let r = f.intercept(&req("/page", Some("a.test"))).unwrap();
        assert_eq!(r.status(), StatusCode::PERMANENT_REDIRECT);
    }
}
