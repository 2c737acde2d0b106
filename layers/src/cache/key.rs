//! Cache keys (RFC 9111 §2, §4.1).

use http::header::{HeaderName, COOKIE, HOST};
use http::{HeaderMap, HeaderValue, Request};
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
/// `GET <scheme>://<host><target>`, which a purge by prefix matches. `host` is the
/// request's first `Host` field, which the caller has found.
pub(crate) fn primary<B>(req: &Request<B>, host: Option<&HeaderValue>, parts: &KeyParts) -> String {
    primary_in(req, host, None, parts)
}

/// A request's primary key for a lookup: its text, or, for the common request (no
/// configured fields or cookies, a host in lower case), the pieces of that text, which
/// hash and compare as the text would, without making it. Making it (an allocation, the
/// copies, the host's UTF-8 check and lowercasing) and hashing it cost about 650 of a
/// hit's 15.8k instructions, the pieces about 300 (callgrind, cache-1k).
#[derive(Debug)]
pub(crate) enum Primary<'a> {
    Text(String),
    /// `<prefix><host><target>`: the prefix is `GET <scheme>://`, the host has no `/`, the
    /// target starts with one, as [`hash_text`] cuts a text.
    Pieces {
        prefix: &'static str,
        host: &'a [u8],
        target: &'a str,
    },
}

impl<'a> Primary<'a> {
    /// As [`primary`], in pieces when it can be.
    pub(crate) fn of<B>(
        req: &'a Request<B>,
        host: Option<&'a HeaderValue>,
        parts: &KeyParts,
    ) -> Primary<'a> {
        let uri = req.uri();
        let host_bytes = match uri.authority() {
            Some(a) => a.as_str().as_bytes(),
            None => host.map_or(&b""[..], |v| v.as_bytes()),
        };
        let target = uri.path_and_query().map_or("/", |pq| pq.as_str());
        if parts.headers.is_empty()
            && parts.cookies.is_empty()
            && host_bytes.iter().all(|&b| PLAIN_HOST[usize::from(b)])
            && target.starts_with('/')
        {
            return Primary::Pieces {
                prefix: if scheme(req) == "https" {
                    "GET https://"
                } else {
                    "GET http://"
                },
                host: host_bytes,
                target,
            };
        }
        Primary::Text(primary(req, host, parts))
    }

    /// The key's text.
    pub(crate) fn text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Primary::Text(t) => t.as_str().into(),
            Primary::Pieces {
                prefix,
                host,
                target,
            } => {
                let mut t = String::with_capacity(prefix.len() + host.len() + target.len());
                t.push_str(prefix);
                // Only the bytes of [`PLAIN_HOST`], all ASCII.
                host.iter().for_each(|&b| t.push(char::from(b)));
                t.push_str(target);
                t.into()
            }
        }
    }

    /// Whether `text` is this key's text.
    pub(crate) fn is(&self, text: &str) -> bool {
        match self {
            Primary::Text(t) => t == text,
            Primary::Pieces {
                prefix,
                host,
                target,
            } => {
                let t = text.as_bytes();
                t.len() == prefix.len() + host.len() + target.len()
                    && t.starts_with(prefix.as_bytes())
                    && t.ends_with(target.as_bytes())
                    && t[prefix.len()..t.len() - target.len()] == **host
            }
        }
    }
}

/// The bytes a host may have for its key to be made in pieces: lower-case letters,
/// digits, `.`, `-`, `:`, `[` and `]` (names, IPv4 and IPv6 addresses, ports). Any other
/// (upper case, `/`, percent-encoding, bytes that are not ASCII) makes the text.
static PLAIN_HOST: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_lowercase()
            || c.is_ascii_digit()
            || matches!(c, b'.' | b'-' | b':' | b'[' | b']');
        b += 1;
    }
    t
};

impl Hash for Primary<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self {
            Primary::Text(t) => hash_text(state, t),
            Primary::Pieces {
                prefix,
                host,
                target,
            } => {
                state.write(prefix.as_bytes());
                state.write(host);
                state.write(target.as_bytes());
            }
        }
    }
}

/// Hashes a primary key's text in three cuts: through the `://` after the scheme, the
/// host (up to the next `/`), and the rest, which is how [`Primary::Pieces`] holds it.
/// Every primary key hashes through this ([`Key`](super::store::Key)'s `Hash`) or as its
/// pieces.
pub(crate) fn hash_text<H: Hasher>(state: &mut H, text: &str) {
    let t = text.as_bytes();
    let prefix = ["GET http://", "GET https://"]
        .iter()
        .find(|p| t.starts_with(p.as_bytes()))
        .map_or(0, |p| p.len());
    let host_end = t[prefix..]
        .iter()
        .position(|&b| b == b'/')
        .map_or(t.len(), |i| prefix + i);
    state.write(&t[..prefix]);
    state.write(&t[prefix..host_end]);
    state.write(&t[host_end..]);
}

/// The scheme a key files the request under: the connection's, when the server says (a
/// client's absolute-form target must not file a plain-HTTP answer under https, say a
/// redirect to itself).
fn scheme<B>(req: &Request<B>) -> &'static str {
    if crate::client::is_https(req) {
        "https"
    } else {
        "http"
    }
}

/// As [`primary`], for `target` on the request's host (a `Location` an unsafe method's
/// response names, RFC 9111 §4.4).
pub(crate) fn primary_for<B>(req: &Request<B>, target: &str, parts: &KeyParts) -> String {
    primary_in(req, req.headers().get(HOST), Some(target), parts)
}

