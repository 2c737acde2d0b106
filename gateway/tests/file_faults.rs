//! Files that change or fail under the server (issue 9): truncated or deleted while being
//! sent, unreadable, and an access log whose disk is full. gatehouse reads files with
//! `read`/`sendfile`, never `mmap`, so a file shrinking under it is an I/O result to
//! handle, not a SIGBUS.

use crate::common;

use common::{Conn, TestServer};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const BIG: usize = 16 << 20;

fn site_with_big_file() -> (tempfile::TempDir, TestServer) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("site");
    std::fs::create_dir(&root).expect("mkdir");
    std::fs::write(root.join("big.bin"), vec![b'b'; BIG]).expect("big");
    std::fs::write(root.join("hello.txt"), "hello\n").expect("hello");
    let s = TestServer::start(&root, "[[routes]]\n[routes.static]\n");
    (dir, s)
}

/// Sends a GET for `path`, reads the head and `first` body bytes, then runs `meddle`, then
/// reads until the server closes or ends the body. Returns the body length announced and
/// the body bytes received.
fn get_meddled(
    addr: std::net::SocketAddr,
    path: &str,
    first: usize,
    meddle: impl FnOnce(),
) -> (usize, usize) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(s, "GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").expect("write");
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let head_end = loop {
        let n = s.read(&mut buf).expect("read head");
        assert!(n > 0, "closed before the head");
        got.extend_from_slice(&buf[..n]);
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&got[..head_end]).to_string();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let announced: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("content-length");
    let mut body = got.len() - head_end;
    while body < first {
        let n = s.read(&mut buf).expect("read");
        assert!(n > 0);
        body += n;
    }
    meddle();
    let started = Instant::now();
    while body < announced {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => body += n,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("no end after {:?}: {e}", started.elapsed()),
        }
    }
    (announced, body)
}

#[test]
fn a_file_truncated_while_sent_cuts_the_response_short_and_the_next_one_is_whole() {
    let (_d, s) = site_with_big_file();
    let path = s.root.join("big.bin");
    let (announced, got) = get_meddled(s.addr, "/big.bin", 64 * 1024, || {
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open")
            .set_len(100_000)
            .expect("truncate");
    });
    println!("truncated to 100,000 bytes while sending {announced}: {got} bytes arrived, then the connection closed");
    assert_eq!(announced, BIG);
    // Never padded out to the length announced, never hung: the connection is closed.
    assert!(got < BIG, "{got}");
    // The server is fine, and the file's new length is what is served next.
    let r = s.get("/big.bin");
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), 100_000);
    assert_eq!(s.get("/hello.txt").status, 200);
}

#[test]
fn a_file_deleted_while_sent_is_sent_whole_and_then_is_gone() {
    let (_d, s) = site_with_big_file();
    let path = s.root.join("big.bin");
    let (announced, got) = get_meddled(s.addr, "/big.bin", 64 * 1024, || {
        std::fs::remove_file(&path).expect("rm");
    });
    // The open file outlives its name (POSIX unlink): the response is whole.
    assert_eq!((announced, got), (BIG, BIG));
    // Strict validation (the default) sees the name gone at once.
    assert_eq!(s.get("/big.bin").status, 404);
    assert_eq!(s.get("/hello.txt").status, 200);
}

#[test]
fn a_file_the_server_may_not_read_is_403_and_others_are_served() {
    // As root every file is readable, so the binary runs as nobody.
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("site");
    std::fs::create_dir(&root).expect("mkdir");
    std::fs::write(root.join("open.txt"), "open\n").expect("open");
    std::fs::write(root.join("secret.txt"), "secret\n").expect("secret");
    std::fs::create_dir(root.join("locked")).expect("mkdir");
    std::fs::write(root.join("locked/inside.txt"), "inside\n").expect("inside");
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).expect("chmod")
    };
    mode(dir.path(), 0o755);
    mode(&root, 0o755);
    mode(&root.join("open.txt"), 0o644);
    mode(&root.join("secret.txt"), 0o600);
    mode(&root.join("locked"), 0o700);
    let (port, admin) = (common::free_port(), common::free_port());
    let conf = dir.path().join("gatehouse.toml");
    std::fs::write(
        &conf,
        format!(
            "root = {:?}\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\nlog_level = \"warn\"\n",
            root.display().to_string()
        ),
    )
    .expect("config");
    mode(&conf, 0o644);
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_gatehouse"))
        .arg("--config")
        .arg(&conf);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        // setpriv is in util-linux, which every Debian has.
        Err(e) => panic!("setpriv: {e}"),
    };
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "gatehouse never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut c = Conn::open(addr);
    let open = c.request("GET /open.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    let secret = c.request("GET /secret.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    let inside = c.request("GET /locked/inside.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    let again = c.request("GET /open.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(open.status, 200);
    assert_eq!(secret.status, 403, "{secret:?}");
    assert!(!String::from_utf8_lossy(&secret.body).contains("secret"));
    assert_eq!(inside.status, 403, "{inside:?}");
    assert_eq!(again.status, 200);
}

#[test]
fn a_full_disk_for_the_access_log_is_counted_and_serving_goes_on() {
    // /dev/full takes the open and fails every write with ENOSPC.
    let g = common::spawn_gatehouse(
        "[[routes]]\n[routes.static]\n[routes.access_log]\npath = \"/dev/full\"\n",
    );
    let mut c = Conn::open(g.addr);
    for _ in 0..200 {
        let r = c.request("GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(r.status, 200);
    }
    let failed = || {
        let m = common::send(
            g.admin,
            "GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        );
        let text = String::from_utf8_lossy(&m.body).to_string();
        text.lines()
            .find(|l| l.starts_with("gatehouse_access_log_lines_failed_total"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no failed-lines counter in:\n{text}"))
    };
    // The writer runs every 50 ms, the scrape's figures are refreshed at most each second.
    let deadline = Instant::now() + Duration::from_secs(5);
    while failed() < 200.0 {
        assert!(
            Instant::now() < deadline,
            "failed lines counted: {}",
            failed()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(failed(), 200.0);
    let stderr = std::fs::read_to_string(g.dir.path().join("stderr.log")).expect("stderr");
    assert!(
        stderr.contains("access log: writing") && stderr.contains("lines lost"),
        "{stderr}"
    );
    // Reported at most every 10 s, not once per failed write.
    assert_eq!(stderr.matches("access log: writing").count(), 1, "{stderr}");
    assert_eq!(
        c.request("GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
            .status,
        200
    );
}
