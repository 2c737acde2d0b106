//! A small map per thread slot ([`crate::tally`]'s), for the caches' copies of their hits.
//!
//! A hit in a shared cache writes lines every core serving the same entries shares (locks,
//! reference counts, eviction bookkeeping), and each such write waits for the other core's
//! copy of the line. A thread's own copy is touched by that thread alone: its slot's lock
//! stays in its core's cache. The owning cache still decides whether a copy may be served.

use crate::tally::{slot, SLOTS};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::{Mutex, MutexGuard};

/// Per slot: past either bound the slot's copies are all dropped (a hot entry is copied
/// again on its next hit). The byte bound may be set lower, to a share of a cache's budget.
const MAX_ENTRIES: usize = 1024;
const MAX_BYTES: usize = 8 << 20;

/// Bodies up to this size are copied per thread; larger ones are shared (their count is
/// touched once per request, against a body's many writes).
pub(crate) const MAX_COPIED_BODY: usize = 64 * 1024;

/// A header value with bytes of its own, so that cloning it touches no shared count.
#[cfg(any(feature = "open-file-cache", feature = "precompress"))]
pub(crate) fn unshared(v: &http::HeaderValue) -> http::HeaderValue {
    http::HeaderValue::from_maybe_shared(bytes::Bytes::copy_from_slice(v.as_bytes()))
        .unwrap_or_else(|_| v.clone())
}

/// `fields`, their values in one buffer of their own, in a map with room for `capacity`:
/// cloning them touches one count that nothing else shares, where a buffer a value shared
/// with others (the connection's read buffer), or one of its own per value, meant a count
/// or an allocation per value.
#[cfg(any(feature = "open-file-cache", feature = "cache"))]
pub(crate) fn unshared_fields(fields: &http::HeaderMap, capacity: usize) -> http::HeaderMap {
    let mut buf = bytes::BytesMut::with_capacity(fields.values().map(http::HeaderValue::len).sum());
    for v in fields.values() {
        buf.extend_from_slice(v.as_bytes());
    }
    let buf = buf.freeze();
    let mut out = http::HeaderMap::with_capacity(capacity);
    let mut at = 0;
    for (name, v) in fields {
        let end = at + v.len();
        let mut value =
            http::HeaderValue::from_maybe_shared(buf.slice(at..end)).unwrap_or_else(|_| v.clone());
        value.set_sensitive(v.is_sensitive());
        out.append(name.clone(), value);
        at = end;
    }
    out
}

/// `S` hashes the keys: the owning cache's own (fast, randomly keyed) hasher.
pub(crate) struct PerThread<K, V, S> {
    slots: [Slot<K, V, S>; SLOTS],
}

#[repr(align(128))]
struct Slot<K, V, S>(Mutex<Copies<K, V, S>>);

/// One slot's copies, each with the bytes it accounts for.
pub(crate) struct Copies<K, V, S> {
    map: HashMap<K, (V, usize), S>,
    bytes: usize,
    max_bytes: usize,
}

impl<K, V, S: Default> PerThread<K, V, S> {
    /// Slots holding at most `max_bytes` each (and at most 8 MiB).
    pub(crate) fn with_max_bytes(max_bytes: usize) -> Self {
        PerThread {
            slots: std::array::from_fn(|_| {
                Slot(Mutex::new(Copies {
                    map: HashMap::default(),
                    bytes: 0,
                    max_bytes: max_bytes.min(MAX_BYTES),
                }))
            }),
        }
    }
}

impl<K: Hash + Eq, V, S: BuildHasher> PerThread<K, V, S> {
    /// The calling thread's copies.
    pub(crate) fn mine(&self) -> MutexGuard<'_, Copies<K, V, S>> {
        self.slots[slot()]
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Drops, in every slot, the copies `drop` picks.
    #[cfg_attr(not(feature = "open-file-cache"), allow(dead_code))]
    pub(crate) fn prune(&self, drop: impl Fn(&V) -> bool) {
        for s in &self.slots {
            s.0.lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|v| !drop(v));
        }
    }
}

