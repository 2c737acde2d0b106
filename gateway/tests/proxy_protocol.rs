//! `proxy_protocol`: the PROXY header (v1 and v2) from the load balancers in
//! `proxy_protocol_from` names the client for everything after it (the upstream's
//! `X-Forwarded-For`, the access log, IP rules); anyone else, a missing header or a broken
//! one is closed. Raw headers first, then HAProxy (Debian's `haproxy`, which
//! `scripts/test.sh` installs) in front of a plain and a TLS listener, sending v1 and v2
//! from a client bound to its own loopback address.
use crate::common;
use common::pki::Ca;
use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// An upstream that answers with the `X-Forwarded-For` it got.
fn xff_echo() -> SocketAddr {
    serve_axum(
        loopback(),
        axum::Router::new().fallback(axum::routing::any(
            |req: axum::extract::Request| async move {
                req.headers()
                    .get("x-forwarded-for")
                    .map(|v| v.to_str().unwrap_or("?").to_string())
                    .unwrap_or_default()
            },
        )),
    )
}

fn routes(up: SocketAddr, log: &std::path::Path) -> String {
    format!(
        r#"
[[routes]]
path = "/"
[routes.proxy]
upstreams = ["http://{up}"]
[routes.access_log]
path = {log:?}
template = "$remote_addr $status"
[routes.access]
deny = ["203.0.113.66/32", "127.0.0.66/32"]
"#
    )
}

/// The reply to `bytes` on a new connection, or `None` if it was closed without one.
fn exchange(addr: SocketAddr, bytes: &[u8]) -> Option<String> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(bytes);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    (!out.is_empty()).then(|| String::from_utf8_lossy(&out).into_owned())
}

const GET: &str = "GET /x HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n";

fn v2_header(src: [u8; 4], port: u16) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend_from_slice(&[0x21, 0x11, 0, 12]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&[127, 0, 0, 1]);
    h.extend_from_slice(&port.to_be_bytes());
    h.extend_from_slice(&80u16.to_be_bytes());
    h
}

#[test]
fn the_header_names_the_client_for_forwarding_logs_and_ip_rules() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let s = TestServer::site(&format!(
        "proxy_protocol = true\nproxy_protocol_from = [\"127.0.0.1/32\"]\n{}",
        routes(xff_echo(), &log)
    ));
    let v1 = exchange(
        s.addr,
        format!("PROXY TCP4 203.0.113.7 127.0.0.1 40000 80\r\n{GET}").as_bytes(),
    )
    .expect("a response");
    assert!(v1.starts_with("HTTP/1.1 200"), "{v1}");
    assert!(v1.ends_with("\r\n\r\n203.0.113.7"), "{v1}");
    let v2 = exchange(
        s.addr,
        &[v2_header([198, 51, 100, 9], 5555), GET.as_bytes().to_vec()].concat(),
    )
    .expect("a response");
    assert!(v2.ends_with("\r\n\r\n198.51.100.9"), "{v2}");
    // The balancer's own health check (v1 UNKNOWN): the connection's peer stands.
    let unknown =
        exchange(s.addr, format!("PROXY UNKNOWN\r\n{GET}").as_bytes()).expect("a response");
    assert!(unknown.ends_with("\r\n\r\n127.0.0.1"), "{unknown}");
    // IP rules judge the named client.
    let denied = exchange(
        s.addr,
        format!("PROXY TCP4 203.0.113.66 127.0.0.1 40000 80\r\n{GET}").as_bytes(),
    )
    .expect("a response");
    assert!(denied.starts_with("HTTP/1.1 403"), "{denied}");
    let lines = wait_lines(&log, 4);
    assert_eq!(
        lines,
        [
            "203.0.113.7 200",
            "198.51.100.9 200",
            "127.0.0.1 200",
            "203.0.113.66 403"
        ]
    );
}

#[test]
fn no_header_a_broken_one_or_another_peer_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let s = TestServer::site(&format!(
        "proxy_protocol = true\nproxy_protocol_from = [\"127.0.0.1/32\"]\n\
         [timeouts]\nheader_read = \"1s\"\n{}",
        routes(xff_echo(), &log)
    ));
    for bad in [
        GET.as_bytes().to_vec(),
        format!("PROXY TCP4 203.0.113.7 127.0.0.1 040000 80\r\n{GET}").into_bytes(),
        format!("PROXY TCP4 203.0.113.7\r\n{GET}").into_bytes(),
        [&v2_header([1, 2, 3, 4], 1)[..15], b"x", GET.as_bytes()].concat(),
    ] {
        assert_eq!(
            exchange(s.addr, &bad),
            None,
            "{}",
            String::from_utf8_lossy(&bad)
        );
    }
    // A header that never completes is dropped after timeouts.header_read, not held.
    let mut slow = TcpStream::connect(s.addr).unwrap();
    slow.write_all(b"PROXY TCP4 203.0").unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let t = std::time::Instant::now();
    let mut buf = [0u8; 16];
    assert_eq!(slow.read(&mut buf).unwrap_or(0), 0);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // From a peer that isn't a listed balancer, even a good header is refused.
    let other = TestServer::site(&format!(
        "proxy_protocol = true\nproxy_protocol_from = [\"10.0.0.0/8\"]\n{}",
        routes(xff_echo(), &dir.path().join("other.log"))
    ));
    let good = format!("PROXY TCP4 203.0.113.7 127.0.0.1 40000 80\r\n{GET}");
    assert_eq!(exchange(other.addr, good.as_bytes()), None);
}

