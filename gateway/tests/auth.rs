//! Basic auth on a route: 401 with a challenge, the right password served, and no spelling
//! of a protected path reaching it without credentials.
use crate::common;
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
    let with_kid = |kid: &str, secret: &[u8]| hs_token(kid, secret, serde_json::json!({}));
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

// --- 403: valid but not let in -------------------------------------------------------

#[test]
fn a_valid_user_outside_the_users_list_gets_403() {
    let users = tempfile::tempdir().unwrap();
    let file = users.path().join("users");
    std::fs::write(&file, format!("ann:{APR1}\nsam:{SHA512}\n")).unwrap();
    let (_dir, s) = admin_and_root(&format!(
        "[routes.auth]\nhtpasswd = {:?}\nusers = [\"ann\"]",
        file.display().to_string()
    ));
    for _ in 0..2 {
        // The second time from the cache, which must not skip the list.
        let r = s.get_with("/admin/secret.txt", &basic("sam", "s3cret"));
        assert_eq!(r.status, 403);
        assert_ne!(r.text(), "from the admin route");
        assert_eq!(
            s.get_with("/admin/secret.txt", &basic("ann", "s3cret"))
                .status,
            200
        );
    }
    assert_eq!(
        s.get_with("/admin/secret.txt", &basic("sam", "wrong"))
            .status,
        401,
        "wrong credentials are a 401 whoever the user"
    );
}

// --- JWKS from a URL -----------------------------------------------------------------

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const JWK_1: &str = r#"{"kty":"oct","kid":"k1","alg":"HS256","k":"c2VjcmV0LW9uZQ"}"#;
const JWK_2: &str = r#"{"kty":"oct","kid":"k2","alg":"HS256","k":"c2VjcmV0LXR3bw"}"#;

/// A key server whose set can be changed, counting its fetches.
fn jwks_server(set: Arc<Mutex<String>>, hits: Arc<AtomicUsize>) -> std::net::SocketAddr {
    let app = axum::Router::new().route(
        "/keys",
        axum::routing::get(move || {
            let (set, hits) = (set.clone(), hits.clone());
            async move {
                hits.fetch_add(1, Ordering::SeqCst);
                let body = set.lock().unwrap().clone();
                ([("content-type", "application/json")], body)
            }
        }),
    );
    serve_axum(loopback(), app)
}

fn hs_token(kid: &str, secret: &[u8], extra: serde_json::Value) -> String {
    let mut h = Header::new(Algorithm::HS256);
    h.kid = Some(kid.into());
    encode(&h, &claims(extra), &EncodingKey::from_secret(secret)).unwrap()
}

/// An upstream answering with the named request headers it got, `-` for a missing one.
fn echo_upstream(names: &'static [&'static str]) -> std::net::SocketAddr {
    let app = axum::Router::new().fallback(move |h: http::HeaderMap| async move {
        names
            .iter()
            .map(|n| {
                let all: Vec<_> = h.get_all(*n).iter().map(|v| v.to_str().unwrap()).collect();
                if all.is_empty() {
                    "-".to_string()
                } else {
                    all.join(",")
                }
            })
            .collect::<Vec<_>>()
            .join("|")
    });
    serve_axum(loopback(), app)
}

