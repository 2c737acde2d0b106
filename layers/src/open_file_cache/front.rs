//! Each thread's own copies of hot entries ([`crate::per_thread`]; which are hot: `HOT_MS`
//! in `cache.rs`).
//!
//! A hit in the shared cache wrote the shard's read lock, the entry's S3-FIFO frequency,
//! the reference counts of the entry and of the answer, and those of the cached header
//! values cloned into each response: in an https-1k profile, about a tenth of gatehouse's
//! user time waited on those lines. The shared entry still decides whether a copy may be
//! served (its checks, and whether it is still in the cache), which only reads its lines.

use super::cache::Cached;
use super::entry::{FileEntry, Resolved};
use crate::per_thread::{unshared, unshared_fields, PerThread, MAX_COPIED_BODY};
use std::sync::Arc;

struct Entry {
    cached: Arc<Cached>,
    local: Resolved,
}

/// One cache's copies, by thread slot. The sweeper drops copies of entries gone from the
/// cache, closing their descriptors.
pub(super) struct Fronts(PerThread<Box<str>, Entry, quick_cache::DefaultHashBuilder>);

impl Fronts {
    /// Each slot's copies within an eighth of the cache's byte budget.
    pub(super) fn new(budget: u64) -> Fronts {
        Fronts(PerThread::with_max_bytes(
            usize::try_from(budget / 8).unwrap_or(usize::MAX),
        ))
    }

    /// This thread's copy of `key`'s answer, when it has one and `valid` (given the shared
    /// entry) says it may be served. An invalid copy is dropped.
    pub(super) fn lookup(
        &self,
        key: &str,
        valid: impl FnOnce(&Arc<Cached>) -> bool,
    ) -> Option<Resolved> {
        let mut mine = self.0.mine();
        let e = mine.get(key)?;
        if valid(&e.cached) {
            return Some(e.local.clone());
        }
        mine.remove(key);
        None
    }

    /// Keeps a copy of `cached`'s answer for this thread, and returns it.
    pub(super) fn insert(&self, key: &str, cached: &Arc<Cached>) -> Resolved {
        let local = private_copy(&cached.resolved);
        // A shared body counts too: the copy keeps it alive after an eviction.
        let body = match &cached.resolved {
            Resolved::File(e) => e.body.as_ref().map_or(0, |b| b.len()),
            _ => 0,
        };
        let entry = Entry {
            cached: cached.clone(),
            local: local.clone(),
        };
        self.0
            .mine()
            .insert(key.into(), entry, body + key.len() + 256);
        local
    }

    /// Drops every copy of an entry no longer in the cache.
    pub(super) fn prune(&self, gone: impl Fn(&Cached) -> bool) {
        self.0.prune(|e| gone(&e.cached));
    }
}

/// A copy sharing no reference count with `r` (but for a large body and the descriptor,
/// counted once per request either way).
fn private_copy(r: &Resolved) -> Resolved {
    let Resolved::File(e) = r else {
        return r.clone();
    };
    // Each response starts as a clone of these, with their index's size: room for seven
    // more fields (CORS's three, a request ID, header rules) spares a route with such
    // layers the map's regrowth and rehash on each response (callgrind showed the regrowth
    // gone from rules-1k; measured together with the shorter stack in router/stack.rs).
    let headers = unshared_fields(&e.headers, e.headers.len() + 7);
    let body = match &e.body {
        Some(b) if b.len() <= MAX_COPIED_BODY => Some(bytes::Bytes::copy_from_slice(b)),
        other => other.clone(),
    };
    let entry = FileEntry {
        len: e.len,
        modified: e.modified,
        etag: unshared(&e.etag),
        last_modified: unshared(&e.last_modified),
        content_type: unshared(&e.content_type),
        body,
        file: e.file.clone(),
        path: e.path.clone(),
        headers,
        siblings: e.siblings.clone(),
    };
    Resolved::File(Arc::new(entry))
}
