//! What RFC 9111 lets a shared cache do with a response: store it (§3), how long it is
//! fresh (§4.2.1, §4.2.2), how old it is (§4.2.3), and whether a stored one may answer a
//! request as it is, only after revalidation (§4.2.4, §4.3), or when stale under RFC 5861.
//!
//! Pure functions of the header fields and the clock; the store and the Layer call them.

use http::header::{AGE, AUTHORIZATION, CACHE_CONTROL, DATE, EXPIRES, LAST_MODIFIED, VARY};
use http::{HeaderMap, Method, StatusCode};
use std::time::{Duration, SystemTime};

/// RFC 9111 §1.2.2: a delta-seconds too large to represent is taken as 2^31.
const DELTA_MAX: u64 = 1 << 31;

/// The directives of a `Cache-Control` field (RFC 9111 §5.2), request or response, with
/// RFC 5861's two. Every line of the field is read; names are case-insensitive, and an
/// argument may be a token or a quoted string (§5.2: recipients accept both).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheControl {
    pub no_store: bool,
    /// `no-cache`, with or without a field list: a field list is read as the whole
    /// response, which §5.2.2.4 allows.
    pub no_cache: bool,
    /// `private`, with or without a field list: a shared cache stores neither.
    pub private: bool,
    pub public: bool,
    /// `must-understand` (§5.2.2.3): stored only with a status the cache understands, and
    /// then even with `no-store`.
    pub must_understand: bool,
    pub must_revalidate: bool,
    pub proxy_revalidate: bool,
    pub only_if_cached: bool,
    pub max_age: Option<Duration>,
    pub s_maxage: Option<Duration>,
    /// `max-stale`: `Some(None)` without an argument (any staleness).
    pub max_stale: Option<Option<Duration>>,
    pub min_fresh: Option<Duration>,
    pub stale_while_revalidate: Option<Duration>,
    pub stale_if_error: Option<Duration>,
    /// A freshness directive (`max-age`, `s-maxage`) came twice with different values, or
    /// with an argument that is not delta-seconds: §4.2.1 has the response taken as stale,
    /// and a request's is read as `max-age=0`.
    pub invalid_freshness: bool,
}

impl CacheControl {
    /// The directives of every `Cache-Control` line of `headers`.
    pub fn parse(headers: &HeaderMap) -> CacheControl {
        let mut cc = CacheControl::default();
        for line in headers.get_all(CACHE_CONTROL) {
            // Bytes that are not UTF-8 spoil only the directive they are in.
            let line = String::from_utf8_lossy(line.as_bytes());
            for (name, arg) in Directives::new(&line) {
                cc.apply(name, arg.as_deref());
            }
        }
        cc
    }

    fn apply(&mut self, name: &str, arg: Option<&str>) {
        let delta = || arg.and_then(delta_seconds);
        // RFC 5861's windows: an argument that is not delta-seconds grants none, and the
        // first value stands.
        let window = |slot: Option<Duration>| slot.or(Some(delta().unwrap_or(Duration::ZERO)));
        let lower = name.to_ascii_lowercase();
        match lower.as_str() {
            "must-understand" => self.must_understand = true,
            "no-store" => self.no_store = true,
            "no-cache" => self.no_cache = true,
            "private" => self.private = true,
            "public" => self.public = true,
            "must-revalidate" => self.must_revalidate = true,
            "proxy-revalidate" => self.proxy_revalidate = true,
            "only-if-cached" => self.only_if_cached = true,
            "max-age" => freshness(&mut self.max_age, delta(), &mut self.invalid_freshness),
            "s-maxage" => freshness(&mut self.s_maxage, delta(), &mut self.invalid_freshness),
            "max-stale" => {
                self.max_stale = match arg {
                    None => Some(None),
                    // An argument that is not delta-seconds allows no staleness.
                    Some(a) => Some(Some(delta_seconds(a).unwrap_or(Duration::ZERO))),
                }
            }
            "min-fresh" => self.min_fresh = self.min_fresh.or(delta()),
            "stale-while-revalidate" => {
                self.stale_while_revalidate = window(self.stale_while_revalidate)
            }
            "stale-if-error" => self.stale_if_error = window(self.stale_if_error),
            _ => {}
        }
    }
}

/// A second value that differs, or one that is not delta-seconds, makes the freshness
/// information invalid (§4.2.1); the first valid one is kept.
fn freshness(slot: &mut Option<Duration>, value: Option<Duration>, invalid: &mut bool) {
    match (value, *slot) {
        (None, _) => *invalid = true,
        (Some(v), None) => *slot = Some(v),
        (Some(v), Some(first)) if v != first => *invalid = true,
        _ => {}
    }
}

/// RFC 9111 §1.2.2: one or more digits; larger than 2^31 is 2^31.
fn delta_seconds(s: &str) -> Option<Duration> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = s.parse::<u64>().unwrap_or(DELTA_MAX).min(DELTA_MAX);
    Some(Duration::from_secs(n))
}

