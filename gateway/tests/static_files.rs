//! GET and HEAD, methods, index files, directory redirects, content types, 404 pages,
//! listings and Cache-Control.
use crate::common;
use common::*;

#[test]
fn get_serves_the_file_with_validators() {
    let s = TestServer::site("");
    let r = s.get("/hello.txt");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"hello, world\n");
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header("content-length"), Some("13"));
    assert_eq!(r.header("accept-ranges"), Some("bytes"));
    let etag = r.header("etag").expect("etag");
    assert!(
        etag.starts_with('"') && etag.ends_with('"') && !etag.starts_with("W/"),
        "strong: {etag}"
    );
    let lm = r.header("last-modified").expect("last-modified");
    assert!(httpdate::parse_http_date(lm).is_ok(), "{lm}");
}

#[test]
fn head_has_the_same_headers_as_get_and_no_body() {
    let s = TestServer::site("");
    for path in ["/hello.txt", "/", "/missing", "/docs"] {
        let g = s.get(path);
        let h = s.head(path);
        assert_eq!(g.status, h.status, "{path}");
        let strip = |r: &Resp| {
            let mut v: Vec<_> = r
                .headers
                .iter()
                .filter(|(k, _)| k != "date")
                .cloned()
                .collect();
            v.sort();
            v
        };
        assert_eq!(strip(&g), strip(&h), "{path}");
        assert!(h.body.is_empty());
    }
    // HEAD's body really is absent: a second request on the same connection parses.
    let mut c = Conn::open(s.addr);
    let h = c.request("HEAD /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(h.header("content-length"), Some("13"));
    let g = c.request("GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(g.body, b"hello, world\n");
}

#[test]
fn other_methods_get_405_with_allow() {
    let s = TestServer::site("");
    for m in ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"] {
        let r = send(
            s.addr,
            &format!("{m} /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n"),
        );
        assert_eq!(r.status, 405, "{m}");
        assert_eq!(r.header("allow"), Some("GET, HEAD"), "{m}");
    }
}

#[test]
fn directories_use_the_index_and_redirect_without_slash() {
    let s = TestServer::site("");
    let r = s.get("/");
    assert_eq!(r.status, 200);
    assert!(r.text().contains("home page"));
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    let r = s.get("/docs/");
    assert_eq!(r.status, 200);
    assert!(r.text().contains("docs index"));
    let r = s.get("/docs");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("docs/"));
    let r = s.get("/docs?x=1");
    assert_eq!(r.header("location"), Some("docs/?x=1"));
    // A file named with a trailing slash is not a directory.
    assert_eq!(s.get("/hello.txt/").status, 404);
    // A directory without an index, listing off: 404.
    assert_eq!(s.get("/empty/").status, 404);
}

#[test]
fn index_names_are_configurable() {
    let s = TestServer::site(
        "[[routes]]\n[routes.static]\nindex = [\"missing.html\", \"hello.txt\"]\n",
    );
    let r = s.get("/");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"hello, world\n");
}

#[test]
fn content_types_by_extension() {
    let s = TestServer::site("");
    for (path, ct) in [
        ("/style.css", "text/css; charset=utf-8"),
        ("/app.js", "text/javascript; charset=utf-8"),
        ("/data.json", "application/json; charset=utf-8"),
        ("/index.html", "text/html; charset=utf-8"),
    ] {
        assert_eq!(s.get(path).header("content-type"), Some(ct), "{path}");
    }
}

#[test]
fn not_found_plain_and_custom_page() {
    let s = TestServer::site("");
    let r = s.get("/nope.txt");
    assert_eq!(r.status, 404);

    let s = TestServer::site("[[routes]]\n[routes.static]\nnot_found_page = \"404.html\"\n");
    let r = s.get("/nope.txt");
    assert_eq!(r.status, 404);
    assert!(r.text().contains("custom not found"));
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    // A page too large to be held in memory is streamed.
    let big = TestServer::site(
        "[[routes]]\n[routes.static]\nnot_found_page = \"404.html\"\n[routes.static.open_file_cache]\ninline_max = 8\n",
    );
    let r = big.get("/nope.txt");
    assert_eq!(r.status, 404);
    assert!(r.text().contains("custom not found"));
    // Hidden paths get the same page: nothing tells them apart from absent ones.
    let r = s.get("/.env");
    assert_eq!(r.status, 404);
    assert!(r.text().contains("custom not found"));
}

#[test]
fn cache_control_per_route() {
    let s =
        TestServer::site("[[routes]]\n[routes.static]\ncache_control = \"public, max-age=600\"\n");
    assert_eq!(
        s.get("/hello.txt").header("cache-control"),
        Some("public, max-age=600")
    );
    let plain = TestServer::site("");
    assert_eq!(plain.get("/hello.txt").header("cache-control"), None);
}

