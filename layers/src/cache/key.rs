//! Cache keys (RFC 9111 §2, §4.1).

use http::header::{HeaderName, COOKIE, HOST};
use http::{HeaderMap, Request};
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::OnceLock;

/// What besides the target goes into a key.
#[derive(Clone, Debug, Default)]
pub(crate) struct KeyParts {
    pub headers: Vec<HeaderName>,
    pub cookies: Vec<String>,
}

/// The primary key: `GET` (a HEAD is answered from a GET's entry), scheme, host and
/// target, then each configured field's and cookie's value. Its text starts with
/// `GET <scheme>://<host><target>`, which a purge by prefix matches.
pub(crate) fn primary<B>(req: &Request<B>, parts: &KeyParts) -> String {
    primary_for(req, None, parts)
}

/// As [`primary`], for `target` on the request's host if given (a `Location` an unsafe
/// method's response names, RFC 9111 §4.4).
pub(crate) fn primary_for<B>(req: &Request<B>, target: Option<&str>, parts: &KeyParts) -> String {
    let uri = req.uri();
    // The connection's, when the server says (a client's absolute-form target must not
    // file a plain-HTTP answer under https, say a redirect to itself).
    let scheme = if crate::client::is_https(req) {
        "https"
    } else {
        "http"
    };
    let host = uri
        .authority()
        .map(|a| a.as_str().as_bytes())
        .or_else(|| req.headers().get(HOST).map(|v| v.as_bytes()))
        .unwrap_or(b"");
    let target = target.unwrap_or_else(|| uri.path_and_query().map_or("/", |pq| pq.as_str()));
    let mut k = String::with_capacity(16 + host.len() + target.len());
    k.push_str("GET ");
    k.push_str(scheme);
    k.push_str("://");
    // Host names are case-insensitive (RFC 9110 §4.2.3).
    match std::str::from_utf8(host) {
        Ok(h) if h.is_ascii() => {
            let at = k.len();
            k.push_str(h);
            k[at..].make_ascii_lowercase();
        }
        _ => host
            .iter()
            .for_each(|&b| k.push(b.to_ascii_lowercase() as char)),
    }
    k.push_str(target);
    for name in &parts.headers {
        k.push('\n');
        k.push_str(name.as_str());
        k.push(':');
        push_values(&mut k, req.headers(), name);
    }
    for cookie in &parts.cookies {
        k.push_str("\ncookie ");
        k.push_str(cookie);
        k.push('=');
        if let Some(v) = cookie_value(req.headers(), cookie) {
            k.push_str(v);
        }
    }
    k
}

/// A field's values, comma-joined, as bytes that cannot break the key's layout.
fn push_values(k: &mut String, headers: &HeaderMap, name: &HeaderName) {
    for (i, v) in headers.get_all(name).iter().enumerate() {
        if i > 0 {
            k.push(',');
        }
        for &b in v.as_bytes() {
            // Escaped, so that distinct values stay distinct and none can end the line.
            if (b.is_ascii_graphic() || b == b' ') && b != b'%' {
                k.push(b as char);
            } else {
                k.push_str(&format!("%{b:02X}"));
            }
        }
    }
}

/// The value of the cookie `name` in the request's `Cookie` fields (RFC 6265 §5.4).
fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
}

/// Whether the request's cookies could be read two ways for a keyed cookie (a value that
/// is not text, a name with spaces before its `=`, the name twice): the origin's parser
/// might pick another value than the key, so such a request bypasses the cache.
pub(crate) fn cookies_ambiguous(headers: &HeaderMap, names: &[String]) -> bool {
    if names.is_empty() {
        return false;
    }
    let mut seen = vec![0u32; names.len()];
    for v in headers.get_all(COOKIE) {
        let Ok(v) = v.to_str() else {
            return true;
        };
        for pair in v.split(';') {
            let Some((raw, _)) = pair.split_once('=') else {
                continue;
            };
            let name = raw.trim_start();
            for (i, n) in names.iter().enumerate() {
                if name.trim_end() == n {
                    if name != n {
                        return true;
                    }
                    seen[i] += 1;
                }
            }
        }
    }
    seen.iter().any(|&c| c > 1)
}

/// The secondary key (§4.1): a hash of the request's values of the fields `names`, each
/// normalised (whitespace around list members dropped, members joined by one comma).
/// 0 when `names` is empty.
pub(crate) fn secondary(headers: &HeaderMap, names: &[HeaderName]) -> u64 {
    if names.is_empty() {
        return 0;
    }
    static STATE: OnceLock<ahash::RandomState> = OnceLock::new();
    let mut h = STATE
        .get_or_init(|| ahash::RandomState::with_seeds(1, 2, 3, 4))
        .build_hasher();
    for name in names {
        name.as_str().hash(&mut h);
        // An absent field matches only an absent one, not an empty one (§4.1); the
        // number of lines does not count, as `Foo: 1, 2` is `Foo: 1` and `Foo: 2`.
        headers.contains_key(name).hash(&mut h);
        // Cookie's lines are joined by `;` (RFC 9113 §8.2.3), and a comma is part of a
        // cookie's value: `a=1,b=2` is not the two cookies `a=1` and `b=2`.
        let sep = if name == http::header::COOKIE {
            b';'
        } else {
            b','
        };
        for v in headers.get_all(name) {
            for member in v.as_bytes().split(|&b| b == sep) {
                let m = member.trim_ascii();
                if !m.is_empty() {
                    m.hash(&mut h);
                    0xffu8.hash(&mut h);
                }
            }
        }
        0xfeu8.hash(&mut h);
    }
    // 0 is the key of responses without Vary.
    h.finish().max(1)
}

