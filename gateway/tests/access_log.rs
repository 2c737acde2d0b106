//! Access logs through the server: a line per request with the real byte count, upstream
//! fields for proxied requests, aborted downloads marked, every completed request in the
//! file after SIGTERM under load, and SIGUSR1 reopening the file.
use crate::common;
use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn a_combined_line_per_request_with_the_bytes_sent() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let s = TestServer::site(&format!(
        "[[routes]]\n[routes.static]\n[routes.access_log]\npath = {:?}\n",
        log.display().to_string()
    ));
    let size = std::fs::metadata(s.root.join("index.html")).unwrap().len();
    let r = s.get_with(
        "/index.html?x=1",
        "User-Agent: tester/1\r\nReferer: http://r.test/\r\nAuthorization: Bearer SECRET-TOKEN\r\nCookie: sid=SECRET-COOKIE\r\n",
    );
    assert_eq!(r.status, 200);
    assert_eq!(s.get("/missing").status, 404);
    let head = s.head("/index.html");
    assert_eq!(head.status, 200);
    let router = s.router.clone();
    assert!(s.shutdown());
    router.close_logs();
    let l = lines(&log);
    assert_eq!(l.len(), 3, "{l:?}");
    assert!(l[0].starts_with("127.0.0.1 - - ["), "{}", l[0]);
    assert!(
        l[0].ends_with(&format!(
            "] \"GET /index.html?x=1 HTTP/1.1\" 200 {size} \"http://r.test/\" \"tester/1\""
        )),
        "{}",
        l[0]
    );
    assert!(l[1].contains("\"GET /missing HTTP/1.1\" 404 "), "{}", l[1]);
    assert!(
        l[2].contains("\"HEAD /index.html HTTP/1.1\" 200 0 "),
        "{}",
        l[2]
    );
    let all = l.join("\n");
    assert!(!all.contains("SECRET"), "{all}");
}

#[test]
fn proxied_requests_log_their_upstream_in_json() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("proxy.log");
    let app = axum::Router::new().route(
        "/hello",
        axum::routing::get(|| async { "hi from upstream" }),
    );
    let up = serve_axum(loopback(), app);
    let s = TestServer::site(&format!(
        "[[routes]]\npath = \"/api\"\n[routes.proxy]\nupstreams = [\"http://{up}\"]\nstrip_prefix = true\n[routes.access_log]\npath = {:?}\nformat = \"json\"\n",
        log.display().to_string()
    ));
    let r = s.get("/api/hello");
    assert_eq!(r.status, 200);
    let router = s.router.clone();
    assert!(s.shutdown());
    router.close_logs();
    let l = lines(&log);
    assert_eq!(l.len(), 1);
    let v: serde_json::Value = serde_json::from_str(&l[0]).unwrap();
    assert_eq!(v["uri"], "/api/hello");
    assert_eq!(v["status"], 200);
    assert_eq!(v["bytes_sent"], 16);
    assert_eq!(v["upstream_addr"], up.to_string());
    assert!(v["upstream_time_us"].as_u64().is_some());
}

#[test]
fn an_aborted_download_is_logged_and_marked() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let s = TestServer::site(&format!(
        "[[routes]]\n[routes.static]\n[routes.access_log]\npath = {:?}\n",
        log.display().to_string()
    ));
    let big = vec![b'x'; 32 * 1024 * 1024];
    std::fs::write(s.root.join("big.bin"), &big).unwrap();
    {
        let mut c = TcpStream::connect(s.addr).unwrap();
        c.write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let mut buf = [0u8; 65536];
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0);
        // Gone with most of 32 MiB unread.
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let router = s.router.clone();
    while s.handle().connections() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(s.shutdown());
    router.close_logs();
    let l = lines(&log);
    assert_eq!(l.len(), 1, "{l:?}");
    assert!(l[0].contains("\"GET /big.bin HTTP/1.1\" 200 "), "{}", l[0]);
    assert!(l[0].ends_with(" aborted"), "{}", l[0]);
    let sent: u64 = l[0]
        .split("\" 200 ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(sent < big.len() as u64, "{sent}");
}

