//! What a listener answers before routing: ACME HTTP-01 challenges, and on plain listeners
//! of a server with `tls.redirect_http`, a redirect to HTTPS for everything else.

use crate::body::GateBody;
use crate::http_util::{plain, strip_port};
use gatehouse_layers::acme::ChallengeTokens;
use http::header::{AUTHORIZATION, CONNECTION, CONTENT_LENGTH, HOST, LOCATION, TRANSFER_ENCODING};
use http::{HeaderValue, Request, Response, StatusCode};

/// One listener's settings, shared by its connections.
#[derive(Default)]
pub(crate) struct Front {
    /// Added to every response of an HTTPS listener.
    pub(crate) hsts: Option<HeaderValue>,
    /// `Alt-Svc`, on the TCP side of an HTTPS listener with HTTP/3 (RFC 7838 §3).
    pub(crate) alt_svc: Option<HeaderValue>,
    /// Redirect to HTTPS on this port (`None` inside: 443, left out of the URL).
    pub(crate) redirect: Option<Option<u16>>,
    pub(crate) acme: Option<ChallengeTokens>,
    /// Plain HTTP/1.1 only: file bodies may go out with sendfile.
    pub(crate) sendfile: bool,
    /// A longer request target gets 414 (RFC 9110 §15.5.15).
    pub(crate) max_uri_bytes: usize,
    pub(crate) protocols: ProtocolCounts,
}

/// `gatehouse_http_requests_by_protocol_total`: every request a listener reads, by its
/// HTTP version, refused ones included.
pub(crate) struct ProtocolCounts([metrics::Counter; 4]);

impl Default for ProtocolCounts {
    fn default() -> Self {
        let c = |p: &'static str| metrics::counter!("gatehouse_http_requests_by_protocol_total", "protocol" => p);
        ProtocolCounts([c("HTTP/1.0"), c("HTTP/1.1"), c("HTTP/2"), c("HTTP/3")])
    }
}

impl ProtocolCounts {
    pub(crate) fn count(&self, v: http::Version) {
        let i = match v {
            http::Version::HTTP_2 => 2,
            http::Version::HTTP_3 => 3,
            http::Version::HTTP_10 | http::Version::HTTP_09 => 0,
            _ => 1,
        };
        self.0[i].increment(1);
    }
}

/// A request that came in 0-RTT data (RFC 8470): a safe method (RFC 9110 §9.2.1) goes on
/// marked `Early-Data: 1`, which a proxy must add (§5.1) so that the upstream can decide
/// too; any other gets 425 Too Early (§5.2), and its client sends it again after the
/// handshake.
pub(crate) fn early_data<B>(req: &mut Request<B>) -> Option<Response<GateBody>> {
    if is_safe(req.method()) {
        req.headers_mut()
            .insert("early-data", HeaderValue::from_static("1"));
        None
    } else {
        Some(plain(StatusCode::TOO_EARLY, "too early\n"))
    }
}

/// RFC 9110 §9.2.1.
pub(crate) fn is_safe(m: &http::Method) -> bool {
    matches!(
        *m,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS | http::Method::TRACE
    )
}

impl Front {
    pub(crate) fn intercepts(&self) -> bool {
        self.redirect.is_some() || self.acme.is_some()
    }

