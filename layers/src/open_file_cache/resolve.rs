use super::entry::{Check, FileEntry, Resolved, Stamp};
use crate::path::{normalize, NormalPath, PathError};
use crate::siblings::{Siblings, SUFFIXES};
use bytes::Bytes;
use http::HeaderValue;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How paths map to files under one root. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Resolver {
    inner: Arc<ResolverInner>,
}

#[derive(Debug, Clone)]
struct ResolverInner {
    root: PathBuf,
    canonical_root: PathBuf,
    index: Vec<String>,
    listing: bool,
    hide_dotfiles: bool,
    follow_symlinks_outside_root: bool,
    inline_max: u64,
    precompressed: bool,
    vary_encoding: Option<VaryEncoding>,
}

/// Decides, from a file's `Content-Type`, whether its responses carry
/// `Vary: Accept-Encoding` (because a compression layer in front may encode them).
#[derive(Clone)]
pub struct VaryEncoding(pub Arc<dyn Fn(&HeaderValue) -> bool + Send + Sync>);

impl std::fmt::Debug for VaryEncoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VaryEncoding(..)")
    }
}

impl Resolver {
    /// Serves files under `root`, which must exist.
    pub fn new(root: impl Into<PathBuf>) -> io::Result<Self> {
        let root = root.into();
        let canonical_root = root.canonicalize()?;
        Ok(Resolver {
            inner: Arc::new(ResolverInner {
                root,
                canonical_root,
                index: vec!["index.html".into()],
                listing: false,
                hide_dotfiles: true,
                follow_symlinks_outside_root: false,
                inline_max: 64 * 1024,
                precompressed: false,
                vary_encoding: None,
            }),
        })
    }

    fn edit(mut self, f: impl FnOnce(&mut ResolverInner)) -> Self {
        f(Arc::make_mut(&mut self.inner));
        self
    }

    /// Index files tried in order for a directory (default `index.html`).
    pub fn index<I: IntoIterator<Item = S>, S: Into<String>>(self, names: I) -> Self {
        let names = names.into_iter().map(Into::into).collect();
        self.edit(|i| i.index = names)
    }

    /// Generate an HTML listing for a directory without an index file (default off).
    pub fn listing(self, on: bool) -> Self {
        self.edit(|i| i.listing = on)
    }

    /// Answer 404 for paths with a segment starting with `.` (default on).
    pub fn hide_dotfiles(self, on: bool) -> Self {
        self.edit(|i| i.hide_dotfiles = on)
    }

    /// Follow symlinks that lead outside the root (default off).
    pub fn follow_symlinks_outside_root(self, on: bool) -> Self {
        self.edit(|i| i.follow_symlinks_outside_root = on)
    }

    /// Files up to this many bytes are read into memory (default 64 KiB).
    pub fn inline_max(self, bytes: u64) -> Self {
        self.edit(|i| i.inline_max = bytes)
    }

    /// Look for precompressed siblings (`file.br`, `file.zst`, `file.gz`) when a file is
    /// opened, and keep the fresh ones open with its entry (default off).
    pub fn precompressed(self, on: bool) -> Self {
        self.edit(|i| i.precompressed = on)
    }

    /// Put `Vary: Accept-Encoding` into the prepared headers of the files for which `f`
    /// says so, judged once per file from its type: for a compression layer in front that
    /// leaves identity responses to the inner Service (see the precompress layer's
    /// `vary_from_inner`).
    pub fn vary_encoding(self, f: impl Fn(&HeaderValue) -> bool + Send + Sync + 'static) -> Self {
        let f = VaryEncoding(Arc::new(f));
        self.edit(|i| i.vary_encoding = Some(f))
    }

    fn finish(&self, entry: &mut FileEntry) {
        if let Some(VaryEncoding(f)) = &self.inner.vary_encoding {
            if f(&entry.content_type) {
                entry.headers.insert(
                    http::header::VARY,
                    HeaderValue::from_static("accept-encoding"),
                );
            }
        }
    }

