//! Where lines go: a file or stdout, written by a thread of its own.
//!
//! A request appends its line to one of a few buffers (chosen by thread, so two workers
//! rarely meet on a lock) and never waits on the disk. The writer thread swaps the buffers
//! out every 50 ms, or at once when one passes 64 KiB, and writes them with one call each.
//! If it falls behind and the buffers hold `max_pending` bytes (an equal share each),
//! further lines are dropped
//! and counted ([`LogWriter::dropped`]), and the count is logged; nothing is dropped
//! silently. Lines the destination refuses (a full disk) are counted too
//! ([`LogWriter::failed`]), the error is logged at most every 10 s, and requests go on
//! being served. [`LogWriter::close`] writes everything held and stops the thread: the server
//! calls it after draining, so every completed request is in the file.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

const SHARDS: usize = 8;
const WAKE_AT: usize = 64 * 1024;
const INTERVAL: Duration = Duration::from_millis(50);
const REPORT_EVERY: Duration = Duration::from_secs(10);

/// Where a log goes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Destination {
    Stdout,
    File(PathBuf),
}

/// Size-based rotation: past `max_bytes`, `file` becomes `file.1`, `file.1` becomes
/// `file.2`, and so on up to `keep` old files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rotation {
    pub max_bytes: u64,
    pub keep: usize,
}

/// One thread's buffer and counts. Aligned to its own cache lines: two workers appending
/// to neighbouring shards would otherwise bounce one line between their cores on every
/// request, as they did on the shared byte and line counters this replaces.
#[repr(align(128))]
struct Shard(Mutex<Buf>);

impl Shard {
    /// The buffer, whole lines only: a `fill` that panicked may have left part of a line,
    /// which is cut back to the last whole one (before the writer could take it) and the
    /// shard goes on.
    fn lock(&self) -> std::sync::MutexGuard<'_, Buf> {
        self.0.lock().unwrap_or_else(|poisoned| {
            let mut buf = poisoned.into_inner();
            let end = buf
                .bytes
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |p| p + 1);
            buf.bytes.truncate(end);
            self.0.clear_poison();
            buf
        })
    }
}

#[derive(Default)]
struct Buf {
    bytes: Vec<u8>,
    lines: u64,
}

struct Shared {
    shards: Vec<Shard>,
    /// Each shard holds at most this many bytes; `max_pending` across all of them.
    shard_max: usize,
    dropped: AtomicU64,
    failed: AtomicU64,
    wake: Mutex<bool>,
    cv: Condvar,
    reopen: AtomicBool,
    stop: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
    dest: Destination,
}

/// A log destination and its writer thread. Cheap to clone (one reference count);
/// clones share.
#[derive(Clone)]
pub struct LogWriter {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for LogWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogWriter")
            .field("dest", &self.shared.dest)
            .finish()
    }
}

thread_local! {
    static SHARD: usize = {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS
    };
}

enum Sink {
    Stdout(io::Stdout),
    File {
        file: File,
        path: PathBuf,
        size: u64,
    },
}

impl Sink {
    fn open(dest: &Destination) -> io::Result<Sink> {
        match dest {
            Destination::Stdout => Ok(Sink::Stdout(io::stdout())),
            Destination::File(path) => {
                let file = OpenOptions::new().create(true).append(true).open(path)?;
                let size = file.metadata().map(|m| m.len()).unwrap_or(0);
                Ok(Sink::File {
                    file,
                    path: path.clone(),
                    size,
                })
            }
        }
    }

    /// Writes `buf`; on an error, also says how many bytes did go, so that the lines lost
    /// can be counted.
    fn write(&mut self, buf: &[u8]) -> Result<(), (usize, io::Error)> {
        match self {
            Sink::Stdout(s) => {
                let mut s = s.lock();
                let done = write_counted(&mut s, buf)?;
                s.flush().map_err(|e| (done, e))
            }
            Sink::File { file, size, .. } => {
                let done = write_counted(file, buf);
                *size += match &done {
                    Ok(n) | Err((n, _)) => *n as u64,
                };
                done.map(|_| ())
            }
        }
    }

