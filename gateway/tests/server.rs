//! The server core: keep-alive, limits, the two timers, admin endpoints, graceful drain
//! and both runtime modes.
use crate::common;
use common::*;
use std::io::Write;
use std::time::{Duration, Instant};

#[test]
fn keep_alive_serves_many_requests_on_one_connection() {
    let s = TestServer::site("");
    let mut c = Conn::open(s.addr);
    for _ in 0..50 {
        let r = c.request("GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(r.body, b"hello, world\n");
    }
    // Pipelined requests are answered in order.
    c.send(
        b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /digits.txt HTTP/1.1\r\nHost: t\r\n\r\n",
    );
    assert_eq!(c.read_response(false).unwrap().body, b"hello, world\n");
    assert_eq!(c.read_response(false).unwrap().body.len(), 200);
}

#[test]
fn oversized_heads_get_431() {
    let s = TestServer::site("[limits]\nmax_header_bytes = 8192\nmax_headers = 20\n");
    let big = "a".repeat(9000);
    let r = send(
        s.addr,
        &format!("GET /hello.txt HTTP/1.1\r\nHost: t\r\nX-Big: {big}\r\n\r\n"),
    );
    assert_eq!(r.status, 431);
    let many: String = (0..30).map(|i| format!("X-H{i}: v\r\n")).collect();
    let r = send(
        s.addr,
        &format!("GET /hello.txt HTTP/1.1\r\nHost: t\r\n{many}\r\n"),
    );
    assert_eq!(r.status, 431);
    let few: String = (0..10).map(|i| format!("X-H{i}: v\r\n")).collect();
    let r = send(
        s.addr,
        &format!("GET /hello.txt HTTP/1.1\r\nHost: t\r\n{few}\r\n"),
    );
    assert_eq!(r.status, 200);
}

#[test]
fn a_slow_head_is_cut_off_after_header_read() {
    let s = TestServer::site("[timeouts]\nheader_read = \"500ms\"\nkeep_alive = \"10s\"\n");
    let mut c = Conn::open(s.addr);
    let start = Instant::now();
    // Slowloris: a byte at a time, never finishing the head.
    let mut closed = false;
    for b in b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".iter() {
        if c.stream.write_all(&[*b]).is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        if start.elapsed() > Duration::from_secs(3) {
            break;
        }
    }
    let closed = closed || c.closed_within(Duration::from_secs(2));
    assert!(closed, "the connection was closed");
    let took = start.elapsed();
    assert!(took < Duration::from_secs(3), "closed after {took:?}");
    assert!(
        took >= Duration::from_millis(450),
        "not before the timeout: {took:?}"
    );
}

#[test]
fn an_idle_connection_is_closed_after_keep_alive() {
    let s = TestServer::site("[timeouts]\nheader_read = \"5s\"\nkeep_alive = \"400ms\"\n");
    let mut c = Conn::open(s.addr);
    assert_eq!(
        c.request("GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
            .status,
        200
    );
    let start = Instant::now();
    assert!(c.closed_within(Duration::from_secs(3)));
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(350) && took < Duration::from_secs(2),
        "{took:?}"
    );

    // Activity within the timeout keeps it open.
    let mut c = Conn::open(s.addr);
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            c.request("GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
                .status,
            200
        );
    }
}

