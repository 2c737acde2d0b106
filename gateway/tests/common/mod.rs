//! Shared by the integration tests: a server on an ephemeral port over a copy of the
//! fixture site, and a raw HTTP/1.1 client that sends exactly the bytes a test gives it.
#![allow(dead_code)]

pub mod pki;
pub mod tls;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub struct TestServer {
    pub router: gatehouse::GatewayRouter,
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub root: PathBuf,
    handle: Option<gatehouse::Handle>,
    _dir: Option<tempfile::TempDir>,
}

impl TestServer {
    /// Serves a fresh copy of `tests/fixtures/site` with the given extra TOML.
    pub fn site(extra_toml: &str) -> TestServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("site");
        copy_dir(&fixtures().join("site"), &root);
        // git can't hold a .git directory inside the repo, so the hidden-file cases are made here.
        std::fs::create_dir_all(root.join(".git")).expect("mkdir .git");
        std::fs::write(root.join(".git/config"), "[core]\n").expect("write .git/config");
        let mut s = TestServer::start(&root, extra_toml);
        s._dir = Some(dir);
        s
    }

    /// Serves `root` (with a top-level `root = ...` and ephemeral listeners) plus `extra_toml`.
    pub fn start(root: &Path, extra_toml: &str) -> TestServer {
        let toml = format!(
            "root = {root:?}\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n{workers}{extra_toml}",
            root = root.display().to_string(),
            workers = if extra_toml.contains("workers") { "" } else { "workers = 1\n" },
        );
        let config = load_config(toml).unwrap_or_else(|e| panic!("config: {e}"));
        let router = gatehouse::router::build(&config).expect("router");
        let handle = gatehouse::start(&config, router.clone()).expect("start");
        TestServer {
            router,
            addr: handle.addrs()[0],
            admin: handle.admin_addr(),
            root: root.to_path_buf(),
            handle: Some(handle),
            _dir: None,
        }
    }

    pub fn get(&self, path: &str) -> Resp {
        send(
            self.addr,
            &format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n"),
        )
    }

    pub fn get_with(&self, path: &str, headers: &str) -> Resp {
        send(
            self.addr,
            &format!("GET {path} HTTP/1.1\r\nHost: test\r\n{headers}\r\n"),
        )
    }

    pub fn head(&self, path: &str) -> Resp {
        send(
            self.addr,
            &format!("HEAD {path} HTTP/1.1\r\nHost: test\r\n\r\n"),
        )
    }

    pub fn head_with(&self, path: &str, headers: &str) -> Resp {
        send(
            self.addr,
            &format!("HEAD {path} HTTP/1.1\r\nHost: test\r\n{headers}\r\n"),
        )
    }

    pub fn handle(&self) -> &gatehouse::Handle {
        self.handle.as_ref().expect("running")
    }

    /// Drains and stops; returns whether every connection finished within the drain timeout.
    pub fn shutdown(mut self) -> bool {
        self.handle.take().map(|h| h.shutdown()).unwrap_or(true)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.shutdown();
        }
    }
}

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let dest = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), &dest).expect("copy");
        }
    }
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One request on a new connection.
pub fn send(addr: SocketAddr, raw: &str) -> Resp {
    let mut c = Conn::open(addr);
    c.send(raw.as_bytes());
    let head_req = raw.starts_with("HEAD ");
    c.read_response(head_req).expect("a response")
}

/// A connection kept open across requests.
pub struct Conn {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    pub fn open(addr: SocketAddr) -> Conn {
        Conn::from_stream(TcpStream::connect(addr).expect("connect"))
    }

