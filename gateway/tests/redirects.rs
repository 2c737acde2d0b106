//! `[[routes.redirects]]` and `[[routes.rewrites]]`: matches by exact path, prefix and
//! regex with captures, a moved host, and rewrites that can't leave their route.
use crate::common;
use common::*;

const REDIRECTS: &str = r#"
[[routes]]
path = "/"
[routes.static]
[[routes.redirects]]
exact = "/old.html"
to = "/hello.txt"
[[routes.redirects]]
prefix = "/docs-v1"
to = "/docs$1"
status = 308
[[routes.redirects]]
regex = '^/blog/(\d{4})/(\w+)$'
to = "https://blog.example.com/$1/$2$is_args$args"
status = 302

[[routes]]
hosts = ["www.example.test"]
[[routes.redirects]]
to = "https://example.test$request_uri"
"#;

#[test]
fn each_match_kind_redirects_with_its_target_and_status() {
    let s = TestServer::site(REDIRECTS);
    for (target, status, location) in [
        ("/old.html", 301, "/hello.txt"),
        ("/docs-v1", 308, "/docs"),
        ("/docs-v1/a/b.html?x=1", 308, "/docs/a/b.html"),
        (
            "/blog/2024/hello?utm=1",
            302,
            "https://blog.example.com/2024/hello?utm=1",
        ),
        (
            "/blog/2024/hello",
            302,
            "https://blog.example.com/2024/hello",
        ),
        // Matched on the normalised path, as the route was chosen.
        ("/x/../old.html", 301, "/hello.txt"),
    ] {
        let r = s.get(target);
        assert_eq!(r.status, status, "{target}");
        assert_eq!(r.header("location"), Some(location), "{target}");
        assert_eq!(r.header("content-length"), Some("0"), "{target}");
    }
    // No rule matches: the file, or a 404, as without rules.
    assert_eq!(s.get("/old.htmlx").status, 404);
    assert_eq!(s.get("/docs-v10").status, 404);
    assert_eq!(s.get("/blog/24/x").status, 404);
    assert_eq!(s.get("/hello.txt").status, 200);
}

#[test]
fn a_moved_host_keeps_path_and_query() {
    let s = TestServer::site(REDIRECTS);
    let r = send(
        s.addr,
        "GET /a/b?c=d HTTP/1.1\r\nHost: www.example.test\r\n\r\n",
    );
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("https://example.test/a/b?c=d"));
    let r = send(
        s.addr,
        "GET / HTTP/1.1\r\nHost: www.example.test:8080\r\n\r\n",
    );
    assert_eq!(r.header("location"), Some("https://example.test/"));
}

#[test]
fn rewrites_change_what_the_service_serves_and_cannot_leave_the_route() {
    let sub = fixtures().join("site/sub");
    let s = TestServer::site(&format!(
        r#"
[[routes]]
path = "/"
[routes.static]
[[routes.rewrites]]
regex = '^/greeting/(\w+)$'
to = "/$1.txt"
[[routes.rewrites]]
exact = "/home"
to = "/index.html"

[[routes]]
path = "/sub"
[routes.static]
root = {sub:?}
[[routes.rewrites]]
regex = '^/sub/up(.*)$'
to = "/$1/../../etc"
"#
    ));
    let hello = s.get("/hello.txt");
    let r = s.get("/greeting/hello");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, hello.body);
    assert_eq!(s.get("/home").body, s.get("/index.html").body);
    // The first rule that matches applies, and a rewrite that fails to find a file is a 404.
    assert_eq!(s.get("/greeting/nothing").status, 404);
    // A rewritten path is normalised and must stay under its route's prefix.
    assert_eq!(s.get("/sub/up..").status, 400);
}