#[test]
fn cache_control_is_sent_on_2xx_and_304_only() {
    let s = TestServer::site(
        "[[routes]]\n[routes.static]\ncache_control = \"public, max-age=600\"\nnot_found_page = \"404.html\"\n",
    );
    let ok = s.get("/hello.txt");
    let etag = ok.header("etag").unwrap().to_string();
    let cases = [
        (s.get("/hello.txt"), 200),
        (s.get_with("/hello.txt", "Range: bytes=0-1\r\n"), 206),
        (
            s.get_with("/hello.txt", &format!("If-None-Match: {etag}\r\n")),
            304,
        ),
    ];
    for (r, status) in cases {
        assert_eq!(r.status, status);
        assert_eq!(
            r.header("cache-control"),
            Some("public, max-age=600"),
            "{status}"
        );
    }
    let r = s.get_with("/hello.txt", "If-Match: \"other\"\r\n");
    assert_eq!(r.status, 412);
    assert_eq!(r.header("cache-control"), None);
    // The custom 404 page: no Cache-Control and no validators of the page file, which a
    // cache would otherwise keep and revalidate as if the 404 were the resource.
    let r = s.get("/nope.txt");
    assert_eq!(r.status, 404);
    assert!(r.text().contains("custom not found"));
    for name in ["cache-control", "etag", "last-modified"] {
        assert_eq!(r.header(name), None, "{name} on a 404");
    }
}

#[test]
fn listing_is_off_by_default_and_escapes_names() {
    let s = TestServer::site("[[routes]]\n[routes.static]\nlisting = true\n");
    std::fs::write(s.root.join("sub/<b>&.txt"), "x").unwrap();
    let r = s.get("/sub/");
    assert_eq!(r.status, 200);
    let html = r.text();
    assert!(html.contains("href=\"deeper/\""), "{html}");
    assert!(html.contains("&lt;b&gt;&amp;.txt"), "{html}");
    assert!(!html.contains("<b>&"), "{html}");
    // Dotfiles stay hidden in listings.
    let root = s.get("/").text();
    assert!(root.contains("home page"), "index wins over listing");
    let r = s.get("/empty/");
    assert_eq!(r.status, 200);
    assert!(!r.text().contains(".keep"));
}

#[test]
fn listings_show_only_the_symlinks_a_request_would_follow() {
    let s = TestServer::site("[[routes]]\n[routes.static]\nlisting = true\n");
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "x").unwrap();
    let link = |to: &std::path::Path, name: &str| {
        std::os::unix::fs::symlink(to, s.root.join("sub").join(name)).unwrap()
    };
    link(outside.path(), "outdir");
    link(&outside.path().join("secret.txt"), "outfile");
    link(&s.root.join("sub/deeper"), "indir");
    link(&s.root.join("hello.txt"), "infile");
    link(&s.root.join("gone"), "dangling");
    let html = s.get("/sub/").text();
    for (name, shown) in [
        ("href=\"indir/\"", true),
        ("href=\"infile\"", true),
        ("outdir", false),
        ("outfile", false),
        ("dangling", false),
    ] {
        assert_eq!(html.contains(name), shown, "{name} in {html}");
    }
    // What is listed is served, and what is hidden is not.
    assert_eq!(s.get("/sub/infile").status, 200);
    assert_eq!(s.get("/sub/outfile").status, 404);
}

#[test]
fn routes_by_host_and_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    let c = dir.path().join("c");
    for (d, text) in [(&a, "site a"), (&b, "site b"), (&c, "assets")] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("who.txt"), text).unwrap();
    }
    let toml = format!(
        "[[routes]]\nhosts = [\"a.test\"]\n[routes.static]\nroot = {a:?}\n\
         [[routes]]\nhosts = [\"*.b.test\"]\n[routes.static]\nroot = {b:?}\n\
         [[routes]]\nhosts = [\"a.test\"]\npath = \"/assets\"\n[routes.static]\nroot = {c:?}\n",
        a = a.display().to_string(),
        b = b.display().to_string(),
        c = c.display().to_string()
    );
    let s = TestServer::start(dir.path(), &toml);
    let get = |host: &str, path: &str| {
        send(
            s.addr,
            &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n"),
        )
    };
    assert_eq!(get("a.test", "/who.txt").text(), "site a");
    assert_eq!(get("A.Test:8080", "/who.txt").text(), "site a");
    assert_eq!(get("x.b.test", "/who.txt").text(), "site b");
    assert_eq!(get("x.y.b.test", "/who.txt").text(), "site b");
    assert_eq!(get("a.test", "/assets/who.txt").text(), "assets");
    // The prefix alone redirects to the route's root directory.
    let r = get("a.test", "/assets");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("assets/"));
    let r = get("a.test", "/assets?v=1");
    assert_eq!(r.header("location"), Some("assets/?v=1"));
    // The prefix matches whole segments only.
    assert_eq!(get("a.test", "/assetsx/who.txt").status, 404);
    // b.test itself is not matched by *.b.test, and there is no catch-all route.
    assert_eq!(get("b.test", "/who.txt").status, 404);
    assert_eq!(get("other.test", "/who.txt").status, 404);
}
