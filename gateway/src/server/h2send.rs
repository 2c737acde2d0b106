//! HTTP/2 response bytes held behind flow control.
//!
//! hyper polls a response body for its next chunk before it knows whether the stream's
//! window (RFC 9113 §5.2) lets any of it go, and h2 keeps what it is handed until the
//! client opens the window. A client that opens none (SETTINGS_INITIAL_WINDOW_SIZE = 0,
//! §6.5.2) so made each of its streams pin a 256 KiB file chunk: 64 MiB a connection.
//!
//! Here the memory an HTTP/2 response body ([`Gate`]) reads into is taken from its
//! connection's budget and then the server's before the body is polled
//! (`limits.h2_send_buffer` and `limits.h2_send_buffer_total`), and given back when h2
//! drops the last of it, written. What is read goes to hyper a [`SLICE`] at a time, at most
//! [`DEPTH`] of them unwritten; a stream that has had slices out and none written for the
//! send timeout is dropped by its task ([`Stalls`]), which makes h2 reset it (RST_STREAM,
//! §6.4) while the connection's other streams go on.

use bytes::Bytes;
use futures_util::task::AtomicWaker;
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};

/// What a body of unknown size is granted before it is polled: the proxy reads its
/// upstreams 64 KiB at a time.
pub(crate) const UNSIZED_GRANT: u32 = 64 * 1024;
/// What hyper is handed at once. A file is read in larger chunks (fewer reads, and
/// allocations the allocator reuses: 64 KiB reads faulted in 7 times the pages), but a
/// slice written is what shows a stream moving, so this sets the slowest client served:
/// 64 KiB in the send timeout, about 1 KiB/s with the default 60 s.
pub(crate) const SLICE: usize = 64 * 1024;
/// Slices a stream may have out: with one, h2 ran out of a lone stream's data as each was
/// written, and wrote it in 47% more writes.
const DEPTH: usize = 2;

/// The server's budget over all its connections, and each connection's size.
pub(crate) struct Pool {
    all: Arc<Semaphore>,
    per_conn: usize,
    /// The largest grant either budget can make.
    most: u32,
}

impl Pool {
    pub(crate) fn new(per_conn: usize, total: usize) -> Arc<Pool> {
        let most = per_conn.min(total).min(u32::MAX as usize) as u32;
        Arc::new(Pool {
            all: Arc::new(Semaphore::new(total.min(Semaphore::MAX_PERMITS))),
            per_conn,
            most,
        })
    }
}

/// One connection's budget, made at its first gated body: most connections never have one.
pub(crate) struct ConnBudget {
    pool: Arc<Pool>,
    conn: OnceLock<Arc<Semaphore>>,
}

impl ConnBudget {
    pub(crate) fn new(pool: Arc<Pool>) -> ConnBudget {
        ConnBudget {
            pool,
            conn: OnceLock::new(),
        }
    }

    /// The gate of one response body, announced to the stream task polling it.
    pub(crate) fn gate(&self) -> Box<Gate> {
        let conn = self
            .conn
            .get_or_init(|| Arc::new(Semaphore::new(self.pool.per_conn)))
            .clone();
        let stream = Arc::new(Stream {
            waker: AtomicWaker::new(),
            out: AtomicUsize::new(0),
            moved: AtomicU64::new(0),
        });
        announce(&stream);
        Box::new(Gate {
            conn,
            all: self.pool.all.clone(),
            most: self.pool.most,
            stream,
            conn_permit: None,
            all_permit: None,
            waiting: None,
            rest: None,
        })
    }
}

/// What a stream's chunks and its task share.
pub(crate) struct Stream {
    waker: AtomicWaker,
    /// Slices of this stream's with hyper or h2, not yet written.
    out: AtomicUsize,
    /// When a slice was last handed out or written (coarse milliseconds).
    moved: AtomicU64,
}

impl Stream {
    fn moved_now(&self) {
        self.moved
            .store(gatehouse_layers::clock::coarse_ms(), Ordering::Relaxed);
    }

    /// Since when this stream's slices have waited to be written, if it has any out.
    fn waiting_since(&self) -> Option<u64> {
        (self.out.load(Ordering::Acquire) > 0).then(|| self.moved.load(Ordering::Relaxed))
    }
}

type Acquire = Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send>>;

