//! The binary: configuration sources and their precedence, unknown keys, `check`, serving a
//! directory with no config file, bind failures and signals.
use crate::common;
use common::free_port;
use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gatehouse"));
    // Only what a test sets reaches the process's GATEHOUSE_* variables.
    for (k, _) in std::env::vars() {
        if k.starts_with("GATEHOUSE_") {
            c.env_remove(k);
        }
    }
    c
}

fn site() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/site")
        .display()
        .to_string()
}

fn check(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut c = bin();
    c.current_dir(dir).arg("check").args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run gatehouse check");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn value<'a>(toml: &'a str, key: &str) -> Option<&'a str> {
    toml.lines()
        .find_map(|l| l.strip_prefix(&format!("{key} = ")))
}

#[test]
fn sources_override_in_order_defaults_file_env_cli() {
    let dir = tempfile::tempdir().unwrap();
    let site = site();
    // Defaults only (and the site root, which must exist).
    let (ok, out, err) = check(dir.path(), &["--root", &site], &[]);
    assert!(ok, "{err}");
    assert_eq!(value(&out, "listen"), Some("[\"127.0.0.1:8080\"]"));
    assert_eq!(value(&out, "admin_listen"), Some("\"127.0.0.1:9090\""));

    // The file beats the defaults.
    std::fs::write(
        dir.path().join("gatehouse.toml"),
        format!("root = {site:?}\nlisten = \"127.0.0.1:1001\"\nadmin_listen = \"127.0.0.1:2001\"\nworkers = 3\n"),
    )
    .unwrap();
    let (ok, out, err) = check(dir.path(), &[], &[]);
    assert!(ok, "{err}");
    assert_eq!(value(&out, "listen"), Some("[\"127.0.0.1:1001\"]"));
    assert_eq!(value(&out, "workers"), Some("3"));

    // The environment beats the file, with __ for nesting.
    let env = [
        ("GATEHOUSE_LISTEN", "127.0.0.1:1002"),
        ("GATEHOUSE_TIMEOUTS__KEEP_ALIVE", "7s"),
    ];
    let (ok, out, err) = check(dir.path(), &[], &env);
    assert!(ok, "{err}");
    assert_eq!(value(&out, "listen"), Some("[\"127.0.0.1:1002\"]"));
    assert_eq!(value(&out, "keep_alive"), Some("\"7s\""));
    assert_eq!(
        value(&out, "admin_listen"),
        Some("\"127.0.0.1:2001\""),
        "the file still counts"
    );

    // The flags beat the environment.
    let (ok, out, err) = check(
        dir.path(),
        &[
            "--listen",
            "127.0.0.1:1003",
            "--admin-listen",
            "127.0.0.1:2003",
        ],
        &env,
    );
    assert!(ok, "{err}");
    assert_eq!(value(&out, "listen"), Some("[\"127.0.0.1:1003\"]"));
    assert_eq!(value(&out, "admin_listen"), Some("\"127.0.0.1:2003\""));

    // --config names another file, which replaces ./gatehouse.toml.
    std::fs::write(
        dir.path().join("other.toml"),
        format!("root = {site:?}\nworkers = 5\n"),
    )
    .unwrap();
    let (ok, out, _) = check(dir.path(), &["--config", "other.toml"], &[]);
    assert!(ok);
    assert_eq!(value(&out, "workers"), Some("5"));
    assert_eq!(value(&out, "listen"), Some("[\"127.0.0.1:8080\"]"));
}

#[test]
fn unknown_keys_and_bad_values_are_named_with_their_source() {
    let dir = tempfile::tempdir().unwrap();
    let site = site();
    std::fs::write(
        dir.path().join("gatehouse.toml"),
        format!("root = {site:?}\nlisen = \"127.0.0.1:1\"\n"),
    )
    .unwrap();
    let (ok, _, err) = check(dir.path(), &[], &[]);
    assert!(!ok);
    assert!(err.contains("lisen"), "{err}");
    assert!(err.contains("unknown field"), "{err}");
    assert!(err.contains("gatehouse.toml"), "names the file: {err}");

    std::fs::write(
        dir.path().join("gatehouse.toml"),
        format!("root = {site:?}\n[[routes]]\npath = \"/x\"\n[routes.static]\nopen_file_cache = {{ strictt = true }}\n"),
    )
    .unwrap();
    let (ok, _, err) = check(dir.path(), &[], &[]);
    assert!(!ok);
    assert!(
        err.contains("routes.0.static.open_file_cache") && err.contains("strictt"),
        "{err}"
    );

    let (ok, _, err) = check(dir.path(), &["--config", "/nonexistent.toml"], &[]);
    assert!(!ok);
    assert!(err.contains("--config"), "{err}");

    std::fs::write(
        dir.path().join("gatehouse.toml"),
        format!("root = {site:?}\n"),
    )
    .unwrap();
    let (ok, _, err) = check(dir.path(), &[], &[("GATEHOUSE_LISTEN", "not-an-address")]);
    assert!(!ok);
    assert!(
        err.contains("listen")
            && err.contains("not-an-address")
            && err.contains("GATEHOUSE_LISTEN"),
        "{err}"
    );

    let (ok, _, err) = check(dir.path(), &[], &[("GATEHOUSE_RUNTIME", "turbo")]);
    assert!(!ok);
    assert!(err.contains("runtime") && err.contains("turbo"), "{err}");
}

