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
