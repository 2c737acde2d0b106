//! Limits: request target length (414), connections open at once, and a request rate per
//! client address (429 with Retry-After), each configurable.
mod common;
use common::*;
use std::io::Read;
use std::time::Duration;

#[test]
fn an_overlong_target_gets_414_and_the_connection_goes_on() {
    let s = TestServer::site("[limits]\nmax_uri_bytes = 1024\n");
    let mut c = Conn::open(s.addr);
    let long = format!("/{}", "a".repeat(1100));
    let r = c.request(&format!("GET {long} HTTP/1.1\r\nHost: t\r\n\r\n"));
    assert_eq!(r.status, 414);
    let r = c.request("GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!((r.status, r.text().as_str()), (200, "hello, world\n"));
    // Just under the limit is routed as usual (here: no such file).
    let ok = format!("/{}", "a".repeat(1000));
    assert_eq!(
        c.request(&format!("GET {ok} HTTP/1.1\r\nHost: t\r\n\r\n"))
            .status,
        404
    );
}

#[test]
fn connections_over_the_limit_are_closed_and_the_others_served() {
    let g = spawn_gatehouse("workers = 1\n[limits]\nmax_connections = 3\n");
    let mut open: Vec<Conn> = (0..3).map(|_| Conn::open(g.addr)).collect();
    for c in &mut open {
        assert_eq!(
            c.request("GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
                .status,
            200
        );
    }
    // The fourth is accepted and closed at once: a read sees the end, not an answer.
    let mut extra = std::net::TcpStream::connect(g.addr).unwrap();
    extra
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _ = std::io::Write::write_all(&mut extra, b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    let mut buf = [0u8; 64];
    let n = extra.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "{:?}", String::from_utf8_lossy(&buf[..n]));
    // The three open ones go on; once one closes, a new one is served.
    assert_eq!(
        open[0]
            .request("GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
            .status,
        200
    );
    drop(open.pop());
    std::thread::sleep(Duration::from_millis(200));
    let mut again = Conn::open(g.addr);
    assert_eq!(
        again
            .request("GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
            .status,
        200
    );
    let m = send(g.admin, "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n").text();
    assert!(
        m.contains("gatehouse_connections_refused_total{listener=\"http\"} 1"),
        "{m}"
    );
}

#[test]
fn a_client_over_its_rate_gets_429_with_retry_after() {
    let s = TestServer::site(
        "[[routes]]\n[routes.static]\n[routes.rate_limit]\nrequests_per_second = 1\nburst = 3\ntrusted_proxies = [\"127.0.0.1/32\"]\n",
    );
    let get = |xff: &str| {
        send(
            s.addr,
            &format!("GET /hello.txt HTTP/1.1\r\nHost: t\r\nX-Forwarded-For: {xff}\r\n\r\n"),
        )
    };
    for _ in 0..3 {
        assert_eq!(get("192.0.2.1").status, 200);
    }
    let r = get("192.0.2.1");
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("1"));
    // Another client behind the trusted proxy has its own bucket.
    assert_eq!(get("192.0.2.2").status, 200);
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(get("192.0.2.1").status, 200, "one token a second");
    assert_eq!(get("192.0.2.1").status, 429);
}

#[test]
fn without_a_trusted_proxy_forwarded_for_changes_nothing() {
    let s = TestServer::site(
        "[[routes]]\n[routes.static]\n[routes.rate_limit]\nrequests_per_second = 0.5\nburst = 2\n",
    );
    for (i, want) in [(1, 200), (2, 200), (3, 429), (4, 429)] {
        let r = send(
            s.addr,
            &format!(
                "GET /hello.txt HTTP/1.1\r\nHost: t\r\nX-Forwarded-For: 198.51.100.{i}\r\n\r\n"
            ),
        );
        assert_eq!(r.status, want, "request {i}");
    }
}
