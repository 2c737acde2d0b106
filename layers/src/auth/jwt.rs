//! Bearer tokens (RFC 6750) that are JWTs (RFC 7519), checked with jsonwebtoken: the
//! signature (HS256, RS256, ES256, EdDSA, ...), then `exp`, `nbf`, `iss` and `aud` with a
//! clock leeway, then any required claims. Keys come from a file (one PEM public key, an
//! HMAC secret, or a JWK set) or from a JWKS URL, chosen by the token's `kid`.
//!
//! A JWKS URL is fetched when first needed, again when the set is older than
//! [`JwksOptions::refresh`] (in the background; requests go on with the keys held), and
//! when a token names a `kid` the set lacks, which is how a rotated-in key is picked up.
//! That last fetch happens at most once per [`JwksOptions::refresh_min`], so tokens with
//! made-up `kid`s can't make the gateway hammer the key server; concurrent requests wait
//! on one fetch. A failed fetch keeps the keys held.

use super::{AuthError, Check, Grant};
use arc_swap::ArcSwap;
use bytes::Bytes;
use http::header::AUTHORIZATION;
use http::{HeaderMap, HeaderName, HeaderValue, Response};
use jsonwebtoken::jwk::{JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// What a route asks of a token.
#[derive(Clone, Debug)]
pub struct JwtOptions {
    /// Accepted algorithms, such as `["ES256"]`. A token naming another is refused.
    pub algorithms: Vec<String>,
    /// Accepted `iss` values; empty: not checked.
    pub issuers: Vec<String>,
    /// Accepted `aud` values; empty: not checked.
    pub audiences: Vec<String>,
    pub leeway: Duration,
    /// Claims passed on as request headers: (claim, header).
    pub forward_claims: Vec<(String, String)>,
    /// Claims a valid token must hold one of the values of, else 403: (claim, values).
    /// A claim matches when it is one of the values, a list holding one, or a string of
    /// space-separated words (OAuth `scope`, RFC 8693 §4.2) holding one.
    pub require: Vec<(String, Vec<String>)>,
    pub realm: String,
}

/// How a JWK set is fetched from a URL.
#[derive(Clone, Debug)]
pub struct JwksOptions {
    /// Refetched when older than this.
    pub refresh: Duration,
    /// Fetched for an unknown `kid` at most this often.
    pub refresh_min: Duration,
    /// One fetch may take this long.
    pub timeout: Duration,
}

impl Default for JwksOptions {
    fn default() -> Self {
        JwksOptions {
            refresh: Duration::from_secs(900),
            refresh_min: Duration::from_secs(10),
            timeout: Duration::from_secs(5),
        }
    }
}

/// Checks Bearer JWTs. Cheap to clone.
#[derive(Clone)]
pub struct JwtAuth {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for JwtAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JwtAuth")
    }
}

enum Keys {
    One(DecodingKey),
    Set(Vec<(String, DecodingKey)>),
}

impl Keys {
    fn find(&self, kid: Option<&str>) -> Option<&DecodingKey> {
        match (self, kid) {
            (Keys::One(k), _) => Some(k),
            (Keys::Set(set), Some(kid)) => set.iter().find(|(k, _)| k == kid).map(|(_, k)| k),
            // A token without a `kid` is tried against a set of exactly one key.
            (Keys::Set(set), None) if set.len() == 1 => Some(&set[0].1),
            _ => None,
        }
    }
}

struct Remote {
    url: String,
    client: reqwest::Client,
    opts: JwksOptions,
    /// When the last fetch was tried; held across a fetch so that waiters share it.
    last: tokio::sync::Mutex<Option<Instant>>,
    /// Unix seconds after which the set is refetched in the background.
    due: AtomicU64,
    refreshing: AtomicBool,
}

