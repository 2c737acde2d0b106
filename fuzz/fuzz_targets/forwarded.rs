//! The headers a proxy changes: `gatehouse::proxy::headers::{remove_hop_by_hop, forward,
//! add_via}`, over any request headers, any peer address (trusted or not) and scheme.
//!
//! Properties:
//! - after `remove_hop_by_hop`, no hop-by-hop field is left (`Connection`, `Keep-Alive`,
//!   `TE`, `Trailer`, `Transfer-Encoding`, `Upgrade`, `Proxy-*`, and every field
//!   `Connection` named), and every other field is left as it was;
//! - after `forward`, there is exactly one `X-Forwarded-For`, ending with the peer (or
//!   `unknown`); from an untrusted peer it is the peer alone, and `X-Forwarded-Proto`,
//!   `X-Forwarded-Host` and `Forwarded` say only what this hop saw; from a trusted one, the
//!   chain it sent is kept in order; with RFC 7239 on there is exactly one `Forwarded`,
//!   ending with this hop's element; fields other than these are untouched;
//! - `add_via` appends exactly one `Via`.
//!
//! Text input (the seeds): `peer: <address>` (or `none`; trusted: 10.0.0.0/8, ::1,
//! 2001:db8::/32), `scheme: https`, `rfc7239: on`, `version: 1.0|1.1|2`, and the request's
//! header lines, taken as they are.
#![no_main]

mod common;

use arbitrary::Arbitrary;
use gatehouse::proxy::headers::{add_via, forward, remove_hop_by_hop, trusted, Trusted};
use gatehouse_layers::cidr::canonical;
use http::header::{FORWARDED, HOST, VIA};
use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::OnceLock;

const XFF: &str = "x-forwarded-for";
const XFP: &str = "x-forwarded-proto";
const XFH: &str = "x-forwarded-host";
/// The fields backends read as what an earlier proxy saw (`proxy::headers`' claims).
const CLAIMS: [&str; 10] = [
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

const NAMES: &[&str] = &[
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-authorization",
    "proxy-connection",
    XFF,
    XFP,
    XFH,
    "forwarded",
    "host",
    "via",
    "x-secret",
    "content-length",
    "authorization",
    "cookie",
];

#[derive(Arbitrary, Debug)]
enum Name {
    Known(u8),
    Any(String),
}

#[derive(Arbitrary, Debug)]
enum Value {
    Raw(Vec<u8>),
    /// A `Connection`-style list of known names.
    Names(Vec<u8>),
    Addr(Peer),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Peer {
    None,
    V4([u8; 4]),
    V6([u16; 8]),
    /// Inside the trusted networks.
    Trusted(u8, u8),
    /// An IPv4-mapped IPv6 address inside them.
    TrustedMapped(u8, u8),
}

#[derive(Arbitrary, Debug)]
struct Input {
    headers: Vec<(Name, Value)>,
    peer: Peer,
    https: bool,
    rfc7239: bool,
    version: u8,
}

impl Peer {
    fn addr(self) -> Option<IpAddr> {
        Some(match self {
            Peer::None => return None,
            Peer::V4(o) => IpAddr::V4(Ipv4Addr::from(o)),
            Peer::V6(s) => IpAddr::V6(Ipv6Addr::from(s)),
            Peer::Trusted(a, b) => IpAddr::V4(Ipv4Addr::new(10, a, b, 1)),
            Peer::TrustedMapped(a, b) => IpAddr::V6(Ipv4Addr::new(10, a, b, 1).to_ipv6_mapped()),
        })
    }
}

fn trusted_set() -> &'static Trusted {
    static T: OnceLock<Trusted> = OnceLock::new();
    T.get_or_init(|| trusted(&["10.0.0.0/8".into(), "::1".into(), "2001:db8::/32".into()]))
}

fn values(h: &HeaderMap, name: &str) -> Vec<HeaderValue> {
    h.get_all(name).iter().cloned().collect()
}

fn is_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection" | "keep-alive" | "te" | "trailer" | "transfer-encoding" | "upgrade"
    ) || name.as_str().starts_with("proxy-")
}

/// Every field of `h` but those in `skip`, with its values in order.
fn others(
    h: &HeaderMap,
    skip: &dyn Fn(&HeaderName) -> bool,
) -> Vec<(HeaderName, Vec<HeaderValue>)> {
    let mut out: Vec<(HeaderName, Vec<HeaderValue>)> = h
        .keys()
        .filter(|k| !skip(k))
        .map(|k| (k.clone(), h.get_all(k).iter().cloned().collect()))
        .collect();
    out.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    out
}

fn text(data: &[u8]) -> Option<Input> {
    let mut input = Input {
        headers: Vec::new(),
        peer: Peer::None,
        https: false,
        rfc7239: false,
        version: 1,
    };
    for (name, value) in common::header_lines(data)? {
        match name {
            "peer" => {
                input.peer = match value.parse::<IpAddr>() {
                    Ok(IpAddr::V4(a)) => Peer::V4(a.octets()),
                    Ok(IpAddr::V6(a)) => Peer::V6(a.segments()),
                    Err(_) if value == "none" => Peer::None,
                    Err(_) => return None,
                }
            }
            "scheme" => input.https = value == "https",
            "rfc7239" => input.rfc7239 = value == "on",
            "version" => {
                input.version = match value {
                    "1.0" => 0,
                    "1.1" => 1,
                    "2" => 2,
                    _ => return None,
                }
            }
            _ => input.headers.push((
                Name::Any(name.to_string()),
                Value::Raw(value.as_bytes().to_vec()),
            )),
        }
    }
    Some(input)
}

