use super::entry::{Check, Resolved};
use super::resolve::Resolver;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// An entry served from the shared map twice within this many milliseconds (its load
/// counts as the first) is hot: each thread then serves its own copy of it
/// ([`super::front`]), whose reference counts no other thread writes. One asked for less
/// often than that gains nothing from a copy but its cost: an allocation and a copy of the
/// body and headers, and the memory.
const HOT_MS: u64 = 10;

/// A resolution of paths that name nothing, made on the calling thread ([`Resolver::resolve_absent`]).
type Absent = fn(&Resolver, &str) -> Option<(Resolved, Check)>;

/// Bounds and validity of a [`FileCache`].
#[derive(Debug, Clone)]
pub struct CacheOptions {
    /// Check each entry on every request (default): an `fstat` of its open descriptor, so
    /// an edit in place, a replacement or a deletion is served at once, and a `stat` of its
    /// path once a second (or per `valid`, if shorter). `false` trusts an entry for
    /// `valid`, like nginx's `open_file_cache_valid`.
    pub strict: bool,
    pub valid: Duration,
    pub max_entries: usize,
    /// Budget for in-memory bodies, in bytes.
    pub max_bytes: u64,
    /// An entry not requested for this long is dropped, closing its descriptor (so a
    /// deleted file's disk space is given back), like the `inactive` of nginx's
    /// `open_file_cache`. Zero keeps entries until they are evicted or found stale.
    pub inactive: Duration,
}

impl Default for CacheOptions {
    fn default() -> Self {
        CacheOptions {
            strict: true,
            valid: Duration::from_secs(1),
            max_entries: 10_000,
            max_bytes: 64 * 1024 * 1024,
            inactive: Duration::from_secs(60),
        }
    }
}

/// Strict mode stats a path at least this often, whatever `valid` says: `valid` is how long
/// relaxed mode trusts an entry, and a long one must not make strict mode miss a directory
/// or symlink switched on the way for as long.
const PATH_RECHECK_MAX: Duration = Duration::from_secs(1);

pub(crate) struct Cached {
    pub(crate) resolved: Resolved,
    check: Check,
    /// Milliseconds since the cache's epoch when the entry was last checked.
    checked_at: AtomicU64,
    /// ... and last served, to within `touch_ms` (so that a hot entry's cache line is
    /// written at most once a second, not on every request).
    used_at: AtomicU64,
    /// ... and last served from the shared map rather than a thread's copy ([`HOT_MS`]).
    shared_at: AtomicU64,
    /// Out of the cache (evicted, expired or found stale): threads' copies of it are not
    /// served again.
    gone: AtomicBool,
}

#[derive(Clone)]
struct Weigh {
    floor: u64,
}

impl quick_cache::Weighter<String, Arc<Cached>> for Weigh {
    fn weight(&self, key: &String, val: &Arc<Cached>) -> u64 {
        let body = match &val.resolved {
            Resolved::File(f) => f.body.as_ref().map_or(0, |b| b.len() as u64),
            _ => 0,
        };
        // The floor bounds the entry count (and so the open descriptors) by the byte budget.
        (body + key.len() as u64).max(self.floor)
    }
}

/// The open-file cache: request path → [`Resolved`], bounded by entries and bytes.
///
/// Evicts with quick_cache's S3-FIFO: lock-sharded, so a hit takes no global lock, and
/// scan-resistant, so a crawl over many cold files doesn't push out the hot ones.
#[derive(Clone)]
pub struct FileCache {
    inner: Arc<Inner>,
}

struct Inner {
    resolver: Resolver,
    opts: CacheOptions,
    map: quick_cache::sync::Cache<
        String,
        Arc<Cached>,
        Weigh,
        quick_cache::DefaultHashBuilder,
        CountEvictions,
    >,
    /// Strict mode: how long a path is trusted while its descriptor shows no change.
    path_recheck_ms: u64,
    /// How stale an entry's `used_at` may be: a second, or less for a short `inactive`.
    touch_ms: u64,
    loads: AtomicU64,
    hits: crate::tally::Tally,
    evictions: Arc<AtomicU64>,
    expired: AtomicU64,
    id: u64,
    /// Each thread's copies of its hits ([`super::front`]).
    fronts: super::front::Fronts,
}

/// Counts entries pushed out to make room (not those found stale and removed).
#[derive(Clone)]
struct CountEvictions(Arc<AtomicU64>);