struct Inner {
    keys: ArcSwap<Keys>,
    remote: Option<Remote>,
    validation: Validation,
    forward: Vec<(String, HeaderName)>,
    require: Vec<(String, Vec<String>)>,
    missing: HeaderValue,
    invalid: HeaderValue,
    insufficient: HeaderValue,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl JwtAuth {
    /// Identifies this check among clones of others.
    pub(super) fn id(&self) -> usize {
        Arc::as_ptr(&self.inner) as *const () as usize
    }

    /// Reads the key file: a JWK set (JSON with `keys`), a PEM public key for RS/PS, ES or
    /// EdDSA algorithms, or the raw secret for HS algorithms.
    pub fn from_key_file(path: impl AsRef<Path>, o: &JwtOptions) -> Result<JwtAuth, AuthError> {
        let path = path.as_ref();
        let raw = std::fs::read(path).map_err(|source| AuthError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let algs = algorithms(o)?;
        let keys = if let Ok(set) = serde_json::from_slice::<JwkSet>(&raw) {
            let mut keys = Vec::new();
            for jwk in &set.keys {
                let kid = jwk.common.key_id.clone().unwrap_or_default();
                let k = DecodingKey::from_jwk(jwk).map_err(|source| AuthError::Key {
                    path: path.to_path_buf(),
                    kid: Some(kid.clone()),
                    source,
                })?;
                keys.push((kid, k));
            }
            Keys::Set(keys)
        } else {
            let k = match family(algs[0]) {
                Family::Hmac => Ok(DecodingKey::from_secret(trim_newline(&raw))),
                Family::Rsa => DecodingKey::from_rsa_pem(&raw),
                Family::Ec => DecodingKey::from_ec_pem(&raw),
                Family::Ed => DecodingKey::from_ed_pem(&raw),
            }
            .map_err(|source| AuthError::Key {
                path: path.to_path_buf(),
                kid: None,
                source,
            })?;
            Keys::One(k)
        };
        Self::build(keys, None, algs, o)
    }

    /// Keys from a JWK set at `url`, fetched when first needed (see the module docs).
    /// Needs a tokio runtime when checking.
    pub fn from_jwks_url(
        url: &str,
        o: &JwtOptions,
        jwks: JwksOptions,
    ) -> Result<JwtAuth, AuthError> {
        let algs = algorithms(o)?;
        let bad_url = |problem: String| AuthError::Url {
            url: url.to_string(),
            problem,
        };
        let parsed: http::Uri = url.parse().map_err(|e| bad_url(format!("{e}")))?;
        if !matches!(parsed.scheme_str(), Some("http" | "https")) {
            return Err(bad_url("not an http:// or https:// URL".into()));
        }
        let client = reqwest::Client::builder()
            .timeout(jwks.timeout)
            .redirect(reqwest::redirect::Policy::limited(3))
            .build()
            .map_err(AuthError::Client)?;
        let remote = Remote {
            url: url.to_string(),
            client,
            opts: jwks,
            last: tokio::sync::Mutex::new(None),
            due: AtomicU64::new(0),
            refreshing: AtomicBool::new(false),
        };
        Self::build(Keys::Set(Vec::new()), Some(remote), algs, o)
    }

    fn build(
        keys: Keys,
        remote: Option<Remote>,
        algs: Vec<Algorithm>,
        o: &JwtOptions,
    ) -> Result<JwtAuth, AuthError> {
        let mut v = Validation::new(algs[0]);
        v.algorithms = algs;
        v.leeway = o.leeway.as_secs();
        v.validate_nbf = true;
        // jsonwebtoken compares `iss` and `aud` only when the token has them (as strings or
        // lists): a route that names some must also require them, or a token without them,
        // or with a number there, passes.
        if o.issuers.is_empty() {
            v.iss = None;
        } else {
            v.set_issuer(&o.issuers);
            v.required_spec_claims.insert("iss".into());
        }
        if o.audiences.is_empty() {
            v.validate_aud = false;
        } else {
            v.set_audience(&o.audiences);
            v.required_spec_claims.insert("aud".into());
        }
        let forward = o
            .forward_claims
            .iter()
            .map(|(c, h)| {
                HeaderName::try_from(h.as_str())
                    .map(|h| (c.clone(), h))
                    .map_err(|_| AuthError::HeaderName(h.clone()))
            })
            .collect::<Result<_, _>>()?;
        let quoted = o.realm.replace('\\', "\\\\").replace('"', "\\\"");
        let hv =
            |s: String| HeaderValue::from_str(&s).map_err(|_| AuthError::Realm(o.realm.clone()));
        Ok(JwtAuth {
            inner: Arc::new(Inner {
                keys: ArcSwap::from_pointee(keys),
                remote,
                validation: v,
                forward,
                require: o.require.clone(),
                // RFC 6750 §3: no error code when there was no token at all.
                missing: hv(format!("Bearer realm=\"{quoted}\""))?,
                invalid: hv(format!(
                    "Bearer realm=\"{quoted}\", error=\"invalid_token\""
                ))?,
                insufficient: hv(format!(
                    "Bearer realm=\"{quoted}\", error=\"insufficient_scope\""
                ))?,
            }),
        })
    }

    /// Checks the request's token and sets the forwarded claims on it (after removing any
    /// the client sent). Waits only to fetch keys for a `kid` not yet known.
    pub fn check_request(&self, headers: &mut HeaderMap) -> Check {
        for (_, h) in &self.inner.forward {
            headers.remove(h);
        }
        self.maybe_refresh();
        let i = &self.inner;
        let Some(token) = bearer(headers) else {
            return Check::Deny(super::unauthorized(&i.missing));
        };
        let Ok(header) = jsonwebtoken::decode_header(token) else {
            tracing::debug!("jwt: the token's header doesn't decode");
            return Check::Deny(super::unauthorized(&i.invalid));
        };
        let kid = header.kid;
        let keys = i.keys.load();
        // Worth a fetch only for a kid not held, or for the first keys of a JWKS URL.
        let fetchable = i.remote.is_some()
            && (kid.is_some() || matches!(&**keys, Keys::Set(s) if s.is_empty()));
        match keys.find(kid.as_deref()) {
            Some(key) => match self.verify(token, key) {
                Ok(grant) => {
                    grant.apply(headers);
                    Check::Allow
                }
                Err(res) => Check::Deny(*res),
            },
            None if fetchable => {
                let (me, token) = (self.clone(), token.to_string());
                Check::Wait(Box::pin(async move {
                    me.fetch_for_unknown_kid().await;
                    let keys = me.inner.keys.load();
                    match keys.find(kid.as_deref()) {
                        Some(key) => me.verify(&token, key).map_err(|r| *r),
                        None => {
                            tracing::debug!("jwt: no key for kid {kid:?}, even after a refresh");
                            Err(super::unauthorized(&me.inner.invalid))
                        }
                    }
                }))
            }
            None => {
                tracing::debug!("jwt: no key for kid {kid:?}");
                Check::Deny(super::unauthorized(&i.invalid))
            }
        }
    }

    fn verify(&self, token: &str, key: &DecodingKey) -> Result<Grant, Box<Response<Bytes>>> {
        let i = &self.inner;
        let claims = match jsonwebtoken::decode::<Map<String, Value>>(token, key, &i.validation) {
            Ok(d) => d.claims,
            Err(e) => {
                tracing::debug!("jwt: token refused: {e}");
                return Err(Box::new(super::unauthorized(&i.invalid)));
            }
        };
        for (claim, accepted) in &i.require {
            if !holds(claims.get(claim), accepted) {
                tracing::debug!("jwt: claim {claim:?} holds none of {accepted:?}");
                // RFC 6750 §3.1: a valid token without the needed privileges.
                let mut res = super::forbidden();
                res.headers_mut()
                    .insert(http::header::WWW_AUTHENTICATE, i.insufficient.clone());
                return Err(Box::new(res));
            }
        }
        let mut grant = Grant::default();
        for (claim, header) in &i.forward {
            let text = match claims.get(claim) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                Some(Value::Bool(b)) => b.to_string(),
                _ => continue,
            };
            if let Ok(v) = HeaderValue::from_str(&text) {
                grant.headers.push((header.clone(), v));
            }
        }
        Ok(grant)
    }

    /// Starts a background refetch when the set has grown old.
    fn maybe_refresh(&self) {
        let Some(r) = &self.inner.remote else { return };
        let due = r.due.load(Ordering::Relaxed);
        if due == 0 || unix_now() < due || r.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            r.refreshing.store(false, Ordering::Release);
            return;
        };
        let me = self.clone();
        rt.spawn(async move {
            let Some(r) = &me.inner.remote else { return };
            let mut last = r.last.lock().await;
            me.fetch(r).await;
            *last = Some(Instant::now());
            r.refreshing.store(false, Ordering::Release);
        });
    }

