//! How upstream responses are delimited (RFC 9112 §6.3) on the proxy's own HTTP/1.1 path
//! (idempotent requests without a body): chunked bodies with extensions and trailers,
//! bodies ended by the close, 1xx before the final response, bodiless statuses and HEAD,
//! and framing errors, which are a 502 before the head or a cut response after it. A
//! connection goes back to the pool only when its message ended cleanly.
use crate::common;
use common::*;
use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// An upstream answering by path with the raw bytes each case needs; it counts the
/// connections it accepts.
fn upstream() -> (SocketAddr, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let n = accepted.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            n.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || serve(s));
        }
    });
    (addr, accepted)
}

fn serve(s: TcpStream) {
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut w = s;
    while let Some(path) = read_request_head(&mut r) {
        let answer: &[u8] = match path.as_str() {
            "/ok" => b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            "/chunked" => {
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Up: 1\r\n\r\n\
                  5;ext=1\r\nhello\r\n1\r\n \r\nA\r\nworld, etc\r\n0\r\nX-Trailer: t\r\n\r\n"
            }
            "/until-close" => {
                return in_two_parts(
                    &mut w,
                    b"HTTP/1.1 200 OK\r\nX-Up: 1\r\n\r\nall of ",
                    50,
                    b"it, then the close",
                )
            }
            "/informational" => {
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n\
                  HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfinal"
            }
            "/no-content" => b"HTTP/1.1 204 No Content\r\nX-Up: 1\r\n\r\n",
            "/head" => b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n",
            "/bad-length" => b"HTTP/1.1 200 OK\r\nContent-Length: 2x\r\n\r\nok",
            "/two-lengths" => {
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok"
            }
            "/bad-chunk" => {
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nok\r\n0\r\n\r\n"
            }
            // A bare LF in a chunk extension: read to the CRLF, "xyz" is part of it; a
            // reader ending lines at LF takes it for the chunk's data.
            "/ext-bare-lf" => {
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;\nxyz\r\nabc\r\n0\r\n\r\n"
            }
            // A response head where the trailer section should be.
            "/head-in-trailers" => {
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\
                  HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
            }
            "/cut-chunked" => {
                let _ = w.write_all(
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nonly 8 b",
                );
                return;
            }
            "/too-much" => b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokSURPLUS",
            "/http10" => b"HTTP/1.0 200 OK\r\nContent-Length: 4\r\n\r\nold!",
            "/close" => b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\nbye",
            // Chunked to a reader of bytes, read to the close by one of text.
            "/te-not-ascii" => {
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: k\x8c, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"
            }
            // Coded, then chunked: with the field gone (hop-by-hop), the client would get
            // gzip bytes with nothing saying so.
            "/gzip-chunked" => {
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"
            }
            "/gzip" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nConnection: close\r\n\r\nok",
            // An empty list element is no coding (RFC 9110 §5.6.1): chunked.
            "/empty-element" => {
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: , chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"
            }
            "/http10-chunked" => {
                b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"
            }
            // Answers, then while the connection is idle says 408 and closes, as servers
            // with a keep-alive timeout do.
            "/then-408" => return in_two_parts(
                &mut w,
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
                100,
                b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            ),
            // A body for a HEAD, sent late: after the head has been taken as the whole answer.
            "/late-body" => {
                let _ = w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n");
                std::thread::sleep(std::time::Duration::from_millis(100));
                b"hello"
            }
            // A compressible body under a strong ETag, with its head or 30 ms after it.
            "/text" | "/text-late" => {
                let body = "gatehouse ".repeat(300);
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nETag: \"v1\"\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                if path == "/text" {
                    let _ = w.write_all(format!("{head}{body}").as_bytes());
                } else {
                    in_two_parts(&mut w, head.as_bytes(), 30, body.as_bytes());
                }
                continue;
            }
            _ => return,
        };
        if w.write_all(answer).is_err() {
            return;
        }
    }
}

/// Writes `first`, pauses, then writes `second`: an answer that arrives in two parts.
fn in_two_parts(w: &mut TcpStream, first: &[u8], pause_ms: u64, second: &[u8]) {
    let _ = w.write_all(first);
    std::thread::sleep(std::time::Duration::from_millis(pause_ms));
    let _ = w.write_all(second);
}

fn gatehouse(up: SocketAddr) -> TestServer {
    TestServer::site(&format!(
        "[[routes]]\n[routes.proxy]\nupstreams = [\"http://{up}\"]\nmax_fails = 0\nconnect_timeout = \"1s\"\nresponse_timeout = \"3s\"\n"
    ))
}

/// HTTP/1.0 from the client: gatehouse's answer is then delimited by its close, so the
/// test reads the body as gatehouse decoded it, whatever the upstream's framing.
fn get10(g: &TestServer, path: &str) -> Resp {
    send(g.addr, &format!("GET {path} HTTP/1.0\r\n\r\n"))
}

#[test]
fn chunked_and_close_delimited_bodies_arrive_whole() {
    let (up, accepted) = upstream();
    let g = gatehouse(up);
    let r = get10(&g, "/chunked");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "hello world, etc");
    assert_eq!(r.header("x-up"), Some("1"));
    assert_eq!(
        r.header("transfer-encoding"),
        None,
        "hop-by-hop: not relayed"
    );
    // The chunked message ended cleanly: its connection carries the next request.
    assert_eq!(get10(&g, "/ok").text(), "ok");
    assert_eq!(accepted.load(Ordering::SeqCst), 1);

    let r = get10(&g, "/until-close");
    assert_eq!(r.text(), "all of it, then the close");
    // That connection ended with its body; the next request needs a new one.
    assert_eq!(get10(&g, "/ok").text(), "ok");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[test]
