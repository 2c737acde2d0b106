//! Stored responses, in memory, bounded by bytes and by entries.

use super::key::{self, Primary};
use super::policy::{self, CacheControl, Exchange};
use crate::per_thread::{unshared_fields, PerThread, MAX_COPIED_BODY};
use crate::upstream::StoredVersion;
use bytes::Bytes;
use http::header::{HeaderName, AGE};
use http::{HeaderMap, HeaderValue, StatusCode};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::watch;

/// Where an entry is filed: the request's primary key (method, scheme, host, target and
/// any configured fields) and a hash of the request fields its response's `Vary` names
/// (0 when it names none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Key {
    pub primary: Arc<str>,
    pub secondary: u64,
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        key::hash_text(state, &self.primary);
        state.write_u64(self.secondary);
    }
}

/// A [`Key`] by reference, for a lookup that allocates nothing (a hit). Hashes as the
/// `Key` it names does.
pub(crate) struct KeyRef<'a> {
    pub primary: &'a Primary<'a>,
    pub secondary: u64,
    /// The request's values of the fields the URL's `Vary` names ([`key::selecting`]): not
    /// hashed, but an entry under the key answers only if it was stored for the same.
    pub selecting: &'a [u8],
}

impl Hash for KeyRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.primary.hash(state);
        state.write_u64(self.secondary);
    }
}

/// A primary key in the index of `Vary` names, hashed as [`Key`] hashes it, so that a
/// hit's key in pieces finds it without being made into text.
#[derive(Clone, PartialEq, Eq)]
struct VaryKey(Arc<str>);

impl Hash for VaryKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        key::hash_text(state, &self.0);
    }
}

impl moka::Equivalent<VaryKey> for Primary<'_> {
    fn equivalent(&self, k: &VaryKey) -> bool {
        self.is(&k.0)
    }
}

impl moka::Equivalent<Key> for KeyRef<'_> {
    fn equivalent(&self, key: &Key) -> bool {
        self.secondary == key.secondary && self.primary.is(&key.primary)
    }
}

/// A stored response: its head, its whole body, and what its freshness was computed from.
#[derive(Debug)]
pub(crate) struct Entry {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub exchange: Exchange,
    pub cc: CacheControl,
    /// Its freshness lifetime (RFC 9111 §4.2.1), computed when it was stored or updated.
    pub lifetime: Duration,
    /// Its age when it was received (§4.2.3's corrected_initial_age): parsed once, not on
    /// every hit.
    initial_age: Duration,
    /// Marked removed when the entry leaves the store, which drops what layers above made
    /// from it (compressed variants), and threads' copies of it.
    pub version: StoredVersion,
    /// Whether its fields have a `Content-Length`, known without a lookup on each hit.
    pub has_length: bool,
    /// When it last answered from the shared map ([`crate::clock::coarse_ms`]): twice
    /// within [`HOT_MS`] and the thread copies it.
    shared_at: AtomicU64,
    /// Set when this entry leaves the store (a 304's update replaces it but keeps its
    /// version); shared with its thread copies, which are then not served.
    gone: Arc<AtomicBool>,
    /// The values of the fields its `Vary` names in the request it answered, as
    /// [`key::selecting`] writes them; empty without `Vary`. A request is answered from it
    /// only when its own are the same bytes (RFC 9111 §4.1), not merely the same hash.
    selecting: Arc<[u8]>,
}

impl Entry {
    pub(crate) fn new(
        status: StatusCode,
        mut headers: HeaderMap,
        body: Bytes,
        exchange: Exchange,
        heuristic_max: Duration,
        version: StoredVersion,
    ) -> Entry {
        // Every answer from the entry sets `Age` on a clone of these fields: stored, it is
        // replaced in place, where adding it grew the clone's vector, a reallocation per
        // hit (callgrind, cache-1k: 1.3k of 18.9k instructions a request). `0` is what
        // its absence means (RFC 9111 §4.2.3's age_value). One value only: a hit replaces
        // the first, and a second the upstream sent would go out beside it. The first is
        // the one the age is computed from (`policy::current_age`), now and after a
        // restart.
        let first = headers
            .get(AGE)
            .cloned()
            .unwrap_or(HeaderValue::from_static("0"));
        headers.insert(AGE, first);
        // The values in one buffer of the entry's own, not the upstream's read buffer.
        let mut headers = unshared_fields(&headers, headers.len());
        // Room for one more in the index, which a clone keeps: `insert` grows a map that
        // is full even when it replaces (http 1.5's `try_reserve_one`).
        headers.reserve(1);
        let cc = CacheControl::parse(&headers);
        let lifetime = policy::freshness_lifetime(
            status,
            &headers,
            &cc,
            exchange.response_time,
            heuristic_max,
        );
        let initial_age = policy::current_age(&headers, exchange, exchange.response_time);
        let has_length = headers.contains_key(http::header::CONTENT_LENGTH);
        Entry {
            has_length,
            status,
            headers,
            body,
            exchange,
            cc,
            lifetime,
            initial_age,
            version,
            shared_at: AtomicU64::new(0),
            gone: Arc::default(),
            selecting: Arc::from(&[][..]),
        }
    }

    /// The entry, for requests whose [`key::selecting`] bytes are `selecting`.
    pub(crate) fn with_selecting(mut self, selecting: Arc<[u8]>) -> Entry {
        self.selecting = selecting;
        self
    }

    /// Whether it may answer a request whose [`key::selecting`] bytes are `selecting`.
    pub(crate) fn selects(&self, selecting: &[u8]) -> bool {
        *self.selecting == *selecting
    }

    pub(crate) fn selecting(&self) -> &Arc<[u8]> {
        &self.selecting
    }

    /// A copy whose fields and body share no reference count with this one (its version
    /// is shared, and only read).
    fn private_copy(&self) -> Entry {
        let headers = unshared_fields(&self.headers, self.headers.len() + 1);
        Entry {
            status: self.status,
            headers,
            body: Bytes::copy_from_slice(&self.body),
            exchange: self.exchange,
            cc: self.cc.clone(),
            lifetime: self.lifetime,
            initial_age: self.initial_age,
            version: self.version.clone(),
            has_length: self.has_length,
            shared_at: AtomicU64::new(0),
            gone: self.gone.clone(),
            selecting: self.selecting.clone(),
        }
    }

    pub(crate) fn age(&self, now: SystemTime) -> Duration {
        let resident = now
            .duration_since(self.exchange.response_time)
            .unwrap_or(Duration::ZERO);
        self.initial_age.saturating_add(resident)
    }