/// The directives of one field line: `name[=token|"quoted"]`, separated by commas (and,
/// as origins write them by mistake, semicolons), with optional whitespace (RFC 9110
/// §5.6.1, §5.6.4). A quoted argument is unescaped. An element that does not parse is
/// skipped to the next separator outside quotes, never the rest of the line: a name
/// followed by junk still counts (so `private junk` keeps the response out), with an empty
/// argument if its argument was the junk.
struct Directives<'a> {
    rest: &'a str,
}

impl<'a> Directives<'a> {
    fn new(line: &'a str) -> Self {
        Directives { rest: line }
    }

    /// The next element, up to a separator outside quotes.
    fn element(&mut self) -> Option<&'a str> {
        let rest = self.rest.trim_start_matches([' ', '\t', ',', ';']);
        if rest.is_empty() {
            self.rest = rest;
            return None;
        }
        let (mut quoted, mut escaped, mut end) = (false, false, None);
        for (i, c) in rest.char_indices() {
            match (quoted, escaped, c) {
                (true, true, _) => escaped = false,
                (true, false, '\\') => escaped = true,
                (_, false, '"') => quoted = !quoted,
                (false, _, ',' | ';') => {
                    end = Some(i);
                    break;
                }
                _ => {}
            }
        }
        // A quote never closed: the element ends at the next separator all the same, so a
        // stray quote hides no directive after it.
        if quoted {
            end = rest.find([',', ';']);
        }
        let end = end.unwrap_or(rest.len());
        self.rest = &rest[end..];
        Some(&rest[..end])
    }
}

impl<'a> Iterator for Directives<'a> {
    type Item = (&'a str, Option<std::borrow::Cow<'a, str>>);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let element = self.element()?;
            let end = element
                .find(|c: char| !is_tchar(c))
                .unwrap_or(element.len());
            let (name, after) = element.split_at(end);
            if name.is_empty() {
                continue;
            }
            let after = after.trim_matches([' ', '\t']);
            let Some(arg) = after.strip_prefix('=') else {
                return Some((name, None));
            };
            let arg = arg.trim_matches([' ', '\t']);
            let value = match arg.strip_prefix('"') {
                Some(q) => match q.strip_suffix('"') {
                    Some(inner) if !inner.contains('\\') => inner.into(),
                    Some(inner) => unescape(inner).into(),
                    // Unterminated, or junk after the closing quote.
                    None => "".into(),
                },
                None if arg.chars().all(is_tchar) => arg.into(),
                None => "".into(),
            };
            return Some((name, Some(value)));
        }
    }
}

/// A quoted-string's content without its escapes (RFC 9110 §5.6.4).
fn unescape(inner: &str) -> String {
    let mut out = String::with_capacity(inner.len());
    let mut escaped = false;
    for c in inner.chars() {
        if c == '\\' && !escaped {
            escaped = true;
        } else {
            out.push(c);
            escaped = false;
        }
    }
    out
}

/// RFC 9110 §5.6.2.
fn is_tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

