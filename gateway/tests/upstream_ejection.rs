//! Who can take an upstream out: only the upstream's own faults count towards
//! `max_fails` (a client's stalled upload never does), a route's last available upstream is
//! never ejected, and a faulty upstream beside a good one still is.
use crate::common;
use axum::routing::any;
use common::*;
use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn start(upstreams: &[SocketAddr], extra: &str) -> TestServer {
    let list: Vec<String> = upstreams
        .iter()
        .map(|a| format!("\"http://{a}\""))
        .collect();
    TestServer::start(
        &std::env::temp_dir(),
        &format!(
            "[[routes]]\n[routes.proxy]\nupstreams = [{}]\n{extra}\n",
            list.join(", ")
        ),
    )
}

/// Answers a request with the length of its body, or `name` for a request without one.
fn sink(name: &'static str) -> SocketAddr {
    serve_axum(
        loopback(),
        axum::Router::new().fallback(any(move |body: axum::body::Bytes| async move {
            if body.is_empty() {
                name.to_string()
            } else {
                body.len().to_string()
            }
        })),
    )
}

/// Sends a POST whose body stops after 7 of the 100000 bytes it announces, and waits for
/// the answer.
fn stalled_upload(addr: SocketAddr) -> Resp {
    let mut c = Conn::open(addr);
    c.send(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\npartial");
    c.read_response(false)
        .expect("an answer to the stalled upload")
}

fn post(addr: SocketAddr) -> Resp {
    send(
        addr,
        "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nok",
    )
}

#[test]
fn stalled_uploads_past_max_fails_do_not_take_a_routes_only_upstream_out() {
    let s = start(
        &[sink("sink")],
        "max_fails = 1\nfail_timeout = \"60s\"\nretries = 0\nresponse_timeout = \"300ms\"\nconnect_timeout = \"200ms\"",
    );
    for _ in 0..3 {
        let r = stalled_upload(s.addr);
        assert_eq!(r.status, 408, "the client stalled: {}", r.text());
    }
    let r = post(s.addr);
    assert_eq!((r.status, r.text()), (200, "2".to_string()));
    assert_eq!(s.get("/").text(), "sink");
}

#[test]
fn after_an_outage_the_first_request_once_the_upstream_is_back_is_answered() {
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let s = start(
        &[addr],
        "max_fails = 2\nfail_timeout = \"60s\"\nconnect_timeout = \"200ms\"",
    );
    // Down: each request is a 502, well past max_fails.
    for _ in 0..5 {
        assert_eq!(s.get("/").status, 502);
    }
    // Back: the very next request reaches it (no 503 for the rest of fail_timeout).
    let _back = serve_axum(
        TcpListener::bind(addr).expect("the upstream's port again"),
        axum::Router::new().fallback(any(|| async { "back" })),
    );
    let r = s.get("/");
    assert_eq!((r.status, r.text()), (200, "back".to_string()));
}

/// Accepts connections and closes each at once, counting them.
fn slammer() -> (SocketAddr, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let n = Arc::new(AtomicUsize::new(0));
    let seen = n.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            seen.fetch_add(1, Ordering::SeqCst);
            drop(s);
        }
    });
    (addr, n)
}

#[test]
fn a_faulty_upstream_beside_a_good_one_is_still_ejected_and_stalls_do_not_eject_the_good_one() {
    let (bad, bad_conns) = slammer();
    let good = sink("good");
    let s = start(
        &[bad, good],
        "max_fails = 2\nfail_timeout = \"60s\"\nretries = 0\nresponse_timeout = \"300ms\"\nconnect_timeout = \"200ms\"",
    );
    // Round robin: two failures on the faulty one take it out.
    let statuses: Vec<u16> = (0..4).map(|_| s.get("/").status).collect();
    assert_eq!(
        statuses.iter().filter(|&&c| c == 502).count(),
        2,
        "{statuses:?}"
    );
    let after_ejection = bad_conns.load(Ordering::SeqCst);
    // Stalled uploads, as many as max_fails and more, all to the good one.
    for _ in 0..3 {
        assert_eq!(stalled_upload(s.addr).status, 408);
    }
    // The good one still serves everything; the faulty one stays out.
    for _ in 0..6 {
        let r = s.get("/");
        assert_eq!((r.status, r.text()), (200, "good".to_string()));
    }
    assert_eq!(bad_conns.load(Ordering::SeqCst), after_ejection);
}

