//! Routes are chosen on the normalised path, so no spelling of a path reaches a route's
//! files through another route (the ground the auth rules will stand on).
mod common;
use common::*;

/// `/admin` serves dir A; `/` serves dir B, which has an `admin/` of its own. Every
/// spelling of /admin/secret.txt must be answered from A.
#[test]
fn every_spelling_of_a_path_takes_the_same_route() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(b.join("admin")).unwrap();
    std::fs::write(a.join("secret.txt"), "from the admin route").unwrap();
    std::fs::write(b.join("admin/secret.txt"), "from the root route").unwrap();
    let s = TestServer::start(
        &b,
        &format!(
            "[[routes]]\npath = \"/admin\"\n[routes.static]\nroot = {:?}\n[[routes]]\n[routes.static]\nroot = {:?}\n",
            a.display().to_string(),
            b.display().to_string()
        ),
    );
    for p in [
        "/admin/secret.txt",
        "//admin/secret.txt",
        "/admin//secret.txt",
        "/./admin/secret.txt",
        "/x/../admin/secret.txt",
        "/%61dmin/secret.txt",
        "/admin%2Fsecret.txt",
        "/%2e/admin/secret.txt",
        "/admin/./secret.txt",
    ] {
        let r = s.get(p);
        assert_eq!(r.status, 200, "{p}");
        assert_eq!(r.text(), "from the admin route", "{p}");
    }
    // A bad escape or a NUL is refused before routing.
    assert_eq!(s.get("/admin/%zz").status, 400);
    assert_eq!(s.get("/admin/a%00").status, 400);
}
