//! What a proxy says of the upstream that answered, for the layers above it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Which upstream answered a proxied request and how long it took to answer (from the
/// request sent to the response head), put in the response's extensions by a proxy.
#[derive(Clone, Debug)]
pub struct UpstreamInfo {
    pub addr: http::uri::Authority,
    pub time: Duration,
}

/// What a response cache did for a request, put in the response's extensions by
/// [`cache`](crate::cache) for the access log's `$cache_status` (nginx's
/// `$upstream_cache_status` words).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CacheStatus {
    /// Served from a fresh stored response.
    Hit,
    /// Fetched from the upstream (and stored, if it was storable).
    Miss,
    /// A stale stored response served: while it is refreshed, or because the upstream
    /// failed.
    Stale,
    /// A stale stored response the upstream confirmed with a 304.
    Revalidated,
    /// Not looked up: a method or request the cache does not answer.
    Bypass,
}

impl CacheStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheStatus::Hit => "HIT",
            CacheStatus::Miss => "MISS",
            CacheStatus::Stale => "STALE",
            CacheStatus::Revalidated => "REVALIDATED",
            CacheStatus::Bypass => "BYPASS",
        }
    }
}

/// Put in a request's extensions by a layer that will use the [`StoredVersion`] of a
/// response served from a cache below it (the compression layer, when it may compress):
/// without it the cache leaves the version out of its hits.
#[derive(Clone, Copy, Debug, Default)]
pub struct StoredVersionWanted;

type Removal = Box<dyn FnOnce() + Send>;

/// One stored version of a response, put in the extensions of a response a cache serves
/// from its store (when a request asked with [`StoredVersionWanted`]), or is filing into
/// it, by [`cache`](crate::cache). A layer above that keeps
/// something made from the body keys it by [`id`](Self::id) and drops it
/// [`on_removal`](Self::on_removal): the compression layer's variants of a cached response
/// are made once and leave memory with the entry, whether it is evicted, replaced, purged
/// or invalidated. Clones share the version.
#[derive(Clone)]
pub struct StoredVersion(Arc<VersionInner>);

struct VersionInner {
    id: u64,
    removed: AtomicBool,
    on_removal: Mutex<Vec<Removal>>,
}

impl StoredVersion {
    /// A version no other has the id of, in this process.
    pub fn new() -> Self {
        StoredVersion(Arc::new(VersionInner {
            id: crate::tally::next_id(),
            removed: AtomicBool::new(false),
            on_removal: Mutex::new(Vec::new()),
        }))
    }

    pub fn id(&self) -> u64 {
        self.0.id
    }

    /// Whether the stored entry has left its store.
    pub fn is_removed(&self) -> bool {
        self.0.removed.load(Ordering::Acquire)
    }

    /// Runs `f` once the entry leaves its store, or now if it has already left.
    pub fn on_removal(&self, f: impl FnOnce() + Send + 'static) {
        let mut pending = self.0.on_removal.lock().unwrap_or_else(|e| e.into_inner());
        // Read under the lock that `remove` takes: `f` is either queued before `remove`
        // drains the queue, or sees `removed` set and runs here.
        if self.is_removed() {
            drop(pending);
            f();
        } else {
            pending.push(Box::new(f));
        }
    }

    /// The entry has left its store: runs what was waiting for that, once.
    pub fn remove(&self) {
        let pending = {
            let mut g = self.0.on_removal.lock().unwrap_or_else(|e| e.into_inner());
            self.0.removed.store(true, Ordering::Release);
            std::mem::take(&mut *g)
        };
        for f in pending {
            f();
        }
    }
}

impl Default for StoredVersion {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for StoredVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredVersion")
            .field("id", &self.0.id)
            .field("removed", &self.is_removed())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::StoredVersion;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn what_waits_for_a_removal_runs_once_even_when_it_comes_late() {
        let runs = Arc::new(AtomicUsize::new(0));
        let v = StoredVersion::new();
        assert_ne!(v.id(), StoredVersion::new().id());
        let r = runs.clone();
        v.on_removal(move || {
            r.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(runs.load(Ordering::Relaxed), 0);
        v.clone().remove();
        v.remove();
        assert_eq!(runs.load(Ordering::Relaxed), 1);
        let r = runs.clone();
        v.on_removal(move || {
            r.fetch_add(10, Ordering::Relaxed);
        });
        assert_eq!(runs.load(Ordering::Relaxed), 11);
    }
}
