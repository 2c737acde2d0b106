//! The headers a proxy must change, RFC 9110 §7.6: hop-by-hop fields removed, `Via`
//! added, and the client's address and scheme passed on (`X-Forwarded-*`, and RFC 7239
//! `Forwarded` when asked).

use gatehouse_layers::cidr::canonical;
use http::header::{CONNECTION, FORWARDED, HOST, TE, TRAILER, TRANSFER_ENCODING, UPGRADE, VIA};
use http::{HeaderMap, HeaderName, HeaderValue};
use std::net::IpAddr;

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
/// Other fields backends read as what the proxies before them saw: the client's address
/// (nginx's realip module, Cloudflare's, Akamai's), the scheme, port or path prefix it used
/// (Rack, Spring, Werkzeug), the URL it asked for (IIS, Symfony). An untrusted client's
/// claim in them is dropped, not passed on: none is in the cache's key, and each can change
/// what the upstream answers (`X-Forwarded-Scheme: http` gets a redirect to https from
/// Rails' force_ssl, cached for every client; `X-Original-URL: /admin` serves another path
/// than the route was chosen by). Index `i` is bit `i` of a `keep` set ([`claims_set`]).
static CLAIMS: [HeaderName; 10] = [
    HeaderName::from_static("x-real-ip"),
    HeaderName::from_static("true-client-ip"),
    HeaderName::from_static("x-client-ip"),
    HeaderName::from_static("x-forwarded-scheme"),
    HeaderName::from_static("x-forwarded-ssl"),
    HeaderName::from_static("x-forwarded-port"),
    HeaderName::from_static("x-forwarded-prefix"),
    HeaderName::from_static("x-forwarded-server"),
    HeaderName::from_static("x-original-url"),
    HeaderName::from_static("x-rewrite-url"),
];

/// `name`'s index in [`CLAIMS`]. Every field of a proxied request is asked: a name that
/// starts otherwise than the claims do is answered without comparing it to ten.
fn claim_index(name: &HeaderName) -> Option<usize> {
    let s = name.as_str();
    if !(s.starts_with("x-") || s.starts_with("true-")) {
        return None;
    }
    CLAIMS.iter().position(|c| c.as_str() == s)
}

/// Drops the claims a map holds but `keep`'s, finding them in one pass over its names:
/// most requests hold none, and ten lookups by name would cost each request about ten
/// hashes.
fn remove_claims(h: &mut HeaderMap, keep: u16) {
    let present = h
        .keys()
        .filter_map(claim_index)
        .fold(0u16, |set, i| set | (1 << i));
    let doomed = present & !keep;
    if doomed == 0 {
        return;
    }
    for (i, name) in CLAIMS.iter().enumerate() {
        if doomed & (1 << i) != 0 {
            h.remove(name);
        }
    }
}

/// The hop-by-hop fields every message loses (RFC 9110 §7.6.1), besides `Proxy-*` and
/// those `Connection` names.
static FIXED_HOP: [&HeaderName; 6] = [
    &CONNECTION,
    &TE,
    &TRAILER,
    &TRANSFER_ENCODING,
    &UPGRADE,
    &KEEP_ALIVE,
];

/// Whether `name` is hop-by-hop whatever `Connection` says: one of the fixed fields or
/// `Proxy-*`.
pub(crate) fn is_hop_by_hop(name: &HeaderName) -> bool {
    FIXED_HOP.contains(&name) || name.as_str().starts_with("proxy-")
}

/// Removes the hop-by-hop fields (§7.6.1): `Connection` and every field it names,
/// `Keep-Alive`, `TE`, `Trailer`, `Transfer-Encoding`, `Upgrade`, and `Proxy-*`.
pub fn remove_hop_by_hop(h: &mut HeaderMap) {
    remove_scanned(h, HopScan::of(h));
}

/// Which hop-by-hop fields a map holds, found in one pass over its names (comparing known
/// names by their index); most messages carry none.
#[derive(Clone, Copy)]
pub(crate) struct HopScan {
    present: u8,
    proxy: bool,
}

