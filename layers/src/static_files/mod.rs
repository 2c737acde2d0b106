//! The static-file Service, like tower-http's `ServeDir`: usable alone in any axum app, and
//! the one gatehouse's static routes mount. A request goes through these steps:
//!
//! 1. Method: GET and HEAD; anything else is 405 with `Allow`.
//! 2. Resolution: the [`Resolved`] that an [`OpenFileCacheLayer`] put in the extensions, or
//!    the Service's own cache ([`StaticFiles::with_cache`]), or, with neither, a
//!    resolution on the blocking pool.
//! 3. Preconditions, RFC 9110 §13.2.2: 304 or 412.
//! 4. Ranges, RFC 9110 §14: 206 (one range, or multipart/byteranges), or 416.
//! 5. The response: prepared header values cloned from the entry, and the body from memory
//!    (head and body in one write) or streamed from the file in bounded chunks.
//!
//! The body ([`StaticBody`]) is empty, in memory, or a [`FileBody`] reading the open file
//! in chunks of at most [`body::CHUNK`] bytes. A server that owns the socket can send
//! file extents with `sendfile(2)` instead: see [`sendfile`].
//!
//! # Example
//!
//! ```
//! use gatehouse_layers::open_file_cache::{CacheOptions, FileCache, Resolver};
//! use gatehouse_layers::static_files::StaticFiles;
//!
//! # fn main() -> std::io::Result<()> {
//! let root = std::env::temp_dir();
//! let resolver = Resolver::new(&root)?;
//! let files = StaticFiles::new(resolver.clone())
//!     .with_cache(FileCache::new(resolver, CacheOptions::default()))
//!     .cache_control(http::HeaderValue::from_static("max-age=60"));
//! let app: axum::Router = axum::Router::new().nest_service("/static", files);
//! # let _ = app;
//! # Ok(())
//! # }
//! ```
//!
//! [`OpenFileCacheLayer`]: crate::open_file_cache::OpenFileCacheLayer

pub mod body;
pub mod sendfile;
pub use body::{FileBody, StaticBody};
pub mod conditional;
pub mod range;

use crate::open_file_cache::{FileCache, FileEntry, Resolved, Resolver};
use crate::respond::{add_slash, plain};
use crate::template::{Template, TemplateError, Vars};
use body::Segment;
use body::StaticBody as Body;
use bytes::Bytes;
use conditional::Precondition;
use http::header::{
    ACCEPT_ENCODING, ACCEPT_RANGES, ALLOW, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_RANGE,
    CONTENT_TYPE, ETAG, IF_MATCH, IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_RANGE, IF_UNMODIFIED_SINCE,
    LAST_MODIFIED, RANGE,
};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use range::Ranges;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// Serves files under a root. Cheap to clone. Needs a tokio runtime: files not yet in the
/// cache are opened, and large files read, on its blocking pool.
#[derive(Clone)]
pub struct StaticFiles {
    inner: Arc<Inner>,
}

struct Inner {
    resolver: Resolver,
    cache: Option<FileCache>,
    cache_control: Option<HeaderValue>,
    not_found_page: Option<String>,
    try_files: Arc<[Template]>,
}

impl StaticFiles {
    pub fn new(resolver: Resolver) -> Self {
        StaticFiles {
            inner: Arc::new(Inner {
                resolver,
                cache: None,
                cache_control: None,
                not_found_page: None,
                try_files: Arc::new([]),
            }),
        }
    }