fn primary_in<B>(
    req: &Request<B>,
    host_field: Option<&HeaderValue>,
    target: Option<&str>,
    parts: &KeyParts,
) -> String {
    let uri = req.uri();
    let scheme = scheme(req);
    let host = uri
        .authority()
        .map(|a| a.as_str().as_bytes())
        .or_else(|| host_field.map(|v| v.as_bytes()))
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

    fn key(r: &Request<()>, parts: &KeyParts) -> String {
        primary(r, r.headers().get(HOST), parts)
    }

    #[test]
    fn the_key_is_scheme_host_and_target_with_the_configured_fields() {
        let none = KeyParts::default();
        let r = req("/a?b=1", &[("host", "Example.COM")]);
        assert_eq!(key(&r, &none), "GET http://example.com/a?b=1");
        // Bytes beyond ASCII (obs-text) each keep a character of their own.
        let mut r = req("/", &[]);
        let host = http::HeaderValue::from_bytes(b"B\xe9.Test").unwrap();
        r.headers_mut().insert(HOST, host);
        assert_eq!(key(&r, &none), "GET http://b\u{e9}.test/");
        let mut r = req("https://example.com/a", &[]);
        assert_eq!(key(&r, &none), "GET https://example.com/a");
        // The connection outranks what the client wrote.
        r.extensions_mut().insert(crate::client::Https(false));
        assert_eq!(key(&r, &none), "GET http://example.com/a");
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
        assert_eq!(key(&a, &parts), "GET http://h/\nx-tenant:a\ncookie lang=fr");
        assert_ne!(key(&a, &parts), key(&b, &parts));
        // Bytes outside visible ASCII (and '%') are escaped: the key stays one line per
        // part, and distinct values stay distinct.
        let c = req("/", &[("host", "h"), ("x-tenant", "a\u{ff}%")]);
        assert_eq!(
            key(&c, &parts),
            "GET http://h/\nx-tenant:a%C3%BF%25\ncookie lang="
        );
        let d = req("/", &[("host", "h"), ("x-tenant", "a\u{fe}%")]);
        assert_ne!(key(&c, &parts), key(&d, &parts));
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

    fn hash_of(h: &impl Hash) -> u64 {
        ahash::RandomState::with_seeds(5, 6, 7, 8).hash_one(h)
    }

    #[test]
    fn a_key_in_pieces_is_its_text_and_hashes_as_it() {
        let parts = KeyParts::default();
        let hosts = [
            "",
            "h",
            "example.com",
            "127.0.0.1:18181",
            "[::1]:8443",
            "a-much-longer-host.example",
        ];
        let targets = ["/", "/a", "/1k.bin", "/a/b/c/d/e/f?g=h&i=j", "/%41?x"];
        for (host, target) in hosts
            .iter()
            .flat_map(|h| targets.iter().map(move |t| (h, t)))
        {
            let r = req(target, &[("host", host)]);
            let p = Primary::of(&r, r.headers().get(HOST), &parts);
            assert!(matches!(p, Primary::Pieces { .. }), "{host}{target}");
            let text = key(&r, &parts);
            assert_eq!(p.text(), text);
            assert!(p.is(&text));
            let store_key = super::super::store::Key {
                primary: text.as_str().into(),
                secondary: 9,
            };
            let by_ref = super::super::store::KeyRef {
                primary: &p,
                secondary: 9,
            };
            assert_eq!(hash_of(&by_ref), hash_of(&store_key), "{text}");
            for other in [
                format!("{text}x"),
                text[..text.len() - 1].to_string(),
                text.replacen("GET http", "GET httq", 1),
                format!("{text}\ncookie a="),
            ] {
                assert!(!p.is(&other), "{other}");
            }
        }
        // An absolute-form target on a TLS connection: its authority, port and all.
        let mut r = req(
            "http://example.com:8080/a?b",
            &[("host", "ignored.example")],
        );
        r.extensions_mut().insert(crate::client::Https(true));
        let p = Primary::of(&r, r.headers().get(HOST), &parts);
        assert!(matches!(p, Primary::Pieces { .. }));
        assert_eq!(p.text(), "GET https://example.com:8080/a?b");
        assert_eq!(p.text(), key(&r, &parts));
        // A host in upper case, with a `/` or an escape, configured fields or cookies:
        // the text, made as before, and hashed as its key is.
        for (host, text) in [
            ("Example.com", "GET http://example.com/a"),
            ("a/b", "GET http://a/b/a"),
            ("a%2fb", "GET http://a%2fb/a"),
            ("h_1", "GET http://h_1/a"),
        ] {
            let r = req("/a", &[("host", host)]);
            let p = Primary::of(&r, r.headers().get(HOST), &parts);
            assert!(matches!(&p, Primary::Text(t) if t == text), "{host}");
            assert!(p.is(text));
            let store_key = super::super::store::Key {
                primary: text.into(),
                secondary: 0,
            };
            let by_ref = super::super::store::KeyRef {
                primary: &p,
                secondary: 0,
            };
            assert_eq!(hash_of(&by_ref), hash_of(&store_key), "{text}");
        }
        let cookies = KeyParts {
            headers: vec![],
            cookies: vec!["s".into()],
        };
        let r = req("/a", &[("host", "h"), ("cookie", "s=1")]);
        let p = Primary::of(&r, r.headers().get(HOST), &cookies);
        assert!(matches!(&p, Primary::Text(t) if *t == key(&r, &cookies)));
    }
}
