use super::{FileCache, OpenFileCache};
use tower_layer::Layer;

/// Puts a [`Resolved`](super::Resolved) for the request path into each GET and HEAD
/// request's extensions, from a shared [`FileCache`].
#[derive(Debug, Clone)]
pub struct OpenFileCacheLayer {
    cache: FileCache,
}

impl OpenFileCacheLayer {
    pub fn new(cache: FileCache) -> Self {
        OpenFileCacheLayer { cache }
    }

    pub fn cache(&self) -> &FileCache {
        &self.cache
    }
}

impl<S> Layer<S> for OpenFileCacheLayer {
    type Service = OpenFileCache<S>;

    fn layer(&self, inner: S) -> Self::Service {
        OpenFileCache::new(inner, self.cache.clone())
    }
}
