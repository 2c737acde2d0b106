//! htpasswd files: `user:hash` lines, with bcrypt (`$2y$`, `$2b$`, `$2a$`), SHA-256-crypt
//! (`$5$`), SHA-512-crypt (`$6$`), Apache's MD5 (`$apr1$`) and `{SHA}` hashes.

use super::AuthError;
use md5::Digest as _;
use std::collections::HashMap;
use subtle::ConstantTimeEq;

#[derive(Clone, Debug)]
enum Hash {
    Bcrypt {
        hash: String,
        cost: u32,
    },
    ShaCrypt {
        hash: String,
        sha512: bool,
        rounds: u32,
    },
    Apr1 {
        salt: String,
        hash: String,
    },
    Sha1([u8; 20]),
}

/// What a verification costs: hashes of one cost take the same time to check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Cost {
    Bcrypt(u32),
    ShaCrypt { sha512: bool, rounds: u32 },
    Apr1,
    Sha1,
}

impl Hash {
    fn cost(&self) -> Cost {
        match self {
            Hash::Bcrypt { cost, .. } => Cost::Bcrypt(*cost),
            Hash::ShaCrypt { sha512, rounds, .. } => Cost::ShaCrypt {
                sha512: *sha512,
                rounds: *rounds,
            },
            Hash::Apr1 { .. } => Cost::Apr1,
            Hash::Sha1(_) => Cost::Sha1,
        }
    }
}

/// The users of one htpasswd file.
#[derive(Clone, Debug, Default)]
pub struct Htpasswd {
    users: HashMap<String, Hash>,
    /// One hash of each cost in the file (the first user's of that cost). A failed
    /// verification checks the password against every one of them but the user's own
    /// (already checked), so that every failure, for a user in the file or not, does the
    /// same work: the time it takes tells nothing of which users exist.
    decoys: Vec<(Cost, Hash)>,
}

/// A bcrypt hash (cost 5, `htpasswd -B`'s) of nothing anyone types.
const DUMMY: &str = "$2y$05$K6SWGNjFmkMx3nCyBC8YVOZ5zUTkbv6oU2t1BldXdD6ZNpBIlmY7u";

impl Htpasswd {
    /// Parses a file's text. Blank lines and `#` comments are skipped; a line with a hash
    /// of a kind not supported (plain text, DES crypt), or a malformed one, is an error
    /// naming its line.
    pub fn parse(text: &str) -> Result<Htpasswd, AuthError> {
        let mut users = HashMap::new();
        let mut decoys: Vec<(Cost, Hash)> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let bad = |problem: String| AuthError::Htpasswd {
                path: None,
                line: n + 1,
                problem,
            };
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((user, hash)) = line.split_once(':') else {
                return Err(bad("not user:hash".into()));
            };
            // A malformed hash would fail at once, quicker than a well-formed one of its
            // kind: it is refused here rather than let that user be told apart.
            let malformed = |kind: &str| bad(format!("user {user:?} has a malformed {kind} hash"));
            let h =
                if hash.starts_with("$2y$") || hash.starts_with("$2b$") || hash.starts_with("$2a$")
                {
                    let cost = hash
                        .parse::<bcrypt::HashParts>()
                        .map(|p| p.get_cost())
                        .ok()
                        .filter(|c| (4..=31).contains(c))
                        .ok_or_else(|| malformed("bcrypt"))?;
                    Hash::Bcrypt {
                        hash: hash.to_string(),
                        cost,
                    }
                } else if hash.starts_with("$5$") || hash.starts_with("$6$") {
                    let sha512 = hash.starts_with("$6$");
                    let rounds =
                        sha_crypt_rounds(hash, sha512).ok_or_else(|| malformed("SHA-crypt"))?;
                    Hash::ShaCrypt {
                        hash: hash.to_string(),
                        sha512,
                        rounds,
                    }
                } else if let Some(rest) = hash.strip_prefix("$apr1$") {
                    let Some((salt, h)) = rest.split_once('$') else {
                        return Err(bad("a $apr1$ hash without its salt".into()));
                    };
                    Hash::Apr1 {
                        salt: salt.to_string(),
                        hash: h.to_string(),
                    }
                } else if let Some(b64) = hash.strip_prefix("{SHA}") {
                    use base64::Engine;
                    let raw = base64::engine::general_purpose::STANDARD
                        .decode(b64)
                        .map_err(|_| bad("{SHA} hash is not base64".into()))?;
                    let arr: [u8; 20] = raw
                        .try_into()
                        .map_err(|_| bad("{SHA} hash is not 20 bytes".into()))?;
                    Hash::Sha1(arr)
                } else {
                    return Err(bad(format!(
                    "user {user:?} has a hash of a kind not supported (use bcrypt: htpasswd -B)"
                )));
                };
            if !decoys.iter().any(|(c, _)| *c == h.cost()) {
                decoys.push((h.cost(), h.clone()));
            }
            users.insert(user.to_string(), h);
        }
        Ok(Htpasswd { users, decoys })
    }

    pub fn len(&self) -> usize {
        self.users.len()
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// Whether `password` is `user`'s. Slow on purpose for bcrypt and SHA-crypt (that is
    /// their point): run it off the event loop. Comparisons are in constant time, and
    /// every failure takes as long as any other (see `decoys`); a success may be quicker.
    pub fn verify(&self, user: &str, password: &str) -> bool {
        let own = self.users.get(user);
        if let Some(h) = own {
            if check(h, password) {
                return true;
            }
        } else if self.decoys.is_empty() {
            // An empty file: there is no one to tell apart, but a failure still costs.
            let _ = bcrypt::verify(password, DUMMY);
        }
        let done = own.map(Hash::cost);
        for (cost, h) in &self.decoys {
            if Some(*cost) != done {
                std::hint::black_box(check(h, password));
            }
        }
        false
    }
}