impl quick_cache::Lifecycle<String, Arc<Cached>> for CountEvictions {
    type RequestState = ();

    fn begin_request(&self) {}

    fn on_evict(&self, _: &mut (), _: String, c: Arc<Cached>) {
        c.gone.store(true, Ordering::Relaxed);
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for FileCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileCache")
            .field("root", &self.inner.resolver.root())
            .field("entries", &self.inner.map.len())
            .field("weight", &self.inner.map.weight())
            .finish()
    }
}

impl FileCache {
    pub fn new(resolver: Resolver, opts: CacheOptions) -> Self {
        let max_entries = opts.max_entries.max(1);
        let budget = opts.max_bytes.max(1);
        let floor = (budget / max_entries as u64).max(1);
        // Each shard holds an equal part of the budget and refuses an item heavier than its
        // part, so shards must stay large enough for the largest inline body.
        let largest = (resolver.inline_max_bytes() + 4096).max(floor);
        let mut shards = 16usize;
        while shards > 1 && (budget / (shards as u64) < largest * 4 || max_entries / shards < 8) {
            shards /= 2;
        }
        let options = quick_cache::OptionsBuilder::new()
            .estimated_items_capacity(max_entries)
            .weight_capacity(budget)
            .shards(shards)
            .build()
            .expect("valid quick_cache options");
        let path_recheck_ms = opts.valid.min(PATH_RECHECK_MAX).as_millis() as u64;
        let touch_ms = (opts.inactive.as_millis() as u64 / 4).clamp(1, 1000);
        let evictions = Arc::new(AtomicU64::new(0));
        let map = quick_cache::sync::Cache::with_options(
            options,
            Weigh { floor },
            Default::default(),
            CountEvictions(evictions.clone()),
        );
        let cache = FileCache {
            inner: Arc::new(Inner {
                resolver,
                opts,
                map,
                path_recheck_ms,
                touch_ms,
                loads: AtomicU64::new(0),
                hits: Default::default(),
                evictions,
                expired: AtomicU64::new(0),
                id: crate::tally::next_id(),
                fronts: super::front::Fronts::new(budget),
            }),
        };
        // With `inactive` zero the sweeper still drops threads' copies of entries gone from
        // the cache, which would otherwise hold their descriptors.
        sweeper::register(&cache.inner);
        cache
    }

    pub fn resolver(&self) -> &Resolver {
        &self.inner.resolver
    }

    /// A hit, checked per the validity rule; `None` means the caller must [`load`](Self::load).
    /// Runs on the event loop: at most one `fstat`, or a `stat` of the path.
    pub fn lookup(&self, key: &str) -> Option<Resolved> {
        let r = self.check(key);
        if r.is_some() {
            self.inner.hits.add(1);
        }
        r
    }

    fn check(&self, key: &str) -> Option<Resolved> {
        if let Some(r) = self.inner.fronts.lookup(key, |c| self.fresh(key, c, true)) {
            return Some(r);
        }
        let cached = self.inner.map.get(key)?;
        if !self.fresh(key, &cached, false) {
            return None;
        }
        // Only an entry asked for again soon is worth a thread's copy. Copies of the cold
        // ones (10,000 files asked at random) filled the copies' budget and churned it: a
        // copy made, an older one dropped, on a third of the requests.
        let now = self.inner.now_ms();
        if now.saturating_sub(cached.shared_at.swap(now, Ordering::Relaxed)) <= HOT_MS {
            Some(self.inner.fronts.insert(key, &cached))
        } else {
            Some(cached.resolved.clone())
        }
    }

