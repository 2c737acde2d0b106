//! Encoded variants, kept in memory by version.

use super::negotiate::Encoding;
use crate::per_thread::{unshared, MAX_COPIED_BODY};
use crate::upstream::StoredVersion;
use bytes::Bytes;
use http::HeaderValue;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::OnceCell;

/// A version of a resource in one coding: the resource (a hash of host, path and query),
/// the version a response cache below stored ([`StoredVersion`]'s id, 0 for none), the
/// inner response's strong `ETag` (which alone names the version when no cache stored it),
/// and the coding.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub resource: u64,
    pub version: u64,
    pub etag: Option<HeaderValue>,
    pub encoding: Encoding,
}

/// One encoded variant, with the header values a hit sends, formatted once.
#[derive(Debug)]
pub(crate) struct Variant {
    /// `None` when encoding didn't make the body smaller: it is then sent as it is,
    /// without trying again.
    pub body: Option<Bytes>,
    /// The variant's own `ETag`, when the original has a strong one.
    pub etag: Option<HeaderValue>,
    pub len: HeaderValue,
    /// Out of the store: threads' copies of it are not served again. Shared by the copies.
    gone: Arc<AtomicBool>,
}

impl Variant {
    pub(crate) fn new(body: Option<Bytes>, etag: Option<&HeaderValue>, enc: Encoding) -> Variant {
        Variant {
            len: HeaderValue::from(body.as_ref().map_or(0, |b| b.len())),
            etag: etag.map(|e| variant_etag(e, enc)),
            body,
            gone: Arc::default(),
        }
    }

    /// A copy that shares no reference count with this one (but for the `gone` flag,
    /// which it only reads).
    fn private_copy(&self) -> Variant {
        Variant {
            body: self.body.as_deref().map(Bytes::copy_from_slice),
            etag: self.etag.as_ref().map(unshared),
            len: unshared(&self.len),
            gone: self.gone.clone(),
        }
    }
}

/// A thread's copy of a variant ([`crate::per_thread`]), and when this thread last told
/// the store it was used.
struct ThreadCopy {
    local: Arc<Variant>,
    touched_ms: std::cell::Cell<u64>,
}

/// The variant's own strong validator: the original's with `-<coding>` inside the quotes,
/// so that each representation has a distinct `ETag` (RFC 9110 §8.8.3).
pub(crate) fn variant_etag(etag: &HeaderValue, enc: Encoding) -> HeaderValue {
    let b = etag.as_bytes();
    let mut v = Vec::with_capacity(b.len() + 6);
    match b.split_last() {
        Some((b'"', head)) => {
            v.extend_from_slice(head);
            v.push(b'-');
            v.extend_from_slice(enc.token().as_bytes());
            v.push(b'"');
        }
        _ => {
            v.extend_from_slice(b);
            v.push(b'-');
            v.extend_from_slice(enc.token().as_bytes());
        }
    }
    HeaderValue::from_bytes(&v).unwrap_or_else(|_| etag.clone())
}

/// The layer's store of encoded variants, bounded by bytes. Eviction is moka's: TinyLFU
/// admission over an LRU, so one scan of cold files doesn't flush the hot ones. Cheap to
/// clone; clones share the store.
#[derive(Clone)]
pub struct VariantCache {
    inner: Arc<Inner>,
}

type Flight = Arc<OnceCell<Option<Arc<Variant>>>>;

struct Inner {
    map: moka::sync::Cache<Key, Arc<Variant>, ahash::RandomState>,
    /// Encodings in progress, so that concurrent misses for one key wait for one encoding.
    /// Touched on misses only.
    inflight: Mutex<HashMap<Key, Flight>>,
    encodings: AtomicU64,
    sibling_reads: AtomicU64,
    max_bytes: u64,
    hits: crate::tally::Tally,
    misses: AtomicU64,
    evictions: Arc<AtomicU64>,
    id: u64,
    /// Each thread's copies of the variants it served: a hit in the store writes its
    /// shared read buffer and the variant's reference counts, lines every core shares.
    copies: crate::per_thread::PerThread<Key, ThreadCopy, ahash::RandomState>,
}

/// Takes a finished flight out of the map, and an abandoned one: when its last waiter is
/// dropped (the client went away) before the variant was made. Runs when a waiter leaves,
/// however it leaves, so the map never keeps a key nobody is making.
struct Leave<'a> {
    inner: &'a Inner,
    key: &'a Key,
    flight: &'a Flight,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        let mut g = self
            .inner
            .inflight
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let ours = g.get(self.key).is_some_and(|f| Arc::ptr_eq(f, self.flight));
        // Two references: the map's and this waiter's. Others are cloned under the lock.
        if ours && (self.flight.initialized() || Arc::strong_count(self.flight) <= 2) {
            g.remove(self.key);
        }
    }
}