/// An HTTP/2 response body's share of the budgets. See the [module docs](self).
pub(crate) struct Gate {
    conn: Arc<Semaphore>,
    all: Arc<Semaphore>,
    most: u32,
    stream: Arc<Stream>,
    /// The grant for the chunk being read: from the connection first, then the server.
    conn_permit: Option<OwnedSemaphorePermit>,
    all_permit: Option<OwnedSemaphorePermit>,
    /// Waiting, first in first out, for the grant from the budget that was short.
    waiting: Option<Acquire>,
    /// What was read and not yet handed out, and the budget the whole chunk holds.
    rest: Option<(Bytes, Arc<Charge>)>,
}

/// The budget one chunk holds, given back when the last of it is dropped.
struct Charge {
    _conn: Option<OwnedSemaphorePermit>,
    _all: Option<OwnedSemaphorePermit>,
}

/// Makes `p` hold `n` permits: gives back what is over, takes what more is free.
fn fit(p: &mut Option<OwnedSemaphorePermit>, sem: &Arc<Semaphore>, n: usize) {
    let Some(held) = p.as_mut() else {
        return;
    };
    let have = held.num_permits();
    if have > n {
        drop(held.split(have - n));
    } else if have < n {
        let more = u32::try_from(n - have).unwrap_or(u32::MAX);
        if let Ok(extra) = sem.clone().try_acquire_many_owned(more) {
            held.merge(extra);
        }
    }
}

impl Gate {
    /// Ready once this stream has fewer than [`DEPTH`] slices out.
    fn poll_turn(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.stream.out.load(Ordering::Acquire) >= DEPTH {
            self.stream.waker.register(cx.waker());
            if self.stream.out.load(Ordering::Acquire) >= DEPTH {
                return Poll::Pending;
            }
        }
        Poll::Ready(())
    }

    /// The next slice of what was read, once there is room for it; `None` when all of it
    /// has been handed out.
    pub(crate) fn poll_slice(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if self.rest.is_none() {
            return Poll::Ready(None);
        }
        ready!(self.poll_turn(cx));
        Poll::Ready(self.next_slice())
    }

    /// Bytes read and not yet handed out.
    pub(crate) fn unsent(&self) -> usize {
        self.rest.as_ref().map_or(0, |(b, _)| b.len())
    }

    /// Ready with a grant of `want` bytes (or the most a budget holds, if less) once this
    /// stream has room for a slice and both budgets have room for all of it: first come,
    /// first served. Grants of one size (a file's chunk) keep the allocator reusing its
    /// blocks: partial grants of whatever was free made reads of every size, and glibc
    /// then gave pages back and faulted them in again (+50% CPU on a multi-stream
    /// download). A grant not yet used by [`Gate::lease`] is kept for the next call.
    pub(crate) fn poll_grant(&mut self, cx: &mut Context<'_>, want: u32) -> Poll<usize> {
        ready!(self.poll_turn(cx));
        let want = want.clamp(1, self.most);
        loop {
            if let Some(w) = self.waiting.as_mut() {
                let got = ready!(w.as_mut().poll(cx));
                self.waiting = None;
                // The semaphores are never closed; were one, the body would go on unbudgeted.
                let Ok(p) = got else {
                    return Poll::Ready(want as usize);
                };
                match self.conn_permit {
                    None => self.conn_permit = Some(p),
                    Some(_) => self.all_permit = Some(p),
                }
            }
            let (sem, slot) = match (&self.conn_permit, &self.all_permit) {
                (None, _) => (&self.conn, &mut self.conn_permit),
                (Some(_), None) => (&self.all, &mut self.all_permit),
                (Some(c), Some(_)) => return Poll::Ready(c.num_permits()),
            };
            match sem.clone().try_acquire_many_owned(want) {
                Ok(p) => *slot = Some(p),
                Err(_) => self.waiting = Some(Box::pin(sem.clone().acquire_many_owned(want))),
            }
        }
    }

    /// Takes a (non-empty) chunk just read, charged `charge` bytes (what it holds in
    /// memory) until the last of it is dropped, and returns its first slice. A chunk
    /// larger than its grant (a body that read more than it was asked) takes what more
    /// is free.
    pub(crate) fn lease(&mut self, chunk: Bytes, charge: usize) -> Bytes {
        let mut conn = self.conn_permit.take();
        let mut all = self.all_permit.take();
        fit(&mut conn, &self.conn, charge);
        fit(&mut all, &self.all, charge);
        let charge = Arc::new(Charge {
            _conn: conn,
            _all: all,
        });
        self.rest = Some((chunk, charge));
        self.next_slice().unwrap_or_default()
    }