    /// Whether `cached` may answer now, per the validity rule; one that may not is taken
    /// out of the cache. `from_front`: the hit came from a thread's copy, so the cache has
    /// not seen it.
    fn fresh(&self, key: &str, cached: &Arc<Cached>, from_front: bool) -> bool {
        if cached.gone.load(Ordering::Relaxed) {
            return false;
        }
        let now = self.inner.now_ms();
        let fresh = if self.inner.opts.strict {
            match cached.check.quick() {
                Some(false) => false,
                // The descriptors are unchanged; their paths are checked again once a
                // second (or per `valid`, if shorter).
                Some(true) => self.trusted_or_rechecked(cached, now, self.inner.path_recheck_ms),
                None => cached.check.still_valid(),
            }
        } else {
            self.trusted_or_rechecked(cached, now, self.inner.opts.valid.as_millis() as u64)
        };
        if fresh {
            if now.saturating_sub(cached.used_at.load(Ordering::Relaxed)) >= self.inner.touch_ms {
                cached.used_at.store(now, Ordering::Relaxed);
                if from_front {
                    // Now and then, so that eviction still sees which entries are hot.
                    let _ = self.inner.map.get(key);
                }
            }
            return true;
        }
        let removed = self
            .inner
            .map
            .remove_if(key, |c| Arc::ptr_eq(c, cached))
            .is_some();
        if removed {
            cached.gone.store(true, Ordering::Relaxed);
        }
        false
    }

    /// Whether an entry checked within the last `window_ms` is trusted, or past that passes
    /// its full check again (which restarts the window).
    fn trusted_or_rechecked(&self, cached: &Cached, now: u64, window_ms: u64) -> bool {
        if now.saturating_sub(cached.checked_at.load(Ordering::Relaxed)) < window_ms {
            return true;
        }
        let valid = cached.check.still_valid();
        if valid {
            cached.checked_at.store(now, Ordering::Relaxed);
        }
        valid
    }

    /// Resolves `key` on the blocking pool and caches the result. Concurrent loads of one
    /// key wait for a single resolution.
    pub async fn load(&self, key: &str) -> Resolved {
        self.load_with(key, Some(Resolver::resolve_absent), |r, k| {
            r.resolve_checked(k)
        })
        .await
    }

    /// A file named relative to the root, such as a custom 404 page, through the cache.
    pub async fn page(&self, rel: &str) -> Resolved {
        // Request paths start with '/', so this key can't collide with one.
        let key = format!("page:{rel}");
        match self.lookup(&key) {
            Some(r) => r,
            None => {
                self.load_with(&key, None, |r, k| {
                    r.resolve_relative_checked(&k["page:".len()..])
                })
                .await
            }
        }
    }

    /// `absent`: an answer for a path that names nothing, found on this thread (one
    /// `stat`); anything else is resolved on the blocking pool, where opening and reading
    /// a file can't stall the runtime.
    async fn load_with(
        &self,
        key: &str,
        absent: Option<Absent>,
        resolve: fn(&Resolver, &str) -> (Resolved, Check),
    ) -> Resolved {
        let guard = match self.inner.map.get_value_or_guard_async(key).await {
            Ok(hit) => return hit.resolved.clone(),
            Err(guard) => guard,
        };
        let quick = absent.and_then(|f| f(&self.inner.resolver, key));
        let (resolved, check) = match quick {
            Some(pair) => {
                self.inner.loads.fetch_add(1, Ordering::Relaxed);
                pair
            }
            None => {
                let this = self.clone();
                let owned = key.to_owned();
                let loaded = tokio::task::spawn_blocking(move || {
                    this.inner.loads.fetch_add(1, Ordering::Relaxed);
                    resolve(&this.inner.resolver, &owned)
                })
                .await;
                match loaded {
                    Ok(pair) => pair,
                    Err(_) => return Resolved::Forbidden,
                }
            }
        };
        if matches!(resolved, Resolved::Forbidden) {
            // Permissions may be fixed at any moment: don't remember a refusal.
            return resolved;
        }
        let check = if self.inner.opts.strict {
            check
        } else {
            check.by_path()
        };
        let now = self.inner.now_ms();
        let cached = Arc::new(Cached {
            resolved: resolved.clone(),
            check,
            checked_at: AtomicU64::new(now),
            used_at: AtomicU64::new(now),
            shared_at: AtomicU64::new(now),
            gone: AtomicBool::new(false),
        });
        let _ = guard.insert(cached);
        resolved
    }

    /// [`lookup`](Self::lookup), then [`load`](Self::load) on a miss.
    pub async fn get(&self, key: &str) -> Resolved {
        match self.lookup(key) {
            Some(r) => r,
            None => self.load(key).await,
        }
    }

    /// Entries held now.
    pub fn len(&self) -> usize {
        self.inner.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.inner.map.is_empty()
    }

    /// Bytes of bodies (and per-entry floors) held now.
    pub fn weight(&self) -> u64 {
        self.inner.map.weight()
    }

