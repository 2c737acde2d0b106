//! HTTPS listeners: certificates by SNI, HTTP/2 and HTTP/1.1 by ALPN on one port,
//! resumption, certificate reload, mTLS, the redirect listener and HSTS, h2c.
use crate::common;
use common::pki::{Ca, Leaf};
use common::tls::*;
use common::*;
use std::path::Path;
use std::time::Duration;

fn write_leaf(dir: &Path, name: &str, leaf: &Leaf) -> (String, String) {
    let c = dir.join(format!("{name}.crt"));
    let k = dir.join(format!("{name}.key"));
    std::fs::write(&c, &leaf.cert_pem).unwrap();
    std::fs::write(&k, &leaf.key_pem).unwrap();
    (c.display().to_string(), k.display().to_string())
}

struct Setup {
    ca: Ca,
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        Setup {
            ca: Ca::new("gatehouse tls test CA"),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// A `[[tls.certs]]` entry for a fresh certificate.
    fn cert(&self, file: &str, names: &[&str], cn: &str) -> String {
        let (c, k) = write_leaf(self.dir.path(), file, &self.ca.leaf(names, cn));
        format!("[[tls.certs]]\ncert = {c:?}\nkey = {k:?}\n")
    }
}

/// Client tasks live on the test's runtime, which doesn't run while the server drains at
/// the end of a test: a short drain keeps that from taking the default 30 s.
const DRAIN: &str = "[timeouts]\ndrain = \"200ms\"\n";

/// The test site over TLS, with one certificate for `localhost`.
fn localhost_site(p: &Setup) -> TestServer {
    TestServer::site(&format!(
        "{DRAIN}[tls]\nlisten = \"127.0.0.1:0\"\n{}",
        p.cert("l", &["localhost"], "L")
    ))
}

fn https(s: &TestServer) -> std::net::SocketAddr {
    s.handle().https_addrs()[0]
}

#[tokio::test]
async fn sni_picks_exact_then_wildcard_then_the_default() {
    let p = Setup::new();
    let toml = format!(
        "{DRAIN}[tls]\nlisten = \"127.0.0.1:0\"\n{}{}{}",
        p.cert("d", &["default.test"], "D"),
        p.cert("a", &["a.test"], "A"),
        p.cert("w", &["*.w.test"], "W"),
    );
    let s = TestServer::site(&toml);
    let cfg = client_config(&p.ca.pem, &[b"http/1.1"], None);
    for (sni, cn) in [("a.test", "A"), ("x.w.test", "W"), ("default.test", "D")] {
        let c = connect(https(&s), sni, &cfg).await.unwrap();
        assert_eq!(peer_cn(&c), cn, "sni {sni}");
        let mut h = H1::new(c).await;
        let r = h.get(sni, "/index.html").await.unwrap();
        assert_eq!(r.status, 200);
        assert!(!r.body.is_empty());
    }
    // A name no certificate covers, and no SNI at all (an IP), get the default, which
    // the client then rejects for the wrong name.
    let e = connect(https(&s), "other.test", &cfg).await;
    assert!(
        e.is_err(),
        "the default certificate doesn't cover other.test"
    );
    let e = connect(https(&s), "a.w.w.test", &cfg).await;
    assert!(e.is_err(), "a wildcard covers one label only");
}

#[tokio::test]
async fn http2_and_http11_by_alpn_on_one_port() {
    let p = Setup::new();
    let s = localhost_site(&p);
    let want = std::fs::read(s.root.join("index.html")).unwrap();

    let cfg = client_config(&p.ca.pem, &[b"h2", b"http/1.1"], None);
    let c = connect(https(&s), "localhost", &cfg).await.unwrap();
    assert_eq!(c.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let h2 = H2::new(c).await;
    // Twenty streams at once on the one connection.
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let mut h2 = h2.clone();
        tasks.push(tokio::spawn(async move {
            h2.get("localhost", "/index.html").await.unwrap()
        }));
    }
    for t in tasks {
        let r = t.await.unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(&r.body[..], &want[..]);
    }

    for alpn in [&[&b"http/1.1"[..]][..], &[][..]] {
        let cfg = client_config(&p.ca.pem, alpn, None);
        let c = connect(https(&s), "localhost", &cfg).await.unwrap();
        assert_ne!(c.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let mut h = H1::new(c).await;
        for _ in 0..3 {
            let r = h.get("localhost", "/index.html").await.unwrap();
            assert_eq!(r.status, 200);
            assert_eq!(&r.body[..], &want[..]);
        }
    }
}

/// A client offering only ALPN `http/1.0` is served over HTTP/1 (nginx serves it; it used
/// to get a fatal `no_application_protocol` alert), by rustls and by `openssl s_client`.
#[tokio::test]
async fn a_client_offering_only_http10_by_alpn_is_served() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let p = Setup::new();
    let s = localhost_site(&p);
    let want = std::fs::read(s.root.join("index.html")).unwrap();
    let request = b"GET /index.html HTTP/1.0\r\nHost: localhost\r\n\r\n";

    let cfg = client_config(&p.ca.pem, &[b"http/1.0"], None);
    let mut c = connect(https(&s), "localhost", &cfg)
        .await
        .expect("the handshake");
    assert_eq!(c.get_ref().1.alpn_protocol(), Some(&b"http/1.0"[..]));
    c.write_all(request).await.unwrap();
    let mut got = Vec::new();
    // HTTP/1.0 without keep-alive: the response ends with the connection.
    tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut got))
        .await
        .expect("the whole response")
        .ok();
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("HTTP/1.") && text[..12].ends_with("200"),
        "{text}"
    );
    assert!(got.ends_with(&want), "{text}");

    // A real peer: openssl's client, verifying the certificate against the test CA.
    let ca = p.dir.path().join("ca.pem");
    std::fs::write(&ca, &p.ca.pem).unwrap();
    let addr = https(&s).to_string();
    let out = tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut child = std::process::Command::new("openssl")
            .args(["s_client", "-connect", &addr, "-servername", "localhost"])
            .args(["-alpn", "http/1.0", "-verify_return_error", "-quiet"])
            .arg("-CAfile")
            .arg(&ca)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("openssl");
        child.stdin.take().unwrap().write_all(request).unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.starts_with("HTTP/1.") && text.contains(" 200 "),
        "{text}\n{err}"
    );
    assert!(out.stdout.ends_with(&want), "{text}\n{err}");
}