impl HopScan {
    pub(crate) fn of(h: &HeaderMap) -> HopScan {
        let mut scan = HopScan {
            present: 0,
            proxy: false,
        };
        for k in h.keys() {
            if let Some(i) = FIXED_HOP.iter().position(|f| k == *f) {
                scan.present |= 1 << i;
            } else if k.as_str().starts_with("proxy-") {
                scan.proxy = true;
            }
        }
        scan
    }

    /// A `Connection` field is there (`FIXED_HOP[0]`).
    pub(crate) fn connection(self) -> bool {
        self.present & 1 != 0
    }
}

/// [`remove_hop_by_hop`], with the map's names already scanned (and unchanged since).
pub(crate) fn remove_scanned(h: &mut HeaderMap, scan: HopScan) {
    let HopScan { present, proxy } = scan;
    if present == 0 && !proxy {
        return;
    }
    // An upstream's `Connection: keep-alive` names only a field that goes anyway: remove
    // what is there without building a list of names.
    let names_nothing_else = || {
        h.get_all(CONNECTION).iter().all(|v| {
            v.as_bytes()
                .split(|&b| b == b',')
                .map(|t| t.trim_ascii())
                .all(|t| t.is_empty() || t.eq_ignore_ascii_case(b"keep-alive"))
        })
    };
    if !proxy && (present & 1 == 0 || names_nothing_else()) {
        for (i, name) in FIXED_HOP.iter().enumerate() {
            if present & (1 << i) != 0 {
                h.remove(*name);
            }
        }
        return;
    }
    remove_by_list(h);
}

/// The general way: a list of every field `Connection` names and every hop-by-hop one.
fn remove_by_list(h: &mut HeaderMap) {
    // The fields that Connection names go first, while it is still there to read.
    let hop = |k: &HeaderName| FIXED_HOP.contains(&k) || k.as_str().starts_with("proxy-");
    let mut doomed: Vec<HeaderName> = h
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    doomed.extend(h.keys().filter(|k| hop(k)).cloned());
    for n in doomed {
        h.remove(n);
    }
}

/// RFC 9112 §6.1: a response with a body whose `Transfer-Encoding` names a coding other
/// than chunked (`gzip`, `gzip, chunked`). Only chunked is taken off; the field goes with
/// the other hop-by-hop ones, so the client would get coded bytes without a word of it.
pub(crate) fn codings_besides_chunked<B>(res: &http::Response<B>) -> bool {
    let bodiless = matches!(
        res.status(),
        http::StatusCode::NO_CONTENT | http::StatusCode::NOT_MODIFIED
    ) || res.status().is_informational();
    !bodiless
        && res
            .headers()
            .get_all(TRANSFER_ENCODING)
            .iter()
            .any(|v| names_other_coding(v.as_bytes()))
}

/// Whether a `Transfer-Encoding` value names a coding other than chunked. Empty list
/// elements are no codings (RFC 9110 §5.6.1).
pub(crate) fn names_other_coding(value: &[u8]) -> bool {
    value.split(|&b| b == b',').any(|c| {
        let c = c.trim_ascii();
        !c.is_empty() && !c.eq_ignore_ascii_case(b"chunked")
    })
}

/// RFC 9113 §8.2.3, RFC 9114 §4.2.1: several `cookie` fields from an HTTP/2 or HTTP/3
/// client go on as one ([`joined_cookie`](gatehouse_layers::fields::joined_cookie)).
pub(crate) fn join_cookies(h: &mut HeaderMap) {
    let mut all = h.get_all(http::header::COOKIE).iter();
    if all.next().is_none() || all.next().is_none() {
        return;
    }
    match gatehouse_layers::fields::joined_cookie(h) {
        Some(v) => {
            h.insert(http::header::COOKIE, v);
        }
        None => {
            h.remove(http::header::COOKIE);
        }
    }
}

/// Adds this hop to `Via` (§7.6.3), after any earlier ones.
pub fn add_via(h: &mut HeaderMap, version: http::Version) {
    h.append(VIA, HeaderValue::from_static(via_text(version)));
}