    /// RFC 9111 §4.3.4: the stored head updated with a 304's fields, but for those that
    /// describe the body it does not carry (RFC 9110 §15.4.5 lists what a 304 sends) and
    /// `Set-Cookie`: a cookie the origin set on one client's revalidation is that client's.
    pub(crate) fn updated(
        &self,
        not_modified: &HeaderMap,
        exchange: Exchange,
        heuristic_max: Duration,
    ) -> Entry {
        let mut headers = self.headers.clone();
        let mut replaced: Vec<&HeaderName> = Vec::new();
        for (name, value) in not_modified {
            if name == http::header::CONTENT_LENGTH
                || name == http::header::CONTENT_ENCODING
                || name == http::header::CONTENT_RANGE
                || name == http::header::TRANSFER_ENCODING
                || name == http::header::SET_COOKIE
                // The 304 answers the stored ETag sent as If-None-Match (§4.3.1), so
                // that is the validator the origin confirmed: one that differs in the
                // 304 contradicts its own status (RFC 9110 §15.4.5), and the stored
                // `ETag` stays, as nginx, Fastly and browsers keep it. `Content-MD5`
                // is the body's.
                || name == http::header::ETAG
                || name.as_str() == "content-md5"
            {
                continue;
            }
            if !replaced.contains(&name) {
                headers.remove(name);
                replaced.push(name);
            }
            // Copied into the entry's own buffer by `Entry::new`.
            headers.append(name.clone(), value.clone());
        }
        Entry::new(
            self.status,
            headers,
            self.body.clone(),
            exchange,
            heuristic_max,
            // The same body: what was made from it stays.
            self.version.share(),
        )
        .with_selecting(self.selecting.clone())
    }

    /// Bytes it holds, roughly: body and fields, plus a fixed overhead.
    fn size(&self, key: &Key) -> u64 {
        let fields: usize = self
            .headers
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len() + FIELD_OVERHEAD)
            .sum();
        (self.body.len() + fields + key.primary.len() + self.selecting.len()) as u64
            + ENTRY_OVERHEAD
    }
}

/// Accounted per entry on top of its body and fields: the entry, its key, moka's node
/// and the field map's table. With 32 and 256 here, 50,000 entries of 1 KiB (cache-cold)
/// were weighed at half the resident memory they took (198 MiB); these come near it.
const ENTRY_OVERHEAD: u64 = 768;
/// Per field: the map's bucket and the value's own allocation.
const FIELD_OVERHEAD: usize = 96;

/// An entry served from the shared map twice within this many milliseconds is hot: each
/// thread then serves its own copy, whose counts no other core writes (as the open-file
/// cache's). A cold one (cache-cold's 50,000 keys) would only pay for the copy.
const HOT_MS: u64 = 10;

/// A thread's copy of a hot entry, with its key (the copies are filed by the key's hash),
/// and when this thread last told the shared map it was used.
struct ThreadCopy {
    primary: Arc<str>,
    secondary: u64,
    local: Arc<Entry>,
    touched_ms: std::cell::Cell<u64>,
}

/// Which request fields the responses under a primary key vary on, and the secondary
/// keys stored under it, so that an invalidation or purge reaches every variant.
#[derive(Debug, Default)]
pub(crate) struct Variants {
    pub names: Arc<[HeaderName]>,
    secondaries: Vec<u64>,
}

/// The most variants one primary key may have stored.
const MAX_VARIANTS: usize = 256;

/// Counts for the metrics; each only grows.
#[derive(Debug, Default)]
pub struct Stats {
    /// Per thread slot: a hit writes no line another core's hits write.
    pub hits: crate::tally::Tally,
    pub misses: AtomicU64,
    pub stale: AtomicU64,
    pub revalidated: AtomicU64,
    pub bypassed: AtomicU64,
    /// Requests that waited for another request's fetch of their key.
    pub coalesced: AtomicU64,
    /// Responses stored (new or replacing).
    pub stored: AtomicU64,
    /// Entries removed by an unsafe method's success or a purge.
    pub invalidated: AtomicU64,
    /// Entries kept in memory only because the disk tier's write queue was full.
    pub disk_skipped: AtomicU64,
    /// Background refreshes (RFC 5861 §3) answered by the upstream. Not requests: the
    /// request that set one off was counted stale.
    pub refreshed: AtomicU64,
    /// Entries read back from the disk tier (one read per key, however many wait for it).
    pub disk_reads: AtomicU64,
    /// Memory misses that went upstream without the disk tier's copy: its read outlasted
    /// the lock's timeout, or too many reads were under way (a disk that stopped
    /// answering).
    pub disk_reads_abandoned: AtomicU64,
}

/// A route's stored responses: moka's map (TinyLFU admission, LRU eviction, as the
/// compression cache's), weighed in bytes. Each entry weighs at least `max_bytes /
/// max_entries`, so that no more than `max_entries` fit. Cheap to clone; clones share it.
#[derive(Clone)]
pub struct ResponseStore {
    inner: Arc<Inner>,
}

struct Inner {
    map: moka::sync::Cache<Key, Arc<Entry>, ahash::RandomState>,
    /// Primary keys whose responses had a `Vary`. Touched only by those, and by unsafe
    /// methods and purges.
    /// Bounded (as many primaries as entries) and sharded, as the map is: random URLs whose
    /// responses vary can neither grow it without end nor serialise lookups on one lock.
    vary: moka::sync::Cache<VaryKey, Arc<Mutex<Variants>>, ahash::RandomState>,
    /// Set once any response had a `Vary`: until then a lookup skips the index.
    any_vary: std::sync::atomic::AtomicBool,
    /// URLs an unsafe method's success invalidated on a route whose keys hold fields or
    /// cookies ([`ResponseStore::invalidate_url`]).
    invalidated: std::sync::RwLock<Invalidated>,
    /// Set once a URL was: until then a lookup skips `invalidated`.
    any_invalidated: std::sync::atomic::AtomicBool,
    /// Fetches in progress, so that concurrent misses for one key wait for one fetch.
    flights: Mutex<HashMap<Key, watch::Receiver<()>, ahash::RandomState>>,
    max_bytes: u64,
    max_entries: u64,
    stats: Stats,
    id: u64,
    /// Every entry also on disk, read back on a memory miss and after a restart.
    disk: Option<Arc<super::disk::DiskTier>>,
    /// Bytes of responses being copied in, at most `max_bytes` in all.
    filling: AtomicU64,
    /// Each thread's copies of the hot entries it served, filed by their key's hash.
    copies: PerThread<u64, ThreadCopy, ahash::RandomState>,
    keys: ahash::RandomState,
}

/// When each URL was invalidated, for the entries of its keys with fields or cookies: one
/// received then or before is no longer answered from. Bounded: past [`MAX_INVALIDATED`]
/// URLs it is cleared, and every such entry received before then is taken as invalidated.
#[derive(Default)]
struct Invalidated {
    at: HashMap<Arc<str>, SystemTime, ahash::RandomState>,
    floor: Option<SystemTime>,
}

const MAX_INVALIDATED: usize = 10_000;