    fn edit(mut self, f: impl FnOnce(&mut Inner)) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            f(inner);
        } else {
            let i = &*self.inner;
            let mut copy = Inner {
                resolver: i.resolver.clone(),
                cache: i.cache.clone(),
                cache_control: i.cache_control.clone(),
                not_found_page: i.not_found_page.clone(),
                try_files: i.try_files.clone(),
            };
            f(&mut copy);
            self.inner = Arc::new(copy);
        }
        self
    }

    /// An open-file cache to consult (when no layer in front already did) and to hold the
    /// 404 page.
    pub fn with_cache(self, cache: FileCache) -> Self {
        self.edit(|i| i.cache = Some(cache))
    }

    /// The open-file cache this service holds, if any.
    pub fn file_cache(&self) -> Option<&FileCache> {
        self.inner.cache.as_ref()
    }

    pub fn cache_control(self, value: HeaderValue) -> Self {
        self.edit(|i| i.cache_control = Some(value))
    }

    /// nginx's `try_files`: when the path names no file, these are tried in order and the
    /// first that is a file is served, with 200. Each is a path under the root in which
    /// `$path` (or `$uri`) is the request's path: `["$path.html", "$path/",
    /// "/index.html"]` serves a single-page app's index for any path that isn't a file.
    /// Each is resolved as a request's path is, under the same root and rules. The request
    /// path itself is tried first, always.
    pub fn try_files<I, S>(self, list: I) -> Result<Self, TemplateError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let list = list
            .into_iter()
            .map(|t| Template::parse_path(t.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(self.edit(|i| i.try_files = list.into()))
    }

    /// A file relative to the root, sent with 404 when nothing matches.
    pub fn not_found_page(self, rel: impl Into<String>) -> Self {
        let rel = rel.into();
        self.edit(|i| i.not_found_page = Some(rel))
    }
}

impl std::fmt::Debug for StaticFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let i = &*self.inner;
        f.debug_struct("StaticFiles")
            .field("root", &i.resolver.root())
            .field("cache", &i.cache.is_some())
            .field("cache_control", &i.cache_control)
            .field("not_found_page", &i.not_found_page)
            .finish()
    }
}

type BoxFuture = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

pin_project_lite::pin_project! {
    /// The response future of [`StaticFiles`]: ready at once for a cache hit, boxed for the
    /// rest (a load from disk, a 404 page).
    pub struct ResponseFuture {
        #[pin]
        kind: Kind,
    }
}

pin_project_lite::pin_project! {
    #[project = KindProj]
    enum Kind {
        Ready { response: Option<Response<Body>> },
        Load { #[pin] future: BoxFuture },
    }
}

impl ResponseFuture {
    fn ready(response: Response<Body>) -> Self {
        ResponseFuture {
            kind: Kind::Ready {
                response: Some(response),
            },
        }
    }

    fn load(future: BoxFuture) -> Self {
        ResponseFuture {
            kind: Kind::Load { future },
        }
    }
}

impl std::fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.kind {
            Kind::Ready { response: Some(_) } => "ready",
            Kind::Ready { response: None } => "done",
            Kind::Load { .. } => "loading",
        };
        f.debug_tuple("ResponseFuture").field(&state).finish()
    }
}

impl Future for ResponseFuture {
    type Output = Result<Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Ready { response } => match response.take() {
                Some(r) => Poll::Ready(Ok(r)),
                // Polled again after it finished: futures may panic here, this one answers.
                None => Poll::Ready(Ok(plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "polled after completion\n",
                ))),
            },
            KindProj::Load { future } => future.poll(cx),
        }
    }
}

impl<B: Send + 'static> Service<Request<B>> for StaticFiles {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        self.serve(req)
    }
}

