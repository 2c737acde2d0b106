//! Upstreams that fail in each way a real one can: every failure before a response head
//! is a 502 or 504, a failure after it cuts the response off (its status is already
//! sent), no connection is leaked, and the pool serves the next request normally.
mod common;
use common::*;
use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// An upstream acting on the path of each request: `/ok` answers (keep-alive), the others
/// fail in the way they name.
fn faulty_upstream() -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || serve(s));
        }
    });
    addr
}

fn serve(s: TcpStream) {
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut w = s;
    while let Some(path) = read_request_head(&mut r) {
        match path.as_str() {
            "/ok" => {
                let _ = w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
            }
            "/reset" => {
                // SO_LINGER 0: the close is a RST, before any answer.
                let sock = socket2::SockRef::from(&w);
                let _ = sock.set_linger(Some(Duration::ZERO));
                return;
            }
            "/reset-mid-body" => {
                let _ = w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\npartial");
                std::thread::sleep(Duration::from_millis(50));
                let sock = socket2::SockRef::from(&w);
                let _ = sock.set_linger(Some(Duration::ZERO));
                return;
            }
            "/garbage" => {
                let _ = w.write_all(b"SSH-2.0-OpenSSH_9.2\r\n\r\n");
                return;
            }
            "/huge-headers" => {
                let big = "x".repeat(200 * 1024);
                let _ = w.write_all(
                    format!("HTTP/1.1 200 OK\r\nX-Big: {big}\r\nContent-Length: 2\r\n\r\nok")
                        .as_bytes(),
                );
                return;
            }
            "/slow-head" => {
                std::thread::sleep(Duration::from_secs(3));
                let _ = w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
            }
            "/slow-body" => {
                let _ = w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nslow");
                std::thread::sleep(Duration::from_secs(3));
                let _ = w.write_all(b"-body");
                return;
            }
            _ => return,
        }
    }
}

fn open_fds(admin: std::net::SocketAddr) -> f64 {
    send(admin, "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n")
        .text()
        .lines()
        .find_map(|l| l.strip_prefix("process_open_fds ")?.parse().ok())
        .unwrap()
}

#[test]
fn each_upstream_failure_is_a_502_or_504_or_a_cut_response_and_the_pool_goes_on() {
    let up = faulty_upstream();
    // max_fails = 0: the test wants each failure seen, not the upstream ejected.
    let g = spawn_gatehouse(&format!(
        "[[routes]]\n[routes.proxy]\nupstreams = [\"http://{up}\"]\nconnect_timeout = \"500ms\"\nresponse_timeout = \"1s\"\nbody_idle_timeout = \"1s\"\nmax_fails = 0\n"
    ));
    let get = |path: &str| send(g.addr, &format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n"));
    assert_eq!(get("/ok").text(), "ok");
    let fds = open_fds(g.admin);

    for _ in 0..3 {
        for (path, want) in [
            ("/reset", 502),
            ("/garbage", 502),
            ("/huge-headers", 502),
            ("/slow-head", 504),
        ] {
            let t = Instant::now();
            let r = get(path);
            assert_eq!(r.status, want, "{path}: {}", r.text());
            assert!(
                t.elapsed() < Duration::from_secs(3),
                "{path} took {:?}",
                t.elapsed()
            );
        }
        // After the head: the status is sent, so the response is cut short instead.
        for path in ["/reset-mid-body", "/slow-body"] {
            let mut c = Conn::open(g.addr);
            c.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
            let r = c.read_response(false);
            assert!(
                r.as_ref()
                    .is_none_or(|r| r.status == 200 && r.body.len() < 10),
                "{path}: a cut response must not look complete: {:?}",
                r.map(|r| (r.status, r.body.len()))
            );
        }
        // The pool still serves, on a fresh or reused connection.
        assert_eq!(get("/ok").text(), "ok");
    }
    std::thread::sleep(Duration::from_millis(300));
    let after = open_fds(g.admin);
    assert!(
        after <= fds + 4.0,
        "file descriptors {fds} before, {after} after 18 failures: a leak"
    );
}
