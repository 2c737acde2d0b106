//! Bearer JWTs: `gatehouse_layers::auth::JwtAuth::check_request` with a fixed HS256 key,
//! given any `Authorization` value, or tokens signed here from claims the fuzzer picks.
//!
//! Properties:
//! - no token, however malformed, panics or makes the check wait (there is no JWKS URL);
//! - a token is let in only if its signature verifies with the key;
//! - a forwarded-claim header the client sent never survives: after the check it holds the
//!   token's claim, or nothing;
//! - for signed tokens, the answer is the one RFC 7519 and the options give: 401 for a bad
//!   signature or algorithm, an `exp` that is missing or past (beyond the leeway), an `nbf`
//!   still ahead, or, where the route names them, an `iss` or `aud` not among those
//!   accepted (missing included); 403 for a valid token without a required claim value.
//!
//! Text input (the seeds): an `Authorization:` line, and optionally an `X-User:` line that
//! the client forges.
#![no_main]

mod common;

use arbitrary::Arbitrary;
use base64::Engine;
use gatehouse_layers::auth::jwt::{JwtAuth, JwtOptions};
use gatehouse_layers::auth::Check;
use http::header::AUTHORIZATION;
use http::{HeaderMap, HeaderName, HeaderValue};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const KEY: &[u8] = b"fuzz-secret-key-0123456789abcdef";
const ISSUER: &str = "https://issuer.example";
const AUDIENCE: &str = "gatehouse";
const LEEWAY: i64 = 60;

static X_USER: HeaderName = HeaderName::from_static("x-user");

struct Fixture {
    /// HS256, no `iss` or `aud` check, `sub` forwarded as `X-User`.
    plain: JwtAuth,
    /// Also `iss`, `aud` and a `scope` holding `read`.
    strict: JwtAuth,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let path =
            std::env::temp_dir().join(format!("gatehouse-fuzz-jwt-{}.key", std::process::id()));
        std::fs::write(&path, [KEY, b"\n"].concat()).unwrap();
        let mut o = JwtOptions {
            algorithms: vec!["HS256".into()],
            issuers: vec![],
            audiences: vec![],
            leeway: Duration::from_secs(LEEWAY as u64),
            forward_claims: vec![("sub".into(), "x-user".into())],
            require: vec![],
            realm: "fuzz".into(),
        };
        let plain = JwtAuth::from_key_file(&path, &o).unwrap();
        o.issuers = vec![ISSUER.into()];
        o.audiences = vec![AUDIENCE.into()];
        o.require = vec![("scope".into(), vec!["read".into()])];
        let strict = JwtAuth::from_key_file(&path, &o).unwrap();
        let _ = std::fs::remove_file(&path);
        Fixture { plain, strict }
    })
}

#[derive(Arbitrary, Debug, Clone, Copy, PartialEq)]
enum Time {
    Absent,
    LongAgo,
    PastLeeway,
    WithinLeeway,
    Ahead,
    FarAhead,
    NotANumber,
}