/// Serves `GET` with `name` (keep-alive); gives up on an upload after 150 ms, as an
/// upstream with its own body timeout does, resetting the connection.
fn impatient(name: &'static str) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut w = s;
                while let Some(path) = read_request_head(&mut r) {
                    if path == "/upload" {
                        std::thread::sleep(Duration::from_millis(150));
                        let _ = socket2::SockRef::from(&w).set_linger(Some(Duration::ZERO));
                        return;
                    }
                    let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", name.len());
                    let _ = w.write_all(head.as_bytes());
                    let _ = w.write_all(name.as_bytes());
                }
            });
        }
    });
    addr
}

#[test]
fn an_upstream_giving_up_on_a_stalled_upload_is_not_held_against_it() {
    let s = start(
        &[impatient("a"), impatient("b")],
        "max_fails = 1\nfail_timeout = \"60s\"\nretries = 0\nresponse_timeout = \"5s\"\nconnect_timeout = \"1s\"",
    );
    for _ in 0..4 {
        let mut c = Conn::open(s.addr);
        c.send(b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\npartial");
        let r = c.read_response(false).expect("an answer");
        assert_eq!(r.status, 502, "{}", r.text());
    }
    // Neither was ejected: both still take their turns.
    let bodies: Vec<String> = (0..6).map(|_| s.get("/").text()).collect();
    let a = bodies.iter().filter(|b| *b == "a").count();
    assert_eq!((a, bodies.len() - a), (3, 3), "{bodies:?}");
}

/// A body trickled in to end just before the response timeout: the upstream still has a
/// whole `response_timeout` from the request sent to answer, rather than a 504 (held
/// against it) a moment after it got the last byte.
#[test]
fn an_upload_ending_just_before_the_response_timeout_leaves_the_upstream_its_whole_timeout() {
    // Answers 250 ms after the whole body has come.
    let slow = serve_axum(
        loopback(),
        axum::Router::new().fallback(any(|body: axum::body::Bytes| async move {
            tokio::time::sleep(Duration::from_millis(250)).await;
            body.len().to_string()
        })),
    );
    let s = start(
        &[slow],
        "max_fails = 1\nretries = 0\nresponse_timeout = \"500ms\"\nconnect_timeout = \"200ms\"",
    );
    let mut c = Conn::open(s.addr);
    c.send(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n");
    // The last byte goes some 400 ms in, 100 ms before the first deadline.
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(40));
        c.send(b"x");
    }
    let r = c.read_response(false).expect("an answer");
    assert_eq!((r.status, r.text()), (200, "10".to_string()));
}

/// Over HTTP/2 to the upstreams, hyper's client resets the stream when the client's body
/// fails, and its error says only that: the body's own record says it was the client's.
#[test]
fn a_clients_oversized_or_broken_upload_is_not_held_against_an_http2_upstream() {
    let s = start(
        &[sink("a"), sink("b")],
        "http2 = true\nmax_fails = 2\nmax_body_bytes = 1000\nretries = 0\n",
    );
    let big = format!(
        "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n7d0\r\n{}\r\n0\r\n\r\n",
        "x".repeat(2000)
    );
    for _ in 0..4 {
        let r = send(s.addr, &big);
        assert_eq!(r.status, 413, "{}", r.text());
        let mut c = Conn::open(s.addr);
        c.send(
            b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n",
        );
        if let Some(r) = c.read_response(false) {
            assert_eq!(r.status, 400, "{}", r.text());
        }
    }
    let answered: std::collections::HashSet<String> = (0..4).map(|_| s.get("/").text()).collect();
    assert_eq!(
        answered.len(),
        2,
        "an upstream was ejected: only {answered:?} answered"
    );
}
