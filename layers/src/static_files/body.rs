//! The body of a large file, a range of one, or a multipart/byteranges response: memory
//! parts and file extents, the latter read in bounded chunks.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::collections::VecDeque;
use std::fs::File;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::task::JoinHandle;

/// What the static-file Service answers with: nothing, bytes in memory (a small file, a
/// message), or a file streamed from disk.
#[derive(Debug)]
pub enum StaticBody {
    Empty,
    Full(Option<Bytes>),
    File(FileBody),
}

impl StaticBody {
    pub fn empty() -> Self {
        StaticBody::Empty
    }
}

impl From<Bytes> for StaticBody {
    fn from(b: Bytes) -> Self {
        StaticBody::Full(Some(b))
    }
}

impl Body for StaticBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match self.get_mut() {
            StaticBody::Empty => Poll::Ready(None),
            StaticBody::Full(b) => Poll::Ready(
                b.take()
                    .filter(|b| !b.is_empty())
                    .map(|b| Ok(Frame::data(b))),
            ),
            StaticBody::File(f) => Pin::new(f).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            StaticBody::Empty => true,
            StaticBody::Full(b) => b.as_ref().is_none_or(|b| b.is_empty()),
            StaticBody::File(f) => f.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            StaticBody::Empty => SizeHint::with_exact(0),
            StaticBody::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            StaticBody::File(f) => f.size_hint(),
        }
    }
}

/// Bytes read per chunk: the memory a streaming response holds at once.
pub const CHUNK: usize = 256 * 1024;
/// What a chunk's buffer holds beside its bytes (a page of slack, so that the bytes can start mid-page).
pub const READ_PAD: usize = 4096;

/// A part of a [`FileBody`]: bytes in memory, or an extent of the file.
#[derive(Debug, Clone)]
pub enum Segment {
    Bytes(Bytes),
    File { offset: u64, len: u64 },
}

/// A body of memory parts and file extents, read in chunks of at most [`CHUNK`] bytes.
pub struct FileBody {
    segments: VecDeque<Segment>,
    file: Option<Arc<File>>,
    pending: Option<JoinHandle<io::Result<Bytes>>>,
    remaining: u64,
    /// Set by the server when this is the whole response body it hands to hyper: the
    /// connection whose writer turns markers into `sendfile`.
    sendfile: Option<Arc<super::sendfile::Channel>>,
    /// The most one read takes.
    max_chunk: usize,
}

impl std::fmt::Debug for FileBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileBody")
            .field("segments", &self.segments)
            .field("remaining", &self.remaining)
            .field("reading", &self.pending.is_some())
            .field("sendfile", &self.sendfile.is_some())
            .finish()
    }
}

impl FileBody {
    pub fn new(file: Option<Arc<File>>, segments: VecDeque<Segment>) -> Self {
        let remaining = segments
            .iter()
            .map(|s| match s {
                Segment::Bytes(b) => b.len() as u64,
                Segment::File { len, .. } => *len,
            })
            .sum();
        FileBody {
            segments,
            file,
            pending: None,
            remaining,
            sendfile: None,
            max_chunk: CHUNK,
        }
    }

    /// Lets file extents go out with `sendfile` on the connection being polled now (see
    /// [`sendfile`](super::sendfile)); with none, nothing changes. Only a server may call
    /// this, on a body it writes to the socket as it is: a layer that reads the bytes (to
    /// compress them, say) must see the file's real bytes. The body stays bound to that
    /// connection: polled anywhere else, it reads the file.
    pub fn allow_sendfile(&mut self) {
        self.sendfile = super::sendfile::current();
    }

    /// Caps the next reads at `n` bytes (a server's HTTP/2 send budget, say).
    pub fn set_max_chunk(&mut self, n: usize) {
        self.max_chunk = n.clamp(1, CHUNK);
    }

    /// Bytes still to come.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    fn took(&mut self, chunk: Bytes) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let n = chunk.len() as u64;
        self.remaining = self.remaining.saturating_sub(n);
        if let Some(Segment::File { offset, len }) = self.segments.front_mut() {
            *offset += n;
            *len -= n.min(*len);
            if *len == 0 {
                self.segments.pop_front();
            }
        }
        Poll::Ready(Some(Ok(Frame::data(chunk))))
    }
}