/// Accounted per entry on top of its body, so that many tiny variants still count.
const ENTRY_OVERHEAD: u64 = 256;

impl VariantCache {
    /// A store holding at most `max_bytes` of encoded bodies (plus a small per-entry
    /// overhead).
    pub fn new(max_bytes: u64) -> Self {
        let evictions = Arc::new(AtomicU64::new(0));
        let counted = evictions.clone();
        let map = moka::sync::Cache::builder()
            .eviction_listener(move |_, v: Arc<Variant>, cause| {
                v.gone.store(true, Ordering::Relaxed);
                if cause == moka::notification::RemovalCause::Size {
                    counted.fetch_add(1, Ordering::Relaxed);
                }
            })
            .max_capacity(max_bytes)
            .weigher(|k: &Key, v: &Arc<Variant>| {
                let w = v.body.as_ref().map_or(0, |b| b.len() as u64)
                    + k.etag.as_ref().map_or(0, |e| e.len() as u64)
                    + ENTRY_OVERHEAD;
                u32::try_from(w).unwrap_or(u32::MAX)
            })
            // The key's resource is already a keyed SipHash; a faster hash for the map
            // (still randomly keyed, so not floodable) saves a few hundred instructions
            // per hit.
            .build_with_hasher(ahash::RandomState::new());
        VariantCache {
            inner: Arc::new(Inner {
                map,
                inflight: Mutex::new(HashMap::new()),
                encodings: AtomicU64::new(0),
                sibling_reads: AtomicU64::new(0),
                max_bytes,
                hits: Default::default(),
                misses: AtomicU64::new(0),
                evictions,
                id: crate::tally::next_id(),
                copies: crate::per_thread::PerThread::with_max_bytes(
                    usize::try_from(max_bytes / 8).unwrap_or(usize::MAX),
                ),
            }),
        }
    }

    pub(crate) fn get(&self, key: &Key) -> Option<Arc<Variant>> {
        self.inner.map.get(key)
    }

    /// [`get`](Self::get) for a request, counted as a hit when found: from this thread's
    /// copy when it has one, else from the store (and then copied for this thread).
    pub(crate) fn lookup(&self, key: &Key) -> Option<Arc<Variant>> {
        let v = self.copied(key).or_else(|| {
            let v = self.get(key)?;
            Some(self.copy(key, v))
        });
        if v.is_some() {
            self.inner.hits.add(1);
        }
        v
    }

    fn copied(&self, key: &Key) -> Option<Arc<Variant>> {
        let mut mine = self.inner.copies.mine();
        let c = mine.get(key)?;
        if !c.local.gone.load(Ordering::Relaxed) {
            let now = crate::clock::coarse_ms();
            if now.saturating_sub(c.touched_ms.get()) >= 1000 {
                // Once a second, so that the store's eviction still sees it used.
                c.touched_ms.set(now);
                let _ = self.inner.map.get(key);
            }
            return Some(c.local.clone());
        }
        mine.remove(key);
        None
    }

    fn copy(&self, key: &Key, v: Arc<Variant>) -> Arc<Variant> {
        let body = v.body.as_ref().map_or(0, Bytes::len);
        if body > MAX_COPIED_BODY {
            return v;
        }
        let local = Arc::new(v.private_copy());
        let c = ThreadCopy {
            local: local.clone(),
            touched_ms: std::cell::Cell::new(crate::clock::coarse_ms()),
        };
        let bytes = body + key.etag.as_ref().map_or(0, |e| e.len()) + ENTRY_OVERHEAD as usize;
        self.inner.copies.mine().insert(key.clone(), c, bytes);
        local
    }

    /// Tells this cache from every other made in this process (clones share it).
    pub fn identity(&self) -> u64 {
        self.inner.id
    }

    /// Requests answered with a variant from the store, since creation.
    pub fn hits(&self) -> u64 {
        self.inner.hits.get()
    }

    /// Requests that had to make (or wait for) a variant, since creation.
    pub fn misses(&self) -> u64 {
        self.inner.misses.load(Ordering::Relaxed)
    }

    /// Variants pushed out to stay within the budget, since creation.
    pub fn evictions(&self) -> u64 {
        self.inner.evictions.load(Ordering::Relaxed)
    }

