//! `sendfile(2)` under hyper, for large files on plain TCP.
//!
//! hyper owns the socket and writes whatever `Bytes` a body yields, so a file can't be handed
//! to the kernel directly. Instead, a [`FileBody`](crate::static_files::FileBody) polled on a
//! plain connection yields a *marker*: a slice of `REGION`, a static range of addresses
//! that no other `Bytes` can point into, and records which file extent it stands for in the
//! connection's [`Channel`]. When hyper writes (always with `writev`, never copying body
//! chunks: the server forces its queue strategy), the connection's IO sees the marker's
//! address and calls `sendfile` for the extent instead, so file pages go from the page cache
//! to the socket with no copy through user space. One extent is in flight at a time: the
//! body waits until the IO has sent the last one, so an address always maps to one extent.
//!
//! The bytes at `REGION` are zeros and are never sent: a body only yields markers while its
//! own connection's IO is being polled (see [`Scope`]), and only plain-TCP connections set
//! one up.
//!
//! A server that wants this (gatehouse's does; anyone else can ignore the module, and file
//! bodies then yield the file's bytes) gives each plain-TCP HTTP/1.1 connection a
//! [`Channel`], polls the connection inside a [`Scope`] over it, sends the connection's
//! writes through [`Channel::poll_write`], and calls
//! [`FileBody::allow_sendfile`](super::FileBody::allow_sendfile) on a response body that it
//! hands to hyper unchanged. The thread-local that makes a channel current is the one piece
//! of global state here: a body has no other way to find its connection under hyper.

use bytes::Bytes;
use std::cell::RefCell;
use std::fs::File;
use std::future::Future;
use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// The largest extent one marker stands for.
pub(crate) const REGION_LEN: usize = 4 * 1024 * 1024;
static REGION: [u8; REGION_LEN] = [0; REGION_LEN];

fn in_region(s: &[u8]) -> Option<usize> {
    let start = REGION.as_ptr() as usize;
    let p = s.as_ptr() as usize;
    (p >= start && p < start + REGION_LEN && !s.is_empty()).then(|| p - start)
}

struct Job {
    file: Arc<File>,
    offset: u64,
    len: usize,
}

#[derive(Default)]
struct State {
    job: Option<Job>,
    waiting: Option<Waker>,
}

/// The hand-off between a connection's bodies and its IO.
#[derive(Default)]
pub struct Channel {
    state: Mutex<State>,
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<Channel>>> = const { RefCell::new(None) };
}

/// The channel of the connection being polled on this thread, if it can sendfile.
pub(crate) fn current() -> Option<Arc<Channel>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Whether `channel` is the one of the connection being polled on this thread.
pub(crate) fn is_current(channel: &Arc<Channel>) -> bool {
    CURRENT.with(|c| c.borrow().as_ref().is_some_and(|c| Arc::ptr_eq(c, channel)))
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let busy = self.state.lock().map(|s| s.job.is_some()).unwrap_or(false);
        f.debug_struct("Channel")
            .field("extent_in_flight", &busy)
            .finish()
    }
}

