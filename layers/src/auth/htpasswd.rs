//! htpasswd files: `user:hash` lines, with bcrypt (`$2y$`, `$2b$`, `$2a$`), SHA-256-crypt
//! (`$5$`), SHA-512-crypt (`$6$`), Apache's MD5 (`$apr1$`) and `{SHA}` hashes.

use md5::Digest as _;
use std::collections::HashMap;
use subtle::ConstantTimeEq;

#[derive(Clone, Debug)]
enum Hash {
    Bcrypt(String),
    ShaCrypt(String),
    Apr1 { salt: String, hash: String },
    Sha1([u8; 20]),
}

/// The users of one htpasswd file.
#[derive(Clone, Debug, Default)]
pub struct Htpasswd {
    users: HashMap<String, Hash>,
    /// Checked for an unknown user, so that it takes as long as a known one: the first
    /// user's hash (same kind, same cost), or a bcrypt one for an empty file.
    decoy: Option<Hash>,
}

/// A bcrypt hash (cost 5, `htpasswd -B`'s) of nothing anyone types.
const DUMMY: &str = "$2y$05$K6SWGNjFmkMx3nCyBC8YVOZ5zUTkbv6oU2t1BldXdD6ZNpBIlmY7u";

impl Htpasswd {
    /// Parses a file's text. Blank lines and `#` comments are skipped; a line with a hash
    /// of a kind not supported (plain text, DES crypt) is an error naming its line.
    pub fn parse(text: &str) -> Result<Htpasswd, String> {
        let mut users = HashMap::new();
        let mut decoy = None;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((user, hash)) = line.split_once(':') else {
                return Err(format!("line {}: not user:hash", n + 1));
            };
            let h = if hash.starts_with("$2y$")
                || hash.starts_with("$2b$")
                || hash.starts_with("$2a$")
            {
                Hash::Bcrypt(hash.to_string())
            } else if hash.starts_with("$5$") || hash.starts_with("$6$") {
                Hash::ShaCrypt(hash.to_string())
            } else if let Some(rest) = hash.strip_prefix("$apr1$") {
                let Some((salt, h)) = rest.split_once('$') else {
                    return Err(format!("line {}: a $apr1$ hash without its salt", n + 1));
                };
                Hash::Apr1 {
                    salt: salt.to_string(),
                    hash: h.to_string(),
                }
            } else if let Some(b64) = hash.strip_prefix("{SHA}") {
                use base64::Engine;
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|_| format!("line {}: {{SHA}} hash is not base64", n + 1))?;
                let arr: [u8; 20] = raw
                    .try_into()
                    .map_err(|_| format!("line {}: {{SHA}} hash is not 20 bytes", n + 1))?;
                Hash::Sha1(arr)
            } else {
                return Err(format!(
                    "line {}: user {user:?} has a hash of a kind not supported (use bcrypt: htpasswd -B)",
                    n + 1
                ));
            };
            if decoy.is_none() {
                decoy = Some(h.clone());
            }
            users.insert(user.to_string(), h);
        }
        Ok(Htpasswd { users, decoy })
    }

    pub fn len(&self) -> usize {
        self.users.len()
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// Whether `password` is `user`'s. Slow on purpose for bcrypt and SHA-crypt (that is
    /// their point): run it off the event loop. Comparisons are in constant time.
    pub fn verify(&self, user: &str, password: &str) -> bool {
        match self.users.get(user) {
            Some(h) => check(h, password),
            None => {
                match &self.decoy {
                    Some(h) => check(h, password),
                    None => bcrypt::verify(password, DUMMY).unwrap_or(false),
                };
                false
            }
        }
    }
}

fn check(h: &Hash, password: &str) -> bool {
    match h {
        Hash::Bcrypt(h) => bcrypt::verify(password, h).unwrap_or(false),
        Hash::ShaCrypt(h) => {
            use sha_crypt::PasswordVerifier;
            sha_crypt::ShaCrypt::default()
                .verify_password(password.as_bytes(), h.as_str())
                .is_ok()
        }
        Hash::Apr1 { salt, hash } => {
            let got = apr1(password.as_bytes(), salt.as_bytes());
            got.as_bytes().ct_eq(hash.as_bytes()).into()
        }
        Hash::Sha1(want) => {
            let got = sha1::Sha1::digest(password.as_bytes());
            got.as_slice().ct_eq(want.as_slice()).into()
        }
    }
}

/// Apache's `$apr1$`: MD5-crypt with its own magic string. Returns the 22-character hash.
fn apr1(pw: &[u8], salt: &[u8]) -> String {
    let salt = &salt[..salt.len().min(8)];
    let mut ctx = md5::Md5::new();
    ctx.update(pw);
    ctx.update(b"$apr1$");
    ctx.update(salt);
    let mut alt = md5::Md5::new();
    alt.update(pw);
    alt.update(salt);
    alt.update(pw);
    let alt = alt.finalize();
    let mut left = pw.len();
    while left > 0 {
        let n = left.min(16);
        ctx.update(&alt[..n]);
        left -= n;
    }
    let mut i = pw.len();
    while i > 0 {
        if i & 1 == 1 {
            ctx.update([0u8]);
        } else {
            ctx.update(&pw[..1]);
        }
        i >>= 1;
    }
    let mut fin = ctx.finalize();
    for i in 0..1000 {
        let mut c = md5::Md5::new();
        if i & 1 == 1 {
            c.update(pw);
        } else {
            c.update(fin);
        }
        if i % 3 != 0 {
            c.update(salt);
        }
        if i % 7 != 0 {
            c.update(pw);
        }
        if i & 1 == 1 {
            c.update(fin);
        } else {
            c.update(pw);
        }
        fin = c.finalize();
    }
    const ITOA64: &[u8] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut out = String::with_capacity(22);
    let mut to64 = |mut v: u32, n: usize| {
        for _ in 0..n {
            out.push(ITOA64[(v & 0x3f) as usize] as char);
            v >>= 6;
        }
    };
    let f = |i: usize| u32::from(fin[i]);
    to64((f(0) << 16) | (f(6) << 8) | f(12), 4);
    to64((f(1) << 16) | (f(7) << 8) | f(13), 4);
    to64((f(2) << 16) | (f(8) << 8) | f(14), 4);
    to64((f(3) << 16) | (f(9) << 8) | f(15), 4);
    to64((f(4) << 16) | (f(10) << 8) | f(5), 4);
    to64(f(11), 2);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dummy_hash_is_a_real_bcrypt_hash() {
        // An unparsable one would make unknown users quick to tell from known ones.
        assert_eq!(bcrypt::verify("anything", DUMMY).ok(), Some(false));
    }

    #[test]
    fn apr1_matches_apache() {
        // From Apache's htpasswd (and htpasswd-verify's docs).
        assert_eq!(apr1(b"password", b"lZL6V/ci"), "eIMz/iKDkbtys/uU7LEK00");
        assert_eq!(apr1(b"password", b"RandSalt"), "PgCXHRrkpSt4cbyC2C6bm/");
    }
}