#[tokio::test]
async fn a_large_file_over_tls_arrives_whole() {
    let p = Setup::new();
    let s = localhost_site(&p);
    let big: Vec<u8> = (0..3 * 1024 * 1024 + 17)
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    std::fs::write(s.root.join("big.bin"), &big).unwrap();
    for alpn in [&b"h2"[..], &b"http/1.1"[..]] {
        let cfg = client_config(&p.ca.pem, &[alpn], None);
        let c = connect(https(&s), "localhost", &cfg).await.unwrap();
        let r = if alpn == b"h2" {
            H2::new(c).await.get("localhost", "/big.bin").await.unwrap()
        } else {
            H1::new(c).await.get("localhost", "/big.bin").await.unwrap()
        };
        assert_eq!(r.status, 200);
        assert!(
            r.body == big,
            "{} bytes differ",
            String::from_utf8_lossy(alpn)
        );
    }
}

#[tokio::test]
async fn sessions_resume_on_tls13_and_tls12() {
    let p = Setup::new();
    let s = localhost_site(&p);
    for v in [&rustls::version::TLS13, &rustls::version::TLS12] {
        let cfg = client_config_versions(&p.ca.pem, &[b"http/1.1"], None, &[v]);
        let mut kinds = Vec::new();
        for _ in 0..2 {
            let c = connect(https(&s), "localhost", &cfg).await.unwrap();
            kinds.push(c.get_ref().1.handshake_kind());
            // TLS 1.3 tickets arrive after the handshake: a request makes sure they did.
            let mut h = H1::new(c).await;
            assert_eq!(h.get("localhost", "/").await.unwrap().status, 200);
        }
        assert_eq!(
            kinds,
            vec![
                Some(rustls::HandshakeKind::Full),
                Some(rustls::HandshakeKind::Resumed)
            ],
            "{v:?}"
        );
    }
}

#[tokio::test]
async fn aes_128_gcm_is_chosen_over_a_clients_first_choice() {
    let p = Setup::new();
    let s = localhost_site(&p);
    for v in [&rustls::version::TLS13, &rustls::version::TLS12] {
        // ring's client lists AES-256-GCM first.
        let cfg = client_config_versions(&p.ca.pem, &[b"http/1.1"], None, &[v]);
        let c = connect(https(&s), "localhost", &cfg).await.unwrap();
        let suite = c.get_ref().1.negotiated_cipher_suite().unwrap().suite();
        assert!(
            format!("{suite:?}").contains("AES_128_GCM"),
            "{v:?}: {suite:?}"
        );
    }
}

