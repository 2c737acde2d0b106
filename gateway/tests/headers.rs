//! `[routes.headers]`: response rules on every response of the route (by status where
//! told), request rules on what a proxy route sends upstream, variables in values.
use crate::common;
use axum::extract::Request as AxumRequest;
use axum::routing::any;
use common::*;

/// A backend that echoes the request's target and headers, and answers with a `Server`
/// and an `X-Powered-By` for the rules to remove; `/missing` is its 404.
fn echo() -> std::net::SocketAddr {
    serve_axum(
        loopback(),
        axum::Router::new().fallback(any(|req: AxumRequest| async move {
            let mut out = format!("path: {}\n", req.uri());
            for (k, v) in req.headers() {
                out.push_str(&format!("{k}: {}\n", v.to_str().unwrap_or("?")));
            }
            let status = if req.uri().path() == "/missing" {
                http::StatusCode::NOT_FOUND
            } else {
                http::StatusCode::OK
            };
            (
                status,
                [("server", "backend/1.0"), ("x-powered-by", "php")],
                out,
            )
        })),
    )
}

const RESPONSE_RULES: &str = r#"
[[routes.headers.response]]
set = { "X-Frame-Options" = "DENY", "X-Served-Host" = "$host", "X-Scheme" = "$scheme" }
add = { "Link" = "</style.css>; rel=preload" }
remove = ["Server", "X-Powered-By"]

[[routes.headers.response]]
statuses = ["2xx"]
set = { "Cache-Control" = "public, max-age=60" }
"#;

#[test]
fn static_responses_get_the_rules_and_status_restricted_ones_only_on_their_statuses() {
    let s = TestServer::site(&format!(
        "[[routes]]\npath = \"/\"\n[routes.static]\n{RESPONSE_RULES}"
    ));
    let ok = s.get("/hello.txt");
    assert_eq!(ok.status, 200);
    assert_eq!(ok.header("x-frame-options"), Some("DENY"));
    assert_eq!(ok.header("x-served-host"), Some("test"));
    assert_eq!(ok.header("x-scheme"), Some("http"));
    assert_eq!(ok.header("link"), Some("</style.css>; rel=preload"));
    assert_eq!(ok.header("cache-control"), Some("public, max-age=60"));
    let missing = s.get("/nope.txt");
    assert_eq!(missing.status, 404);
    // Unlike nginx's add_header without `always`: a rule set with no statuses applies to
    // errors too, and the 2xx one doesn't.
    assert_eq!(missing.header("x-frame-options"), Some("DENY"));
    assert_ne!(missing.header("cache-control"), Some("public, max-age=60"));
    // 304 is not 2xx either.
    let etag = ok.header("etag").expect("an etag").to_string();
    let not_modified = s.get_with("/hello.txt", &format!("If-None-Match: {etag}\r\n"));
    assert_eq!(not_modified.status, 304);
    assert_eq!(not_modified.header("x-frame-options"), Some("DENY"));
    assert_ne!(
        not_modified.header("cache-control"),
        Some("public, max-age=60")
    );
}

#[test]
fn a_denied_client_gets_the_response_rules_too() {
    let s = TestServer::site(&format!(
        "[[routes]]\npath = \"/\"\n[routes.static]\n[routes.access]\ndeny = [\"127.0.0.0/8\"]\n{RESPONSE_RULES}"
    ));
    let r = s.get("/hello.txt");
    assert_eq!(r.status, 403);
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
}