#[test]
fn proxy_protocol_needs_its_balancers_named() {
    let err = load_config(format!(
        "listen = \"127.0.0.1:0\"\nroot = {:?}\nproxy_protocol = true\n",
        fixtures().join("site")
    ))
    .expect_err("no proxy_protocol_from");
    assert!(err.contains("proxy_protocol_from"), "{err}");
    let err = load_config(format!(
        "listen = \"127.0.0.1:0\"\nroot = {:?}\nproxy_protocol = true\nproxy_protocol_from = [\"10.0.0.0/33\"]\n",
        fixtures().join("site")
    ))
    .expect_err("a bad CIDR");
    assert!(err.contains("proxy_protocol_from"), "{err}");
}

fn wait_lines(path: &std::path::Path, n: usize) -> Vec<String> {
    for _ in 0..100 {
        let lines: Vec<String> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        if lines.len() >= n {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("fewer than {n} lines in {}", path.display());
}

/// HAProxy in TCP mode in front: v1 and v2 to the plain listener, v2 to the TLS one.
#[test]
fn behind_haproxy_v1_v2_plain_and_tls() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let ca = Ca::new("proxy protocol test CA");
    let leaf = ca.leaf(&["localhost"], "L");
    let (cert, key, ca_file) = (
        dir.path().join("l.crt"),
        dir.path().join("l.key"),
        dir.path().join("ca.pem"),
    );
    std::fs::write(&cert, &leaf.cert_pem).unwrap();
    std::fs::write(&key, &leaf.key_pem).unwrap();
    std::fs::write(&ca_file, &ca.pem).unwrap();
    let s = TestServer::site(&format!(
        "proxy_protocol = true\nproxy_protocol_from = [\"127.0.0.1/32\"]\n\
         [timeouts]\ndrain = \"200ms\"\n\
         [tls]\nlisten = \"127.0.0.1:0\"\n[[tls.certs]]\ncert = {cert:?}\nkey = {key:?}\n{}",
        routes(xff_echo(), &log)
    ));
    let https = s.handle().https_addrs()[0];
    let (p1, p2, p3) = (free_port(), free_port(), free_port());
    let cfg = dir.path().join("haproxy.cfg");
    std::fs::write(
        &cfg,
        format!(
            "global\n  maxconn 200\n\
             defaults\n  mode tcp\n  timeout connect 2s\n  timeout client 10s\n  timeout server 10s\n\
             listen v1\n  bind 127.0.0.1:{p1}\n  server g {plain} send-proxy\n\
             listen v2\n  bind 127.0.0.1:{p2}\n  server g {plain} send-proxy-v2\n\
             listen tls\n  bind 127.0.0.1:{p3}\n  server g {https} send-proxy-v2\n",
            plain = s.addr,
        ),
    )
    .unwrap();
    let haproxy = std::env::var("HAPROXY").unwrap_or_else(|_| "haproxy".into());
    let mut child = std::process::Command::new(&haproxy)
        .arg("-db")
        .arg("-f")
        .arg(&cfg)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("haproxy.log")).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("running {haproxy} (Debian's haproxy package): {e}"));
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", p3)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "haproxy never listened"
        );
        if let Ok(Some(st)) = child.try_wait() {
            panic!(
                "haproxy exited {st}: {}",
                std::fs::read_to_string(dir.path().join("haproxy.log")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _child = Kill(child);
    // curl binds each client to its own loopback address: that is the client HAProxy
    // accepted, and the one gatehouse must see.
    let curl = |client: &str, url: &str| -> String {
        let out = std::process::Command::new("curl")
            .args([
                "-sS",
                "--max-time",
                "10",
                "--interface",
                client,
                "-w",
                " %{http_code}",
            ])
            .arg("--cacert")
            .arg(&ca_file)
            .args(["--resolve", &format!("localhost:{p3}:127.0.0.1")])
            .arg(url)
            .output()
            .expect("curl");
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    assert_eq!(
        curl("127.0.0.11", &format!("http://127.0.0.1:{p1}/a")),
        "127.0.0.11 200"
    );
    assert_eq!(
        curl("127.0.0.12", &format!("http://127.0.0.1:{p2}/a")),
        "127.0.0.12 200"
    );
    assert_eq!(
        curl("127.0.0.13", &format!("https://localhost:{p3}/a")),
        "127.0.0.13 200"
    );
    assert!(curl("127.0.0.66", &format!("http://127.0.0.1:{p2}/a")).ends_with(" 403"));
    let lines = wait_lines(&log, 4);
    assert_eq!(
        lines,
        [
            "127.0.0.11 200",
            "127.0.0.12 200",
            "127.0.0.13 200",
            "127.0.0.66 403"
        ]
    );
}