    /// Resolutions performed (misses), since creation.
    pub fn loads(&self) -> u64 {
        self.inner.loads.load(Ordering::Relaxed)
    }

    /// Tells this cache from every other made in this process (clones share it).
    pub fn identity(&self) -> u64 {
        self.inner.id
    }

    /// Lookups answered from the cache, since creation.
    pub fn hits(&self) -> u64 {
        self.inner.hits.get()
    }

    /// Entries pushed out to make room, since creation.
    pub fn evictions(&self) -> u64 {
        self.inner.evictions.load(Ordering::Relaxed)
    }

    /// Entries dropped for going unrequested for `inactive`, since creation.
    pub fn expired(&self) -> u64 {
        self.inner.expired.load(Ordering::Relaxed)
    }
}

impl Inner {
    /// The clock of `checked_at` and `used_at`, which are only ever compared with it.
    fn now_ms(&self) -> u64 {
        crate::clock::coarse_ms()
    }

    /// Drops the entries not served for `inactive` (none when it is zero), then threads'
    /// copies of entries gone from the cache.
    fn sweep(&self) {
        let now = self.now_ms();
        let inactive = self.opts.inactive.as_millis() as u64;
        if inactive > 0 {
            self.map.retain(|_, c| {
                let keep = now.saturating_sub(c.used_at.load(Ordering::Relaxed)) < inactive;
                if !keep {
                    c.gone.store(true, Ordering::Relaxed);
                    self.expired.fetch_add(1, Ordering::Relaxed);
                }
                keep
            });
        }
        self.fronts.prune(|c| c.gone.load(Ordering::Relaxed));
    }
}

/// One thread for the process that drops every cache's inactive entries, so that they go
/// (and their descriptors close) with no request to notice, as nginx's timers do. It holds
/// the caches weakly: a cache dropped (after a reload) is forgotten at the next round.
mod sweeper {
    use super::*;

    /// A cache is swept every quarter of its `inactive`, within these bounds.
    const MIN_PERIOD: Duration = Duration::from_millis(250);
    const MAX_PERIOD: Duration = Duration::from_secs(15);

    struct Swept {
        cache: Weak<Inner>,
        period: Duration,
        next: Instant,
    }

    static CACHES: Mutex<Vec<Swept>> = Mutex::new(Vec::new());
    /// Wakes the thread when a cache registers, since it may be due before the others.
    static REGISTERED: Condvar = Condvar::new();
    static STARTED: OnceLock<()> = OnceLock::new();

