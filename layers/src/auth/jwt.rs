//! Bearer tokens (RFC 6750) that are JWTs (RFC 7519), checked with jsonwebtoken: the
//! signature (HS256, RS256, ES256, EdDSA, ...), then `exp`, `nbf`, `iss` and `aud` with a
//! clock leeway. Keys come from a file: one PEM public key (or an HMAC secret), or a JWK
//! set, chosen by the token's `kid`.

use bytes::Bytes;
use http::header::AUTHORIZATION;
use http::{HeaderMap, HeaderName, HeaderValue, Response};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

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
    pub realm: String,
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

struct Inner {
    keys: Keys,
    validation: Validation,
    forward: Vec<(String, HeaderName)>,
    missing: HeaderValue,
    invalid: HeaderValue,
}

impl JwtAuth {
    /// Reads the key file: a JWK set (JSON with `keys`), a PEM public key for RS/PS, ES or
    /// EdDSA algorithms, or the raw secret for HS algorithms.
    pub fn from_key_file(path: impl AsRef<Path>, o: &JwtOptions) -> Result<JwtAuth, String> {
        let path = path.as_ref();
        let raw = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let algs: Vec<Algorithm> = o
            .algorithms
            .iter()
            .map(|a| a.parse().map_err(|_| format!("unknown algorithm {a:?}")))
            .collect::<Result<_, _>>()?;
        let Some(first) = algs.first().copied() else {
            return Err("at least one algorithm is needed".into());
        };
        let families: Vec<_> = algs.iter().map(|a| family(*a)).collect();
        if families.iter().any(|f| *f != families[0]) {
            return Err("the algorithms must all use the same kind of key".into());
        }
        let keys = if let Ok(set) = serde_json::from_slice::<JwkSet>(&raw) {
            let mut keys = Vec::new();
            for jwk in &set.keys {
                let kid = jwk.common.key_id.clone().unwrap_or_default();
                let k = DecodingKey::from_jwk(jwk)
                    .map_err(|e| format!("{}: key {kid:?}: {e}", path.display()))?;
                keys.push((kid, k));
            }
            Keys::Set(keys)
        } else {
            let k = match family(first) {
                Family::Hmac => Ok(DecodingKey::from_secret(trim_newline(&raw))),
                Family::Rsa => DecodingKey::from_rsa_pem(&raw),
                Family::Ec => DecodingKey::from_ec_pem(&raw),
                Family::Ed => DecodingKey::from_ed_pem(&raw),
            }
            .map_err(|e| format!("{}: {e}", path.display()))?;
            Keys::One(k)
        };
        let mut v = Validation::new(first);
        v.algorithms = algs;
        v.leeway = o.leeway.as_secs();
        v.validate_nbf = true;
        if o.issuers.is_empty() {
            v.iss = None;
        } else {
            v.set_issuer(&o.issuers);
        }
        if o.audiences.is_empty() {
            v.validate_aud = false;
        } else {
            v.set_audience(&o.audiences);
        }
        let forward = o
            .forward_claims
            .iter()
            .map(|(c, h)| {
                HeaderName::try_from(h.as_str())
                    .map(|h| (c.clone(), h))
                    .map_err(|_| format!("{h:?} is not a header name"))
            })
            .collect::<Result<_, _>>()?;
        let quoted = o.realm.replace('\\', "\\\\").replace('"', "\\\"");
        let hv = |s: String| {
            HeaderValue::from_str(&s).map_err(|_| format!("realm {:?} can't be sent", o.realm))
        };
        Ok(JwtAuth {
            inner: Arc::new(Inner {
                keys,
                validation: v,
                forward,
                // RFC 6750 §3: no error code when there was no token at all.
                missing: hv(format!("Bearer realm=\"{quoted}\""))?,
                invalid: hv(format!(
                    "Bearer realm=\"{quoted}\", error=\"invalid_token\""
                ))?,
            }),
        })
    }

    /// The claims to set as request headers if the request's token is good, else the
    /// 401 to answer. Why a token failed goes to the log at debug level, never to the
    /// client.
    pub fn check(
        &self,
        headers: &HeaderMap,
    ) -> Result<Vec<(HeaderName, HeaderValue)>, Box<Response<Bytes>>> {
        let i = &self.inner;
        let Some(token) = bearer(headers) else {
            return Err(unauthorized(&i.missing));
        };
        let key = match &i.keys {
            Keys::One(k) => Some(k),
            Keys::Set(set) => jsonwebtoken::decode_header(token)
                .ok()
                .and_then(|h| h.kid)
                .and_then(|kid| set.iter().find(|(k, _)| *k == kid).map(|(_, key)| key)),
        };
        let Some(key) = key else {
            tracing::debug!("jwt: no key for the token's kid");
            return Err(unauthorized(&i.invalid));
        };
        let claims = match jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(
            token,
            key,
            &i.validation,
        ) {
            Ok(d) => d.claims,
            Err(e) => {
                tracing::debug!("jwt: token refused: {e}");
                return Err(unauthorized(&i.invalid));
            }
        };
        let mut out = Vec::with_capacity(i.forward.len());
        for (claim, header) in &i.forward {
            let text = match claims.get(claim) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(serde_json::Value::Number(n)) => n.to_string(),
                Some(serde_json::Value::Bool(b)) => b.to_string(),
                _ => continue,
            };
            if let Ok(v) = HeaderValue::from_str(&text) {
                out.push((header.clone(), v));
            }
        }
        Ok(out)
    }

    /// The headers this check sets, which a client must not be able to send itself.
    pub fn forwarded_headers(&self) -> impl Iterator<Item = &HeaderName> {
        self.inner.forward.iter().map(|(_, h)| h)
    }
}

fn unauthorized(challenge: &HeaderValue) -> Box<Response<Bytes>> {
    Box::new(super::unauthorized(challenge))
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
