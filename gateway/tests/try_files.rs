//! `try_files` on static routes: a single-page app's index for paths that name no file,
//! `$path.html` for clean URLs, and every candidate resolved under the root by the same
//! path-safety code as a request.
use crate::common;
use common::*;

fn spa() -> TestServer {
    let s = TestServer::site(
        r#"
[[routes]]
path = "/"
[routes.static]
try_files = ["$path", "$path.html", "$path/", "/index.html"]
not_found_page = "404.html"
"#,
    );
    std::fs::write(s.root.join("about.html"), "about page\n").unwrap();
    s
}

#[test]
fn the_first_candidate_that_is_a_file_is_served_with_200() {
    let s = spa();
    let index = s.get("/index.html");
    assert_eq!(index.status, 200);
    // A file is itself.
    assert_eq!(s.get("/hello.txt").text(), "hello, world\n");
    // Clean URLs: /about is about.html.
    let about = s.get("/about");
    assert_eq!(about.status, 200);
    assert_eq!(about.text(), "about page\n");
    // A directory without its slash, found through "$path/": redirected to it, as nginx
    // does, so that its index's relative links resolve; with the slash, its index.
    let docs = s.get("/docs");
    assert_eq!(docs.status, 301);
    assert_eq!(docs.header("location"), Some("docs/"));
    assert_eq!(s.get("/docs/").body, s.get("/docs/index.html").body);
    // Anything else: the app's index, with 200 and its validators.
    for p in ["/app/route/42", "/settings?tab=2", "/x.js"] {
        let r = s.get(p);
        assert_eq!(r.status, 200, "{p}");
        assert_eq!(r.body, index.body, "{p}");
        assert_eq!(
            r.header("content-type"),
            Some("text/html; charset=utf-8"),
            "{p}"
        );
        assert_eq!(r.header("etag"), index.header("etag"), "{p}");
    }
}

#[test]
fn candidates_stay_under_the_root_and_hidden_files_stay_hidden() {
    let s = spa();
    let index = s.get("/index.html");
    // ".." is resolved before any candidate is made; `$path.html` of a hidden name is
    // still hidden; the fallback, not the file, is served.
    for p in [
        "/../../etc/passwd",
        "/.git/config",
        "/.git",
        "/%2e%2e/etc/passwd",
    ] {
        let r = s.get(p);
        assert!(
            !r.text().contains("[core]") && !r.text().contains("root:"),
            "{p}"
        );
        assert!(r.status == 200 || r.status == 400, "{p}: {}", r.status);
        if r.status == 200 {
            assert_eq!(r.body, index.body, "{p}");
        }
    }
}

#[test]
fn with_no_candidate_found_the_404_page_answers() {
    let s = TestServer::site(
        r#"
[[routes]]
path = "/"
[routes.static]
try_files = ["$path.html"]
not_found_page = "404.html"
"#,
    );
    let r = s.get("/nothing/here");
    assert_eq!(r.status, 404);
    assert_eq!(r.body, std::fs::read(s.root.join("404.html")).unwrap());
}

#[test]
fn bad_entries_are_refused_naming_the_key() {
    for (entry, why) in [("index.html", "not a path"), ("/$host/x", "$path")] {
        let err = load_config(format!(
            "listen = \"127.0.0.1:0\"\nroot = {:?}\n[[routes]]\n[routes.static]\ntry_files = [\"/a\", {entry:?}]\n",
            fixtures().join("site")
        ))
        .expect_err(entry);
        assert!(err.contains("routes.0.static.try_files.1"), "{err}");
        assert!(err.contains(why), "{err}");
    }
}
