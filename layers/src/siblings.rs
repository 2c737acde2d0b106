//! Precompressed copies of a file that sit beside it on disk (`app.js.br`, `app.js.zst`,
//! `app.js.gz`). The open-file cache finds them when it opens a file; the static Service
//! passes them on in the response's extensions; the precompress layer sends one in place
//! of compressing the file itself.

use std::fs::File;
use std::sync::Arc;
use std::time::SystemTime;

/// The suffixes looked for, one per coding gatehouse can send.
pub const SUFFIXES: [&str; 3] = [".br", ".zst", ".gz"];

/// The fresh precompressed siblings of one version of a file. Put in a response's
/// extensions as `Arc<Siblings>`.
#[derive(Debug)]
pub struct Siblings {
    /// The original's modification time: a sibling older than this is stale.
    pub modified: SystemTime,
    /// Each sibling's suffix (one of [`SUFFIXES`]) and open descriptor.
    pub files: Vec<(&'static str, Arc<File>)>,
}

impl Siblings {
    /// The sibling with `suffix`, if it was present and fresh when the file was opened.
    pub fn get(&self, suffix: &str) -> Option<&Arc<File>> {
        self.files
            .iter()
            .find(|(s, _)| *s == suffix)
            .map(|(_, f)| f)
    }

    /// Reads a sibling whole, if it is still not older than the original.
    pub fn read_fresh(&self, suffix: &str) -> std::io::Result<Option<Vec<u8>>> {
        use std::os::unix::fs::FileExt;
        let Some(file) = self.get(suffix) else {
            return Ok(None);
        };
        let meta = file.metadata()?;
        if meta.modified()? < self.modified {
            return Ok(None);
        }
        let mut buf = vec![0; meta.len() as usize];
        let mut at = 0;
        while at < buf.len() {
            match file.read_at(&mut buf[at..], at as u64)? {
                0 => break,
                n => at += n,
            }
        }
        buf.truncate(at);
        Ok(Some(buf))
    }
}