    /// Makes the request canonical before routing, or gives the 4xx/5xx that refuses it:
    /// - 414 for a target longer than the limit (RFC 9110 §15.5.15);
    /// - 400 for an HTTP/1.1 request without exactly one `Host` (RFC 9112 §3.2), for a
    ///   `Host` that is not `host[:port]` ([`valid_host`]), and for an HTTP/2 request whose
    ///   `host` names another authority than `:authority` (RFC 9113 §8.3.1);
    /// - the authority of an absolute-form target (HTTP/1) or of `:authority` (HTTP/2)
    ///   becomes the one `Host`, as written (RFC 9112 §3.2.2: a proxy MUST replace Host
    ///   with it), so that the route, its auth, the cache and the upstream all read one
    ///   authority;
    /// - 501 for a transfer coding other than `chunked` (RFC 9112 §6.1: hyper would decode
    ///   the chunks and drop the rest);
    /// - the fields `Connection` names are removed (RFC 9110 §7.6.1: they never reach an
    ///   upstream, so no route reads them), and it keeps only `close`, `keep-alive` and
    ///   `upgrade`; 400 if it names `Host`, `Content-Length` or `Transfer-Encoding`,
    ///   without which the request is another;
    /// - 400 for two `Authorization` fields (which one would be checked, which forwarded?);
    /// - header names with `_` are dropped, as nginx does by default: `X_Forwarded_For`
    ///   would otherwise reach a CGI-style backend as `X-Forwarded-For`.
    ///
    /// (A body framed by both `Content-Length` and `Transfer-Encoding` never gets here:
    /// hyper reads it by `Transfer-Encoding` alone and closes the connection after the
    /// response, as RFC 9112 §6.1 allows.)
    pub(crate) fn canonicalize<B>(&self, req: &mut Request<B>) -> Option<Response<GateBody>> {
        // A gateway, not a forward proxy: CONNECT (RFC 9110 §9.3.6) is refused as nginx
        // refuses it. Passed on, an origin-form `CONNECT /x` reached the upstream, and its
        // 2xx left hyper's client side waiting for a tunnel: the client got no answer.
        if req.method() == http::Method::CONNECT {
            return Some(plain(
                StatusCode::METHOD_NOT_ALLOWED,
                "CONNECT is not supported\n",
            ));
        }
        let len = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
        if self.max_uri_bytes > 0 && len > self.max_uri_bytes {
            return Some(plain(StatusCode::URI_TOO_LONG, "URI too long\n"));
        }
        canonical_head(req)
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

fn bad(why: &'static str) -> Option<Response<GateBody>> {
    Some(plain(StatusCode::BAD_REQUEST, why))
}

/// The header checks of [`Front::canonicalize`], in one pass over the fields.
fn canonical_head<B>(req: &mut Request<B>) -> Option<Response<GateBody>> {
    let (mut hosts, mut auths, mut underscored, mut host_ok) = (0u32, 0u32, false, true);
    let mut connection = false;
    for (name, value) in req.headers() {
        if name == CONNECTION {
            connection = true;
        } else if name == HOST {
            hosts += 1;
            // Here rather than by a lookup after the loop: one hash lookup less a request.
            host_ok &= valid_host(value.as_bytes());
        } else if name == AUTHORIZATION {
            auths += 1;
        } else if name == TRANSFER_ENCODING {
            let only_chunked = value
                .as_bytes()
                .split(|&b| b == b',')
                .all(|c| c.trim_ascii().eq_ignore_ascii_case(b"chunked"));
            if !only_chunked {
                return Some(plain(
                    StatusCode::NOT_IMPLEMENTED,
                    "transfer coding not implemented\n",
                ));
            }
        } else if name.as_str().as_bytes().contains(&b'_') {
            underscored = true;
        }
    }
    if connection {
        match connection_named(req.headers()) {
            Named::Nothing => {}
            Named::Needed => {
                return bad("bad request: Connection names a field the request needs\n");
            }
            Named::Others { doomed, kept } => {
                let h = req.headers_mut();
                for n in doomed {
                    h.remove(n);
                }
                match kept {
                    Some(v) => h.insert(CONNECTION, v),
                    None => h.remove(CONNECTION),
                };
                // Counted again without them (`Connection: authorization` leaves none).
                return canonical_head(req);
            }
        }
    }
    if auths > 1 {
        return bad("bad request: two Authorization fields\n");
    }
    if underscored {
        let doomed: Vec<http::HeaderName> = req
            .headers()
            .keys()
            .filter(|k| k.as_str().contains('_'))
            .cloned()
            .collect();
        for k in doomed {
            req.headers_mut().remove(k);
        }
    }
    // RFC 9114 §4.3.1 asks of HTTP/3 what RFC 9113 §8.3.1 asks of HTTP/2.
    let h2 = req.version() >= http::Version::HTTP_2;
    if req.version() == http::Version::HTTP_11 && hosts != 1 {
        return bad("bad request: Host\n");
    }
    if hosts > 1 {
        return bad("bad request: Host\n");
    }
    // Even beside an authority: a Host that stays is forwarded.
    if !host_ok {
        return bad("bad request: Host\n");
    }
    if let Some(authority) = req.uri().authority() {
        if !valid_host(authority.as_str().as_bytes()) {
            return bad("bad request: authority\n");
        }
        let default_port = match req.uri().scheme_str() {
            Some("https") => Some(443),
            Some("http") => Some(80),
            _ => None,
        };
        let host = req.headers().get(HOST).map(HeaderValue::as_bytes);
        let authority = authority.as_str();
        let same = host.map(|h| same_authority(h, authority.as_bytes(), default_port));
        match same {
            // RFC 9113 §8.3.1: a request whose `host` and `:authority` differ is malformed.
            Some(false) if h2 => return bad("bad request: host and :authority differ\n"),
            Some(_) if host == Some(authority.as_bytes()) => {}
            // RFC 9112 §3.2.2: the absolute-form target's authority wins over Host, even
            // one naming the same origin in other words (`a.test:80` beside `http://a.test/`
            // on a TLS listener is `https://a.test:80` to an upstream building links, and
            // the cache's key reads the authority). Also an HTTP/2 request without `host`:
            // the upstream and the logs get it as Host.
            _ => match HeaderValue::from_str(authority) {
                Ok(v) => {
                    req.headers_mut().insert(HOST, v);
                }
                Err(_) => return bad("bad request: authority\n"),
            },
        }
        return None;
    }
    None
}

/// What a request's `Connection` fields name (RFC 9110 §7.6.1).
enum Named {
    /// Only `close`, `keep-alive` and `upgrade`, which are left as they are: hyper has
    /// read the first two, and the proxy takes an `Upgrade` pair for a WebSocket (§7.8).
    Nothing,
    /// `Host` or a field that frames the body: the request would be another without it.
    Needed,
    /// Other fields: these go, and `Connection` keeps only the tokens above, so that no
    /// field a route sets later is taken off on the way upstream.
    Others {
        doomed: Vec<http::HeaderName>,
        kept: Option<HeaderValue>,
    },
}

/// The fields a request's `Connection` names, which the listener removes before routing:
/// they are for this hop only and never reach an upstream, so the route's rules, auth and
/// cache must not read them either. Removed only at the proxy, `Connection: x-tenant`
/// took a field that a route's rule had set from the upstream's request, and the cache
/// stored the answer to that request for every client.
fn connection_named(fields: &http::HeaderMap) -> Named {
    let tokens = || {
        fields
            .get_all(CONNECTION)
            .iter()
            .flat_map(|v| v.as_bytes().split(|&b| b == b','))
            .map(<[u8]>::trim_ascii)
            .filter(|t| !t.is_empty())
    };
    let plain = |t: &[u8]| {
        [&b"close"[..], b"keep-alive", b"upgrade"]
            .iter()
            .any(|k| t.eq_ignore_ascii_case(k))
    };
    // `Connection: keep-alive` (HTTP/1.0 clients, many load balancers) costs no allocation.
    if tokens().all(plain) {
        return Named::Nothing;
    }
    let (mut doomed, mut kept) = (Vec::new(), Vec::new());
    for t in tokens() {
        if plain(t) {
            kept.push(t.to_ascii_lowercase());
            continue;
        }
        let Ok(name) = http::HeaderName::from_bytes(t) else {
            continue;
        };
        if name == HOST || name == CONTENT_LENGTH || name == TRANSFER_ENCODING {
            return Named::Needed;
        }
        if name != CONNECTION && fields.contains_key(&name) {
            doomed.push(name);
        }
    }
    let kept = (!kept.is_empty())
        .then(|| HeaderValue::from_bytes(&kept.join(&b", "[..])).ok())
        .flatten();
    Named::Others { doomed, kept }
}

/// Whether two valid authorities ([`valid_host`]) name one origin after RFC 3986 §6.2.3's
/// scheme-based normalisation: the same name (case aside) and the same port, a missing
/// one being the scheme's `default_port` (`a.test` and `a.test:443` over TLS are one
/// origin; `a.test` and `a.test:8443` are not).
fn same_authority(a: &[u8], b: &[u8], default_port: Option<u16>) -> bool {
    let split = |h: &[u8]| -> (usize, Option<u16>) {
        let after = if h.first() == Some(&b'[') {
            h.iter().position(|&b| b == b']').map_or(0, |i| i + 1)
        } else {
            0
        };
        match h[after..].iter().position(|&b| b == b':') {
            None => (h.len(), default_port),
            Some(i) => {
                let digits = std::str::from_utf8(&h[after + i + 1..]).ok();
                (after + i, digits.and_then(|d| d.parse().ok()))
            }
        }
    };
    let ((ae, ap), (be, bp)) = (split(a), split(b));
    a[..ae].eq_ignore_ascii_case(&b[..be]) && ap.is_some() && ap == bp
}

/// Whether a `Host` value (or an authority) is `host[:port]` (RFC 9110 §7.2, RFC 3986
/// §3.2): an IPv6 literal in brackets, or a name of letters, digits, `-`, `.`, `_` and `~`
/// whose labels are not empty (a single trailing dot allowed); then at most one `:` and a
/// port up to 65535. Stricter than RFC 3986's reg-name, which also admits sub-delims and
/// percent-escapes: no DNS name holds those, and a backend that decodes `%2E` or reads
/// `a,b` as a list would see another host than the one the route was chosen by. No
/// userinfo (RFC 9110 §4.2.4), no path, query or fragment, not empty.
pub(crate) fn valid_host(h: &[u8]) -> bool {
    if h.first() == Some(&b'[') {
        return valid_bracketed_host(h);
    }
    // One pass over the name: it is on every request, and a byte table with a label length
    // costs about a third of splitting into labels (callgrind, static-1k: 327 → ~100
    // instructions a request).
    let mut label = 0usize;
    let mut i = 0;
    while i < h.len() {
        match h[i] {
            b'.' if label == 0 => return false,
            b'.' => label = 0,
            b':' => break,
            b if NAME_BYTE[b as usize] => label += 1,
            _ => return false,
        }
        i += 1;
    }
    // A trailing dot is left with label == 0 after a label that was not empty.
    i > 0 && valid_port(&h[i..])
}

/// Letters, digits, `-`, `_` and `~`: the bytes of a name's labels.
static NAME_BYTE: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'~';
        b += 1;
    }
    t
};

