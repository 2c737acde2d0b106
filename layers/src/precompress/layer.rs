use super::cache::VariantCache;
use super::encode::Levels;
use super::negotiate::Encoding;
use super::predicate::{DefaultPredicate, Predicate};
use super::service::Precompress;
use std::sync::Arc;
use tower_layer::Layer;

/// Applies [`Precompress`] to a Service. Clones share one [`VariantCache`].
#[derive(Clone)]
pub struct PrecompressLayer<P = DefaultPredicate> {
    pub(crate) settings: Arc<Settings<P>>,
}

pub(crate) struct Settings<P> {
    pub order: Vec<Encoding>,
    pub levels: Levels,
    pub predicate: P,
    pub cache: VariantCache,
    pub max_size: u64,
    pub key_by_path: bool,
    pub vary_from_inner: bool,
    pub head_as_get: bool,
}

impl<P: Clone> Clone for Settings<P> {
    fn clone(&self) -> Self {
        Settings {
            order: self.order.clone(),
            levels: self.levels,
            predicate: self.predicate.clone(),
            cache: self.cache.clone(),
            max_size: self.max_size,
            key_by_path: self.key_by_path,
            vary_from_inner: self.vary_from_inner,
            head_as_get: self.head_as_get,
        }
    }
}

/// The default budget of encoded bytes held in memory.
pub const DEFAULT_CACHE_BYTES: u64 = 64 * 1024 * 1024;
/// The default largest body encoded once and cached; larger ones are encoded as they
/// stream.
pub const DEFAULT_MAX_SIZE: u64 = 8 * 1024 * 1024;

impl Default for PrecompressLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl PrecompressLayer {
    /// br, zstd and gzip in that order of preference, default levels and predicate, and a
    /// cache of [`DEFAULT_CACHE_BYTES`].
    pub fn new() -> Self {
        PrecompressLayer {
            settings: Arc::new(Settings {
                order: vec![Encoding::Br, Encoding::Zstd, Encoding::Gzip],
                levels: Levels::default(),
                predicate: DefaultPredicate::default(),
                cache: VariantCache::new(DEFAULT_CACHE_BYTES),
                max_size: DEFAULT_MAX_SIZE,
                key_by_path: false,
                vary_from_inner: false,
                head_as_get: true,
            }),
        }
    }
}

impl<P: Predicate> PrecompressLayer<P> {
    fn edit(mut self, f: impl FnOnce(&mut Settings<P>)) -> Self {
        f(Arc::make_mut(&mut self.settings));
        self
    }

    /// The codings offered, in the server's order of preference, which decides between
    /// codings the client weights equally. An empty list turns encoding off.
    pub fn encodings(self, order: impl IntoIterator<Item = Encoding>) -> Self {
        let mut v: Vec<Encoding> = Vec::new();
        for e in order {
            if !v.contains(&e) {
                v.push(e);
            }
        }
        self.edit(|s| s.order = v)
    }

    pub fn levels(self, levels: Levels) -> Self {
        self.edit(|s| s.levels = levels.clamped())
    }

    /// A store to keep variants in, for instance one shared by several routes, or one
    /// a test inspects.
    pub fn cache(self, cache: VariantCache) -> Self {
        self.edit(|s| s.cache = cache)
    }

    /// A new store of `bytes`.
    pub fn max_cache_bytes(self, bytes: u64) -> Self {
        self.cache(VariantCache::new(bytes))
    }

    /// Bodies larger than this are encoded as they stream, not cached.
    pub fn max_size(self, bytes: u64) -> Self {
        self.edit(|s| s.max_size = bytes)
    }

    /// Key cached variants by the path alone, not host, path and query (the default): for
    /// a Service whose answer depends on nothing else, such as static files, so that
    /// `/app.js?v=2` or another host name doesn't compress the same version again.
    pub fn key_by_path(self, on: bool) -> Self {
        self.edit(|s| s.key_by_path = on)
    }

    /// The inner Service puts `Vary: Accept-Encoding` on the responses it sends as they
    /// are, whenever the layer might encode them for another client (gatehouse's static
    /// files do, decided once per file with [`Predicate::compressible_type`]). The layer
    /// then leaves identity responses untouched, which makes them cost next to nothing.
    pub fn vary_from_inner(self, on: bool) -> Self {
        self.edit(|s| s.vary_from_inner = on)
    }

    /// Ask the inner Service for a GET when the client sends HEAD (the default), so that a
    /// HEAD that negotiates a coding gets exactly the headers of the encoded GET even
    /// before the variant exists. Off, HEAD is passed on as HEAD: it gets a cached
    /// variant's headers, else the identity's. Turn it off over a Service where a GET
    /// costs much more than a HEAD (a proxy).
    pub fn head_as_get(self, on: bool) -> Self {
        self.edit(|s| s.head_as_get = on)
    }

    /// Which responses to compress.
    pub fn predicate<Q: Predicate>(self, predicate: Q) -> PrecompressLayer<Q> {
        let s = &*self.settings;
        PrecompressLayer {
            settings: Arc::new(Settings {
                order: s.order.clone(),
                levels: s.levels,
                predicate,
                cache: s.cache.clone(),
                max_size: s.max_size,
                key_by_path: s.key_by_path,
                vary_from_inner: s.vary_from_inner,
                head_as_get: s.head_as_get,
            }),
        }
    }

    /// The predicate deciding what is compressed.
    pub fn predicate_ref(&self) -> &P {
        &self.settings.predicate
    }

    /// The store this layer keeps variants in.
    pub fn variant_cache(&self) -> &VariantCache {
        &self.settings.cache
    }
}

impl<S, P: Predicate> Layer<S> for PrecompressLayer<P> {
    type Service = Precompress<S, P>;

    fn layer(&self, inner: S) -> Precompress<S, P> {
        Precompress {
            inner,
            settings: self.settings.clone(),
        }
    }
}