impl Time {
    /// Seconds from now.
    fn offset(self) -> Option<i64> {
        match self {
            Time::LongAgo => Some(-86_400),
            Time::PastLeeway => Some(-2 * LEEWAY),
            Time::WithinLeeway => Some(-LEEWAY / 2),
            Time::Ahead => Some(LEEWAY / 2),
            Time::FarAhead => Some(86_400),
            Time::Absent | Time::NotANumber => None,
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy, PartialEq)]
enum Choice3 {
    Absent,
    Good,
    Bad,
    NotAString,
    ListWithGood,
    ListWithoutGood,
}

#[derive(Arbitrary, Debug, Clone, Copy, PartialEq)]
enum Scope {
    Absent,
    ReadWrite,
    Write,
    ListRead,
    Number,
}

#[derive(Arbitrary, Debug, Clone, Copy, PartialEq)]
enum Tamper {
    None,
    /// Another payload under the original signature.
    SwapPayload,
    /// No signature.
    Unsigned,
    /// `alg: none`.
    AlgNone,
    /// Signed with another key.
    WrongKey,
    /// Signed with HS384, which the route does not accept.
    OtherAlg,
}

#[derive(Arbitrary, Debug, Clone)]
struct Claims {
    sub: Option<String>,
    exp: Time,
    nbf: Time,
    iss: Choice3,
    aud: Choice3,
    scope: Scope,
    extra: Option<(String, String)>,
}

#[derive(Arbitrary, Debug)]
enum Token {
    /// Any `Authorization` value.
    Raw(Vec<u8>),
    /// `Bearer ` and any text.
    Bearer(String),
    /// A token signed here.
    Signed {
        claims: Claims,
        tamper: Tamper,
        other: Claims,
        scheme: u8,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    token: Token,
    /// A forged `X-User` from the client.
    forged: Option<String>,
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn choice(c: Choice3, good: &str) -> Option<Value> {
    match c {
        Choice3::Absent => None,
        Choice3::Good => Some(json!(good)),
        Choice3::Bad => Some(json!("https://evil.example")),
        Choice3::NotAString => Some(json!(42)),
        Choice3::ListWithGood => Some(json!(["someone-else", good])),
        Choice3::ListWithoutGood => Some(json!(["someone-else"])),
    }
}

fn to_json(c: &Claims, now: i64) -> Map<String, Value> {
    let mut m = Map::new();
    if let Some((k, v)) = &c.extra {
        m.insert(k.clone(), json!(v));
    }
    if let Some(s) = &c.sub {
        m.insert("sub".into(), json!(s));
    }
    for (name, t) in [("exp", c.exp), ("nbf", c.nbf)] {
        match (t, t.offset()) {
            (_, Some(off)) => m.insert(name.into(), json!(now + off)),
            (Time::NotANumber, _) => m.insert(name.into(), json!("soon")),
            _ => m.remove(name),
        };
    }
    for (name, c, good) in [("iss", c.iss, ISSUER), ("aud", c.aud, AUDIENCE)] {
        match choice(c, good) {
            Some(v) => m.insert(name.into(), v),
            None => m.remove(name),
        };
    }
    match c.scope {
        Scope::Absent => m.remove("scope"),
        Scope::ReadWrite => m.insert("scope".into(), json!("read write")),
        Scope::Write => m.insert("scope".into(), json!("write")),
        Scope::ListRead => m.insert("scope".into(), json!(["read"])),
        Scope::Number => m.insert("scope".into(), json!(5)),
    };
    m
}

/// What each route answers for a token signed from `c` (`tamper` aside): "allow", 401, 403.
fn model(c: &Claims, strict: bool) -> &'static str {
    let exp_ok = matches!(c.exp, Time::WithinLeeway | Time::Ahead | Time::FarAhead);
    let nbf_ok = !matches!(c.nbf, Time::FarAhead);
    if !exp_ok || !nbf_ok {
        return "401";
    }
    if !strict {
        return "allow";
    }
    // An accepted issuer and audience must be there.
    let named = |x: Choice3| matches!(x, Choice3::Good | Choice3::ListWithGood);
    if !named(c.iss) || !named(c.aud) {
        return "401";
    }
    match c.scope {
        Scope::ReadWrite | Scope::ListRead => "allow",
        _ => "403",
    }
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

fn sign(claims: &Map<String, Value>, alg: Algorithm, key: &[u8]) -> String {
    jsonwebtoken::encode(&Header::new(alg), claims, &EncodingKey::from_secret(key)).unwrap()
}

/// The claims of a token whose signature verifies with the key, checked here on its own.
fn verified_claims(token: &str) -> Option<Map<String, Value>> {
    let mut v = jsonwebtoken::Validation::new(Algorithm::HS256);
    v.insecure_disable_signature_validation();
    v.validate_exp = false;
    v.validate_aud = false;
    v.required_spec_claims.clear();
    let (signed, sig) = token.rsplit_once('.')?;
    let ok = jsonwebtoken::crypto::verify(
        sig,
        signed.as_bytes(),
        &jsonwebtoken::DecodingKey::from_secret(KEY),
        Algorithm::HS256,
    )
    .ok()?;
    if !ok {
        return None;
    }
    jsonwebtoken::decode::<Map<String, Value>>(
        token,
        &jsonwebtoken::DecodingKey::from_secret(KEY),
        &v,
    )
    .ok()
    .map(|d| d.claims)
}

fn outcome(c: &Check) -> &'static str {
    match c {
        Check::Allow => "allow",
        Check::Deny(res) if res.status() == 401 => "401",
        Check::Deny(res) if res.status() == 403 => "403",
        Check::Deny(res) => panic!("a refusal with status {}", res.status()),
        Check::Wait(_) => panic!("a check waits with no JWKS URL"),
    }
}

fn run(
    auth: &JwtAuth,
    value: &HeaderValue,
    forged: Option<&HeaderValue>,
) -> (&'static str, HeaderMap) {
    let mut h = HeaderMap::new();
    h.insert(AUTHORIZATION, value.clone());
    if let Some(f) = forged {
        h.append(&X_USER, f.clone());
    }
    let got = outcome(&auth.check_request(&mut h));
    (got, h)
}

/// Checks the forwarded header, and that a token let in verifies with the key.
fn check_after(got: &str, h: &HeaderMap, token: Option<&str>) {
    let users: Vec<&HeaderValue> = h.get_all(&X_USER).iter().collect();
    if got != "allow" {
        assert!(
            users.is_empty(),
            "a refused request keeps X-User: {users:?}"
        );
        return;
    }
    let token = token.expect("let in without a token");
    let claims = verified_claims(token)
        .unwrap_or_else(|| panic!("{token:?} let in, but its signature does not verify"));
    let want: Option<String> = match claims.get("sub") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(Value::Bool(b)) => Some(b.to_string()),
        _ => None,
    };
    let want = want.and_then(|s| HeaderValue::from_str(&s).ok());
    let got: Vec<&HeaderValue> = users;
    assert_eq!(got, want.iter().collect::<Vec<_>>(), "{token:?}");
}

fn bearer_token(v: &HeaderValue) -> Option<&str> {
    let (scheme, token) = v.to_str().ok()?.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

fn text(data: &[u8]) -> Option<Input> {
    let mut token = None;
    let mut forged = None;
    for (name, value) in common::header_lines(data)? {
        match name.to_ascii_lowercase().as_str() {
            "authorization" => token = Some(Token::Raw(value.as_bytes().to_vec())),
            "x-user" => forged = Some(value.to_string()),
            _ => return None,
        }
    }
    Some(Input {
        token: token?,
        forged,
    })
}

fuzz_target!(|data: &[u8]| {
    let Some(input) = common::input(data, text) else {
        return;
    };
    let f = fixture();
    let forged = input
        .forged
        .as_deref()
        .and_then(|s| HeaderValue::from_str(s).ok());
    let forged = forged.as_ref();
    match input.token {
        Token::Raw(bytes) => {
            let Ok(v) = HeaderValue::from_bytes(&bytes) else {
                return;
            };
            for auth in [&f.plain, &f.strict] {
                let (got, h) = run(auth, &v, forged);
                check_after(got, &h, bearer_token(&v));
            }
        }
        Token::Bearer(text) => {
            let Ok(v) = HeaderValue::from_str(&format!("Bearer {text}")) else {
                return;
            };
            for auth in [&f.plain, &f.strict] {
                let (got, h) = run(auth, &v, forged);
                check_after(got, &h, bearer_token(&v));
            }
        }
        Token::Signed {
            claims,
            tamper,
            other,
            scheme,
        } => {
            let now = now();
            let json = to_json(&claims, now);
            let token = match tamper {
                Tamper::None | Tamper::SwapPayload | Tamper::Unsigned => {
                    sign(&json, Algorithm::HS256, KEY)
                }
                Tamper::WrongKey => sign(&json, Algorithm::HS256, b"not-the-key"),
                Tamper::OtherAlg => sign(&json, Algorithm::HS384, KEY),
                Tamper::AlgNone => format!(
                    "{}.{}.",
                    b64(br#"{"alg":"none","typ":"JWT"}"#),
                    b64(serde_json::to_string(&json).unwrap().as_bytes())
                ),
            };
            let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
            let mut changed = !matches!(tamper, Tamper::None);
            match tamper {
                Tamper::SwapPayload => {
                    let other = to_json(&other, now);
                    changed = other != json;
                    parts[1] = b64(serde_json::to_string(&other).unwrap().as_bytes());
                }
                Tamper::Unsigned => parts[2].clear(),
                _ => {}
            }
            let token = parts.join(".");
            let scheme = ["Bearer", "bearer", "BEARER", "Basic"][usize::from(scheme % 4)];
            let v = HeaderValue::from_str(&format!("{scheme} {token}")).unwrap();
            for (auth, strict) in [(&f.plain, false), (&f.strict, true)] {
                let (got, h) = run(auth, &v, forged);
                let want = if scheme == "Basic" || changed {
                    "401"
                } else {
                    model(&claims, strict)
                };
                assert_eq!(got, want, "strict {strict}: {tamper:?} {json:?}");
                check_after(got, &h, Some(&token));
            }
        }
    }
});