impl<K: Hash + Eq, V, S: BuildHasher> Copies<K, V, S> {
    pub(crate) fn get<Q>(&self, k: &Q) -> Option<&V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.get(k).map(|(v, _)| v)
    }

    pub(crate) fn remove<Q>(&mut self, k: &Q)
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if let Some((_, bytes)) = self.map.remove(k) {
            self.bytes -= bytes;
        }
    }

    /// Keeps `v`, accounted as `bytes`; a full slot is emptied first.
    pub(crate) fn insert(&mut self, k: K, v: V, bytes: usize) {
        if let Some((_, old)) = self.map.remove(&k) {
            self.bytes -= old;
        }
        if self.map.len() >= MAX_ENTRIES || self.bytes + bytes > self.max_bytes {
            self.map.clear();
            self.bytes = 0;
        }
        self.bytes += bytes;
        self.map.insert(k, (v, bytes));
    }

    // The open-file cache's sweeper prunes; the compression store has no sweeper.
    #[cfg_attr(not(feature = "open-file-cache"), allow(dead_code))]
    fn retain(&mut self, keep: impl Fn(&V) -> bool) {
        let mut freed = 0;
        self.map.retain(|_, (v, bytes)| {
            let k = keep(v);
            if !k {
                freed += *bytes;
            }
            k
        });
        self.bytes -= freed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Maps of every shape up to a few fields (repeated names, empty and sensitive values):
    /// the same fields in the same order, each value in one buffer the source doesn't use.
    #[cfg(any(feature = "open-file-cache", feature = "cache"))]
    #[test]
    fn unshared_fields_keep_every_field_in_order_in_one_buffer() {
        let names = ["a", "b", "set-cookie", "c"];
        let values = ["", "x", "two words", "\"etag\"", "0"];
        for shape in 0..4096u32 {
            let mut m = http::HeaderMap::new();
            let mut s = shape;
            for _ in 0..(shape % 6) {
                let (n, v) = (names[(s % 4) as usize], values[(s / 4 % 5) as usize]);
                let mut v = http::HeaderValue::from_static(v);
                v.set_sensitive(s / 20 % 2 == 1);
                m.append(n, v);
                s = s.wrapping_mul(2_654_435_761).rotate_left(7) ^ shape;
            }
            let u = unshared_fields(&m, 3);
            let before: Vec<_> = m.iter().map(|(n, v)| (n, v, v.is_sensitive())).collect();
            let after: Vec<_> = u.iter().map(|(n, v)| (n, v, v.is_sensitive())).collect();
            assert_eq!(before, after, "{m:?}");
            let span = |v: &http::HeaderValue| v.as_bytes().as_ptr_range();
            let starts: Vec<_> = u.values().filter(|v| !v.is_empty()).map(span).collect();
            for (i, w) in starts.windows(2).enumerate() {
                assert_eq!(w[0].end, w[1].start, "{m:?}: value {i} and the next apart");
            }
            for (a, b) in m.values().zip(u.values()).filter(|(a, _)| !a.is_empty()) {
                assert_ne!(span(a).start, span(b).start, "{m:?}: a value not copied");
            }
        }
    }

    #[test]
    fn a_slot_stays_within_its_bounds() {
        let p: PerThread<u32, u32, std::hash::RandomState> = PerThread::with_max_bytes(usize::MAX);
        let mut c = p.mine();
        for i in 0..MAX_ENTRIES as u32 {
            c.insert(i, i, 10);
        }
        assert_eq!(c.map.len(), MAX_ENTRIES);
        assert_eq!(c.bytes, 10 * MAX_ENTRIES);
        c.insert(7, 70, 20);
        assert_eq!((c.map.len(), c.bytes), (MAX_ENTRIES, 10 * MAX_ENTRIES + 10));
        // One more: the slot is emptied, then holds it.
        c.insert(5000, 1, 10);
        assert_eq!((c.map.len(), c.bytes), (1, 10));
        drop(c);
        let small: PerThread<u32, u32, std::hash::RandomState> = PerThread::with_max_bytes(100);
        let mut s = small.mine();
        s.insert(1, 1, 60);
        s.insert(2, 2, 60);
        assert_eq!((s.get(&1), s.get(&2), s.bytes), (None, Some(&2), 60));
        drop(s);
        let mut c = p.mine();
        c.insert(1, 1, MAX_BYTES);
        assert_eq!((c.map.len(), c.bytes), (1, MAX_BYTES));
        c.remove(&1);
        assert_eq!((c.map.len(), c.bytes), (0, 0));
        c.insert(2, 2, 5);
        c.insert(3, 3, 6);
        drop(c);
        p.prune(|v| *v == 2);
        let c = p.mine();
        assert_eq!(c.get(&2), None);
        assert_eq!((c.get(&3), c.bytes), (Some(&3), 6));
    }
}
