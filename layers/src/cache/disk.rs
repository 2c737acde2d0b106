//! The disk tier: each stored response also written to a file under a directory, bounded
//! by bytes, read back on a memory miss and after a restart (as nginx's `proxy_cache_path`).
//!
//! A file holds the whole entry: its key, status, fields, the times of its exchange (so
//! that its age after a restart is its true age) and its body. It is written to a temporary
//! name and renamed, so a crash leaves no half-written entry under a real name; a file
//! that does not parse is removed when the directory is read.

use super::lane::{Lane, Unrun};
use super::policy::Exchange;
use super::store::{Entry, Key};
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, StatusCode};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Version 2 keeps a variant's [`key::selecting`](super::key::selecting) bytes after its
/// `Vary` names. Version 1 files are read still, but for variants, whose values they lack.
const MAGIC: &[u8; 8] = b"GHCACHE2";
const MAGIC_1: &[u8; 8] = b"GHCACHE1";
/// The largest field section a file may claim, against a corrupt length.
const MAX_HEAD: u64 = 1 << 20;

/// What the tier knows of a file without reading it.
#[derive(Clone, Debug)]
struct Meta {
    key: Key,
    vary: Vec<HeaderName>,
    size: u64,
    used: u64,
    /// The ticket of the write that made the file (0: found at start).
    written: u64,
}

pub(crate) struct DiskTier {
    dir: PathBuf,
    max_bytes: u64,
    index: Mutex<Index>,
    clock: AtomicU64,
    /// Bytes of entries waiting on the blocking pool to be written ([`DiskTier::queue`]).
    queued: AtomicU64,
    /// Set once a file with a `Vary` was filed: until then a hit need not ask the index.
    varied: std::sync::atomic::AtomicBool,
    /// Reads on the blocking pool now, those abandoned by their request included.
    reading: AtomicU64,
    /// Which write each file is, so that an older one finishing later does not replace
    /// it, and an unlink spares a newer one. Taken by writes and unlinks: on the blocking
    /// pool, or where a purge runs, never by a request.
    renamed: Mutex<Renamed>,
    /// Files taken out of the index whose unlinks have not ended ([`DiskTier::unindex`]):
    /// a purge of their keys meanwhile unlinks them itself, before it answers.
    pending: Mutex<Vec<Pending>>,
    /// Set while a sync of the directory waits to start ([`DiskTier::sync_after_removal`]).
    sync_wanted: Arc<std::sync::atomic::AtomicBool>,
    /// Set while an eviction runs ([`DiskTier::evict`]).
    evicting: std::sync::atomic::AtomicBool,
    /// The unlinks the event loop leaves to the blocking pool ([`DiskTier::unlink_later`])
    /// and the syncs after removals, one at a time: a hung disk holds one thread of the
    /// pool for them, not one per POST. Bounded by the index: each file was taken out of
    /// it to be queued, and no write is indexed while the disk hangs.
    unlinks: Arc<Lane>,
    /// The writes ([`DiskTier::write_later`]), at most [`MAX_WRITING`] at once.
    writes: Arc<Lane>,
}

struct Pending {
    id: u64,
    primary: Arc<str>,
    batch: u64,
}

/// Files taken out of the index together, to be unlinked by [`DiskTier::unlink`].
#[must_use]
pub(crate) struct Batch {
    id: u64,
    files: Vec<u64>,
}

/// The ticket of the write last renamed into each file; a write with an older ticket is
/// dropped. Bounded as `removed` is: past [`MAX_REMOVED`] files it is cleared, and writes
/// queued before the newest one renamed are dropped (their entries stay in memory).
#[derive(Default)]
struct Renamed {
    last: HashMap<u64, u64>,
    floor: u64,
}

/// Bytes of entries that may wait to be written at once: past it (a disk slower than the
/// misses), an entry is kept in memory only, rather than queue without end.
const MAX_QUEUED_BYTES: u64 = 64 << 20;

/// Reads that may be under way at once. A read of a disk that stopped answering (a hung
/// network mount) is given up by its request, which goes upstream, but holds its
/// blocking-pool thread until the disk returns: past this many, a memory miss goes
/// upstream without reading, rather than take every thread of the pool.
const MAX_READING: u64 = 64;

/// Writes on the blocking pool at once. Each ends with a sync of the directory, which
/// the file system can share among those under way; past this many they wait their turn
/// (bounded by [`MAX_QUEUED_BYTES`]), so that a hung disk holds this many threads of the
/// pool and not the whole pool.
const MAX_WRITING: usize = 16;

/// A read under way ([`DiskTier::begin_read`]), until dropped.
pub(crate) struct Reading(Arc<DiskTier>);

