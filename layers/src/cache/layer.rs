use super::key::KeyParts;
use super::service::Cache;
use super::store::ResponseStore;
use http::HeaderName;
use std::sync::Arc;
use std::time::Duration;

/// Default bytes of stored responses a route keeps in memory.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
/// Default number of stored responses a route keeps.
pub const DEFAULT_MAX_ENTRIES: u64 = 100_000;
/// Default size of the largest response stored; larger ones are passed on unstored.
pub const DEFAULT_MAX_OBJECT_BYTES: u64 = 8 << 20;

/// What a [`Cache`] is set to, shared by its clones.
#[derive(Debug)]
pub(crate) struct Settings {
    pub store: ResponseStore,
    pub parts: KeyParts,
    pub stale_while_revalidate: Duration,
    pub stale_if_error: Duration,
    pub heuristic_max: Duration,
    pub max_object_bytes: u64,
    pub lock: bool,
    pub lock_timeout: Duration,
    pub store_authorized: bool,
    pub store_set_cookie: bool,
    pub ignore_request_cache_control: bool,
    pub cache_status: bool,
}

/// Builds [`Cache`]: a shared HTTP cache (RFC 9111) in front of the Service it wraps.
#[derive(Clone, Debug)]
pub struct CacheLayer {
    settings: Settings,
}

impl Clone for Settings {
    fn clone(&self) -> Self {
        Settings {
            store: self.store.clone(),
            parts: self.parts.clone(),
            ..*self
        }
    }
}

impl Default for CacheLayer {
    fn default() -> Self {
        CacheLayer::new()
    }
}

impl CacheLayer {
    /// A cache of [`DEFAULT_MAX_BYTES`] and [`DEFAULT_MAX_ENTRIES`], with coalescing on
    /// (5 s), heuristic freshness up to an hour, no stale windows beyond what responses
    /// give themselves, and no `Cache-Status` field.
    pub fn new() -> CacheLayer {
        CacheLayer {
            settings: Settings {
                store: ResponseStore::new(DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES),
                parts: KeyParts::default(),
                stale_while_revalidate: Duration::ZERO,
                stale_if_error: Duration::ZERO,
                heuristic_max: Duration::from_secs(3600),
                max_object_bytes: DEFAULT_MAX_OBJECT_BYTES,
                lock: true,
                lock_timeout: Duration::from_secs(5),
                store_authorized: false,
                store_set_cookie: false,
                ignore_request_cache_control: false,
                cache_status: false,
            },
        }
    }

    /// The store to keep responses in: a new one of this size, or one shared with another
    /// layer (see [`CacheLayer::store`]).
    pub fn with_store(mut self, store: ResponseStore) -> Self {
        self.settings.store = store;
        self
    }

    /// A new store of at most `max_bytes` and `max_entries`.
    pub fn limits(self, max_bytes: u64, max_entries: u64) -> Self {
        self.with_store(ResponseStore::new(max_bytes, max_entries))
    }

    /// A new store of the current limits with a disk tier under `dir` of at most
    /// `max_bytes`: every stored response is written there too, read back on a memory miss,
    /// and what a previous process left is used (entries keep their original times).
    pub fn disk(self, dir: &std::path::Path, max_bytes: u64) -> std::io::Result<Self> {
        let store = ResponseStore::with_disk(
            self.settings.store.max_bytes(),
            self.settings.store.max_entries(),
            dir,
            max_bytes,
        )?;
        Ok(self.with_store(store))
    }

    /// The store, for purging and the metrics.
    pub fn store(&self) -> &ResponseStore {
        &self.settings.store
    }

    /// Request fields whose values go into the key, as if every response varied on them.
    pub fn key_headers(mut self, names: impl IntoIterator<Item = HeaderName>) -> Self {
        self.settings.parts.headers = names.into_iter().collect();
        self
    }

    /// Cookies whose values go into the key.
    pub fn key_cookies(mut self, names: impl IntoIterator<Item = String>) -> Self {
        self.settings.parts.cookies = names.into_iter().collect();
        self
    }

    /// How long past its lifetime a response without `stale-while-revalidate` of its own
    /// may be served while it is refreshed (RFC 5861 §3).
    pub fn stale_while_revalidate(mut self, d: Duration) -> Self {
        self.settings.stale_while_revalidate = d;
        self
    }

    /// How long past its lifetime a response without `stale-if-error` of its own may be
    /// served while the upstream fails (RFC 5861 §4).
    pub fn stale_if_error(mut self, d: Duration) -> Self {
        self.settings.stale_if_error = d;
        self
    }

    /// The longest heuristic freshness (RFC 9111 §4.2.2) given; zero turns it off.
    pub fn heuristic_max(mut self, d: Duration) -> Self {
        self.settings.heuristic_max = d;
        self
    }

    /// The largest body stored.
    pub fn max_object_bytes(mut self, n: u64) -> Self {
        self.settings.max_object_bytes = n;
        self
    }

    /// Whether requests for a key being fetched wait for that fetch (nginx's
    /// `proxy_cache_lock`), and for how long before they go upstream themselves.
    pub fn coalesce(mut self, on: bool, timeout: Duration) -> Self {
        self.settings.lock = on;
        self.settings.lock_timeout = timeout;
        self
    }

    /// Look up and store requests with `Authorization`, keyed by it. Off, they bypass
    /// the cache (RFC 9111 §3.5 lets a shared cache store only some of their responses,
    /// and a key without the credentials would hand one user's response to another).
    pub fn store_authorized(mut self, on: bool) -> Self {
        self.settings.store_authorized = on;
        self
    }

    /// Store responses that set cookies.
    pub fn store_set_cookie(mut self, on: bool) -> Self {
        self.settings.store_set_cookie = on;
        self
    }

    /// Ignore the request's `Cache-Control` (`no-cache`, `max-age=0`, `no-store`), as
    /// CDNs do, so that a client's reload does not reach the upstream.
    pub fn ignore_request_cache_control(mut self, on: bool) -> Self {
        self.settings.ignore_request_cache_control = on;
        self
    }

    /// Send a `Cache-Status` field (RFC 9211) saying what the cache did.
    pub fn cache_status_header(mut self, on: bool) -> Self {
        self.settings.cache_status = on;
        self
    }
}

impl<S> tower_layer::Layer<S> for CacheLayer {
    type Service = Cache<S>;

    fn layer(&self, inner: S) -> Cache<S> {
        let mut settings = self.settings.clone();
        // Whatever order the builder was called in: stored answers to authorised requests
        // are keyed by their credentials.
        let auth = http::header::AUTHORIZATION;
        if settings.store_authorized && !settings.parts.headers.contains(&auth) {
            settings.parts.headers.push(auth);
        }
        Cache {
            inner,
            settings: Arc::new(settings),
        }
    }
}