fn informational_responses_are_skipped_and_bodiless_ones_have_no_body() {
    let (up, accepted) = upstream();
    let g = gatehouse(up);
    let r = get10(&g, "/informational");
    assert_eq!((r.status, r.text().as_str()), (200, "final"));

    let mut c = Conn::open(g.addr);
    let r = c.request("GET /no-content HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!((r.status, r.header("x-up")), (204, Some("1")));
    // HEAD: the upstream's Content-Length is relayed, and no body is waited for.
    let r = c.request("HEAD /head HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!((r.status, r.header("content-length")), (200, Some("100")));
    assert!(r.body.is_empty());
    let r = c.request("GET /ok HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.text(), "ok");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "every one of those ended cleanly on one upstream connection"
    );
}

#[test]
fn unframeable_responses_are_502_and_cut_bodies_are_not_completed() {
    let (up, accepted) = upstream();
    let g = gatehouse(up);
    for path in [
        "/bad-length",
        "/two-lengths",
        "/http10-chunked",
        "/te-not-ascii",
        "/gzip-chunked",
        "/gzip",
    ] {
        assert_eq!(get10(&g, path).status, 502, "{path}");
    }
    assert_eq!(get10(&g, "/empty-element").text(), "ok");
    let post = "POST /empty-element HTTP/1.0\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(send(g.addr, post).text(), "ok");
    // The same through hyper's client, which carries requests with a body.
    for path in ["/gzip-chunked", "/gzip"] {
        let post = format!("POST {path} HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(send(g.addr, &post).status, 502, "POST {path}");
    }
    // After the head is sent a bad chunk can only cut the response short.
    for path in [
        "/bad-chunk",
        "/cut-chunked",
        "/ext-bare-lf",
        "/head-in-trailers",
    ] {
        let mut c = Conn::open(g.addr);
        c.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        // Chunked to the client: a cut response lacks its last chunk. hyper may close
        // before even the head is written when the body fails at once; either way the
        // connection ends and nothing looks complete.
        let mut raw = Vec::new();
        let _ = std::io::Read::read_to_end(&mut c.stream, &mut raw);
        let raw = String::from_utf8_lossy(&raw);
        assert!(
            raw.is_empty() || raw.starts_with("HTTP/1.1 200"),
            "{path}: {raw}"
        );
        assert!(!raw.ends_with("0\r\n\r\n"), "{path} looks complete: {raw}");
    }
    let before = accepted.load(Ordering::SeqCst);
    assert_eq!(get10(&g, "/ok").text(), "ok");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        before + 1,
        "no failed connection goes back to the pool"
    );
}

#[test]
fn a_connection_is_reused_only_after_a_clean_keep_alive_message() {
    let (up, accepted) = upstream();
    let g = gatehouse(up);
    assert_eq!(get10(&g, "/ok").text(), "ok");
    // Each of these ends its connection's use: bytes past the declared length, an
    // HTTP/1.0 answer without keep-alive, `Connection: close`.
    for (path, body) in [("/too-much", "ok"), ("/http10", "old!"), ("/close", "bye")] {
        let before = accepted.load(Ordering::SeqCst);
        assert_eq!(get10(&g, path).text(), body, "{path}");
        assert_eq!(get10(&g, "/ok").text(), "ok");
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            before + 1,
            "after {path}, a new connection"
        );
    }
    let before = accepted.load(Ordering::SeqCst);
    for _ in 0..5 {
        assert_eq!(get10(&g, "/ok").text(), "ok");
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        before,
        "the rest reuse one"
    );
}

#[test]
fn what_an_idle_connection_receives_is_never_taken_for_the_next_answer() {
    let (up, accepted) = upstream();
    let g = gatehouse(up);
    // Once what the upstream sent on the idle connection has arrived, the next request
    // must get its own answer, on a new connection.
    let next_is_its_own = |what: &str, connections: usize| {
        std::thread::sleep(std::time::Duration::from_millis(300));
        let r = get10(&g, "/ok");
        assert_eq!((r.status, r.text().as_str()), (200, "ok"), "{what}");
        assert_eq!(accepted.load(Ordering::SeqCst), connections);
    };
    assert_eq!(get10(&g, "/then-408").text(), "ok");
    next_is_its_own("the stored 408 was relayed", 2);

    let r = send(g.addr, "HEAD /late-body HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.status, 200);
    next_is_its_own("the late body was read as a head", 3);
}

#[test]
fn a_body_left_unread_behind_a_cached_variant_is_read_out_and_its_connection_kept() {
    // Once the variant is cached the upstream's body is not needed; dropped unread, it used
    // to close the connection, so that every such request opened a new one.
    for (path, wait_ms) in [("/text", 0), ("/text-late", 280)] {
        let (up, accepted) = upstream();
        let g = gatehouse(up);
        let get = || {
            send(
                g.addr,
                &format!("GET {path} HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n"),
            )
        };
        let first = get();
        assert_eq!(first.header("content-encoding"), Some("gzip"), "{path}");
        for _ in 0..10 {
            let r = get();
            assert_eq!(r.header("content-encoding"), Some("gzip"), "{path}");
            assert_eq!(r.body, first.body, "{path}");
            // Time for a body that comes after its head to be read out, with room for a
            // busy machine.
            std::thread::sleep(std::time::Duration::from_millis(wait_ms));
        }
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "{path}: 11 requests, one connection"
        );
    }
}
