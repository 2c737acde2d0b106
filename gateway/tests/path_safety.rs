//! No request path leaves the root, reaches a hidden file or follows a symlink out.
use crate::common;
use common::*;

fn secret_outside(s: &TestServer) {
    // A file beside the root that traversal would reach.
    std::fs::write(s.root.parent().unwrap().join("secret.txt"), "TOP SECRET").unwrap();
}

#[test]
fn traversal_spellings_never_escape() {
    let s = TestServer::site("");
    secret_outside(&s);
    for path in [
        "/../secret.txt",
        "/../../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2E%2E/secret.txt",
        "/..%2fsecret.txt",
        "/..%2Fsecret.txt",
        "/docs/../../secret.txt",
        "/%2e%2e%2fsecret.txt",
        "/./../secret.txt",
        "/%252e%252e/secret.txt",
        "/..;/secret.txt",
    ] {
        let r = s.get(path);
        assert!(!r.text().contains("TOP SECRET"), "{path} leaked");
        assert!(r.status == 404 || r.status == 400, "{path}: {}", r.status);
    }
    // Dot segments inside the root resolve normally.
    assert_eq!(s.get("/docs/../hello.txt").body, b"hello, world\n");
    assert_eq!(s.get("/docs/%2e%2e/hello.txt").body, b"hello, world\n");
}

#[test]
fn nul_and_backslashes_are_bad_requests() {
    let s = TestServer::site("");
    secret_outside(&s);
    for path in [
        "/hello.txt%00.png",
        "/%00",
        "/..%5csecret.txt",
        "/docs%5c..%5c..%5csecret.txt",
    ] {
        let r = s.get(path);
        assert_eq!(r.status, 400, "{path}");
    }
    // A raw backslash is refused before or by the server, never served.
    let r = s.get("/..\\secret.txt");
    assert!(r.status == 400 || r.status == 404, "{}", r.status);
    assert!(!r.text().contains("TOP SECRET"));
}

#[test]
fn bad_escapes_and_overlong_utf8_are_refused() {
    let s = TestServer::site("");
    for path in ["/%zz", "/hello%2", "/%c0%ae%c0%ae/secret.txt", "/%ff"] {
        assert_eq!(s.get(path).status, 400, "{path}");
    }
}

#[test]
fn absolute_form_targets_use_only_the_path() {
    let s = TestServer::site("");
    secret_outside(&s);
    let r = send(
        s.addr,
        "GET http://evil.example/hello.txt HTTP/1.1\r\nHost: evil.example\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"hello, world\n");
    let r = send(
        s.addr,
        "GET http://test/../secret.txt HTTP/1.1\r\nHost: test\r\n\r\n",
    );
    assert!(!r.text().contains("TOP SECRET"));
    assert_ne!(r.status, 200);
}

#[test]
fn dotfiles_are_hidden_by_default() {
    let s = TestServer::site("");
    for path in [
        "/.env",
        "/.git/config",
        "/%2eenv",
        "/docs/../.env",
        "/.git/",
        "/.git",
    ] {
        assert_eq!(s.get(path).status, 404, "{path}");
    }
    let open = TestServer::site("[[routes]]\n[routes.static]\nhide_dotfiles = false\n");
    assert_eq!(open.get("/.env").body, b"SECRET=1\n");
}

#[test]
fn symlinks_out_of_the_root_are_refused_by_default() {
    let s = TestServer::site("");
    secret_outside(&s);
    let outside = s.root.parent().unwrap().join("secret.txt");
    std::os::unix::fs::symlink(&outside, s.root.join("link.txt")).unwrap();
    std::os::unix::fs::symlink(s.root.parent().unwrap(), s.root.join("updir")).unwrap();
    std::os::unix::fs::symlink(s.root.join("hello.txt"), s.root.join("inside.txt")).unwrap();
    assert_eq!(s.get("/link.txt").status, 404);
    assert_eq!(s.get("/updir/secret.txt").status, 404);
    // A symlink that stays inside is fine.
    assert_eq!(s.get("/inside.txt").body, b"hello, world\n");

    let follow =
        TestServer::site("[[routes]]\n[routes.static]\nfollow_symlinks_outside_root = true\n");
    std::fs::write(follow.root.parent().unwrap().join("secret.txt"), "shared").unwrap();
    std::os::unix::fs::symlink(
        follow.root.parent().unwrap().join("secret.txt"),
        follow.root.join("link.txt"),
    )
    .unwrap();
    assert_eq!(follow.get("/link.txt").body, b"shared");
}

#[test]
fn hostile_paths_never_crash_the_server() {
    let s = TestServer::site("");
    let long = format!("/{}", "a/".repeat(2000));
    for path in [
        long.as_str(),
        "/%",
        "/%%%%",
        "//////",
        "/.",
        "/..",
        "/...",
        "/~",
        "/%u002e%u002e/",
    ] {
        let r = s.get(path);
        assert!(r.status < 500, "{path}: {}", r.status);
    }
    assert_eq!(s.get("/hello.txt").status, 200, "still serving");
}