#[test]
fn jwks_url_is_fetched_and_refetched_for_an_unknown_kid_only_so_often() {
    let set = Arc::new(Mutex::new(format!("{{\"keys\":[{JWK_1}]}}")));
    let hits = Arc::new(AtomicUsize::new(0));
    let keys = jwks_server(set.clone(), hits.clone());
    let up = echo_upstream(&["x-user"]);
    let s = TestServer::site(&format!(
        "[[routes]]\npath = \"/api\"\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n[routes.auth.jwt]\njwks_url = \"http://{keys}/keys\"\njwks_refresh_min = \"300ms\"\nalgorithms = [\"HS256\"]\nissuers = [\"https://issuer.test\"]\naudiences = [\"gatehouse\"]\nforward_claims = {{ sub = \"X-User\" }}\nrequire = {{ scope = [\"read\", \"admin\"] }}\n"
    ));
    let read = serde_json::json!({"scope": "profile read"});
    let k1 = hs_token("k1", b"secret-one", read.clone());
    let r = s.get_with("/api/x", &format!("{}X-User: forged\r\n", bearer(&k1)));
    assert_eq!((r.status, r.text().as_str()), (200, "user-7"));
    assert_eq!(hits.load(Ordering::SeqCst), 1, "fetched when first needed");
    assert_eq!(s.get_with("/api/x", &bearer(&k1)).status, 200);
    assert_eq!(hits.load(Ordering::SeqCst), 1, "and then held");

    // Valid, but without a required scope: 403, saying so as RFC 6750 §3.1 has it.
    let r = s.get_with(
        "/api/x",
        &bearer(&hs_token(
            "k1",
            b"secret-one",
            serde_json::json!({"scope": "write"}),
        )),
    );
    assert_eq!(r.status, 403);
    assert!(
        r.header("www-authenticate")
            .unwrap()
            .contains("error=\"insufficient_scope\""),
        "{:?}",
        r.headers
    );
    let listed = hs_token(
        "k1",
        b"secret-one",
        serde_json::json!({"scope": ["x", "admin"]}),
    );
    assert_eq!(s.get_with("/api/x", &bearer(&listed)).status, 200);

    // k2 is rotated in at the key server: the first token naming it brings a refetch.
    *set.lock().unwrap() = format!("{{\"keys\":[{JWK_1},{JWK_2}]}}");
    std::thread::sleep(std::time::Duration::from_millis(400));
    let k2 = hs_token("k2", b"secret-two", read.clone());
    let r = s.get_with("/api/x", &bearer(&k2));
    assert_eq!((r.status, r.text().as_str()), (200, "user-7"));
    assert_eq!(hits.load(Ordering::SeqCst), 2);

    // Made-up kids: one refetch at most per jwks_refresh_min, however many tokens.
    std::thread::sleep(std::time::Duration::from_millis(400));
    for _ in 0..5 {
        let t = hs_token("k9", b"secret-one", read.clone());
        assert_eq!(s.get_with("/api/x", &bearer(&t)).status, 401);
    }
    assert_eq!(hits.load(Ordering::SeqCst), 3);
    // A key dropped from the set stops working once the set is refetched.
    *set.lock().unwrap() = format!("{{\"keys\":[{JWK_2}]}}");
    std::thread::sleep(std::time::Duration::from_millis(400));
    let t = hs_token("k9", b"secret-one", read.clone());
    assert_eq!(s.get_with("/api/x", &bearer(&t)).status, 401);
    assert_eq!(hits.load(Ordering::SeqCst), 4);
    assert_eq!(s.get_with("/api/x", &bearer(&k1)).status, 401);
    assert_eq!(s.get_with("/api/x", &bearer(&k2)).status, 200);
}

#[test]
fn a_jwks_server_that_is_down_lets_nobody_in_and_keeps_no_request_waiting_long() {
    let dead = loopback().local_addr().unwrap(); // bound, then closed: refused
    let up = echo_upstream(&["x-user"]);
    let s = TestServer::site(&format!(
        "[[routes]]\npath = \"/api\"\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n[routes.auth.jwt]\njwks_url = \"http://{dead}/keys\"\njwks_timeout = \"1s\"\nalgorithms = [\"HS256\"]\n"
    ));
    let t = std::time::Instant::now();
    let k1 = hs_token("k1", b"secret-one", serde_json::json!({}));
    assert_eq!(s.get_with("/api/x", &bearer(&k1)).status, 401);
    assert!(t.elapsed() < std::time::Duration::from_secs(3));
}

// --- Forward auth --------------------------------------------------------------------

/// An auth service deciding on the `Authorization` header it is passed.
fn auth_service() -> std::net::SocketAddr {
    let app = axum::Router::new().fallback(|method: http::Method, h: http::HeaderMap| async move {
        let get = |n: &str| h.get(n).map(|v| v.to_str().unwrap().to_string());
        let seen = format!(
            "{method} {} {} {} {} {}",
            get("x-forwarded-method").unwrap_or_default(),
            get("x-forwarded-uri").unwrap_or_default(),
            get("x-forwarded-host").unwrap_or_default(),
            get("x-forwarded-for").unwrap_or_default(),
            get("x-forwarded-proto").unwrap_or_default(),
        );
        let mut res = http::Response::builder();
        let body = match get("authorization").as_deref() {
            Some("let-me-in") => {
                res = res
                    .status(204)
                    .header("x-auth-user", "alice")
                    .header("x-auth-seen", seen)
                    .header("x-not-copied", "1");
                ""
            }
            Some("no") => {
                res = res.status(403).header("content-type", "text/plain");
                "not you"
            }
            Some("login") => {
                res = res.status(302).header("location", "https://login.test/");
                ""
            }
            Some("boom") => {
                res = res.status(500);
                "broken"
            }
            Some("slow") => {
                tokio::time::sleep(std::time::Duration::from_secs(5)).await;
                res = res.status(204);
                ""
            }
            _ => {
                res = res
                    .status(401)
                    .header("www-authenticate", "Custom realm=\"sso\"");
                "who are you"
            }
        };
        res.body(axum::body::Body::from(body)).unwrap()
    });
    serve_axum(loopback(), app)
}

