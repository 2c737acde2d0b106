//! A counter for the hot path: one cache line per thread slot, so that threads on
//! different cores counting the same event don't pass a cache line back and forth. Read
//! rarely (at a metrics scrape), by summing the slots.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

pub(crate) const SLOTS: usize = 8;
// `Tally::new` spells out this many slots.
const _: () = assert!(SLOTS == 8);

#[repr(align(128))]
#[derive(Default)]
struct Slot(AtomicU64);

/// A sharded event count. See the [module docs](self).
#[derive(Default)]
pub struct Tally {
    slots: [Slot; SLOTS],
}

impl std::fmt::Debug for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tally({})", self.get())
    }
}

/// This thread's slot, below [`SLOTS`]: threads take them in turn as they first ask.
pub(crate) fn slot() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SLOTS;
    }
    SLOT.with(|s| *s)
}

impl Tally {
    /// A zero count, usable in a `static`.
    pub const fn new() -> Tally {
        Tally {
            slots: [
                Slot(AtomicU64::new(0)),
                Slot(AtomicU64::new(0)),
                Slot(AtomicU64::new(0)),
                Slot(AtomicU64::new(0)),
                Slot(AtomicU64::new(0)),
                Slot(AtomicU64::new(0)),
                Slot(AtomicU64::new(0)),
                Slot(AtomicU64::new(0)),
            ],
        }
    }

    pub fn add(&self, n: u64) {
        self.slots[slot()].0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| s.0.load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }
}

/// A number no other caller in this process gets: names a counter's owner across
/// reloads, where an address could be reused.
pub fn next_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_from_every_thread() {
        let t = std::sync::Arc::new(super::Tally::default());
        let handles: Vec<_> = (0..12)
            .map(|_| {
                let t = t.clone();
                std::thread::spawn(move || (0..1000).for_each(|_| t.add(1)))
            })
            .collect();
        handles.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(t.get(), 12_000);
    }
}