#[test]
fn request_rules_shape_what_the_upstream_gets_and_response_rules_what_the_client_gets() {
    let up = echo();
    let s = TestServer::site(&format!(
        r#"
[[routes]]
path = "/"
[routes.proxy]
upstreams = ["http://{up}"]
[routes.headers.request]
set = {{ "X-Real-IP" = "$remote_addr", "X-Tenant" = "acme", "X-Orig-Host" = "$host" }}
add = {{ "X-Via" = "gatehouse $scheme" }}
remove = ["Cookie"]
{RESPONSE_RULES}
[[routes.headers.response]]
set = {{ "X-Upstream" = "$upstream_addr" }}
"#
    ));
    let r = s.get_with(
        "/x?y=1",
        "Cookie: secret=1\r\nX-Tenant: evil\r\nX-Real-IP: 6.6.6.6\r\n",
    );
    assert_eq!(r.status, 200);
    let body = r.text();
    assert!(body.contains("x-real-ip: 127.0.0.1\n"), "{body}");
    assert!(!body.contains("6.6.6.6"), "{body}");
    assert!(body.contains("x-tenant: acme\n"), "{body}");
    assert!(body.contains("x-orig-host: test\n"), "{body}");
    assert!(!body.contains("evil"), "{body}");
    assert!(body.contains("x-via: gatehouse http\n"), "{body}");
    assert!(!body.contains("secret"), "{body}");
    assert_eq!(r.header("server"), None);
    assert_eq!(r.header("x-powered-by"), None);
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    assert_eq!(r.header("x-upstream"), Some(up.to_string().as_str()));
    let missing = s.get("/missing");
    assert_eq!(missing.status, 404);
    assert_ne!(missing.header("cache-control"), Some("public, max-age=60"));
}

#[test]
fn a_rule_may_not_touch_framing_connection_or_the_routed_host() {
    for (field, op) in [
        ("Host", "set"),
        ("host", "remove"),
        ("Transfer-Encoding", "add"),
        ("Content-Length", "set"),
        ("TE", "set"),
        ("Upgrade", "set"),
        ("Keep-Alive", "remove"),
        ("Trailer", "add"),
    ] {
        let rule = if op == "remove" {
            format!("remove = [\"{field}\"]")
        } else {
            format!("{op} = {{ \"{field}\" = \"x\" }}")
        };
        let err = load_config(format!(
            "listen = \"127.0.0.1:0\"\n[[routes]]\n[routes.proxy]\nupstreams = [\"http://127.0.0.1:9\"]\n[routes.headers.request]\n{rule}\n"
        ))
        .expect_err(&rule);
        let key = if op == "remove" {
            "routes.0.headers.request.remove".to_string()
        } else {
            format!("routes.0.headers.request.{op}.{field}")
        };
        assert!(err.contains(&key), "{rule}: {err}");
        assert!(err.contains("can't be changed by a rule"), "{rule}: {err}");
    }
    // Host is the route's on a request only: a response may carry any Host field.
    load_config(format!(
        "listen = \"127.0.0.1:0\"\nroot = {:?}\n[[routes]]\n[routes.static]\n[routes.headers.response]\nset = {{ \"Host\" = \"x\" }}\n",
        fixtures().join("site")
    ))
    .expect("Host on a response");
}

#[test]
fn bad_rules_are_refused_naming_the_key() {
    for (toml, key) in [
        (
            "[routes.headers.response]\nset = { \"bad name\" = \"x\" }",
            "routes.0.headers.response.set.bad name",
        ),
        (
            "[routes.headers.response]\nset = { \"X-A\" = \"$nope\" }",
            "routes.0.headers.response.set.X-A",
        ),
        (
            "[routes.headers.response]\nstatuses = [\"2xy\"]",
            "routes.0.headers.response.statuses",
        ),
        (
            "[routes.headers.request]\nset = { \"X-A\" = \"1\" }",
            "routes.0.headers.request",
        ),
        (
            "[routes.headers.response]\nsett = { \"X-A\" = \"1\" }",
            "sett",
        ),
        (
            "[routes.headers.response]\nset = { \"Content-Length\" = \"5\" }",
            "routes.0.headers.response.set.Content-Length",
        ),
        (
            "[routes.headers.response]\nremove = [\"transfer-encoding\"]",
            "routes.0.headers.response.remove",
        ),
        (
            "[routes.headers.response]\nadd = { \"Connection\" = \"close\" }",
            "routes.0.headers.response.add.Connection",
        ),
    ] {
        let err = load_config(format!(
            "listen = \"127.0.0.1:0\"\nroot = {:?}\n[[routes]]\n[routes.static]\n{toml}\n",
            fixtures().join("site")
        ))
        .expect_err(toml);
        assert!(err.contains(key), "{toml}: {err}");
    }
}