    /// The variant for `key`, made by `make` if no other request is making it already.
    /// A caller that waits and finds the maker gone (its request was dropped) makes it
    /// itself. A variant made from a cache's `stored` version leaves with that version.
    pub(crate) async fn get_or_make<F>(
        &self,
        key: Key,
        stored: Option<&StoredVersion>,
        make: F,
    ) -> Option<Arc<Variant>>
    where
        F: Future<Output = Option<Arc<Variant>>>,
    {
        if let Some(v) = self.lookup(&key) {
            return Some(v);
        }
        self.inner.misses.fetch_add(1, Ordering::Relaxed);
        let flight = {
            let mut g = self
                .inner
                .inflight
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            g.entry(key.clone()).or_default().clone()
        };
        let _leave = Leave {
            inner: &self.inner,
            key: &key,
            flight: &flight,
        };
        flight
            .get_or_init(|| async {
                if let Some(v) = self.get(&key) {
                    return Some(v);
                }
                let v = make.await;
                if let Some(v) = &v {
                    self.inner.map.insert(key.clone(), v.clone());
                    if let Some(stored) = stored {
                        // Weak: a store outliving this cache (a reload) keeps nothing of it.
                        // Tagged by cache and coding: a variant made again after this cache
                        // evicted it adds no second callback to a long-lived entry.
                        let cache = Arc::downgrade(&self.inner);
                        let key = key.clone();
                        let tag = self.inner.id << 2 | key.encoding as u64;
                        stored.on_removal(tag, move || {
                            if let Some(c) = cache.upgrade() {
                                c.map.invalidate(&key);
                            }
                        });
                    }
                }
                v
            })
            .await
            .clone()
    }

    pub(crate) fn count_encoding(&self) {
        self.inner.encodings.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_sibling_read(&self) {
        self.inner.sibling_reads.fetch_add(1, Ordering::Relaxed);
    }

    /// Bodies encoded so far (each one a cache fill, or a streamed response).
    pub fn encodings(&self) -> u64 {
        self.inner.encodings.load(Ordering::Relaxed)
    }

    /// Precompressed sibling files read so far.
    pub fn sibling_reads(&self) -> u64 {
        self.inner.sibling_reads.load(Ordering::Relaxed)
    }

    /// Bytes held, as the budget counts them. Eviction runs in batches, so call
    /// [`VariantCache::sync`] first for an exact figure.
    pub fn weighted_size(&self) -> u64 {
        self.inner.map.weighted_size()
    }

    pub fn entry_count(&self) -> u64 {
        self.inner.map.entry_count()
    }

    /// Variants being made now (for tests: it must drain back to zero).
    pub fn in_flight(&self) -> usize {
        self.inner.inflight.lock().map_or(0, |g| g.len())
    }

    pub fn max_bytes(&self) -> u64 {
        self.inner.max_bytes
    }

    /// Runs pending evictions now.
    pub fn sync(&self) {
        self.inner.map.run_pending_tasks();
    }
}

impl std::fmt::Debug for VariantCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VariantCache")
            .field("entries", &self.entry_count())
            .field("bytes", &self.weighted_size())
            .field("max_bytes", &self.inner.max_bytes)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(resource: u64) -> Key {
        Key {
            resource,
            version: 0,
            etag: Some(HeaderValue::from_static("\"v1\"")),
            encoding: Encoding::Gzip,
        }
    }

    #[test]
    fn a_threads_copy_is_its_own_and_goes_with_its_variant() {
        let cache = VariantCache::new(1 << 20);
        let k = key(1);
        let body = Bytes::from_static(b"compressed bytes");
        let stored = Arc::new(Variant::new(Some(body), k.etag.as_ref(), k.encoding));
        cache.inner.map.insert(k.clone(), stored.clone());
        let first = cache.lookup(&k).expect("a hit");
        // Nothing of the copy is counted by another thread's requests.
        assert!(!Arc::ptr_eq(&first, &stored));
        let (a, b) = (first.body.as_ref(), stored.body.as_ref());
        assert_eq!(a, b);
        assert_ne!(a.map(|b| b.as_ptr()), b.map(|b| b.as_ptr()));
        assert_eq!(first.etag.as_ref().unwrap(), "\"v1-gzip\"");
        assert!(Arc::ptr_eq(&first, &cache.lookup(&k).expect("a hit")));
        assert_eq!(cache.hits(), 2);
        // Out of the store: the copy is not served either.
        cache.inner.map.invalidate(&k);
        cache.sync();
        assert!(cache.lookup(&key(1)).is_none());
        assert_eq!(cache.hits(), 2);
    }

    #[test]
    fn variant_etags_differ_per_coding() {
        let e = HeaderValue::from_static("\"abc\"");
        assert_eq!(variant_etag(&e, Encoding::Br), "\"abc-br\"");
        assert_eq!(variant_etag(&e, Encoding::Gzip), "\"abc-gzip\"");
        assert_eq!(variant_etag(&e, Encoding::Zstd), "\"abc-zstd\"");
    }
}
