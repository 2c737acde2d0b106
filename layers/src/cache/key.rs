//! Cache keys (RFC 9111 §2, §4.1).

use http::header::{HeaderName, COOKIE, HOST};
use http::{HeaderMap, HeaderValue, Request};
use std::hash::{Hash, Hasher};

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
    // An absent field or cookie is written without its `:` or `=`: an upstream may tell
    // it from an empty one.
    for name in &parts.headers {
        k.push('\n');
        k.push_str(name.as_str());
        if req.headers().contains_key(name) {
            k.push(':');
            push_values(&mut k, req.headers(), name);
        }
    }
    for cookie in &parts.cookies {
        k.push_str("\ncookie ");
        k.push_str(cookie);
        if let Some(v) = cookie_value(req.headers(), cookie) {
            k.push('=');
            k.push_str(v);
        }
    }
    k
}

/// A field's values as bytes that cannot break the key's layout, each line apart: an
/// upstream that reads one value (the first line, say) must not find its answer filed
/// under the key of one line holding both.
fn push_values(k: &mut String, headers: &HeaderMap, name: &HeaderName) {
    for (i, v) in headers.get_all(name).iter().enumerate() {
        if i > 0 {
            // A line feed, which no value holds, escaped as the values' other bytes are.
            k.push_str("%0A");
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
                // A keyed cookie without `=` is read as an empty value by some parsers
                // (Go's, PHP's, Rack's) and as no cookie by the key.
                if names.iter().any(|n| pair.trim() == n) {
                    return true;
                }
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

/// The request's values of the fields `names` (RFC 9111 §4.1), normalised and written
/// out so that two requests a stored response may answer write the same bytes: each
/// name, then whether the field is present (an absent field matches only an absent one,
/// not an empty one), then its members, each length-prefixed so that no value can pass
/// for two. Stored with the entry and compared on every lookup: the secondary key is only
/// their hash ([`secondary_of`]), and two requests whose values differ must never share an
/// answer, however their hashes fall. Empty when `names` is.
///
/// A field defined as a list ([`list`]: `Accept-Language`, `Accept-Encoding`) is its
/// members: `A: 1, 2` is `A: 1` and `A: 2` (RFC 9110 §5.3), and whitespace around
/// members and empty ones do not count (§5.6.1). A field this does not know is its lines
/// combined as §5.3 combines them (joined by `, `), each line's bytes as they are: its
/// sender may repeat it only if it is a list, but its upstream may read `,mobile` as
/// other than `mobile`. A field known to hold one value ([`singleton`]: `User-Agent`,
/// `Authorization`, dates) is its bytes. Cookie's crumbs are joined by `;` (RFC 9113
/// §8.2.3), and a comma is part of a cookie's value.
pub(crate) fn selecting(headers: &HeaderMap, names: &[HeaderName]) -> Vec<u8> {
    if names.is_empty() {
        return Vec::new();
    }
    // Room for what is written, most often in one allocation: a member costs at most its
    // bytes and a length byte or two, and has at least one byte (cache-vary-1k spent 400
    // of 18k instructions a request growing the vector).
    let room: usize = names
        .iter()
        .map(|n| {
            let values: usize = headers.get_all(n).iter().map(|v| v.len()).sum();
            n.as_str().len() + 4 + 2 * values
        })
        .sum();
    let mut out = Vec::with_capacity(room);
    for name in names {
        put_len(&mut out, name.as_str().len());
        out.extend_from_slice(name.as_str().as_bytes());
        if !headers.contains_key(name) {
            out.push(0);
            continue;
        }
        out.push(1);
        let sep = if name == http::header::COOKIE {
            Some(b';')
        } else if list(name) {
            Some(b',')
        } else {
            None
        };
        match sep {
            Some(sep) => {
                for v in headers.get_all(name) {
                    for member in v.as_bytes().split(|&b| b == sep) {
                        let m = member.trim_ascii();
                        if !m.is_empty() {
                            put_member(&mut out, m);
                        }
                    }
                }
            }
            None if singleton(name) => {
                for v in headers.get_all(name) {
                    put_member(&mut out, v.as_bytes().trim_ascii());
                }
            }
            None => {
                // One member: the lines joined by `, `.
                let lines = headers.get_all(name);
                let len = lines
                    .iter()
                    .map(|v| v.as_bytes().trim_ascii().len() + 2)
                    .sum::<usize>();
                put_len(&mut out, len - 2 + 1);
                // A leading byte no value holds, so that the member is never empty.
                out.push(0);
                for (i, v) in lines.iter().enumerate() {
                    if i > 0 {
                        out.extend_from_slice(b", ");
                    }
                    out.extend_from_slice(v.as_bytes().trim_ascii());
                }
            }
        }
        // The end of this field's members: no member is empty.
        out.push(0);
    }
    out
}

/// A length as LEB128, which no longer length starts as: each written thing is told
/// from the next however their bytes run.
fn put_len(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// A member, never empty (a `0` length ends the field).
fn put_member(out: &mut Vec<u8>, m: &[u8]) {
    if m.is_empty() {
        // An empty value of a field of one value: as a member of one byte that no value
        // holds (a field value has no NUL).
        put_len(out, 1);
        out.push(0);
        return;
    }
    put_len(out, m.len());
    out.extend_from_slice(m);
}

/// Request fields defined as lists (RFC 9110 §12.5, §10.1.4, RFC 9111 §5.2, §5.4), whose
/// members are what selects a variant.
fn list(name: &HeaderName) -> bool {
    use http::header;
    [
        header::ACCEPT,
        header::ACCEPT_CHARSET,
        header::ACCEPT_ENCODING,
        header::ACCEPT_LANGUAGE,
        header::CACHE_CONTROL,
        header::PRAGMA,
        header::TE,
        header::IF_MATCH,
        header::IF_NONE_MATCH,
        header::VIA,
    ]
    .contains(name)
}

/// Request fields defined to hold one value (RFC 9110, RFC 9111, RFC 6454), in which a
/// comma is part of the value: their bytes select a variant as they are.
fn singleton(name: &HeaderName) -> bool {
    use http::header;
    [
        header::USER_AGENT,
        header::AUTHORIZATION,
        header::PROXY_AUTHORIZATION,
        header::REFERER,
        header::HOST,
        header::DATE,
        header::IF_MODIFIED_SINCE,
        header::IF_UNMODIFIED_SINCE,
        header::IF_RANGE,
        header::RANGE,
        header::ORIGIN,
        header::CONTENT_TYPE,
        header::CONTENT_LENGTH,
        header::FROM,
        header::MAX_FORWARDS,
    ]
    .contains(name)
}

/// The secondary key: a hash of [`selecting`]'s bytes, 0 when they are empty (responses
/// without Vary), never 0 otherwise.
pub(crate) fn secondary_of(selecting: &[u8]) -> u64 {
    if selecting.is_empty() {
        return 0;
    }
    // FNV-1a: the disk tier keeps this number, so it must be the same in the next process
    // and the next build (ahash's output may change with its version or the CPU). Its
    // collisions are easy to make, and cost only a miss: the values are compared.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in selecting {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h.max(1)
}

/// [`secondary_of`] the request's [`selecting`] bytes.
#[cfg(test)]
pub(crate) fn secondary(headers: &HeaderMap, names: &[HeaderName]) -> u64 {
    secondary_of(&selecting(headers, names))
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
            "GET http://h/\nx-tenant:a%C3%BF%25\ncookie lang"
        );
        let d = req("/", &[("host", "h"), ("x-tenant", "a\u{fe}%")]);
        assert_ne!(key(&c, &parts), key(&d, &parts));
        // Absent is not empty, for a field or a cookie; two lines are not one holding
        // both (an upstream may read the first only).
        let keyed = |headers: &[(&str, &str)]| {
            let mut all = vec![("host", "h")];
            all.extend_from_slice(headers);
            key(&req("/", &all), &parts)
        };
        let absent = keyed(&[]);
        assert_eq!(absent, "GET http://h/\nx-tenant\ncookie lang");
        assert_ne!(absent, keyed(&[("x-tenant", ""), ("cookie", "lang=")]));
        assert_eq!(
            keyed(&[("x-tenant", ""), ("cookie", "lang=")]),
            "GET http://h/\nx-tenant:\ncookie lang="
        );
        assert_ne!(absent, keyed(&[("cookie", "lang=")]));
        let two = keyed(&[("x-tenant", "a"), ("x-tenant", "b")]);
        assert_eq!(two, "GET http://h/\nx-tenant:a%0Ab\ncookie lang");
        assert_ne!(two, keyed(&[("x-tenant", "a,b")]));
        assert_ne!(two, keyed(&[("x-tenant", "a%0Ab")]));
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
        // Without `=`: an empty value to some parsers, no cookie to the key.
        assert!(amb(b"a=1; lang"));
        assert!(amb(b" lang "));
        assert!(!amb(b"a=1; language; x"));
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

    /// Any list of members, written on any number of lines with any whitespace around
    /// them, selects as itself, and as no other list; a field known to hold one value
    /// selects by its bytes, commas and all; absent is not empty. Checked on the bytes
    /// stored and compared with each entry, not only on their hash.
    #[test]
    fn values_select_as_themselves_however_written_and_never_as_others() {
        use super::super::policy::tests::Rng;
        let mut rng = Rng(0x5eed_0f5e_1ec7);
        let member = |rng: &mut Rng, sep: u8| -> Vec<u8> {
            let alphabet: &[u8] = b"ab=1 ;,\xff\x80q";
            let n = 1 + rng.below(4) as usize;
            let mut m: Vec<u8> = (0..n)
                .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
                .filter(|&b| b != sep)
                .collect();
            // Members are what is left once whitespace around them is dropped.
            while m.first() == Some(&b' ') || m.last() == Some(&b' ') {
                m.retain(|&b| b != b' ');
            }
            if m.is_empty() {
                m.push(b'x');
            }
            m
        };
        // The members written out: split into lines at random, with spaces around.
        let write = |rng: &mut Rng, name: &'static str, sep: u8, members: &[Vec<u8>]| {
            let mut map = HeaderMap::new();
            let mut line: Vec<u8> = Vec::new();
            for (i, m) in members.iter().enumerate() {
                if !line.is_empty() {
                    line.push(sep);
                }
                if rng.coin() {
                    line.push(b' ');
                }
                line.extend_from_slice(m);
                if rng.coin() {
                    line.push(b'\t');
                }
                if i + 1 == members.len() || rng.below(3) == 0 {
                    map.append(name, HeaderValue::from_bytes(&line).unwrap());
                    line.clear();
                }
            }
            map
        };
        for _ in 0..4000 {
            let (name, sep) = match rng.below(3) {
                0 => ("accept-language", b','),
                1 => ("accept-encoding", b','),
                _ => ("cookie", b';'),
            };
            let names = [HeaderName::from_static(name)];
            let a: Vec<Vec<u8>> = (0..1 + rng.below(4))
                .map(|_| member(&mut rng, sep))
                .collect();
            let b: Vec<Vec<u8>> = match rng.below(3) {
                0 => a.clone(),
                1 => (0..1 + rng.below(4))
                    .map(|_| member(&mut rng, sep))
                    .collect(),
                // The same bytes cut into other members: what a plain join can't tell apart.
                _ => {
                    let mut cut = Vec::new();
                    let mut m = Vec::new();
                    for &byte in &a.concat() {
                        m.push(byte);
                        if rng.below(3) == 0 && m.last() != Some(&b' ') {
                            cut.push(std::mem::take(&mut m));
                        }
                    }
                    if !m.is_empty() {
                        cut.push(m);
                    }
                    cut.retain(|m: &Vec<u8>| m.first() != Some(&b' '));
                    cut
                }
            };
            if b.is_empty() {
                continue;
            }
            let sa = selecting(&write(&mut rng, name, sep, &a), &names);
            let sb = selecting(&write(&mut rng, name, sep, &b), &names);
            assert_eq!(sa == sb, a == b, "{name}: {a:?} against {b:?}");
            if a == b {
                assert_eq!(secondary_of(&sa), secondary_of(&sb));
            }
            assert_ne!(
                sa,
                selecting(&HeaderMap::new(), &names),
                "present is not absent"
            );
        }
        // A field this does not know: its lines combined (RFC 9110 §5.3), the bytes of
        // each as they are. Any lines select as the same lines, or as one line holding
        // them joined by `, `, and as nothing else.
        let unknown = [HeaderName::from_static("x-unknown")];
        let lines = |ls: &[Vec<u8>]| {
            let mut m = HeaderMap::new();
            for l in ls {
                m.append("x-unknown", HeaderValue::from_bytes(l).unwrap());
            }
            selecting(&m, &unknown)
        };
        for _ in 0..4000 {
            let one = |rng: &mut Rng| -> Vec<Vec<u8>> {
                (0..1 + rng.below(3))
                    .map(|_| {
                        let alphabet: &[u8] = b"a1, ;\xff";
                        let mut l: Vec<u8> = (0..rng.below(5))
                            .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
                            .collect();
                        l.retain(|&b| b != b' ' || rng.coin());
                        l.trim_ascii().to_vec()
                    })
                    .collect()
            };
            let (a, b) = (one(&mut rng), one(&mut rng));
            let joined = |ls: &[Vec<u8>]| ls.join(&b", "[..]);
            assert_eq!(
                lines(&a) == lines(&b),
                joined(&a) == joined(&b),
                "{a:?} {b:?}"
            );
            // (A line as parsed has no whitespace at either end.)
            let one_line = joined(&a);
            if one_line.trim_ascii() == one_line {
                assert_eq!(lines(&a), lines(&[one_line]));
            }
        }
        assert_ne!(lines(&[b",mobile".to_vec()]), lines(&[b"mobile".to_vec()]));
        assert_ne!(lines(&[b"a,b".to_vec()]), lines(&[b"a, b".to_vec()]));
        assert_ne!(lines(&[Vec::new()]), selecting(&HeaderMap::new(), &unknown));
        // A field of one value: `a, b` and `a,b` are two values.
        let ua = [http::header::USER_AGENT];
        let one = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(http::header::USER_AGENT, v.parse().unwrap());
            selecting(&m, &ua)
        };
        assert_ne!(
            one("Mozilla/5.0 (X11, Linux)"),
            one("Mozilla/5.0 (X11,Linux)")
        );
        assert_eq!(one("curl/8"), one("curl/8"));
        let empty = one("");
        assert_ne!(empty, selecting(&HeaderMap::new(), &ua));
        assert!(selecting(&HeaderMap::new(), &[]).is_empty());
        assert_eq!(secondary_of(&[]), 0);
        assert_ne!(secondary_of(&empty), 0);
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
                selecting: b"ignored by the hash",
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
                selecting: &[],
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