fn spawn_binary(
    dir: &std::path::Path,
    log: &std::path::Path,
) -> (std::process::Child, std::net::SocketAddr) {
    let port = common::free_port();
    let conf = dir.join("g.toml");
    std::fs::write(
        &conf,
        format!(
            "root = {:?}\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:0\"\n[timeouts]\ndrain = \"5s\"\n[[routes]]\n[routes.static]\n[routes.access_log]\npath = {:?}\n",
            fixtures().join("site").display().to_string(),
            log.display().to_string()
        ),
    )
    .unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .arg("--config")
        .arg(&conf)
        .stderr(std::fs::File::create(dir.join("stderr.log")).unwrap())
        .spawn()
        .unwrap();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, addr)
}

#[test]
fn sigterm_under_load_leaves_every_completed_request_in_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let (mut child, addr) = spawn_binary(dir.path(), &log);
    let mut clients = Vec::new();
    for c in 0..8 {
        // Each client goes on sending after the signal, until its connection is closed.
        clients.push(std::thread::spawn(move || {
            let mut done = Vec::new();
            let mut conn = Conn::open(addr);
            for n in 0.. {
                let raw = format!("GET /index.html?c={c}-{n} HTTP/1.1\r\nHost: t\r\n\r\n");
                conn.send(raw.as_bytes());
                match conn.read_response(false) {
                    Some(r) if r.status == 200 => done.push(format!("c={c}-{n} ")),
                    _ => break,
                }
            }
            done
        }));
    }
    std::thread::sleep(Duration::from_millis(700));
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(status.success());
    let completed: Vec<String> = clients
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert!(completed.len() > 100, "only {} requests", completed.len());
    let text = std::fs::read_to_string(&log).unwrap();
    let logged: std::collections::HashSet<&str> = text
        .lines()
        .filter_map(|l| l.split("?").nth(1)?.split(" HTTP").next())
        .collect();
    for c in &completed {
        assert!(
            logged.contains(c.trim_end()),
            "{c} completed but is not in the log"
        );
    }
    assert!(text.lines().count() >= completed.len());
}

