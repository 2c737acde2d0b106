//! An open-file cache, like nginx's `open_file_cache`, as a tower middleware.
//!
//! For each GET or HEAD request, [`OpenFileCache`] resolves the request path under a root
//! (safely: see [`crate::path`]) and puts the answer, a [`Resolved`], into the request's
//! extensions for the inner Service to turn into a response. Per path it keeps what a hit
//! needs: the metadata, the `ETag`, `Last-Modified` and `Content-Type` values formatted once,
//! the body of small files, and an open descriptor for large ones.
//!
//! A hit costs one `fstat` of the file's open descriptor (strict mode, the default: an
//! edit, a replacement or a deletion is served at once; the path itself is stat'ed again
//! once a second, for a directory or symlink switched on the way) or nothing
//! (`strict = false`, trusting an entry for `valid`), and runs on the event loop.
//! A miss resolves on the blocking pool; concurrent misses for one path wait for a single
//! resolution. Not-found answers are cached under the same rule.
//!
//! # Example
//!
//! ```
//! use axum::{extract::Extension, routing::get, Router};
//! use gatehouse_layers::open_file_cache::{CacheOptions, FileCache, OpenFileCacheLayer, Resolved, Resolver};
//!
//! async fn show(Extension(found): Extension<Resolved>) -> String {
//!     match found {
//!         Resolved::File(f) => format!("{} bytes, etag {:?}", f.len, f.etag),
//!         other => format!("{other:?}"),
//!     }
//! }
//!
//! # fn main() -> std::io::Result<()> {
//! let dir = std::env::temp_dir();
//! let cache = FileCache::new(Resolver::new(&dir)?, CacheOptions::default());
//! let app: Router = Router::new()
//!     .fallback(get(show))
//!     .layer(OpenFileCacheLayer::new(cache));
//! # let _ = app;
//! # Ok(())
//! # }
//! ```

mod cache;
mod entry;
mod front;
mod future;
mod layer;
mod mime;
mod resolve;
mod service;

pub use cache::{CacheOptions, FileCache};
pub use entry::{FileEntry, Resolved};
pub use future::ResponseFuture;
pub use layer::OpenFileCacheLayer;
pub use mime::content_type;
pub use resolve::Resolver;
pub use service::OpenFileCache;