    pub fn from_stream(stream: TcpStream) -> Conn {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        Conn {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    pub fn request(&mut self, raw: &str) -> Resp {
        self.send(raw.as_bytes());
        self.read_response(raw.starts_with("HEAD "))
            .expect("a response")
    }

    fn fill(&mut self) -> std::io::Result<bool> {
        let mut chunk = [0u8; 64 * 1024];
        let n = self.stream.read(&mut chunk)?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n > 0)
    }

    /// Reads one response; `None` if the server closed the connection first.
    pub fn read_response(&mut self, head_req: bool) -> Option<Resp> {
        let head_end = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                break i;
            }
            if !self.fill().ok()? {
                return None;
            }
        };
        let head = String::from_utf8_lossy(&self.buf[..head_end]).into_owned();
        self.buf.drain(..head_end + 4);
        let mut lines = head.split("\r\n");
        let status_line = lines.next()?;
        let status: u16 = status_line.split(' ').nth(1)?.parse().ok()?;
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        let mut resp = Resp {
            status,
            headers,
            body: Vec::new(),
        };
        if head_req || status == 304 || status == 204 || status < 200 {
            return Some(resp);
        }
        if let Some(len) = resp.header("content-length") {
            let len: usize = len.parse().ok()?;
            while self.buf.len() < len {
                if !self.fill().ok()? {
                    // Truncated: return what came.
                    break;
                }
            }
            let n = len.min(self.buf.len());
            resp.body = self.buf.drain(..n).collect();
        } else {
            while self.fill().unwrap_or(false) {}
            resp.body = std::mem::take(&mut self.buf);
        }
        Some(resp)
    }

    /// True if the server closes the connection within `wait` (EOF or reset); false if it
    /// is still open when `wait` runs out.
    pub fn closed_within(&mut self, wait: Duration) -> bool {
        self.stream.set_read_timeout(Some(wait)).expect("timeout");
        let mut b = [0u8; 1024];
        match self.stream.read(&mut b) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Runs `serve` over `listener` on a runtime thread of its own that lives as long as the
/// test process: the tests' backends.
fn run_listener<F, Fut>(listener: std::net::TcpListener, serve: F) -> SocketAddr
where
    F: FnOnce(tokio::net::TcpListener) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let addr = listener.local_addr().expect("addr");
    listener.set_nonblocking(true).expect("nonblocking");
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(listener).expect("listener");
            serve(l).await;
        });
    });
    addr
}

/// Serves each connection accepted on `listener` with `serve`.
pub fn serve_each<F, Fut>(listener: std::net::TcpListener, serve: F) -> SocketAddr
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    run_listener(listener, |l| async move {
        loop {
            if let Ok((stream, _)) = l.accept().await {
                tokio::spawn(serve(stream));
            }
        }
    })
}

/// An axum app as a backend on `listener`.
pub fn serve_axum(listener: std::net::TcpListener, app: axum::Router) -> SocketAddr {
    run_listener(listener, |l| async move {
        let _ = axum::serve(l, app).await;
    })
}

/// A fresh loopback listener.
pub fn loopback() -> std::net::TcpListener {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind")
}

/// A server with two static routes: `/admin` over dir `a` (its `secret.txt` says "from the
/// admin route"), with `admin_tables` added to that route (such as `[routes.auth]`), and
/// `/` over dir `b`, whose own `admin/secret.txt` says "from the root route": a request
/// that takes the wrong route shows it. `b/index.html` says "public".
pub fn admin_and_root(admin_tables: &str) -> (tempfile::TempDir, TestServer) {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(b.join("admin")).unwrap();
    std::fs::write(a.join("secret.txt"), "from the admin route").unwrap();
    std::fs::write(b.join("admin/secret.txt"), "from the root route").unwrap();
    std::fs::write(b.join("index.html"), "public").unwrap();
    let s = TestServer::start(
        &b,
        &format!(
            "[[routes]]\npath = \"/admin\"\n[routes.static]\nroot = {:?}\n{admin_tables}\n[[routes]]\n[routes.static]\nroot = {:?}\n",
            a.display().to_string(),
            b.display().to_string()
        ),
    );
    (dir, s)
}

/// A configuration from TOML alone: no default file, no environment.
pub fn load_config(toml: String) -> Result<gatehouse_config::Config, String> {
    gatehouse_config::Loader::new()
        .no_default_file()
        .no_env()
        .toml_str(toml)
        .load()
        .map_err(|e| e.to_string())
}

/// The gatehouse binary running as a child process (so that its CPU and memory are its
/// own), killed on drop.
pub struct Spawned {
    pub child: std::process::Child,
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub dir: tempfile::TempDir,
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port free now, for a server started later that must be told its port.
///
/// Not from the kernel's ephemeral range (what binding port 0 gives): between this call and
/// the server's bind, any outgoing connection of any test may take that port as its source
/// port, and the server then fails with "Address already in use" (seen in CI). Ports below
/// `ip_local_port_range` are only ever taken by an explicit bind, and a per-process counter
/// keeps this process's tests apart.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOW: u32 = 20_000;
    let high = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    if high <= LOW + 1_000 {
        return std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr")
            .port();
    }
    let span = high - LOW;
    let start = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (LOW + (start + n) % span) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {LOW}..{high}");
}

