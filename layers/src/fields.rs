//! Field values as a request's next HTTP/1.1 hop must see them.
//!
//! ```
//! use gatehouse_layers::fields::joined_cookie;
//!
//! let mut h = http::HeaderMap::new();
//! h.append("cookie", "a=1".parse().unwrap());
//! h.append("cookie", "".parse().unwrap());
//! h.append("cookie", "b=2; c=3".parse().unwrap());
//! assert_eq!(joined_cookie(&h).unwrap(), "a=1; b=2; c=3");
//! ```

use http::header::COOKIE;
use http::{HeaderMap, HeaderValue};

/// RFC 9113 §8.2.3, RFC 9114 §4.2.1: the cookie-pairs an HTTP/2 or HTTP/3 client may send
/// in several `cookie` fields, joined with "; " into the one `Cookie` an HTTP/1.1 server
/// expects (RFC 6265 §5.4). Empty fields add nothing; `None` when nothing is left.
pub fn joined_cookie(h: &HeaderMap) -> Option<HeaderValue> {
    let mut joined = Vec::new();
    for v in h.get_all(COOKIE) {
        let v = v.as_bytes().trim_ascii();
        if v.is_empty() {
            continue;
        }
        if !joined.is_empty() {
            joined.extend_from_slice(b"; ");
        }
        joined.extend_from_slice(v);
    }
    if joined.is_empty() {
        return None;
    }
    HeaderValue::from_bytes(&joined).ok()
}