#[test]
fn keep_alive_longer_than_header_read_is_honoured() {
    let s = TestServer::site("[timeouts]\nheader_read = \"300ms\"\nkeep_alive = \"2s\"\n");
    let mut c = Conn::open(s.addr);
    assert_eq!(
        c.request("GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
            .status,
        200
    );
    // Idle for longer than header_read but less than keep_alive: still open.
    assert!(!c.closed_within(Duration::from_millis(800)));
    assert_eq!(
        c.request("GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
            .status,
        200
    );
}

#[test]
fn admin_health_and_readiness() {
    let s = TestServer::site("");
    let r = send(s.admin, "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.status, 200);
    let r = send(s.admin, "GET /readyz HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(
        send(s.admin, "GET /nope HTTP/1.1\r\nHost: t\r\n\r\n").status,
        404
    );
}

#[test]
fn drain_finishes_in_flight_requests_and_reports_not_ready() {
    let s = TestServer::site("[timeouts]\ndrain = \"5s\"\n");
    let data = vec![b'd'; 32 * 1024 * 1024];
    std::fs::write(s.root.join("large.bin"), &data).unwrap();
    let admin = s.admin;
    let addr = s.addr;
    // A slow reader holds a large response in flight.
    let mut c = Conn::open(addr);
    c.stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    c.send(b"GET /large.bin HTTP/1.1\r\nHost: t\r\n\r\n");
    std::thread::sleep(Duration::from_millis(100));
    let stopper = std::thread::spawn(move || s.shutdown());
    std::thread::sleep(Duration::from_millis(200));
    let r = send(admin, "GET /readyz HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.status, 503, "not ready while draining");
    // New connections are refused once draining.
    assert!(std::net::TcpStream::connect(addr)
        .map(|mut s| {
            let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n");
            let mut c = Conn::from_stream(s);
            c.read_response(false).is_none()
        })
        .unwrap_or(true));
    let r = c
        .read_response(false)
        .expect("the in-flight response completes");
    assert_eq!(r.body.len(), data.len());
    assert!(stopper.join().unwrap(), "drained cleanly");
}

#[test]
fn drain_timeout_bounds_shutdown() {
    let s = TestServer::site("[timeouts]\ndrain = \"300ms\"\n");
    std::fs::write(s.root.join("large.bin"), vec![b'd'; 64 * 1024 * 1024]).unwrap();
    let mut c = Conn::open(s.addr);
    c.send(b"GET /large.bin HTTP/1.1\r\nHost: t\r\n\r\n");
    std::thread::sleep(Duration::from_millis(100));
    // Never read: the response can't finish.
    let start = Instant::now();
    let clean = s.shutdown();
    assert!(!clean, "reported as not drained");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn both_runtime_modes_serve() {
    for mode in ["per-core", "shared"] {
        let s = TestServer::site(&format!("runtime = \"{mode}\"\nworkers = 2\n"));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let addr = s.addr;
                std::thread::spawn(move || {
                    let mut c = Conn::open(addr);
                    (0..20).all(|_| {
                        c.request("GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n").body
                            == b"hello, world\n"
                    })
                })
            })
            .collect();
        for h in handles {
            assert!(h.join().unwrap(), "{mode}");
        }
    }
}

#[test]
fn a_slow_reader_gets_the_whole_file_past_keep_alive() {
    // hyper drops a body once it has handed out the last chunk; the connection must still
    // count the write of that chunk (a multi-megabyte sendfile extent) as activity.
    let s = TestServer::site("[timeouts]\nkeep_alive = \"200ms\"\nheader_read = \"200ms\"\n");
    let data = vec![b's'; 3 * 1024 * 1024];
    std::fs::write(s.root.join("slow.bin"), &data).unwrap();
    let mut c = Conn::open(s.addr);
    c.send(b"GET /slow.bin HTTP/1.1\r\nHost: t\r\n\r\n");
    let mut got = 0usize;
    let mut buf = vec![0u8; 64 * 1024];
    let start = Instant::now();
    use std::io::Read;
    loop {
        std::thread::sleep(Duration::from_millis(25));
        match c.stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => panic!("{e} after {got} bytes"),
        }
        if got >= data.len() + 100 || start.elapsed() > Duration::from_secs(20) {
            break;
        }
    }
    assert!(
        start.elapsed() > Duration::from_millis(600),
        "the read was slow"
    );
    assert!(got > data.len(), "whole response received: {got}");
}

#[test]
fn a_response_nobody_reads_is_closed_after_keep_alive() {
    let s = TestServer::site("[timeouts]\nkeep_alive = \"300ms\"\nheader_read = \"300ms\"\n");
    std::fs::write(s.root.join("stuck.bin"), vec![b'x'; 32 * 1024 * 1024]).unwrap();
    let mut c = Conn::open(s.addr);
    c.send(b"GET /stuck.bin HTTP/1.1\r\nHost: t\r\n\r\n");
    std::thread::sleep(Duration::from_millis(1500));
    // Now drain what the kernel buffered: the server must have closed, so EOF comes.
    use std::io::Read;
    c.stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut total = 0usize;
    let mut buf = vec![0u8; 256 * 1024];
    let closed = loop {
        match c.stream.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => total += n,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
            Err(_) => break false,
        }
    };
    assert!(closed, "closed after {total} bytes");
    assert!(total < 32 * 1024 * 1024, "the response was cut: {total}");
    assert_eq!(s.get("/hello.txt").status, 200, "still serving");
}
