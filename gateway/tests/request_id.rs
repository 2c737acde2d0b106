//! `[routes.request_id]`: an ID per request, to the upstream, the client and the access
//! log; a client's own only from a trusted proxy.
use crate::common;
use common::*;

fn echo_id() -> std::net::SocketAddr {
    serve_axum(
        loopback(),
        axum::Router::new().fallback(axum::routing::any(
            |req: axum::extract::Request| async move {
                let n = req.headers().get_all("x-request-id").iter().count();
                let id = req
                    .headers()
                    .get("x-request-id")
                    .map(|v| v.to_str().unwrap_or("?").to_string())
                    .unwrap_or_default();
                ([("x-request-id", "set-by-upstream")], format!("{n} {id}"))
            },
        )),
    )
}

fn server(trusted: &str, log: &std::path::Path) -> TestServer {
    let up = echo_id();
    TestServer::site(&format!(
        r#"
[[routes]]
path = "/"
[routes.proxy]
upstreams = ["http://{up}"]
[routes.request_id]
trusted_proxies = [{trusted}]
[routes.access_log]
path = {log:?}
template = "$request_id $status"
[routes.headers.response]
set = {{ "X-Echo-Id" = "$request_id" }}
"#
    ))
}

fn log_lines(path: &std::path::Path, n: usize) -> Vec<String> {
    for _ in 0..100 {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        if lines.len() >= n {
            return lines;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("fewer than {n} log lines in {}", path.display());
}

#[test]
fn the_same_new_id_reaches_upstream_client_log_and_templates() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let s = server("", &log);
    // Not trusted: the client's own ID is replaced, not passed on as a second one.
    let a = s.get_with("/", "X-Request-Id: chosen-by-client\r\n");
    let b = s.get("/");
    let id_a = a.header("x-request-id").expect("an id").to_string();
    let id_b = b.header("x-request-id").expect("an id").to_string();
    assert_ne!(id_a, "chosen-by-client");
    assert_ne!(id_a, id_b);
    assert_eq!(id_a.len(), 32);
    assert_eq!(a.text(), format!("1 {id_a}"));
    assert_eq!(a.header("x-echo-id"), Some(id_a.as_str()));
    let lines = log_lines(&log, 2);
    assert_eq!(lines[0], format!("{id_a} 200"));
    assert_eq!(lines[1], format!("{id_b} 200"));
}

#[test]
fn a_trusted_proxys_id_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let s = server("\"127.0.0.1/32\"", &log);
    let r = s.get_with("/", "X-Request-Id: from-the-lb-42\r\n");
    assert_eq!(r.header("x-request-id"), Some("from-the-lb-42"));
    assert_eq!(r.text(), "1 from-the-lb-42");
    // Even a trusted one must be a plain token.
    let r = s.get_with("/", "X-Request-Id: two words\r\n");
    assert_ne!(r.header("x-request-id"), Some("two words"));
    let lines = log_lines(&log, 1);
    assert_eq!(lines[0], "from-the-lb-42 200");
}

/// With no template or app reading it and no access log, the ID goes in no extension
/// (`request_extension`, `response_extension`), and still reaches upstream and client.
#[test]
fn an_id_no_template_reads_still_reaches_upstream_and_client() {
    let up = echo_id();
    let s = TestServer::site(&format!(
        "[[routes]]\npath = \"/\"\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n[routes.request_id]\n"
    ));
    let r = s.get("/");
    let id = r.header("x-request-id").expect("an id").to_string();
    assert_eq!(id.len(), 32);
    assert_eq!(r.text(), format!("1 {id}"));
}
