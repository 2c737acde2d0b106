use bytes::Bytes;
use http::header::{ACCEPT_RANGES, CONTENT_LENGTH, CONTENT_TYPE, ETAG, LAST_MODIFIED};
use http::{HeaderMap, HeaderValue};
use std::fs::{File, Metadata};
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

/// What a request path resolved to. The layer puts one in the request's extensions; the
/// static Service turns it into a response.
#[derive(Debug, Clone)]
pub enum Resolved {
    /// A regular file, an index file, or a generated directory listing.
    File(Arc<FileEntry>),
    /// A directory named without its trailing slash: redirect to the path plus `/`.
    AddSlash,
    /// Nothing there, or hidden (dotfiles, symlinks out of the root).
    NotFound,
    /// The file exists but can't be read.
    Forbidden,
    /// The path itself is malformed (bad escape, NUL, backslash).
    BadRequest,
}

/// Everything a hit needs, computed once when the file is opened.
#[derive(Debug)]
pub struct FileEntry {
    pub len: u64,
    pub modified: SystemTime,
    /// A strong validator from the inode, size and modification time (RFC 9110 §8.8.3).
    pub etag: HeaderValue,
    pub last_modified: HeaderValue,
    pub content_type: HeaderValue,
    /// The whole body, for files up to the inline limit.
    pub body: Option<Bytes>,
    /// An open descriptor for larger files, read with `pread` so it can be shared.
    pub file: Option<Arc<File>>,
    /// Where the bytes live on disk (for diagnostics).
    pub path: PathBuf,
    /// The headers of a full 200 response, built once: `Content-Type`, `Content-Length`,
    /// `Accept-Ranges`, `ETag` and `Last-Modified`. Cloning them costs less than inserting
    /// five headers into a new map on every request.
    pub headers: HeaderMap,
    /// Fresh precompressed copies beside the file, when the resolver looks for them.
    pub siblings: Option<Arc<crate::siblings::Siblings>>,
}

impl FileEntry {
    pub(crate) fn new(
        len: u64,
        modified: SystemTime,
        etag: HeaderValue,
        content_type: HeaderValue,
        body: Option<Bytes>,
        file: Option<Arc<File>>,
        path: PathBuf,
    ) -> FileEntry {
        let last_modified = super::resolve::http_date(modified);
        let mut headers = HeaderMap::with_capacity(8);
        headers.insert(CONTENT_TYPE, content_type.clone());
        headers.insert(CONTENT_LENGTH, HeaderValue::from(len));
        headers.insert(ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        headers.insert(ETAG, etag.clone());
        headers.insert(LAST_MODIFIED, last_modified.clone());
        FileEntry {
            len,
            modified,
            etag,
            last_modified,
            content_type,
            body,
            file,
            path,
            headers,
            siblings: None,
        }
    }
}

/// The identity of a file version: a change to any field is a new version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: i64,
    mtime_nsec: i64,
    dir: bool,
}

impl Stamp {
    pub(crate) fn of(m: &Metadata) -> Stamp {
        Stamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: m.mtime(),
            mtime_nsec: m.mtime_nsec(),
            dir: m.is_dir(),
        }
    }

    pub(crate) fn etag(&self) -> HeaderValue {
        let s = format!(
            "\"{:x}-{:x}-{:x}.{:x}\"",
            self.ino, self.len, self.mtime, self.mtime_nsec
        );
        HeaderValue::from_str(&s).unwrap_or_else(|_| HeaderValue::from_static("\"0\""))
    }
}

/// Whether an open file still has `expect`'s length and mtime and is still linked. A
/// descriptor's device and inode can't change, so they are not compared. A plain `fstat`,
/// not std's `File::metadata`, which tries `statx` first: this runs on every hit, and
/// `statx` costs about 25 ns more per call here (300 vs 280 ns, `fstat` vs `statx` on one
/// descriptor in a loop).
#[allow(unsafe_code)] // FFI: fstat, cheaper here than std's statx.
fn unchanged(fd: &File, expect: &Stamp) -> bool {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `fd` owns an open descriptor, and `fstat` fills the whole struct when it
    // returns 0, the only case in which it is read.
    if unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: as above, `fstat` returned 0.
    let st = unsafe { st.assume_init() };
    st.st_nlink > 0
        && u64::try_from(st.st_size).is_ok_and(|len| len == expect.len)
        && st.st_mtime == expect.mtime
        && st.st_mtime_nsec == expect.mtime_nsec
}

/// How a cached answer is checked before it is trusted again.
#[derive(Debug, Clone)]
pub(crate) enum Check {
    /// The answer depends on the path's spelling alone (hidden, malformed).
    Never,
    /// The path must still stat to this stamp, or still be absent (`None`).
    Stat {
        path: PathBuf,
        expect: Option<Stamp>,
    },
    /// What `path` named when it was opened, kept open: an `fstat` of the descriptor
    /// (no path walk) shows an edit in place, and a replacement or deletion, which unlinks
    /// it; [`still_valid`](Self::still_valid) stats the path, for a directory or symlink
    /// switched on the way.
    Open {
        fd: Arc<File>,
        path: PathBuf,
        expect: Stamp,
    },
    /// Every one of these (an index file and its directory, which changes when a
    /// preferred index file appears).
    All(Box<[Check]>),
}

impl Check {
    /// The full check: a `stat` of each path.
    pub(crate) fn still_valid(&self) -> bool {
        match self {
            Check::Never => true,
            Check::Stat { path, expect } => match (std::fs::metadata(path), expect) {
                (Ok(m), Some(stamp)) => Stamp::of(&m) == *stamp,
                (Err(_), None) => true,
                _ => false,
            },
            Check::Open { path, expect, .. } => {
                std::fs::metadata(path).is_ok_and(|m| Stamp::of(&m) == *expect)
            }
            Check::All(checks) => checks.iter().all(Check::still_valid),
        }
    }

    /// The same check without descriptors, for a cache that trusts entries for `valid`
    /// and never calls [`quick`](Self::quick): kept open, they would serve nothing.
    pub(crate) fn by_path(self) -> Check {
        match self {
            Check::Open { path, expect, .. } => Check::Stat {
                path,
                expect: Some(expect),
            },
            Check::All(checks) => {
                Check::All(checks.into_vec().into_iter().map(Check::by_path).collect())
            }
            other => other,
        }
    }

    /// The per-request check through open descriptors alone: `Some(changed or not)`, or
    /// `None` when some part can only be checked by path.
    pub(crate) fn quick(&self) -> Option<bool> {
        match self {
            Check::Never => Some(true),
            Check::Stat { .. } => None,
            Check::Open { fd, expect, .. } => Some(unchanged(fd, expect)),
            Check::All(checks) => {
                let mut all = Some(true);
                for c in checks.iter() {
                    match c.quick() {
                        Some(false) => return Some(false),
                        None => all = None,
                        Some(true) => {}
                    }
                }
                all
            }
        }
    }
}