impl Body for FileBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = &mut *self;
        if let Some(handle) = this.pending.as_mut() {
            let joined = ready!(Pin::new(handle).poll(cx));
            this.pending = None;
            return match joined {
                Ok(Ok(chunk)) => this.took(chunk),
                Ok(Err(e)) => Poll::Ready(Some(Err(e))),
                Err(e) => Poll::Ready(Some(Err(io::Error::other(e)))),
            };
        }
        loop {
            match this.segments.front() {
                None => return Poll::Ready(None),
                Some(Segment::Bytes(_)) => {
                    if let Some(Segment::Bytes(b)) = this.segments.pop_front() {
                        this.remaining = this.remaining.saturating_sub(b.len() as u64);
                        return Poll::Ready(Some(Ok(Frame::data(b))));
                    }
                }
                Some(&Segment::File { len: 0, .. }) => {
                    this.segments.pop_front();
                }
                Some(&Segment::File { offset, len }) => {
                    let Some(file) = this.file.clone() else {
                        return Poll::Ready(Some(Err(io::Error::other("no file to read"))));
                    };
                    if let Some(ch) = &this.sendfile {
                        if super::sendfile::is_current(ch) {
                            match ch.offer(cx, &file, offset, len) {
                                Poll::Ready(Some(marker)) => return this.took(marker),
                                Poll::Ready(None) => {}
                                Poll::Pending => return Poll::Pending,
                            }
                        }
                    }
                    let want = len.min(this.max_chunk as u64) as usize;
                    // Pages already in the page cache are read here, on the event loop, as
                    // nginx does; anything that would wait for the disk goes to the pool.
                    match read_nowait(&file, offset, want) {
                        Ok(Some(chunk)) => return this.took(chunk),
                        Ok(None) => {}
                        Err(e) => return Poll::Ready(Some(Err(e))),
                    }
                    // Outside a tokio runtime (a body collected by another executor) there
                    // is no pool: the read blocks where it is.
                    let Ok(rt) = tokio::runtime::Handle::try_current() else {
                        return match read_at(&file, offset, want) {
                            Ok(chunk) => this.took(chunk),
                            Err(e) => Poll::Ready(Some(Err(e))),
                        };
                    };
                    let mut handle = rt.spawn_blocking(move || read_at(&file, offset, want));
                    match Pin::new(&mut handle).poll(cx) {
                        Poll::Ready(Ok(Ok(chunk))) => return this.took(chunk),
                        Poll::Ready(Ok(Err(e))) => return Poll::Ready(Some(Err(e))),
                        Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(io::Error::other(e)))),
                        Poll::Pending => {
                            this.pending = Some(handle);
                            return Poll::Pending;
                        }
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0 && self.pending.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

/// `preadv2(RWF_NOWAIT)`: the bytes if they are all in memory, `None` if reading would
/// block on the disk (or the kernel lacks the flag).
/// A buffer for `want` bytes read from a file, and where in it they start: mid-page.
///
/// rustls copies each record's plaintext into a buffer 5 bytes past where its allocation
/// starts, often a page boundary. A source a few bytes before the destination, modulo
/// 4 KiB, makes each load wait on the store just before it (4K aliasing): rws measured
/// that copy 14 times slower from a page-aligned file buffer. Starting the bytes 2 KiB
/// into a page keeps them far from any such destination.
fn mid_page(want: usize) -> (Vec<u8>, usize) {
    let buf: Vec<u8> = Vec::with_capacity(want + READ_PAD);
    let addr = buf.as_ptr() as usize;
    let start = (2048 + 4096 - addr % 4096) % 4096;
    (buf, start)
}

#[allow(unsafe_code)] // FFI: preadv2(RWF_NOWAIT) into spare capacity.
fn read_nowait(file: &File, offset: u64, want: usize) -> io::Result<Option<Bytes>> {
    use std::os::fd::AsRawFd;
    let (mut buf, start) = mid_page(want);
    let iov = libc::iovec {
        // SAFETY: start + want is within the capacity.
        iov_base: unsafe { buf.as_mut_ptr().add(start) }.cast(),
        iov_len: want,
    };
    // SAFETY: the iovec points at `want` bytes of spare capacity owned by `buf`, which
    // outlives the call; the kernel writes at most `want` bytes.
    let n = unsafe {
        libc::preadv2(
            file.as_raw_fd(),
            &iov,
            1,
            offset as libc::off_t,
            libc::RWF_NOWAIT,
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN)
            | Some(libc::EOPNOTSUPP)
            | Some(libc::ENOSYS)
            | Some(libc::EINVAL) => Ok(None),
            _ => Err(e),
        };
    }
    if n == 0 {
        return Err(super::sendfile::truncated());
    }
    // SAFETY: the first `start` bytes are zeroed here, and the kernel initialised the
    // `n` after them.
    unsafe {
        std::ptr::write_bytes(buf.as_mut_ptr(), 0, start);
        buf.set_len(start + n as usize);
    }
    Ok(Some(Bytes::from(buf).slice(start..)))
}

fn read_at(file: &File, offset: u64, want: usize) -> io::Result<Bytes> {
    use std::os::unix::fs::FileExt;
    let (mut buf, start) = mid_page(want);
    buf.resize(start + want, 0);
    let n = file.read_at(&mut buf[start..], offset)?;
    if n == 0 {
        return Err(super::sendfile::truncated());
    }
    buf.truncate(start + n);
    Ok(Bytes::from(buf).slice(start..))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::io::Write;

    fn file_with(data: &[u8]) -> (tempfile::NamedTempFile, Arc<File>) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(data).unwrap();
        let opened = Arc::new(File::open(f.path()).unwrap());
        (f, opened)
    }

    #[test]
    fn file_chunks_start_mid_page_and_hold_the_file_bytes() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let (_f, file) = file_with(&data);
        for chunk in [
            read_at(&file, 1000, 256 * 1024).unwrap(),
            read_nowait(&file, 1000, 256 * 1024).unwrap().unwrap(),
        ] {
            assert_eq!(chunk.as_ptr() as usize % 4096, 2048);
            assert_eq!(&chunk[..], &data[1000..1000 + 256 * 1024]);
        }
    }

    /// A body bound to one connection's channel yields a marker only while that
    /// connection is polled; under another connection's scope, or none, it reads the file.
    #[tokio::test]
    async fn a_body_allowed_sendfile_marks_only_on_its_own_connection() {
        use super::super::sendfile::{Channel, Scope};
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 249) as u8).collect();
        let (_keep, file) = file_with(&data);
        let body = || {
            FileBody::new(
                Some(file.clone()),
                VecDeque::from([Segment::File {
                    offset: 0,
                    len: data.len() as u64,
                }]),
            )
        };
        let own = Arc::new(Channel::default());
        let other = Arc::new(Channel::default());

        let mut b = body();
        Scope::new(async { b.allow_sendfile() }, own.clone()).await;
        let on_own = Scope::new(async { b.frame().await }, own.clone())
            .await
            .unwrap()
            .unwrap()
            .into_data()
            .unwrap();
        assert_eq!(on_own.len(), data.len());
        assert!(
            on_own.iter().all(|&x| x == 0),
            "its own connection gets a marker, whose bytes are never sent"
        );

        for scope in [Some(other), None] {
            let mut b = body();
            Scope::new(async { b.allow_sendfile() }, own.clone()).await;
            let got = match scope {
                Some(ch) => Scope::new(async { b.collect().await }, ch).await,
                None => b.collect().await,
            };
            assert_eq!(
                got.unwrap().to_bytes(),
                &data[..],
                "away from its connection it reads the file"
            );
        }
    }

    // Without a connection to sendfile on, extents are read in chunks.
    #[tokio::test]
    async fn reads_extents_and_memory_parts_in_order() {
        let data: Vec<u8> = (0..700_000u32).map(|i| (i % 253) as u8).collect();
        let (_keep, file) = file_with(&data);
        let segs = VecDeque::from([
            Segment::Bytes(Bytes::from_static(b"head")),
            Segment::File {
                offset: 5,
                len: 600_000,
            },
            Segment::Bytes(Bytes::from_static(b"tail")),
        ]);
        let body = FileBody::new(Some(file), segs);
        assert_eq!(body.size_hint().exact(), Some(600_008));
        let got = body.collect().await.unwrap().to_bytes();
        assert_eq!(&got[..4], b"head");
        assert!(got[4..600_004] == data[5..600_005]);
        assert_eq!(&got[600_004..], b"tail");
    }

    #[tokio::test]
    async fn a_truncated_file_ends_the_body_with_an_error() {
        let (keep, file) = file_with(&vec![7u8; 1_000_000]);
        let mut body = FileBody::new(
            Some(file),
            VecDeque::from([Segment::File {
                offset: 0,
                len: 1_000_000,
            }]),
        );
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert!(!first.is_empty());
        keep.as_file().set_len(10).unwrap();
        let mut failed = false;
        while let Some(frame) = body.frame().await {
            if frame.is_err() {
                failed = true;
                break;
            }
        }
        assert!(failed, "the short file is reported, never padded");
    }
}