impl StaticFiles {
    /// `Service::call` through a shared reference: a hit is answered without cloning the
    /// Service.
    pub fn serve<B: Send + 'static>(&self, req: Request<B>) -> ResponseFuture {
        let method = req.method();
        if method != Method::GET && method != Method::HEAD {
            let mut res = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
            res.headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
            return ResponseFuture::ready(res);
        }
        // The common case, a cache hit, is answered synchronously. Under an
        // OpenFileCacheLayer the answer is in the extensions; with a cache of its own the
        // Service asks it directly, which saves the extension's insert and drop.
        let (parts, _body) = req.into_parts();
        let found = match parts.extensions.get::<Resolved>() {
            Some(r) => Some(r.clone()),
            None => self
                .inner
                .cache
                .as_ref()
                .and_then(|c| c.lookup(parts.uri.path())),
        };
        match found {
            Some(Resolved::File(entry)) => ResponseFuture::ready(self.respond(&parts, &entry)),
            Some(other) => {
                let this = self.clone();
                ResponseFuture::load(Box::pin(
                    async move { Ok(this.answer(&parts, other).await) },
                ))
            }
            None => {
                let this = self.clone();
                ResponseFuture::load(Box::pin(async move {
                    let resolved = this.resolve_miss(parts.uri.path()).await;
                    Ok(this.answer(&parts, resolved).await)
                }))
            }
        }
    }
}

impl StaticFiles {
    /// A path not answered from memory: loaded through the cache (and kept there), or,
    /// without one, resolved on the blocking pool.
    async fn resolve_miss(&self, path: &str) -> Resolved {
        match &self.inner.cache {
            Some(cache) => cache.load(path).await,
            None => {
                let resolver = self.inner.resolver.clone();
                let path = path.to_owned();
                tokio::task::spawn_blocking(move || resolver.resolve(&path))
                    .await
                    .unwrap_or(Resolved::Forbidden)
            }
        }
    }

    async fn answer(&self, parts: &http::request::Parts, resolved: Resolved) -> Response<Body> {
        if matches!(resolved, Resolved::NotFound | Resolved::AddSlash) {
            match self.first_of_try_files(&parts.uri).await {
                Some(Resolved::File(entry)) => return self.respond(parts, &entry),
                Some(_) => return add_slash(&parts.uri),
                None => {}
            }
        }
        match resolved {
            Resolved::File(entry) => self.respond(parts, &entry),
            Resolved::AddSlash => add_slash(&parts.uri),
            Resolved::BadRequest => plain(StatusCode::BAD_REQUEST, "bad request\n"),
            Resolved::Forbidden => plain(StatusCode::FORBIDDEN, "forbidden\n"),
            Resolved::NotFound => self.not_found(parts).await,
        }
    }

    /// The first of the `try_files` that is a file, if any, as a `Resolved::File`; or
    /// `Resolved::AddSlash` when that is `$path/`, a directory's index, and the path was
    /// named without its slash (nginx redirects then, so that relative links resolve).
    async fn first_of_try_files(&self, uri: &http::Uri) -> Option<Resolved> {
        let vars = Vars::new(uri);
        for t in self.inner.try_files.iter() {
            let candidate = t.render(&vars, None);
            if candidate == uri.path() {
                continue;
            }
            let found = match self.inner.cache.as_ref().and_then(|c| c.lookup(&candidate)) {
                Some(r) => r,
                None => self.resolve_miss(&candidate).await,
            };
            if let Resolved::File(_) = found {
                let dir = candidate.len() == uri.path().len() + 1
                    && candidate.ends_with('/')
                    && candidate.starts_with(uri.path());
                return Some(if dir { Resolved::AddSlash } else { found });
            }
        }
        None
    }

    async fn not_found(&self, parts: &http::request::Parts) -> Response<Body> {
        let Some(page) = &self.inner.not_found_page else {
            return plain(StatusCode::NOT_FOUND, "not found\n");
        };
        let resolved = match &self.inner.cache {
            Some(cache) => cache.page(page).await,
            None => {
                let resolver = self.inner.resolver.clone();
                let page = page.clone();
                tokio::task::spawn_blocking(move || resolver.resolve_relative(&page))
                    .await
                    .unwrap_or(Resolved::NotFound)
            }
        };
        match resolved {
            Resolved::File(entry) => {
                let mut res =
                    self.full(parts.method == Method::HEAD, &entry, StatusCode::NOT_FOUND);
                // The page's validators describe the page file, not the missing resource:
                // with them a cache could revalidate and keep a 404 as if it were content.
                let h = res.headers_mut();
                h.remove(ACCEPT_RANGES);
                h.remove(ETAG);
                h.remove(LAST_MODIFIED);
                res
            }
            _ => plain(StatusCode::NOT_FOUND, "not found\n"),
        }
    }