#[test]
fn validation_reports_every_problem() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("gatehouse.toml"),
        "root = \"/no/such/dir\"\n[limits]\nmax_header_bytes = 10\n\
         [[routes]]\nname = \"a\"\npath = \"nope\"\nhosts = [\"bad host\"]\n[routes.static]\n\
         [[routes]]\nname = \"a\"\n",
    )
    .unwrap();
    let (ok, _, err) = check(dir.path(), &[], &[]);
    assert!(!ok);
    for needle in [
        "limits.max_header_bytes",
        "routes.0.path",
        "routes.0.hosts.0",
        "root: /no/such/dir is not a directory",
        "routes.1.name",
        "routes.1: the route mounts no service",
    ] {
        assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
    }
    assert!(err.lines().count() >= 6, "{err}");
}

#[test]
fn help_and_version() {
    let out = bin().arg("--version").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains(env!("CARGO_PKG_VERSION")));
    let out = bin().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in ["--config", "--root", "--listen", "--admin-listen", "check"] {
        assert!(help.contains(flag), "{flag} in help:\n{help}");
    }
}

/// Starts the binary and waits for its "listening on" line; returns the child and address.
fn spawn(args: &[&str]) -> (std::process::Child, String) {
    let mut child = bin()
        .args(args)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(100)) {
            if let Some(rest) = line.split("listening on http://").nth(1) {
                let addr = rest.split_whitespace().next().unwrap().to_string();
                return (child, addr);
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("gatehouse did not report its address");
}

#[test]
fn serves_a_directory_with_no_config_and_stops_cleanly_on_sigterm() {
    let port = free_port();
    let admin = free_port();
    let listen = format!("127.0.0.1:{port}");
    let admin_listen = format!("127.0.0.1:{admin}");
    let (mut child, addr) = spawn(&[
        "--root",
        &site(),
        "--listen",
        &listen,
        "--admin-listen",
        &admin_listen,
    ]);
    assert_eq!(addr, listen);
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    use std::io::Write;
    s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(out.ends_with("hello, world\n"));

    // SAFETY: sending a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_bind_failure_is_one_clear_line_and_a_non_zero_exit() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let admin = format!("127.0.0.1:{}", free_port());
    let out = bin()
        .args([
            "--root",
            &site(),
            "--listen",
            &addr,
            "--admin-listen",
            &admin,
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains(&addr) && lines[0].contains("in use"),
        "{err}"
    );

    // An address that can't be assigned.
    let out = bin()
        .args([
            "--root",
            &site(),
            "--listen",
            "192.0.2.1:80",
            "--admin-listen",
            &admin,
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("192.0.2.1:80"));
}

#[test]
fn the_open_files_soft_limit_is_raised_to_the_hard_limit() {
    let port = free_port();
    let admin = free_port();
    let listen = format!("127.0.0.1:{port}");
    let admin_listen = format!("127.0.0.1:{admin}");
    // Start it with a low soft limit under a higher hard one.
    let script = format!(
        "ulimit -S -n 256 && exec {} --root {} --listen {listen} --admin-listen {admin_listen}",
        env!("CARGO_BIN_EXE_gatehouse"),
        site()
    );
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(&listen).is_err() {
        assert!(Instant::now() < deadline, "did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let nums: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(nums[0], nums[1], "soft == hard: {line}");
    assert_ne!(nums[0], "256", "{line}");
}

fn get_text(addr: &str, path: &str) -> String {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes())
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn sighup_reloads_the_config_file_and_a_broken_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    std::fs::create_dir_all(&one).unwrap();
    std::fs::create_dir_all(&two).unwrap();
    std::fs::write(one.join("which.txt"), "one\n").unwrap();
    std::fs::write(two.join("which.txt"), "two\n").unwrap();
    let file = dir.path().join("gatehouse.toml");
    let listen = format!("127.0.0.1:{}", free_port());
    let admin = format!("127.0.0.1:{}", free_port());
    let conf = |root: &Path| {
        format!(
            "listen = {listen:?}\nadmin_listen = {admin:?}\n[[routes]]\n[routes.static]\nroot = {:?}\n",
            root.display().to_string()
        )
    };
    std::fs::write(&file, conf(&one)).unwrap();
    let (mut child, addr) = spawn(&["--config", file.to_str().unwrap()]);
    assert!(get_text(&addr, "/which.txt").ends_with("one\n"));
    let hup = |child: &std::process::Child| {
        // SAFETY: sending a signal to our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGHUP) };
        std::thread::sleep(Duration::from_millis(300));
    };
    // Broken: refused, the old routes stay.
    std::fs::write(&file, format!("{}hide_dotfile = true\n", conf(&two))).unwrap();
    hup(&child);
    assert!(get_text(&addr, "/which.txt").ends_with("one\n"));
    // Fixed: swapped in.
    std::fs::write(&file, conf(&two)).unwrap();
    hup(&child);
    assert!(get_text(&addr, "/which.txt").ends_with("two\n"));
    // SAFETY: as above.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

/// `POST /reload` applies the routes and names the settings that wait for a restart.
#[test]
fn reload_says_which_changed_settings_wait_for_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    for (d, text) in [(&one, "one\n"), (&two, "two\n")] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("which.txt"), text).unwrap();
    }
    let file = dir.path().join("gatehouse.toml");
    let listen = format!("127.0.0.1:{}", free_port());
    let admin = format!("127.0.0.1:{}", free_port());
    let conf = |root: &Path, extra: &str| {
        format!(
            "listen = {listen:?}\nadmin_listen = {admin:?}\n{extra}[[routes]]\n[routes.static]\nroot = {:?}\n",
            root.display().to_string()
        )
    };
    std::fs::write(&file, conf(&one, "")).unwrap();
    let (child, addr) = spawn(&["--config", file.to_str().unwrap()]);
    let child = Reaped(child);
    let reload = || {
        let mut s = std::net::TcpStream::connect(&admin).unwrap();
        use std::io::Write;
        s.write_all(
            b"POST /reload HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    let out = reload();
    assert!(
        out.starts_with("HTTP/1.1 200") && out.ends_with("\r\n\r\nreloaded\n"),
        "{out}"
    );
    std::fs::write(
        &file,
        conf(&two, "log_level = \"debug\"\n[limits]\nmax_headers = 50\n"),
    )
    .unwrap();
    let out = reload();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(
        out.ends_with("reloaded; changed but applied only after a restart: log_level, limits\n"),
        "{out}"
    );
    assert!(
        get_text(&addr, "/which.txt").ends_with("two\n"),
        "the routes are applied"
    );
    drop(child);
}

/// Kills the child it holds when dropped, so that a failed assertion leaves no server behind.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A config file serving `root` on `listen` with four per-core runtimes: four
/// SO_REUSEPORT listeners on the one address.
fn reuse_port_config(dir: &Path, name: &str, listen: &str, root: &Path) -> String {
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(
        &file,
        format!(
            "listen = {listen:?}\nadmin_listen = \"127.0.0.1:{}\"\nruntime = \"per-core\"\nworkers = 4\nroot = {:?}\n",
            free_port(),
            root.display().to_string()
        ),
    )
    .unwrap();
    file.display().to_string()
}

/// Runs the binary with `args` until it exits, or for at most 10 s (then it is killed:
/// it started). Returns its exit code (`None` if it had to be killed) and its stderr.
fn run_briefly(args: &[&str], until_up: impl Fn() -> bool) -> (Option<i32>, String) {
    let child = bin()
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Reaped(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    let code = loop {
        if let Some(st) = child.0.try_wait().unwrap() {
            break st.code();
        }
        if Instant::now() > deadline || until_up() {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = child.0.kill();
    let _ = child.0.wait();
    let mut err = String::new();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (code, err)
}

fn assert_refused_in_one_line(code: Option<i32>, err: &str, addr: &str) {
    assert_eq!(code, Some(2), "exit code; stderr:\n{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains(addr) && lines[0].contains("in use"),
        "{err}"
    );
}

#[test]
fn a_second_instance_on_a_port_in_use_exits_2_and_takes_none_of_its_connections() {
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    for (d, text) in [(&one, "one\n"), (&two, "two\n")] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("which.txt"), text).unwrap();
    }
    let listen = format!("127.0.0.1:{}", free_port());
    let first_conf = reuse_port_config(dir.path(), "first", &listen, &one);
    let (first, addr) = spawn(&["--config", &first_conf]);
    let _first = Reaped(first);
    assert!(get_text(&addr, "/which.txt").ends_with("one\n"));

    let second_conf = reuse_port_config(dir.path(), "second", &listen, &two);
    let (code, err) = run_briefly(&["--config", &second_conf], || {
        // Started after all: its connections are what the assertions below must catch.
        let got: Vec<String> = (0..20).map(|_| get_text(&addr, "/which.txt")).collect();
        got.iter().any(|r| r.ends_with("two\n"))
    });
    assert_refused_in_one_line(code, &err, &listen);
    // Every connection still reaches the first.
    for _ in 0..20 {
        assert!(get_text(&addr, "/which.txt").ends_with("one\n"));
    }
}

#[test]
fn a_port_another_program_holds_is_refused_with_exit_2_reuse_port_or_not() {
    let dir = tempfile::tempdir().unwrap();
    // Holds the port (listening) until its stdin closes.
    let holder = "import socket, sys\n\
                  s = socket.socket()\n\
                  if sys.argv[2] == '1':\n    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)\n\
                  s.bind(('127.0.0.1', int(sys.argv[1])))\n\
                  s.listen()\n\
                  print('ready', flush=True)\n\
                  sys.stdin.read()\n";
    for reuse_port in ["1", "0"] {
        let port = free_port().to_string();
        let mut py = Reaped(
            Command::new("python3")
                .args(["-c", holder, &port, reuse_port])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("python3"),
        );
        let mut ready = String::new();
        BufReader::new(py.0.stdout.take().unwrap())
            .read_line(&mut ready)
            .unwrap();
        assert_eq!(ready.trim(), "ready");
        let listen = format!("127.0.0.1:{port}");
        let conf = reuse_port_config(dir.path(), "g", &listen, Path::new(&site()));
        let admin = std::fs::read_to_string(&conf).unwrap();
        let admin = value(&admin, "admin_listen")
            .unwrap()
            .trim_matches('"')
            .to_string();
        let (code, err) = run_briefly(&["--config", &conf], || {
            std::net::TcpStream::connect(&admin).is_ok()
        });
        assert_refused_in_one_line(code, &err, &listen);
    }
}

/// Colours on a terminal (a pty from `script`), none with NO_COLOR (no-color.org).
#[test]
fn log_colours_follow_the_terminal_and_no_color() {
    let run = |no_color: Option<&str>| {
        let cmd = format!(
            "{} --root {} --listen 127.0.0.1:{} --admin-listen 127.0.0.1:{}",
            env!("CARGO_BIN_EXE_gatehouse"),
            site(),
            free_port(),
            free_port()
        );
        let mut c = Command::new("timeout");
        c.args(["-s", "TERM", "3", "script", "-qec", &cmd, "/dev/null"]);
        c.env_remove("NO_COLOR");
        if let Some(v) = no_color {
            c.env("NO_COLOR", v);
        }
        let out = c.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(text.contains("listening on"), "{text}");
        text.contains('\x1b')
    };
    assert!(run(None), "colours on a terminal");
    assert!(run(Some("")), "an empty NO_COLOR is as if unset");
    assert!(!run(Some("1")), "NO_COLOR=1");
}

/// `check` runs start's loading code: what start refuses, check refuses, with the same
/// message (and start is run on each case to see it).
#[test]
fn check_refuses_what_start_would_with_the_same_message() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    for k in ["a", "b"] {
        let st = Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ])
            .args(["-nodes", "-days", "1", "-subj", "/CN=localhost"])
            .args([
                "-keyout",
                &format!("{d}/{k}.key"),
                "-out",
                &format!("{d}/{k}.crt"),
            ])
            .stderr(Stdio::null())
            .status()
            .expect("openssl");
        assert!(st.success());
    }
    std::fs::write(dir.path().join("users"), "alice:plaintext\n").unwrap();
    let tls = |cert: &str, key: &str| {
        format!(
            "[tls]\nlisten = \"127.0.0.1:{}\"\n[[tls.certs]]\ncert = \"{d}/{cert}\"\nkey = \"{d}/{key}\"\n",
            free_port()
        )
    };
    let cases = [
        ("a missing certificate", tls("none.crt", "a.key"), "none.crt"),
        ("a key that isn't the certificate's", tls("a.crt", "b.key"), "a.crt"),
        (
            "a plain-text htpasswd line",
            format!("[[routes]]\n[routes.static]\n[routes.auth]\nhtpasswd = \"{d}/users\"\n"),
            "users",
        ),
        (
            "a log template with an unknown field",
            format!("[[routes]]\n[routes.static]\n[routes.access_log]\npath = \"{d}/access.log\"\ntemplate = \"$remote_addr $http_cookie\"\n"),
            "http_cookie",
        ),
    ];
    for (what, toml, names) in cases {
        let file = dir.path().join("gatehouse.toml");
        std::fs::write(
            &file,
            format!(
                "root = {:?}\nlisten = \"127.0.0.1:{}\"\nadmin_listen = \"127.0.0.1:{}\"\n{toml}",
                site(),
                free_port(),
                free_port()
            ),
        )
        .unwrap();
        let (ok, _, err) = check(dir.path(), &[], &[]);
        assert!(!ok, "{what}: check said OK:\n{err}");
        let said: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("gatehouse: "))
            .collect();
        assert!(
            !said.is_empty() && said.iter().any(|l| l.contains(names)),
            "{what}: {err}"
        );

        let mut start = bin()
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while start.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = start.kill();
                let _ = start.wait();
                panic!("{what}: start did not refuse the config that check refused");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = start.wait_with_output().unwrap();
        assert!(!out.status.success(), "{what}");
        let start_err = String::from_utf8_lossy(&out.stderr);
        for line in &said {
            assert!(
                start_err.contains(line),
                "{what}: start said\n{start_err}\nnot {line}"
            );
        }
    }
}

/// Every wrong type and every unknown key is reported, each with its true source: the
/// file with line and column, the flag, the environment variable, the built-in default.
#[test]
fn check_reports_every_error_with_its_true_source() {
    let dir = tempfile::tempdir().unwrap();
    // Found in the working directory, so named as gatehouse.toml.
    let file = dir.path().join("gatehouse.toml");
    let f = "gatehouse.toml";
    std::fs::write(
        &file,
        format!(
            "root = {:?}\nworkers = \"four\"\nlisen = 1\n[limits]\nmax_headers = \"lots\"\nmax_hedaers = 2\n[[routes]]\npath = \"/a\"\n[routes.static]\nlisting = \"yes\"\n",
            site()
        ),
    )
    .unwrap();
    let (ok, _, err) = check(dir.path(), &[], &[]);
    assert!(!ok);
    for (key, at) in [
        ("workers", format!("{f}:2:1")),
        ("lisen", format!("{f}:3:1")),
        ("limits.max_headers", format!("{f}:5:1")),
        ("max_hedaers", format!("{f}:6:1")),
        ("routes.0.static.listing", format!("{f}:10:1")),
    ] {
        assert!(
            err.lines()
                .any(|l| l.contains(key) && l.contains(&format!("(from {at})"))),
            "{key} from {at} in:\n{err}"
        );
    }

    // Validation errors name the file's line too, not "default".
    std::fs::write(
        &file,
        format!(
            "root = {:?}\n[[routes]]\npath = \"/a\"\n[[routes]]\npath = \"/a\"\n[routes.compression]\ngzip_level = 42\n",
            site()
        ),
    )
    .unwrap();
    let (ok, _, err) = check(dir.path(), &[], &[]);
    assert!(!ok);
    assert!(err.contains(&format!("(from {f}:")), "{err}");
    assert!(!err.contains("(from default)"), "{err}");

    // A flag, and the built-in default.
    let empty = tempfile::tempdir().unwrap();
    let (ok, _, err) = check(empty.path(), &["--listen", "nowhere"], &[]);
    assert!(!ok);
    assert!(
        err.contains("listen") && err.contains("(from the --listen flag)"),
        "{err}"
    );
    assert!(
        err.contains("root: public is not a directory (from built-in default)"),
        "{err}"
    );
    assert!(
        !err.contains(".rs:"),
        "no source file of gatehouse's own: {err}"
    );
}