fuzz_target!(|data: &[u8]| {
    let Some(input) = common::input(data, text) else {
        return;
    };
    let mut h = HeaderMap::new();
    for (name, value) in input.headers.iter().take(24) {
        let name = match name {
            Name::Known(i) => HeaderName::from_static(NAMES[usize::from(*i) % NAMES.len()]),
            Name::Any(s) => match HeaderName::try_from(s.as_str()) {
                Ok(n) => n,
                Err(_) => continue,
            },
        };
        let text: Vec<u8> = match value {
            Value::Raw(b) => b.clone(),
            Value::Names(ix) => ix
                .iter()
                .map(|&i| NAMES[usize::from(i) % NAMES.len()])
                .collect::<Vec<_>>()
                .join(", ")
                .into_bytes(),
            Value::Addr(p) => p
                .addr()
                .map_or("unknown".to_string(), |a| a.to_string())
                .into_bytes(),
        };
        let Ok(v) = HeaderValue::from_bytes(&text) else {
            continue;
        };
        h.append(name, v);
    }

    // Hop-by-hop fields.
    let named: Vec<HeaderName> = h
        .get_all("connection")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    let doomed = |k: &HeaderName| is_hop(k) || named.contains(k);
    let kept_before = others(&h, &doomed);
    remove_hop_by_hop(&mut h);
    for k in h.keys() {
        assert!(!doomed(k), "{k} is left");
    }
    assert_eq!(
        others(&h, &|_| false),
        kept_before,
        "a field that stays was changed"
    );

    // Forwarding fields.
    let peer = input.peer.addr();
    let scheme = if input.https { "https" } else { "http" };
    let trust = peer.is_some_and(|p| trusted_set().contains(p));
    if matches!(input.peer, Peer::Trusted(..) | Peer::TrustedMapped(..)) {
        assert!(trust, "{peer:?} is in 10.0.0.0/8");
    }
    let before = h.clone();
    let touched = |k: &HeaderName| {
        [XFF, XFP, XFH].contains(&k.as_str()) || *k == FORWARDED || CLAIMS.contains(&k.as_str())
    };
    forward(&mut h, peer, scheme, trusted_set(), input.rfc7239);
    assert_eq!(others(&h, &touched), others(&before, &touched));
    // What earlier proxies saw: an untrusted peer's claims are dropped, a trusted one's kept.
    for c in CLAIMS {
        match trust {
            true => assert_eq!(values(&h, c), values(&before, c), "{c}"),
            false => assert!(values(&h, c).is_empty(), "an untrusted {c} was kept"),
        }
    }

    let client = peer.map_or("unknown".to_string(), |p| canonical(p).to_string());
    let xff = values(&h, XFF);
    assert_eq!(xff.len(), 1, "X-Forwarded-For: {xff:?}");
    let xff = xff[0].to_str().expect("X-Forwarded-For is text");
    let host = before.get(HOST);
    if trust {
        let mut chain: Vec<String> = values(&before, XFF)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect();
        chain.push(client.clone());
        assert_eq!(xff, chain.join(", "));
        if before.contains_key(XFP) {
            assert_eq!(values(&h, XFP), values(&before, XFP));
        } else {
            assert_eq!(values(&h, XFP), [scheme]);
        }
        if before.contains_key(XFH) {
            assert_eq!(values(&h, XFH), values(&before, XFH));
        } else {
            assert_eq!(
                values(&h, XFH),
                host.into_iter().cloned().collect::<Vec<_>>()
            );
        }
    } else {
        assert_eq!(xff, client, "an untrusted chain was kept");
        assert_eq!(values(&h, XFP), [scheme]);
        assert_eq!(
            values(&h, XFH),
            host.into_iter().cloned().collect::<Vec<_>>()
        );
    }
    if input.rfc7239 {
        let node = match peer.map(canonical) {
            Some(IpAddr::V6(v6)) => format!("\"[{v6}]\""),
            Some(v4) => v4.to_string(),
            None => "unknown".into(),
        };
        // This hop's element: the host, when it is text, quoted without quotes or escapes.
        let mut elem = format!("for={node};proto={scheme}");
        if let Some(host) = host.and_then(|v| v.to_str().ok()) {
            let bare: String = host.chars().filter(|c| !matches!(c, '"' | '\\')).collect();
            elem.push_str(&format!(";host=\"{bare}\""));
        }
        let prior: Vec<&str> = before
            .get_all(FORWARDED)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        let want = if trust && !prior.is_empty() {
            format!("{}, {elem}", prior.join(", "))
        } else {
            elem
        };
        assert_eq!(values(&h, FORWARDED.as_str()), [want.as_str()]);
    } else if !trust {
        assert!(
            !h.contains_key(FORWARDED),
            "an untrusted Forwarded was kept"
        );
    } else {
        assert_eq!(
            values(&h, FORWARDED.as_str()),
            values(&before, FORWARDED.as_str())
        );
    }

    // Via.
    let vias = values(&h, VIA.as_str()).len();
    let version = [
        http::Version::HTTP_10,
        http::Version::HTTP_11,
        http::Version::HTTP_2,
    ][usize::from(input.version % 3)];
    add_via(&mut h, version);
    assert_eq!(values(&h, VIA.as_str()).len(), vias + 1);
});
