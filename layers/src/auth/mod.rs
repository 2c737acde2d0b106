//! Authentication: HTTP Basic (RFC 7617) from an htpasswd file, and Bearer JWTs ([`jwt`]).
//!
//! A successful check is cached for `ttl`, keyed by a salted SHA-256 of the credentials
//! (never the password itself), so bcrypt's deliberate cost is paid once per client and
//! TTL, not per request; a miss is verified on the blocking pool, never on the event loop.
//! The file is checked for changes at most once a second and reloaded; a file that no
//! longer parses is refused (logged) and the old users stay.
//!
//! ```no_run
//! use axum::{routing::get, Router};
//! use gatehouse_layers::auth::{BasicAuth, BasicAuthLayer};
//!
//! let auth = BasicAuth::open("users.htpasswd", "admin area", std::time::Duration::from_secs(60))
//!     .expect("htpasswd");
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "secret" }))
//!     .layer(BasicAuthLayer::new(auth));
//! ```

mod htpasswd;
pub mod jwt;
mod layer;

pub use htpasswd::Htpasswd;
pub use jwt::{JwtAuth, JwtOptions};
pub use layer::{BasicAuthLayer, BasicAuthService};

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{HeaderMap, HeaderValue, Response, StatusCode};
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
}

/// What a request's credentials come to.
#[derive(Debug)]
pub enum Verdict {
    /// Verified (now or within the TTL).
    Allowed,
    /// Missing or malformed: answer 401.
    Unauthorized,
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
    /// Loads `path`; `realm` is shown by browsers; successes are remembered for `ttl`.
    pub fn open(path: impl AsRef<Path>, realm: &str, ttl: Duration) -> Result<BasicAuth, String> {
        let path = path.as_ref().to_path_buf();
        let seen = stamp(&path);
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let users = Htpasswd::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let quoted = realm.replace('\\', "\\\\").replace('"', "\\\"");
        // RFC 7617 §2.1: the charset parameter says credentials are UTF-8.
        let challenge =
            HeaderValue::from_str(&format!("Basic realm=\"{quoted}\", charset=\"UTF-8\""))
                .map_err(|_| format!("realm {realm:?} can't be sent in a header"))?;
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
            }),
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
                Some(until) if *until > Instant::now() => return Verdict::Allowed,
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
    pub fn verify(&self, p: Pending) -> bool {
        let users = match self.inner.users.read() {
            Ok(u) => u.clone(),
            Err(_) => return false,
        };
        let ok = users.verify(&p.user, &p.password);
        if ok {
            if let Ok(mut c) = self.inner.cache.lock() {
                if c.len() >= CACHE_MAX {
                    c.clear();
                }
                c.insert(p.key, Instant::now() + self.inner.ttl);
            }
        } else {
            tracing::debug!("basic auth: wrong credentials for user {:?}", p.user);
        }
        ok
    }

    /// 401 with the challenge (RFC 7235 §3.1), and no word on what was wrong.
    pub fn unauthorized(&self) -> Response<Bytes> {
        let body = Bytes::from_static(b"unauthorized\n");
        let mut res = Response::new(body);
        *res.status_mut() = StatusCode::UNAUTHORIZED;
        let h = res.headers_mut();
        h.insert(WWW_AUTHENTICATE, self.inner.challenge.clone());
        h.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        h.insert(CONTENT_LENGTH, HeaderValue::from(13));
        res
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
            .map_err(|e| e.to_string())
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

/// 401 with `challenge` in `WWW-Authenticate`, and no word on what was wrong: Basic's
/// and Bearer's answer alike.
pub(crate) fn unauthorized(challenge: &HeaderValue) -> Response<Bytes> {
    let mut res = Response::new(Bytes::from_static(b"unauthorized\n"));
    *res.status_mut() = StatusCode::UNAUTHORIZED;
    let h = res.headers_mut();
    h.insert(WWW_AUTHENTICATE, challenge.clone());
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(CONTENT_LENGTH, HeaderValue::from(13));
    res
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