#[test]
fn sigusr1_reopens_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let (mut child, addr) = spawn_binary(dir.path(), &log);
    assert_eq!(
        send(
            addr,
            "GET /index.html?first HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        )
        .status,
        200
    );
    std::thread::sleep(Duration::from_millis(300));
    let moved = dir.path().join("access.log.1");
    std::fs::rename(&log, &moved).unwrap();
    unsafe { libc::kill(child.id() as i32, libc::SIGUSR1) };
    let deadline = Instant::now() + Duration::from_secs(5);
    while !log.exists() {
        assert!(Instant::now() < deadline, "not reopened");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        send(
            addr,
            "GET /index.html?second HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        )
        .status,
        200
    );
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
    let old = std::fs::read_to_string(&moved).unwrap();
    let new = std::fs::read_to_string(&log).unwrap();
    assert!(old.contains("?first ") && !old.contains("?second"), "{old}");
    assert!(new.contains("?second ") && !new.contains("?first"), "{new}");
}

/// What building the routes of the example site with `tables` added says is wrong: the
/// configuration loads, the router refuses it.
fn build_error(tables: &str) -> String {
    let toml = format!(
        "root = {:?}\n{tables}",
        fixtures().join("site").display().to_string()
    );
    let config = load_config(toml).expect("the configuration loads");
    gatehouse::router::build(&config)
        .err()
        .expect("refused")
        .to_string()
}

#[test]
fn a_template_with_an_unknown_field_names_its_key() {
    let e = build_error(
        "[[routes]]\n[routes.static]\n[routes.access_log]\ntemplate = \"$remote_addr $http_cookie\"\n",
    );
    assert!(
        e.contains("routes.0.access_log.template") && e.contains("http_cookie"),
        "{e}"
    );
}

#[test]
fn requests_no_route_answers_go_to_the_server_level_log() {
    let dir = tempfile::tempdir().unwrap();
    let routed = dir.path().join("routed.log");
    let unrouted = dir.path().join("unrouted.log");
    let s = TestServer::site(&format!(
        "[access_log]\npath = {:?}\n[[routes]]\nhosts = [\"a.test\"]\n[routes.static]\n[routes.access_log]\npath = {:?}\n",
        unrouted.display().to_string(),
        routed.display().to_string()
    ));
    let ok = send(s.addr, "GET /index.html HTTP/1.1\r\nHost: a.test\r\n\r\n");
    assert_eq!(ok.status, 200);
    // Matches no route.
    let missing = send(s.addr, "GET /x?q=1 HTTP/1.1\r\nHost: b.test\r\n\r\n");
    assert_eq!(missing.status, 404);
    // Refused by the listener's checks before routing (RFC 9110 §7.6.1).
    let refused = send(
        s.addr,
        "GET /index.html HTTP/1.1\r\nHost: a.test\r\nConnection: host\r\n\r\n",
    );
    assert_eq!(refused.status, 400);
    let bad_host = send(s.addr, "GET /y HTTP/1.1\r\nHost: a..b\r\n\r\n");
    assert_eq!(bad_host.status, 400);
    let router = s.router.clone();
    assert!(s.shutdown());
    router.close_logs();
    let r = lines(&routed);
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(
        r[0].contains("\"GET /index.html HTTP/1.1\" 200 "),
        "{}",
        r[0]
    );
    let u = lines(&unrouted);
    assert_eq!(u.len(), 3, "{u:?}");
    assert!(u[0].starts_with("127.0.0.1 - - ["), "{}", u[0]);
    assert!(u[0].contains("\"GET /x?q=1 HTTP/1.1\" 404 "), "{}", u[0]);
    assert!(
        u[1].contains("\"GET /index.html HTTP/1.1\" 400 "),
        "{}",
        u[1]
    );
    assert!(u[2].contains("\"GET /y HTTP/1.1\" 400 "), "{}", u[2]);
}

/// A head hyper cannot read as a request is answered by hyper itself (400, 431), before
/// any Service: it still gets its line in the server-level log, as nginx logs its 400s.
#[test]
fn heads_that_are_not_requests_go_to_the_server_level_log() {
    let dir = tempfile::tempdir().unwrap();
    let unrouted = dir.path().join("unrouted.log");
    let s = TestServer::site(&format!(
        "[limits]\nmax_headers = 20\n[access_log]\npath = {:?}\n[[routes]]\n[routes.static]\n",
        unrouted.display().to_string()
    ));
    let bad_name = send(s.addr, "GET / HTTP/1.1\r\nHost: t\r\nBad Name: x\r\n\r\n");
    assert_eq!(bad_name.status, 400);
    let bad_line = send(s.addr, "GET /a b HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(bad_line.status, 400);
    let many: String = (0..30).map(|i| format!("X-H{i}: v\r\n")).collect();
    let too_many = send(s.addr, &format!("GET / HTTP/1.1\r\nHost: t\r\n{many}\r\n"));
    assert_eq!(too_many.status, 431);
    // On a keep-alive connection, after a request that was read: one line each.
    let mut c = Conn::open(s.addr);
    assert_eq!(
        c.request("GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n")
            .status,
        200
    );
    c.send(b"GET / HTTP/1.1\r\nHost: t\r\n\x01: x\r\n\r\n");
    assert_eq!(c.read_response(false).expect("an answer").status, 400);
    drop(c);
    let router = s.router.clone();
    assert!(s.shutdown());
    router.close_logs();
    let u = lines(&unrouted);
    assert_eq!(u.len(), 4, "{u:?}");
    let statuses: Vec<&str> = u
        .iter()
        .map(|l| {
            assert!(l.starts_with("127.0.0.1 - - ["), "{l}");
            assert!(l.contains("] \"-\" "), "{l}");
            l.split("\" ")
                .nth(1)
                .unwrap_or("")
                .split(' ')
                .next()
                .unwrap_or("")
        })
        .collect();
    assert_eq!(statuses, ["400", "400", "431", "400"], "{u:?}");
}

#[test]
fn a_bad_server_level_log_names_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "root = {:?}\n[access_log]\npath = {:?}\n",
        fixtures().join("site").display().to_string(),
        dir.path().join("no/such/dir/a.log").display().to_string()
    );
    let e = load_config(toml).expect_err("refused");
    assert!(
        e.contains("access_log.path") && e.contains("not a directory"),
        "{e}"
    );
    let e = build_error("[access_log]\ntemplate = \"$remote_addr $http_cookie\"\n");
    assert!(
        e.starts_with("access_log.template") && e.contains("http_cookie"),
        "{e}"
    );
}
