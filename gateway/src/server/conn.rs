//! One HTTP/1.1 connection: hyper over the socket, with the two timers nginx users expect.
//!
//! - `keep_alive`: how long a connection may wait for the first byte of its next request.
//! - `header_read`: how long a request head may take from its first byte (slowloris).
//!
//! hyper arms its header-read timer whenever it starts waiting for a head, idle or not.
//! [`ConnTimer`] gives it a sleep that lasts `keep_alive` until the socket delivers a byte
//! and `header_read` from then on; [`TrackedIo`] tells it when a byte arrived with one
//! relaxed store per read.

use super::sendfile::Channel;
use hyper::rt::{Sleep, Timer};
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

#[derive(Default)]
pub(crate) struct Activity {
    got_bytes: AtomicBool,
}

pin_project_lite::pin_project! {
    /// The socket as hyper sees it: reads are noted for the head timer, and writes that
    /// carry a file marker go out with `sendfile` (see [`super::sendfile`]).
    pub(crate) struct TrackedIo {
        #[pin]
        stream: TcpStream,
        activity: Arc<Activity>,
        sendfile: Option<Arc<Channel>>,
    }
}

impl TrackedIo {
    pub(crate) fn new(
        stream: TcpStream,
        activity: Arc<Activity>,
        sendfile: Option<Arc<Channel>>,
    ) -> TokioIo<Self> {
        TokioIo::new(TrackedIo {
            stream,
            activity,
            sendfile,
        })
    }
}

impl AsyncRead for TrackedIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        let before = buf.filled().len();
        let res = this.stream.poll_read(cx, buf);
        if buf.filled().len() > before {
            this.activity.got_bytes.store(true, Ordering::Relaxed);
        }
        res
    }
}

impl AsyncWrite for TrackedIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        if let Some(ch) = this.sendfile {
            if let Some(res) = ch.poll_write(&this.stream, cx, &[io::IoSlice::new(buf)]) {
                return res;
            }
        }
        this.stream.poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        if let Some(ch) = this.sendfile {
            if let Some(res) = ch.poll_write(&this.stream, cx, bufs) {
                return res;
            }
        }
        this.stream.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().stream.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().stream.poll_shutdown(cx)
    }
}

/// hyper's timer for one connection.
#[derive(Clone)]
pub(crate) struct ConnTimer {
    pub(crate) activity: Arc<Activity>,
    pub(crate) keep_alive: Duration,
    pub(crate) header_read: Duration,
}

impl Timer for ConnTimer {
    fn sleep(&self, _duration: Duration) -> Pin<Box<dyn Sleep>> {
        self.head_sleep()
    }

    fn sleep_until(&self, _deadline: Instant) -> Pin<Box<dyn Sleep>> {
        self.head_sleep()
    }
}

impl ConnTimer {
    fn head_sleep(&self) -> Pin<Box<dyn Sleep>> {
        // The flag may still be set by the bytes of the previous head, which hyper parsed
        // without polling this timer: start idle, and count only bytes from now on.
        self.activity.got_bytes.store(false, Ordering::Relaxed);
        Box::pin(HeadSleep {
            sleep: tokio::time::sleep_until((Instant::now() + self.keep_alive).into()),
            activity: self.activity.clone(),
            header_read: self.header_read,
            reading: false,
        })
    }
}

pin_project_lite::pin_project! {
    struct HeadSleep {
        #[pin]
        sleep: tokio::time::Sleep,
        activity: Arc<Activity>,
        header_read: Duration,
        reading: bool,
    }
}

impl Future for HeadSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut this = self.project();
        if !*this.reading && this.activity.got_bytes.swap(false, Ordering::Relaxed) {
            *this.reading = true;
            let deadline = Instant::now() + *this.header_read;
            this.sleep.as_mut().reset(deadline.into());
        }
        this.sleep.poll(cx)
    }
}

impl Sleep for HeadSleep {}