    fn next_slice(&mut self) -> Option<Bytes> {
        let (rest, charge) = self.rest.as_mut()?;
        let (data, charge) = if rest.len() > SLICE {
            (rest.split_to(SLICE), charge.clone())
        } else {
            self.rest.take()?
        };
        self.stream.moved_now();
        self.stream.out.fetch_add(1, Ordering::AcqRel);
        Some(Bytes::from_owner(Lease {
            data,
            charge: Some(charge),
            stream: self.stream.clone(),
        }))
    }

    /// Gives back a grant the body did not use (it ended, or sent trailers).
    pub(crate) fn release(&mut self) {
        self.conn_permit = None;
        self.all_permit = None;
        self.waiting = None;
    }
}

/// A slice's owner: its bytes and its chunk's budget.
struct Lease {
    data: Bytes,
    charge: Option<Arc<Charge>>,
    stream: Arc<Stream>,
}

impl AsRef<[u8]> for Lease {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // The memory and budget first: the stream may read again as soon as it is woken.
        self.data = Bytes::new();
        drop(self.charge.take());
        self.stream.moved_now();
        self.stream.out.fetch_sub(1, Ordering::AcqRel);
        self.stream.waker.wake();
    }
}

thread_local! {
    /// Set while an HTTP/2 stream's task is polled on this thread: its body's gate, once
    /// made, is left here for [`Stalls`] to watch.
    static WATCHING: Cell<bool> = const { Cell::new(false) };
    static FOUND: Cell<Option<Arc<Stream>>> = const { Cell::new(None) };
}

fn announce(stream: &Arc<Stream>) {
    if WATCHING.get() {
        FOUND.set(Some(stream.clone()));
    }
}

/// Runs `f` (a poll of a stream's task) and returns what it returned and the gate it made.
/// A panic in `f` leaves the thread's watch as it found it ([`Watching`]'s drop): a
/// stream's task that panics is caught by tokio, and the thread polls others after it.
pub(crate) fn watch<R>(f: impl FnOnce() -> R) -> (R, Option<Arc<Stream>>) {
    let restore = Watching {
        outer: WATCHING.replace(true),
        outer_found: FOUND.take(),
    };
    let r = f();
    let found = FOUND.take();
    drop(restore);
    (r, found)
}

/// What [`watch`] puts back when it ends, by return or by unwinding.
struct Watching {
    outer: bool,
    outer_found: Option<Arc<Stream>>,
}

impl Drop for Watching {
    fn drop(&mut self) {
        WATCHING.set(self.outer);
        FOUND.set(self.outer_found.take());
    }
}

pin_project_lite::pin_project! {
    /// An HTTP/2 stream's task (hyper's, spawned by the connection's executor), ended once
    /// its body's slice has waited `limit` to be written: h2 then resets the stream.
    pub(crate) struct Stalls<F> {
        #[pin]
        inner: F,
        stream: Option<Arc<Stream>>,
        timer: Option<Pin<Box<tokio::time::Sleep>>>,
        limit_ms: u64,
    }
}

impl<F> Stalls<F> {
    pub(crate) fn new(inner: F, stream: Option<Arc<Stream>>, limit: Duration) -> Self {
        Stalls {
            inner,
            stream,
            timer: None,
            limit_ms: limit.as_millis().max(1) as u64,
        }
    }
}

