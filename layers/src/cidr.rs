//! Sets of IP networks, and the client address behind trusted proxies: shared by the
//! proxy's forwarding headers and the IP allow and deny rules.

use http::HeaderMap;
use std::net::IpAddr;

/// A set of networks (CIDR blocks). An IPv4-mapped IPv6 address or network is taken as the
/// IPv4 one, so `::ffff:10.0.0.1` is in `10.0.0.0/8`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CidrSet {
    nets: Vec<(IpAddr, u8)>,
}

impl CidrSet {
    /// The set of `(network, prefix length)` pairs.
    pub fn new(nets: impl IntoIterator<Item = (IpAddr, u8)>) -> CidrSet {
        CidrSet {
            nets: nets
                .into_iter()
                .map(|(net, len)| match net {
                    IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                        Some(v4) if len >= 96 => (IpAddr::V4(v4), len - 96),
                        _ => (net, len),
                    },
                    v4 => (v4, len),
                })
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }

    /// The set's networks, as `(network, prefix length)`.
    pub fn nets(&self) -> impl Iterator<Item = (IpAddr, u8)> + '_ {
        self.nets.iter().copied()
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.nets.iter().any(|&(net, len)| match (net, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => prefix_eq(&n.octets(), &a.octets(), len),
            (IpAddr::V6(n), IpAddr::V6(a)) => prefix_eq(&n.octets(), &a.octets(), len),
            _ => false,
        })
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 one.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn prefix_eq(a: &[u8], b: &[u8], len: u8) -> bool {
    let len = (len as usize).min(a.len() * 8).min(b.len() * 8);
    let (full, rest) = (len / 8, (len % 8) as u8);
    if a[..full] != b[..full] {
        return false;
    }
    if rest == 0 {
        return true;
    }
    let mask = 0xffu8 << (8 - rest);
    match (a.get(full), b.get(full)) {
        (Some(x), Some(y)) => x & mask == y & mask,
        _ => false,
    }
}

/// The client's address: the peer's, unless the peer is a trusted proxy; then the
/// rightmost `X-Forwarded-For` entry that isn't one (as nginx's `real_ip_recursive on`).
/// Entries left of the first untrusted one could be anything the client wrote, so they
/// are never believed.
pub fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &CidrSet) -> IpAddr {
    let peer = canonical(peer);
    if trusted.is_empty() || !trusted.contains(peer) {
        return peer;
    }
    let mut client = peer;
    let values: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    for entry in values.iter().rev().flat_map(|v| v.rsplit(',')) {
        let Some(ip) = parse_entry(entry) else {
            // Garbage in the chain: stop at what is known.
            return client;
        };
        client = ip;
        if !trusted.contains(ip) {
            return ip;
        }
    }
    client
}

/// One `X-Forwarded-For` entry: an address, possibly with a port (`[::1]:80`, `1.2.3.4:5`).
fn parse_entry(s: &str) -> Option<IpAddr> {
    let s = s.trim();
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(canonical(ip));
    }
    if let Some(rest) = s.strip_prefix('[') {
        return rest.split_once(']')?.0.parse().ok().map(canonical);
    }
    s.rsplit_once(':')?.0.parse().ok().map(canonical)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(nets: &[(&str, u8)]) -> CidrSet {
        CidrSet::new(nets.iter().map(|(n, l)| (n.parse().unwrap(), *l)))
    }

    #[test]
    fn a_prefix_longer_than_the_address_is_clamped() {
        let s = set(&[("10.0.0.1", 120)]);
        assert!(s.contains("10.0.0.1".parse().unwrap()));
        assert!(!s.contains("10.0.0.2".parse().unwrap()));
    }

    #[test]
    fn the_client_is_the_rightmost_untrusted_entry_and_only_behind_a_trusted_peer() {
        let trusted = set(&[("10.0.0.0", 8)]);
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            "6.6.6.6, 203.0.113.9, 10.0.0.2".parse().unwrap(),
        );
        let ip = |peer: &str, h: &HeaderMap| client_ip(peer.parse().unwrap(), h, &trusted);
        assert_eq!(ip("10.0.0.1", &h), "203.0.113.9".parse::<IpAddr>().unwrap());
        // An untrusted peer's claims are ignored.
        assert_eq!(
            ip("198.51.100.1", &h),
            "198.51.100.1".parse::<IpAddr>().unwrap()
        );
        // Mapped addresses are the IPv4 ones.
        assert_eq!(
            ip("::ffff:10.0.0.1", &h),
            "203.0.113.9".parse::<IpAddr>().unwrap()
        );
        h.insert("x-forwarded-for", "[2001:db8::1]:443".parse().unwrap());
        assert_eq!(ip("10.0.0.1", &h), "2001:db8::1".parse::<IpAddr>().unwrap());
        h.insert("x-forwarded-for", "junk, 10.0.0.3".parse().unwrap());
        assert_eq!(ip("10.0.0.1", &h), "10.0.0.3".parse::<IpAddr>().unwrap());
    }
}