/// A fetch this request leads: other requests for the key wait until it is dropped
/// (the response stored, found not storable, or abandoned).
pub(crate) struct Flight {
    store: ResponseStore,
    key: Key,
    _done: watch::Sender<()>,
}

impl Drop for Flight {
    fn drop(&mut self) {
        let mut g = self
            .store
            .inner
            .flights
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // Only ours: after a timeout another request may lead a newer flight.
        if g.get(&self.key)
            .is_some_and(|rx| rx.same_channel(&self._done.subscribe()))
        {
            g.remove(&self.key);
        }
    }
}

/// When a removal's disk files are unlinked: before it returns (a purge, which answers
/// with them gone), or on the blocking pool (the event loop's removals).
#[derive(Clone, Copy)]
enum Unlink {
    Now,
    Later,
}

/// [`ResponseStore::join`]'s answer.
pub(crate) enum Joined {
    Lead(Flight),
    Wait(watch::Receiver<()>),
}

impl ResponseStore {
    /// A store of at most `max_bytes` (bodies, fields and a per-entry overhead) and at
    /// most `max_entries` responses.
    pub fn new(max_bytes: u64, max_entries: u64) -> ResponseStore {
        Self::build(max_bytes, max_entries, None)
    }

    /// As [`ResponseStore::new`], with a disk tier of at most `disk_max_bytes` under
    /// `dir` (created if missing); what a previous process left there is read back.
    pub fn with_disk(
        max_bytes: u64,
        max_entries: u64,
        dir: &std::path::Path,
        disk_max_bytes: u64,
    ) -> std::io::Result<ResponseStore> {
        let disk = super::disk::DiskTier::open(dir, disk_max_bytes)?;
        Ok(Self::build(max_bytes, max_entries, Some(Arc::new(disk))))
    }

    fn build(
        max_bytes: u64,
        max_entries: u64,
        disk: Option<Arc<super::disk::DiskTier>>,
    ) -> ResponseStore {
        static IDS: AtomicU64 = AtomicU64::new(1);
        let max_entries = max_entries.max(1);
        let floor = (max_bytes / max_entries).max(1);
        let map = moka::sync::Cache::builder()
            .max_capacity(max_bytes)
            .weigher(move |k: &Key, e: &Arc<Entry>| {
                e.size(k).max(floor).min(u32::MAX as u64) as u32
            })
            // Evicted, replaced, invalidated, or refused admission: gone either way.
            .eviction_listener(|_, e: Arc<Entry>, _| {
                e.gone.store(true, Ordering::Release);
                e.version.remove();
            })
            .build_with_hasher(ahash::RandomState::new());
        ResponseStore {
            inner: Arc::new(Inner {
                map,
                vary: moka::sync::Cache::builder()
                    .max_capacity(max_entries)
                    .build_with_hasher(ahash::RandomState::new()),
                any_vary: Default::default(),
                invalidated: Default::default(),
                any_invalidated: Default::default(),
                flights: Mutex::default(),
                max_bytes,
                max_entries,
                stats: Stats::default(),
                id: IDS.fetch_add(1, Ordering::Relaxed),
                disk,
                filling: AtomicU64::new(0),
                copies: PerThread::with_max_bytes(
                    usize::try_from(max_bytes / 8).unwrap_or(usize::MAX),
                ),
                keys: ahash::RandomState::new(),
            }),
        }
    }