/// RFC 9111 §4.2.2: the statuses whose responses may be given a heuristic freshness.
pub fn heuristically_cacheable(status: StatusCode) -> bool {
    matches!(
        status.as_u16(),
        200 | 203 | 204 | 206 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

/// The statuses whose caching requirements this cache knows (for `must-understand`):
/// those it may store by [`heuristically_cacheable`], and the other redirects.
fn understood(status: StatusCode) -> bool {
    heuristically_cacheable(status) || matches!(status.as_u16(), 302 | 303 | 307)
}

/// Why a response is not stored, if it is not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotStored {
    /// Only GET responses are stored; HEAD is answered from them.
    Method,
    /// Not a final status the cache stores (1xx, 206 and 304 are not stored as entries).
    Status,
    /// `no-store` in the request or the response.
    NoStore,
    /// `must-understand` with a status whose caching rules this cache does not know.
    MustUnderstand,
    /// `private`: a shared cache does not store it (§5.2.2.7).
    Private,
    /// The request had `Authorization`, and the response does not say a shared cache may
    /// store it (§3.5).
    Authorization,
    /// The response sets a cookie.
    SetCookie,
    /// `Vary: *` never matches a later request (§4.1); nor does a `Vary` on a field a
    /// proxy writes for each client (`X-Forwarded-For`, `Forwarded`, and `X-Real-IP`,
    /// `True-Client-IP`, `X-Client-IP` when a route sets them), whose value the upstream
    /// saw is not the one the request came with.
    VaryStar,
    /// Nothing in the response makes it storable (§3: no explicit freshness, not `public`,
    /// and a status that is not heuristically cacheable).
    NoFreshness,
}

/// What [`storable`] may let through that RFC 9111 alone would not.
#[derive(Clone, Copy, Debug, Default)]
pub struct StoreOptions {
    /// Store answers to requests with `Authorization` too, which §3.5 forbids a shared
    /// cache: only where the cache key includes the `Authorization` field, so that no
    /// other credentials are answered from the entry.
    pub authorized: bool,
    /// Store responses that set cookies.
    pub set_cookie: bool,
}

/// Whether a shared cache may store this response to this request (RFC 9111 §3).
pub fn storable(
    method: &Method,
    request: &HeaderMap,
    request_cc: &CacheControl,
    status: StatusCode,
    response: &HeaderMap,
    response_cc: &CacheControl,
    options: StoreOptions,
) -> Result<(), NotStored> {
    if method != Method::GET {
        return Err(NotStored::Method);
    }
    if status.is_informational()
        || status == StatusCode::PARTIAL_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Err(NotStored::Status);
    }
    // §5.2.2.3: must-understand stores only a status the cache understands, and then
    // overrides the response's no-store.
    if response_cc.must_understand && !understood(status) {
        return Err(NotStored::MustUnderstand);
    }
    if request_cc.no_store || (response_cc.no_store && !response_cc.must_understand) {
        return Err(NotStored::NoStore);
    }
    if response_cc.private {
        return Err(NotStored::Private);
    }
    if request.contains_key(AUTHORIZATION)
        && !options.authorized
        && !(response_cc.must_revalidate || response_cc.public || response_cc.s_maxage.is_some())
    {
        return Err(NotStored::Authorization);
    }
    if response.contains_key(http::header::SET_COOKIE) && !options.set_cookie {
        return Err(NotStored::SetCookie);
    }
    // A client's own X-Forwarded-For is replaced by its address on the way upstream: keyed
    // by what the client sent (nothing, say), one client's answer for its address went to
    // every client that sent the same (found in review).
    // The same for the fields a route sets to the client's address (X-Real-IP and kin).
    let per_client = |f: &[u8]| {
        f == b"*"
            || [
                &b"x-forwarded-for"[..],
                b"forwarded",
                b"x-real-ip",
                b"true-client-ip",
                b"x-client-ip",
            ]
            .iter()
            .any(|n| f.eq_ignore_ascii_case(n))
    };
    if response.get_all(VARY).iter().any(|v| {
        v.as_bytes()
            .split(|&b| b == b',')
            .any(|f| per_client(f.trim_ascii()))
    }) {
        return Err(NotStored::VaryStar);
    }
    let explicit = response_cc.max_age.is_some()
        || response_cc.s_maxage.is_some()
        || response.contains_key(EXPIRES);
    if !(explicit || response_cc.public || heuristically_cacheable(status)) {
        return Err(NotStored::NoFreshness);
    }
    Ok(())
}

/// An HTTP-date field (RFC 9110 §5.6.7), if it holds one.
fn date(headers: &HeaderMap, name: http::header::HeaderName) -> Option<SystemTime> {
    let v = headers.get(name)?.to_str().ok()?;
    httpdate::parse_http_date(v).ok()
}

/// How long a response stays fresh in a shared cache (RFC 9111 §4.2.1), counted from
/// its `Date` (or, without one, from when it was received, `received`): `s-maxage`, else
/// `max-age`, else `Expires` − `Date`, else a heuristic (§4.2.2) of a tenth of the time
/// since `Last-Modified`, at most `heuristic_max`, for a status that allows one or a
/// `public` response. Zero when the freshness information is invalid or the response
/// has none.
pub fn freshness_lifetime(
    status: StatusCode,
    response: &HeaderMap,
    cc: &CacheControl,
    received: SystemTime,
    heuristic_max: Duration,
) -> Duration {
    if cc.invalid_freshness {
        return Duration::ZERO;
    }
    if let Some(s) = cc.s_maxage {
        return s;
    }
    if let Some(m) = cc.max_age {
        return m;
    }
    let date_value = date(response, DATE).unwrap_or(received);
    if response.contains_key(EXPIRES) {
        // Two Expires lines, or one that is not a date (such as "0"): already expired.
        if response.get_all(EXPIRES).iter().count() > 1 {
            return Duration::ZERO;
        }
        return match date(response, EXPIRES) {
            Some(expires) => expires.duration_since(date_value).unwrap_or(Duration::ZERO),
            None => Duration::ZERO,
        };
    }
    if !(heuristically_cacheable(status) || cc.public) {
        return Duration::ZERO;
    }
    match date(response, LAST_MODIFIED) {
        Some(modified) => date_value
            .duration_since(modified)
            .map_or(Duration::ZERO, |d| d / 10)
            .min(heuristic_max),
        None => Duration::ZERO,
    }
}

/// When a response was asked for and received, for its age.
#[derive(Clone, Copy, Debug)]
pub struct Exchange {
    pub request_time: SystemTime,
    pub response_time: SystemTime,
}

