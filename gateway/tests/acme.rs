//! ACME against a real CA: Debian's Pebble, with pebble-challtestsrv as its DNS server
//! (every name resolves to 127.0.0.1). gatehouse runs as the binary, so that what it logs
//! is part of what is checked.
use crate::common;
use common::free_port;
use common::pki::Ca;
use common::tls::*;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn wait_listening(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} never listened on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

const EAB_KEY: &str = "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W";

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Pebble and its DNS server. Dropping it stops both.
struct Pebble {
    pebble: Option<Kill>,
    _dns: Kill,
    directory: String,
    mgmt: SocketAddr,
    /// The CA of Pebble's own HTTPS listener.
    listener_ca: PathBuf,
    listener_ca_pem: String,
}

impl Pebble {
    /// Pebble validating HTTP-01 on `http_port` and TLS-ALPN-01 on `tls_port`.
    fn start(dir: &Path, http_port: u16, tls_port: u16) -> Pebble {
        Pebble::start_with(dir, http_port, tls_port, false)
    }

    /// With `eab`, accounts need External Account Binding with kid `kid-1` and [`EAB_KEY`].
    fn start_with(dir: &Path, http_port: u16, tls_port: u16, eab: bool) -> Pebble {
        let ca = Ca::new("pebble listener CA");
        let leaf = ca.leaf(&["localhost", "127.0.0.1"], "localhost");
        std::fs::write(dir.join("pebble.crt"), &leaf.cert_pem).unwrap();
        std::fs::write(dir.join("pebble.key"), &leaf.key_pem).unwrap();
        let listener_ca = dir.join("pebble-ca.pem");
        std::fs::write(&listener_ca, &ca.pem).unwrap();
        let (api, mgmt, dns, dns_mgmt) = (free_port(), free_port(), free_port(), free_port());
        let mut config = serde_json::json!({"pebble": {
            "listenAddress": format!("127.0.0.1:{api}"),
            "managementListenAddress": format!("127.0.0.1:{mgmt}"),
            "certificate": dir.join("pebble.crt"),
            "privateKey": dir.join("pebble.key"),
            "httpPort": http_port,
            "tlsPort": tls_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": eab
        }});
        if eab {
            config["pebble"]["externalAccountMACKeys"] = serde_json::json!({ "kid-1": EAB_KEY });
        }
        std::fs::write(dir.join("pebble.json"), config.to_string()).unwrap();
        let log = |name: &str| std::fs::File::create(dir.join(name)).unwrap();
        let dns_child = Command::new("pebble-challtestsrv")
            .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
            .args(["-dns01", &format!("127.0.0.1:{dns}")])
            .args(["-http01", "", "-https01", "", "-tlsalpn01", ""])
            .args(["-management", &format!("127.0.0.1:{dns_mgmt}")])
            .stdout(log("challtestsrv.log"))
            .stderr(Stdio::null())
            .spawn()
            .expect("pebble-challtestsrv (Debian package pebble) must be installed");
        let dns_child = Kill(dns_child);
        let pebble = Command::new("pebble")
            .arg("-config")
            .arg(dir.join("pebble.json"))
            .args(["-dnsserver", &format!("127.0.0.1:{dns}")])
            // No random sleeps before validating, no rejected nonces, and no reused
            // authorizations: every order goes through its challenges.
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .env("PEBBLE_AUTHZREUSE", "0")
            .stdout(log("pebble.log"))
            .stderr(Stdio::null())
            .spawn()
            .expect("pebble (Debian package pebble) must be installed");
        let pebble = Kill(pebble);
        wait_listening(api, "pebble");
        wait_listening(mgmt, "pebble management");
        Pebble {
            pebble: Some(pebble),
            _dns: dns_child,
            directory: format!("https://localhost:{api}/dir"),
            mgmt: SocketAddr::from(([127, 0, 0, 1], mgmt)),
            listener_ca,
            listener_ca_pem: ca.pem,
        }
    }

    /// The root that Pebble's issued certificates chain to (it makes a new one each run).
    async fn root(&self) -> String {
        let cfg = client_config(&self.listener_ca_pem, &[b"http/1.1"], None);
        let c = connect(self.mgmt, "localhost", &cfg).await.unwrap();
        let r = H1::new(c).await.get("localhost", "/roots/0").await.unwrap();
        assert_eq!(r.status, 200);
        String::from_utf8(r.body.to_vec()).unwrap()
    }

    fn stop(&mut self) {
        self.pebble = None;
    }
}

struct Gatehouse {
    child: Option<Kill>,
    log: PathBuf,
    https: SocketAddr,
    admin: SocketAddr,
}

