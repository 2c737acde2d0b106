//! Each thread's own copies of recent hits.
//!
//! A hit in the shared cache writes cache lines that every core serving the same files
//! shares: the shard's read lock, the entry's S3-FIFO frequency, the reference counts of
//! the entry and of the answer, and those of the cached header values cloned into each
//! response. In an https-1k profile those writes, each waiting for the other core's copy of
//! its line, were about a tenth of gatehouse's user time. A thread's copy of an answer is
//! touched by that thread alone; the shared entry still decides whether it may be served
//! (its checks, and whether it is still in the cache), which only reads its lines.

use super::cache::Cached;
use super::entry::{FileEntry, Resolved};
use crate::tally::{slot, SLOTS};
use http::{HeaderMap, HeaderValue};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Per thread slot: past either bound the slot's copies are all dropped (a hot file is
/// copied again on its next hit).
const MAX_ENTRIES: usize = 1024;
const MAX_BYTES: usize = 8 << 20;
/// Bodies up to this size are copied; a larger one is shared, one count per request.
const MAX_COPIED_BODY: usize = 64 * 1024;

struct Entry {
    cached: Arc<Cached>,
    local: Resolved,
    bytes: usize,
}

#[derive(Default)]
struct Front {
    map: HashMap<Box<str>, Entry, quick_cache::DefaultHashBuilder>,
    bytes: usize,
}

/// One cache's copies, by thread slot ([`crate::tally`]'s): each slot's lock is taken by
/// its own thread, so it stays in that core's cache; the sweeper takes it to drop copies
/// of entries gone from the cache, closing their descriptors.
pub(super) struct Fronts {
    slots: [Slot; SLOTS],
}

#[repr(align(128))]
#[derive(Default)]
struct Slot(Mutex<Front>);

impl Default for Fronts {
    fn default() -> Self {
        Fronts {
            slots: std::array::from_fn(|_| Slot::default()),
        }
    }
}

impl Fronts {
    fn mine(&self) -> std::sync::MutexGuard<'_, Front> {
        self.slots[slot()]
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// This thread's copy of `key`'s answer, when it has one and `valid` (given the shared
    /// entry) says it may be served. An invalid copy is dropped.
    pub(super) fn lookup(
        &self,
        key: &str,
        valid: impl FnOnce(&Arc<Cached>) -> bool,
    ) -> Option<Resolved> {
        let mut f = self.mine();
        let e = f.map.get(key)?;
        if valid(&e.cached) {
            return Some(e.local.clone());
        }
        if let Some(e) = f.map.remove(key) {
            f.bytes -= e.bytes;
        }
        None
    }

    /// Keeps a copy of `cached`'s answer for this thread, and returns it.
    pub(super) fn insert(&self, key: &str, cached: &Arc<Cached>) -> Resolved {
        let (local, body) = private_copy(&cached.resolved);
        let bytes = body + key.len() + 256;
        let mut f = self.mine();
        if f.map.len() >= MAX_ENTRIES || f.bytes + bytes > MAX_BYTES {
            f.map.clear();
            f.bytes = 0;
        }
        let entry = Entry {
            cached: cached.clone(),
            local: local.clone(),
            bytes,
        };
        f.bytes += bytes;
        if let Some(old) = f.map.insert(key.into(), entry) {
            f.bytes -= old.bytes;
        }
        local
    }

    /// Drops every copy of an entry no longer in the cache.
    pub(super) fn prune(&self, gone: impl Fn(&Cached) -> bool) {
        for s in &self.slots {
            let mut f = s.0.lock().unwrap_or_else(|e| e.into_inner());
            let mut freed = 0;
            f.map.retain(|_, e| {
                let keep = !gone(&e.cached);
                if !keep {
                    freed += e.bytes;
                }
                keep
            });
            f.bytes -= freed;
        }
    }
}

/// A copy sharing no reference count with `r` (but for a large body and the descriptor,
/// counted once per request either way), and the body bytes it copied.
fn private_copy(r: &Resolved) -> (Resolved, usize) {
    let Resolved::File(e) = r else {
        return (r.clone(), 0);
    };
    let copy = |v: &HeaderValue| {
        HeaderValue::from_maybe_shared(bytes::Bytes::copy_from_slice(v.as_bytes()))
            .unwrap_or_else(|_| v.clone())
    };
    let mut headers = HeaderMap::with_capacity(e.headers.len());
    for (name, value) in &e.headers {
        headers.append(name.clone(), copy(value));
    }
    let (body, copied) = match &e.body {
        Some(b) if b.len() <= MAX_COPIED_BODY => (Some(bytes::Bytes::copy_from_slice(b)), b.len()),
        other => (other.clone(), 0),
    };
    let entry = FileEntry {
        len: e.len,
        modified: e.modified,
        etag: copy(&e.etag),
        last_modified: copy(&e.last_modified),
        content_type: copy(&e.content_type),
        body,
        file: e.file.clone(),
        path: e.path.clone(),
        headers,
        siblings: e.siblings.clone(),
    };
    (Resolved::File(Arc::new(entry)), copied)
}