/// Nothing, or `:` and a port of 1 to 5 digits up to 65535.
fn valid_port(p: &[u8]) -> bool {
    let [b':', digits @ ..] = p else {
        return p.is_empty();
    };
    if digits.is_empty() || digits.len() > 5 {
        return false;
    }
    let mut n = 0u32;
    for &d in digits {
        if !d.is_ascii_digit() {
            return false;
        }
        n = n * 10 + u32::from(d - b'0');
    }
    n <= 65535
}

/// `[` an IPv6 literal `]`, then the port part.
fn valid_bracketed_host(h: &[u8]) -> bool {
    let rest = &h[1..];
    let Some(end) = rest.iter().position(|&b| b == b']') else {
        return false;
    };
    let ok =
        std::str::from_utf8(&rest[..end]).is_ok_and(|s| s.parse::<std::net::Ipv6Addr>().is_ok());
    ok && valid_port(&rest[end + 1..])
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
    use http::header::UPGRADE;

    /// The one-pass `valid_host` against the grammar written plainly (split into host and
    /// port, then into labels), on every string of up to 6 bytes from an alphabet that
    /// holds each class of byte the grammar cares about.
    #[test]
    fn valid_host_agrees_with_the_grammar_written_plainly() {
        fn model(h: &[u8]) -> bool {
            let (host, port) = if let Some(rest) = h.strip_prefix(b"[") {
                let Some(end) = rest.iter().position(|&b| b == b']') else {
                    return false;
                };
                let lit = &rest[..end];
                let ok =
                    std::str::from_utf8(lit).is_ok_and(|s| s.parse::<std::net::Ipv6Addr>().is_ok());
                if !ok {
                    return false;
                }
                (&h[..end + 2], &rest[end + 1..])
            } else {
                match h.iter().position(|&b| b == b':') {
                    Some(i) => (&h[..i], &h[i..]),
                    None => (h, &h[h.len()..]),
                }
            };
            let port_ok = match port {
                [] => true,
                [b':', digits @ ..] => {
                    !digits.is_empty()
                        && digits.len() <= 5
                        && digits.iter().all(u8::is_ascii_digit)
                        && digits
                            .iter()
                            .fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'))
                            <= 65535
                }
                _ => false,
            };
            if !port_ok || host.is_empty() {
                return false;
            }
            if host[0] == b'[' {
                return true;
            }
            let name = host.strip_suffix(b".").unwrap_or(host);
            !name.is_empty()
                && name.split(|&b| b == b'.').all(|label| {
                    !label.is_empty()
                        && label
                            .iter()
                            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'~'))
                })
        }
        const ALPHABET: &[u8] = b"a9.:-_[]%@1";
        let mut cases = 0u32;
        let mut buf = Vec::new();
        for len in 0..=6u32 {
            for mut k in 0..(ALPHABET.len() as u64).pow(len) {
                buf.clear();
                for _ in 0..len {
                    buf.push(ALPHABET[(k % ALPHABET.len() as u64) as usize]);
                    k /= ALPHABET.len() as u64;
                }
                assert_eq!(
                    valid_host(&buf),
                    model(&buf),
                    "{:?}",
                    String::from_utf8_lossy(&buf)
                );
                cases += 1;
            }
        }
        for h in [
            "[::1]",
            "[::1]:8080",
            "[::1]x",
            "[::1",
            "[fe80::1%eth0]",
            "a.b.:65535",
            "a:65536",
            "a:00080",
        ] {
            assert_eq!(valid_host(h.as_bytes()), model(h.as_bytes()), "{h}");
        }
        assert!(cases > 1_900_000);
    }

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
    fn hosts_follow_the_authority_grammar() {
        for h in [
            "example.com",
            "EXAMPLE.com:8080",
            "a-b.c_d~e.",
            "127.0.0.1:80",
            "[::1]",
            "[2001:db8::1]:443",
            "x:65535",
        ] {
            assert!(valid_host(h.as_bytes()), "{h}");
        }
        for h in [
            "",
            ":80",
            "user@h",
            "h/evil",
            "h?x",
            "h#x",
            "a, b",
            "a,b",
            "[x]",
            "[::1",
            "[::1]x",
            "h:99999",
            "h:",
            "h:8o",
            "h:1:2",
            "a..b",
            ".a",
            ".",
            "%65vil",
            "h\\x",
            "h x",
            "evil.com/x?",
        ] {
            assert!(!valid_host(h.as_bytes()), "{h}");
        }
    }

    #[test]
    fn authorities_compare_by_host_and_port() {
        let (http, https) = (Some(80), Some(443));
        assert!(same_authority(b"A.test", b"a.test", http));
        assert!(same_authority(b"a.test:443", b"a.test", https));
        assert!(same_authority(b"[::1]:80", b"[::1]", http));
        assert!(same_authority(b"a.test:080", b"a.test:80", None));
        assert!(!same_authority(b"a.test:443", b"a.test:8443", https));
        assert!(!same_authority(b"secure.local", b"127.0.0.1", http));
        // Found by fuzz/fuzz_targets/route_forward.rs: a port on one side only is the
        // scheme's default or another origin.
        assert!(!same_authority(b"a.test:8080", b"a.test", http));
        assert!(!same_authority(b"a.test", b"a.test:443", http));
        assert!(!same_authority(b"a.test", b"a.test:80", None));
    }

    /// Found by fuzz/fuzz_targets/route_forward.rs: beside an absolute-form target's
    /// authority, a `Host` outside the grammar was kept, and forwarded, when its name and
    /// the authority's agreed (`a.test:` and `a.test:x@evil.test` with `http://a.test/`).
    #[test]
    fn a_host_beside_an_authority_follows_the_grammar_too() {
        let f = Front::default();
        for host in ["a.test:", "a.test:x@evil.test", "a.test:80/x"] {
            for version in [http::Version::HTTP_11, http::Version::HTTP_2] {
                let mut r = req("http://a.test/x", Some(host));
                *r.version_mut() = version;
                assert_eq!(
                    f.canonicalize(&mut r).map(|r| r.status()),
                    Some(StatusCode::BAD_REQUEST),
                    "{host} {version:?}"
                );
            }
        }
        // And a port on one side only: HTTP/1.1 takes the authority, HTTP/2 refuses.
        let mut r = req("http://a.test/x", Some("a.test:8080"));
        *r.version_mut() = http::Version::HTTP_11;
        assert!(f.canonicalize(&mut r).is_none());
        assert_eq!(r.headers().get(HOST).unwrap(), "a.test");
        *r.version_mut() = http::Version::HTTP_2;
        r.headers_mut()
            .insert(HOST, HeaderValue::from_static("a.test:8080"));
        assert_eq!(
            f.canonicalize(&mut r).map(|r| r.status()),
            Some(StatusCode::BAD_REQUEST)
        );
    }

    #[test]
    fn absolute_form_authority_replaces_host() {
        let f = Front::default();
        let mut r = req("http://a.test/x", Some("b.test"));
        *r.version_mut() = http::Version::HTTP_11;
        assert!(f.canonicalize(&mut r).is_none());
        assert_eq!(r.headers().get(HOST).unwrap(), "a.test");
        let mut r = req("http://a.test/x", Some("b.test"));
        *r.version_mut() = http::Version::HTTP_2;
        assert_eq!(
            f.canonicalize(&mut r).map(|r| r.status()),
            Some(StatusCode::BAD_REQUEST)
        );
        let mut r = req("/x", Some("evil.com/x?"));
        *r.version_mut() = http::Version::HTTP_11;
        assert_eq!(
            f.canonicalize(&mut r).map(|r| r.status()),
            Some(StatusCode::BAD_REQUEST)
        );
    }

    /// An authority naming Host's origin in other words still replaces it: the cache's
    /// key reads the authority, and an upstream building links reads Host.
    #[test]
    fn the_authority_replaces_a_host_naming_its_origin_otherwise() {
        let f = Front::default();
        for (target, host) in [
            ("http://a.test/x", "a.test:80"),
            ("https://a.test/x", "a.test:443"),
            ("http://a.test/x", "A.TEST"),
        ] {
            let mut r = req(target, Some(host));
            *r.version_mut() = http::Version::HTTP_11;
            assert!(f.canonicalize(&mut r).is_none(), "{host}");
            assert_eq!(r.headers().get(HOST).unwrap(), "a.test", "{host}");
        }
        let mut r = req("https://a.test/x", Some("a.test:443"));
        *r.version_mut() = http::Version::HTTP_2;
        assert!(f.canonicalize(&mut r).is_none());
        assert_eq!(r.headers().get(HOST).unwrap(), "a.test");
    }

    #[test]
    fn fields_connection_names_are_gone_before_routing() {
        let f = Front::default();
        let mut r = req("/x", Some("a.test"));
        *r.version_mut() = http::Version::HTTP_11;
        let h = r.headers_mut();
        h.insert(CONNECTION, HeaderValue::from_static("X-Tenant, keep-alive"));
        h.append(
            CONNECTION,
            HeaderValue::from_static("cookie, upgrade , ,bad name"),
        );
        h.insert("x-tenant", HeaderValue::from_static("acme"));
        h.insert("cookie", HeaderValue::from_static("lang=fr"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(UPGRADE, HeaderValue::from_static("websocket"));
        h.insert("x-other", HeaderValue::from_static("1"));
        assert!(f.canonicalize(&mut r).is_none());
        let left: Vec<&str> = r.headers().keys().map(|k| k.as_str()).collect();
        for gone in ["x-tenant", "cookie"] {
            assert!(!left.contains(&gone), "{gone} in {left:?}");
        }
        for kept in ["host", "connection", "upgrade", "x-other", "keep-alive"] {
            assert!(left.contains(&kept), "{kept} not in {left:?}");
        }
        // Connection keeps only what the proxy and hyper read: a field a route sets later
        // is not taken off on the way upstream.
        assert_eq!(r.headers()[CONNECTION], "keep-alive, upgrade");
        let mut r = req("/x", Some("a.test"));
        r.headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("x-absent"));
        assert!(f.canonicalize(&mut r).is_none());
        assert!(r.headers().get(CONNECTION).is_none());
        let mut r = req("/x", Some("a.test"));
        r.headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("Keep-Alive, UPGRADE"));
        assert!(f.canonicalize(&mut r).is_none());
        assert_eq!(
            r.headers()[CONNECTION],
            "Keep-Alive, UPGRADE",
            "left as sent"
        );
        // Two Authorization fields, one of them named: the one left is checked alone.
        let mut r = req("/x", Some("a.test"));
        let h = r.headers_mut();
        h.insert(CONNECTION, HeaderValue::from_static("authorization"));
        h.insert(AUTHORIZATION, HeaderValue::from_static("Basic a"));
        h.append(AUTHORIZATION, HeaderValue::from_static("Basic b"));
        assert!(f.canonicalize(&mut r).is_none());
        assert!(r.headers().get(AUTHORIZATION).is_none());
        // Without these the request would be another one: refused.
        for needed in ["host", "Content-Length", "close, transfer-encoding"] {
            let mut r = req("/x", Some("a.test"));
            *r.version_mut() = http::Version::HTTP_11;
            r.headers_mut()
                .insert(CONNECTION, HeaderValue::from_str(needed).unwrap());
            r.headers_mut()
                .insert(CONTENT_LENGTH, HeaderValue::from_static("3"));
            assert_eq!(
                f.canonicalize(&mut r).map(|r| r.status()),
                Some(StatusCode::BAD_REQUEST),
                "{needed}"
            );
        }
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