    fn respond(&self, parts: &http::request::Parts, entry: &Arc<FileEntry>) -> Response<Body> {
        let head = parts.method == Method::HEAD;
        // Most requests carry none of the six headers below: one pass over the few headers
        // a request has costs less than six hash lookups.
        if !parts.headers.keys().any(|k| {
            k == IF_MATCH
                || k == IF_NONE_MATCH
                || k == IF_MODIFIED_SINCE
                || k == IF_UNMODIFIED_SINCE
                || k == IF_RANGE
                || k == RANGE
        }) {
            return self.ok(parts, head, entry);
        }
        match conditional::evaluate(&parts.headers, &entry.etag, entry.modified) {
            Precondition::Proceed => {}
            Precondition::NotModified => {
                return self.validators_only(entry, StatusCode::NOT_MODIFIED)
            }
            Precondition::Failed => {
                return self.validators_only(entry, StatusCode::PRECONDITION_FAILED)
            }
        }
        // §14.2: Range is defined for GET only.
        if parts.method == Method::GET {
            if let Some(range) = parts.headers.get(RANGE) {
                if conditional::range_allowed(&parts.headers, &entry.etag, &entry.last_modified) {
                    match range::parse(range.as_bytes(), entry.len) {
                        Ranges::Full => {}
                        Ranges::Satisfiable(ranges) => return self.partial(entry, ranges),
                        Ranges::Unsatisfiable => {
                            let mut res = plain(StatusCode::RANGE_NOT_SATISFIABLE, "");
                            let cr = format!("bytes */{}", entry.len);
                            if let Ok(v) = HeaderValue::from_str(&cr) {
                                res.headers_mut().insert(CONTENT_RANGE, v);
                            }
                            res.headers_mut()
                                .insert(ACCEPT_RANGES, HeaderValue::from_static("bytes"));
                            return res;
                        }
                    }
                }
            }
        }
        self.ok(parts, head, entry)
    }

    /// A 200, offering the file's precompressed siblings to a compression layer when the
    /// client accepts an encoding (an extension costs an allocation, so only then).
    fn ok(
        &self,
        parts: &http::request::Parts,
        head: bool,
        entry: &Arc<FileEntry>,
    ) -> Response<Body> {
        let mut res = self.full(head, entry, StatusCode::OK);
        if let Some(s) = &entry.siblings {
            if parts.headers.contains_key(ACCEPT_ENCODING) {
                res.extensions_mut().insert(s.clone());
            }
        }
        res
    }

    fn common_headers(&self, h: &mut HeaderMap, entry: &FileEntry, status: StatusCode) {
        h.insert(ETAG, entry.etag.clone());
        // A 304 or 206 varies as its 200 does (RFC 9110 §15.4.5).
        if let Some(v) = entry.headers.get(http::header::VARY) {
            h.insert(http::header::VARY, v.clone());
        }
        h.insert(LAST_MODIFIED, entry.last_modified.clone());
        self.add_cache_control(h, status);
    }

    /// `cache_control` goes on 2xx and 304 only (nginx's `add_header` without `always` is
    /// close: it also skips every 4xx and 5xx): a CDN told to keep a 404 or 412 for a day
    /// would serve it in place of the file.
    fn add_cache_control(&self, h: &mut HeaderMap, status: StatusCode) {
        if let Some(cc) = &self.inner.cache_control {
            if status.is_success() || status == StatusCode::NOT_MODIFIED {
                h.insert(CACHE_CONTROL, cc.clone());
            }
        }
    }