/// The rounds of a `$5$` or `$6$` hash (`$5$rounds=N$salt$hash` or `$5$salt$hash`), as
/// the sha-crypt crate reads them; `None` if the hash is malformed.
fn sha_crypt_rounds(hash: &str, sha512: bool) -> Option<u32> {
    let mut fields: Vec<&str> = hash[3..].split('$').collect();
    let rounds = match fields.first()?.strip_prefix("rounds=") {
        Some(r) if fields.len() == 3 => {
            let r = r
                .parse::<u32>()
                .ok()
                .filter(|r| (1_000..=999_999_999).contains(r))?;
            fields.remove(0);
            r
        }
        _ => 5_000,
    };
    let [salt, digest] = fields[..] else {
        return None;
    };
    let want = if sha512 { 86 } else { 43 };
    let crypt64 = |b: u8| b.is_ascii_alphanumeric() || b == b'.' || b == b'/';
    (!salt.is_empty() && digest.len() == want && digest.bytes().all(crypt64)).then_some(rounds)
}

fn check(h: &Hash, password: &str) -> bool {
    #[cfg(test)]
    tests::CHECKED.with(|c| c.borrow_mut().push(h.cost()));
    match h {
        Hash::Bcrypt { hash: h, .. } => bcrypt::verify(password, h).unwrap_or(false),
        Hash::ShaCrypt { hash: h, .. } => {
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
    use std::cell::RefCell;

    thread_local! {
        /// The costs of the verifications done on this thread.
        pub(super) static CHECKED: RefCell<Vec<Cost>> = const { RefCell::new(Vec::new()) };
    }

    /// The costs of the verifications `f` did, in order.
    fn checked(f: impl FnOnce() -> bool) -> (bool, Vec<Cost>) {
        CHECKED.with(|c| c.borrow_mut().clear());
        let ok = f();
        (ok, CHECKED.with(|c| c.take()))
    }

    // `openssl passwd -6 / -5 / -apr1` and `openssl sha1 | base64`, all for "s3cret".
    const SHA512: &str = "$6$saltsalt$As4wrv0kZlfch1du9WeH7qhskyLriQWySXrZzynnvi46nFnNxjdpl6ksRegrrKexvhIa/Iny8S8uF3fVWTMuC1";
    const SHA256: &str = "$5$pepper12$vv7SRId9dfsUwDG4aHTg6S/9XRJqbS5KGhTN15ZdtG4";
    const APR1: &str = "$apr1$abcdefgh$M2T3erDstkD7SsE2QQnfH0";
    // glibc's crypt(3) with the salt `$5$rounds=1000$rounded$`.
    const SHA256_1000: &str = "$5$rounds=1000$rounded$lbgXgi1ec788X33bK8/Y2nw.6YHqm4bQx1bihyJ2Uk8";
    const SHA1: &str = "{SHA}/vNB+F2HQ559kaLUZbmHHvZrXpg=";

    /// Every failure, for any user of a file that mixes every kind and two bcrypt costs,
    /// or for one not in it, checks the password once against each cost in the file; a
    /// success checks the user's hash only.
    #[test]
    fn every_failure_does_the_same_verifications() {
        let b4 = bcrypt::hash("s3cret", 4).unwrap();
        let b5 = bcrypt::hash("s3cret", 5).unwrap();
        let b5b = bcrypt::hash("s3cret", 5).unwrap();
        let text = format!(
            "bob:{APR1}\nalice:{b4}\ndave:{b5}\neve:{b5b}\ncarol:{SHA512}\nerin:{SHA256}\nfay:{SHA256_1000}\nhal:{SHA1}\n"
        );
        let f = Htpasswd::parse(&text).unwrap();
        let mut all = vec![
            Cost::Apr1,
            Cost::Bcrypt(4),
            Cost::Bcrypt(5),
            Cost::ShaCrypt {
                sha512: true,
                rounds: 5000,
            },
            Cost::ShaCrypt {
                sha512: false,
                rounds: 5000,
            },
            Cost::ShaCrypt {
                sha512: false,
                rounds: 1000,
            },
            Cost::Sha1,
        ];
        all.sort();
        for user in [
            "bob", "alice", "dave", "eve", "carol", "erin", "fay", "hal", "nobody", "",
        ] {
            let (ok, mut done) = checked(|| f.verify(user, "wrong"));
            assert!(!ok);
            done.sort();
            assert_eq!(done, all, "a wrong password for {user:?}");
            if user != "nobody" && !user.is_empty() {
                let (ok, done) = checked(|| f.verify(user, "s3cret"));
                assert!(ok, "{user}");
                assert_eq!(done.len(), 1, "the right password for {user}: {done:?}");
            }
        }
        // The password of someone in the file, given for a user who isn't, still fails.
        assert!(!f.verify("nobody", "s3cret"));
    }

    #[test]
    fn malformed_hashes_are_refused_with_their_line() {
        for bad in [
            "$2y$99$K6SWGNjFmkMx3nCyBC8YVOZ5zUTkbv6oU2t1BldXdD6ZNpBIlmY7u",
            "$2y$05$short",
            "$6$saltsalt$tooshort",
            "$5$rounds=10$pepper12$vv7SRId9dfsUwDG4aHTg6S/9XRJqbS5KGhTN15ZdtG4",
            "$5$",
        ] {
            let e = Htpasswd::parse(&format!("ok:{APR1}\nx:{bad}\n")).unwrap_err();
            assert!(
                matches!(&e, AuthError::Htpasswd { line: 2, problem, .. } if problem.contains("malformed")),
                "{bad}: {e}"
            );
        }
    }

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
