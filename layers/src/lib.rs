//! tower Layers from the gatehouse web gateway. Each works alone, over any `Service` that
//! takes an `http::Request`, so it can be mounted in any axum app; each has its own cargo
//! feature.
//!
//! - [`open_file_cache`]: resolves request paths to files safely and caches what a hit
//!   needs (metadata, formatted validators, small bodies), like nginx's `open_file_cache`.
//! - [`static_files`]: a complete static-file Service over the open-file cache, like
//!   tower-http's `ServeDir`: conditional requests, ranges, multipart/byteranges, a 404
//!   page, and bodies that stream large files in bounded chunks (or by `sendfile` under
//!   gatehouse's own server).
//! - [`precompress`]: compresses each version of a response once (br, zstd, gzip) and
//!   serves it from memory; sends precompressed files from disk when present.
//! - [`access_log`]: nginx-compatible and JSON access logs, batched on a writer thread,
//!   with no line lost.
//! - [`acme`]: answers ACME HTTP-01 challenges (RFC 8555 §8.3) before anything else sees
//!   the request.
//! - [`auth`]: HTTP Basic from an htpasswd file, Bearer JWTs, forward auth.
//! - [`cache`]: a shared response cache (RFC 9111, RFC 5861): fresh hits from memory,
//!   one upstream fetch per key, revalidation, stale responses while the upstream fails.
//! - [`metrics`]: request metrics per route for Prometheus, and the process's own.
//! - [`ip_filter`]: client IP allow and deny rules, answering 403.
//! - [`rate_limit`]: a token bucket per client address, answering 429 with `Retry-After`.
//! - [`headers`]: set, add and remove request and response headers, by status.
//! - [`redirect`]: redirects by exact path, prefix or regex with captures.
//! - [`rewrite`]: internal rewrites of the target before the Service.
//! - [`request_id`]: an ID per request, to the Service, the client and the access log.
//! - [`cors`]: CORS, preflights answered.
//! - [`error_pages`]: pages for error statuses, keeping the status.
//! - [`template`]: the `$variables` of header values and targets.
//! - [`client`]: the client address the layers read, and how a server passes it.
//! - [`cidr`]: IP network sets and the client address behind trusted proxies.
//! - [`path`]: the one path normalisation every layer and the router share.

// The few FFI calls (libc) each allow it where they are, with a SAFETY comment.
#![deny(unsafe_code, clippy::undocumented_unsafe_blocks)]

#[cfg(feature = "access-log")]
pub mod access_log;
#[cfg(feature = "acme")]
pub mod acme;
#[cfg(any(
    feature = "acme",
    feature = "rate-limit",
    feature = "ip-filter",
    feature = "redirect",
    feature = "rewrite"
))]
mod answer;
#[cfg(feature = "auth")]
pub mod auth;
#[cfg(feature = "cache")]
pub mod cache;
pub mod cidr;
pub mod client;
pub mod clock;
#[cfg(feature = "cors")]
pub mod cors;
#[cfg(feature = "error-pages")]
pub mod error_pages;
pub mod fields;
#[cfg(feature = "headers")]
pub mod headers;
#[cfg(feature = "ip-filter")]
pub mod ip_filter;
#[cfg(feature = "metrics")]
pub mod metrics;
#[cfg(feature = "open-file-cache")]
pub mod open_file_cache;
pub mod path;
#[cfg(any(feature = "redirect", feature = "rewrite"))]
pub mod path_match;
#[cfg(any(
    feature = "open-file-cache",
    feature = "precompress",
    feature = "cache"
))]
mod per_thread;
#[cfg(feature = "precompress")]
pub mod precompress;
#[cfg(feature = "rate-limit")]
pub mod rate_limit;
#[cfg(feature = "redirect")]
pub mod redirect;
#[cfg(feature = "request-id")]
pub mod request_id;
pub mod respond;
#[cfg(feature = "rewrite")]
pub mod rewrite;
pub mod siblings;
#[cfg(feature = "static-files")]
pub mod static_files;
pub mod tally;
pub mod template;
pub mod upstream;
#[cfg(any(feature = "access-log", feature = "metrics"))]
pub mod watched;

/// A short plain-text answer (an error page) with its length: the one the layers give
/// when they answer instead of the Service.
#[cfg(any(
    feature = "auth",
    feature = "rate-limit",
    feature = "precompress",
    feature = "ip-filter",
    feature = "rewrite"
))]
pub(crate) fn text_response(
    status: http::StatusCode,
    body: &'static str,
) -> http::Response<bytes::Bytes> {
    use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
    let mut res = http::Response::new(bytes::Bytes::from_static(body.as_bytes()));
    *res.status_mut() = status;
    let h = res.headers_mut();
    h.insert(
        CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(CONTENT_LENGTH, http::HeaderValue::from(body.len()));
    res
}