impl Gatehouse {
    fn start(dir: &Path, toml: &str, http_port: u16, tls_port: u16, tag: &str) -> Gatehouse {
        let site = common::fixtures().join("site");
        let admin = free_port();
        let config = format!(
            "root = {:?}\nlisten = \"127.0.0.1:{http_port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\nworkers = 1\n[timeouts]\ndrain = \"200ms\"\n[tls]\nlisten = \"127.0.0.1:{tls_port}\"\n{toml}",
            site.display().to_string()
        );
        let path = dir.join(format!("gatehouse-{tag}.toml"));
        std::fs::write(&path, config).unwrap();
        let log = dir.join(format!("gatehouse-{tag}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_gatehouse"))
            .arg("--config")
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let child = Kill(child);
        wait_listening(tls_port, "gatehouse");
        Gatehouse {
            child: Some(child),
            log,
            https: SocketAddr::from(([127, 0, 0, 1], tls_port)),
            admin: SocketAddr::from(([127, 0, 0, 1], admin)),
        }
    }

    /// The value of one series on /metrics.
    fn metric(&self, series: &str) -> Option<f64> {
        let r = common::send(self.admin, "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n");
        r.text()
            .lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_log(&self, needle: &str, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.log().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "no {needle:?} in the log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops it with SIGTERM and waits for it to exit.
    fn stop(&mut self) {
        if let Some(mut k) = self.child.take() {
            unsafe { libc::kill(k.0.id() as i32, libc::SIGTERM) };
            let _ = k.0.wait();
        }
    }

    /// The serial of the certificate served for `sni`, verified against `root`, once
    /// there is one (or None after `within`).
    async fn serial(&self, sni: &str, root: &str, within: Duration) -> Option<String> {
        let cfg = client_config(root, &[b"h2", b"http/1.1"], None);
        let deadline = Instant::now() + within;
        loop {
            if let Ok(c) = connect(self.https, sni, &cfg).await {
                let der = c.get_ref().1.peer_certificates().unwrap()[0].to_vec();
                return Some(serial_of(&der));
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

fn acme_toml(p: &Pebble, state: &Path, challenge: &str, extra: &str, certs: &[&[&str]]) -> String {
    let mut t = format!(
        "[acme]\ndirectory = {:?}\ndirectory_ca = {:?}\nstate_dir = {:?}\nchallenge = {challenge:?}\ncontact = [\"mailto:ops@gatehouse.test\"]\n{extra}",
        p.directory,
        p.listener_ca.display().to_string(),
        state.display().to_string()
    );
    for domains in certs {
        t.push_str(&format!("[[acme.certificates]]\ndomains = {domains:?}\n"));
    }
    t
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http01_certificate_is_served_then_reused_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (http_port, tls_port) = (free_port(), free_port());
    let mut pebble = Pebble::start(dir.path(), http_port, tls_port);
    let state = dir.path().join("state");
    // Every plain request is redirected to https, except the CA's challenge requests.
    let toml = format!(
        "redirect_http = true\n{}",
        acme_toml(
            &pebble,
            &state,
            "http-01",
            "",
            &[&["www.gatehouse.test", "gatehouse.test"]],
        )
    );
    let mut g = Gatehouse::start(dir.path(), &toml, http_port, tls_port, "first");
    let root = pebble.root().await;
    let serial = g
        .serial("www.gatehouse.test", &root, Duration::from_secs(60))
        .await
        .unwrap_or_else(|| panic!("no certificate; log:\n{}", g.log()));
    // Both names are on it, and a request over it works.
    let cfg = client_config(&root, &[b"h2"], None);
    let c = connect(g.https, "gatehouse.test", &cfg).await.unwrap();
    let r = H2::new(c)
        .await
        .get("gatehouse.test", "/index.html")
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    g.wait_log("certificate obtained", Duration::from_secs(5));
    assert_eq!(
        g.metric("gatehouse_acme_renewals_total{outcome=\"success\"}"),
        Some(1.0)
    );
    let expiry = g
        .metric("gatehouse_tls_certificate_expiry_timestamp_seconds{domain=\"gatehouse.test\",source=\"acme\"}")
        .expect("the ACME certificate's expiry");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(expiry > now + 86400.0, "{expiry} vs now {now}");
    let r = common::send(
        SocketAddr::from(([127, 0, 0, 1], http_port)),
        "GET /index.html HTTP/1.1\r\nHost: gatehouse.test\r\n\r\n",
    );
    assert_eq!(r.status, 308);

    let certs = state.join("certs").join("www.gatehouse.test");
    assert_eq!(mode(&certs.join("key.pem")), 0o600);
    let account = std::fs::read_dir(&state)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .expect("an account file");
    assert_eq!(mode(&account), 0o600);

    // A restart with the CA gone: the stored certificate is served at once, and no order
    // is attempted.
    g.stop();
    pebble.stop();
    let ports = (http_port, tls_port);
    restarts_from_state(dir.path(), &toml, ports, &root, &serial).await;
}

/// Starts gatehouse again on `toml` with the CA gone: the stored certificate (of serial
/// `serial`) must be served at once, and no order attempted.
async fn restarts_from_state(
    dir: &Path,
    toml: &str,
    (http_port, tls_port): (u16, u16),
    root: &str,
    serial: &str,
) -> Gatehouse {
    let g = Gatehouse::start(dir, toml, http_port, tls_port, "second");
    let again = g
        .serial("www.gatehouse.test", root, Duration::from_secs(2))
        .await;
    assert_eq!(again.as_deref(), Some(serial));
    std::thread::sleep(Duration::from_millis(500));
    let log = g.log();
    assert!(log.contains("using the stored certificate"), "{log}");
    assert!(!log.contains("ordering from"), "{log}");
    g
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_alpn01_certificates_for_two_domain_lists() {
    let dir = tempfile::tempdir().unwrap();
    let (http_port, tls_port) = (free_port(), free_port());
    let pebble = Pebble::start(dir.path(), http_port, tls_port);
    let state = dir.path().join("state");
    let toml = acme_toml(
        &pebble,
        &state,
        "tls-alpn-01",
        "",
        &[&["one.gatehouse.test"], &["two.gatehouse.test"]],
    );
    let g = Gatehouse::start(dir.path(), &toml, http_port, tls_port, "alpn");
    let root = pebble.root().await;
    let one = g
        .serial("one.gatehouse.test", &root, Duration::from_secs(60))
        .await;
    let two = g
        .serial("two.gatehouse.test", &root, Duration::from_secs(60))
        .await;
    let (Some(one), Some(two)) = (one, two) else {
        panic!("certificates missing; log:\n{}", g.log());
    };
    assert_ne!(one, two, "one certificate per domain list");
    let cfg = client_config(&root, &[b"http/1.1"], None);
    let c = connect(g.https, "two.gatehouse.test", &cfg).await.unwrap();
    let r = H1::new(c)
        .await
        .get("two.gatehouse.test", "/")
        .await
        .unwrap();
    assert_eq!(r.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_swaps_in_place_and_a_failing_ca_leaves_the_old_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (http_port, tls_port) = (free_port(), free_port());
    let mut pebble = Pebble::start(dir.path(), http_port, tls_port);
    let state = dir.path().join("state");
    // renew_before longer than any lifetime: each certificate is due as soon as it is
    // issued, and renewed retry_min (2 s) later.
    let toml = acme_toml(
        &pebble,
        &state,
        "http-01",
        "renew_before = \"100000d\"\nretry_min = \"2s\"\nretry_max = \"4s\"\n",
        &[&["renew.gatehouse.test"]],
    );
    let g = Gatehouse::start(dir.path(), &toml, http_port, tls_port, "renew");
    let root = pebble.root().await;
    let first = g
        .serial("renew.gatehouse.test", &root, Duration::from_secs(60))
        .await
        .unwrap_or_else(|| panic!("no certificate; log:\n{}", g.log()));
    let cfg = client_config(&root, &[b"http/1.1"], None);
    let mut open = H1::new(
        connect(g.https, "renew.gatehouse.test", &cfg)
            .await
            .unwrap(),
    )
    .await;

    let deadline = Instant::now() + Duration::from_secs(60);
    let renewed = loop {
        let s = g
            .serial("renew.gatehouse.test", &root, Duration::from_secs(5))
            .await
            .unwrap();
        if s != first {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "never renewed; log:\n{}",
            g.log()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    // The connection from before the renewal was not dropped.
    assert_eq!(
        open.get("renew.gatehouse.test", "/").await.unwrap().status,
        200
    );

    // The CA goes away: attempts fail, are logged with their next retry, and HTTPS goes
    // on with a certificate that was issued (the last one obtained).
    pebble.stop();
    g.wait_log("ordering failed", Duration::from_secs(30));
    let log = g.log();
    let line = log
        .lines()
        .find(|l| l.contains("ordering failed"))
        .unwrap()
        .to_string();
    assert!(
        line.contains("stays in use") && line.contains("next attempt in"),
        "{line}"
    );
    let now = g
        .serial("renew.gatehouse.test", &root, Duration::from_secs(2))
        .await
        .expect("still served");
    let stored = std::fs::read(state.join("certs/renew.gatehouse.test/cert.pem")).unwrap();
    let stored = {
        use rustls::pki_types::pem::PemObject;
        let der = rustls::pki_types::CertificateDer::from_pem_slice(&stored).unwrap();
        serial_of(&der)
    };
    assert_eq!(now, stored, "the last certificate obtained stays in use");
    assert_ne!(now, first, "and it is a renewed one ({renewed} or later)");
    // And it goes on retrying.
    let deadline = Instant::now() + Duration::from_secs(30);
    while g.log().matches("ordering failed").count() < 2 {
        assert!(Instant::now() < deadline, "no retry; log:\n{}", g.log());
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_account_binding_when_the_ca_requires_it() {
    let dir = tempfile::tempdir().unwrap();
    let (http_port, tls_port) = (free_port(), free_port());
    let pebble = Pebble::start_with(dir.path(), http_port, tls_port, true);
    let root = pebble.root().await;

    // Without a binding the CA refuses the account, and that is what the log says.
    let state = dir.path().join("state-none");
    let toml = acme_toml(&pebble, &state, "http-01", "", &[&["eab.gatehouse.test"]]);
    let mut g = Gatehouse::start(dir.path(), &toml, http_port, tls_port, "no-eab");
    g.wait_log("ordering failed", Duration::from_secs(30));
    assert!(g.log().contains("new account"), "{}", g.log());
    g.stop();

    let state = dir.path().join("state-eab");
    let extra = format!("eab_kid = \"kid-1\"\neab_hmac_key = {EAB_KEY:?}\n");
    let toml = acme_toml(
        &pebble,
        &state,
        "http-01",
        &extra,
        &[&["eab.gatehouse.test"]],
    );
    let g = Gatehouse::start(dir.path(), &toml, http_port, tls_port, "eab");
    let got = g
        .serial("eab.gatehouse.test", &root, Duration::from_secs(60))
        .await;
    assert!(got.is_some(), "no certificate; log:\n{}", g.log());
}

/// Issue 9: a kill -9 under load, then a restart. The certificate and account written
/// (each through a temporary file and a rename) are used as they are, and the access log
/// holds only whole lines, the new ones after the old.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_leaves_the_acme_state_and_the_access_log_intact() {
    let dir = tempfile::tempdir().unwrap();
    let (http_port, tls_port) = (free_port(), free_port());
    let mut pebble = Pebble::start(dir.path(), http_port, tls_port);
    let state = dir.path().join("state");
    let access = dir.path().join("access.log");
    let toml = format!(
        "{}[[routes]]\n[routes.static]\n[routes.access_log]\npath = {:?}\n",
        acme_toml(&pebble, &state, "http-01", "", &[&["www.gatehouse.test"]]),
        access.display().to_string()
    );
    let mut g = Gatehouse::start(dir.path(), &toml, http_port, tls_port, "first");
    let root = pebble.root().await;
    let serial = g
        .serial("www.gatehouse.test", &root, Duration::from_secs(60))
        .await
        .unwrap_or_else(|| panic!("no certificate; log:\n{}", g.log()));
    g.wait_log("certificate obtained", Duration::from_secs(5));

    // Two keep-alive clients hammer the plain listener until the process disappears.
    let plain = SocketAddr::from(([127, 0, 0, 1], http_port));
    let clients: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = common::Conn::open(plain);
                let mut ok = 0u64;
                loop {
                    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: www.gatehouse.test\r\n\r\n");
                    match c.read_response(false) {
                        Some(r) if r.status == 200 => ok += 1,
                        _ => return ok,
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    let child = g.child.take().expect("running");
    unsafe { libc::kill(child.0.id() as i32, libc::SIGKILL) };
    let served: u64 = clients.into_iter().map(|t| t.join().unwrap()).sum();
    drop(child);

    let whole_lines = |text: &str| {
        assert!(text.is_empty() || text.ends_with('\n'), "a torn last line");
        for l in text.lines() {
            assert!(
                l.starts_with("127.0.0.1 - - [") && l.contains("\"GET /hello.txt HTTP/1.1\" 200 "),
                "not a whole line: {l:?}"
            );
        }
        text.lines().count() as u64
    };
    let before = std::fs::read_to_string(&access).unwrap();
    let logged = whole_lines(&before);
    println!(
        "kill -9 after {served} requests answered: {logged} whole lines in the log, {} lost \
         with the writer's last 50 ms",
        served - logged
    );
    assert!(served > 100, "{served}");
    assert!(logged > 0 && logged <= served, "{logged} of {served}");

    // Restart without the CA: the stored certificate at once, no new order.
    pebble.stop();
    let ports = (http_port, tls_port);
    let _g2 = restarts_from_state(dir.path(), &toml, ports, &root, &serial).await;
    assert!(!state.read_dir().unwrap().any(|e| e
        .unwrap()
        .path()
        .extension()
        .is_some_and(|x| x == "tmp")));
    let r = common::send(
        plain,
        "GET /hello.txt HTTP/1.1\r\nHost: www.gatehouse.test\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let after = std::fs::read_to_string(&access).unwrap();
        if after.len() > before.len() {
            assert!(after.starts_with(&before), "the old lines were changed");
            assert_eq!(whole_lines(&after), logged + 1);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new request was never logged"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