#[test]
fn a_proxy_gets_the_rewritten_target() {
    let up = serve_axum(
        loopback(),
        axum::Router::new().fallback(axum::routing::any(
            |req: axum::extract::Request| async move { req.uri().to_string() },
        )),
    );
    let s = TestServer::site(&format!(
        r#"
[[routes]]
path = "/api"
[routes.proxy]
upstreams = ["http://{up}"]
[[routes.rewrites]]
regex = '^/api/v1/(.*)$'
to = "/api/v2/$1"
"#
    ));
    assert_eq!(s.get("/api/v1/users?id=3").text(), "/api/v2/users?id=3");
    // Normalised first: the rule sees the path the route was chosen by, and the upstream
    // gets the rewritten path normalised, not the target as received.
    assert_eq!(s.get("/api//v1/a").text(), "/api/v2/a");
    // A dot segment on a proxy route is still refused, as without rewrites.
    assert_eq!(s.get("/api/x/../v1/a").status, 400);
    assert_eq!(s.get("/api/other").text(), "/api/other");
    // A `;` decoded by the normalisation goes on encoded, never as a bare `;` that Tomcat
    // would read as path parameters.
    assert_eq!(s.get("/api/v1/admin%3Bx").text(), "/api/v2/admin%3Bx");
    // A target no rule rewrites goes as it came, as on a route without rewrites.
    assert_eq!(s.get("/api/a%20b").text(), "/api/a%20b");
}

/// On a proxy route too, redirects match the normalised path the route was chosen by:
/// `//evil.test/` is `/evil.test/`, never a scheme-relative target.
#[test]
fn a_proxy_routes_redirects_see_the_normalised_path() {
    let up = serve_axum(
        loopback(),
        axum::Router::new().fallback(axum::routing::any(|| async { "upstream" })),
    );
    let s = TestServer::site(&format!(
        r#"
[[routes]]
path = "/"
[routes.proxy]
upstreams = ["http://{up}"]
[[routes.redirects]]
regex = '^/(.*)/$'
to = "/$1"
[[routes.redirects]]
exact = "/old"
to = "/new"
"#
    ));
    let r = s.get("//evil.test/");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("/evil.test"));
    assert_eq!(s.get("/%6Fld").header("location"), Some("/new"));
    assert_eq!(s.get("/x").text(), "upstream");
}

#[test]
fn bad_rules_are_refused_naming_the_key() {
    for (toml, key) in [
        (
            "[[routes.redirects]]\nregex = '('\nto = \"/\"",
            "routes.0.redirects.0.regex",
        ),
        (
            "[[routes.redirects]]\nexact = \"/a\"\nto = \"/$1x$9$0\"",
            "routes.0.redirects.0.to",
        ),
        (
            "[[routes.redirects]]\nexact = \"/a\"\nto = \"/b\"\nstatus = 200",
            "routes.0.redirects.0.status",
        ),
        (
            "[[routes.redirects]]\nexact = \"a\"\nto = \"/b\"",
            "routes.0.redirects.0.exact",
        ),
        (
            "[[routes.redirects]]\nexact = \"/a\"\nprefix = \"/b\"\nto = \"/b\"",
            "routes.0.redirects.0",
        ),
        (
            "[[routes.rewrites]]\nregex = '[z-a]'\nto = \"/\"",
            "routes.0.rewrites.0.regex",
        ),
        (
            "[[routes.rewrites]]\nprefix = \"/a\"\nto = \"http://x/\"",
            "routes.0.rewrites.0.to",
        ),
    ] {
        let err = load_config(format!(
            "listen = \"127.0.0.1:0\"\nroot = {:?}\n[[routes]]\n[routes.static]\n{toml}\n",
            fixtures().join("site")
        ))
        .expect_err(toml);
        assert!(err.contains(key), "{toml}: {err}");
    }
    // A route with no service needs a redirect for every path.
    let err = load_config(
        "listen = \"127.0.0.1:0\"\n[[routes]]\nhosts = [\"a.test\"]\n[[routes.redirects]]\nprefix = \"/a\"\nto = \"/b\"\n".into(),
    )
    .expect_err("no service");
    assert!(err.contains("routes.0"), "{err}");
}
