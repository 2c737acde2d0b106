//! Basic auth on a route: 401 with a challenge, the right password served, and no spelling
//! of a protected path reaching it without credentials.
mod common;
use common::*;

const APR1: &str = "$apr1$abcdefgh$M2T3erDstkD7SsE2QQnfH0"; // "s3cret"
const SHA512: &str = "$6$saltsalt$As4wrv0kZlfch1du9WeH7qhskyLriQWySXrZzynnvi46nFnNxjdpl6ksRegrrKexvhIa/Iny8S8uF3fVWTMuC1";

fn basic(user: &str, pass: &str) -> String {
    use base64::Engine;
    let t = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
    format!("Authorization: Basic {t}\r\n")
}

fn server() -> ((tempfile::TempDir, tempfile::TempDir), TestServer) {
    let users = tempfile::tempdir().unwrap();
    let file = users.path().join("users");
    std::fs::write(&file, format!("ann:{APR1}\nsam:{SHA512}\n")).unwrap();
    let (dir, s) = admin_and_root(&format!(
        "[routes.auth]\nhtpasswd = {:?}\nrealm = \"staff\"",
        file.display().to_string()
    ));
    ((users, dir), s)
}

#[test]
fn missing_or_wrong_credentials_get_401_and_right_ones_the_file() {
    let (_d, s) = server();
    let r = s.get("/admin/secret.txt");
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Basic realm=\"staff\", charset=\"UTF-8\"")
    );
    assert_eq!(r.text(), "unauthorized\n", "no word on why");
    assert_eq!(
        s.get_with("/admin/secret.txt", &basic("ann", "wrong"))
            .status,
        401
    );
    assert_eq!(
        s.get_with("/admin/secret.txt", &basic("nobody", "s3cret"))
            .status,
        401
    );
    assert_eq!(
        s.get_with("/admin/secret.txt", "Authorization: Bearer s3cret\r\n")
            .status,
        401
    );
    for user in ["ann", "sam"] {
        for _ in 0..2 {
            // The second time from the cache.
            let r = s.get_with("/admin/secret.txt", &basic(user, "s3cret"));
            assert_eq!(r.status, 200, "{user}");
            assert_eq!(r.text(), "from the admin route");
        }
    }
}

#[test]
fn no_spelling_of_a_protected_path_gets_through_without_credentials() {
    let (_d, s) = server();
    for p in [
        "/admin/secret.txt",
        "//admin/secret.txt",
        "/admin/",
        "/admin",
        "/./admin/secret.txt",
        "/x/../admin/secret.txt",
        "/%61dmin/secret.txt",
        "/admin%2Fsecret.txt",
        "/%2e/admin/secret.txt",
        "/%2e%2e/admin/secret.txt",
    ] {
        assert_eq!(s.get(p).status, 401, "{p}");
        assert_ne!(
            s.get(p).text(),
            "from the root route",
            "{p} reached the other route's copy"
        );
    }
    // Case and a trailing dot name other files on Linux, served by the public route
    // only if they exist there (they don't).
    assert_eq!(s.get("/ADMIN/secret.txt").status, 404);
    assert_eq!(s.get("/admin./secret.txt").status, 404);
}

// --- Bearer JWTs ---------------------------------------------------------------------