/// This hop's `Via` value (§7.6.3: the protocol version it was received with, then us).
fn via_text(version: http::Version) -> &'static str {
    match version {
        http::Version::HTTP_10 => "1.0 gatehouse",
        http::Version::HTTP_2 => "2 gatehouse",
        http::Version::HTTP_3 => "3 gatehouse",
        _ => "1.1 gatehouse",
    }
}

/// Which clients may speak for others.
pub type Trusted = gatehouse_layers::cidr::CidrSet;

/// The set of `cidrs` (already validated by the configuration).
pub fn trusted(cidrs: &[String]) -> Trusted {
    Trusted::new(cidrs.iter().filter_map(|c| gatehouse_config::parse_cidr(c)))
}

/// Sets the forwarding fields for a request from `peer`. From a trusted proxy, the chain it
/// sent is kept and extended; from anyone else, whatever it claimed is replaced.
pub fn forward(
    h: &mut HeaderMap,
    peer: Option<IpAddr>,
    scheme: &str,
    trusted: &Trusted,
    rfc7239: bool,
) {
    forward_keeping(h, peer, scheme, trusted, rfc7239, 0)
}

/// [`forward`], keeping the [`CLAIMS`] in `keep` ([`claims_set`]): the route's
/// own header rules set them, and what a route decides reaches the upstream.
pub(crate) fn forward_keeping(
    h: &mut HeaderMap,
    peer: Option<IpAddr>,
    scheme: &str,
    trusted: &Trusted,
    rfc7239: bool,
    keep: u16,
) {
    let trust = peer.is_some_and(|p| trusted.contains(p));
    // The address formatted on the stack: the common (untrusted) case then costs one
    // header value and no String.
    let buf = client_text(peer);
    let client = buf.as_str();
    let host = h.get(HOST).cloned();

    // X-Forwarded-For: one field, the chain so far then this client.
    let chain = if trust {
        let prior: Vec<&str> = h
            .get_all(&X_FORWARDED_FOR)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .collect();
        if prior.is_empty() {
            HeaderValue::from_str(client)
        } else {
            HeaderValue::from_str(&format!("{}, {client}", prior.join(", ")))
        }
    } else {
        HeaderValue::from_str(client)
    };
    if let Ok(v) = chain {
        h.insert(&X_FORWARDED_FOR, v);
    }
    if !trust || !h.contains_key(&X_FORWARDED_PROTO) {
        h.insert(
            &X_FORWARDED_PROTO,
            HeaderValue::from_static(static_scheme(scheme)),
        );
    }
    if !trust || !h.contains_key(&X_FORWARDED_HOST) {
        match &host {
            Some(v) => h.insert(&X_FORWARDED_HOST, v.clone()),
            None => h.remove(&X_FORWARDED_HOST),
        };
    }
    if rfc7239 {
        // RFC 7239 §6: an IPv6 node is quoted and bracketed.
        let node = match peer.map(canonical) {
            Some(IpAddr::V6(v6)) => format!("\"[{v6}]\""),
            Some(v4) => v4.to_string(),
            None => "unknown".into(),
        };
        let mut elem = format!("for={node};proto={}", static_scheme(scheme));
        if let Some(hv) = host.as_ref().and_then(|v| v.to_str().ok()) {
            elem.push_str(&format!(";host=\"{}\"", hv.replace(['"', '\\'], "")));
        }
        let prior: Vec<&str> = h
            .get_all(FORWARDED)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        let value = if trust && !prior.is_empty() {
            format!("{}, {elem}", prior.join(", "))
        } else {
            elem
        };
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(FORWARDED, v);
        }
    } else if !trust {
        h.remove(FORWARDED);
    }
    if !trust {
        remove_claims(h, keep);
    }
}

/// The forwarding fields a peer claims (`X-Forwarded-Proto`, `-Host`, `Forwarded` and the
/// [`CLAIMS`] but `keep`'s), taken off (see `Proxy::drop_untrusted_claims`).
pub(crate) fn drop_forwarding(h: &mut HeaderMap, keep: u16) {
    h.remove(&X_FORWARDED_PROTO);
    h.remove(&X_FORWARDED_HOST);
    h.remove(FORWARDED);
    remove_claims(h, keep);
}

