//! HTTP Basic (RFC 7617) against an htpasswd file.

use super::{AuthError, Htpasswd};
use bytes::Bytes;
use http::header::AUTHORIZATION;
use http::{HeaderMap, HeaderValue, Response};
use sha2::Digest;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

/// Basic authentication against an htpasswd file. Cheap to clone; clones share.
#[derive(Clone, Debug)]
pub struct BasicAuth {
    inner: Arc<Inner>,
    /// The users let in; `None`: all in the file.
    allowed: Option<Arc<[String]>>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    users: RwLock<Arc<Htpasswd>>,
    seen: Mutex<Option<(SystemTime, u64)>>,
    checked_at: AtomicU64,
    challenge: HeaderValue,
    cache: Mutex<HashMap<[u8; 32], Instant>>,
    salt: [u8; 16],
    ttl: Duration,
    /// Bumped on every reload: a verification begun against an older file isn't cached.
    generation: AtomicU64,
}

/// What a request's credentials come to.
#[derive(Debug)]
pub enum Verdict {
    /// Verified (now or within the TTL).
    Allowed,
    /// Missing, malformed or wrong: answer 401.
    Unauthorized,
    /// Right, but the user isn't one of those let in: answer 403.
    Forbidden,
    /// Not in the cache: run [`BasicAuth::verify`] off the event loop.
    Verify(Pending),
}

/// Credentials waiting to be verified.
#[derive(Debug)]
pub struct Pending {
    user: String,
    password: String,
    key: [u8; 32],
}

const CACHE_MAX: usize = 16 * 1024;

fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

impl BasicAuth {
    /// Identifies this check among clones of others.
    pub(super) fn id(&self) -> usize {
        Arc::as_ptr(&self.inner) as *const () as usize
    }

    /// Loads `path`; `realm` is shown by browsers; successes are remembered for `ttl`.
    pub fn open(
        path: impl AsRef<Path>,
        realm: &str,
        ttl: Duration,
    ) -> Result<BasicAuth, AuthError> {
        let path = path.as_ref().to_path_buf();
        let seen = stamp(&path);
        let text = std::fs::read_to_string(&path).map_err(|source| AuthError::Read {
            path: path.clone(),
            source,
        })?;
        let users = Htpasswd::parse(&text).map_err(|e| match e {
            AuthError::Htpasswd { line, problem, .. } => AuthError::Htpasswd {
                path: Some(path.clone()),
                line,
                problem,
            },
            e => e,
        })?;
        let quoted = realm.replace('\\', "\\\\").replace('"', "\\\"");
        // RFC 7617 §2.1: the charset parameter says credentials are UTF-8.
        let challenge =
            HeaderValue::from_str(&format!("Basic realm=\"{quoted}\", charset=\"UTF-8\""))
                .map_err(|_| AuthError::Realm(realm.to_string()))?;
        let mut salt = [0u8; 16];
        let t = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let addr = &salt as *const _ as usize as u128;
        salt.copy_from_slice(&sha2::Sha256::digest((t ^ (addr << 64)).to_le_bytes())[..16]);
        Ok(BasicAuth {
            inner: Arc::new(Inner {
                path,
                users: RwLock::new(Arc::new(users)),
                seen: Mutex::new(seen),
                checked_at: AtomicU64::new(0),
                challenge,
                cache: Mutex::new(HashMap::new()),
                salt,
                ttl,
                generation: AtomicU64::new(0),
            }),
            allowed: None,
        })
    }

    /// Checks a request's `Authorization` header (RFC 7617 §2).
    pub fn check(&self, headers: &HeaderMap) -> Verdict {
        self.maybe_reload();
        let Some((user, password)) = credentials(headers) else {
            return Verdict::Unauthorized;
        };
        let key = self.key(&user, &password);
        if let Ok(mut c) = self.inner.cache.lock() {
            match c.get(&key) {
                Some(until) if *until > Instant::now() => {
                    return if self.permits(&user) {
                        Verdict::Allowed
                    } else {
                        Verdict::Forbidden
                    };
                }
                Some(_) => {
                    c.remove(&key);
                }
                None => {}
            }
        }
        Verdict::Verify(Pending {
            user,
            password,
            key,
        })
    }