/// A stored response's age at `now` (RFC 9111 §4.2.3): the age it arrived with (its
/// `Age`, corrected by the exchange's delay, or the time since its `Date` if more) plus
/// the time it has been stored.
pub fn current_age(response: &HeaderMap, exchange: Exchange, now: SystemTime) -> Duration {
    let since = |later: SystemTime, earlier: SystemTime| {
        later.duration_since(earlier).unwrap_or(Duration::ZERO)
    };
    let age_value = response
        .get(AGE)
        .and_then(|v| v.to_str().ok())
        // §5.1: a list (from a proxy that combined fields) counts by its first member.
        .and_then(|v| delta_seconds(v.split(',').next().unwrap_or("").trim()))
        .unwrap_or(Duration::ZERO);
    let date_value = date(response, DATE).unwrap_or(exchange.response_time);
    let apparent_age = since(exchange.response_time, date_value);
    let response_delay = since(exchange.response_time, exchange.request_time);
    let corrected_age_value = age_value.saturating_add(response_delay);
    let corrected_initial_age = apparent_age.max(corrected_age_value);
    let resident_time = since(now, exchange.response_time);
    corrected_initial_age.saturating_add(resident_time)
}

/// What a stored response may do for a request (RFC 9111 §4, RFC 5861).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// Served as it is: fresh enough for the request, or stale by no more than the
    /// request's `max-stale` allows.
    Serve,
    /// Stale, or the request or response asks for revalidation: it must be revalidated
    /// (§4.3) before it is served. `while_revalidate` and `if_error` say whether
    /// RFC 5861 lets it be served at once while that happens, or when the origin fails.
    Revalidate {
        while_revalidate: bool,
        if_error: bool,
    },
    /// Not servable as it is, and the request said `only-if-cached` (§5.2.1.7): the
    /// origin is not asked, and the answer is 504, as when nothing is stored.
    OnlyIfCached,
}