/// The forwarding fields a trusted proxy's claims are kept in, and that a cache in front
/// of such a route keys by: the upstream builds links and redirects from them. Not
/// `Forwarded`, whose `for=` names each client (a key per client), nor the address claims
/// (the first three [`CLAIMS`]).
pub(crate) fn keyed_when_trusted() -> impl Iterator<Item = &'static HeaderName> {
    [&X_FORWARDED_PROTO, &X_FORWARDED_HOST]
        .into_iter()
        .chain(CLAIMS[3..].iter())
}

/// Which of the [`CLAIMS`] are in `names` (those a route's rules set), as a bit set.
pub(crate) fn claims_set<'a>(names: impl IntoIterator<Item = &'a HeaderName>) -> u16 {
    names.into_iter().fold(0, |set, n| match claim_index(n) {
        Some(i) => set | (1 << i),
        None => set,
    })
}

/// The forwarding fields of a request from a client that isn't trusted, to be written
/// straight into an upstream HTTP/1.1 head (`h1::Outgoing`) rather than put in the
/// request's `HeaderMap` and read back out of it: the client's own `X-Forwarded-*` and
/// `Forwarded` fields are left out of the head, and these go last. What reaches the
/// upstream is what [`forward`] and [`add_via`] make of the map (RFC 9110 §5.3: our `Via`
/// line after the client's is the same list as one appended field).
pub(crate) struct Forwarding {
    client: StackStr,
    proto: &'static str,
    host: Option<HeaderValue>,
    version: http::Version,
    /// The [`CLAIMS`] kept ([`forward_keeping`]).
    keep: u16,
}

impl Forwarding {
    /// `None` when the map's way is needed: a trusted peer's chain is extended, and RFC 7239
    /// `Forwarded` is built from parts.
    /// `host` is the request's `Host` field.
    pub(crate) fn direct(
        host: Option<&HeaderValue>,
        peer: Option<IpAddr>,
        scheme: &str,
        trusted: &Trusted,
        rfc7239: bool,
        version: http::Version,
    ) -> Option<Forwarding> {
        if rfc7239 || peer.is_some_and(|p| trusted.contains(p)) {
            return None;
        }
        Some(Forwarding {
            client: client_text(peer),
            proto: static_scheme(scheme),
            host: host.cloned(),
            version,
            keep: 0,
        })
    }

    /// Keeps the [`CLAIMS`] in `keep` ([`forward_keeping`]).
    pub(crate) fn keeping(mut self, keep: u16) -> Forwarding {
        self.keep = keep;
        self
    }

    /// A client's field that this replaces, and so is not sent on.
    pub(crate) fn replaces(&self, name: &HeaderName) -> bool {
        name == FORWARDED
            || name == X_FORWARDED_FOR
            || name == X_FORWARDED_PROTO
            || name == X_FORWARDED_HOST
            || claim_index(name).is_some_and(|i| self.keep & (1 << i) == 0)
    }

    /// The field lines, as [`forward`] and [`add_via`] would set them.
    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"x-forwarded-for: ");
        out.extend_from_slice(self.client.as_bytes());
        out.extend_from_slice(if self.proto == "https" {
            b"\r\nx-forwarded-proto: https\r\n"
        } else {
            b"\r\nx-forwarded-proto: http\r\n"
        });
        if let Some(host) = &self.host {
            out.extend_from_slice(b"x-forwarded-host: ");
            out.extend_from_slice(host.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"via: ");
        out.extend_from_slice(via_text(self.version).as_bytes());
        out.extend_from_slice(b"\r\n");
    }

    /// Sets the same fields in a map instead, for a request that goes another way after all.
    /// (None does today: `direct` is asked only for a request that will go over the own
    /// client. This keeps a change there from sending a request without them.)
    pub(crate) fn apply(self, h: &mut HeaderMap) {
        h.remove(FORWARDED);
        remove_claims(h, self.keep);
        if let Ok(v) = HeaderValue::from_str(self.client.as_str()) {
            h.insert(&X_FORWARDED_FOR, v);
        }
        h.insert(&X_FORWARDED_PROTO, HeaderValue::from_static(self.proto));
        match self.host {
            Some(v) => h.insert(&X_FORWARDED_HOST, v),
            None => h.remove(&X_FORWARDED_HOST),
        };
        add_via(h, self.version);
    }
}