async fn cn_now(addr: std::net::SocketAddr, ca: &str) -> String {
    let cfg = client_config(ca, &[b"http/1.1"], None);
    peer_cn(&connect(addr, "localhost", &cfg).await.unwrap())
}

#[tokio::test]
async fn changed_certificate_files_are_reloaded_and_broken_ones_refused() {
    let p = Setup::new();
    let toml = format!(
        "{DRAIN}[tls]\nlisten = \"127.0.0.1:0\"\nwatch_interval = \"50ms\"\n{}",
        p.cert("l", &["localhost"], "OLD")
    );
    let s = TestServer::site(&toml);
    let addr = https(&s);
    let cfg = client_config(&p.ca.pem, &[b"http/1.1"], None);
    let open = connect(addr, "localhost", &cfg).await.unwrap();
    assert_eq!(peer_cn(&open), "OLD");
    let mut open = H1::new(open).await;
    assert_eq!(open.get("localhost", "/").await.unwrap().status, 200);

    write_leaf(p.dir.path(), "l", &p.ca.leaf(&["localhost"], "NEW"));
    let mut seen = String::new();
    for _ in 0..100 {
        seen = cn_now(addr, &p.ca.pem).await;
        if seen == "NEW" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        seen, "NEW",
        "the new certificate is served without a restart"
    );
    // The connection made before the change is still open and still served.
    assert_eq!(open.get("localhost", "/").await.unwrap().status, 200);

    // A broken certificate (and a key that doesn't match) is refused: NEW stays.
    std::fs::write(p.dir.path().join("l.crt"), "not a certificate").unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(cn_now(addr, &p.ca.pem).await, "NEW");
    let other = p.ca.leaf(&["localhost"], "MISMATCH");
    std::fs::write(p.dir.path().join("l.crt"), &other.cert_pem).unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(cn_now(addr, &p.ca.pem).await, "NEW");
}

#[tokio::test]
async fn reload_is_all_or_nothing() {
    let p = Setup::new();
    let toml = format!(
        "{DRAIN}[tls]\nlisten = \"127.0.0.1:0\"\nwatch_interval = \"1h\"\n{}",
        p.cert("l", &["localhost"], "FIRST")
    );
    let s = TestServer::site(&toml);
    let tls = s.handle().tls().unwrap().clone();
    let mut t = gatehouse_config::TlsConfig::default();
    let leaf = p.ca.leaf(&["localhost"], "SECOND");
    let (c, k) = write_leaf(p.dir.path(), "second", &leaf);
    t.certs.push(gatehouse_config::CertConfig {
        cert: c.clone().into(),
        key: k.clone().into(),
        names: vec![],
    });
    t.certs.push(gatehouse_config::CertConfig {
        cert: p.dir.path().join("missing.crt"),
        key: k.into(),
        names: vec![],
    });
    let e = tls.reload(&t).unwrap_err();
    assert!(
        e.contains("tls.certs.1") && e.contains("missing.crt"),
        "{e}"
    );
    assert_eq!(cn_now(https(&s), &p.ca.pem).await, "FIRST");
    t.certs.pop();
    tls.reload(&t).unwrap();
    assert_eq!(cn_now(https(&s), &p.ca.pem).await, "SECOND");
}

#[tokio::test]
async fn client_certificates_when_asked_for() {
    let p = Setup::new();
    let ca_file = p.dir.path().join("clients.pem");
    let clients = Ca::new("client CA");
    std::fs::write(&ca_file, &clients.pem).unwrap();
    let good = clients.leaf(&["client"], "client");
    let stranger = Ca::new("other CA").leaf(&["client"], "client");
    for optional in [false, true] {
        let toml = format!(
            "{DRAIN}[tls]\nlisten = \"127.0.0.1:0\"\nclient_ca = {:?}\nclient_auth_optional = {optional}\n{}",
            ca_file.display().to_string(),
            p.cert("l", &["localhost"], "L")
        );
        let s = TestServer::site(&toml);
        let status = |identity: Option<(&str, &str)>| {
            let cfg = client_config(&p.ca.pem, &[b"http/1.1"], identity);
            let addr = https(&s);
            async move {
                let c = connect(addr, "localhost", &cfg).await.ok()?;
                let mut h = H1::new(c).await;
                h.get("localhost", "/").await.ok().map(|r| r.status)
            }
        };
        assert_eq!(
            status(Some((&good.cert_pem, &good.key_pem))).await,
            Some(200)
        );
        assert_eq!(
            status(Some((&stranger.cert_pem, &stranger.key_pem))).await,
            None,
            "a certificate from another CA is refused"
        );
        let none = status(None).await;
        assert_eq!(
            none,
            optional.then_some(200),
            "no certificate, optional={optional}"
        );
    }
}