/// Whether a stored response of `age` and `lifetime` may answer a request with
/// `request_cc` as it is (RFC 9111 §4.2, §4.2.4, §5.2.1), or only after revalidation.
/// `stale_while_revalidate` and `stale_if_error` are the route's defaults, used when the
/// response has no such directive of its own. `s-maxage` allows no stale use at all in a
/// shared cache (§5.2.2.10, as `proxy-revalidate`): `s-maxage=1, stale-while-revalidate=59`
/// is revalidated once a second, never served stale.
pub fn usable(
    age: Duration,
    lifetime: Duration,
    request_cc: &CacheControl,
    response_cc: &CacheControl,
    stale_while_revalidate: Duration,
    stale_if_error: Duration,
) -> Use {
    let fresh = age < lifetime;
    let staleness = age.saturating_sub(lifetime);
    // §4.2.4, §5.2.2.2, §5.2.2.8, §5.2.2.10: a shared cache serves none of these stale.
    let no_stale = response_cc.must_revalidate
        || response_cc.proxy_revalidate
        || response_cc.s_maxage.is_some()
        || response_cc.no_cache;
    let request_ok = !request_cc.no_cache
        && !request_cc.invalid_freshness
        && request_cc.max_age.is_none_or(|m| age <= m)
        && request_cc
            .min_fresh
            .is_none_or(|m| lifetime.saturating_sub(age) >= m);
    if fresh && !response_cc.no_cache && request_ok {
        return Use::Serve;
    }
    if !fresh && !no_stale && request_ok {
        // §5.2.1.2: the client accepts this much staleness.
        if let Some(max_stale) = request_cc.max_stale {
            if max_stale.is_none_or(|m| staleness <= m) {
                return Use::Serve;
            }
        }
    }
    // §5.2.1.7: no going to the origin for it; the Layer answers 504.
    if request_cc.only_if_cached {
        return Use::OnlyIfCached;
    }
    // RFC 5861 §3, §4: windows past the lifetime, never where the response forbids
    // stale service, nor for a request that asked for a fresh or revalidated answer.
    let window = |own: Option<Duration>, default: Duration| {
        let w = own.unwrap_or(default);
        !fresh && !no_stale && request_ok && !w.is_zero() && staleness <= w
    };
    Use::Revalidate {
        while_revalidate: window(response_cc.stale_while_revalidate, stale_while_revalidate),
        if_error: window(response_cc.stale_if_error, stale_if_error),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(fields: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in fields {
            h.append(
                http::header::HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn cc(lines: &[&str]) -> CacheControl {
        let fields: Vec<_> = lines.iter().map(|l| ("cache-control", *l)).collect();
        CacheControl::parse(&headers(&fields))
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn directives_from_every_line_in_any_case_and_form() {
        let c = cc(&[
            "Public, MAX-AGE=60",
            "s-maxage=\"120\", no-cache=\"Set-Cookie, X-A\"",
            "private=\"x\" ,  max-stale , stale-while-revalidate=30,stale-if-error=600",
            "must-revalidate,proxy-revalidate, only-if-cached, min-fresh=5, no-store, ext=\"a,b\"",
        ]);
        assert_eq!(
            c,
            CacheControl {
                no_store: true,
                no_cache: true,
                private: true,
                public: true,
                must_understand: false,
                must_revalidate: true,
                proxy_revalidate: true,
                only_if_cached: true,
                max_age: Some(secs(60)),
                s_maxage: Some(secs(120)),
                max_stale: Some(None),
                min_fresh: Some(secs(5)),
                stale_while_revalidate: Some(secs(30)),
                stale_if_error: Some(secs(600)),
                invalid_freshness: false,
            }
        );
    }

    #[test]
    fn invalid_or_conflicting_freshness_is_marked() {
        assert!(cc(&["max-age=1.5"]).invalid_freshness);
        assert!(cc(&["max-age"]).invalid_freshness);
        assert!(cc(&["max-age=-1"]).invalid_freshness);
        assert!(cc(&["max-age=60", "max-age=30"]).invalid_freshness);
        assert!(cc(&["max-age=60 s"]).invalid_freshness);
        let same = cc(&["max-age=60, max-age=60"]);
        assert!(!same.invalid_freshness);
        assert_eq!(same.max_age, Some(secs(60)));
        // RFC 9110 §5.6.4: an escaped character is itself.
        assert_eq!(cc(&["s-maxage=\"6\\0\""]).s_maxage, Some(secs(60)));
        // §1.2.2: too large to represent is 2^31.
        assert_eq!(
            cc(&["max-age=99999999999999999999999"]).max_age,
            Some(secs(1 << 31))
        );
        assert_eq!(cc(&["max-stale=abc"]).max_stale, Some(Some(Duration::ZERO)));
        // RFC 5861 windows: a bad argument grants none; the first value stands.
        let w = cc(&["stale-while-revalidate=abc, stale-if-error=5, stale-if-error=50"]);
        assert_eq!(w.stale_while_revalidate, Some(Duration::ZERO));
        assert_eq!(w.stale_if_error, Some(secs(5)));
    }

    #[test]
    fn a_bad_element_spoils_only_itself() {
        let c = cc(&["max-age=60; no-store", "=x, public"]);
        assert_eq!(c.max_age, Some(secs(60)));
        assert!(c.no_store && c.public);
        let c = cc(&["private=\"unterminated, no-store"]);
        assert!(c.private && c.no_store);
        let c = cc(&["no-cache junk, max-age=\"5\" x, s-maxage=7"]);
        assert!(c.no_cache && c.invalid_freshness);
        assert_eq!(c.s_maxage, Some(secs(7)));
        let mut h = HeaderMap::new();
        h.insert(
            CACHE_CONTROL,
            HeaderValue::from_bytes(b"public, \xff max-age=5, no-store").unwrap(),
        );
        let c = CacheControl::parse(&h);
        assert!(c.public && c.no_store && c.max_age.is_none());
    }

    /// A small PRNG (xorshift64*), so the property tests repeat exactly.
    pub(crate) struct Rng(pub u64);

    impl Rng {
        pub(crate) fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        pub(crate) fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        pub(crate) fn coin(&mut self) -> bool {
            self.below(2) == 0
        }
    }

    type Flag = fn(&mut CacheControl);
    type Valued = fn(&mut CacheControl, Duration);

    /// Any set of directives, written with random case, spacing, quoting, order and line
    /// breaks, and with unknown extensions among them, parses back to itself.
    #[test]
    fn any_set_of_directives_parses_back_however_it_is_written() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..5_000 {
            let mut want = CacheControl::default();
            let mut parts: Vec<String> = Vec::new();
            let flags: [(&str, Flag); 8] = [
                ("no-store", |c| c.no_store = true),
                ("no-cache", |c| c.no_cache = true),
                ("private", |c| c.private = true),
                ("public", |c| c.public = true),
                ("must-revalidate", |c| c.must_revalidate = true),
                ("proxy-revalidate", |c| c.proxy_revalidate = true),
                ("only-if-cached", |c| c.only_if_cached = true),
                ("must-understand", |c| c.must_understand = true),
            ];
            for (name, set) in flags {
                if rng.coin() {
                    set(&mut want);
                    parts.push(name.to_string());
                }
            }
            let valued: [(&str, Valued); 6] = [
                ("max-age", |c, d| c.max_age = Some(d)),
                ("s-maxage", |c, d| c.s_maxage = Some(d)),
                ("min-fresh", |c, d| c.min_fresh = Some(d)),
                ("stale-while-revalidate", |c, d| {
                    c.stale_while_revalidate = Some(d)
                }),
                ("stale-if-error", |c, d| c.stale_if_error = Some(d)),
                ("max-stale", |c, d| c.max_stale = Some(Some(d))),
            ];
            for (name, set) in valued {
                if rng.coin() {
                    let d = rng.below(1 << 20);
                    set(&mut want, secs(d));
                    let eq = ["=", " = ", "=\t"][rng.below(3) as usize];
                    match rng.coin() {
                        true => parts.push(format!("{name}{eq}{d}")),
                        false => parts.push(format!("{name}{eq}\"{d}\"")),
                    }
                }
            }
            if want.max_stale.is_none() && rng.coin() {
                want.max_stale = Some(None);
                parts.push("max-stale".into());
            }
            for _ in 0..rng.below(3) {
                parts.push(["x-ext", "ext=\"a, b=c\"", "foo=bar"][rng.below(3) as usize].into());
            }
            for i in (1..parts.len()).rev() {
                parts.swap(i, rng.below(i as u64 + 1) as usize);
            }
            let cased: Vec<String> = parts
                .iter()
                .map(|p| match rng.coin() {
                    true => p.to_ascii_uppercase().replace("\"A, B=C\"", "\"a, b=c\""),
                    false => p.clone(),
                })
                .collect();
            let mut lines = vec![String::new()];
            for p in cased {
                if rng.below(4) == 0 {
                    lines.push(String::new());
                }
                let line = lines.last_mut().unwrap();
                if !line.is_empty() {
                    line.push_str([",", ", ", " ,\t", ",,"][rng.below(4) as usize]);
                }
                line.push_str(&p);
            }
            let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
            assert_eq!(cc(&lines), want, "{lines:?}");
        }
    }

    /// Whatever the field holds, parsing ends without panicking, and never finds a
    /// directive that is not there: each one found is named in the field, and a max-age
    /// found has its digits there too.
    #[test]
    fn any_field_value_parses_to_nothing_that_is_not_in_it() {
        let mut rng = Rng(7);
        let pieces = [
            "no-store", "private", "public", "max-age", "MAX-AGE", "=", "\"", ",", " ", "\t", "60",
            "7", "\\", ";", "x", "no-cache", "s-maxage",
        ];
        for _ in 0..20_000 {
            let v: String = (0..rng.below(12))
                .map(|_| pieces[rng.below(pieces.len() as u64) as usize])
                .collect();
            let mut h = HeaderMap::new();
            h.insert(CACHE_CONTROL, HeaderValue::from_str(&v).unwrap());
            let c = CacheControl::parse(&h);
            let lower = v.to_ascii_lowercase();
            for (found, name) in [
                (c.no_store, "no-store"),
                (c.private, "private"),
                (c.public, "public"),
                (c.no_cache, "no-cache"),
                (c.max_age.is_some(), "max-age"),
            ] {
                assert!(!found || lower.contains(name), "{name} in {v:?}");
            }
            if let Some(m) = c.max_age {
                let bare = v.replace(['\\', '"'], "");
                assert!(bare.contains(&m.as_secs().to_string()), "{m:?} in {v:?}");
            }
        }
    }

    fn store(req: &[(&str, &str)], status: u16, res: &[(&str, &str)]) -> Result<(), NotStored> {
        let (req, res) = (headers(req), headers(res));
        storable(
            &Method::GET,
            &req,
            &CacheControl::parse(&req),
            StatusCode::from_u16(status).unwrap(),
            &res,
            &CacheControl::parse(&res),
            StoreOptions::default(),
        )
    }

    #[test]
    fn what_a_shared_cache_stores() {
        let max_age = [("cache-control", "max-age=60")];
        assert_eq!(store(&[], 200, &max_age), Ok(()));
        assert_eq!(store(&[], 200, &[]), Ok(()), "heuristically cacheable");
        assert_eq!(store(&[], 404, &[]), Ok(()), "heuristically cacheable");
        assert_eq!(store(&[], 302, &[]), Err(NotStored::NoFreshness));
        assert_eq!(store(&[], 302, &max_age), Ok(()));
        assert_eq!(
            store(&[], 302, &[("expires", "Thu, 01 Jan 2037 00:00:00 GMT")]),
            Ok(())
        );
        assert_eq!(store(&[], 500, &[("cache-control", "public")]), Ok(()));
        assert_eq!(store(&[], 206, &max_age), Err(NotStored::Status));
        assert_eq!(store(&[], 304, &max_age), Err(NotStored::Status));
        assert_eq!(
            store(&[("cache-control", "no-store")], 200, &max_age),
            Err(NotStored::NoStore)
        );
        assert_eq!(
            store(&[], 200, &[("cache-control", "max-age=60, no-store")]),
            Err(NotStored::NoStore)
        );
        assert_eq!(
            store(&[], 200, &[("cache-control", "private=\"x\", max-age=60")]),
            Err(NotStored::Private)
        );
        let auth = [("authorization", "Basic eDp5")];
        assert_eq!(store(&auth, 200, &max_age), Err(NotStored::Authorization));
        for allows in ["public", "s-maxage=5", "must-revalidate, max-age=5"] {
            assert_eq!(
                store(&auth, 200, &[("cache-control", allows)]),
                Ok(()),
                "{allows}"
            );
        }
        assert_eq!(
            store(
                &[],
                200,
                &[("cache-control", "max-age=60"), ("set-cookie", "a=b")]
            ),
            Err(NotStored::SetCookie)
        );
        assert_eq!(
            store(
                &[],
                200,
                &[("cache-control", "max-age=60"), ("vary", "accept, *")]
            ),
            Err(NotStored::VaryStar)
        );
        // A field the proxy writes for each client: what the upstream saw is not keyed.
        for vary in ["X-Forwarded-For", "accept,forwarded", "X-Real-IP"] {
            assert_eq!(
                store(&[], 200, &[("cache-control", "max-age=60"), ("vary", vary)]),
                Err(NotStored::VaryStar),
                "{vary}"
            );
        }
        assert_eq!(
            store(
                &[],
                200,
                &[
                    ("cache-control", "max-age=60"),
                    ("vary", "x-forwarded-host")
                ]
            ),
            Ok(())
        );
        // §5.2.2.3: must-understand keeps out a status not understood, and overrides
        // no-store for one that is.
        let mu = |rule| [("cache-control", rule)];
        assert_eq!(store(&[], 200, &mu("must-understand, no-store")), Ok(()));
        assert_eq!(store(&[], 302, &mu("must-understand, max-age=60")), Ok(()));
        assert_eq!(
            store(&[], 299, &mu("must-understand, max-age=60")),
            Err(NotStored::MustUnderstand)
        );
        assert_eq!(
            store(
                &[("cache-control", "no-store")],
                200,
                &mu("must-understand, no-store")
            ),
            Err(NotStored::NoStore)
        );
        let res = headers(&max_age);
        let head = storable(
            &Method::HEAD,
            &HeaderMap::new(),
            &CacheControl::default(),
            StatusCode::OK,
            &res,
            &CacheControl::parse(&res),
            StoreOptions::default(),
        );
        assert_eq!(head, Err(NotStored::Method));
        let opts = StoreOptions {
            authorized: true,
            set_cookie: true,
        };
        let (req, res) = (headers(&auth), headers(&[("set-cookie", "a=b")]));
        let allowed = storable(
            &Method::GET,
            &req,
            &CacheControl::default(),
            StatusCode::OK,
            &res,
            &CacheControl::default(),
            opts,
        );
        assert_eq!(allowed, Ok(()));
    }

    const DATE_V: &str = "Sun, 06 Nov 1994 08:49:37 GMT";

    fn at(s: &str) -> SystemTime {
        httpdate::parse_http_date(s).unwrap()
    }

    fn lifetime(status: u16, res: &[(&str, &str)]) -> Duration {
        let res = headers(res);
        freshness_lifetime(
            StatusCode::from_u16(status).unwrap(),
            &res,
            &CacheControl::parse(&res),
            at(DATE_V) + secs(30),
            secs(86_400),
        )
    }

    #[test]
    fn freshness_lifetime_in_the_rfcs_order() {
        let date = ("date", DATE_V);
        let expires = ("expires", "Sun, 06 Nov 1994 09:49:37 GMT");
        let both = ("cache-control", "max-age=60, s-maxage=90");
        assert_eq!(lifetime(200, &[date, expires, both]), secs(90));
        assert_eq!(
            lifetime(200, &[date, expires, ("cache-control", "max-age=60")]),
            secs(60)
        );
        assert_eq!(lifetime(200, &[date, expires]), secs(3600));
        // Without Date, from when it was received (30 s after DATE_V here).
        assert_eq!(lifetime(200, &[expires]), secs(3570));
        assert_eq!(lifetime(200, &[date, ("expires", "0")]), Duration::ZERO);
        assert_eq!(lifetime(200, &[date, expires, expires]), Duration::ZERO);
        assert_eq!(
            lifetime(200, &[date, expires, ("cache-control", "max-age=x")]),
            Duration::ZERO,
            "invalid freshness information is stale"
        );
        let modified = ("last-modified", "Sun, 06 Nov 1994 07:49:37 GMT");
        assert_eq!(
            lifetime(200, &[date, modified]),
            secs(360),
            "a tenth of an hour"
        );
        assert_eq!(lifetime(302, &[date, modified]), Duration::ZERO);
        assert_eq!(
            lifetime(302, &[date, modified, ("cache-control", "public")]),
            secs(360)
        );
        let long_ago = ("last-modified", "Tue, 06 Nov 1984 07:49:37 GMT");
        assert_eq!(lifetime(200, &[date, long_ago]), secs(86_400), "capped");
        assert_eq!(lifetime(200, &[date]), Duration::ZERO);
    }

    #[test]
    fn current_age_as_section_4_2_3_computes_it() {
        let t0 = at(DATE_V);
        let exchange = Exchange {
            request_time: t0,
            response_time: t0 + secs(2),
        };
        // Age 10 plus the 2 s exchange, against a Date 2 s before receipt: 12; then 100
        // s stored.
        let res = headers(&[("date", DATE_V), ("age", "10")]);
        assert_eq!(current_age(&res, exchange, t0 + secs(102)), secs(112));
        // A Date long before receipt (a clock behind): the apparent age wins.
        let res = headers(&[("date", "Sun, 06 Nov 1994 08:48:37 GMT")]);
        assert_eq!(current_age(&res, exchange, t0 + secs(2)), secs(62));
        // A Date in the future, no Age, no Date at all: only delay and residence count.
        let res = headers(&[("date", "Sun, 06 Nov 1994 09:49:37 GMT")]);
        assert_eq!(current_age(&res, exchange, t0 + secs(5)), secs(5));
        assert_eq!(
            current_age(&HeaderMap::new(), exchange, t0 + secs(5)),
            secs(5)
        );
        let res = headers(&[("age", "abc")]);
        assert_eq!(current_age(&res, exchange, t0 + secs(2)), secs(2));
        // §5.1: a list counts by its first member.
        let res = headers(&[("date", DATE_V), ("age", "10, 20")]);
        assert_eq!(current_age(&res, exchange, t0 + secs(2)), secs(12));
    }

    fn use_of(age: u64, lifetime: u64, req: &[&str], res: &[&str]) -> Use {
        usable(
            secs(age),
            secs(lifetime),
            &cc(req),
            &cc(res),
            secs(0),
            secs(0),
        )
    }

    const REVALIDATE: Use = Use::Revalidate {
        while_revalidate: false,
        if_error: false,
    };

    #[test]
    fn when_a_stored_response_may_answer() {
        assert_eq!(use_of(10, 60, &[], &[]), Use::Serve);
        assert_eq!(
            use_of(60, 60, &[], &[]),
            REVALIDATE,
            "stale at its lifetime"
        );
        assert_eq!(use_of(10, 60, &["no-cache"], &[]), REVALIDATE);
        assert_eq!(use_of(10, 60, &[], &["no-cache"]), REVALIDATE);
        assert_eq!(use_of(10, 60, &["max-age=0"], &[]), REVALIDATE);
        assert_eq!(use_of(10, 60, &["max-age=10"], &[]), Use::Serve);
        assert_eq!(use_of(10, 60, &["min-fresh=50"], &[]), Use::Serve);
        assert_eq!(use_of(10, 60, &["min-fresh=51"], &[]), REVALIDATE);
        assert_eq!(use_of(70, 60, &["max-stale"], &[]), Use::Serve);
        assert_eq!(use_of(70, 60, &["max-stale=10"], &[]), Use::Serve);
        assert_eq!(use_of(70, 60, &["max-stale=9"], &[]), REVALIDATE);
        assert_eq!(
            use_of(10, 60, &["max-age=x"], &[]),
            REVALIDATE,
            "read as max-age=0"
        );
        // §5.2.1.7: only a stored response that may be served as it is.
        assert_eq!(use_of(10, 60, &["only-if-cached"], &[]), Use::Serve);
        assert_eq!(
            use_of(70, 60, &["only-if-cached, max-stale"], &[]),
            Use::Serve
        );
        assert_eq!(use_of(70, 60, &["only-if-cached"], &[]), Use::OnlyIfCached);
        assert_eq!(
            use_of(10, 60, &["only-if-cached, no-cache"], &[]),
            Use::OnlyIfCached
        );
        for res in [
            "must-revalidate",
            "proxy-revalidate",
            "s-maxage=60",
            "no-cache",
        ] {
            assert_eq!(use_of(70, 60, &["max-stale"], &[res]), REVALIDATE, "{res}");
        }
    }

    #[test]
    fn stale_windows_of_rfc_5861() {
        let res = ["stale-while-revalidate=30, stale-if-error=300"];
        let both = Use::Revalidate {
            while_revalidate: true,
            if_error: true,
        };
        assert_eq!(use_of(90, 60, &[], &res), both);
        assert_eq!(
            use_of(91, 60, &[], &res),
            Use::Revalidate {
                while_revalidate: false,
                if_error: true
            }
        );
        assert_eq!(use_of(361, 60, &[], &res), REVALIDATE);
        assert_eq!(use_of(10, 60, &[], &res), Use::Serve);
        assert_eq!(use_of(70, 60, &["no-cache"], &res), REVALIDATE);
        let forbidding = ["stale-while-revalidate=30, stale-if-error=300, must-revalidate"];
        assert_eq!(use_of(70, 60, &[], &forbidding), REVALIDATE);
        // The route's defaults, where the response has none; its own win.
        let with = |res: &[&str]| usable(secs(70), secs(60), &cc(&[]), &cc(res), secs(20), secs(5));
        assert_eq!(
            with(&[]),
            Use::Revalidate {
                while_revalidate: true,
                if_error: false
            }
        );
        assert_eq!(
            with(&["stale-while-revalidate=0, stale-if-error=60"]),
            Use::Revalidate {
                while_revalidate: false,
                if_error: true
            }
        );
    }
}