/// The client's address as `X-Forwarded-For` gives it.
fn client_text(peer: Option<IpAddr>) -> StackStr {
    let mut buf = StackStr::default();
    match peer.map(canonical) {
        // By hand: `Display` for an address costs about 900 instructions through the
        // formatting machinery, 3% of a proxied request's user work.
        Some(IpAddr::V4(v4)) => buf.push_v4(v4),
        Some(p) => {
            let _ = std::fmt::Write::write_fmt(&mut buf, format_args!("{p}"));
        }
        None => buf.push("unknown"),
    }
    buf
}

/// Enough for any IP address in text.
struct StackStr {
    buf: [u8; 64],
    len: usize,
}

impl Default for StackStr {
    fn default() -> Self {
        StackStr {
            buf: [0; 64],
            len: 0,
        }
    }
}

impl StackStr {
    fn push(&mut self, s: &str) {
        let _ = std::fmt::Write::write_str(self, s);
    }

    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("unknown")
    }

    /// Dotted decimal, as `Display` writes it.
    fn push_v4(&mut self, ip: std::net::Ipv4Addr) {
        for (i, o) in ip.octets().into_iter().enumerate() {
            if i > 0 {
                self.push_ascii(b'.');
            }
            if o >= 100 {
                self.push_ascii(b'0' + o / 100);
            }
            if o >= 10 {
                self.push_ascii(b'0' + o / 10 % 10);
            }
            self.push_ascii(b'0' + o % 10);
        }
    }

    /// One ASCII byte (so the buffer stays UTF-8); past the end it is dropped, as
    /// `write_str` refuses.
    fn push_ascii(&mut self, b: u8) {
        if let Some(slot) = self.buf.get_mut(self.len) {
            *slot = b & 0x7f;
            self.len += 1;
        }
    }
}

impl std::fmt::Write for StackStr {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let dst = self.buf.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

fn static_scheme(s: &str) -> &'static str {
    if s == "https" {
        "https"
    } else {
        "http"
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_ipv4_address_is_written_as_display_writes_it() {
        let every_octet = (0..=255u8).map(|o| [o, 255 - o, o / 2, 0]);
        for ip in every_octet.chain([[127, 0, 0, 1], [10, 100, 9, 99], [1, 20, 199, 200]]) {
            let ip = std::net::Ipv4Addr::from(ip);
            let mut buf = super::StackStr::default();
            buf.push_v4(ip);
            assert_eq!(buf.as_str(), ip.to_string());
        }
    }

    use super::*;

    fn hv(s: &str) -> HeaderValue {
        HeaderValue::from_str(s).unwrap()
    }

    #[test]
    fn hop_by_hop_fields_go() {
        let mut h = HeaderMap::new();
        h.insert(CONNECTION, hv("keep-alive, X-Secret"));
        h.insert("x-secret", hv("1"));
        h.insert("keep-alive", hv("timeout=5"));
        h.insert(TE, hv("trailers"));
        h.insert("proxy-authorization", hv("Basic x"));
        h.insert("x-kept", hv("yes"));
        remove_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert_eq!(h["x-kept"], "yes");
    }

    /// The quick way (nothing named but keep-alive, no Proxy-*) leaves what the list of
    /// names would, whichever fields are there.
    #[test]
    fn the_quick_way_removes_what_the_list_would() {
        let fields: [(&str, &str); 9] = [
            ("connection", "keep-alive"),
            ("connection", "Keep-Alive , "),
            ("connection", "close"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("close", "1"),
            ("proxy-connection", "x"),
        ];
        for mask in 0u32..(1 << fields.len()) {
            let mut h = HeaderMap::new();
            h.insert("x-kept", hv("yes"));
            for (i, (k, v)) in fields.iter().enumerate() {
                if mask & (1 << i) != 0 {
                    h.append(*k, hv(v));
                }
            }
            let mut expected = h.clone();
            remove_by_list(&mut expected);
            remove_hop_by_hop(&mut h);
            assert_eq!(h, expected, "fields {mask:b}");
        }
    }

    #[test]
    fn untrusted_claims_are_replaced() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", hv("6.6.6.6"));
        h.insert("x-forwarded-proto", hv("https"));
        h.insert(HOST, hv("example.com"));
        forward(
            &mut h,
            Some("192.0.2.1".parse().unwrap()),
            "http",
            &Trusted::default(),
            true,
        );
        assert_eq!(h["x-forwarded-for"], "192.0.2.1");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "example.com");
        assert_eq!(
            h[FORWARDED],
            "for=192.0.2.1;proto=http;host=\"example.com\""
        );
    }

