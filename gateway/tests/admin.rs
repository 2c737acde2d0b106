//! The admin listener (issue 28, item 6): the public listeners' head limits and header
//! timeout, a connection cap that keeps it from taking the public listeners' file
//! descriptors, and `POST /reload` behind a bearer token and refused to web pages.
use crate::common;
use common::*;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TOKEN: &str = "k3Y-0f_th3.admin~listener+9/Xq==";

fn post_reload(admin: SocketAddr, headers: &str) -> Resp {
    send(
        admin,
        &format!("POST /reload HTTP/1.1\r\nHost: admin\r\nContent-Length: 0\r\n{headers}\r\n"),
    )
}

/// A server whose reloader only counts its calls.
fn counting(s: &gatehouse::Handle) -> Arc<AtomicUsize> {
    let n = Arc::new(AtomicUsize::new(0));
    let m = n.clone();
    s.set_reloader(Arc::new(move || {
        m.fetch_add(1, Ordering::SeqCst);
        Ok(Vec::new())
    }));
    n
}

#[test]
fn reload_takes_the_token_and_refuses_web_pages() {
    let s = TestServer::site(&format!("admin_token = {TOKEN:?}\n"));
    let reloads = counting(s.handle());
    let bearer = format!("Authorization: Bearer {TOKEN}\r\n");

    let r = post_reload(s.admin, "");
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(
        r.header("www-authenticate"),
        Some("Bearer realm=\"gatehouse admin\"")
    );
    for wrong in [
        "Authorization: Bearer k3Y-0f_th3.admin~listener+9/Xq=\r\n".to_string(),
        format!("Authorization: Bearer {TOKEN}x\r\n"),
        format!("Authorization: Basic {TOKEN}\r\n"),
        "Authorization: Bearer\r\n".to_string(),
    ] {
        assert_eq!(post_reload(s.admin, &wrong).status, 401, "{wrong}");
    }
    assert_eq!(reloads.load(Ordering::SeqCst), 0, "a refused reload ran");

    let r = post_reload(s.admin, &bearer);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(reloads.load(Ordering::SeqCst), 1);
    let r = post_reload(s.admin, &format!("authorization: bearer {TOKEN}\r\n"));
    assert_eq!(r.status, 200, "the scheme is case-insensitive");

    // A web page's request, even one that carries the token.
    for page in [
        "Origin: http://127.0.0.1\r\n",
        "Origin: https://evil.example\r\n",
        "Origin: null\r\n",
        "Sec-Fetch-Site: cross-site\r\n",
        "Sec-Fetch-Site: same-site\r\n",
    ] {
        let r = post_reload(s.admin, &format!("{bearer}{page}"));
        assert_eq!(r.status, 403, "{page}");
        let r = post_reload(s.admin, page);
        assert_eq!(r.status, 403, "{page} without the token");
    }
    assert_eq!(reloads.load(Ordering::SeqCst), 2);
    // What curl or a scraper sends, with the fetch metadata a browser's own navigation has.
    let r = post_reload(s.admin, &format!("{bearer}Sec-Fetch-Site: none\r\n"));
    assert_eq!(r.status, 200);

    // The probes and the scraper need no token.
    for path in ["/healthz", "/readyz", "/metrics"] {
        let r = send(s.admin, &format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n"));
        assert_ne!(r.status, 401, "{path}");
        assert_ne!(r.status, 403, "{path}");
    }
}

#[test]
fn without_a_token_reload_is_open_on_loopback_only_and_never_to_web_pages() {
    let s = TestServer::site("");
    let reloads = counting(s.handle());
    assert_eq!(post_reload(s.admin, "").status, 200);
    assert_eq!(
        post_reload(s.admin, "Origin: http://evil.example\r\n").status,
        403
    );
    assert_eq!(
        post_reload(s.admin, "Sec-Fetch-Site: cross-site\r\n").status,
        403
    );
    assert_eq!(reloads.load(Ordering::SeqCst), 1);

    // Reachable from other hosts and no token: refused; the rest of the listener works.
    let dir = tempfile::tempdir().unwrap();
    let config = load_config(format!(
        "root = {:?}\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"0.0.0.0:0\"\nworkers = 1\n",
        dir.path().display().to_string()
    ))
    .unwrap();
    let router = gatehouse::router::build(&config).unwrap();
    let h = gatehouse::start(&config, router).unwrap();
    let reloads = counting(&h);
    let admin = SocketAddr::from(([127, 0, 0, 1], h.admin_addr().port()));
    let r = post_reload(admin, "");
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.text().contains("admin_token"), "{}", r.text());
    assert_eq!(reloads.load(Ordering::SeqCst), 0);
    let r = send(admin, "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(r.status, 200);
    h.shutdown();
}

#[test]
fn the_admin_listener_has_the_public_head_limits() {
    let s = TestServer::site("[limits]\nmax_headers = 20\n");
    // 100 KB of head, which the admin listener used to take.
    let big = "x".repeat(100_000);
    let r = send(
        s.admin,
        &format!("GET /healthz HTTP/1.1\r\nHost: a\r\nX-Big: {big}\r\n\r\n"),
    );
    assert_eq!(r.status, 431);
    // Just over max_header_bytes (16 KiB) in many headers, each well under it.
    let many: String = (0..17)
        .map(|i| format!("X-{i}: {}\r\n", "y".repeat(1000)))
        .collect();
    let r = send(
        s.admin,
        &format!("GET /healthz HTTP/1.1\r\nHost: a\r\n{many}\r\n"),
    );
    assert_eq!(r.status, 431);
    let extra: String = (0..20).map(|i| format!("X-{i}: z\r\n")).collect();
    let r = send(
        s.admin,
        &format!("GET /healthz HTTP/1.1\r\nHost: a\r\n{extra}\r\n"),
    );
    assert_eq!(r.status, 431, "21 headers over max_headers = 20");
    // A head within the limits is served, as the public listener serves it.
    let ok: String = (0..18).map(|i| format!("X-{i}: z\r\n")).collect();
    let r = send(
        s.admin,
        &format!("GET /healthz HTTP/1.1\r\nHost: a\r\n{ok}\r\n"),
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        s.get_with("/", &format!("X-Big: {big}\r\n")).status,
        431,
        "the same limit on the public listener"
    );
}

#[test]
fn a_slow_or_idle_admin_connection_is_closed_after_header_read() {
    let s = TestServer::site("[timeouts]\nheader_read = \"1s\"\n");
    // A head a byte every 100 ms, which would take 5 s.
    let mut slow = Conn::open(s.admin);
    let start = Instant::now();
    slow.send(b"GET /healthz HTTP/1.1\r\nHost: a\r\n");
    let header = b"X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let mut closed = None;
    for b in header {
        std::thread::sleep(Duration::from_millis(100));
        if std::io::Write::write_all(&mut slow.stream, &[*b]).is_err()
            || slow.closed_within(Duration::from_millis(1))
        {
            closed = Some(start.elapsed());
            break;
        }
    }
    let closed = closed.expect("the slow head was still open after 5 s");
    assert!(
        closed >= Duration::from_millis(900) && closed < Duration::from_secs(3),
        "closed after {closed:?}, header_read is 1 s"
    );

    // A connection that sends nothing at all.
    let mut idle = Conn::open(s.admin);
    let start = Instant::now();
    assert!(
        idle.closed_within(Duration::from_secs(5)),
        "an idle connection stayed open"
    );
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );

    // Keep-alive between requests: the same timeout applies to the next head.
    let mut ka = Conn::open(s.admin);
    assert_eq!(
        ka.request("GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n")
            .status,
        200
    );
    let start = Instant::now();
    assert!(ka.closed_within(Duration::from_secs(5)));
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
}

