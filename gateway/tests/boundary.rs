//! The security boundary (issue 28): what a route decides is exactly what the upstream gets.
//! One canonical request: its path and authority choose the route, and the same path and
//! authority are forwarded, or the request is refused. Checked against the readings of real
//! backends (Python's http.server and nginx as the upstream), against models of lenient
//! backends over random targets, and on the cases an outside tester found.
use crate::common;
use common::*;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

const APR1: &str = "$apr1$abcdefgh$M2T3erDstkD7SsE2QQnfH0"; // "s3cret"

fn htpasswd() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("users");
    std::fs::write(&file, format!("ann:{APR1}\n")).expect("write");
    let path = file.display().to_string();
    (dir, path)
}

/// A raw backend: records each request head it reads and answers 200 with the target it
/// saw; with `upgrade`, it answers any request asking for an upgrade with a 101 to it.
fn recording_backend(upgrade: bool) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let l = loopback();
    let addr = l.local_addr().expect("addr");
    let s = seen.clone();
    std::thread::spawn(move || {
        for stream in l.incoming().flatten() {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut w = stream.try_clone().expect("clone");
                let mut r = BufReader::new(stream);
                loop {
                    let mut head = String::new();
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        head.push_str(&line);
                    }
                    s.lock().expect("lock").push(head.clone());
                    let target = head.split(' ').nth(1).unwrap_or("").to_string();
                    let asks = head.lines().find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("upgrade: ")
                            .map(str::to_string)
                    });
                    let res = match (upgrade, asks) {
                        (true, Some(p)) => format!(
                            "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: {p}\r\n\r\n"
                        ),
                        _ => format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{target}",
                            target.len()
                        ),
                    };
                    if w.write_all(res.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

/// `/api` open and `/api/admin` behind basic auth, both proxied to `upstream`.
fn two_routes(upstream: SocketAddr, htpasswd: &str) -> TestServer {
    TestServer::start(
        &std::env::temp_dir(),
        &format!(
            "[[routes]]\npath = \"/api\"\n[routes.proxy]\nupstreams = [\"http://{upstream}\"]\n\
             [[routes]]\npath = \"/api/admin\"\n[routes.proxy]\nupstreams = [\"http://{upstream}\"]\n\
             [routes.auth]\nhtpasswd = {htpasswd:?}\n"
        ),
    )
}

/// Percent-decodes once (`+` is not special in a path).
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push(h * 16 + l);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// RFC 3986 §5.2.4 on `/`- and `\`-separated segments, empty ones dropped.
fn resolve(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for seg in path.split(['/', '\\']) {
        match seg {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    format!("/{}", out.join("/"))
}

/// How lenient backends read a path they were sent: each is one that exists in the wild.
fn readings(raw: &str) -> Vec<(&'static str, String)> {
    let path = raw.split('?').next().unwrap_or("");
    let tomcat: String = path
        .split('/')
        .map(|s| s.split(';').next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("/");
    // Python's `str.strip` takes U+001C to U+001F besides Unicode's white space.
    let strip = |s: &str| {
        s.trim_matches(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
            .trim_end_matches('.')
            .to_string()
    };
    let trimmed: String = resolve(&decode(path))
        .split('/')
        .map(strip)
        .collect::<Vec<_>>()
        .join("/");
    let trimmed_first: String = resolve(
        &decode(path)
            .split('/')
            .map(strip)
            .collect::<Vec<_>>()
            .join("/"),
    );
    // Java's `equalsIgnoreCase` and Python's `re.IGNORECASE`: `ı`, `İ` are `i`, `ſ` is `s`.
    let folded: String = resolve(&decode(path))
        .chars()
        .map(|c| {
            // One to one, as Java's Character.toUpperCase/toLowerCase map.
            let single = |m: String| {
                let mut it = m.chars();
                match (it.next(), it.next()) {
                    (Some(x), None) => Some(x),
                    _ => None,
                }
            };
            let low = if c == '\u{130}' {
                Some('i')
            } else {
                single(c.to_lowercase().to_string())
            };
            let up = single(c.to_uppercase().to_string());
            match (low, up) {
                (Some(l), _) if l.is_ascii() => l,
                (_, Some(u)) if u.is_ascii() => u.to_ascii_lowercase(),
                _ => c,
            }
        })
        .collect();
    vec![
        ("decodes %2F, resolves dots", resolve(&decode(path))),
        ("decodes twice", resolve(&decode(&decode(path)))),
        ("tomcat path parameters", resolve(&decode(&tomcat))),
        (
            "case-insensitive",
            resolve(&decode(path)).to_ascii_lowercase(),
        ),
        ("trims segments", trimmed.to_ascii_lowercase()),
        (
            "trims segments, then resolves dots",
            trimmed_first.to_ascii_lowercase(),
        ),
        ("folds case as Java and Python do", folded),
    ]
}

fn under_admin(path: &str) -> bool {
    let p = path.to_ascii_lowercase();
    p == "/api/admin" || p.starts_with("/api/admin/")
}

/// The spellings the outside tester sent, and more of the same kinds.
const SPELLINGS: &[&str] = &[
    "/api/admin/..%2fx",
    "/api/admin%2f..%2fx",
    "/api/admin%2F..%2Fx",
    "/api/ADMIN/x",
    "/api/Admin",
    "/api/admin;x/x",
    "/api/x/..;/admin/x",
    "/api/%2561dmin/x",
    "/api/admin%20/x",
    "/api/admin%09/x",
    "/api/admin./x",
    "/api/x/..%2f..%2fapi/admin/x",
    "/api/x%2f..%2fadmin/x",
    "/api/x/%2e%2e%2fadmin/x",
    "/api/%61dmin/x",
    "/api//admin/x",
    "/api/./admin/x",
    "/api/x/../admin/x",
    "/api/admin%5c..%5cx",
    // Raw bytes past ASCII, as hyper passes them (found by the route_forward fuzz target).
    "/api/admin\u{a0}/x",
    "/api/x/..\u{a0}/admin/x",
    "/api/\u{3000}admin/x",
    // Letters Java and Python fold to ASCII, and the separators Python strips.
    "/api/adm%C4%B1n/x",
    "/api/adm%C4%B0n/x",
    "/api/ADM%C4%B0N/x",
    "/api/admin%1F/x",
    "/api/admin%1C/x",
    "/api/x/..%1F/admin/x",
];

/// Sends `target` without credentials; the answer's status and body.
fn get(s: &TestServer, target: &str) -> (u16, String) {
    let r = send(s.addr, &format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n"));
    (r.status, r.text())
}

#[test]
fn no_spelling_of_the_protected_path_reaches_the_upstream_without_credentials() {
    let (_d, file) = htpasswd();
    let (up, seen) = recording_backend(false);
    let s = two_routes(up, &file);
    for target in SPELLINGS {
        let (status, body) = get(&s, target);
        if status == 200 {
            for (reader, p) in readings(&body) {
                assert!(
                    !under_admin(&p),
                    "{target} was forwarded as {body}, which a backend that {reader} reads as {p}"
                );
            }
        } else {
            assert!(
                matches!(status, 400 | 401),
                "{target}: {status} (expected 400 or 401)"
            );
        }
    }
    // The plain cases still work: the open route is served, the protected one asks.
    assert_eq!(get(&s, "/api/x"), (200, "/api/x".into()));
    assert_eq!(get(&s, "/api/admin/x").0, 401);
    assert_eq!(
        get(&s, "/api/a%20b/c%2Fd").0,
        200,
        "encoded data stays usable"
    );
    let before = seen.lock().expect("lock").len();
    assert!(before >= 2);
}

/// A small xorshift generator: the same targets every run, many of them.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a>(&mut self, of: &[&'a str]) -> &'a str {
        of[(self.next() % of.len() as u64) as usize]
    }
}

/// Random targets built of the pieces that tell readers apart: whatever gatehouse forwards
/// without credentials is read as outside `/api/admin` by every lenient reading.
#[test]
fn random_targets_are_read_the_same_by_every_model_backend() {
    let (_d, file) = htpasswd();
    let (up, _) = recording_backend(false);
    let s = two_routes(up, &file);
    let pieces = [
        "/", "/", "api", "admin", "ADMIN", "Admin", "x", ".", "..", "%2e", "%2E", "%2f", "%2F",
        "%5c", ";", ";x", "%25", "%2561", "%61", "dmin", "%20", "%09", ".", "%3b", "//", "\u{a0}",
        "\u{3000}",
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut served = 0;
    for _ in 0..1500 {
        let mut t = String::from("/api");
        let n = 1 + rng.next() % 7;
        for _ in 0..n {
            t.push_str(rng.pick(&pieces));
        }
        let (status, body) = get(&s, &t);
        if status == 200 {
            served += 1;
            for (reader, p) in readings(&body) {
                assert!(
                    !under_admin(&p),
                    "{t} was forwarded as {body}, which a backend that {reader} reads as {p}"
                );
            }
        } else {
            assert!(matches!(status, 400 | 401 | 404), "{t}: {status}");
        }
    }
    // Both sides are exercised: many served, many refused.
    assert!(served > 100, "only {served} of 1500 were served");
}

/// A real backend's own reading of what it was sent.
struct RealBackend {
    addr: SocketAddr,
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl Drop for RealBackend {
    fn drop(&mut self) {
        // SIGTERM, not SIGKILL: nginx's master then takes its worker with it.
        let _ = std::process::Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

fn wait_listening(addr: SocketAddr) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "{addr} never listened"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Python's http.server, answering with the path its file handler would serve
/// (`translate_path`: decoded, dots resolved).
fn python_backend() -> RealBackend {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let script = dir.path().join("echo.py");
    std::fs::write(
        &script,
        r#"
import http.server, posixpath, sys, urllib.parse
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        p = self.path.split('?', 1)[0].split('#', 1)[0]
        p = posixpath.normpath(urllib.parse.unquote(p))
        b = p.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"#,
    )
    .expect("script");
    let child = std::process::Command::new("python3")
        .arg(&script)
        .arg(port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("python3");
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    wait_listening(addr);
    RealBackend {
        addr,
        child,
        _dir: dir,
    }
}

/// nginx, answering with `$uri`: its own decoded and normalised reading.
fn nginx_backend() -> RealBackend {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let conf = dir.path().join("nginx.conf");
    let d = dir.path().display();
    std::fs::write(
        &conf,
        format!(
            "daemon off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
             events {{ worker_connections 64; }}\n\
             http {{ access_log off; client_body_temp_path {d}; proxy_temp_path {d};\n\
             fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};\n\
             server {{ listen 127.0.0.1:{port}; location / {{ default_type text/plain; return 200 \"$uri\"; }} }} }}\n"
        ),
    )
    .expect("conf");
    let child = std::process::Command::new("nginx")
        .arg("-c")
        .arg(&conf)
        .arg("-p")
        .arg(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("nginx (apt-get install nginx)");
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    wait_listening(addr);
    RealBackend {
        addr,
        child,
        _dir: dir,
    }
}

/// The same targets through gatehouse to real backends that decode differently: whenever
/// gatehouse serves a target without credentials, the backend's own reading of it is
/// outside the protected prefix.
#[test]
fn real_backends_never_read_a_served_target_as_the_protected_path() {
    let (_d, file) = htpasswd();
    for backend in [python_backend(), nginx_backend()] {
        let s = two_routes(backend.addr, &file);
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let pieces = [
            "/", "admin", "ADMIN", "x", "..", "%2e%2e", "%2f", "%2F", "%5c", ";", "%2561", "%61",
            "dmin", "%20", ".",
        ];
        let mut targets: Vec<String> = SPELLINGS.iter().map(|s| s.to_string()).collect();
        for _ in 0..300 {
            let mut t = String::from("/api");
            for _ in 0..(1 + rng.next() % 6) {
                t.push_str(rng.pick(&pieces));
            }
            targets.push(t);
        }
        let mut served = 0;
        for t in &targets {
            let (status, body) = get(&s, t);
            if status == 200 {
                served += 1;
                assert!(
                    !under_admin(&body),
                    "{t}: the backend on {} read it as {body}",
                    backend.addr
                );
            }
        }
        assert!(served > 20, "only {served} served");
        // And it is a real reader: the plain path comes back as itself.
        assert_eq!(get(&s, "/api/x"), (200, "/api/x".into()));
    }
}

#[test]
fn an_absolute_form_target_is_routed_and_forwarded_by_its_authority() {
    let (_d, file) = htpasswd();
    let (up, seen) = recording_backend(false);
    let s = TestServer::start(
        &std::env::temp_dir(),
        &format!(
            "[[routes]]\nhosts = [\"secure.local\"]\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n\
             [routes.auth]\nhtpasswd = {file:?}\n\
             [[routes]]\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n"
        ),
    );
    assert_eq!(
        send(s.addr, "GET /api/x HTTP/1.1\r\nHost: secure.local\r\n\r\n").status,
        401
    );
    // RFC 9112 §3.2.2: the target's authority replaces Host.
    let r = send(
        s.addr,
        "GET http://127.0.0.1/api/x HTTP/1.1\r\nHost: secure.local\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    let head = seen
        .lock()
        .expect("lock")
        .last()
        .cloned()
        .unwrap_or_default();
    let host = head
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("host:"))
        .unwrap_or("");
    assert_eq!(host, "host: 127.0.0.1", "{head}");
    assert!(!head.contains("secure.local"), "{head}");
    // The other way round: the authority chooses the protected host.
    let r = send(
        s.addr,
        "GET http://secure.local/api/x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    );
    assert_eq!(r.status, 401);
}

/// CONNECT is refused by the listener's checks (405, as nginx answers it) in every form
/// and over HTTP/1.1 and HTTP/2: none reaches a route or its upstream.
#[test]
fn connect_is_refused_before_any_route() {
    let (up, seen) = recording_backend(false);
    let s = TestServer::start(
        &std::env::temp_dir(),
        &format!("h2c = true\n[[routes]]\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n"),
    );
    for raw in [
        "CONNECT /x HTTP/1.1\r\nHost: localhost\r\n\r\n",
        "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
    ] {
        assert_eq!(send(s.addr, raw).status, 405, "{raw}");
    }
    let (status, _) = h2_send(s.addr, http::Request::connect("example.com:443"));
    assert_eq!(status, 405);
    assert_eq!(
        send(s.addr, "GET /ok HTTP/1.1\r\nHost: a\r\n\r\n").status,
        200
    );
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].starts_with("GET /ok "), "{seen:?}");
}

/// An HTTP/2 request over h2c with hyper's client, with extra header fields.
fn h2_get(addr: SocketAddr, uri: &str, fields: &[(&str, &str)]) -> (u16, String) {
    let mut req = http::Request::get(uri);
    for (k, v) in fields {
        req = req.header(*k, *v);
    }
    h2_send(addr, req)
}

/// The request `req` makes, without a body, over h2c with hyper's client: its status and
/// body.
fn h2_send(addr: SocketAddr, req: http::request::Builder) -> (u16, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (mut send, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(tcp),
        )
        .await
        .expect("h2 handshake");
        tokio::spawn(conn);
        let req = req
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .expect("request");
        let res = send.send_request(req).await.expect("response");
        let status = res.status().as_u16();
        use http_body_util::BodyExt;
        let body = res.into_body().collect().await.expect("body").to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    })
}

#[test]
fn http2_host_must_agree_with_authority_and_reaches_the_upstream() {
    let (_d, file) = htpasswd();
    let (up, seen) = recording_backend(false);
    let s = TestServer::start(
        &std::env::temp_dir(),
        &format!(
            "h2c = true\n[[routes]]\nhosts = [\"secure.local\"]\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n\
             [routes.auth]\nhtpasswd = {file:?}\n\
             [[routes]]\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n"
        ),
    );
    let port = s.addr.port();
    // RFC 9113 §8.3.1: `host` naming another authority than `:authority` is malformed.
    let (status, _) = h2_get(
        s.addr,
        &format!("http://127.0.0.1:{port}/api/x"),
        &[("host", "secure.local")],
    );
    assert_eq!(status, 400);
    // Without `host`, the upstream gets `:authority` as Host, and so X-Forwarded-Host.
    let (status, _) = h2_get(s.addr, &format!("http://127.0.0.1:{port}/api/x"), &[]);
    assert_eq!(status, 200);
    let head = seen
        .lock()
        .expect("lock")
        .last()
        .cloned()
        .unwrap_or_default();
    let lower = head.to_ascii_lowercase();
    assert!(
        lower.contains(&format!("\r\nhost: 127.0.0.1:{port}\r\n")),
        "{head}"
    );
    assert!(
        lower.contains(&format!("\r\nx-forwarded-host: 127.0.0.1:{port}\r\n")),
        "{head}"
    );
    // Agreeing fields are fine.
    let (status, _) = h2_get(
        s.addr,
        &format!("http://127.0.0.1:{port}/api/x"),
        &[("host", &format!("127.0.0.1:{port}"))],
    );
    assert_eq!(status, 200);
}

#[test]
fn h2c_upgrades_are_never_relayed_and_websocket_still_is() {
    let (up, seen) = recording_backend(true);
    let s = TestServer::start(
        &std::env::temp_dir(),
        &format!("[[routes]]\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n"),
    );
    let mut c = Conn::open(s.addr);
    let r = c.request(
        "GET /api/x HTTP/1.1\r\nHost: t\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
    );
    assert_eq!(r.status, 200, "served as a plain request");
    let head = seen
        .lock()
        .expect("lock")
        .last()
        .cloned()
        .unwrap_or_default();
    let lower = head.to_ascii_lowercase();
    assert!(!lower.contains("upgrade"), "{head}");
    assert!(!lower.contains("h2c"), "{head}");
    // The connection is still plain HTTP/1.1: a second request is answered as one.
    let r = c.request("GET /api/admin/y HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "/api/admin/y");

    // A list with h2c in it keeps only what the route allows.
    let mut c = Conn::open(s.addr);
    let r = c.request(
        "GET /chat HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: h2c, websocket\r\n\r\n",
    );
    assert_eq!(r.status, 101);
    assert_eq!(r.header("upgrade"), Some("websocket"));
    let head = seen
        .lock()
        .expect("lock")
        .last()
        .cloned()
        .unwrap_or_default();
    assert!(
        head.to_ascii_lowercase().contains("upgrade: websocket\r\n"),
        "{head}"
    );
    assert!(!head.to_ascii_lowercase().contains("h2c"), "{head}");
}

#[test]
fn hosts_outside_the_authority_grammar_get_400() {
    let (up, _) = recording_backend(false);
    let s = TestServer::start(
        &std::env::temp_dir(),
        &format!("[[routes]]\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n"),
    );
    for host in [
        "user@h",
        "h/evil",
        "h?x",
        "a, b",
        "[x]",
        "",
        "h:99999",
        "h:",
        "h:8o",
        "a..b",
        "%65vil",
        "h#x",
        "h\\x",
        "[::1",
        "evil.com/x?",
    ] {
        let r = send(s.addr, &format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n"));
        assert_eq!(r.status, 400, "Host: {host:?}");
    }
    for host in [
        "example.com",
        "Example.COM:8080",
        "[::1]:80",
        "127.0.0.1",
        "a-b.c_d.",
        "localhost:65535",
    ] {
        let r = send(s.addr, &format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n"));
        assert_eq!(r.status, 200, "Host: {host:?}");
    }
}

#[test]
fn smaller_boundary_cases() {
    let (up, seen) = recording_backend(false);
    let s = TestServer::start(
        &std::env::temp_dir(),
        &format!("[[routes]]\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n"),
    );
    let last = || {
        seen.lock()
            .expect("lock")
            .last()
            .cloned()
            .unwrap_or_default()
    };
    // Two Authorization fields: which would be checked, which forwarded?
    let r = send(
        s.addr,
        "GET / HTTP/1.1\r\nHost: t\r\nAuthorization: Basic YTpi\r\nAuthorization: Basic Yzpk\r\n\r\n",
    );
    assert_eq!(r.status, 400);
    // RFC 9112 §6.1: a transfer coding we don't implement is 501, not silently dropped.
    let r = send(
        s.addr,
        "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    );
    assert_eq!(r.status, 501);
    // Underscored names are dropped, as nginx does; the client's address claims too; a
    // `Connection` naming X-Forwarded-Host can't remove the gateway's own.
    let r = send(
        s.addr,
        "GET /u HTTP/1.1\r\nHost: t\r\nTransfer_Encoding: chunked\r\nX_Forwarded_For: 6.6.6.6\r\n\
         X-Real-IP: 6.6.6.6\r\nTrue-Client-IP: 6.6.6.6\r\nConnection: X-Forwarded-Host\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    let head = last().to_ascii_lowercase();
    assert!(!head.contains('_'), "{head}");
    assert!(!head.contains("6.6.6.6"), "{head}");
    assert!(head.contains("\r\nx-forwarded-host: t\r\n"), "{head}");
    // The same through hyper's client (a body), where the fields are set in the map.
    let r = send(
        s.addr,
        "POST /u HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nX-Real-IP: 6.6.6.6\r\n\
         True-Client-IP: 6.6.6.6\r\nConnection: X-Forwarded-Host\r\n\r\nx",
    );
    assert_eq!(r.status, 200);
    let head = last().to_ascii_lowercase();
    assert!(!head.contains("6.6.6.6"), "{head}");
    assert!(head.contains("\r\nx-forwarded-host: t\r\n"), "{head}");
}