    /// Rotates when the file has grown past the limit; true when a new file was started.
    fn rotate_if_due(&mut self, rotation: Option<Rotation>) -> io::Result<bool> {
        let (Some(r), Sink::File { path, size, .. }) = (rotation, &*self) else {
            return Ok(false);
        };
        if *size < r.max_bytes {
            return Ok(false);
        }
        let path = path.clone();
        let numbered = |n: usize| {
            let mut p = path.clone().into_os_string();
            p.push(format!(".{n}"));
            PathBuf::from(p)
        };
        if r.keep == 0 {
            std::fs::remove_file(&path)?;
        } else {
            let _ = std::fs::remove_file(numbered(r.keep));
            for n in (1..r.keep).rev() {
                let _ = std::fs::rename(numbered(n), numbered(n + 1));
            }
            std::fs::rename(&path, numbered(1))?;
        }
        *self = Sink::open(&Destination::File(path))?;
        Ok(true)
    }
}

impl LogWriter {
    /// Opens `dest` (creating a file if need be) and starts its writer thread. At most
    /// `max_pending` bytes of lines are held for it before lines are dropped.
    pub fn open(
        dest: Destination,
        rotation: Option<Rotation>,
        max_pending: usize,
    ) -> io::Result<LogWriter> {
        let mut sink = Sink::open(&dest)?;
        // A shard per core (up to 8), so that with a worker per core each has one, and the
        // whole of `max_pending` is shared among the shards in use.
        let shards = std::thread::available_parallelism().map_or(SHARDS, |n| n.get().min(SHARDS));
        let shared = Arc::new(Shared {
            shards: (0..shards)
                .map(|_| Shard(Mutex::new(Buf::default())))
                .collect(),
            shard_max: max_pending.div_ceil(shards),
            dropped: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            wake: Mutex::new(false),
            cv: Condvar::new(),
            reopen: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            thread: Mutex::new(None),
            dest,
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("gatehouse-log".into())
            .spawn(move || run(&s, &s.dest, &mut sink, rotation))?;
        if let Ok(mut t) = shared.thread.lock() {
            *t = Some(thread);
        }
        Ok(LogWriter { shared })
    }

    pub fn destination(&self) -> &Destination {
        &self.shared.dest
    }

    /// Appends one line, formatted by `fill` straight into the shared buffer. Returns
    /// false if the line was dropped because the writer is too far behind.
    pub fn append(&self, fill: impl FnOnce(&mut Vec<u8>)) -> bool {
        let sh = &self.shared;
        let i = SHARD.with(|s| *s) % sh.shards.len();
        let len = {
            let mut buf = sh.shards[i].lock();
            if buf.bytes.len() >= sh.shard_max || sh.stop.load(Ordering::Relaxed) {
                drop(buf);
                sh.dropped.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            fill(&mut buf.bytes);
            buf.lines += 1;
            buf.bytes.len()
        };
        // Early enough that a shard smaller than WAKE_AT is written before it fills.
        if len >= WAKE_AT.min(sh.shard_max / 2).max(1) {
            self.wake();
        }
        true
    }

    fn wake(&self) {
        if let Ok(mut w) = self.shared.wake.lock() {
            *w = true;
            self.shared.cv.notify_one();
        }
    }

    /// Lines dropped because the writer fell behind (it should stay at zero).
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Lines lost because the destination refused them (a full disk, say).
    pub fn failed(&self) -> u64 {
        self.shared.failed.load(Ordering::Relaxed)
    }

    /// Lines accepted so far.
    pub fn lines(&self) -> u64 {
        self.shared.shards.iter().map(|s| s.lock().lines).sum()
    }

    /// Reopens the file (after logrotate moved it), at the writer's next turn.
    pub fn reopen(&self) {
        self.shared.reopen.store(true, Ordering::SeqCst);
        self.wake();
    }

    /// Writes every line held and stops the writer thread. Lines appended afterwards are
    /// dropped and counted.
    pub fn close(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.wake();
        let t = self.shared.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = t {
            let _ = t.join();
        }
    }
}

/// `write_all`, keeping count of the bytes written before an error.
fn write_counted(w: &mut impl Write, buf: &[u8]) -> Result<usize, (usize, io::Error)> {
    let mut done = 0;
    while done < buf.len() {
        match w.write(&buf[done..]) {
            Ok(0) => return Err((done, io::ErrorKind::WriteZero.into())),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err((done, e)),
        }
    }
    Ok(done)
}

fn run(sh: &Shared, dest: &Destination, sink: &mut Sink, rotation: Option<Rotation>) {
    let mut spare: Vec<u8> = Vec::new();
    let mut reported = 0;
    // A line cut short by a failed write is ended before the next one, so the lines
    // after it stay whole.
    let mut torn = false;
    // Write failures are logged at most every REPORT_EVERY, with the lines lost since.
    let mut last_report: Option<std::time::Instant> = None;
    let mut last_error: Option<io::Error> = None;
    let mut failed_reported = 0;
    loop {
        if let Ok(w) = sh.wake.lock() {
            if let Ok((mut w, _)) = sh.cv.wait_timeout_while(w, INTERVAL, |w| !*w) {
                *w = false;
            }
        }
        let stopping = sh.stop.load(Ordering::SeqCst);
        if sh.reopen.swap(false, Ordering::SeqCst) {
            match Sink::open(dest) {
                Ok(s) => {
                    *sink = s;
                    torn = false;
                }
                Err(e) => tracing::error!("access log: reopening {dest:?}: {e}"),
            }
        }
        for shard in &sh.shards {
            let taken = {
                let mut buf = shard.lock();
                if buf.bytes.is_empty() {
                    continue;
                }
                std::mem::replace(&mut buf.bytes, std::mem::take(&mut spare))
            };
            let written = match torn {
                true => sink.write(b"\n").map_err(|(_, e)| (0, e)),
                false => Ok(()),
            }
            .and_then(|()| {
                torn = false;
                sink.write(&taken)
            });
            if let Err((done, e)) = written {
                // Every line not wholly written is lost; a partial one is ended later.
                let lost = taken[done..].iter().filter(|&&b| b == b'\n').count() as u64;
                sh.failed.fetch_add(lost, Ordering::Relaxed);
                if done > 0 {
                    torn = taken[done - 1] != b'\n';
                }
                last_error = Some(e);
            }
            spare = taken;
            spare.clear();
            // Don't keep a burst's worth of memory for good.
            if spare.capacity() > 4 * WAKE_AT {
                spare = Vec::new();
            }
        }
        let failed = sh.failed.load(Ordering::Relaxed);
        if failed != failed_reported && last_report.is_none_or(|t| t.elapsed() >= REPORT_EVERY) {
            let e = last_error
                .take()
                .map_or(String::new(), |e| format!(": {e}"));
            tracing::error!(
                "access log: writing {dest:?}{e}; {} lines lost since the last report, {failed} in all",
                failed - failed_reported
            );
            last_report = Some(std::time::Instant::now());
            failed_reported = failed;
        }
        match sink.rotate_if_due(rotation) {
            Ok(true) => torn = false,
            Ok(false) => {}
            Err(e) => tracing::error!("access log: rotating {dest:?}: {e}"),
        }
        let dropped = sh.dropped.load(Ordering::Relaxed);
        if dropped != reported {
            tracing::warn!(
                "access log: {} lines dropped for {dest:?} (the writer fell behind); {dropped} in all",
                dropped - reported
            );
            reported = dropped;
        }
        if stopping {
            if let Sink::File { file, .. } = sink {
                let _ = file.sync_data();
            }
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Takes `room` bytes, at most 7 a call, then fails as a full disk does.
    struct Full {
        room: usize,
        got: Vec<u8>,
    }

    impl Write for Full {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let n = buf.len().min(self.room).min(7);
            if n == 0 {
                // ENOSPC
                return Err(io::Error::from_raw_os_error(28));
            }
            self.got.extend_from_slice(&buf[..n]);
            self.room -= n;
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_short_write_says_how_much_went() {
        let mut w = Full {
            room: 20,
            got: Vec::new(),
        };
        let (done, e) = write_counted(&mut w, b"line one\nline two\nline three\n").unwrap_err();
        assert_eq!(done, 20);
        assert_eq!(w.got, b"line one\nline two\nli");
        assert_eq!(e.raw_os_error(), Some(28));
        let mut w = Full {
            room: 100,
            got: Vec::new(),
        };
        assert_eq!(write_counted(&mut w, b"a\nb\n").unwrap(), 4);
    }
}