use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use std::path::Path;

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn claims(extra: serde_json::Value) -> serde_json::Value {
    let mut c = serde_json::json!({
        "sub": "user-7", "iss": "https://issuer.test", "aud": "gatehouse",
        "exp": now() + 300, "nbf": now() - 10,
    });
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

/// A proxy route to an upstream that echoes the `X-User` header it got, behind JWT auth
/// with `key_file` and `algorithms`.
fn jwt_server(key_file: &Path, algorithms: &str) -> TestServer {
    let app = axum::Router::new().fallback(|h: http::HeaderMap| async move {
        h.get("x-user")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_else(|| "-".into())
    });
    let up = serve_axum(loopback(), app);
    TestServer::site(&format!(
        "[[routes]]\npath = \"/api\"\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n[routes.auth]\nrealm = \"api\"\n[routes.auth.jwt]\nkey_file = {:?}\nalgorithms = [{algorithms}]\nissuers = [\"https://issuer.test\"]\naudiences = [\"gatehouse\"]\nleeway = \"5s\"\nforward_claims = {{ sub = \"X-User\" }}\n",
        key_file.display().to_string()
    ))
}

fn bearer(t: &str) -> String {
    format!("Authorization: Bearer {t}\r\n")
}

#[test]
fn jwt_matrix_es256() {
    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let pub_file = dir.path().join("es.pub.pem");
    std::fs::write(&pub_file, key.public_key_pem()).unwrap();
    let enc = EncodingKey::from_ec_pem(key.serialize_pem().as_bytes()).unwrap();
    let tok = |c: serde_json::Value| encode(&Header::new(Algorithm::ES256), &c, &enc).unwrap();
    let s = jwt_server(&pub_file, "\"ES256\"");

    let r = s.get("/api/x");
    assert_eq!(r.status, 401, "missing");
    assert_eq!(r.header("www-authenticate"), Some("Bearer realm=\"api\""));
    let good = tok(claims(serde_json::json!({})));
    let r = s.get_with("/api/x", &format!("{}X-User: spoofed\r\n", bearer(&good)));
    assert_eq!(
        (r.status, r.text()),
        (200, "user-7".to_string()),
        "the claim, not the client's header"
    );

    let other = rcgen::KeyPair::generate().unwrap();
    let forged = encode(
        &Header::new(Algorithm::ES256),
        &claims(serde_json::json!({})),
        &EncodingKey::from_ec_pem(other.serialize_pem().as_bytes()).unwrap(),
    )
    .unwrap();
    for (why, t) in [
        ("bad signature", forged),
        (
            "expired",
            tok(claims(serde_json::json!({"exp": now() - 60}))),
        ),
        (
            "not yet valid",
            tok(claims(serde_json::json!({"nbf": now() + 60}))),
        ),
        (
            "wrong audience",
            tok(claims(serde_json::json!({"aud": "someone-else"}))),
        ),
        (
            "wrong issuer",
            tok(claims(serde_json::json!({"iss": "https://evil.test"}))),
        ),
        ("garbage", "not.a.jwt".to_string()),
    ] {
        let r = s.get_with("/api/x", &bearer(&t));
        assert_eq!(r.status, 401, "{why}");
        assert_eq!(
            r.header("www-authenticate"),
            Some("Bearer realm=\"api\", error=\"invalid_token\""),
            "{why}"
        );
        assert_eq!(r.text(), "unauthorized\n", "{why}: no detail");
    }
    // Within the leeway, an just-expired token still passes.
    let r = s.get_with(
        "/api/x",
        &bearer(&tok(claims(serde_json::json!({"exp": now() - 2})))),
    );
    assert_eq!(r.status, 200);
    // HS256 with the public key as its secret (the classic confusion) is refused.
    let confused = encode(
        &Header::new(Algorithm::HS256),
        &claims(serde_json::json!({})),
        &EncodingKey::from_secret(key.public_key_pem().as_bytes()),
    )
    .unwrap();
    assert_eq!(s.get_with("/api/x", &bearer(&confused)).status, 401);
}

#[test]
fn jwt_hs256_rs256_and_eddsa_keys() {
    let dir = tempfile::tempdir().unwrap();
    // HS256: the file holds the secret.
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "a-long-shared-secret\n").unwrap();
    let s = jwt_server(&secret, "\"HS256\"");
    let t = encode(
        &Header::new(Algorithm::HS256),
        &claims(serde_json::json!({})),
        &EncodingKey::from_secret(b"a-long-shared-secret"),
    )
    .unwrap();
    assert_eq!(s.get_with("/api/x", &bearer(&t)).status, 200);
    drop(s);
    // RS256 with a PEM public key.
    let fx = fixtures().join("jwt");
    let s = jwt_server(&fx.join("rsa.pub.pem"), "\"RS256\"");
    let pem = std::fs::read(fx.join("rsa.pem")).unwrap();
    let t = encode(
        &Header::new(Algorithm::RS256),
        &claims(serde_json::json!({})),
        &EncodingKey::from_rsa_pem(&pem).unwrap(),
    )
    .unwrap();
    assert_eq!(s.get_with("/api/x", &bearer(&t)).status, 200);
    drop(s);
    // EdDSA (Ed25519).
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let pub_file = dir.path().join("ed.pub.pem");
    std::fs::write(&pub_file, key.public_key_pem()).unwrap();
    let s = jwt_server(&pub_file, "\"EdDSA\"");
    let t = encode(
        &Header::new(Algorithm::EdDSA),
        &claims(serde_json::json!({})),
        &EncodingKey::from_ed_pem(key.serialize_pem().as_bytes()).unwrap(),
    )
    .unwrap();
    assert_eq!(s.get_with("/api/x", &bearer(&t)).status, 200);
}

#[test]
fn jwt_keys_from_a_jwk_set_are_chosen_by_kid() {
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("jwks.json");
    std::fs::write(
        &set,
        r#"{"keys":[{"kty":"oct","kid":"k1","alg":"HS256","k":"c2VjcmV0LW9uZQ"},{"kty":"oct","kid":"k2","alg":"HS256","k":"c2VjcmV0LXR3bw"}]}"#,
    )
    .unwrap();
    let s = jwt_server(&set, "\"HS256\"");
    let with_kid = |kid: &str, secret: &[u8]| {
        let mut h = Header::new(Algorithm::HS256);
        h.kid = Some(kid.into());
        encode(
            &h,
            &claims(serde_json::json!({})),
            &EncodingKey::from_secret(secret),
        )
        .unwrap()
    };
    assert_eq!(
        s.get_with("/api/x", &bearer(&with_kid("k1", b"secret-one")))
            .status,
        200
    );
    assert_eq!(
        s.get_with("/api/x", &bearer(&with_kid("k2", b"secret-two")))
            .status,
        200
    );
    assert_eq!(
        s.get_with("/api/x", &bearer(&with_kid("k2", b"secret-one")))
            .status,
        401
    );
    assert_eq!(
        s.get_with("/api/x", &bearer(&with_kid("k9", b"secret-one")))
            .status,
        401,
        "unknown kid"
    );
}