    pub(super) fn register(inner: &Arc<Inner>) {
        let period = match inner.opts.inactive {
            Duration::ZERO => MAX_PERIOD,
            inactive => (inactive / 4).clamp(MIN_PERIOD, MAX_PERIOD),
        };
        CACHES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Swept {
                cache: Arc::downgrade(inner),
                period,
                next: Instant::now() + period,
            });
        REGISTERED.notify_one();
        STARTED.get_or_init(|| {
            // Without the thread entries still go when evicted or found stale; nothing else
            // depends on it.
            let _ = std::thread::Builder::new()
                .name("gatehouse-file-cache-sweeper".into())
                .stack_size(64 * 1024)
                .spawn(run);
        });
    }

    /// Sleeps until the first cache is due (an idle server wakes every 15 s by default,
    /// not every tick), sweeps the due ones, and forgets the dropped ones.
    fn run() {
        let mut caches = CACHES.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            caches.retain(|s| s.cache.strong_count() > 0);
            let now = Instant::now();
            match caches.iter().map(|s| s.next).min() {
                Some(first) if first <= now => {}
                first => {
                    let wait = first.map_or(MAX_PERIOD, |t| t - now);
                    caches = REGISTERED
                        .wait_timeout(caches, wait)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                    continue;
                }
            }
            let due: Vec<Arc<Inner>> = caches
                .iter_mut()
                .filter(|s| s.next <= now)
                .filter_map(|s| {
                    s.next = now + s.period;
                    s.cache.upgrade()
                })
                .collect();
            // Swept without the list locked: registering must not wait for a sweep.
            drop(caches);
            for cache in due {
                cache.sweep();
            }
            caches = CACHES.lock().unwrap_or_else(|e| e.into_inner());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::open_file_cache::FileEntry;

    fn entry(r: Option<Resolved>) -> Arc<FileEntry> {
        match r {
            Some(Resolved::File(f)) => f,
            other => panic!("{other:?}"),
        }
    }

    /// A cache over a root holding `/a.txt`, loaded; its shared entry and that entry's file.
    async fn loaded_a_txt() -> (tempfile::TempDir, FileCache, Arc<Cached>, Arc<FileEntry>) {
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::write(d.path().join("a.txt"), "hello").expect("write");
        let cache = FileCache::new(
            Resolver::new(d.path()).expect("root"),
            CacheOptions::default(),
        );
        cache.get("/a.txt").await;
        let shared = cache.inner.map.get("/a.txt").expect("cached");
        let file = entry(Some(shared.resolved.clone()));
        (d, cache, shared, file)
    }

    #[tokio::test]
    async fn a_threads_copy_is_its_own_and_goes_with_its_entry() {
        let (_d, cache, shared, shared_file) = loaded_a_txt().await;
        let first = entry(cache.lookup("/a.txt"));
        let shared_file = &shared_file;
        // Nothing of the copy is counted by another thread's requests.
        assert!(!Arc::ptr_eq(&first, shared_file));
        assert_ne!(
            first.etag.as_bytes().as_ptr(),
            shared_file.etag.as_bytes().as_ptr()
        );
        assert_eq!(first.body, shared_file.body);
        assert_eq!(first.headers, shared_file.headers);
        assert!(Arc::ptr_eq(&first, &entry(cache.lookup("/a.txt"))));
        // Out of the cache, as an eviction takes it: the copy is not served either.
        cache.inner.map.remove("/a.txt");
        shared.gone.store(true, Ordering::Relaxed);
        assert!(cache.lookup("/a.txt").is_none());
    }

    /// A thread copies only an entry asked for again soon after its last shared hit: a
    /// cold one is served from the shared entry, and leaves no copy behind.
    #[tokio::test]
    async fn only_an_entry_asked_for_again_soon_is_copied() {
        let (_d, cache, shared, shared_file) = loaded_a_txt().await;
        let shared_file = &shared_file;
        // Last asked for long ago: served as it is shared.
        shared.shared_at.store(0, Ordering::Relaxed);
        assert!(Arc::ptr_eq(&entry(cache.lookup("/a.txt")), shared_file));
        assert!(cache.inner.fronts.lookup("/a.txt", |_| true).is_none());
        // Asked for again within HOT_MS (set here rather than timed, so that a slow machine
        // can't make the two lookups further apart): this thread's own copy, served from
        // then on.
        shared
            .shared_at
            .store(cache.inner.now_ms(), Ordering::Relaxed);
        let copy = entry(cache.lookup("/a.txt"));
        assert!(!Arc::ptr_eq(&copy, shared_file));
        assert!(Arc::ptr_eq(&copy, &entry(cache.lookup("/a.txt"))));
    }

    /// A path that names nothing is answered without the blocking pool: with its one thread
    /// held, the miss still resolves (and is cached), and a file that exists waits for it.
    #[test]
    fn a_miss_for_nothing_needs_no_blocking_thread() {
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::write(d.path().join("a.txt"), "hello").expect("write");
        std::fs::write(d.path().join("f"), "a file, not a directory").expect("write");
        let rt = tokio::runtime::Builder::new_current_thread()
            .max_blocking_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let cache = FileCache::new(
                Resolver::new(d.path()).expect("root"),
                CacheOptions::default(),
            );
            let (release, held) = std::sync::mpsc::channel::<()>();
            let busy = tokio::task::spawn_blocking(move || held.recv());
            let soon = Duration::from_secs(2);
            for missing in ["/nothing-here", "/no/such/dir/x", "/f/under-a-file"] {
                let r = tokio::time::timeout(soon, cache.load(missing)).await;
                assert!(matches!(r, Ok(Resolved::NotFound)), "{missing}: {r:?}");
                assert!(
                    matches!(cache.lookup(missing), Some(Resolved::NotFound)),
                    "{missing}"
                );
            }
            assert_eq!(cache.loads(), 3);
            // What exists is opened on the blocking pool, so it waits while that is held.
            let mut file = std::pin::pin!(cache.load("/a.txt"));
            assert!(
                tokio::time::timeout(Duration::from_millis(200), file.as_mut())
                    .await
                    .is_err()
            );
            release.send(()).expect("release");
            let _ = busy.await;
            entry(Some(file.await));
        });
    }
}