    #[test]
    fn an_untrusted_clients_claims_go_unless_the_route_sets_them() {
        let claims = [
            "x-real-ip",
            "true-client-ip",
            "x-client-ip",
            "x-forwarded-scheme",
            "x-forwarded-ssl",
            "x-forwarded-port",
            "x-forwarded-prefix",
            "x-forwarded-server",
            "x-original-url",
            "x-rewrite-url",
        ];
        let with_all = || {
            let mut h = HeaderMap::new();
            for c in claims {
                h.insert(c, hv("claimed"));
            }
            h.insert("x-other", hv("1"));
            h.insert(HOST, hv("example.com"));
            h
        };
        let peer = Some("192.0.2.1".parse().unwrap());
        let keep = claims_set([&HeaderName::from_static("x-forwarded-prefix")]);
        let mut h = with_all();
        forward_keeping(&mut h, peer, "http", &Trusted::default(), false, keep);
        for c in claims {
            assert_eq!(h.contains_key(c), c == "x-forwarded-prefix", "{c}");
        }
        assert_eq!(h["x-other"], "1");
        // The own client's head leaves out the same fields.
        let f = Forwarding::direct(
            None,
            peer,
            "http",
            &Trusted::default(),
            false,
            http::Version::HTTP_11,
        )
        .unwrap()
        .keeping(keep);
        for c in claims {
            let n = HeaderName::from_static(c);
            assert_eq!(f.replaces(&n), c != "x-forwarded-prefix", "{c}");
        }
        assert!(!f.replaces(&HeaderName::from_static("x-other")));
        assert!(!f.replaces(&HOST));
        // From a trusted proxy they are its to pass on.
        let mut h = with_all();
        let t = trusted(&["192.0.2.0/24".into()]);
        forward_keeping(&mut h, peer, "http", &t, false, 0);
        for c in claims {
            assert!(h.contains_key(c), "{c}");
        }
    }

    #[test]
    fn trusted_chains_are_extended_in_one_field() {
        let t = trusted(&["10.0.0.0/8".into(), "::1".into()]);
        let mut h = HeaderMap::new();
        h.append("x-forwarded-for", hv("203.0.113.5"));
        h.append("x-forwarded-for", hv("198.51.100.7"));
        forward(&mut h, Some("10.1.2.3".parse().unwrap()), "http", &t, false);
        assert_eq!(h.get_all("x-forwarded-for").iter().count(), 1);
        assert_eq!(h["x-forwarded-for"], "203.0.113.5, 198.51.100.7, 10.1.2.3");
        let mut h = HeaderMap::new();
        forward(&mut h, Some("::1".parse().unwrap()), "http", &t, true);
        assert_eq!(h[FORWARDED], "for=\"[::1]\";proto=http");
        assert!(t.contains("::ffff:10.9.9.9".parse().unwrap()));
        assert!(!t.contains("11.0.0.1".parse().unwrap()));
        // Mapped networks mean their IPv4 selves, and never index past an address.
        let m = trusted(&["::ffff:10.0.0.0/104".into(), "::ffff:192.0.2.7".into()]);
        assert!(m.contains("10.200.0.1".parse().unwrap()));
        assert!(m.contains("192.0.2.7".parse().unwrap()));
        assert!(!m.contains("11.0.0.1".parse().unwrap()));
        assert!(!m.contains("2001:db8::1".parse().unwrap()));
    }
}