    fn full(&self, head: bool, entry: &Arc<FileEntry>, status: StatusCode) -> Response<Body> {
        let body = if head {
            Body::empty()
        } else if let Some(b) = &entry.body {
            Body::Full(Some(b.clone()))
        } else {
            let segs = VecDeque::from([Segment::File {
                offset: 0,
                len: entry.len,
            }]);
            Body::File(FileBody::new(entry.file.clone(), segs))
        };
        let mut res = Response::new(body);
        *res.status_mut() = status;
        *res.headers_mut() = entry.headers.clone();
        self.add_cache_control(res.headers_mut(), status);
        res
    }

    fn validators_only(&self, entry: &FileEntry, status: StatusCode) -> Response<Body> {
        let mut res = Response::new(Body::empty());
        *res.status_mut() = status;
        self.common_headers(res.headers_mut(), entry, status);

        if status == StatusCode::PRECONDITION_FAILED {
            res.headers_mut()
                .insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
        }
        res
    }

    fn partial(&self, entry: &Arc<FileEntry>, ranges: Vec<std::ops::Range<u64>>) -> Response<Body> {
        let extent = |r: &std::ops::Range<u64>| match &entry.body {
            Some(b) => Segment::Bytes(b.slice(r.start as usize..r.end as usize)),
            None => Segment::File {
                offset: r.start,
                len: r.end - r.start,
            },
        };
        let mut segs = VecDeque::new();
        let mut res;
        if let [r] = ranges.as_slice() {
            segs.push_back(extent(r));
            res = Response::new(Body::File(FileBody::new(entry.file.clone(), segs)));
            let h = res.headers_mut();
            h.insert(CONTENT_TYPE, entry.content_type.clone());
            h.insert(CONTENT_LENGTH, HeaderValue::from(r.end - r.start));
            let cr = format!("bytes {}-{}/{}", r.start, r.end - 1, entry.len);
            if let Ok(v) = HeaderValue::from_str(&cr) {
                h.insert(CONTENT_RANGE, v);
            }
        } else {
            // RFC 9110 §14.6: multipart/byteranges, each part with its own Content-Range.
            let boundary = boundary(entry);
            let ctype = entry
                .content_type
                .to_str()
                .unwrap_or("application/octet-stream");
            let mut total = 0u64;
            for r in &ranges {
                let part_head = format!(
                    "\r\n--{boundary}\r\nContent-Type: {ctype}\r\nContent-Range: bytes {}-{}/{}\r\n\r\n",
                    r.start,
                    r.end - 1,
                    entry.len
                );
                total += part_head.len() as u64 + (r.end - r.start);
                segs.push_back(Segment::Bytes(Bytes::from(part_head)));
                segs.push_back(extent(r));
            }
            let tail = format!("\r\n--{boundary}--\r\n");
            total += tail.len() as u64;
            segs.push_back(Segment::Bytes(Bytes::from(tail)));
            res = Response::new(Body::File(FileBody::new(entry.file.clone(), segs)));
            let h = res.headers_mut();
            let ct = format!("multipart/byteranges; boundary={boundary}");
            if let Ok(v) = HeaderValue::from_str(&ct) {
                h.insert(CONTENT_TYPE, v);
            }
            h.insert(CONTENT_LENGTH, HeaderValue::from(total));
        }
        *res.status_mut() = StatusCode::PARTIAL_CONTENT;
        let h = res.headers_mut();
        h.insert(ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        self.common_headers(h, entry, StatusCode::PARTIAL_CONTENT);
        res
    }
}

/// A boundary no one can plan for: the file's validator hashed with a key drawn once per
/// process, so that whoever wrote the file (and can read its ETag) can't have put the
/// boundary in its bytes to forge parts.
fn boundary(entry: &FileEntry) -> String {
    use std::hash::{BuildHasher, RandomState};
    static KEY: std::sync::OnceLock<RandomState> = std::sync::OnceLock::new();
    let h = KEY
        .get_or_init(RandomState::new)
        .hash_one(entry.etag.as_bytes());
    format!("gatehouse-{h:016x}")
}
