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

    /// Reads a sibling whole, if it is at most `max_len` bytes and still not older than the
    /// original. A sibling that changes while it is read is not used.
    pub fn read_fresh(&self, suffix: &str, max_len: u64) -> std::io::Result<Option<Vec<u8>>> {
        use std::os::unix::fs::FileExt;
        let Some(file) = self.get(suffix) else {
            return Ok(None);
        };
        let before = file.metadata()?;
        if before.modified()? < self.modified || before.len() > max_len {
            return Ok(None);
        }
        let len = before.len() as usize;
        let mut buf = vec![0; len];
        let mut at = 0;
        while at < len {
            match file.read_at(&mut buf[at..], at as u64)? {
                0 => return Ok(None),
                n => at += n,
            }
        }
        let after = file.metadata()?;
        if after.len() != before.len() || after.modified()? != before.modified()? {
            return Ok(None);
        }
        Ok(Some(buf))
    }
}