#[tokio::test]
async fn plain_listener_redirects_and_https_sends_hsts() {
    let p = Setup::new();
    let toml = format!(
        "{DRAIN}[tls]\nlisten = \"127.0.0.1:0\"\nredirect_http = true\nhsts = \"max-age=63072000; includeSubDomains\"\n{}",
        p.cert("l", &["localhost"], "L")
    );
    let s = TestServer::site(&toml);
    let port = https(&s).port();
    let r = send(
        s.addr,
        "POST /a/b?x=1&y=%20 HTTP/1.1\r\nHost: localhost:8080\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(r.status, 308);
    assert_eq!(
        r.header("location"),
        Some(format!("https://localhost:{port}/a/b?x=1&y=%20").as_str())
    );
    assert_eq!(r.header("strict-transport-security"), None);
    let cfg = client_config(&p.ca.pem, &[b"h2"], None);
    let c = connect(https(&s), "localhost", &cfg).await.unwrap();
    let r = H2::new(c).await.get("localhost", "/").await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(
        r.headers["strict-transport-security"],
        "max-age=63072000; includeSubDomains"
    );
}

#[tokio::test]
async fn h2c_by_prior_knowledge_beside_http11() {
    let s = TestServer::site(&format!("h2c = true\n{DRAIN}"));
    let want = std::fs::read(s.root.join("index.html")).unwrap();
    let tcp = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let mut h2 = H2::new(tcp).await;
    let r = h2.get("localhost", "/index.html").await.unwrap();
    assert_eq!((r.status, &r.body[..]), (200, &want[..]));
    let r = s.get("/index.html");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, want);
}

#[test]
fn a_missing_certificate_stops_the_start_with_its_key() {
    let toml = format!("root = {:?}\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n[tls]\nlisten = \"127.0.0.1:0\"\n[[tls.certs]]\ncert = \"/nonexistent/c.pem\"\nkey = \"/nonexistent/k.pem\"\n", fixtures().join("site").display().to_string());
    let config = load_config(toml).unwrap();
    let router = gatehouse::router::build(&config).unwrap_or_else(|_| {
        gatehouse::router::build(&gatehouse_config::Config::default()).unwrap()
    });
    let e = gatehouse::start(&config, router).err().expect("must fail");
    let text = e.to_string();
    assert!(
        text.contains("tls.certs.0") && text.contains("/nonexistent/c.pem"),
        "{text}"
    );
}

#[tokio::test]
async fn sighup_reloads_certificates_and_refuses_a_broken_one() {
    let p = Setup::new();
    let https_port = common::free_port();
    let toml = format!(
        "root = {:?}\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n{DRAIN}[tls]\nlisten = \"127.0.0.1:{https_port}\"\nwatch_interval = \"1h\"\n{}",
        fixtures().join("site").display().to_string(),
        p.cert("l", &["localhost"], "ONE")
    );
    let conf = p.dir.path().join("g.toml");
    std::fs::write(&conf, toml).unwrap();
    let log = p.dir.path().join("g.log");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .arg("--config")
        .arg(&conf)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], https_port));
    let cfg = client_config(&p.ca.pem, &[b"http/1.1"], None);
    let mut first = None;
    for _ in 0..100 {
        if let Ok(c) = connect(addr, "localhost", &cfg).await {
            first = Some(peer_cn(&c));
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(first.as_deref(), Some("ONE"));

    write_leaf(p.dir.path(), "l", &p.ca.leaf(&["localhost"], "TWO"));
    unsafe { libc::kill(child.id() as i32, libc::SIGHUP) };
    let mut cn = String::new();
    for _ in 0..50 {
        cn = cn_now(addr, &p.ca.pem).await;
        if cn == "TWO" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(cn, "TWO");

    std::fs::write(p.dir.path().join("l.key"), "garbage").unwrap();
    unsafe { libc::kill(child.id() as i32, libc::SIGHUP) };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(cn_now(addr, &p.ca.pem).await, "TWO");
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{text}");
    assert!(
        text.contains("reload refused") && text.contains("tls.certs.0") && text.contains("l.key"),
        "{text}"
    );
}