impl<F: Future<Output = ()>> Future for Stalls<F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.project();
        let inner = this.inner;
        let (res, made) = watch(|| inner.poll(cx));
        if res.is_ready() {
            return Poll::Ready(());
        }
        if made.is_some() {
            *this.stream = made;
        }
        let Some(since) = this.stream.as_ref().and_then(|s| s.waiting_since()) else {
            return Poll::Pending;
        };
        loop {
            let deadline = since + *this.limit_ms;
            let now = gatehouse_layers::clock::coarse_ms();
            if now >= deadline {
                tracing::debug!(
                    "http2 stream reset: its response waited {} ms to be written",
                    now - since
                );
                return Poll::Ready(());
            }
            // A timer set for an earlier deadline fires first and is set again here, so
            // that a busy stream moves it at most once a timeout.
            let timer = match this.timer {
                Some(t) if !t.is_elapsed() => t,
                _ => {
                    let at = tokio::time::Instant::now() + Duration::from_millis(deadline - now);
                    let t = this
                        .timer
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
                    t.as_mut().reset(at);
                    t
                }
            };
            // Outside the coop budget, so that it always takes the waker (see `Drive`).
            let mut sleep = tokio::task::coop::unconstrained(timer.as_mut());
            if Pin::new(&mut sleep).poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::task::{Wake, Waker};

    /// A panic inside a watched poll leaves the thread not watching, as before it: else
    /// every gate made on the thread afterwards, outside any stream's poll, would be
    /// kept in `FOUND`.
    #[test]
    fn a_panic_in_a_watched_poll_leaves_the_watch_as_it_was() {
        let caught = std::panic::catch_unwind(|| {
            watch(|| {
                if std::hint::black_box(true) {
                    panic!("a stream's bug, on purpose");
                }
            })
        });
        assert!(caught.is_err());
        assert!(!WATCHING.get());
        let ((), found) = watch(|| ());
        assert!(found.is_none());
        assert!(!WATCHING.get());
    }

    /// A waker that counts its wakes.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn waker() -> (Arc<Count>, Waker) {
        let c = Arc::new(Count::default());
        (c.clone(), Waker::from(c))
    }

    fn grant(gate: &mut Gate, w: &Waker, want: u32) -> Poll<usize> {
        gate.poll_grant(&mut Context::from_waker(w), want)
    }

    fn chunk(n: usize) -> Bytes {
        Bytes::from(vec![7u8; n])
    }

    #[test]
    fn a_stream_has_two_slices_out_at_most() {
        let budget = ConnBudget::new(Pool::new(1 << 20, 1 << 30));
        let mut gate = budget.gate();
        let (woken, w) = waker();
        assert_eq!(grant(&mut gate, &w, 65536), Poll::Ready(65536));
        let first = gate.lease(chunk(65536), 65536);
        assert_eq!(first.len(), 65536);
        assert_eq!(grant(&mut gate, &w, 65536), Poll::Ready(65536));
        let second = gate.lease(chunk(65536), 65536);
        assert!(grant(&mut gate, &w, 65536).is_pending());
        // h2 writes part of the first and keeps the rest: still out.
        let rest = first.slice(1000..);
        drop(first);
        assert!(grant(&mut gate, &w, 65536).is_pending());
        assert_eq!(woken.0.load(Ordering::SeqCst), 0);
        drop(rest);
        assert_eq!(woken.0.load(Ordering::SeqCst), 1);
        assert_eq!(grant(&mut gate, &w, 65536), Poll::Ready(65536));
        drop(second);
    }

    #[test]
    fn a_connection_shares_its_budget_first_come_first_served() {
        let budget = ConnBudget::new(Pool::new(80 * 1024, 1 << 30));
        let (mut a, mut b, mut c) = (budget.gate(), budget.gate(), budget.gate());
        let (_, w) = waker();
        assert_eq!(grant(&mut a, &w, 65536), Poll::Ready(65536));
        let held = a.lease(chunk(65536), 65536);
        // 16 KiB left: b waits for all of its 64 KiB, and c, though 16 KiB are free,
        // behind it.
        let (woken_b, wb) = waker();
        let (woken_c, wc) = waker();
        assert!(grant(&mut b, &wb, 65536).is_pending());
        assert!(grant(&mut c, &wc, 16384).is_pending());
        drop(held);
        assert_eq!(woken_b.0.load(Ordering::SeqCst), 1);
        assert_eq!(woken_c.0.load(Ordering::SeqCst), 1);
        assert_eq!(grant(&mut b, &wb, 65536), Poll::Ready(65536));
        assert_eq!(grant(&mut c, &wc, 16384), Poll::Ready(16384));
        // A grant not used is given back.
        b.release();
        c.release();
        // More than the budget holds is granted as much as it holds.
        let mut d = budget.gate();
        assert_eq!(grant(&mut d, &w, 1 << 20), Poll::Ready(80 * 1024));
    }

    #[test]
    fn the_server_budget_bounds_every_connection() {
        let pool = Pool::new(1 << 20, 100 * 1024);
        let (one, two) = (ConnBudget::new(pool.clone()), ConnBudget::new(pool));
        let (mut a, mut b) = (one.gate(), two.gate());
        let (_, w) = waker();
        assert_eq!(grant(&mut a, &w, 90 * 1024), Poll::Ready(90 * 1024));
        let held = a.lease(chunk(90 * 1024), 90 * 1024);
        let (woken, wb) = waker();
        assert!(grant(&mut b, &wb, 65536).is_pending());
        drop(held);
        assert_eq!(woken.0.load(Ordering::SeqCst), 0);
        assert!(grant(&mut b, &wb, 65536).is_pending());
        let Poll::Ready(Some(last)) = a.poll_slice(&mut Context::from_waker(&w)) else {
            panic!("no second slice");
        };
        drop(last);
        assert_eq!(woken.0.load(Ordering::SeqCst), 1);
        assert_eq!(grant(&mut b, &wb, 65536), Poll::Ready(65536));
    }

    #[test]
    fn a_chunk_goes_out_a_slice_at_a_time_and_holds_its_budget_to_the_last() {
        let budget = ConnBudget::new(Pool::new(300 * 1024, 1 << 30));
        let (mut a, mut b) = (budget.gate(), budget.gate());
        let (woken, w) = waker();
        let mut cx = Context::from_waker(&w);
        let slice = |a: &mut Gate| match a.poll_slice(&mut Context::from_waker(&w)) {
            Poll::Ready(Some(s)) => s,
            other => panic!("{other:?}"),
        };
        let data: Vec<u8> = (0..200 * 1024).map(|i| (i % 251) as u8).collect();
        assert_eq!(grant(&mut a, &w, 200 * 1024), Poll::Ready(200 * 1024));
        let first = a.lease(Bytes::from(data.clone()), 200 * 1024);
        let second = slice(&mut a);
        assert_eq!((first.len(), second.len()), (SLICE, SLICE));
        // Two out: the third waits for one of them to be written.
        assert!(a.poll_slice(&mut cx).is_pending());
        drop(first.clone());
        assert!(a.poll_slice(&mut cx).is_pending());
        let mut got = first.to_vec();
        drop(first);
        assert_eq!(woken.0.load(Ordering::SeqCst), 1);
        let third = slice(&mut a);
        got.extend_from_slice(&second);
        drop(second);
        let last = slice(&mut a);
        assert_eq!((last.len(), a.unsent()), (200 * 1024 - 3 * SLICE, 0));
        assert!(matches!(a.poll_slice(&mut cx), Poll::Ready(None)));
        got.extend_from_slice(&third);
        got.extend_from_slice(&last);
        assert_eq!(got, data);
        // Nothing of the chunk's budget is back until its last slice is.
        drop(third);
        assert_eq!(b.conn.available_permits(), 100 * 1024);
        drop(last);
        assert_eq!(grant(&mut b, &w, 300 * 1024), Poll::Ready(300 * 1024));
    }

    #[test]
    fn a_chunk_is_charged_what_it_holds() {
        let budget = ConnBudget::new(Pool::new(200 * 1024, 1 << 30));
        let (mut a, mut b) = (budget.gate(), budget.gate());
        let (_, w) = waker();
        // Granted 64 KiB, read 10 KiB: the rest goes back at once.
        assert_eq!(grant(&mut a, &w, 65536), Poll::Ready(65536));
        let _small = a.lease(chunk(10 * 1024), 10 * 1024);
        assert_eq!(a.conn.available_permits(), 190 * 1024);
        // A body that read more than it was granted takes what more is free.
        assert_eq!(grant(&mut b, &w, 90 * 1024), Poll::Ready(90 * 1024));
        let _more = b.lease(chunk(95 * 1024), 95 * 1024);
        assert_eq!(b.conn.available_permits(), 95 * 1024);
        assert_eq!(b.all.available_permits(), (1 << 30) - 105 * 1024);
    }

    /// A stream task whose body leases a chunk of `n` bytes every `every` and hands each to
    /// `keep`, which holds it (a client that doesn't read) or drops it (one that does).
    async fn body(budget: Arc<ConnBudget>, every: Duration, keep: impl Fn(Bytes) -> Option<Bytes>) {
        let mut gate = budget.gate();
        let mut held = Vec::new();
        loop {
            std::future::poll_fn(|cx| gate.poll_grant(cx, 1000)).await;
            held.extend(keep(gate.lease(chunk(1000), 1000)));
            tokio::time::sleep(every).await;
        }
    }

    #[tokio::test]
    async fn a_stream_whose_chunk_waits_is_ended() {
        let budget = Arc::new(ConnBudget::new(Pool::new(1 << 20, 1 << 30)));
        let stuck = Stalls::new(
            body(budget, Duration::from_millis(10), Some),
            None,
            Duration::from_millis(300),
        );
        let t = std::time::Instant::now();
        tokio::time::timeout(Duration::from_secs(3), stuck)
            .await
            .expect("never ended");
        let took = t.elapsed();
        assert!(took >= Duration::from_millis(280), "{took:?}");
        assert!(took < Duration::from_millis(1500), "{took:?}");
    }

    #[tokio::test]
    async fn a_stream_whose_chunks_are_written_goes_on() {
        let budget = Arc::new(ConnBudget::new(Pool::new(1 << 20, 1 << 30)));
        let moving = Stalls::new(
            body(budget, Duration::from_millis(20), |_| None),
            None,
            Duration::from_millis(200),
        );
        let ended = tokio::time::timeout(Duration::from_secs(1), moving).await;
        assert!(ended.is_err(), "a stream that moves was ended");
    }
}
