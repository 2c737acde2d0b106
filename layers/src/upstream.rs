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
/// `$upstream_cache_status` words), when the request asked with [`CacheStatusWanted`].
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

/// Put in a request's extensions by a layer that will read the [`CacheStatus`] of its
/// response (the access log, when its format has `$cache_status`): without it a cache
/// below leaves the status out, and its hits allocate no extensions.
#[derive(Clone, Copy, Debug, Default)]
pub struct CacheStatusWanted;

/// Put in a request's extensions by a layer that will use the [`StoredVersion`] of a
/// response served from a cache below it (the compression layer, when it may compress):
/// without it the cache leaves the version out of its hits.
#[derive(Clone, Copy, Debug, Default)]
pub struct StoredVersionWanted;

type Removal = Box<dyn FnOnce() + Send>;

/// One stored version of a response, put in the extensions of a response a cache serves
/// from its store (when a request asked with [`StoredVersionWanted`]), or is filing into
/// it, by [`cache`](crate::cache). A layer above that keeps something made from the body
/// keys it by [`id`](Self::id) and drops it [`on_removal`](Self::on_removal): the
/// compression layer's variants of a cached response are made once and leave memory with
/// the entry, whether it is evicted, replaced, purged or invalidated. A 304 that confirms
/// the body keeps the version. Clones share the version.
#[derive(Clone)]
pub struct StoredVersion(Arc<VersionInner>);

struct VersionInner {
    id: u64,
    removed: AtomicBool,
    state: Mutex<VersionState>,
}

struct VersionState {
    /// Stored entries (or a copy on its way in) that are this version: a revalidated
    /// entry and the one it replaces are the same body.
    holders: usize,
    /// What runs on removal, each under a tag that registers it once.
    on_removal: Vec<(u64, Removal)>,
}

impl StoredVersion {
    /// A version no other has the id of, in this process, with one holder.
    #[cfg_attr(not(feature = "cache"), allow(dead_code))]
    pub(crate) fn new() -> Self {
        StoredVersion(Arc::new(VersionInner {
            id: crate::tally::next_id(),
            removed: AtomicBool::new(false),
            state: Mutex::new(VersionState {
                holders: 1,
                on_removal: Vec::new(),
            }),
        }))
    }

    pub fn id(&self) -> u64 {
        self.0.id
    }

    /// Whether the stored entry has left its store.
    pub fn is_removed(&self) -> bool {
        self.0.removed.load(Ordering::Acquire)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, VersionState> {
        self.0.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` once the entry leaves its store, or now if it has already left. A second
    /// `f` under the same `tag` (the same thing made again) is not kept: the first does it.
    pub fn on_removal(&self, tag: u64, f: impl FnOnce() + Send + 'static) {
        let mut g = self.state();
        // Read under the lock that `remove` takes: `f` is either queued before `remove`
        // drains the queue, or sees `removed` set and runs here.
        if self.is_removed() {
            drop(g);
            run(Box::new(f));
        } else if !g.on_removal.iter().any(|(t, _)| *t == tag) {
            g.on_removal.push((tag, Box::new(f)));
        }
    }

    /// One more stored entry is this version (a 304 confirmed its body).
    #[cfg_attr(not(feature = "cache"), allow(dead_code))]
    pub(crate) fn share(&self) -> StoredVersion {
        let mut g = self.state();
        // Once removed it stays removed: the new holder is not counted.
        if !self.is_removed() {
            g.holders += 1;
        }
        self.clone()
    }

    /// A holder has left the store; with the last, what was waiting runs, once.
    #[cfg_attr(not(feature = "cache"), allow(dead_code))]
    pub(crate) fn remove(&self) {
        let pending = {
            let mut g = self.state();
            g.holders = g.holders.saturating_sub(1);
            if g.holders > 0 || self.is_removed() {
                return;
            }
            self.0.removed.store(true, Ordering::Release);
            std::mem::take(&mut g.on_removal)
        };
        for (_, f) in pending {
            run(f);
        }
    }
}

/// A removal that panicked must not stop the others, nor the store's eviction listener
/// (moka turns a listener that panics off for good).
fn run(f: Removal) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
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
        let add = |n: usize| {
            let r = runs.clone();
            move || {
                r.fetch_add(n, Ordering::Relaxed);
            }
        };
        v.on_removal(1, add(1));
        v.on_removal(1, add(100)); // the same tag again: not kept
        v.on_removal(2, || panic!("a removal that fails"));
        v.on_removal(3, add(1000));
        // A 304 kept the body: two holders, and the first leaving removes nothing.
        let kept = v.share();
        v.remove();
        assert!(!kept.is_removed());
        assert_eq!(runs.load(Ordering::Relaxed), 0);
        kept.remove();
        assert!(v.is_removed());
        assert_eq!(runs.load(Ordering::Relaxed), 1001);
        v.remove();
        assert_eq!(runs.load(Ordering::Relaxed), 1001);
        v.on_removal(1, add(10));
        assert_eq!(runs.load(Ordering::Relaxed), 1011);
        // Shared after removal: still removed.
        v.share();
        assert!(v.is_removed());
    }
}
