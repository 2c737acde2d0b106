//! `error_pages`: a page from the route's root for an error status, sent with the original
//! status; an upstream's own error passed on unless `intercept_errors`.
use crate::common;
use common::*;

/// An upstream answering 503 with its own JSON body, and a port nothing listens on.
fn upstreams() -> (std::net::SocketAddr, std::net::SocketAddr) {
    let busy = serve_axum(
        loopback(),
        axum::Router::new().fallback(axum::routing::any(|| async {
            (
                http::StatusCode::SERVICE_UNAVAILABLE,
                [("content-type", "application/json")],
                "{\"error\":\"busy\"}",
            )
        })),
    );
    let dead = loopback().local_addr().unwrap();
    (busy, dead)
}

#[test]
fn the_page_replaces_the_body_and_the_status_stays() {
    let (_dir, s) = with_50x(false);
    let page404 = std::fs::read(s.root.join("404.html")).unwrap();
    let r = s.get("/missing.txt");
    assert_eq!(r.status, 404);
    assert_eq!(r.body, page404);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(
        r.header("content-length"),
        Some(page404.len().to_string().as_str())
    );
    let head = s.head("/missing.txt");
    assert_eq!(head.status, 404);
    assert!(head.body.is_empty());
    let dead = s.get("/dead/x");
    assert_eq!(dead.status, 502);
    assert_eq!(dead.text(), "<h1>We'll be right back</h1>\n");
    // Not mapped: as before.
    assert_eq!(s.get("/hello.txt").status, 200);
}

#[test]
fn an_upstreams_own_error_passes_unless_intercepted() {
    let (_dir, s) = with_50x(false);
    let r = s.get("/busy/x");
    assert_eq!(r.status, 503);
    assert_eq!(r.text(), "{\"error\":\"busy\"}");
    let (_dir, s) = with_50x(true);
    let r = s.get("/busy/x");
    assert_eq!(r.status, 503);
    assert_eq!(r.text(), "<h1>We'll be right back</h1>\n");
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
}

/// `server`, with a 50x.html in the site's root before it loads.
fn with_50x(intercept: bool) -> (tempfile::TempDir, TestServer) {
    // Pages are read when the routes are built: the page is written first.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    copy_dir(&fixtures().join("site"), &root);
    std::fs::write(root.join("50x.html"), "<h1>We'll be right back</h1>\n").unwrap();
    let (busy, dead) = upstreams();
    let toml = server_toml(busy, dead, intercept);
    let s = TestServer::start(&root, &toml);
    (dir, s)
}

fn server_toml(busy: std::net::SocketAddr, dead: std::net::SocketAddr, intercept: bool) -> String {
    format!(
        r#"
[[routes]]
path = "/"
error_pages = {{ "404" = "/404.html", "403" = "/404.html" }}
[routes.static]

[[routes]]
path = "/dead"
error_pages = {{ "502" = "/50x.html", "503" = "/50x.html", "504" = "/50x.html" }}
[routes.proxy]
upstreams = ["http://{dead}"]
connect_timeout = "1s"
retries = 0

[[routes]]
path = "/busy"
error_pages = {{ "503" = "/50x.html" }}
[routes.proxy]
upstreams = ["http://{busy}"]
intercept_errors = {intercept}
"#
    )
}

#[test]
fn a_denied_client_gets_the_page_with_403() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    copy_dir(&fixtures().join("site"), &root);
    let s = TestServer::start(
        &root,
        "[[routes]]\npath = \"/\"\nerror_pages = { \"403\" = \"/404.html\" }\n[routes.static]\n[routes.access]\ndeny = [\"127.0.0.0/8\"]\n",
    );
    let r = s.get("/hello.txt");
    assert_eq!(r.status, 403);
    assert_eq!(r.body, std::fs::read(root.join("404.html")).unwrap());
}

#[test]
fn bad_pages_are_refused_naming_the_key() {
    let site = fixtures().join("site");
    for (pages, key) in [
        ("{ \"200\" = \"/404.html\" }", "routes.0.error_pages.200"),
        (
            "{ \"404\" = \"../etc/passwd\" }",
            "routes.0.error_pages.404",
        ),
        ("{ \"404\" = \"/a/../../x\" }", "routes.0.error_pages.404"),
    ] {
        let err = load_config(format!(
            "listen = \"127.0.0.1:0\"\nroot = {site:?}\n[[routes]]\nerror_pages = {pages}\n[routes.static]\n"
        ))
        .expect_err(pages);
        assert!(err.contains(key), "{pages}: {err}");
    }
    // A page that isn't there, or is hidden, is refused when the routes are built.
    for page in ["/nope.html", "/.git/config"] {
        let config = load_config(format!(
            "listen = \"127.0.0.1:0\"\nroot = {site:?}\n[[routes]]\nerror_pages = {{ \"404\" = {page:?} }}\n[routes.static]\n"
        ))
        .expect("loads");
        let err = gatehouse::router::build(&config)
            .err()
            .expect(page)
            .to_string();
        assert!(err.contains("routes.0.error_pages.404"), "{err}");
    }
}