impl Channel {
    /// A marker standing for `len` bytes of `file` at `offset` (at most [`REGION_LEN`]),
    /// `Pending` until the previous marker has been sent, or `None` if the channel is
    /// unusable (the caller then reads the file itself).
    pub(crate) fn offer(
        &self,
        cx: &mut Context<'_>,
        file: &Arc<File>,
        offset: u64,
        len: u64,
    ) -> Poll<Option<Bytes>> {
        // An empty marker would never be recognised by `poll_write`, and its job would
        // block every later one.
        if len == 0 {
            return Poll::Ready(None);
        }
        let Ok(mut st) = self.state.lock() else {
            return Poll::Ready(None);
        };
        if st.job.is_some() {
            st.waiting = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let len = (len as usize).min(REGION_LEN);
        st.job = Some(Job {
            file: file.clone(),
            offset,
            len,
        });
        Poll::Ready(Some(Bytes::from_static(&REGION[..len])))
    }

    /// Writes `bufs`, sending any marker with `sendfile`. `None` if no marker is among them,
    /// so that the caller writes them as usual.
    #[allow(unsafe_code)] // FFI: sendmsg, sendfile.
    pub fn poll_write(
        &self,
        stream: &TcpStream,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Option<Poll<io::Result<usize>>> {
        let first_marker = bufs.iter().position(|b| in_region(b).is_some())?;
        let fd = stream.as_raw_fd();
        if first_marker > 0 {
            // The head (and any memory parts) before the extent, corked with MSG_MORE so
            // that it leaves in the same segment as the file's first bytes.
            let head = &bufs[..first_marker];
            return Some(poll_io(stream, cx, || {
                // SAFETY: a msghdr over the caller's IoSlices, which are iovecs on Unix and
                // outlive the call.
                let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
                msg.msg_iov = head.as_ptr() as *mut libc::iovec;
                msg.msg_iovlen = head.len() as _;
                // SAFETY: msg is initialised above and its iovecs are alive.
                let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_MORE | libc::MSG_NOSIGNAL) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            }));
        }
        let at = in_region(&bufs[0]).unwrap_or(0);
        let want = bufs[0].len();
        let (file, offset, job_len) = {
            let Ok(st) = self.state.lock() else {
                return Some(Poll::Ready(Err(io::Error::other(
                    "sendfile state poisoned",
                ))));
            };
            let Some(job) = st.job.as_ref() else {
                return Some(Poll::Ready(Err(io::Error::other(
                    "a file marker with no extent",
                ))));
            };
            (job.file.clone(), job.offset, job.len)
        };
        let res = poll_io(stream, cx, || {
            let mut off = (offset + at as u64) as libc::off_t;
            // SAFETY: both descriptors are open for the duration of the call.
            let n = unsafe { libc::sendfile(fd, file.as_raw_fd(), &mut off, want) };
            match n {
                n if n < 0 => Err(io::Error::last_os_error()),
                0 => Err(truncated()),
                n => Ok(n as usize),
            }
        });
        if let Poll::Ready(Ok(n)) = res {
            if at + n >= job_len {
                if let Ok(mut st) = self.state.lock() {
                    st.job = None;
                    if let Some(w) = st.waiting.take() {
                        w.wake();
                    }
                }
            }
        }
        Some(res)
    }
}

/// Runs a raw write on a non-blocking socket, waiting for writability as tokio does.
fn poll_io(
    stream: &TcpStream,
    cx: &mut Context<'_>,
    mut f: impl FnMut() -> io::Result<usize>,
) -> Poll<io::Result<usize>> {
    loop {
        if let Err(e) = std::task::ready!(stream.poll_write_ready(cx)) {
            return Poll::Ready(Err(e));
        }
        match stream.try_io(Interest::WRITABLE, &mut f) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            other => return Poll::Ready(other),
        }
    }
}

pin_project_lite::pin_project! {
    /// Makes a connection's channel current on the thread while its future is polled.
    #[derive(Debug)]
    pub struct Scope<F> {
        #[pin]
        inner: F,
        channel: Arc<Channel>,
    }
}

impl<F> Scope<F> {
    pub fn new(inner: F, channel: Arc<Channel>) -> Self {
        Scope { inner, channel }
    }

    pub fn inner(self: Pin<&mut Self>) -> Pin<&mut F> {
        self.project().inner
    }

    /// The future, out of its scope.
    pub fn into_inner(self) -> F {
        self.inner
    }
}

impl<F: Future> Future for Scope<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _restore = Restore(CURRENT.with(|c| c.replace(Some(this.channel.clone()))));
        this.inner.poll(cx)
    }
}

/// Puts back the channel that was current, even when the poll panics (tokio keeps the
/// thread, and the next task must not find this connection's channel).
struct Restore(Option<Arc<Channel>>);

impl Drop for Restore {
    fn drop(&mut self) {
        let prev = self.0.take();
        CURRENT.with(|c| *c.borrow_mut() = prev);
    }
}

/// A file that ended before the length its response promised (truncated while sent).
pub(crate) fn truncated() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "file truncated while being sent",
    )
}
