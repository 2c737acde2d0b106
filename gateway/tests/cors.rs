//! `[routes.cors]`: preflights answered by the route, CORS fields on allowed origins'
//! responses, `Vary` on every response, and configurations a browser would refuse
//! refused at load. (`cors_browser.rs` runs the same in headless Chromium.)
use crate::common;
use common::*;

const CORS: &str = r#"
[[routes]]
path = "/"
[routes.static]
[routes.cors]
allow_origins = ["https://app.example.test"]
allow_methods = ["GET", "PUT"]
allow_headers = ["content-type", "x-token"]
expose_headers = ["etag"]
allow_credentials = true
max_age = "10m"
"#;

fn preflight(s: &TestServer, origin: &str, method: &str) -> Resp {
    send(
        s.addr,
        &format!(
            "OPTIONS /hello.txt HTTP/1.1\r\nHost: test\r\nOrigin: {origin}\r\n\
             Access-Control-Request-Method: {method}\r\n\
             Access-Control-Request-Headers: content-type\r\n\r\n"
        ),
    )
}

#[test]
fn an_allowed_origins_preflight_is_answered_with_what_it_may_do() {
    let s = TestServer::site(CORS);
    let r = preflight(&s, "https://app.example.test", "PUT");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example.test")
    );
    assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
    assert_eq!(r.header("access-control-allow-methods"), Some("GET,PUT"));
    assert_eq!(
        r.header("access-control-allow-headers"),
        Some("content-type,x-token")
    );
    assert_eq!(r.header("access-control-max-age"), Some("600"));
    assert!(r.body.is_empty());
}

#[test]
fn another_origin_gets_no_permission_and_every_response_varies_by_origin() {
    let s = TestServer::site(CORS);
    let r = preflight(&s, "https://evil.example.test", "PUT");
    assert_eq!(r.header("access-control-allow-origin"), None);
    assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
    let get = s.get_with("/hello.txt", "Origin: https://evil.example.test\r\n");
    assert_eq!(get.status, 200);
    assert_eq!(get.header("access-control-allow-origin"), None);
    let ok = s.get_with("/hello.txt", "Origin: https://app.example.test\r\n");
    assert_eq!(
        ok.header("access-control-allow-origin"),
        Some("https://app.example.test")
    );
    assert_eq!(ok.header("access-control-expose-headers"), Some("etag"));
    let plain = s.get("/hello.txt");
    let vary: Vec<&str> = plain
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("vary"))
        .map(|(_, v)| v.as_str())
        .collect();
    assert!(
        vary.iter()
            .any(|v| v.to_ascii_lowercase().contains("origin")),
        "{vary:?}"
    );
}

#[test]
fn any_origin_without_credentials() {
    let s = TestServer::site(
        "[[routes]]\npath = \"/\"\n[routes.static]\n[routes.cors]\nallow_origins = [\"*\"]\n",
    );
    let r = s.get_with("/hello.txt", "Origin: https://anyone.test\r\n");
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    assert_eq!(r.header("access-control-allow-credentials"), None);
}

#[test]
fn what_a_browser_would_refuse_is_refused_at_load_naming_the_key() {
    for (toml, key) in [
        (
            "allow_origins = [\"*\"]\nallow_credentials = true",
            "routes.0.cors.allow_origins",
        ),
        (
            "allow_origins = [\"https://a.test\"]\nallow_headers = [\"*\"]\nallow_credentials = true",
            "routes.0.cors.allow_headers",
        ),
        ("allow_origins = [\"https://a.test/path\"]", "routes.0.cors.allow_origins.0"),
        ("allow_origins = [\"a.test\"]", "routes.0.cors.allow_origins.0"),
        ("allow_origins = []", "routes.0.cors.allow_origins"),
        (
            "allow_origins = [\"*\"]\nallow_methods = [\"G ET\"]",
            "routes.0.cors.allow_methods.0",
        ),
    ] {
        let err = load_config(format!(
            "listen = \"127.0.0.1:0\"\nroot = {:?}\n[[routes]]\n[routes.static]\n[routes.cors]\n{toml}\n",
            fixtures().join("site")
        ))
        .expect_err(toml);
        assert!(err.contains(key), "{toml}: {err}");
    }
}