    /// The inline limit set by [`inline_max`](Self::inline_max).
    pub fn inline_max_bytes(&self) -> u64 {
        self.inner.inline_max
    }

    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// Resolves a raw request path (as sent, undecoded). Blocking: call it off the event loop.
    pub fn resolve(&self, raw_path: &str) -> Resolved {
        self.resolve_checked(raw_path).0
    }

    /// Resolves a file given relative to the root (an error page), bypassing the dotfile rule.
    pub fn resolve_relative(&self, rel: &str) -> Resolved {
        self.resolve_relative_checked(rel).0
    }

    pub(crate) fn resolve_relative_checked(&self, rel: &str) -> (Resolved, Check) {
        let path = self.inner.root.join(rel.trim_start_matches('/'));
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => self.open_file(path, &m),
            _ => absent(path),
        }
    }

    /// The answer for a path that names nothing, from one `stat` on the calling thread;
    /// `None` when something exists there (or may: a refused `stat`), which
    /// [`resolve_checked`](Self::resolve_checked) then resolves on the blocking pool.
    ///
    /// A miss used to cost a round trip to the blocking pool, two thread wake-ups: a 404
    /// for a random path took 44 µs of CPU against nginx's 20 (`notfound` in bench/run.sh,
    /// in the same run). nginx makes the same `open` on its worker.
    pub(crate) fn resolve_absent(&self, raw_path: &str) -> Option<(Resolved, Check)> {
        let (_, path) = match self.target(raw_path) {
            Ok(t) => t,
            Err(answer) => return Some(answer),
        };
        match std::fs::metadata(&path) {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                Some(absent(path))
            }
            _ => None,
        }
    }

    /// The request path normalised and under the root, or the answer when it can't be:
    /// the one reading both [`resolve_absent`](Self::resolve_absent) and
    /// [`resolve_checked`](Self::resolve_checked) make of it.
    fn target(&self, raw_path: &str) -> Result<(NormalPath, PathBuf), (Resolved, Check)> {
        let i = &*self.inner;
        match normalize(raw_path, i.hide_dotfiles) {
            Ok(norm) => {
                let path = i.root.join(&norm.relative);
                Ok((norm, path))
            }
            Err(PathError::Hidden) => Err((Resolved::NotFound, Check::Never)),
            Err(_) => Err((Resolved::BadRequest, Check::Never)),
        }
    }

    pub(crate) fn resolve_checked(&self, raw_path: &str) -> (Resolved, Check) {
        let i = &*self.inner;
        let (norm, path) = match self.target(raw_path) {
            Ok(t) => t,
            Err(answer) => return answer,
        };
        let meta = match std::fs::metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                return (Resolved::Forbidden, stat_check(&path));
            }
            Err(_) => return absent(path),
        };
        if !self.inside_root(&path) {
            return (Resolved::NotFound, stat_check(&path));
        }
        if meta.is_dir() {
            if !norm.trailing_slash {
                return (Resolved::AddSlash, stat_check(&path));
            }
            for name in &i.index {
                let candidate = path.join(name);
                if let Ok(m) = std::fs::metadata(&candidate) {
                    if m.is_file() && self.inside_root(&candidate) {
                        let (resolved, check) = self.open_file(candidate, &m);
                        let both = Check::All(Box::new([check, dir_check(&path)]));
                        return (resolved, both);
                    }
                }
            }
            if i.listing {
                let (mut found, check) =
                    listing(&path, &meta, &norm.to_absolute(), i.hide_dotfiles, |p| {
                        self.inside_root(p)
                    });
                if let Resolved::File(entry) = &mut found {
                    if let Some(e) = Arc::get_mut(entry) {
                        self.finish(e);
                    }
                }
                return (found, check);
            }
            // The directory's stamp changes when an index file appears.
            return (Resolved::NotFound, stat_check(&path));
        }
        if !meta.is_file() || norm.trailing_slash {
            return (Resolved::NotFound, stat_check(&path));
        }
        self.open_file(path, &meta)
    }

    fn inside_root(&self, path: &Path) -> bool {
        if self.inner.follow_symlinks_outside_root {
            return true;
        }
        match path.canonicalize() {
            Ok(real) => real.starts_with(&self.inner.canonical_root),
            Err(_) => false,
        }
    }

    fn opened_inside_root(&self, file: &File) -> bool {
        use std::os::fd::AsRawFd;
        match std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) {
            Ok(real) => real.starts_with(&self.inner.canonical_root),
            // Without /proc, the check before the open stands alone.
            Err(_) => true,
        }
    }

    /// The siblings of `path` that exist, are regular files inside the root, and are not
    /// older than the original.
    fn siblings(&self, path: &Path, modified: std::time::SystemTime) -> Option<Arc<Siblings>> {
        let mut files = Vec::new();
        for suffix in SUFFIXES {
            let mut p = path.as_os_str().to_owned();
            p.push(suffix);
            let Ok(f) = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
                .open(&p)
            else {
                continue;
            };
            if !self.inner.follow_symlinks_outside_root && !self.opened_inside_root(&f) {
                continue;
            }
            let fresh = f
                .metadata()
                .is_ok_and(|m| m.is_file() && m.modified().is_ok_and(|t| t >= modified));
            if fresh {
                files.push((suffix, Arc::new(f)));
            }
        }
        (!files.is_empty()).then(|| Arc::new(Siblings { modified, files }))
    }

    fn open_file(&self, path: PathBuf, meta: &std::fs::Metadata) -> (Resolved, Check) {
        // O_NONBLOCK: should the path be swapped for a FIFO between stat and open, the open
        // must not hang a blocking-pool thread.
        let file = match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                return (Resolved::Forbidden, stat_check(&path))
            }
            Err(_) => return absent(path),
        };
        // The path was checked before the open; a symlink swapped in between would lead
        // elsewhere, so check what was actually opened.
        if !self.inner.follow_symlinks_outside_root && !self.opened_inside_root(&file) {
            return (Resolved::NotFound, stat_check(&path));
        }
        // The stamp of the descriptor we read from: if the file changed since the path's
        // stat, the next check sees a different stamp and reloads.
        let meta = file.metadata().unwrap_or_else(|_| meta.clone());
        if !meta.is_file() {
            return (Resolved::NotFound, stat_check(&path));
        }
        let stamp = Stamp::of(&meta);
        let modified = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
        let len = meta.len();
        let fd = Arc::new(file);
        let (body, file) = if len <= self.inner.inline_max {
            match read_whole(&fd, len) {
                Ok(b) => (Some(b), None),
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                    return (Resolved::Forbidden, stat_check(&path))
                }
                Err(_) => return absent(path),
            }
        } else {
            (None, Some(fd.clone()))
        };
        let len = body.as_ref().map_or(len, |b| b.len() as u64);
        let mut entry = FileEntry::new(
            len,
            modified,
            stamp.etag(),
            super::mime::content_type(&path),
            body,
            file,
            path.clone(),
        );
        if self.inner.precompressed {
            entry.siblings = self.siblings(&path, modified);
        }
        self.finish(&mut entry);
        (Resolved::File(Arc::new(entry)), open_check(fd, path, stamp))
    }
}