/// Runs the binary on the fixture site with `extra_toml` after the listeners, and waits
/// until the admin listener answers.
pub fn spawn_gatehouse(extra_toml: &str) -> Spawned {
    spawn_gatehouse_in(&fixtures().join("site"), extra_toml)
}

/// [`spawn_gatehouse`] serving `root`.
pub fn spawn_gatehouse_in(root: &Path, extra_toml: &str) -> Spawned {
    let dir = tempfile::tempdir().expect("tempdir");
    let (port, admin) = (free_port(), free_port());
    let conf = dir.path().join("gatehouse.toml");
    std::fs::write(
        &conf,
        format!(
            "root = {:?}\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\nlog_level = \"warn\"\n{extra_toml}\n",
            root.display().to_string(),
        ),
    )
    .expect("config");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .arg("--config")
        .arg(&conf)
        .stderr(std::fs::File::create(dir.path().join("stderr.log")).expect("log"))
        .spawn()
        .expect("spawn gatehouse");
    let s = Spawned {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        admin: SocketAddr::from(([127, 0, 0, 1], admin)),
        dir,
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(s.admin).is_err() {
        let log = std::fs::read_to_string(s.dir.path().join("stderr.log")).unwrap_or_default();
        assert!(
            std::time::Instant::now() < deadline,
            "gatehouse never started:\n{log}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    s
}

/// For a raw test upstream: reads one request head (these requests have no body) and
/// returns its target; `None` once the connection is closed.
pub fn read_request_head(r: &mut impl std::io::BufRead) -> Option<String> {
    let mut line = String::new();
    if r.read_line(&mut line).unwrap_or(0) == 0 {
        return None;
    }
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
    }
    Some(line.split(' ').nth(1).unwrap_or("").to_string())
}

/// Headless Chromium (Debian's `chromium`, or `$CHROMIUM`) loads `url` with `extra` flags
/// and a fresh profile, runs its scripts for up to 10 s of virtual time, and gives back the
/// DOM it ends with and what it wrote on stderr.
pub fn chromium_dom(extra: &[String], url: &str) -> (String, String) {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".into());
    let profile = tempfile::tempdir().expect("tempdir");
    let out = std::process::Command::new(&chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=10000",
        ])
        .args(extra)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(url)
        .output()
        .unwrap_or_else(|e| panic!("running {chromium} (Debian's chromium package): {e}"));
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// An address where every connection is refused, for as long as the socket returned
/// lives: bound but never listening, it holds its port. A port bound and let go at once,
/// as this did before, was once taken by another test's server before the test used it.
pub fn dead_addr() -> (SocketAddr, socket2::Socket) {
    let s =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    s.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .expect("bind");
    let addr = s
        .local_addr()
        .expect("addr")
        .as_socket()
        .expect("an IP address");
    (addr, s)
}

/// Debian's nginx (`scripts/test.sh` installs it), on a port of its own, stopped on drop.
pub struct Nginx {
    child: std::process::Child,
    pub addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM, so that the master stops its workers too (a SIGKILL would leave them
        // running, holding the test's output open).
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// Starts nginx on `port` with the configuration `conf(dir, port)` makes: everything but
/// `daemon`, `pid` and `error_log`, which go in `dir`, a directory of its own that its
/// temporary paths may use too. Waits until it listens.
pub fn nginx_on(port: u16, conf: impl FnOnce(&str, u16) -> String) -> Nginx {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().display().to_string();
    let conf = format!(
        "daemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n{}",
        conf(&d, port)
    );
    std::fs::write(dir.path().join("nginx.conf"), conf).expect("nginx.conf");
    let child = std::process::Command::new("nginx")
        .arg("-c")
        .arg(dir.path().join("nginx.conf"))
        .arg("-p")
        .arg(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("stderr")).expect("stderr"))
        .spawn()
        .expect("nginx (Debian's nginx package; scripts/test.sh installs it)");
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "nginx never listened: {}",
            std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Nginx {
        child,
        addr,
        _dir: dir,
    }
}
