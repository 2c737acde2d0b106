//! Compression that costs nothing per request: each version of a response is encoded
//! once, kept in memory, and served from there.
//!
//! [`Precompress`] negotiates a coding (br, zstd or gzip) from `Accept-Encoding`
//! (RFC 9110 §12.5.3: q-values, `*`, `identity;q=0` → 406, ties broken by the server's
//! order). When the inner Service answers 200 with a compressible body (see [`Predicate`])
//! and a strong `ETag`, the encoded variant is looked up by resource, `ETag` and coding:
//!
//! - a hit is served from memory, with no encoding work on the request path;
//! - a miss encodes the body once on the blocking pool; concurrent requests for the same
//!   version wait for that one encoding (single flight);
//! - a changed resource has a new `ETag`, hence new entries; the old ones age out of a
//!   store bounded by bytes (moka: TinyLFU admission, LRU eviction).
//!
//! Each variant has its own `ETag` (the original's with `-br`, `-zstd` or `-gzip`), and
//! `If-None-Match` with it gives 304. Responses that could be encoded carry
//! `Vary: Accept-Encoding` whichever coding they are sent in. A 206 is never encoded:
//! ranges are served from the identity representation. HEAD gets the headers GET would.
//!
//! A response without a strong `ETag` (or larger than [`PrecompressLayer::max_size`]) has
//! no version to cache under: it is encoded as it streams, as nginx does every time.
//!
//! When the inner response carries [`Siblings`](crate::siblings::Siblings) in its
//! extensions (gatehouse's static files do, for `file.br`, `file.zst`, `file.gz` beside a
//! file and not older than it), the sibling's bytes are sent instead of encoding.
//!
//! # Example
//!
//! ```
//! use axum::{routing::get, Router};
//! use gatehouse_layers::precompress::{Encoding, Levels, PrecompressLayer};
//!
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(
//!         PrecompressLayer::new()
//!             .encodings([Encoding::Zstd, Encoding::Gzip])
//!             .levels(Levels { gzip: 6, br: 5, zstd: 3 })
//!             .max_cache_bytes(16 << 20),
//!     );
//! # let _ = app;
//! ```

mod body;
mod cache;
mod encode;
mod future;
mod layer;
mod negotiate;
mod predicate;
mod service;

pub use body::PrecompressBody;
pub use cache::VariantCache;
pub use encode::Levels;
pub use future::ResponseFuture;
pub use layer::{PrecompressLayer, DEFAULT_CACHE_BYTES, DEFAULT_MAX_SIZE};
pub use negotiate::{negotiate, Choice, Encoding, UnknownEncoding};
pub use predicate::{DefaultPredicate, Predicate, DEFAULT_TYPES};
pub use service::Precompress;