    async fn fetch_for_unknown_kid(&self) {
        let Some(r) = &self.inner.remote else { return };
        let started = Instant::now();
        let mut last = r.last.lock().await;
        // Someone else fetched while this request waited, or one did so too recently.
        let min = r.opts.refresh_min.max(Duration::from_millis(100));
        if last.is_some_and(|t| t >= started || t.elapsed() < min) {
            return;
        }
        self.fetch(r).await;
        *last = Some(Instant::now());
    }

    /// Fetches the set and swaps it in; on failure the old keys stay.
    async fn fetch(&self, r: &Remote) {
        let res = async {
            let resp = r
                .client
                .get(&r.url)
                .header(http::header::ACCEPT, "application/json")
                .send()
                .await
                .map_err(|e| e.to_string())?;
            if !resp.status().is_success() {
                return Err(format!("answered {}", resp.status()));
            }
            let body = resp.bytes().await.map_err(|e| e.to_string())?;
            let set: JwkSet = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
            let mut keys = Vec::new();
            for jwk in &set.keys {
                let kid = jwk.common.key_id.clone().unwrap_or_default();
                if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
                    continue;
                }
                match DecodingKey::from_jwk(jwk) {
                    Ok(k) => keys.push((kid, k)),
                    Err(e) => tracing::warn!("jwks {}: key {kid:?} skipped: {e}", r.url),
                }
            }
            Ok(keys)
        }
        .await;
        // A failure is retried after refresh_min, not a whole refresh period.
        let next = match res {
            Ok(keys) => {
                tracing::debug!("jwks {}: {} keys", r.url, keys.len());
                self.inner.keys.store(Arc::new(Keys::Set(keys)));
                r.opts.refresh
            }
            Err(e) => {
                tracing::warn!("jwks {}: fetch failed, the keys held stay: {e}", r.url);
                r.opts.refresh_min.max(Duration::from_secs(1))
            }
        };
        r.due
            .store(unix_now() + next.as_secs().max(1), Ordering::Relaxed);
    }
}