    /// Takes `n` bytes of the budget for responses being copied in (the store's own size),
    /// if that much is left.
    pub(crate) fn reserve(&self, n: u64) -> bool {
        let max = self.inner.max_bytes;
        self.inner
            .filling
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |f| {
                f.checked_add(n).filter(|&t| t <= max)
            })
            .is_ok()
    }

    pub(crate) fn release(&self, n: u64) {
        self.inner.filling.fetch_sub(n, Ordering::Relaxed);
    }

    /// Bytes of responses being copied in now.
    pub fn filling_bytes(&self) -> u64 {
        self.inner.filling.load(Ordering::Relaxed)
    }

    pub fn stats(&self) -> &Stats {
        &self.inner.stats
    }

    /// Tells this store from its replacement after a reload (for the metrics' counters).
    pub fn identity(&self) -> u64 {
        self.inner.id
    }

    /// Bytes held, as weighed (after pending evictions are applied).
    pub fn weighted_size(&self) -> u64 {
        self.inner.map.run_pending_tasks();
        self.inner.map.weighted_size()
    }

    pub fn entry_count(&self) -> u64 {
        self.inner.map.run_pending_tasks();
        self.inner.map.entry_count()
    }

    pub fn max_bytes(&self) -> u64 {
        self.inner.max_bytes
    }

    pub fn max_entries(&self) -> u64 {
        self.inner.max_entries
    }

    /// The request fields responses under `primary` vary on, if any had a `Vary`.
    /// A hit makes no key text for it: the index is looked up by the key's pieces, and
    /// the disk tier's only once one of its files had a `Vary`.
    pub(crate) fn vary_names(&self, primary: &Primary<'_>) -> Option<Arc<[HeaderName]>> {
        let any_vary = self.inner.any_vary.load(Ordering::Relaxed);
        let disk = self.inner.disk.as_ref().filter(|d| d.varied());
        if !any_vary && disk.is_none() {
            return None;
        }
        if any_vary {
            if let Some(v) = self.inner.vary.get(primary) {
                return Some(v.lock().unwrap_or_else(|e| e.into_inner()).names.clone());
            }
        }
        let names = disk?.vary_names(&primary.text())?;
        (!names.is_empty()).then(|| names.into())
    }

    /// Whether the disk tier may hold `key` (it is read with [`ResponseStore::load`]).
    pub(crate) fn on_disk(&self, key: &Key) -> bool {
        self.inner.disk.as_ref().is_some_and(|d| d.has(key))
    }

    /// Reads `key`'s entry from disk, off the event loop, into memory; it is returned if it
    /// answers requests whose [`key::selecting`] bytes are `selecting`.
    /// A read that takes longer than `limit` is given up (`None`: the request goes
    /// upstream), as is one while too many are under way.
    pub(crate) async fn load(
        &self,
        key: &Key,
        selecting: &[u8],
        heuristic_max: Duration,
        limit: Duration,
    ) -> Option<Arc<Entry>> {
        let disk = self.inner.disk.clone()?;
        let abandoned = &self.inner.stats.disk_reads_abandoned;
        let Some(reading) = disk.begin_read() else {
            abandoned.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let k = key.clone();
        self.inner.stats.disk_reads.fetch_add(1, Ordering::Relaxed);
        let read = move || {
            let _reading = reading;
            disk.load(&k, heuristic_max)
        };
        let (vary, entry) = match tokio::runtime::Handle::try_current() {
            Ok(rt) => match tokio::time::timeout(limit, rt.spawn_blocking(read)).await {
                Ok(read) => read.ok()??,
                Err(_) => {
                    abandoned.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
            },
            Err(_) => read()?,
        };
        Some(self.insert_memory(key.clone(), vary, entry).0)
            .filter(|e| e.selects(selecting) && !self.outdated(&key.primary, e))
    }

    /// Disk bytes and files, when there is a disk tier.
    pub fn disk_usage(&self) -> Option<(u64, usize)> {
        self.inner.disk.as_ref().map(|d| (d.bytes(), d.files()))
    }

    /// `key`'s entry, if it answers requests whose [`key::selecting`] bytes are `selecting`.
    pub(crate) fn get(&self, key: &Key, selecting: &[u8]) -> Option<Arc<Entry>> {
        self.inner
            .map
            .get(key)
            .filter(|e| e.selects(selecting) && !self.outdated(&key.primary, e))
    }

    /// Every entry of `url` (a primary key without fields or cookies: `GET
    /// <scheme>://<host><target>`) whose key holds fields or cookies, received until now,
    /// is no longer answered from (RFC 9111 §4.4 invalidates the target URI, whatever
    /// else keys its responses). Not a walk of the store: the lookups of such keys check
    /// the time, and an invalidated entry is replaced by the next miss. The disk tier's
    /// files of such keys are removed too (a lookup in its index by URL).
    pub(crate) fn invalidate_url(&self, url: &str) {
        let now = SystemTime::now();
        let mut g = self
            .inner
            .invalidated
            .write()
            .unwrap_or_else(|e| e.into_inner());
        if g.at.len() >= MAX_INVALIDATED && !g.at.contains_key(url) {
            // The older half goes, under a floor as late as the latest of them: every
            // keyed entry requested before that counts as invalidated (a flush of the
            // keyed entries would be one POST away from any client otherwise).
            let mut times: Vec<SystemTime> = g.at.values().copied().collect();
            times.sort_unstable();
            let cut = times[times.len() / 2];
            g.at.retain(|_, t| *t > cut);
            g.floor = Some(g.floor.map_or(cut, |f| f.max(cut)));
        }
        // A clock stepped back never moves an invalidation earlier.
        let at = g.at.get(url).map_or(now, |&t| t.max(now));
        g.at.insert(url.into(), at);
        self.inner.any_invalidated.store(true, Ordering::Release);
        drop(g);
        // The record is this process's only: the files go, or a restart would bring them
        // back. Unlinked on the blocking pool: this runs on the event loop.
        if let Some(d) = &self.inner.disk {
            d.remove_keyed_later(&format!("{url}\n"));
        }
    }

    /// Whether `e`, filed under `primary`, was requested from the upstream before its URL
    /// was invalidated: a GET sent before a POST's success may carry what the POST changed
    /// or not, so its answer is not used either.
    fn outdated(&self, primary: &str, e: &Entry) -> bool {
        if !self.inner.any_invalidated.load(Ordering::Acquire) {
            return false;
        }
        // Only keys with fields or cookies, whose text goes on past a line feed.
        let Some(end) = primary.find('\n') else {
            return false;
        };
        let g = self
            .inner
            .invalidated
            .read()
            .unwrap_or_else(|e| e.into_inner());
        let asked = e.exchange.request_time;
        g.floor.is_some_and(|t| asked <= t)
            || g.at.get(&primary[..end]).is_some_and(|&t| asked <= t)
    }

    /// The entry for a request's key, if it was stored for the request's values of the
    /// fields its `Vary` names: this thread's copy of it when it is hot. An entry stored
    /// for other values under the same hash is not answered from (RFC 9111 §4.1): the
    /// request goes upstream, and its answer replaces it.
    pub(crate) fn get_ref(&self, key: &KeyRef<'_>) -> Option<Arc<Entry>> {
        let e = self.get_filed(key).filter(|e| e.selects(key.selecting))?;
        match key.primary {
            // A key in pieces has no fields or cookies.
            Primary::Pieces { .. } => Some(e),
            Primary::Text(t) => (!self.outdated(t, &e)).then_some(e),
        }
    }

    fn get_filed(&self, key: &KeyRef<'_>) -> Option<Arc<Entry>> {
        let hash = self.inner.keys.hash_one(key);
        {
            let mut mine = self.inner.copies.mine();
            if let Some(c) = mine.get(&hash) {
                if !c.local.gone.load(Ordering::Acquire)
                    && c.secondary == key.secondary
                    && key.primary.is(&c.primary)
                {
                    let now = crate::clock::coarse_ms();
                    if now.saturating_sub(c.touched_ms.get()) >= 1000 {
                        // Once a second, so that eviction still sees it used.
                        c.touched_ms.set(now);
                        let _ = self.inner.map.get(key);
                    }
                    return Some(c.local.clone());
                }
                mine.remove(&hash);
            }
        }
        let e = self.inner.map.get(key)?;
        let now = crate::clock::coarse_ms();
        let hot = now.saturating_sub(e.shared_at.swap(now, Ordering::Relaxed)) <= HOT_MS;
        if !hot || e.body.len() > MAX_COPIED_BODY {
            return Some(e);
        }
        let local = Arc::new(e.private_copy());
        let key = Key {
            primary: Arc::from(&*key.primary.text()),
            secondary: key.secondary,
        };
        let bytes = e.size(&key);
        let copy = ThreadCopy {
            primary: key.primary,
            secondary: key.secondary,
            local: local.clone(),
            touched_ms: std::cell::Cell::new(now),
        };
        self.inner
            .copies
            .mine()
            .insert(hash, copy, usize::try_from(bytes).unwrap_or(usize::MAX));
        Some(local)
    }

    /// Stores `entry` under `key`; `vary` is what its response's `Vary` names. With a disk
    /// tier, it is written there too, on the blocking pool.
    pub(crate) fn insert(&self, key: Key, vary: Vec<HeaderName>, entry: Entry) -> Arc<Entry> {
        if self.outdated(&key.primary, &entry) {
            // Requested before its URL was invalidated, and complete only now (a slow
            // body): stored, it would replace a newer entry, and on disk outlive the
            // invalidation, which a restart forgets.
            entry.version.remove();
            return Arc::new(entry);
        }
        let disk = self.inner.disk.clone();
        let disk_copy = disk.as_ref().map(|_| (key.clone(), vary.clone()));
        let (entry, stored) = self.insert_memory(key, vary, entry);
        if let (Some(disk), Some((key, vary)), true) = (disk, disk_copy, stored) {
            let Some(queued) = disk.queue(entry.body.len() as u64) else {
                // The key's older files go: read back after this entry left memory, they
                // would bring back what it replaced. Unlinked off the event loop, which
                // this runs on: the disk is behind, maybe hung.
                disk.remove_primary_later(&key.primary);
                self.inner
                    .stats
                    .disk_skipped
                    .fetch_add(1, Ordering::Relaxed);
                return entry;
            };
            let e = entry.clone();
            let ticket = disk.ticket();
            let map = self.inner.map.clone();
            let tier = disk.clone();
            disk.write_later(move || {
                tier.store_keeping(&key, &vary, &e, ticket, &|k| map.contains_key(k));
                drop(queued);
            });
        }
        entry
    }

    /// The entry, and whether it went in (a URL's variants are bounded).
    fn insert_memory(&self, key: Key, vary: Vec<HeaderName>, entry: Entry) -> (Arc<Entry>, bool) {
        if !vary.is_empty() || self.inner.any_vary.load(Ordering::Relaxed) {
            // Variants filed under fields the response no longer names are unreachable:
            // they go, so that no purge misses them (they would come back with the fields).
            let dropped = |old: &mut Variants| {
                for s in old.secondaries.drain(..) {
                    if s != key.secondary {
                        self.inner.map.invalidate(&Key {
                            primary: key.primary.clone(),
                            secondary: s,
                        });
                    }
                }
            };
            if vary.is_empty() {
                if let Some(v) = self.inner.vary.remove(&VaryKey(key.primary.clone())) {
                    dropped(&mut v.lock().unwrap_or_else(|e| e.into_inner()));
                }
            } else {
                self.inner.any_vary.store(true, Ordering::Relaxed);
                let v = self
                    .inner
                    .vary
                    .get_with(VaryKey(key.primary.clone()), Default::default);
                let mut v = v.lock().unwrap_or_else(|e| e.into_inner());
                if *v.names != *vary {
                    if v.names.is_empty() {
                        // The URL's entry from before it had a `Vary` is filed under 0,
                        // where no request looks now; it would be found again, head and
                        // all, once this record was evicted (found in review).
                        self.inner.map.invalidate(&Key {
                            primary: key.primary.clone(),
                            secondary: 0,
                        });
                    }
                    dropped(&mut v);
                    v.names = vary.into();
                }
                if !v.secondaries.contains(&key.secondary) {
                    if v.secondaries.len() >= MAX_VARIANTS {
                        // One URL's variants are bounded too (random Accept-Language
                        // values): the newest is not stored.
                        entry.version.remove();
                        return (Arc::new(entry), false);
                    }
                    v.secondaries.push(key.secondary);
                }
            }
        }
        self.inner.stats.stored.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(entry);
        self.inner.map.insert(key, entry.clone());
        (entry, true)
    }

    /// Removes the one entry under `key` (a revalidation made it unstorable), and the
    /// disk tier's copies of its URL: left there, the next miss in memory read the copy
    /// back and served what the origin had just made private (found in review).
    pub(crate) fn remove(&self, key: &Key) {
        self.inner.map.invalidate(key);
        if let Some(d) = &self.inner.disk {
            d.remove_primary_later(&key.primary);
        }
    }

    /// Removes every variant stored under `primary`; how many there were. The disk tier's
    /// files are unlinked before it returns.
    pub fn invalidate(&self, primary: &str) -> u64 {
        self.invalidate_in(primary, Unlink::Now)
    }

    /// As [`invalidate`](Self::invalidate), for the request path: the disk tier's files
    /// leave its index at once and are unlinked on the blocking pool, where a hung disk
    /// stops no connection.
    pub(crate) fn invalidate_later(&self, primary: &str) -> u64 {
        self.invalidate_in(primary, Unlink::Later)
    }

    fn invalidate_in(&self, primary: &str, unlink: Unlink) -> u64 {
        let primary: Arc<str> = primary.into();
        let mut secondaries = vec![0];
        if self.inner.any_vary.load(Ordering::Relaxed) {
            if let Some(v) = self.inner.vary.remove(&VaryKey(primary.clone())) {
                let v = v.lock().unwrap_or_else(|e| e.into_inner());
                secondaries.extend(v.secondaries.iter().copied());
            }
        }
        let mut n = 0;
        for secondary in secondaries {
            let key = Key {
                primary: primary.clone(),
                secondary,
            };
            if self.inner.map.remove(&key).is_some() {
                n += 1;
            }
        }
        if let Some(d) = &self.inner.disk {
            // Entries on disk only (not read back since a restart) count too.
            n = n.max(match unlink {
                Unlink::Now => d.remove_primary(&primary),
                Unlink::Later => d.remove_primary_later(&primary),
            });
        }
        self.inner.stats.invalidated.fetch_add(n, Ordering::Relaxed);
        n
    }

    /// Removes every variant stored under `primary`, as [`invalidate`](Self::invalidate)
    /// does, and also those the `Vary` index no longer names (it is bounded on its own,
    /// and a variant it lost would be served again once a later response rebuilt its
    /// record: found in review). A walk over the whole store: for the admin listener, not
    /// the request path.
    pub fn purge(&self, primary: &str) -> u64 {
        // Invalidated whatever was found, which records it on disk: a write of the key
        // under way, its entry not kept by memory, is listed nowhere, and is dropped when
        // it ends (found in review).
        self.purge_where(|p| p == primary, Some(primary))
    }

    /// Removes every entry whose primary key starts with `prefix`, as [`purge`](Self::purge)
    /// does; how many there were.
    pub fn purge_prefix(&self, prefix: &str) -> u64 {
        if let Some(d) = &self.inner.disk {
            // Before the listing: a write under way that it misses is dropped at its end.
            d.drop_queued();
        }
        self.purge_where(|p| p.starts_with(prefix), None)
    }

    /// Invalidates every primary key `matches` finds in memory or on disk, and `also`.
    fn purge_where(&self, matches: impl Fn(&str) -> bool, also: Option<&str>) -> u64 {
        let mut keys: Vec<Key> = Vec::new();
        let mut primaries: Vec<Arc<str>> = also.map(Arc::from).into_iter().collect();
        for (k, _) in self.inner.map.iter().filter(|(k, _)| matches(&k.primary)) {
            primaries.push(k.primary.clone());
            keys.push(Key::clone(&k));
        }
        if let Some(d) = &self.inner.disk {
            primaries.extend(d.primaries().into_iter().filter(|p| matches(p)));
        }
        let mut n = 0;
        let mut seen = std::collections::HashSet::new();
        for p in primaries {
            if seen.insert(p.clone()) {
                n += self.invalidate(&p);
            }
        }
        let mut left = 0;
        for k in keys {
            if self.inner.map.remove(&k).is_some() {
                left += 1;
            }
        }
        self.inner
            .stats
            .invalidated
            .fetch_add(left, Ordering::Relaxed);
        n + left
    }

    /// Every primary key held (for the admin listener).
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .inner
            .map
            .iter()
            .map(|(k, _)| k.primary.to_string())
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// Leads the fetch of `key`, or waits for the one in progress.
    pub(crate) fn join(&self, key: &Key) -> Joined {
        let mut g = self.inner.flights.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(rx) = g.get(key) {
            // A receiver whose sender is gone is a flight that ended between the lookup
            // and now: lead a new one.
            if rx.has_changed().is_ok() {
                return Joined::Wait(rx.clone());
            }
        }
        let (tx, rx) = watch::channel(());
        g.insert(key.clone(), rx);
        Joined::Lead(Flight {
            store: self.clone(),
            key: key.clone(),
            _done: tx,
        })
    }

    /// The flight in progress for `key`, if any, to wait on without leading one: for a
    /// request whose own answer could not serve the others (see `miss`).
    pub(crate) fn in_flight(&self, key: &Key) -> Option<watch::Receiver<()>> {
        let g = self.inner.flights.lock().unwrap_or_else(|e| e.into_inner());
        g.get(key).filter(|rx| rx.has_changed().is_ok()).cloned()
    }

    /// In-progress fetches (a test's view of the coalescing map, which must drain).
    pub fn flights_in_progress(&self) -> usize {
        self.inner
            .flights
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }
}

impl std::fmt::Debug for ResponseStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseStore")
            .field("entries", &self.inner.map.entry_count())
            .field("max_bytes", &self.inner.max_bytes)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(body: usize) -> Entry {
        let now = SystemTime::now();
        let mut h = HeaderMap::new();
        h.insert("cache-control", "max-age=60".parse().unwrap());
        Entry::new(
            StatusCode::OK,
            h,
            Bytes::from(vec![b'x'; body]),
            Exchange {
                request_time: now,
                response_time: now,
            },
            Duration::ZERO,
            StoredVersion::new(),
        )
    }

    /// A hit sets `Age` on a clone of the stored fields: whatever their number, the clone
    /// already holds `Age` and has room in its index, so that is no allocation.
    #[test]
    fn a_hits_age_replaces_a_stored_field_in_room_the_clone_keeps() {
        for n in 0..50 {
            let mut e = entry(1);
            let mut h = HeaderMap::new();
            for i in 0..n {
                let name = HeaderName::from_bytes(format!("x-f{i}").as_bytes()).unwrap();
                h.insert(name, HeaderValue::from_static("v"));
            }
            if n % 2 == 1 {
                h.insert(AGE, HeaderValue::from_static("7"));
            }
            e = Entry::new(e.status, h, e.body, e.exchange, Duration::ZERO, e.version);
            let mut c = e.headers.clone();
            assert!(c.contains_key(AGE), "{n} fields");
            assert!(
                c.len() < c.capacity(),
                "{n} fields: {} of {}",
                c.len(),
                c.capacity()
            );
            let before = c.capacity();
            c.insert(AGE, HeaderValue::from(3u64));
            assert_eq!(c.capacity(), before, "{n} fields");
            let copy = e.private_copy();
            assert!(
                copy.headers.len() < copy.headers.capacity(),
                "{n} fields' copy"
            );
        }
        // The upstream's own Age is kept, for the age it arrived with (§4.2.3).
        let mut h = HeaderMap::new();
        h.insert(AGE, HeaderValue::from_static("7"));
        let e = entry(1);
        let e = Entry::new(e.status, h, e.body, e.exchange, Duration::ZERO, e.version);
        assert_eq!(e.headers.get(AGE).unwrap(), "7");
        assert!(e.age(e.exchange.response_time) >= Duration::from_secs(7));
    }

    #[test]
    fn an_entry_keeps_one_age_the_first_it_was_sent() {
        let mut h = HeaderMap::new();
        h.append(AGE, HeaderValue::from_static("30"));
        h.append(AGE, HeaderValue::from_static("5"));
        let e = entry(1);
        let e = Entry::new(e.status, h, e.body, e.exchange, Duration::ZERO, e.version);
        let ages: Vec<_> = e.headers.get_all(AGE).iter().collect();
        assert_eq!(ages, ["30"]);
        assert!(e.age(e.exchange.response_time) >= Duration::from_secs(30));
    }

    fn key(p: &str) -> Key {
        Key {
            primary: p.into(),
            secondary: 0,
        }
    }

    #[test]
    fn a_hot_entry_is_copied_for_its_thread_and_goes_with_the_entry() {
        let s = ResponseStore::new(1 << 20, 1000);
        let k = key("GET http://h/hot");
        let p = Primary::Text(k.primary.to_string());
        let r = KeyRef {
            primary: &p,
            secondary: 0,
            selecting: &[],
        };
        s.insert(k.clone(), vec![], entry(100));
        let shared = s.get_ref(&r).unwrap();
        // Hot once asked twice within HOT_MS (a loaded machine may take a few tries).
        let copy = (0..1000)
            .map(|_| s.get_ref(&r).unwrap())
            .find(|e| !Arc::ptr_eq(e, &shared))
            .expect("a thread copy");
        assert_ne!(copy.body.as_ptr(), shared.body.as_ptr());
        assert_eq!(copy.body, shared.body);
        let (a, b) = (
            &copy.headers["cache-control"],
            &shared.headers["cache-control"],
        );
        assert_eq!(a, b);
        assert_ne!(a.as_bytes().as_ptr(), b.as_bytes().as_ptr());
        assert!(Arc::ptr_eq(&copy, &s.get_ref(&r).unwrap()));
        assert_eq!(s.stats().hits.get(), 0, "the store counts no hits itself");
        // Purged: the copy is not served either.
        assert_eq!(s.invalidate("GET http://h/hot"), 1);
        assert!(s.get_ref(&r).is_none());
        // A new entry under the key replaces the copy too.
        s.insert(k.clone(), vec![], entry(100));
        let fresh = s.get_ref(&r).unwrap();
        let second = (0..1000)
            .map(|_| s.get_ref(&r).unwrap())
            .find(|e| !Arc::ptr_eq(e, &fresh))
            .expect("a thread copy");
        assert!(Arc::ptr_eq(&second, &s.get_ref(&r).unwrap()));
        // A 304's update keeps the version, but the copy of the entry it replaced goes.
        let mut fields = HeaderMap::new();
        fields.insert("x-revalidated", "1".parse().unwrap());
        s.insert(
            k.clone(),
            vec![],
            second.updated(&fields, second.exchange, Duration::ZERO),
        );
        let now = s.get_ref(&r).unwrap();
        assert!(!Arc::ptr_eq(&now, &second));
        assert_eq!(now.headers["x-revalidated"], "1");
        assert_eq!(now.version.id(), second.version.id());
        s.insert(k.clone(), vec![], entry(7));
        assert_eq!(s.get_ref(&r).unwrap().body.len(), 7);
    }

    /// Two requests whose values of a `Vary` field differ but whose secondary keys are the
    /// same (a hash collision, made here by hand) never share an answer: from memory, from
    /// this thread's copy, after a 304's update, or read back from disk.
    #[tokio::test]
    async fn a_variant_answers_only_the_values_it_was_stored_for() {
        let dir = tempfile::tempdir().unwrap();
        let s = ResponseStore::with_disk(1 << 20, 1000, dir.path(), 1 << 20).unwrap();
        let vary = vec![HeaderName::from_static("accept-language")];
        let values = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert("accept-language", v.parse().unwrap());
            key::selecting(&h, &vary)
        };
        let (fr, de) = (values("fr"), values("de"));
        assert_ne!(fr, de);
        let k = Key {
            primary: "GET http://h/v".into(),
            secondary: 5,
        };
        let p = Primary::Text(k.primary.to_string());
        let asked = |selecting| KeyRef {
            primary: &p,
            secondary: 5,
            selecting,
        };
        s.insert(
            k.clone(),
            vary.clone(),
            entry(10).with_selecting(fr.clone().into()),
        );
        // Asked often enough to be copied for this thread.
        for _ in 0..1000 {
            assert_eq!(s.get_ref(&asked(&fr)).unwrap().body.len(), 10);
            assert!(s.get_ref(&asked(&de)).is_none());
        }
        assert!(s.get(&k, &fr).is_some());
        assert!(s.get(&k, &de).is_none());
        assert!(s.get(&k, &[]).is_none(), "no Vary is not any values");
        let stored = s.get(&k, &fr).unwrap();
        let updated = stored.updated(&HeaderMap::new(), stored.exchange, Duration::ZERO);
        s.insert(k.clone(), vary.clone(), updated);
        assert!(s.get_ref(&asked(&fr)).is_some());
        assert!(s.get_ref(&asked(&de)).is_none());
        // The other values' answer replaces it under the key.
        s.insert(
            k.clone(),
            vary.clone(),
            entry(20).with_selecting(de.clone().into()),
        );
        assert!(s.get_ref(&asked(&fr)).is_none());
        assert_eq!(s.get_ref(&asked(&de)).unwrap().body.len(), 20);
        // From disk, in the next process: the values came back with it. (Under the key
        // its values hash to: a file whose values and key disagree is taken as damaged.)
        let k = Key {
            primary: "GET http://h/w".into(),
            secondary: key::secondary_of(&de),
        };
        s.insert(
            k.clone(),
            vary.clone(),
            entry(30).with_selecting(de.clone().into()),
        );
        for _ in 0..200 {
            if s.disk_usage().is_some_and(|(_, files)| files == 2) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        drop(s);
        let s = ResponseStore::with_disk(1 << 20, 1000, dir.path(), 1 << 20).unwrap();
        assert_eq!(s.disk_usage().map(|(_, files)| files), Some(1));
        assert!(s
            .load(&k, &fr, Duration::ZERO, Duration::from_secs(5))
            .await
            .is_none());
        assert_eq!(
            s.load(&k, &de, Duration::ZERO, Duration::from_secs(5))
                .await
                .unwrap()
                .body
                .len(),
            30
        );
    }

    /// A disk that stops answering (here, a file turned into a FIFO nobody writes, whose
    /// open blocks) costs a request its read's limit, then it goes upstream; past
    /// [`super::super::disk`]'s 64 reads under way, a miss does not read at all, so the hung
    /// reads hold 64 blocking-pool threads, not every one.
    #[tokio::test]
    async fn a_disk_that_stops_answering_costs_a_miss_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        let s = ResponseStore::with_disk(1 << 20, 1000, dir.path(), 1 << 20).unwrap();
        let k = key("GET http://h/hung");
        s.insert(k.clone(), vec![], entry(10));
        for _ in 0..200 {
            if s.disk_usage().is_some_and(|(_, files)| files == 1) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        s.inner.map.invalidate(&k);
        assert!(s.get(&k, &[]).is_none() && s.on_disk(&k));
        let path = std::fs::read_dir(dir.path())
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        std::fs::remove_file(&path).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(made.success());
        let abandoned = || s.stats().disk_reads_abandoned.load(Ordering::Relaxed);
        let started = std::time::Instant::now();
        let limit = Duration::from_millis(200);
        assert!(s.load(&k, &[], Duration::ZERO, limit).await.is_none());
        assert!(started.elapsed() >= limit && started.elapsed() < Duration::from_secs(3));
        assert_eq!(abandoned(), 1);
        for _ in 1..64 {
            assert!(s
                .load(&k, &[], Duration::ZERO, Duration::from_millis(1))
                .await
                .is_none());
        }
        assert_eq!(abandoned(), 64);
        // All 64 reads hang: the next is not even tried.
        let started = std::time::Instant::now();
        let long = Duration::from_secs(30);
        assert!(s.load(&k, &[], Duration::ZERO, long).await.is_none());
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(abandoned(), 65);
        assert_eq!(s.stats().disk_reads.load(Ordering::Relaxed), 64);
        // The disk answers again, with bytes that are no cache file: the hung reads end,
        // the damaged file goes, and the threads and the places are given back. The FIFO
        // is held open for writing until then, so that a read reaching it late does not
        // block (opened read-write, which never blocks).
        let disk = s.inner.disk.clone().unwrap();
        let mut fifo = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut fifo, &[b'x'; 4096]).unwrap();
        for _ in 0..500 {
            if disk.reads_under_way() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(disk.reads_under_way(), 0);
        drop(fifo);
        assert!(!path.exists());
        assert!(!s.on_disk(&k));
    }

    /// RFC 9111 §4.4 on a route whose keys hold a field: an unsafe method's success
    /// invalidates the URL under every value of it, in memory (this thread's copies too)
    /// and on disk, and not a longer URL; a response received afterwards is served.
    #[tokio::test]
    async fn an_invalidated_url_takes_every_keyed_variant_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let s = ResponseStore::with_disk(1 << 20, 1000, dir.path(), 1 << 20).unwrap();
        let (one, two) = ("GET http://h/a\nx-tenant:1", "GET http://h/a\nx-tenant:2");
        let other = "GET http://h/ab\nx-tenant:1";
        for k in [one, two, other] {
            s.insert(key(k), vec![], entry(10));
        }
        for _ in 0..200 {
            if s.disk_usage().is_some_and(|(_, files)| files == 3) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let p = Primary::Text(one.into());
        let r = KeyRef {
            primary: &p,
            secondary: 0,
            selecting: &[],
        };
        for _ in 0..1000 {
            assert!(s.get_ref(&r).is_some());
        }
        let late = entry(30);
        s.invalidate_url("GET http://h/a");
        assert!(s.get_ref(&r).is_none(), "nor this thread's copy");
        assert!(s.get(&key(one), &[]).is_none());
        assert!(s.get(&key(two), &[]).is_none());
        assert!(s.get(&key(other), &[]).is_some());
        assert!(!s.on_disk(&key(one)) && !s.on_disk(&key(two)));
        assert!(s.on_disk(&key(other)));
        // Requested before the invalidation, complete only after it (a slow body): not
        // stored, in memory or on disk; requested after: served.
        tokio::time::sleep(Duration::from_millis(5)).await;
        s.insert(key(two), vec![], entry(20));
        assert_eq!(s.get(&key(two), &[]).unwrap().body.len(), 20);
        s.insert(key(two), vec![], late);
        assert_eq!(s.get(&key(two), &[]).unwrap().body.len(), 20);
        assert!(s.get(&key(one), &[]).is_none());
    }

    /// The record of invalidated URLs is bounded: past it, the older half goes under a
    /// floor, which still hides every entry they hid; the newer half stays exact.
    #[test]
    fn the_invalidated_urls_are_bounded_without_forgetting_one() {
        let s = ResponseStore::new(1 << 20, 1000);
        let before = entry(1);
        std::thread::sleep(Duration::from_millis(2));
        for i in 0..=MAX_INVALIDATED {
            s.invalidate_url(&format!("GET http://h/{i}"));
        }
        let g = s.inner.invalidated.read().unwrap();
        assert!(g.at.len() <= MAX_INVALIDATED / 2 + 1, "{}", g.at.len());
        drop(g);
        for i in [0, MAX_INVALIDATED / 2, MAX_INVALIDATED] {
            let k = key(&format!("GET http://h/{i}\nx-tenant:1"));
            assert!(s.outdated(&k.primary, &before), "{i}");
        }
        std::thread::sleep(Duration::from_millis(2));
        let after = entry(1);
        assert!(!s.outdated("GET http://h/1\nx-tenant:1", &after));
        assert!(
            !s.outdated("GET http://h/1", &before),
            "a key without fields"
        );
    }

    #[test]
    fn a_304_updates_the_head_but_not_what_describes_the_body() {
        let mut stored = entry(10);
        for (n, v) in [
            ("etag", "\"a\""),
            ("content-md5", "Q2hlY2s="),
            ("x-a", "1"),
            ("content-length", "10"),
        ] {
            stored.headers.insert(n, v.parse().unwrap());
        }
        let mut not_modified = HeaderMap::new();
        for (n, v) in [
            ("etag", "\"b\""),
            ("content-md5", "b3RoZXI="),
            ("x-a", "2"),
            ("content-length", "0"),
            ("cache-control", "max-age=120"),
            ("set-cookie", "s=1"),
        ] {
            not_modified.insert(n, v.parse().unwrap());
        }
        let u = stored.updated(&not_modified, stored.exchange, Duration::ZERO);
        assert_eq!(u.headers["etag"], "\"a\"");
        assert_eq!(u.headers["content-md5"], "Q2hlY2s=");
        assert_eq!(u.headers["content-length"], "10");
        assert_eq!(u.headers["x-a"], "2");
        assert_eq!(u.headers["cache-control"], "max-age=120");
        assert!(!u.headers.contains_key("set-cookie"));
        assert_eq!(u.body.len(), 10);
        // The same body, the same version: what was made from it stays.
        assert_eq!(u.version.id(), stored.version.id());
    }

    #[test]
    fn the_store_stays_within_its_bytes_and_its_entries() {
        let s = ResponseStore::new(1 << 20, 100_000);
        for i in 0..2_000 {
            s.insert(key(&format!("GET http://h/{i}")), vec![], entry(4096));
        }
        assert!(s.weighted_size() <= 1 << 20, "{}", s.weighted_size());
        assert!(s.entry_count() > 100, "{}", s.entry_count());
        let s = ResponseStore::new(1 << 30, 50);
        for i in 0..2_000 {
            s.insert(key(&format!("GET http://h/{i}")), vec![], entry(10));
        }
        assert!(s.entry_count() <= 50, "{}", s.entry_count());
    }

    #[test]
    fn invalidation_and_purge_reach_every_variant() {
        let s = ResponseStore::new(1 << 20, 1000);
        let ae = HeaderName::from_static("accept-encoding");
        for sec in [1, 2, 3] {
            let k = Key {
                primary: "GET http://h/a".into(),
                secondary: sec,
            };
            s.insert(k, vec![ae.clone()], entry(10));
        }
        s.insert(key("GET http://h/ab"), vec![], entry(10));
        s.insert(key("GET http://h/b"), vec![], entry(10));
        let p = Primary::Text("GET http://h/a".into());
        assert_eq!(s.vary_names(&p).as_deref(), Some(&[ae.clone()][..]));
        // A hit's key in pieces finds the same names, and only under its own key.
        let pieces = |target| Primary::Pieces {
            prefix: "GET http://",
            host: b"h",
            target,
        };
        assert_eq!(s.vary_names(&pieces("/a")).as_deref(), Some(&[ae][..]));
        assert_eq!(s.vary_names(&pieces("/ab")), None);
        assert_eq!(s.vary_names(&pieces("/")), None);
        assert_eq!(s.invalidate("GET http://h/a"), 3);
        assert_eq!(s.invalidate("GET http://h/a"), 0);
        assert_eq!(s.purge_prefix("GET http://h/a"), 1);
        assert_eq!(s.keys(), vec!["GET http://h/b".to_string()]);
        // Variants the Vary index has lost (it is bounded on its own) are purged too.
        for sec in [4, 5] {
            let k = Key {
                primary: "GET http://h/v".into(),
                secondary: sec,
            };
            s.insert(k, vec![HeaderName::from_static("accept")], entry(10));
        }
        s.inner.vary.invalidate(&VaryKey("GET http://h/v".into()));
        assert_eq!(s.purge("GET http://h/v"), 2);
        for sec in [6, 7] {
            let k = Key {
                primary: "GET http://h/w/x".into(),
                secondary: sec,
            };
            s.insert(k, vec![HeaderName::from_static("accept")], entry(10));
        }
        s.inner.vary.invalidate(&VaryKey("GET http://h/w/x".into()));
        assert_eq!(s.purge_prefix("GET http://h/w/"), 2);
        assert_eq!(s.keys(), vec!["GET http://h/b".to_string()]);
    }

    #[test]
    fn one_flight_per_key_and_it_ends_when_dropped() {
        let s = ResponseStore::new(1 << 20, 1000);
        let k = key("GET http://h/");
        let Joined::Lead(lead) = s.join(&k) else {
            panic!("the first request leads");
        };
        let Joined::Wait(rx) = s.join(&k) else {
            panic!("the second waits");
        };
        assert_eq!(s.flights_in_progress(), 1);
        drop(lead);
        assert!(rx.has_changed().is_err(), "the waiter sees the flight end");
        assert_eq!(s.flights_in_progress(), 0);
        assert!(matches!(s.join(&k), Joined::Lead(_)));
    }
}