impl Drop for Reading {
    fn drop(&mut self) {
        self.0.reading.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A write's share of the queue, given back when it is done or dropped.
pub(crate) struct Queued {
    tier: Arc<DiskTier>,
    bytes: u64,
}

impl Drop for Queued {
    fn drop(&mut self) {
        self.tier.queued.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[derive(Default)]
struct Index {
    files: HashMap<u64, Meta>,
    by_primary: HashMap<Arc<str>, Vec<u64>>,
    /// The primary keys with fields or cookies in `by_primary`, by their URL and line feed
    /// ([`DiskTier::remove_keyed_later`]): an unsafe method's success, which any client can
    /// send, finds its URL's keys without a walk of the index on the event loop.
    keyed: HashMap<Arc<str>, Vec<Arc<str>>>,
    bytes: u64,
    /// When each primary key was last removed: a write queued before that is dropped,
    /// so a purge is not undone by a write still on the blocking pool.
    removed: HashMap<Arc<str>, u64>,
    /// When `removed` was last cleared: a write queued before that may have been removed
    /// since, and is dropped as if it had been (any client's successful POSTs clear it,
    /// found in review).
    forgotten: u64,
}

impl Index {
    /// Whether a write of `primary` queued at `ticket` was overtaken by a removal.
    fn removed_since(&self, primary: &str, ticket: u64) -> bool {
        let after = |k: &str| self.removed.get(k).is_some_and(|&t| t > ticket);
        // A key with fields or cookies is also removed with its URL ([`DiskTier::remove_keyed_later`]).
        ticket < self.forgotten
            || after(primary)
            || primary.find('\n').is_some_and(|i| after(&primary[..=i]))
    }
}

/// Past this many remembered removals the memory is cleared, and the writes queued before
/// then are dropped.
const MAX_REMOVED: usize = 10_000;

impl Index {
    fn add(&mut self, id: u64, meta: Meta) {
        // Through `remove`, also when another key's file had the name (file ids are a
        // hash, whose collisions can be made): left under that key, a purge of this one
        // would not find it (found in review).
        self.remove(id);
        let ids = self.by_primary.entry(meta.key.primary.clone()).or_default();
        if ids.is_empty() {
            if let Some(url) = url_of(&meta.key.primary) {
                self.keyed
                    .entry(url.into())
                    .or_default()
                    .push(meta.key.primary.clone());
            }
        }
        ids.push(id);
        self.bytes += meta.size;
        self.files.insert(id, meta);
    }

    fn remove(&mut self, id: u64) -> Option<Meta> {
        let meta = self.files.remove(&id)?;
        self.bytes -= meta.size;
        if let Some(ids) = self.by_primary.get_mut(&meta.key.primary) {
            ids.retain(|&i| i != id);
            if ids.is_empty() {
                self.by_primary.remove(&meta.key.primary);
                if let Some(url) = url_of(&meta.key.primary) {
                    if let Some(keys) = self.keyed.get_mut(url) {
                        keys.retain(|k| *k != meta.key.primary);
                        if keys.is_empty() {
                            self.keyed.remove(url);
                        }
                    }
                }
            }
        }
        Some(meta)
    }
}

/// The URL and line feed that begin a primary key with fields or cookies.
fn url_of(primary: &str) -> Option<&str> {
    primary.find('\n').map(|i| &primary[..=i])
}

/// FNV-1a: a file's name must be the same in the next process (std's and ahash's seeded
/// hashes are not). The key inside the file is checked on every read.
fn file_id(key: &Key) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key
        .primary
        .as_bytes()
        .iter()
        .chain(&key.secondary.to_le_bytes())
    {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl DiskTier {
    /// Opens (creating) `dir` and reads what a previous process left there.
    pub(crate) fn open(dir: &Path, max_bytes: u64) -> io::Result<DiskTier> {
        // Entries may hold what a key was made of (a keyed cookie, credentials): the
        // directory and its files are the server's own.
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        own_directory(dir)?;
        let tier = DiskTier {
            dir: dir.to_path_buf(),
            max_bytes,
            index: Mutex::default(),
            clock: AtomicU64::new(1),
            queued: AtomicU64::new(0),
            varied: Default::default(),
            reading: AtomicU64::new(0),
            renamed: Mutex::default(),
            sync_wanted: Arc::default(),
            evicting: Default::default(),
            pending: Mutex::default(),
            unlinks: Lane::new(1, Unrun::RunHere),
            writes: Lane::new(MAX_WRITING, Unrun::Wait),
        };
        let mut index = Index::default();
        let mut removed = false;
        for e in std::fs::read_dir(dir)? {
            let path = e?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            // Only the name the tier writes: `+abc.entry` or `ABC.entry` parse too, and
            // would be counted but never removed, unlinks going by the written name.
            let Some(id) = name
                .strip_suffix(".entry")
                .filter(|h| {
                    h.len() == 16 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
                })
                .and_then(|h| u64::from_str_radix(h, 16).ok())
            else {
                // A temporary file a crash left behind.
                if name.ends_with(".tmp") {
                    let _ = std::fs::remove_file(&path);
                }
                continue;
            };
            match read_head(&path) {
                Ok((key, vary, size)) if file_id(&key) == id => {
                    if !vary.is_empty() {
                        tier.varied.store(true, Ordering::Relaxed);
                    }
                    index.add(
                        id,
                        Meta {
                            key,
                            vary,
                            size,
                            used: 0,
                            written: 0,
                        },
                    )
                }
                _ => {
                    let _ = std::fs::remove_file(&path);
                    removed = true;
                }
            }
        }
        if removed {
            tier.sync_after_removal();
        }
        *tier.index.lock().unwrap_or_else(|e| e.into_inner()) = index;
        tier.evict(&|_| false);
        Ok(tier)
    }

    fn path(&self, id: u64) -> PathBuf {
        self.dir.join(format!("{id:016x}.entry"))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a file may hold `key` (a cheap check before a read).
    pub(crate) fn has(&self, key: &Key) -> bool {
        self.lock().files.contains_key(&file_id(key))
    }

    /// Whether any file filed had a `Vary` (else [`DiskTier::vary_names`] has none).
    pub(crate) fn varied(&self) -> bool {
        self.varied.load(Ordering::Relaxed)
    }

    /// The `Vary` field names of what is filed under `primary`, as the files say.
    pub(crate) fn vary_names(&self, primary: &str) -> Option<Vec<HeaderName>> {
        let g = self.lock();
        // The newest file's: older ones may be from before the origin changed its Vary.
        let ids = g.by_primary.get(primary)?;
        ids.iter()
            .filter_map(|id| g.files.get(id))
            .max_by_key(|m| m.used)
            .map(|m| m.vary.clone())
    }

    /// Reads `key`'s entry, if its file holds it.
    pub(crate) fn load(
        &self,
        key: &Key,
        heuristic_max: Duration,
    ) -> Option<(Vec<HeaderName>, Entry)> {
        let id = file_id(key);
        let path = self.path(id);
        // Which file this reads: a read that outlived its request may end after a newer
        // write replaced the file, and must not remove that one.
        let reading = self.lock().files.get(&id).map(|m| m.written);
        match read_entry(&path, heuristic_max) {
            Ok((k, vary, entry)) if k == *key => {
                let used = self.clock.fetch_add(1, Ordering::Relaxed);
                // Purged or evicted while it was read: it must not come back into memory.
                let mut g = self.lock();
                let m = g.files.get_mut(&id)?;
                m.used = used;
                Some((vary, entry))
            }
            // Out of descriptors, or the disk failing for now: the file stays indexed, so
            // that it still counts against the bound and a purge still finds it.
            Err(e)
                if !matches!(
                    e.kind(),
                    io::ErrorKind::InvalidData
                        | io::ErrorKind::UnexpectedEof
                        | io::ErrorKind::NotFound
                ) =>
            {
                None
            }
            // Damaged, cut short, another key's, or gone: out of the index and off the
            // disk. Left there, it would come back at the next start, past any purge.
            _ => {
                let mut g = self.lock();
                if g.files.get(&id).map(|m| m.written) == reading {
                    let batch = self.unindex(&mut g, [id]);
                    drop(g);
                    self.unlink(batch);
                }
                None
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn reads_under_way(&self) -> u64 {
        self.reading.load(Ordering::Relaxed)
    }

    /// A place among the reads under way, if there is one ([`MAX_READING`]).
    pub(crate) fn begin_read(self: &Arc<Self>) -> Option<Reading> {
        if self.reading.fetch_add(1, Ordering::Relaxed) >= MAX_READING {
            self.reading.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(Reading(self.clone()))
    }

    /// Room in the write queue for `bytes`, if there is that much left. Each write counts
    /// at least 4 KiB, so that many small ones are bounded too.
    pub(crate) fn queue(self: &Arc<Self>, bytes: u64) -> Option<Queued> {
        let bytes = bytes.max(4096);
        let before = self.queued.fetch_add(bytes, Ordering::AcqRel);
        let q = Queued {
            tier: self.clone(),
            bytes,
        };
        // Alone in the queue, any one entry is written, however large.
        (before == 0 || before + bytes <= MAX_QUEUED_BYTES).then_some(q)
    }

    /// Bytes waiting to be written now.
    #[cfg(test)]
    pub(crate) fn queued_bytes(&self) -> u64 {
        self.queued.load(Ordering::Acquire)
    }

    /// A number to give [`DiskTier::store`] for a write decided now.
    pub(crate) fn ticket(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    /// [`DiskTier::store_keeping`] with nothing held in memory.
    #[cfg(test)]
    pub(crate) fn store(&self, key: &Key, vary: &[HeaderName], entry: &Entry, ticket: u64) {
        self.store_keeping(key, vary, entry, ticket, &|_| false);
    }

    /// Writes `entry` under `key` (unless it was removed after `ticket`), then evicts the
    /// least recently used files over the bound, those whose keys are `resident` last.
    pub(crate) fn store_keeping(
        &self,
        key: &Key,
        vary: &[HeaderName],
        entry: &Entry,
        ticket: u64,
        resident: &dyn Fn(&Key) -> bool,
    ) {
        if self.lock().removed_since(&key.primary, ticket) {
            return;
        }
        let id = file_id(key);
        let path = self.path(id);
        let tmp = self.dir.join(format!(
            "{id:016x}.{}.tmp",
            self.clock.fetch_add(1, Ordering::Relaxed)
        ));
        let written = write_entry(&tmp, key, vary, entry).and_then(|size| {
            {
                // Two writes of a key (a refresh, then a newer miss) may finish out of
                // order on the pool: the older must not replace the newer's file.
                let mut r = self.renamed.lock().unwrap_or_else(|e| e.into_inner());
                if ticket < r.floor || r.last.get(&id).is_some_and(|&t| t > ticket) {
                    return Err(io::Error::other("overtaken by a newer write"));
                }
                std::fs::rename(&tmp, &path)?;
                if r.last.len() >= MAX_REMOVED {
                    r.floor = r.last.values().copied().max().unwrap_or(0).max(ticket);
                    r.last.clear();
                }
                r.last.insert(id, ticket);
            }
            // The rename is the directory's to keep: without this, a power loss could
            // leave the old file (or none) under the name. Renamed, the file is indexed
            // whether or not the sync works (a file the index lost would outlive purges).
            let _ = sync_dir(&self.dir);
            Ok(size)
        });
        match written {
            Ok(size) => self.index_written(key, vary, id, size, ticket, resident),
            Err(_) => {
                // A full disk (or a newer write) loses the disk copy only; memory still
                // has the entry.
                let _ = std::fs::remove_file(&tmp);
            }
        }
    }

    /// Files the write `ticket` of `key`, renamed into `id`'s file, in the index; then
    /// evicts. Writes reach this in the order their syncs end, not the order of their
    /// renames.
    fn index_written(
        &self,
        key: &Key,
        vary: &[HeaderName],
        id: u64,
        size: u64,
        ticket: u64,
        resident: &dyn Fn(&Key) -> bool,
    ) {
        let path = self.path(id);
        let used = self.clock.fetch_add(1, Ordering::Relaxed);
        let mut g = self.lock();
        if g.files.get(&id).is_some_and(|m| m.written > ticket) {
            // A newer write was renamed over this one and indexed first (this one
            // waited on its sync): indexed now, the file would be listed as the
            // older write, which an unlink then spares (found in review).
            return;
        }
        if g.removed_since(&key.primary, ticket) {
            // Removed while it was being written: the file goes, unless a newer
            // write has replaced it since.
            drop(g);
            let r = self.renamed.lock().unwrap_or_else(|e| e.into_inner());
            // (After a clear of `last`, a newer write renamed in but not yet indexed
            // loses its file: a disk copy only, and only past MAX_REMOVED renames.)
            if r.last.get(&id).is_none_or(|&t| t == ticket) {
                let _ = std::fs::remove_file(&path);
                drop(r);
                self.sync_after_removal();
            }
            return;
        }
        if !vary.is_empty() {
            self.varied.store(true, Ordering::Relaxed);
        }
        // The URL's files under another Vary go, as memory drops them: left, one
        // was read back for a request its old Vary names and served in place of
        // the newer response (found in review).
        let stale: Vec<u64> = g
            .by_primary
            .get(&key.primary)
            .into_iter()
            .flatten()
            .copied()
            .filter(|&other| other != id)
            .filter(|other| g.files.get(other).is_some_and(|m| m.vary != vary))
            .collect();
        let stale = self.unindex(&mut g, stale);
        g.add(
            id,
            Meta {
                key: key.clone(),
                vary: vary.to_vec(),
                size,
                used,
                written: ticket,
            },
        );
        drop(g);
        self.unlink(stale);
        self.evict(resident);
    }

    /// Removes every file filed under `primary`; how many.
    pub(crate) fn remove_primary(&self, primary: &str) -> u64 {
        self.remove_recorded(
            primary,
            |g| g.by_primary.get(primary).cloned().unwrap_or_default(),
            |p| p == primary,
        )
    }

    /// Records the removal of `name` (for writes queued before it) and removes the files
    /// `ids` finds, and those of primary keys that `pending` matches whose unlinks have not
    /// ended (another removal's, maybe deferred): a purge answers with them gone.
    fn remove_recorded(
        &self,
        name: &str,
        ids: impl FnOnce(&Index) -> Vec<u64>,
        pending: impl Fn(&str) -> bool,
    ) -> u64 {
        let mut batch = self.unindex_recorded(name, ids);
        let n = batch.files.len() as u64;
        {
            let p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            let others = p
                .iter()
                .filter(|f| f.batch != batch.id && pending(&f.primary));
            batch.files.extend(others.map(|f| f.id));
        }
        self.unlink(batch);
        n
    }

    /// As [`DiskTier::remove_primary`], with the unlinks left to the blocking pool
    /// ([`DiskTier::unlink_later`]): for the event loop, where an unlink on a hung disk (a
    /// network mount) would stop the thread and every connection on it.
    pub(crate) fn remove_primary_later(self: &Arc<Self>, primary: &str) -> u64 {
        let batch = self.unindex_recorded(primary, |g| {
            g.by_primary.get(primary).cloned().unwrap_or_default()
        });
        let n = batch.files.len() as u64;
        self.unlink_later(batch);
        n
    }

    /// Removes every file of a key with fields or cookies under `url` (a URL and a line
    /// feed, as such keys begin); how many. A lookup, not a walk of the index: this is the
    /// event loop's, at an unsafe method's success. Writes of such keys queued before are
    /// dropped too, whether or not they have a file yet ([`Index::removed_since`]). The
    /// files leave the index now and are unlinked as [`DiskTier::remove_primary_later`]'s.
    pub(crate) fn remove_keyed_later(self: &Arc<Self>, url: &str) -> u64 {
        let batch = self.unindex_recorded(url, |g| {
            g.keyed
                .get(url)
                .into_iter()
                .flatten()
                .filter_map(|p| g.by_primary.get(p))
                .flatten()
                .copied()
                .collect()
        });
        let n = batch.files.len() as u64;
        self.unlink_later(batch);
        n
    }

    /// Unlinks `batch` on the blocking pool, after the batches queued before it, one at a
    /// time. Its files left the index already, so this process never reads them again,
    /// and stay pending until unlinked: a purge meanwhile unlinks them itself.
    fn unlink_later(self: &Arc<Self>, batch: Batch) {
        if batch.files.is_empty() {
            return;
        }
        let tier = self.clone();
        self.unlinks.run(move || tier.unlink(batch));
    }

    /// Runs `write` (a [`DiskTier::store_keeping`]) on the blocking pool, in turn with the
    /// other writes.
    pub(crate) fn write_later(&self, write: impl FnOnce() + Send + 'static) {
        self.writes.run(write);
    }

    /// Records the removal of `name` and takes the files `ids` finds out of the index.
    fn unindex_recorded(&self, name: &str, ids: impl FnOnce(&Index) -> Vec<u64>) -> Batch {
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        let mut g = self.lock();
        if g.removed.len() >= MAX_REMOVED {
            g.removed.clear();
            g.forgotten = now;
        }
        g.removed.insert(name.into(), now);
        let ids = ids(&g);
        // The batch is the removal's time: a write decided after it is spared by the
        // unlink ([`DiskTier::unlink`]) exactly when `removed_since` lets it be indexed.
        self.unindex_as(&mut g, ids, now)
    }

    /// Takes `ids` out of the index `g` (this tier's, held) and lists them as pending until
    /// [`DiskTier::unlink`] of the batch has ended. Listed before the index's lock is let
    /// go, so that a purge finds each file in one or the other (found in review: a purge
    /// between an eviction's removal and its unlink answered with the file on disk).
    fn unindex(&self, g: &mut Index, ids: impl IntoIterator<Item = u64>) -> Batch {
        let batch = self.clock.fetch_add(1, Ordering::Relaxed);
        self.unindex_as(g, ids, batch)
    }

    /// [`DiskTier::unindex`] as batch `batch`, a time of the tier's clock no other batch has.
    fn unindex_as(&self, g: &mut Index, ids: impl IntoIterator<Item = u64>, batch: u64) -> Batch {
        let mut files = Vec::new();
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        for id in ids {
            if let Some(m) = g.remove(id) {
                p.push(Pending {
                    id,
                    primary: m.key.primary,
                    batch,
                });
                files.push(id);
            }
        }
        Batch { id: batch, files }
    }

    /// Unlinks `batch`'s files, syncs the directory, and only then takes them off the
    /// pending list. Spares only a file a write decided after the removal has renamed
    /// into the name since (a GET right after the POST whose removal waited on the pool):
    /// that write's own indexing files it, or unlinks it if a later removal overtook it
    /// ([`DiskTier::index_written`]), so it is never a file no index lists, which a
    /// restart would serve (found in review, when older writes were spared too). Each
    /// under the lock renames take, so that none lands between the check and the unlink.
    fn unlink(&self, batch: Batch) {
        if batch.files.is_empty() {
            return;
        }
        for &id in &batch.files {
            let r = self.renamed.lock().unwrap_or_else(|e| e.into_inner());
            if r.last.get(&id).is_some_and(|&t| t > batch.id) {
                continue;
            }
            let _ = std::fs::remove_file(self.path(id));
        }
        self.sync_after_removal();
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|f| f.batch != batch.id);
    }

    /// The primary keys of the files, for a purge by prefix.
    /// Every write decided before now is dropped when it ends, whatever its key: for a
    /// purge by a prefix of keys, which [`Index::removed_since`] cannot match by name. A
    /// write under way for a key memory did not keep is found by no listing (found in
    /// review); the writes of other keys lose their disk copies only.
    pub(crate) fn drop_queued(&self) {
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        let mut g = self.lock();
        g.forgotten = g.forgotten.max(now);
    }

    /// Those of files whose unlinks have not ended included: a purge by prefix must reach
    /// them too (found in review).
    pub(crate) fn primaries(&self) -> Vec<Arc<str>> {
        let g = self.lock();
        let mut all: Vec<Arc<str>> = g.by_primary.keys().cloned().collect();
        let p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        all.extend(p.iter().map(|f| f.primary.clone()));
        all.sort_unstable();
        all.dedup();
        all
    }

    /// An unlink is lost with the power unless the directory is synced: a purged response
    /// would be back after the restart. On the unlinks' lane, after those queued (a purge
    /// may run this on the event loop, and this process no longer reads the files either
    /// way), and at most one waiting there: on a disk that stopped answering, one sync
    /// hangs and the next waits, rather than one per removal taking a thread each.
    fn sync_after_removal(&self) {
        if self.sync_wanted.swap(true, Ordering::AcqRel) {
            // One is waiting to start, and will see this unlink.
            return;
        }
        let (dir, wanted) = (self.dir.clone(), self.sync_wanted.clone());
        self.unlinks.run(move || {
            wanted.store(false, Ordering::Release);
            let _ = sync_dir(&dir);
        });
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    pub(crate) fn files(&self) -> usize {
        self.lock().files.len()
    }

    /// Down to 90% of the bound, least recently used first, when over it. A file whose
    /// entry is `resident` in memory goes last: its hits are served from memory and never
    /// touch its `used`, so the URLs hot since they were written went first, and all
    /// missed after a restart.
    fn evict(&self, resident: &dyn Fn(&Key) -> bool) {
        struct Done<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        // One eviction at a time: writers finishing together would each make the pass,
        // and with memory's answers changing between them, evict far below the bound.
        // One that returns here is seen by the running one's next pass, or its check
        // after it let go (bounded: each pass that goes on removed a file).
        for _ in 0..3 {
            if self.evicting.swap(true, Ordering::AcqRel) {
                return;
            }
            {
                let _done = Done(&self.evicting);
                while self.evict_pass(resident) {}
            }
            if self.lock().bytes <= self.max_bytes {
                return;
            }
        }
    }

    /// One pass of [`DiskTier::evict`]: whether it removed a file and the tier is still
    /// over its bound.
    fn evict_pass(&self, resident: &dyn Fn(&Key) -> bool) -> bool {
        let (files, over) = {
            let g = self.lock();
            if g.bytes <= self.max_bytes {
                return false;
            }
            let files: Vec<(Key, u64, u64, u64, u64)> = g
                .files
                .iter()
                .map(|(&id, m)| (m.key.clone(), m.used, id, m.size, m.written))
                .collect();
            (files, g.bytes.saturating_sub(self.max_bytes / 10 * 9))
        };
        // The memory store is asked outside the index's lock, which a memory miss on the
        // event loop takes ([`DiskTier::has`]).
        let mut all: Vec<(bool, u64, u64, u64, u64)> = files
            .into_iter()
            .map(|(key, used, id, size, written)| (resident(&key), used, id, size, written))
            .collect();
        all.sort_unstable();
        let mut over = over;
        let victims = all.into_iter().take_while(|&(_, _, _, size, _)| {
            let more = over > 0;
            over = over.saturating_sub(size);
            more
        });
        // A file read back or written again since it was listed is not the one chosen:
        // it stays (found in review: a hot key's new file was evicted).
        let gone = {
            let mut g = self.lock();
            let chosen: Vec<u64> = victims
                .filter(|&(_, used, id, _, written)| {
                    g.files
                        .get(&id)
                        .is_some_and(|m| m.used == used && m.written == written)
                })
                .map(|(_, _, id, _, _)| id)
                .collect();
            self.unindex(&mut g, chosen)
        };
        let removed = !gone.files.is_empty();
        self.unlink(gone);
        removed && self.lock().bytes > self.max_bytes
    }
}

/// Makes the directory's entries (renames, unlinks) durable (POSIX `fsync` on the
/// directory, as Linux requires for them).
fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()?;
    #[cfg(test)]
    SYNCED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(dir.to_path_buf());
    Ok(())
}

/// The directories synced, once per sync, for the tests (which share the process).
#[cfg(test)]
static SYNCED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn since_epoch(t: SystemTime) -> (u64, u32) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    (d.as_secs(), d.subsec_nanos())
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn write_entry(path: &Path, key: &Key, vary: &[HeaderName], e: &Entry) -> io::Result<u64> {
    let mut head = Vec::with_capacity(512);
    put_bytes(&mut head, key.primary.as_bytes());
    head.extend_from_slice(&key.secondary.to_le_bytes());
    head.extend_from_slice(&(vary.len() as u32).to_le_bytes());
    for n in vary {
        put_bytes(&mut head, n.as_str().as_bytes());
    }
    put_bytes(&mut head, e.selecting());
    head.extend_from_slice(&e.status.as_u16().to_le_bytes());
    for t in [e.exchange.request_time, e.exchange.response_time] {
        let (s, n) = since_epoch(t);
        head.extend_from_slice(&s.to_le_bytes());
        head.extend_from_slice(&n.to_le_bytes());
    }
    head.extend_from_slice(&(e.headers.len() as u32).to_le_bytes());
    for (n, v) in &e.headers {
        put_bytes(&mut head, n.as_str().as_bytes());
        put_bytes(&mut head, v.as_bytes());
    }
    let mut f = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)?
    };
    f.write_all(MAGIC)?;
    f.write_all(&(head.len() as u64).to_le_bytes())?;
    f.write_all(&head)?;
    f.write_all(&(e.body.len() as u64).to_le_bytes())?;
    f.write_all(&e.body)?;
    f.sync_data()?;
    Ok((MAGIC.len() + 16 + head.len() + e.body.len()) as u64)
}

/// The directory must be this process's alone to write: a file in it is served as a hit
/// for the key it names, which anyone can compute, so another user who could write there
/// could plant any response for any URL (found in review: an existing directory was used
/// as it was, only a new one made private).
#[allow(unsafe_code)] // FFI: geteuid.
fn own_directory(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(dir)?;
    if !m.is_dir() {
        return Err(io::Error::other("not a directory"));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if m.uid() != me {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("owned by uid {}, not by this process's ({me})", m.uid()),
        ));
    }
    if m.mode() & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "others may write in it (mode {:o}): a planted file would be served as a hit; chmod go-w",
                m.mode() & 0o777
            ),
        ));
    }
    Ok(())
}

/// Reads a field section's parts in order, failing on any length past its end.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "truncated"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }

    fn u16(&mut self) -> io::Result<u16> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().unwrap_or_default(),
        ))
    }

    fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().unwrap_or_default(),
        ))
    }

    fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().unwrap_or_default(),
        ))
    }

    fn bytes(&mut self) -> io::Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    /// A time no later than a day from now: a file's damaged time would otherwise keep
    /// its entry fresh for ever, or panic past what `SystemTime` holds (found in review:
    /// one flipped high bit made every start-up and reload panic).
    fn time(&mut self) -> io::Result<SystemTime> {
        let (s, n) = (self.u64()?, self.u32()?);
        let t = UNIX_EPOCH
            .checked_add(Duration::new(s, n.min(999_999_999)))
            .ok_or_else(|| bad("time"))?;
        let latest = SystemTime::now() + Duration::from_secs(86_400);
        if t > latest {
            return Err(bad("time"));
        }
        Ok(t)
    }
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