/// The tester's case: idle connections to the admin port until the descriptors ran out,
/// and the public listener stopped accepting. Here the binary runs with at most 128
/// descriptors, and 300 idle admin connections are opened.
#[test]
fn idle_admin_connections_over_the_cap_are_closed_and_the_public_listener_serves() {
    const CAP: usize = 16;
    const NOFILE: u64 = 128;
    let dir = tempfile::tempdir().unwrap();
    let (port, admin_port) = (free_port(), free_port());
    let conf = dir.path().join("gatehouse.toml");
    std::fs::write(
        &conf,
        format!(
            "root = {:?}\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin_port}\"\n\
             admin_max_connections = {CAP}\nworkers = 1\nlog_level = \"warn\"\n",
            fixtures().join("site").display().to_string(),
        ),
    )
    .unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"));
    cmd.arg("--config")
        .arg(&conf)
        .stderr(std::fs::File::create(dir.path().join("stderr.log")).unwrap());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            let lim = libc::rlimit {
                rlim_cur: NOFILE,
                rlim_max: NOFILE,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    let g = Spawned {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        admin: SocketAddr::from(([127, 0, 0, 1], admin_port)),
        dir,
    };
    let log = || std::fs::read_to_string(g.dir.path().join("stderr.log")).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(20);
    while send_within(g.admin, "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n").is_none() {
        assert!(
            Instant::now() < deadline,
            "gatehouse never started:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The probe's connection is closed by now, and its place under the cap given back.
    std::thread::sleep(Duration::from_millis(200));
    let fds = || {
        std::fs::read_dir(format!("/proc/{}/fd", g.child.id()))
            .unwrap()
            .count()
    };
    let before = fds();

    let mut idle = Vec::new();
    for _ in 0..300 {
        idle.push(TcpStream::connect(g.admin).expect("connect"));
    }
    // Let the listener take them all (the closed ones at once).
    std::thread::sleep(Duration::from_millis(500));
    let open: Vec<bool> = idle
        .iter_mut()
        .map(|s| {
            let mut c = Conn::from_stream(s.try_clone().unwrap());
            !c.closed_within(Duration::from_millis(5))
        })
        .collect();
    let kept = open.iter().filter(|o| **o).count();
    assert_eq!(kept, CAP, "admin connections kept open; the cap is {CAP}");
    let during = fds();
    assert!(
        during <= before + CAP + 4,
        "the server holds {during} descriptors, {before} before; cap {CAP}"
    );

    // The public listener serves, and keeps serving, with the admin listener full.
    for _ in 0..20 {
        let r = send_within(g.addr, "GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap_or_else(|| panic!("the public listener did not answer:\n{}", log()));
        assert_eq!(r.status, 200);
    }
    assert!(!log().contains("Too many open files"), "{}", log());

    // Once the idle ones are gone, the admin listener serves again.
    drop(idle);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(r) = send_within(g.admin, "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n") {
            assert_eq!(r.status, 200);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the admin listener never recovered"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One request with a 3 s read timeout; `None` if no response came (refused, closed or
/// silent).
fn send_within(addr: SocketAddr, raw: &str) -> Option<Resp> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(3)).ok()?;
    let mut c = Conn::from_stream(s);
    c.stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .ok()?;
    std::io::Write::write_all(&mut c.stream, raw.as_bytes()).ok()?;
    c.read_response(false)
}

/// `gatehouse check` prints the configuration, but never the token; and a configuration
/// with a token, written back to TOML, loads to itself (the `config` fuzz target's
/// property), whether the token came as a value or from a file.
#[test]
fn the_token_is_never_printed_and_its_configuration_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    let file = dir.path().join("token");
    std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    for key in [
        format!("admin_token = {TOKEN:?}"),
        format!("admin_token_file = {:?}", file.display().to_string()),
    ] {
        let text = format!("root = {root:?}\n{key}\n");
        let conf = dir.path().join("gatehouse.toml");
        std::fs::write(&conf, &text).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"))
            .arg("--config")
            .arg(&conf)
            .arg("check")
            .env_remove("GATEHOUSE_ADMIN_TOKEN")
            .output()
            .unwrap();
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{shown}");
        assert!(!shown.contains(TOKEN), "{shown}");
        assert!(!shown.contains("k3Y-0f"), "{shown}");

        let config = load_config(text).unwrap();
        let again = toml::to_string(&config).unwrap();
        assert_eq!(load_config(again.clone()).unwrap(), config, "{again}");
    }
}