/// A check through the open descriptor, unless descriptors are scarce: one kept open per
/// cached file (like nginx's `open_file_cache`) must not starve accepting connections.
fn open_check(fd: Arc<File>, path: PathBuf, stamp: Stamp) -> Check {
    use std::os::fd::AsRawFd;
    if (fd.as_raw_fd() as u64) < fd_budget() {
        Check::Open {
            fd,
            path,
            expect: stamp,
        }
    } else {
        Check::Stat {
            path,
            expect: Some(stamp),
        }
    }
}

/// Half the open-files limit, read once (the server raises it to the hard limit at start).
#[allow(unsafe_code)] // FFI: getrlimit.
fn fd_budget() -> u64 {
    static BUDGET: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *BUDGET.get_or_init(|| {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the struct it is given.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
            lim.rlim_cur / 2
        } else {
            0
        }
    })
}

/// The directory's check, through a descriptor when it opens: its stamp changes when an
/// index file appears. `O_PATH`: nothing is read through it, it needs no read permission,
/// and opening it can't block (on a FIFO swapped in) or touch a device.
fn dir_check(path: &Path) -> Check {
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(path);
    match opened {
        Ok(d) => match d.metadata() {
            Ok(m) if m.is_dir() => open_check(Arc::new(d), path.to_path_buf(), Stamp::of(&m)),
            _ => stat_check(path),
        },
        Err(_) => stat_check(path),
    }
}