struct Head {
    key: Key,
    vary: Vec<HeaderName>,
    selecting: Arc<[u8]>,
    status: StatusCode,
    exchange: Exchange,
    headers: HeaderMap,
}

fn parse_head(b: &[u8], version: u8) -> io::Result<Head> {
    let mut c = Cursor(b);
    let primary = std::str::from_utf8(c.bytes()?).map_err(|_| bad("key"))?;
    let secondary = c.u64()?;
    let mut vary = Vec::new();
    for _ in 0..c.u32()? {
        vary.push(HeaderName::from_bytes(c.bytes()?).map_err(|_| bad("vary"))?);
    }
    let selecting: Arc<[u8]> = match version {
        1 if secondary != 0 => return Err(bad("a variant without its request's values")),
        // Keyed fields and cookies were written otherwise then (an absent one as an empty
        // one, two lines as one): read now, the file could answer another request's key.
        1 if primary.contains('\n') => return Err(bad("a key of the older layout")),
        1 => Arc::from(&[][..]),
        _ => c.bytes()?.into(),
    };
    // The values must be those the key was made from: a damaged file answers no one.
    if super::key::secondary_of(&selecting) != secondary {
        return Err(bad("selecting values"));
    }
    let status = StatusCode::from_u16(c.u16()?).map_err(|_| bad("status"))?;
    let exchange = Exchange {
        request_time: c.time()?,
        response_time: c.time()?,
    };
    let mut headers = HeaderMap::new();
    for _ in 0..c.u32()? {
        let n = HeaderName::from_bytes(c.bytes()?).map_err(|_| bad("field name"))?;
        let v = HeaderValue::from_bytes(c.bytes()?).map_err(|_| bad("field value"))?;
        // `append` panics past the map's capacity, which a damaged count can ask for.
        headers.try_append(n, v).map_err(|_| bad("fields"))?;
    }
    Ok(Head {
        key: Key {
            primary: primary.into(),
            secondary,
        },
        vary,
        selecting,
        status,
        exchange,
        headers,
    })
}