/// The fields a response's `Vary` names, lowercased and in order, without repeats.
pub(crate) fn vary_names(response: &HeaderMap) -> Vec<HeaderName> {
    let mut names: Vec<HeaderName> = Vec::new();
    for v in response.get_all(http::header::VARY) {
        for f in v.as_bytes().split(|&b| b == b',') {
            if let Ok(n) = HeaderName::from_bytes(f.trim_ascii()) {
                if !names.contains(&n) {
                    names.push(n);
                }
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(uri: &str, headers: &[(&str, &str)]) -> Request<()> {
        let mut b = Request::builder().uri(uri);
        for (n, v) in headers {
            b = b.header(*n, *v);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn the_key_is_scheme_host_and_target_with_the_configured_fields() {
        let none = KeyParts::default();
        let r = req("/a?b=1", &[("host", "Example.COM")]);
        assert_eq!(primary(&r, &none), "GET http://example.com/a?b=1");
        // Bytes beyond ASCII (obs-text) each keep a character of their own.
        let mut r = req("/", &[]);
        let host = http::HeaderValue::from_bytes(b"B\xe9.Test").unwrap();
        r.headers_mut().insert(HOST, host);
        assert_eq!(primary(&r, &none), "GET http://b\u{e9}.test/");
        let mut r = req("https://example.com/a", &[]);
        assert_eq!(primary(&r, &none), "GET https://example.com/a");
        // The connection outranks what the client wrote.
        r.extensions_mut().insert(crate::client::Https(false));
        assert_eq!(primary(&r, &none), "GET http://example.com/a");
        let parts = KeyParts {
            headers: vec![HeaderName::from_static("x-tenant")],
            cookies: vec!["lang".into()],
        };
        let a = req(
            "/",
            &[("host", "h"), ("x-tenant", "a"), ("cookie", "x=1; lang=fr")],
        );
        let b = req(
            "/",
            &[("host", "h"), ("x-tenant", "b"), ("cookie", "lang=fr")],
        );
        assert_eq!(
            primary(&a, &parts),
            "GET http://h/\nx-tenant:a\ncookie lang=fr"
        );
        assert_ne!(primary(&a, &parts), primary(&b, &parts));
        // Bytes outside visible ASCII (and '%') are escaped: the key stays one line per
        // part, and distinct values stay distinct.
        let c = req("/", &[("host", "h"), ("x-tenant", "a\u{ff}%")]);
        assert_eq!(
            primary(&c, &parts),
            "GET http://h/\nx-tenant:a%C3%BF%25\ncookie lang="
        );
        let d = req("/", &[("host", "h"), ("x-tenant", "a\u{fe}%")]);
        assert_ne!(primary(&c, &parts), primary(&d, &parts));
    }

    #[test]
    fn a_keyed_cookie_read_two_ways_is_ambiguous() {
        let names = vec!["lang".to_string()];
        let amb = |v: &[u8]| {
            let mut h = HeaderMap::new();
            h.insert(COOKIE, http::HeaderValue::from_bytes(v).unwrap());
            cookies_ambiguous(&h, &names)
        };
        assert!(!amb(b"a=1; lang=fr"));
        assert!(!amb(b"a=1"));
        assert!(amb(b"lang=fr; x=\xff"));
        assert!(amb(b"lang =de"));
        assert!(amb(b"lang=fr; lang=de"));
        assert!(!cookies_ambiguous(&HeaderMap::new(), &[]));
    }

    #[test]
    fn the_secondary_key_ignores_list_whitespace_and_tells_values_apart() {
        let names = vec![HeaderName::from_static("accept-encoding")];
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert("accept-encoding", v.parse().unwrap());
            m
        };
        assert_eq!(secondary(&HeaderMap::new(), &[]), 0);
        assert_eq!(
            secondary(&h("gzip, br"), &names),
            secondary(&h("gzip,br"), &names)
        );
        assert_ne!(
            secondary(&h("gzip, br"), &names),
            secondary(&h("br, gzip"), &names)
        );
        assert_ne!(
            secondary(&h("gzip"), &names),
            secondary(&HeaderMap::new(), &names)
        );
        assert_ne!(
            secondary(&h(""), &names),
            secondary(&HeaderMap::new(), &names)
        );
        // Two field lines are one list (RFC 9110 §5.3).
        let mut lines = h("gzip");
        lines.append("accept-encoding", "br".parse().unwrap());
        assert_eq!(secondary(&lines, &names), secondary(&h("gzip, br"), &names));
        // Cookie's crumbs are joined by `;`, never by a comma.
        let cookie = vec![http::header::COOKIE];
        let c = |lines: &[&str]| {
            let mut m = HeaderMap::new();
            for l in lines {
                m.append("cookie", l.parse().unwrap());
            }
            secondary(&m, &cookie)
        };
        assert_eq!(c(&["a=1; b=2"]), c(&["a=1", "b=2"]));
        assert_ne!(c(&["a=1,b=2"]), c(&["a=1", "b=2"]));
        let mut v = HeaderMap::new();
        v.append("vary", "Accept-Encoding, accept-encoding".parse().unwrap());
        v.append("vary", "Origin".parse().unwrap());
        assert_eq!(
            vary_names(&v),
            vec![names[0].clone(), HeaderName::from_static("origin")]
        );
    }
}
