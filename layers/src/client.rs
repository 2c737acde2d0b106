//! The client's address as the layers see it.
//!
//! A server that knows the peer of each connection says so with a [`ClientAddr`] request
//! extension; every layer that needs the client's address ([`access_log`](crate::access_log),
//! [`auth`](crate::auth), [`rate_limit`](crate::rate_limit)) reads it from there first.
//! With the `axum` feature, an app served with
//! `into_make_service_with_connect_info::<SocketAddr>()` needs nothing more: axum's
//! `ConnectInfo<SocketAddr>` is the fallback.
//!
//! ```
//! use gatehouse_layers::client::{client_addr, ClientAddr};
//!
//! let mut req = http::Request::new(());
//! assert_eq!(client_addr(&req), None);
//! let peer = "192.0.2.7:50312".parse().unwrap();
//! req.extensions_mut().insert(ClientAddr(peer));
//! assert_eq!(client_addr(&req), Some(peer));
//! ```

use std::net::SocketAddr;

/// The peer address of the connection a request came on, as a request extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClientAddr(pub SocketAddr);

/// Whether a request's connection is TLS, as the server that accepted it knows it: a
/// request extension. It outranks the request URI's scheme, which the client wrote (an
/// absolute-form `https://` target, an HTTP/2 `:scheme`) and which says nothing of the
/// connection. See [`is_https`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Https(pub bool);

/// Whether the request came over TLS: its [`Https`] extension, else (a server that
/// doesn't say) its URI's scheme.
pub fn is_https<B>(req: &http::Request<B>) -> bool {
    match req.extensions().get::<Https>() {
        Some(h) => h.0,
        None => req.uri().scheme() == Some(&http::uri::Scheme::HTTPS),
    }
}

/// The request's client address: its [`ClientAddr`] extension, else (with the `axum`
/// feature) axum's `ConnectInfo<SocketAddr>`, else `None`.
pub fn client_addr<B>(req: &http::Request<B>) -> Option<SocketAddr> {
    client_addr_in(req.extensions())
}

/// [`client_addr`], from a request's extensions (as in its `Parts`).
pub fn client_addr_in(ext: &http::Extensions) -> Option<SocketAddr> {
    if let Some(c) = ext.get::<ClientAddr>() {
        return Some(c.0);
    }
    #[cfg(feature = "axum")]
    if let Some(c) = ext.get::<axum::extract::ConnectInfo<SocketAddr>>() {
        return Some(c.0);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The server's word outranks the client's: an `https://` target on a plain
    /// connection is not HTTPS.
    #[test]
    fn the_servers_extension_outranks_the_clients_scheme() {
        for (target, ext, want) in [
            ("/", None, false),
            ("/", Some(true), true),
            ("/", Some(false), false),
            ("https://a.test/", None, true),
            ("https://a.test/", Some(false), false),
            ("http://a.test/", Some(true), true),
            ("http://a.test/", None, false),
        ] {
            let mut req = http::Request::get(target).body(()).unwrap();
            if let Some(h) = ext {
                req.extensions_mut().insert(Https(h));
            }
            assert_eq!(is_https(&req), want, "{target} {ext:?}");
        }
    }

    #[test]
    fn the_extension_comes_before_connect_info() {
        let mut req = http::Request::new(());
        let ours: SocketAddr = "192.0.2.1:1000".parse().unwrap();
        req.extensions_mut().insert(ClientAddr(ours));
        #[cfg(feature = "axum")]
        {
            let theirs: SocketAddr = "198.51.100.2:2000".parse().unwrap();
            req.extensions_mut()
                .insert(axum::extract::ConnectInfo(theirs));
        }
        assert_eq!(client_addr(&req), Some(ours));
    }

    #[cfg(feature = "axum")]
    #[test]
    fn connect_info_is_the_fallback() {
        let mut req = http::Request::new(());
        let theirs: SocketAddr = "198.51.100.2:2000".parse().unwrap();
        req.extensions_mut()
            .insert(axum::extract::ConnectInfo(theirs));
        assert_eq!(client_addr(&req), Some(theirs));
    }
}