fn forward_server(auth: std::net::SocketAddr) -> TestServer {
    let up = echo_upstream(&[
        "x-auth-user",
        "x-auth-seen",
        "x-not-copied",
        "authorization",
    ]);
    TestServer::site(&format!(
        "[[routes]]\npath = \"/api\"\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n[routes.auth.forward]\nurl = \"http://{auth}/check\"\nresponse_headers = [\"x-auth-user\", \"x-auth-seen\"]\ntimeout = \"500ms\"\n"
    ))
}

fn authz(v: &str) -> String {
    format!("Authorization: {v}\r\n")
}

#[test]
fn forward_auth_allow_copies_the_chosen_headers_and_deny_answers_as_the_service_did() {
    let s = forward_server(auth_service());
    let r = s.get_with(
        "/api/x?q=1",
        &format!("{}X-Auth-User: mallory\r\n", authz("let-me-in")),
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.text(),
        "alice|GET GET /api/x?q=1 test 127.0.0.1 http|-|let-me-in",
        "the client's own X-Auth-User is gone, X-Not-Copied wasn't chosen"
    );
    // POST is asked about as POST, without the body.
    let r = send(
        s.addr,
        "POST /api/form HTTP/1.1\r\nHost: test\r\nAuthorization: let-me-in\r\nContent-Length: 5\r\n\r\nhello",
    );
    assert_eq!(r.status, 200);
    assert!(r.text().contains("POST POST /api/form"), "{}", r.text());

    let r = s.get("/api/x");
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some("Custom realm=\"sso\""));
    assert_eq!(r.text(), "who are you");
    let r = s.get_with("/api/x", &authz("no"));
    assert_eq!((r.status, r.text().as_str()), (403, "not you"));
    let r = s.get_with("/api/x", &authz("login"));
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("https://login.test/"));
}

/// The auth service hears the connection's scheme, never the client's: an `https://`
/// target on a plain connection is still `X-Forwarded-Proto: http`.
#[test]
fn forward_auth_hears_the_connections_scheme_not_the_targets() {
    let s = forward_server(auth_service());
    let r = send(
        s.addr,
        "GET https://test/api/x HTTP/1.1\r\nHost: test\r\nAuthorization: let-me-in\r\n\r\n",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.text().contains("127.0.0.1 http|"),
        "the auth service was told {}",
        r.text()
    );
}

/// Behind a balancer in `trusted_proxies`, the auth service is told the client the
/// balancer names, not the balancer; a peer outside the list can't name one.
#[test]
fn forward_auth_hears_the_client_behind_trusted_proxies() {
    let auth = auth_service();
    let up = echo_upstream(&["x-auth-seen"]);
    let toml = |trusted: &str| {
        format!(
            "[[routes]]\npath = \"/api\"\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n[routes.auth.forward]\nurl = \"http://{auth}/check\"\nresponse_headers = [\"x-auth-seen\"]\ntrusted_proxies = [{trusted}]\n"
        )
    };
    let claim = format!(
        "{}X-Forwarded-For: 198.51.100.7, 203.0.113.9\r\n",
        authz("let-me-in")
    );
    let s = TestServer::site(&toml("\"127.0.0.0/8\""));
    let r = s.get_with("/api/x", &claim);
    assert_eq!(r.status, 200);
    assert!(r.text().ends_with(" 203.0.113.9 http"), "told {}", r.text());
    let s = TestServer::site(&toml(""));
    let r = s.get_with("/api/x", &claim);
    assert_eq!(r.status, 200);
    assert!(r.text().ends_with(" 127.0.0.1 http"), "told {}", r.text());
    let bad = load_config(toml("\"10.0.0.0/33\"")).expect_err("refused");
    assert!(
        bad.contains("routes.0.auth.forward.trusted_proxies.0"),
        "{bad}"
    );
}

#[test]
fn forward_auth_failing_slow_or_down_is_503_never_an_allow() {
    let s = forward_server(auth_service());
    let r = s.get_with("/api/x", &authz("boom"));
    assert_eq!(r.status, 503);
    assert_ne!(r.text(), "broken");
    let t = std::time::Instant::now();
    assert_eq!(s.get_with("/api/x", &authz("slow")).status, 503);
    assert!(
        t.elapsed() < std::time::Duration::from_secs(3),
        "the timeout holds"
    );

    let dead = loopback().local_addr().unwrap();
    let s = forward_server(dead);
    assert_eq!(s.get_with("/api/x", &authz("let-me-in")).status, 503);
}

#[test]
fn forward_auth_guards_every_spelling_of_the_path() {
    let s = forward_server(auth_service());
    for p in ["/api/x", "//api/x", "/./api/x", "/%61pi/x", "/API/x"] {
        let r = s.get(p);
        // 400: a proxy refuses dot segments outright.
        assert!(
            matches!(r.status, 400 | 401 | 404),
            "{p}: {} {}",
            r.status,
            r.text()
        );
        assert!(!r.text().contains('|'), "{p} reached the upstream");
    }
}
