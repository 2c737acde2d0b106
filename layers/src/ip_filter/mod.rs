//! Client IP rules: a request whose client is denied, or not allowed, gets
//! 403 Forbidden (RFC 9110 §15.5.4) and never reaches the Service, as with nginx's
//! `allow` and `deny`.
//!
//! A deny rule wins over an allow rule; with no allow rule every client not denied may
//! pass. The client is the connection's peer ([`client_addr`](crate::client::client_addr)),
//! or, when the peer is one of the trusted proxies, the address they name in
//! `X-Forwarded-For` ([`cidr::client_ip`](crate::cidr::client_ip)). A request whose peer is
//! unknown (no [`ClientAddr`](crate::client::ClientAddr), no axum `ConnectInfo`) is refused:
//! a rule that can't be checked doesn't let anyone through.
//!
//! ```
//! use axum::{routing::get, Router};
//! use gatehouse_layers::ip_filter::IpFilterLayer;
//!
//! let admin: Router = Router::new()
//!     .route("/", get(|| async { "admin" }))
//!     .layer(IpFilterLayer::new().allow("10.0.0.0/8".parse().unwrap()));
//! # let _ = admin;
//! ```

mod layer;
mod service;

pub use crate::answer::ResponseFuture;
pub use layer::IpFilterLayer;
pub use service::IpFilter;

use crate::cidr::{client_ip, CidrSet};
use std::net::{IpAddr, SocketAddr};

/// A network in CIDR notation (`10.0.0.0/8`, `2001:db8::/32`, or one address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Net {
    pub addr: IpAddr,
    pub prefix: u8,
}

/// Not a network: not an address, or a prefix length longer than the address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetError(String);

impl std::fmt::Display for NetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "not a network in CIDR notation: {:?}", self.0)
    }
}

impl std::error::Error for NetError {}

impl std::str::FromStr for Net {
    type Err = NetError;

    fn from_str(s: &str) -> Result<Net, NetError> {
        let bad = || NetError(s.to_string());
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr.trim().parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p.trim().parse::<u8>().map_err(|_| bad())?,
            None => max,
        };
        if prefix > max {
            return Err(bad());
        }
        Ok(Net { addr, prefix })
    }
}

/// The rules: who may pass, who may not, and whose `X-Forwarded-For` is believed.
#[derive(Clone, Debug, Default)]
pub struct IpRules {
    allow: CidrSet,
    deny: CidrSet,
    trusted: CidrSet,
}

impl IpRules {
    /// Rules from `(network, prefix length)` lists.
    pub fn new(
        allow: impl IntoIterator<Item = (IpAddr, u8)>,
        deny: impl IntoIterator<Item = (IpAddr, u8)>,
        trusted_proxies: impl IntoIterator<Item = (IpAddr, u8)>,
    ) -> IpRules {
        IpRules {
            allow: CidrSet::new(allow),
            deny: CidrSet::new(deny),
            trusted: CidrSet::new(trusted_proxies),
        }
    }

    /// Whether the client of a request from `peer` with `headers` may pass. With no peer,
    /// no one may.
    pub fn allows(&self, peer: Option<SocketAddr>, headers: &http::HeaderMap) -> bool {
        let Some(peer) = peer else {
            return false;
        };
        let ip = client_ip(peer.ip(), headers, &self.trusted);
        !self.deny.contains(ip) && (self.allow.is_empty() || self.allow.contains(ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;

    fn nets(list: &[&str]) -> Vec<(IpAddr, u8)> {
        list.iter()
            .map(|s| {
                let n: Net = s.parse().unwrap();
                (n.addr, n.prefix)
            })
            .collect()
    }

    #[test]
    fn networks_parse_or_say_why_not() {
        let n: Net = "10.1.0.0/16".parse().unwrap();
        assert_eq!((n.addr, n.prefix), ("10.1.0.0".parse().unwrap(), 16));
        let one: Net = "2001:db8::1".parse().unwrap();
        assert_eq!(one.prefix, 128);
        for bad in ["10.0.0.0/33", "::/129", "10.0.0/8", "x", "10.0.0.0/"] {
            let e = bad.parse::<Net>().unwrap_err();
            assert!(e.to_string().contains(bad), "{e}");
        }
    }

    /// Against the rules spelled out: deny wins, an empty allow list allows everyone.
    #[test]
    fn deny_wins_and_an_empty_allow_list_allows_all() {
        let addrs = [
            "10.0.0.1",
            "10.9.0.1",
            "192.0.2.1",
            "::ffff:10.9.0.2",
            "2001:db8::5",
        ];
        let lists: [&[&str]; 4] = [&[], &["10.0.0.0/8"], &["10.9.0.0/16"], &["2001:db8::/32"]];
        for allow in lists {
            for deny in lists {
                let rules = IpRules::new(nets(allow), nets(deny), []);
                for a in addrs {
                    let ip: IpAddr = a.parse().unwrap();
                    let set = |l: &[&str]| CidrSet::new(nets(l)).contains(ip);
                    let want = !set(deny) && (allow.is_empty() || set(allow));
                    let peer = SocketAddr::new(ip, 1);
                    assert_eq!(
                        rules.allows(Some(peer), &HeaderMap::new()),
                        want,
                        "{a} allow {allow:?} deny {deny:?}"
                    );
                }
            }
        }
        assert!(!IpRules::default().allows(None, &HeaderMap::new()));
    }

    #[test]
    fn a_trusted_proxy_names_the_client() {
        let rules = IpRules::new([], nets(&["203.0.113.9"]), nets(&["10.0.0.0/8"]));
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", "203.0.113.9".parse().unwrap());
        let proxy = "10.1.1.1:5000".parse().ok();
        let stranger = "198.51.100.1:5000".parse().ok();
        assert!(!rules.allows(proxy, &h), "the proxy's client is denied");
        assert!(
            rules.allows(stranger, &h),
            "an untrusted peer's header is ignored"
        );
    }

    /// The layer over a Service: a refused client never reaches it, and gets 403.
    #[tokio::test]
    async fn refused_clients_never_reach_the_service() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        use tower::{Layer, ServiceExt};
        let reached = Arc::new(AtomicUsize::new(0));
        let seen = reached.clone();
        let svc = tower::service_fn(move |_req: http::Request<()>| {
            seen.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, std::convert::Infallible>(http::Response::new(bytes::Bytes::new())) }
        });
        let layer = IpFilterLayer::new()
            .allow("10.0.0.0/8".parse().unwrap())
            .deny("10.6.6.0/24".parse().unwrap());
        let svc = layer.layer(svc);
        let call = |peer: Option<&str>, connect_info: bool| {
            let svc = svc.clone();
            let mut req = http::Request::new(());
            if let Some(p) = peer {
                let addr: SocketAddr = p.parse().unwrap();
                if connect_info {
                    req.extensions_mut()
                        .insert(axum::extract::ConnectInfo(addr));
                } else {
                    req.extensions_mut().insert(crate::client::ClientAddr(addr));
                }
            }
            async move { svc.oneshot(req).await.unwrap().status() }
        };
        assert_eq!(call(Some("10.1.2.3:1"), false).await, 200);
        assert_eq!(call(Some("10.1.2.3:1"), true).await, 200);
        assert_eq!(reached.load(Ordering::SeqCst), 2);
        assert_eq!(call(Some("10.6.6.7:1"), false).await, 403);
        assert_eq!(call(Some("192.0.2.1:1"), true).await, 403);
        assert_eq!(call(None, false).await, 403);
        assert_eq!(
            reached.load(Ordering::SeqCst),
            2,
            "a refused request reached it"
        );
    }
}