fn algorithms(o: &JwtOptions) -> Result<Vec<Algorithm>, AuthError> {
    let algs: Vec<Algorithm> = o
        .algorithms
        .iter()
        .map(|a| {
            a.parse()
                .map_err(|_| AuthError::UnknownAlgorithm(a.clone()))
        })
        .collect::<Result<_, _>>()?;
    let Some(first) = algs.first() else {
        return Err(AuthError::NoAlgorithm);
    };
    if algs.iter().any(|a| family(*a) != family(*first)) {
        return Err(AuthError::MixedAlgorithms);
    }
    Ok(algs)
}

/// Whether a claim holds one of `accepted`.
fn holds(claim: Option<&Value>, accepted: &[String]) -> bool {
    match claim {
        Some(Value::String(s)) => s.split(' ').any(|w| accepted.iter().any(|a| a == w)),
        Some(Value::Array(items)) => items
            .iter()
            .any(|v| v.as_str().is_some_and(|w| accepted.iter().any(|a| a == w))),
        Some(Value::Number(n)) => accepted.iter().any(|a| *a == n.to_string()),
        Some(Value::Bool(b)) => accepted.iter().any(|a| *a == b.to_string()),
        _ => false,
    }
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

fn trim_newline(b: &[u8]) -> &[u8] {
    let mut end = b.len();
    while end > 0 && (b[end - 1] == b'\n' || b[end - 1] == b'\r') {
        end -= 1;
    }
    &b[..end]
}

#[derive(PartialEq, Eq, Clone, Copy, Debug)]
enum Family {
    Hmac,
    Rsa,
    Ec,
    Ed,
}

fn family(a: Algorithm) -> Family {
    use Algorithm::*;
    match a {
        HS256 | HS384 | HS512 => Family::Hmac,
        RS256 | RS384 | RS512 | PS256 | PS384 | PS512 => Family::Rsa,
        ES256 | ES384 => Family::Ec,
        EdDSA => Family::Ed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::json;

    const KEY: &[u8] = b"test-secret";

    fn auth(dir: &Path) -> JwtAuth {
        let path = dir.join("key");
        std::fs::write(&path, KEY).unwrap();
        let o = JwtOptions {
            algorithms: vec!["HS256".into()],
            issuers: vec!["https://issuer.test".into()],
            audiences: vec!["gatehouse".into()],
            leeway: Duration::from_secs(5),
            forward_claims: vec![],
            require: vec![],
            realm: "test".into(),
        };
        JwtAuth::from_key_file(&path, &o).unwrap()
    }

    fn status(a: &JwtAuth, claims: Value) -> u16 {
        let token =
            jsonwebtoken::encode(&Header::default(), &claims, &EncodingKey::from_secret(KEY))
                .unwrap();
        let mut h = HeaderMap::new();
        h.insert(
            AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
        );
        match a.check_request(&mut h) {
            Check::Allow => 200,
            Check::Deny(res) => res.status().as_u16(),
            Check::Wait(_) => panic!("no key to fetch"),
        }
    }

    /// Found by the `jwt` fuzz target: with issuers and audiences configured, a token
    /// without `iss` or `aud` (or with a number there) was let in.
    #[test]
    fn configured_issuer_and_audience_are_required() {
        let dir = tempfile::tempdir().unwrap();
        let a = auth(dir.path());
        let exp = unix_now() + 3600;
        let iss = "https://issuer.test";
        assert_eq!(
            status(&a, json!({"exp": exp, "iss": iss, "aud": "gatehouse"})),
            200
        );
        assert_eq!(status(&a, json!({"exp": exp, "aud": "gatehouse"})), 401);
        assert_eq!(status(&a, json!({"exp": exp, "iss": iss})), 401);
        assert_eq!(status(&a, json!({"exp": exp})), 401);
        assert_eq!(
            status(&a, json!({"exp": exp, "iss": 42, "aud": "gatehouse"})),
            401
        );
        assert_eq!(status(&a, json!({"exp": exp, "iss": iss, "aud": 7})), 401);
    }
}