fn absent(path: PathBuf) -> (Resolved, Check) {
    (Resolved::NotFound, Check::Stat { path, expect: None })
}

fn stat_check(path: &Path) -> Check {
    Check::Stat {
        path: path.to_path_buf(),
        expect: std::fs::metadata(path).ok().map(|m| Stamp::of(&m)),
    }
}

/// Reads at most `len` bytes: a file that grew since its stat is served as it was when
/// stat'ed, and the changed stamp makes the next request reload it.
fn read_whole(file: &File, len: u64) -> io::Result<Bytes> {
    let mut buf = Vec::with_capacity(len as usize);
    file.take(len).read_to_end(&mut buf)?;
    Ok(Bytes::from(buf))
}

pub(crate) fn http_date(t: std::time::SystemTime) -> HeaderValue {
    HeaderValue::from_str(&httpdate::fmt_http_date(t))
        .unwrap_or_else(|_| HeaderValue::from_static("Thu, 01 Jan 1970 00:00:00 GMT"))
}

fn listing(
    dir: &Path,
    meta: &std::fs::Metadata,
    url_path: &str,
    hide: bool,
    inside_root: impl Fn(&Path) -> bool,
) -> (Resolved, Check) {
    let mut names: Vec<(String, bool)> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                if hide && name.starts_with('.') {
                    return None;
                }
                let kind = e.file_type().ok()?;
                // A symlink is listed only where a request for it would be served: its
                // target exists and, unless follow_symlinks_outside_root, is inside the root.
                let is_dir = if kind.is_symlink() {
                    let path = e.path();
                    if !inside_root(&path) {
                        return None;
                    }
                    std::fs::metadata(&path).ok()?.is_dir()
                } else {
                    kind.is_dir()
                };
                Some((name, is_dir))
            })
            .collect(),
        Err(_) => return (Resolved::Forbidden, stat_check(dir)),
    };
    names.sort();
    let title = escape_html(url_path);
    let mut html = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Index of {title}</title></head>\n<body><h1>Index of {title}</h1>\n<ul>\n"
    );
    if url_path != "/" {
        html.push_str("<li><a href=\"../\">../</a></li>\n");
    }
    for (name, is_dir) in names {
        let slash = if is_dir { "/" } else { "" };
        let href: String =
            percent_encoding::utf8_percent_encode(&name, percent_encoding::NON_ALPHANUMERIC)
                .to_string();
        html.push_str(&format!(
            "<li><a href=\"{href}{slash}\">{}{slash}</a></li>\n",
            escape_html(&name)
        ));
    }
    html.push_str("</ul></body></html>\n");
    let stamp = Stamp::of(meta);
    let modified = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
    let body = Bytes::from(html);
    let entry = FileEntry::new(
        body.len() as u64,
        modified,
        stamp.etag(),
        HeaderValue::from_static("text/html; charset=utf-8"),
        Some(body),
        None,
        dir.to_path_buf(),
    );
    (
        Resolved::File(Arc::new(entry)),
        Check::Stat {
            path: dir.to_path_buf(),
            expect: Some(stamp),
        },
    )
}

fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
