//! Request IDs: each request gets one, sent to the Service in a header (`X-Request-Id`
//! unless told otherwise) and returned to the client in the same header. nginx's
//! `$request_id`, Caddy's `{http.request.uuid}`.
//!
//! A client's own ID is kept only from a trusted peer (a proxy in front that made it);
//! from anyone else it is replaced, so that a client can't choose what the logs and the
//! upstream see. A new ID is 16 random bytes in hex, as nginx's.
//!
//! The ID is put in the request's extensions as tower-http's
//! [`RequestId`](tower_http::request_id::RequestId), which an axum handler below reads
//! as it would under tower-http's `SetRequestIdLayer`, and [templates](crate::template)
//! read as `$request_id`. The response carries a
//! [`RequestIdText`](crate::template::RequestIdText), for the
//! [access log](crate::access_log)'s `$request_id`.
//!
//! ```
//! use axum::{routing::get, Router};
//! use gatehouse_layers::cidr::CidrSet;
//! use gatehouse_layers::request_id::RequestIdLayer;
//!
//! let proxies = CidrSet::new([("10.0.0.0".parse().unwrap(), 8)]);
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RequestIdLayer::new().trust(proxies));
//! # let _ = app;
//! ```

mod future;
mod layer;
mod service;

pub use future::ResponseFuture;
pub use layer::RequestIdLayer;
pub use service::RequestIdService;

/// A new ID: 16 random bytes in lower-case hex. fastrand's generator is per thread,
/// seeded from the OS: no lock and no system call per ID.
pub fn generate() -> http::HeaderValue {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let n = fastrand::u128(..);
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = HEX[((n >> (124 - i * 4)) & 15) as usize];
    }
    // Shared from the start: the request, its extension, the response and the log each
    // take a reference, where a copied value is reallocated on its first clone.
    http::HeaderValue::from_maybe_shared(bytes::Bytes::from_owner(out))
        .unwrap_or_else(|_| http::HeaderValue::from_static("0"))
}

/// Whether a client's ID can be kept: 1 to 200 visible ASCII characters.
fn acceptable(v: &http::HeaderValue) -> bool {
    let b = v.as_bytes();
    (1..=200).contains(&b.len()) && b.iter().all(|c| c.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_ids_are_32_hex_digits_and_differ() {
        let a = generate();
        let b = generate();
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.as_bytes().iter().all(|c| c.is_ascii_hexdigit()));
        assert!(acceptable(&a));
        assert!(!acceptable(&http::HeaderValue::from_static("")));
        assert!(!acceptable(&http::HeaderValue::from_static("a b")));
    }
}
