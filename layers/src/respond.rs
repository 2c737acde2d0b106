//! The two small answers a Service or layer gives itself: a plain-text status page, and the
//! redirect that adds a directory's trailing slash. The gateway's router, proxy and admin
//! listener use the same ones, so every such answer looks alike.

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, LOCATION};
use http::{HeaderValue, Response, StatusCode};

/// A 301 to the same path with a slash added (a directory asked for without one).
pub fn add_slash<B: From<Bytes>>(uri: &http::Uri) -> Response<B> {
    // A relative reference (RFC 9110 §10.2.2) to the last segment plus '/', so that it is
    // right under whatever prefix the route was mounted at.
    let path = uri.path();
    let last = path.rsplit('/').next().unwrap_or("");
    let mut loc = String::with_capacity(last.len() + 2);
    if last.is_empty() {
        loc.push_str("./");
    } else {
        loc.push_str(last);
        loc.push('/');
    }
    if let Some(q) = uri.query() {
        loc.push('?');
        loc.push_str(q);
    }
    let mut res = plain(StatusCode::MOVED_PERMANENTLY, "moved permanently\n");
    if let Ok(v) = HeaderValue::from_str(&loc) {
        res.headers_mut().insert(LOCATION, v);
    }
    res
}

/// A short text response. A `&'static str` costs no copy; a `String` is moved in.
pub fn plain<B: From<Bytes>>(status: StatusCode, text: impl Into<Bytes>) -> Response<B> {
    let text: Bytes = text.into();
    let len = text.len();
    let mut res = Response::new(B::from(text));
    *res.status_mut() = status;
    res.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    res.headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from(len));
    res
}
