//! Hostile HTTP/1.1: each malformed or ambiguous request gets a 4xx, and nothing after it
//! on the same connection is misread — the request sent next either gets its own answer
//! or the connection is closed after the 4xx (RFC 9112 §6.3: framing that can't be
//! trusted means the connection can't be reused). The upstream never sees a request the
//! client smuggled inside another.
use crate::common;
use common::*;
use std::sync::{Arc, Mutex};

/// A proxy route at /api to an upstream that records the paths it is asked for, and
/// static files elsewhere.
fn server() -> (TestServer, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let app = axum::Router::new().fallback(move |uri: http::Uri, body: axum::body::Bytes| {
        let log = log.clone();
        async move {
            log.lock().unwrap().push(uri.path().to_string());
            format!("upstream got {} bytes", body.len())
        }
    });
    let up = serve_axum(loopback(), app);
    let s = TestServer::site(&format!(
        "[[routes]]\npath = \"/api\"\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n[[routes]]\n[routes.static]\n"
    ));
    (s, seen)
}

const NEXT: &str = "GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n";

/// Sends `bad` and a valid request in one write; the first answer's status, and whether
/// the second was answered rightly (`Some(true)`), wrongly (`Some(false)`) or not at all
/// because the connection was closed (`None`).
fn attempt(s: &TestServer, bad: &str) -> (u16, Option<bool>) {
    let mut c = Conn::open(s.addr);
    c.send(format!("{bad}{NEXT}").as_bytes());
    let first = c.read_response(false).map_or(0, |r| r.status);
    let next = c
        .read_response(false)
        .map(|r| r.status == 200 && r.text() == "hello, world\n");
    (first, next)
}

#[test]
fn every_ambiguous_or_malformed_request_gets_a_4xx_and_no_desync() {
    let (s, seen) = server();
    let long = format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(9000));
    let cases: Vec<(&str, String)> = vec![
        (
            "two different Content-Lengths",
            "POST /api/b HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nContent-Length: 40\r\n\r\nabcd".into(),
        ),
        (
            "a list of Content-Lengths",
            "POST /api/c HTTP/1.1\r\nHost: t\r\nContent-Length: 4, 40\r\n\r\nabcd".into(),
        ),
        (
            "an invalid chunk size",
            "POST /api/d HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n".into(),
        ),
        (
            "a chunk size that overflows",
            "POST /api/e HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff1\r\nhello\r\n0\r\n\r\n".into(),
        ),
        (
            "Transfer-Encoding other than chunked last",
            "POST /api/f HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n".into(),
        ),
        (
            "obs-fold",
            "GET /api/g HTTP/1.1\r\nHost: t\r\nX-A: one\r\n two\r\n\r\n".into(),
        ),
        (
            "a space before the colon",
            "GET /api/h HTTP/1.1\r\nHost : t\r\n\r\n".into(),
        ),
        (
            "an invalid method",
            "G@T /api/i HTTP/1.1\r\nHost: t\r\n\r\n".into(),
        ),
        (
            "authority-form outside CONNECT",
            "GET t:80 HTTP/1.1\r\nHost: t\r\n\r\n".into(),
        ),
        ("an overlong URI", long),
        (
            "two Host headers",
            "GET /api/l HTTP/1.1\r\nHost: t\r\nHost: u\r\n\r\n".into(),
        ),
        (
            "a NUL in the target",
            "GET /api/j%00x HTTP/1.1\r\nHost: t\r\n\r\n".into(),
        ),
        (
            "no Host in HTTP/1.1",
            "GET /api/k HTTP/1.1\r\n\r\n".into(),
        ),
    ];
    let mut wrong = Vec::new();
    for (what, raw) in &cases {
        let (status, next) = attempt(&s, raw);
        let fine = (400..500).contains(&status) && next != Some(false);
        if !fine {
            wrong.push(format!(
                "{what}: first answer {status}, next request {next:?}"
            ));
        }
    }
    let seen = seen.lock().unwrap().clone();
    assert!(
        !seen.iter().any(|p| p.contains("smuggled")),
        "the upstream saw a smuggled request: {seen:?}"
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn content_length_with_transfer_encoding_is_read_by_the_latter_and_the_connection_closed() {
    // RFC 9112 §6.1: such a request may be processed by Transfer-Encoding alone, and the
    // connection must then be closed. hyper does both (it drops Content-Length while
    // parsing, so no 400 can be given): the bytes after the chunked body, which a reader
    // of Content-Length would take for a second request, are never read as one.
    let (s, seen) = server();
    let mut c = Conn::open(s.addr);
    c.send(b"POST /api/a HTTP/1.1\r\nHost: t\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /api/smuggled HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.read_response(false).unwrap();
    assert_eq!((r.status, r.text().as_str()), (200, "upstream got 0 bytes"));
    assert!(
        c.read_response(false).is_none(),
        "the connection must be closed"
    );
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(
        *seen.lock().unwrap(),
        ["/api/a"],
        "nothing smuggled upstream"
    );
}

#[test]
fn a_bare_lf_is_read_consistently() {
    // RFC 9112 §2.2 lets a recipient take a bare LF as a line end; whichever way it is
    // read, the next request must get its own answer.
    let (s, _) = server();
    let (status, next) = attempt(&s, "GET /hello.txt HTTP/1.1\nHost: t\n\n");
    assert!(status == 200 || status == 400, "{status}");
    assert_ne!(next, Some(false));
}

#[test]
fn absolute_form_is_routed_by_its_authority() {
    let (s, _) = server();
    let mut c = Conn::open(s.addr);
    let r = c.request("GET http://t/hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!((r.status, r.text().as_str()), (200, "hello, world\n"));
    let r = c.request(NEXT);
    assert_eq!((r.status, r.text().as_str()), (200, "hello, world\n"));
}