/// The file, its head's bytes, its size and its format's version.
fn open_head(path: &Path) -> io::Result<(std::fs::File, Vec<u8>, u64, u8)> {
    let mut f = std::fs::File::open(path)?;
    let mut magic = [0u8; 16];
    f.read_exact(&mut magic)?;
    let version = match &magic[..8] {
        m if m == MAGIC => 2,
        m if m == MAGIC_1 => 1,
        _ => return Err(bad("not a cache file")),
    };
    let len = u64::from_le_bytes(magic[8..].try_into().unwrap_or_default());
    if len > MAX_HEAD {
        return Err(bad("head too large"));
    }
    let mut head = vec![0u8; len as usize];
    f.read_exact(&mut head)?;
    let size = f.metadata()?.len();
    Ok((f, head, size, version))
}

fn read_head(path: &Path) -> io::Result<(Key, Vec<HeaderName>, u64)> {
    let (_, head, size, version) = open_head(path)?;
    let h = parse_head(&head, version)?;
    Ok((h.key, h.vary, size))
}

fn read_entry(path: &Path, heuristic_max: Duration) -> io::Result<(Key, Vec<HeaderName>, Entry)> {
    let (mut f, head, size, version) = open_head(path)?;
    let h = parse_head(&head, version)?;
    let mut len = [0u8; 8];
    f.read_exact(&mut len)?;
    let len = u64::from_le_bytes(len);
    if len > size {
        return Err(bad("body length"));
    }
    let mut body = vec![0u8; len as usize];
    f.read_exact(&mut body)?;
    let entry = Entry::new(
        h.status,
        h.headers,
        Bytes::from(body),
        h.exchange,
        heuristic_max,
        crate::upstream::StoredVersion::new(),
    )
    .with_selecting(h.selecting);
    Ok((h.key, h.vary, entry))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(body: &str, max_age: &str) -> Entry {
        let mut h = HeaderMap::new();
        h.insert("cache-control", max_age.parse().unwrap());
        h.append("x-two", "a".parse().unwrap());
        h.append("x-two", "b".parse().unwrap());
        let t = UNIX_EPOCH + Duration::new(1_700_000_000, 5);
        Entry::new(
            StatusCode::OK,
            h,
            Bytes::copy_from_slice(body.as_bytes()),
            Exchange {
                request_time: t,
                response_time: t + Duration::from_millis(3),
            },
            Duration::ZERO,
            crate::upstream::StoredVersion::new(),
        )
    }

    fn key(p: &str, s: u64) -> Key {
        Key {
            primary: p.into(),
            secondary: s,
        }
    }

    #[test]
    fn the_write_queue_is_bounded_and_given_back() {
        let dir = tempfile::tempdir().unwrap();
        let tier = Arc::new(DiskTier::open(dir.path(), 1 << 30).unwrap());
        let big = tier.queue(100 << 20).expect("alone, any size");
        assert!(tier.queue(1).is_none());
        drop(big);
        let held: Vec<_> = (0..64)
            .map(|_| tier.queue(1 << 20).expect("room"))
            .collect();
        assert!(tier.queue(1).is_none());
        assert_eq!(tier.queued_bytes(), 64 << 20);
        drop(held);
        assert_eq!(tier.queued_bytes(), 0);
        let small = tier.queue(1).expect("room");
        assert_eq!(tier.queued_bytes(), 4096, "a write counts at least 4 KiB");
        drop(small);
    }

    #[test]
    fn a_file_out_of_the_index_is_not_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
        let k = key("GET http://h/a", 0);
        t.store(&k, &[], &entry("purged", "max-age=60"), t.ticket());
        assert!(t.load(&k, Duration::ZERO).is_some());
        // As a purge does between a load's check and its read: the file is still there.
        t.lock().remove(file_id(&k));
        assert!(t.path(file_id(&k)).exists());
        assert!(t.load(&k, Duration::ZERO).is_none());
    }

    #[test]
    fn an_entry_comes_back_whole_in_the_next_process() {
        let dir = tempfile::tempdir().unwrap();
        let vary = vec![HeaderName::from_static("accept-language")];
        let mut asked = HeaderMap::new();
        asked.insert("accept-language", "fr, de".parse().unwrap());
        let selecting: Arc<[u8]> = super::super::key::selecting(&asked, &vary).into();
        let sec = super::super::key::secondary_of(&selecting);
        let entry =
            |body: &str, max_age: &str| entry(body, max_age).with_selecting(selecting.clone());
        {
            let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
            t.store(
                &key("GET http://h/a", sec),
                &vary,
                &entry("hello", "max-age=60"),
                t.ticket(),
            );
            std::fs::write(dir.path().join("0000000000000001.entry"), b"garbage").unwrap();
            std::fs::write(dir.path().join("x.1.tmp"), b"half").unwrap();
        }
        let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(t.files(), 1, "the garbage and the temporary file are gone");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        assert_eq!(t.vary_names("GET http://h/a"), Some(vary.clone()));
        let (v, e) = t.load(&key("GET http://h/a", sec), Duration::ZERO).unwrap();
        let want = entry("hello", "max-age=60");
        assert_eq!(v, vary);
        assert_eq!(
            (&e.body[..], e.status, e.lifetime),
            (&b"hello"[..], want.status, want.lifetime)
        );
        assert_eq!(e.headers, want.headers);
        // The request's values come back with it: only the same values are answered.
        assert!(e.selects(&selecting));
        asked.insert("accept-language", "de, fr".parse().unwrap());
        assert!(!e.selects(&super::super::key::selecting(&asked, &vary)));
        assert_eq!(e.exchange.request_time, want.exchange.request_time);
        assert_eq!(e.exchange.response_time, want.exchange.response_time);
        assert!(t
            .load(&key("GET http://h/a", sec ^ 1), Duration::ZERO)
            .is_none());
        let before = t.ticket();
        assert_eq!(t.remove_primary("GET http://h/a"), 1);
        assert!(!t.has(&key("GET http://h/a", sec)));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        // A write decided before the removal and run after it is dropped.
        t.store(
            &key("GET http://h/a", sec),
            &vary,
            &entry("old", "max-age=60"),
            before,
        );
        assert_eq!(t.files(), 0);
        t.store(
            &key("GET http://h/a", sec),
            &vary,
            &entry("new", "max-age=60"),
            t.ticket(),
        );
        assert_eq!(t.files(), 1);
    }

    /// A file of the format before the request's values were kept: read back when it is
    /// no variant, dropped when it is one, whose values nobody can compare.
    #[test]
    fn a_version_1_file_is_read_unless_it_is_a_variant() {
        let dir = tempfile::tempdir().unwrap();
        let plain = key("GET http://h/a", 0);
        let variant = key("GET http://h/b", 7);
        let (plain_path, variant_path) = {
            let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
            t.store(&plain, &[], &entry("a", "max-age=60"), t.ticket());
            (t.path(file_id(&plain)), t.path(file_id(&variant)))
        };
        // Version 2 less the selecting values' length (4 bytes of 0, after the key,
        // secondary and vary count), with the older magic and head length.
        let v2 = std::fs::read(&plain_path).unwrap();
        let at = 16 + 4 + "GET http://h/a".len() + 8 + 4;
        assert_eq!(&v2[at..at + 4], &[0; 4]);
        let head = u64::from_le_bytes(v2[8..16].try_into().unwrap()) - 4;
        let mut v1 = b"GHCACHE1".to_vec();
        v1.extend_from_slice(&head.to_le_bytes());
        v1.extend_from_slice(&v2[16..at]);
        v1.extend_from_slice(&v2[at + 4..]);
        std::fs::write(&plain_path, &v1).unwrap();
        // The same file as the variant's: its key in its head, one Vary name, no values.
        let mut h = Vec::new();
        put_bytes(&mut h, b"GET http://h/b");
        h.extend_from_slice(&7u64.to_le_bytes());
        h.extend_from_slice(&1u32.to_le_bytes());
        put_bytes(&mut h, b"accept-language");
        h.extend_from_slice(&v1[16 + 4 + "GET http://h/a".len() + 8 + 4..]);
        let body_part = 8 + 1;
        let err = parse_head(&h[..h.len() - body_part], 1).err().unwrap();
        assert!(err.to_string().contains("a variant without"), "{err}");
        // Well made but for being a variant: as no variant, it parses.
        let mut not_varied = h[..h.len() - body_part].to_vec();
        not_varied[4 + 14..4 + 14 + 8].copy_from_slice(&0u64.to_le_bytes());
        assert!(parse_head(&not_varied, 1).is_ok());
        // A key with keyed fields, written under their older layout: not read.
        let mut keyed = not_varied.clone();
        keyed[4 + 13] = b'\n';
        let err = parse_head(&keyed, 1).err().unwrap();
        assert!(err.to_string().contains("older layout"), "{err}");
        let mut file = b"GHCACHE1".to_vec();
        file.extend_from_slice(&((h.len() - body_part) as u64).to_le_bytes());
        file.extend_from_slice(&h);
        std::fs::write(&variant_path, &file).unwrap();
        let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(t.files(), 1, "the variant is dropped");
        assert!(!variant_path.exists());
        let (_, e) = t.load(&plain, Duration::ZERO).unwrap();
        assert_eq!(&e.body[..], b"a");
        assert!(e.selects(&[]));
    }

    /// A rename and an unlink are the directory's to keep through a power loss: a stored
    /// entry is synced into it, and a purge out of it (a purged response must not come back
    /// with the next start).
    #[test]
    fn writes_and_removals_sync_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let syncs = || {
            SYNCED
                .lock()
                .unwrap()
                .iter()
                .filter(|d| d.as_path() == dir.path())
                .count()
        };
        let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(syncs(), 0);
        t.store(
            &key("GET http://h/a", 0),
            &[],
            &entry("a", "max-age=60"),
            t.ticket(),
        );
        assert_eq!(syncs(), 1);
        assert_eq!(t.remove_primary("GET http://h/b"), 0);
        assert_eq!(syncs(), 1, "nothing removed, nothing to sync");
        assert_eq!(t.remove_primary("GET http://h/a"), 1);
        assert_eq!(syncs(), 2);
    }

    /// Two writes of one key finishing out of order (the pool runs them side by side):
    /// the file holds the newer, whichever ran last.
    #[test]
    fn an_older_write_finishing_last_does_not_replace_a_newer() {
        let dir = tempfile::tempdir().unwrap();
        let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
        let k = key("GET http://h/a", 0);
        let (older, newer) = (t.ticket(), t.ticket());
        t.store(&k, &[], &entry("newer", "max-age=60"), newer);
        t.store(&k, &[], &entry("older", "max-age=60"), older);
        let (_, e) = t.load(&k, Duration::ZERO).unwrap();
        assert_eq!(&e.body[..], b"newer");
        assert_eq!(t.files(), 1);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "the older's temporary file is gone"
        );
        // In order, the later write replaces the file as before.
        t.store(&k, &[], &entry("latest", "max-age=60"), t.ticket());
        let (_, e) = t.load(&k, Duration::ZERO).unwrap();
        assert_eq!(&e.body[..], b"latest");
    }

    /// A URL's removal with its fields and cookies (an unsafe method's success) drops the
    /// writes queued before it of any such key, even one without a file yet; a key
    /// without fields, or a longer URL, is not touched.
    #[test]
    fn a_urls_removal_drops_the_keyed_writes_queued_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let t = Arc::new(DiskTier::open(dir.path(), 1 << 20).unwrap());
        let before = t.ticket();
        t.store(
            &key("GET http://h/a\nx:1", 0),
            &[],
            &entry("1", "max-age=60"),
            t.ticket(),
        );
        assert_eq!(t.files(), 1);
        assert_eq!(t.remove_keyed_later("GET http://h/a\n"), 1);
        for k in ["GET http://h/a\nx:1", "GET http://h/a\nx:2"] {
            t.store(&key(k, 0), &[], &entry("x", "max-age=60"), before);
        }
        assert_eq!(t.files(), 0);
        t.store(
            &key("GET http://h/ab\nx:1", 0),
            &[],
            &entry("y", "max-age=60"),
            before,
        );
        t.store(
            &key("GET http://h/a", 0),
            &[],
            &entry("z", "max-age=60"),
            before,
        );
        assert_eq!(t.files(), 2);
        t.store(
            &key("GET http://h/a\nx:1", 0),
            &[],
            &entry("n", "max-age=60"),
            t.ticket(),
        );
        assert_eq!(t.files(), 3);
    }

    /// Found in review: a damaged time panicked at every start and reload, and a far
    /// future one kept its entry fresh for ever. Such a file is not read back, and goes.
    #[test]
    fn a_file_with_a_damaged_time_is_dropped_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let k = key("GET http://h/a", 0);
        let path = {
            let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
            t.store(&k, &[], &entry("body", "max-age=60"), t.ticket());
            t.path(file_id(&k))
        };
        let good = std::fs::read(&path).unwrap();
        // MAGIC, the head's length, the key (4 + 14), secondary, vary count, the
        // selecting values' length (none), status.
        let at = 16 + 4 + "GET http://h/a".len() + 8 + 4 + 4 + 2;
        let secs = u64::from_le_bytes(good[at..at + 8].try_into().unwrap());
        let ten_years = 10 * 365 * 86_400;
        for bad_secs in [secs | 1 << 63, u64::MAX, secs + ten_years] {
            let mut damaged = good.clone();
            damaged[at..at + 8].copy_from_slice(&bad_secs.to_le_bytes());
            std::fs::write(&path, &damaged).unwrap();
            let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
            assert_eq!(t.files(), 0, "{bad_secs:#x}");
            assert!(t.load(&k, Duration::ZERO).is_none());
        }
        // Damaged after it was indexed: dropped at the read, file and all.
        std::fs::write(&path, &good).unwrap();
        let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(t.files(), 1);
        let mut damaged = good.clone();
        damaged[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        std::fs::write(&path, &damaged).unwrap();
        assert!(t.load(&k, Duration::ZERO).is_none());
        assert_eq!(t.files(), 0);
        assert!(!path.exists(), "a purge could no longer find it");
    }

    #[test]
    fn a_directory_others_may_write_in_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = DiskTier::open(&open, 1 << 20).err().expect("refused");
        assert!(e.to_string().contains("others may write"), "{e}");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(DiskTier::open(&open, 1 << 20).is_ok(), "readable is fine");
        let file = dir.path().join("file");
        std::fs::write(&file, b"").unwrap();
        assert!(DiskTier::open(&file, 1 << 20).is_err());
    }

    /// Found in review: a file under a name the tier never writes but which parses to an
    /// entry's number was indexed, outlived a purge (unlinks go by the written name), and
    /// was read back at the next start.
    #[test]
    fn only_the_names_the_tier_writes_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let k = key("GET http://h/a", 0);
        let id = file_id(&k);
        {
            let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
            t.store(&k, &[], &entry("hello", "max-age=60"), t.ticket());
            std::fs::copy(t.path(id), dir.path().join(format!("+{id:016x}.entry"))).unwrap();
        }
        let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(t.remove_primary("GET http://h/a"), 1);
        let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(t.files(), 0, "the purged entry came back");
    }

    /// Found in review: a URL's files under an earlier `Vary` stayed, and the first was
    /// the one whose names a lookup took, so it was read back in place of the newer one.
    #[test]
    fn a_new_vary_takes_the_urls_files_under_the_old_one_away() {
        let dir = tempfile::tempdir().unwrap();
        let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
        let al = vec![HeaderName::from_static("accept-language")];
        t.store(
            &key("GET http://h/p", 1),
            &al,
            &entry("en", "max-age=60"),
            t.ticket(),
        );
        t.store(
            &key("GET http://h/p", 2),
            &al,
            &entry("fr", "max-age=60"),
            t.ticket(),
        );
        assert_eq!(t.files(), 2);
        assert_eq!(t.vary_names("GET http://h/p"), Some(al.clone()));
        // The origin drops its Vary.
        t.store(
            &key("GET http://h/p", 0),
            &[],
            &entry("one", "max-age=60"),
            t.ticket(),
        );
        assert_eq!(t.files(), 1);
        assert_eq!(t.vary_names("GET http://h/p"), Some(vec![]));
        assert!(t.load(&key("GET http://h/p", 1), Duration::ZERO).is_none());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        // And takes another.
        let ae = vec![HeaderName::from_static("accept-encoding")];
        t.store(
            &key("GET http://h/p", 9),
            &ae,
            &entry("gz", "max-age=60"),
            t.ticket(),
        );
        assert_eq!(t.files(), 1);
        assert_eq!(t.vary_names("GET http://h/p"), Some(ae));
    }

    /// Found in review: the memory of removals was cleared after 10,000 of them (any
    /// client's successful POSTs make them), and a write queued before a purge then ran
    /// and brought the purged entry back.
    #[test]
    fn a_write_queued_before_the_removals_were_forgotten_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
        let k = key("GET http://h/purged", 0);
        let before = t.ticket();
        t.remove_primary("GET http://h/purged");
        for i in 0..MAX_REMOVED {
            t.remove_primary(&format!("GET http://h/post/{i}"));
        }
        t.store(&k, &[], &entry("old", "max-age=60"), before);
        assert_eq!(t.files(), 0);
        t.store(&k, &[], &entry("new", "max-age=60"), t.ticket());
        assert_eq!(t.files(), 1);
    }

    #[test]
    fn the_tier_stays_within_its_bytes_least_recently_used_out_first() {
        let dir = tempfile::tempdir().unwrap();
        let t = DiskTier::open(dir.path(), 20_000).unwrap();
        let body = "x".repeat(1000);
        for i in 0..10 {
            t.store(
                &key(&format!("GET http://h/{i}"), 0),
                &[],
                &entry(&body, "max-age=60"),
                t.ticket(),
            );
        }
        // Used again: the oldest by use is now 1.
        assert!(t.load(&key("GET http://h/0", 0), Duration::ZERO).is_some());
        for i in 10..40 {
            t.store(
                &key(&format!("GET http://h/{i}"), 0),
                &[],
                &entry(&body, "max-age=60"),
                t.ticket(),
            );
        }
        assert!(t.bytes() <= 20_000, "{}", t.bytes());
        assert!(!t.has(&key("GET http://h/1", 0)));
        assert!(t.has(&key("GET http://h/39", 0)));
        let on_disk: u64 = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        assert_eq!(on_disk, t.bytes());
    }

    #[test]
    fn files_whose_entries_are_in_memory_are_evicted_last() {
        let dir = tempfile::tempdir().unwrap();
        let t = DiskTier::open(dir.path(), 20_000).unwrap();
        let body = "x".repeat(1000);
        // 0 to 4 written first and never read from disk since: served from memory.
        let resident = |k: &Key| (0..5).any(|i| *k.primary == *format!("GET http://h/{i}"));
        for i in 0..40 {
            t.store_keeping(
                &key(&format!("GET http://h/{i}"), 0),
                &[],
                &entry(&body, "max-age=60"),
                t.ticket(),
                &resident,
            );
        }
        assert!(t.bytes() <= 20_000, "{}", t.bytes());
        for i in 0..5 {
            assert!(t.has(&key(&format!("GET http://h/{i}"), 0)), "{i}");
        }
        assert!(!t.has(&key("GET http://h/5", 0)));
        assert!(t.has(&key("GET http://h/39", 0)));
    }

    #[tokio::test]
    async fn a_removal_behind_a_slow_disk_unindexes_at_once_and_unlinks_off_the_loop() {
        let dir = tempfile::tempdir().unwrap();
        let t = Arc::new(DiskTier::open(dir.path(), 1 << 20).unwrap());
        let k = key("GET http://h/a", 0);
        t.store(&k, &[], &entry("old", "max-age=60"), t.ticket());
        let path = t.path(file_id(&k));
        assert!(path.exists());
        t.remove_primary_later(&k.primary);
        assert!(!t.has(&k), "no read finds it from now on");
        for _ in 0..500 {
            if !path.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!path.exists(), "unlinked on the blocking pool");
        // A write queued before the removal is dropped, as for any removal.
        let before = t.ticket();
        t.remove_primary_later(&k.primary);
        t.store(&k, &[], &entry("queued before", "max-age=60"), before);
        assert!(!t.has(&k));
    }

    /// A tier whose `GET http://h/a` a newer write has filed, and an older write of it,
    /// renamed before, still to be indexed: the key, the file's id and size, and the
    /// older write's ticket.
    fn older_write_to_index(dir: &Path) -> (DiskTier, Key, u64, u64, u64) {
        let t = DiskTier::open(dir, 1 << 20).unwrap();
        let k = key("GET http://h/a", 0);
        let older = t.ticket();
        t.store(&k, &[], &entry("newer", "max-age=60"), t.ticket());
        let id = file_id(&k);
        let size = std::fs::metadata(t.path(id)).unwrap().len();
        (t, k, id, size, older)
    }

    /// Found in review: a write that waited on its sync was indexed after a newer one
    /// renamed over it, listing the newer file as the older write; a purge's unlink then
    /// spared it, and a restart brought the purged response back.
    #[test]
    fn a_write_indexed_after_a_newer_one_leaves_the_newer_listed() {
        let dir = tempfile::tempdir().unwrap();
        let (t, k, id, size, older) = older_write_to_index(dir.path());
        t.index_written(&k, &[], id, size, older, &|_| false);
        assert_eq!(t.remove_primary(&k.primary), 1);
        assert!(!t.path(id).exists(), "the purged file is gone");
    }

    /// A runtime whose blocking pool has one thread, and a tier in `dir` holding a file
    /// for each of `primaries` (`body` in each).
    fn one_thread_pool(
        dir: &Path,
        primaries: impl IntoIterator<Item = String>,
        body: &str,
    ) -> (
        tokio::runtime::Runtime,
        Arc<DiskTier>,
        Vec<Key>,
        Vec<PathBuf>,
    ) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .max_blocking_threads(1)
            .enable_time()
            .build()
            .unwrap();
        let t = Arc::new(DiskTier::open(dir, 1 << 20).unwrap());
        let keys: Vec<Key> = primaries.into_iter().map(|p| key(&p, 0)).collect();
        for k in &keys {
            t.store(k, &[], &entry(body, "max-age=60"), t.ticket());
        }
        let paths = keys.iter().map(|k| t.path(file_id(k))).collect();
        (rt, t, keys, paths)
    }

    /// Waits (5 s at most) until `done`, and says whether it is.
    async fn until(done: impl Fn() -> bool) -> bool {
        for _ in 0..500 {
            if done() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        done()
    }

    #[test]
    fn a_purge_unlinks_the_files_whose_deferred_unlinks_still_wait() {
        let dir = tempfile::tempdir().unwrap();
        let (rt, t, keys, paths) = one_thread_pool(dir.path(), ["GET http://h/a".into()], "old");
        let (k, path) = (&keys[0], &paths[0]);
        let (release, blocked) = std::sync::mpsc::channel::<()>();
        rt.block_on(async {
            // The pool's one thread is busy: the deferred unlink waits behind it.
            let busy = tokio::task::spawn_blocking(move || blocked.recv());
            t.remove_primary_later(&k.primary);
            assert!(path.exists(), "its unlink waits");
            t.remove_primary(&k.primary);
            assert!(!path.exists(), "the purge unlinked it before answering");
            release.send(()).unwrap();
            busy.await.unwrap().unwrap();
            let ended = until(|| t.pending.lock().unwrap().is_empty()).await;
            assert!(ended, "the deferred unlink ended");
        });
    }

    /// The event loop's removals (an unsafe method's success) take the files out of the
    /// index at once and leave their unlinks to one task on the blocking pool: on a hung
    /// disk they wait there, queued, rather than stop the thread or take a pool thread
    /// each.
    #[test]
    fn the_event_loops_removals_wait_for_the_pool_in_one_queue() {
        let dir = tempfile::tempdir().unwrap();
        let primaries = (0..4).map(|i| format!("GET http://h/{i}\nx:1"));
        let (rt, t, keys, paths) = one_thread_pool(dir.path(), primaries, "old");
        let (release, blocked) = std::sync::mpsc::channel::<()>();
        rt.block_on(async {
            // The pool's one thread is busy, as on a hung disk.
            let busy = tokio::task::spawn_blocking(move || blocked.recv());
            assert_eq!(t.remove_primary_later(&keys[0].primary), 1);
            assert_eq!(t.remove_keyed_later("GET http://h/1\n"), 1);
            assert_eq!(t.remove_primary_later(&keys[2].primary), 1);
            assert!(paths.iter().all(|p| p.exists()), "no unlink ran here");
            assert!(!t.has(&keys[0]) && !t.has(&keys[1]) && !t.has(&keys[2]));
            assert!(t.has(&keys[3]));
            assert_eq!(t.unlinks.queued(), 3, "queued, for one task");
            release.send(()).unwrap();
            busy.await.unwrap().unwrap();
            let idle = || t.unlinks.idle() && t.pending.lock().unwrap().is_empty();
            assert!(until(idle).await, "the task ended");
            // One queued after the task ended is unlinked by a new one.
            assert_eq!(t.remove_primary_later(&keys[3].primary), 1);
            assert!(until(idle).await, "every unlink ended");
        });
        assert!(paths.iter().all(|p| !p.exists()), "every file is gone");
    }

    /// On a hung disk, the syncs after removals wait in the unlinks' lane, one queued
    /// however many removals come (each took a thread of the pool before).
    #[test]
    fn a_hung_sync_holds_one_thread_and_one_waits() {
        let dir = tempfile::tempdir().unwrap();
        let primaries = (0..10).map(|i| format!("GET http://h/{i}"));
        let (rt, t, keys, _) = one_thread_pool(dir.path(), primaries, "x");
        let (release, hung) = std::sync::mpsc::channel::<()>();
        rt.block_on(async {
            // The lane's one thread hangs, as on a sync of a hung disk.
            t.unlinks.run(move || {
                let _ = hung.recv();
            });
            tokio::time::sleep(Duration::from_millis(50)).await;
            for k in &keys {
                assert_eq!(t.remove_primary(&k.primary), 1);
            }
            assert_eq!(t.unlinks.queued(), 1, "one sync waits for them all");
            release.send(()).unwrap();
            assert!(until(|| t.unlinks.idle()).await);
        });
        assert!(!t.sync_wanted.load(Ordering::Acquire), "the sync ran");
    }

    /// A write decided after a removal whose unlink still waits (a GET right after the
    /// POST) keeps its file: found in review, when the waiting unlink took it.
    #[test]
    fn a_waiting_unlink_spares_a_newer_write_of_the_name() {
        let dir = tempfile::tempdir().unwrap();
        let (rt, t, keys, paths) =
            one_thread_pool(dir.path(), ["GET http://h/a".into()], "before the POST");
        let (k, path) = (&keys[0], &paths[0]);
        let (release, blocked) = std::sync::mpsc::channel::<()>();
        rt.block_on(async {
            let busy = tokio::task::spawn_blocking(move || blocked.recv());
            t.remove_primary_later(&k.primary);
            t.store(k, &[], &entry("after the POST", "max-age=60"), t.ticket());
            release.send(()).unwrap();
            busy.await.unwrap().unwrap();
            assert!(until(|| t.unlinks.idle()).await);
        });
        assert!(
            t.has(k) && path.exists(),
            "the newer file stays, and is listed"
        );
        let again = DiskTier::open(dir.path(), 1 << 20).unwrap();
        let (_, e) = again.load(k, Duration::ZERO).unwrap();
        assert_eq!(&e.body[..], b"after the POST");
    }

    #[test]
    fn a_purge_by_prefix_sees_the_files_whose_unlinks_have_not_ended() {
        let dir = tempfile::tempdir().unwrap();
        let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
        let k = key("GET http://h/a", 0);
        t.store(&k, &[], &entry("one", "max-age=60"), t.ticket());
        let pending = t.unindex_recorded("evicted", |_| vec![file_id(&k)]);
        assert!(t.primaries().contains(&k.primary));
        t.unlink(pending);
        assert!(t.primaries().is_empty());
    }

    /// File ids are a hash, whose collisions can be made: the name goes to the newer key.
    #[test]
    fn a_file_name_another_key_had_is_filed_under_the_newer_key() {
        let meta = |p: &str| Meta {
            key: key(p, 0),
            vary: Vec::new(),
            size: 10,
            used: 1,
            written: 1,
        };
        let mut g = Index::default();
        g.add(7, meta("GET http://h/a"));
        g.add(7, meta("GET http://h/b"));
        assert!(!g.by_primary.contains_key("GET http://h/a"));
        assert_eq!(g.by_primary["GET http://h/b"], vec![7]);
        assert_eq!(g.bytes, 10);
        assert!(g.remove(7).is_some());
        assert!(g.by_primary.is_empty());
        assert_eq!(g.bytes, 0);
    }

    /// The URL lookup of keyed primaries stays what a walk of the index would find,
    /// through adds, removals and file names two keys share (random, seeded).
    #[test]
    fn the_keyed_lookup_matches_a_walk_of_the_index() {
        let mut rng = fastrand::Rng::with_seed(34);
        let primaries = [
            "GET http://h/a",
            "GET http://h/a\nx:1",
            "GET http://h/a\nx:2",
            "GET http://h/a\ncookie:s=1",
            "GET http://h/ab\nx:1",
            "GET http://h/b\nx:1",
            "GET http://h/b",
        ];
        let mut g = Index::default();
        for _ in 0..20_000 {
            let id = rng.u64(0..12);
            if rng.bool() {
                let p = primaries[rng.usize(0..primaries.len())];
                g.add(
                    id,
                    Meta {
                        key: key(p, 0),
                        vary: Vec::new(),
                        size: 1,
                        used: 0,
                        written: 0,
                    },
                );
            } else {
                g.remove(id);
            }
            for url in ["GET http://h/a\n", "GET http://h/ab\n", "GET http://h/b\n"] {
                let mut walked: Vec<&Arc<str>> =
                    g.by_primary.keys().filter(|p| p.starts_with(url)).collect();
                let mut looked: Vec<&Arc<str>> = g.keyed.get(url).into_iter().flatten().collect();
                walked.sort();
                looked.sort();
                assert_eq!(walked, looked, "{url}");
            }
            assert!(g.keyed.values().all(|v| !v.is_empty()));
        }
    }

    #[test]
    fn writes_decided_before_a_purge_by_prefix_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
        let k = key("GET http://h/a", 0);
        let before = t.ticket();
        t.drop_queued();
        t.store(&k, &[], &entry("queued before", "max-age=60"), before);
        assert!(!t.has(&k));
        assert!(!t.path(file_id(&k)).exists());
        t.store(&k, &[], &entry("after", "max-age=60"), t.ticket());
        assert!(t.has(&k));
    }

    /// Found in review: a batch's end took another batch's files of the same name off the
    /// pending list, so a purge after it found the file in neither place.
    #[test]
    fn a_batch_that_ends_leaves_the_others_pending() {
        let dir = tempfile::tempdir().unwrap();
        let t = DiskTier::open(dir.path(), 1 << 20).unwrap();
        let k = key("GET http://h/a", 0);
        let id = file_id(&k);
        t.store(&k, &[], &entry("one", "max-age=60"), t.ticket());
        let first = t.unindex_recorded("x", |_| vec![id]);
        t.store(&k, &[], &entry("two", "max-age=60"), t.ticket());
        let second = t.unindex_recorded("y", |_| vec![id]);
        assert_eq!((first.files.len(), second.files.len()), (1, 1));
        t.unlink(first);
        // The second write's file, back as if renamed in before the first unlink ran.
        std::fs::write(t.path(id), b"still on disk").unwrap();
        assert_eq!(t.pending.lock().unwrap().len(), 1);
        t.remove_primary(&k.primary);
        assert!(!t.path(id).exists(), "the purge unlinked the pending file");
        t.unlink(second);
        assert!(t.pending.lock().unwrap().is_empty());
    }

    /// Found in review: an unlink that spared a file a newer write had renamed in could
    /// leave one that no index lists (the newer write's entry evicted, an older write
    /// indexed over it, then purged), which a restart serves.
    #[test]
    fn no_removal_leaves_a_file_the_index_does_not_list() {
        let dir = tempfile::tempdir().unwrap();
        let (t, k, id, size, older) = older_write_to_index(dir.path());
        // The newer write's entry taken out (an eviction), then the older write indexed.
        let gone = t.unindex_recorded("evicted", |_| vec![id]);
        t.index_written(&k, &[], id, size, older, &|_| false);
        t.unlink(gone);
        t.remove_primary(&k.primary);
        assert!(!t.has(&k));
        assert!(!t.path(id).exists(), "a restart would serve it");
        assert_eq!(DiskTier::open(dir.path(), 1 << 20).unwrap().files(), 0);
    }

    /// Found in review: memory is asked outside the index's lock, and a file written
    /// again meanwhile (its key fetched anew) was removed as the old one.
    #[test]
    fn a_file_written_again_while_an_eviction_chooses_stays() {
        let dir = tempfile::tempdir().unwrap();
        let t = DiskTier::open(dir.path(), 20_000).unwrap();
        let body = "x".repeat(1000);
        let oldest = key("GET http://h/0", 0);
        let mut i = 0;
        while t.bytes() + 2_000 < 20_000 {
            t.store(
                &key(&format!("GET http://h/{i}"), 0),
                &[],
                &entry(&body, "max-age=60"),
                t.ticket(),
            );
            i += 1;
        }
        let rewritten = std::cell::Cell::new(false);
        let resident = |k: &Key| {
            if *k == oldest && !rewritten.replace(true) {
                t.store(&oldest, &[], &entry("again", "max-age=60"), t.ticket());
            }
            false
        };
        for j in i..i + 3 {
            t.store_keeping(
                &key(&format!("GET http://h/{j}"), 0),
                &[],
                &entry(&body, "max-age=60"),
                t.ticket(),
                &resident,
            );
        }
        assert!(rewritten.get(), "no eviction ran");
        assert!(!t.has(&key("GET http://h/1", 0)), "the next oldest went");
        let (_, e) = t.load(&oldest, Duration::ZERO).expect("the new file stays");
        assert_eq!(&e.body[..], b"again");
    }
}