    /// Verifies credentials the cache didn't know: slow (bcrypt), so on a blocking thread.
    /// Answers `Allowed`, `Unauthorized` or `Forbidden`.
    pub fn verify(&self, p: Pending) -> Verdict {
        let generation = self.inner.generation.load(Ordering::Acquire);
        let users = match self.inner.users.read() {
            Ok(u) => u.clone(),
            Err(_) => return Verdict::Unauthorized,
        };
        let ok = users.verify(&p.user, &p.password);
        if ok {
            if let Ok(mut c) = self.inner.cache.lock() {
                if c.len() >= CACHE_MAX {
                    c.clear();
                }
                // A reload during the verification cleared the cache: don't refill it
                // from the old file.
                if self.inner.generation.load(Ordering::Acquire) == generation {
                    c.insert(p.key, Instant::now() + self.inner.ttl);
                }
            }
        } else {
            tracing::debug!("basic auth: wrong credentials for user {:?}", p.user);
            return Verdict::Unauthorized;
        }
        if self.permits(&p.user) {
            Verdict::Allowed
        } else {
            tracing::debug!("basic auth: user {:?} is not let in here", p.user);
            Verdict::Forbidden
        }
    }

    /// 401 with the challenge (RFC 7235 §3.1), and no word on what was wrong.
    pub fn unauthorized(&self) -> Response<Bytes> {
        super::unauthorized(&self.inner.challenge)
    }

    /// The answer a [`Verdict`] other than `Allowed` or `Verify` calls for.
    pub fn refusal(&self, v: &Verdict) -> Response<Bytes> {
        match v {
            Verdict::Forbidden => super::forbidden(),
            _ => self.unauthorized(),
        }
    }

    /// Lets in only these users; any other with the right password gets 403.
    pub fn allow_users(mut self, users: impl IntoIterator<Item = String>) -> Self {
        let users: Vec<String> = users.into_iter().collect();
        self.allowed = (!users.is_empty()).then(|| users.into());
        self
    }

    fn permits(&self, user: &str) -> bool {
        self.allowed
            .as_ref()
            .is_none_or(|a| a.iter().any(|u| u == user))
    }

    fn key(&self, user: &str, password: &str) -> [u8; 32] {
        let mut h = sha2::Sha256::new();
        h.update(self.inner.salt);
        h.update(user.as_bytes());
        h.update([0]);
        h.update(password.as_bytes());
        h.finalize().into()
    }

    /// Reloads the file if it changed, at most once a second.
    fn maybe_reload(&self) {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if self.inner.checked_at.swap(now, Ordering::Relaxed) == now {
            return;
        }
        let Ok(mut seen) = self.inner.seen.lock() else {
            return;
        };
        let current = stamp(&self.inner.path);
        if current == *seen {
            return;
        }
        *seen = current;
        let path = &self.inner.path;
        match std::fs::read_to_string(path)
            .map_err(|source| AuthError::Read {
                path: path.clone(),
                source,
            })
            .and_then(|t| Htpasswd::parse(&t))
        {
            Ok(users) => {
                tracing::info!(
                    "basic auth: {} changed: {} users",
                    path.display(),
                    users.len()
                );
                if let Ok(mut u) = self.inner.users.write() {
                    *u = Arc::new(users);
                }
                // Credentials cached against the old file may no longer hold.
                if let Ok(mut c) = self.inner.cache.lock() {
                    self.inner.generation.fetch_add(1, Ordering::AcqRel);
                    c.clear();
                }
            }
            Err(e) => tracing::error!(
                "basic auth: {} refused, the old users stay: {e}",
                path.display()
            ),
        }
    }
}

/// `user` and `password` from `Authorization: Basic base64(user:password)`.
fn credentials(headers: &HeaderMap) -> Option<(String, String)> {
    use base64::Engine;
    let v = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(token.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}
