//! Routes are chosen on the normalised path, so no spelling of a path reaches a route's
//! files through another route (the ground the auth rules will stand on).
use crate::common;
use common::*;

/// `/admin` serves dir A; `/` serves dir B, which has an `admin/` of its own. Every
/// spelling of /admin/secret.txt must be answered from A.
#[test]
fn every_spelling_of_a_path_takes_the_same_route() {
    let (_dir, s) = admin_and_root("");
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

fn two_routes(access: &str) -> (tempfile::TempDir, TestServer) {
    admin_and_root(&format!("[routes.access]\n{access}"))
}

const SPELLINGS: [&str; 7] = [
    "/admin/secret.txt",
    "//admin/secret.txt",
    "/./admin/secret.txt",
    "/x/../admin/secret.txt",
    "/%61dmin/secret.txt",
    "/admin%2Fsecret.txt",
    "/%2e/admin//secret.txt",
];

/// Each connection keeps a copy of the route stack it called last: one connection that
/// goes back and forth between a denied route and an open one gets each route's answer
/// every time, under every spelling.
#[test]
fn one_connection_alternating_routes_gets_each_routes_answer() {
    let (_d, s) = two_routes("deny = [\"127.0.0.1\"]");
    let mut c = Conn::open(s.addr);
    for p in SPELLINGS {
        let denied = c.request(&format!("GET {p} HTTP/1.1\r\nHost: t\r\n\r\n"));
        assert_eq!(denied.status, 403, "{p}");
        let open = c.request("GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(open.status, 200, "the open route after {p}");
        assert_eq!(open.text(), "public");
    }
}

#[test]
fn a_denied_route_is_denied_under_every_spelling() {
    let (_d, s) = two_routes("allow = [\"10.0.0.0/8\"]");
    for p in SPELLINGS {
        assert_eq!(s.get(p).status, 403, "{p}");
    }
    assert_eq!(s.get("/index.html").status, 200);
    let (_d, s) = two_routes("deny = [\"127.0.0.1\"]");
    for p in SPELLINGS {
        assert_eq!(s.get(p).status, 403, "{p}");
    }
    let (_d, s) = two_routes("allow = [\"127.0.0.0/8\"]\ndeny = [\"10.0.0.0/8\"]");
    assert_eq!(s.get("/admin/secret.txt").status, 200);
}

#[test]
fn the_client_address_comes_from_x_forwarded_for_only_behind_a_trusted_proxy() {
    let xff = |ip: &str| format!("X-Forwarded-For: {ip}\r\n");
    let (_d, s) = two_routes("allow = [\"203.0.113.0/24\"]\ntrusted_proxies = [\"127.0.0.1/32\"]");
    assert_eq!(
        s.get_with("/admin/secret.txt", &xff("203.0.113.5")).status,
        200
    );
    assert_eq!(
        s.get_with("/admin/secret.txt", &xff("198.51.100.1")).status,
        403
    );
    // The rightmost untrusted entry counts, not whatever the client put first.
    assert_eq!(
        s.get_with("/admin/secret.txt", &xff("203.0.113.5, 198.51.100.1"))
            .status,
        403
    );
    assert_eq!(s.get("/admin/secret.txt").status, 403, "the proxy itself");
    // The same claim from a peer that isn't trusted is ignored.
    let (_d, s) = two_routes("allow = [\"203.0.113.0/24\"]");
    assert_eq!(
        s.get_with("/admin/secret.txt", &xff("203.0.113.5")).status,
        403
    );
}
