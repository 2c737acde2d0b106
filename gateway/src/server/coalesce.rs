//! Writes of one task poll, sent together.
//!
//! h2 flushes each time its connection is polled, and hyper polls it once per accepted
//! stream, so over TLS every response became a record and a `writev` of its own. This
//! wrapper holds what is written (and "flushed") during one poll of the connection's task
//! and sends it when the task is next polled (it wakes the task itself, so that is at
//! once): the answers to the requests that arrived in one read leave in one write.
//! [`ConnState::epoch`], advanced by [`Counted`] before each poll of the connection, tells
//! one poll from the next.

use super::conn::{ConnState, Socket};
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Past this much held, writes go through without waiting for the next poll.
const HOLD_MAX: usize = 64 * 1024;

pin_project_lite::pin_project! {
    pub(crate) struct Coalesced<S> {
        #[pin]
        inner: S,
        state: Arc<ConnState>,
        buf: Vec<u8>,
        // The poll in which the held bytes were deferred.
        deferred_at: Option<u32>,
    }
}

impl<S: Socket> Coalesced<S> {
    pub(crate) fn new(inner: S, state: Arc<ConnState>) -> Self {
        Coalesced {
            inner,
            state,
            buf: Vec::new(),
            deferred_at: None,
        }
    }

    /// Sends everything held and flushes the inner stream.
    fn poll_drain(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut this = self.project();
        while !this.buf.is_empty() {
            let n = ready!(this.inner.as_mut().poll_write(cx, this.buf))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            this.buf.drain(..n);
        }
        ready!(this.inner.as_mut().poll_flush(cx))?;
        *this.deferred_at = None;
        Poll::Ready(Ok(()))
    }

    /// Whether held bytes were deferred in an earlier poll, so are due now.
    fn due(&self) -> bool {
        self.deferred_at
            .is_some_and(|e| e != self.state.epoch.load(Ordering::Relaxed))
    }
}

impl<S: Socket> Socket for Coalesced<S> {
    fn tcp(&self) -> Option<&TcpStream> {
        None
    }
}

impl<S: Socket> AsyncRead for Coalesced<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.due() {
            // Pending here means the socket is full; reading goes on meanwhile, and the
            // stream's waker brings us back when it can take more.
            if let Poll::Ready(Err(e)) = self.as_mut().poll_drain(cx) {
                return Poll::Ready(Err(e));
            }
        }
        self.project().inner.poll_read(cx, buf)
    }
}

impl<S: Socket> AsyncWrite for Coalesced<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        if self.due() || self.buf.len() + len > HOLD_MAX {
            ready!(self.as_mut().poll_drain(cx))?;
            if len >= HOLD_MAX {
                return self.project().inner.poll_write_vectored(cx, bufs);
            }
        }
        let this = self.project();
        for b in bufs {
            this.buf.extend_from_slice(b);
        }
        Poll::Ready(Ok(len))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.buf.is_empty() {
            return self.project().inner.poll_flush(cx);
        }
        if self.due() {
            return self.poll_drain(cx);
        }
        if self.deferred_at.is_none() {
            let epoch = self.state.epoch.load(Ordering::Relaxed);
            *self.as_mut().project().deferred_at = Some(epoch);
            // Polled again at once, after whatever else this poll produces.
            cx.waker().wake_by_ref();
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.as_mut().poll_drain(cx))?;
        self.project().inner.poll_shutdown(cx)
    }
}

pin_project_lite::pin_project! {
    /// A connection future that counts its polls in [`ConnState::epoch`], for the
    /// [`Coalesced`] IO beneath it; other connections don't pay for the count.
    pub(crate) struct Counted<F> {
        #[pin]
        inner: F,
        state: Arc<ConnState>,
    }
}

impl<F> Counted<F> {
    pub(crate) fn new(inner: F, state: Arc<ConnState>) -> Self {
        Counted { inner, state }
    }

    pub(crate) fn inner(self: Pin<&mut Self>) -> Pin<&mut F> {
        self.project().inner
    }
}

impl<F: std::future::Future> std::future::Future for Counted<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        this.state.epoch.fetch_add(1, Ordering::Relaxed);
        this.inner.poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::task::{Wake, Waker};
    use tokio::io::DuplexStream;

    impl Socket for DuplexStream {
        fn tcp(&self) -> Option<&TcpStream> {
            None
        }
    }

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn peer_has(peer: &mut DuplexStream) -> Vec<u8> {
        let mut out = [0u8; 64];
        let mut rb = ReadBuf::new(&mut out);
        let mut cx = Context::from_waker(Waker::noop());
        match Pin::new(peer).poll_read(&mut cx, &mut rb) {
            Poll::Ready(Ok(())) => rb.filled().to_vec(),
            _ => Vec::new(),
        }
    }

    #[test]
    fn writes_of_one_poll_leave_together_on_the_next() {
        let (ours, mut peer) = tokio::io::duplex(1024);
        let state = Arc::new(ConnState::default());
        let mut io = Box::pin(Coalesced::new(ours, state.clone()));
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);

        // One poll: two responses, each written and flushed.
        for part in [&b"one "[..], &b"two"[..]] {
            assert!(matches!(
                io.as_mut().poll_write(&mut cx, part),
                Poll::Ready(Ok(_))
            ));
            assert!(matches!(
                io.as_mut().poll_flush(&mut cx),
                Poll::Ready(Ok(()))
            ));
        }
        assert!(peer_has(&mut peer).is_empty(), "held during the poll");
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "the task woke itself once"
        );

        // The next poll sends both, in one write.
        state.epoch.fetch_add(1, Ordering::Relaxed);
        let mut sink = [0u8; 8];
        let mut rb = ReadBuf::new(&mut sink);
        assert!(io.as_mut().poll_read(&mut cx, &mut rb).is_pending());
        assert_eq!(peer_has(&mut peer), b"one two");

        // Shutdown sends what is held at once.
        assert!(matches!(
            io.as_mut().poll_write(&mut cx, b"bye"),
            Poll::Ready(Ok(3))
        ));
        assert!(io.as_mut().poll_shutdown(&mut cx).is_ready());
        assert_eq!(peer_has(&mut peer), b"bye");
    }
}
