//! https upstreams: a test CA made here, trusted through `tls_ca`; SNI; HTTP/2 by ALPN;
//! and HTTP/2 by prior knowledge to a plain-text upstream.
use crate::common;
use common::*;
use std::net::SocketAddr;
use std::sync::Arc;

struct Pki {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
    /// A client certificate signed by the same CA.
    client_pem: String,
    client_key_pem: String,
}

fn pki() -> Pki {
    let ca = pki::Ca::new("gatehouse test CA");
    let leaf = ca.leaf(&["localhost"], "localhost");
    let client = ca.leaf(&["gatehouse-client"], "gatehouse-client");
    Pki {
        ca_pem: ca.pem.clone(),
        cert_pem: leaf.cert_pem,
        key_pem: leaf.key_pem,
        client_pem: client.cert_pem,
        client_key_pem: client.key_pem,
    }
}

/// An upstream answering "<version> <sni>" over TLS (h2 and http/1.1 offered by ALPN), or
/// over plain text with HTTP/2 only when `tls` is None.
fn upstream(tls: Option<&Pki>) -> SocketAddr {
    upstream_with(tls, false)
}

/// As [`upstream`]; with `require_client_cert`, only clients with a certificate from the
/// test CA get through the handshake.
fn upstream_with(tls: Option<&Pki>, require_client_cert: bool) -> SocketAddr {
    use rustls::pki_types::pem::PemObject;
    let acceptor = tls.map(|p| {
        let certs: Vec<_> =
            rustls::pki_types::CertificateDer::pem_slice_iter(p.cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .unwrap();
        let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(p.key_pem.as_bytes()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = if require_client_cert {
            let mut roots = rustls::RootCertStore::empty();
            for c in rustls::pki_types::CertificateDer::pem_slice_iter(p.ca_pem.as_bytes()) {
                roots.add(c.unwrap()).unwrap();
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let mut cfg = builder.with_single_cert(certs, key).unwrap();
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        tokio_rustls::TlsAcceptor::from(Arc::new(cfg))
    });
    serve_each(loopback(), move |stream| {
        let acceptor = acceptor.clone();
        async move {
            let builder =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            match acceptor {
                Some(a) => {
                    let Ok(tls) = a.accept(stream).await else {
                        return;
                    };
                    let sni = tls.get_ref().1.server_name().unwrap_or("-").to_string();
                    let svc = hyper::service::service_fn(
                        move |req: http::Request<hyper::body::Incoming>| {
                            let body = format!("{:?} {sni}", req.version());
                            async move { Ok::<_, std::convert::Infallible>(text(body)) }
                        },
                    );
                    let _ = builder
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                        .await;
                }
                None => {
                    let svc =
                        hyper::service::service_fn(|req: http::Request<hyper::body::Incoming>| {
                            let body = format!("{:?} plain", req.version());
                            async move { Ok::<_, std::convert::Infallible>(text(body)) }
                        });
                    let _ = builder
                        .http2_only()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                }
            }
        }
    })
}

fn text(body: String) -> http::Response<http_body_util::Full<bytes::Bytes>> {
    http::Response::new(http_body_util::Full::new(bytes::Bytes::from(body)))
}

#[test]
fn https_upstreams_with_a_private_ca_sni_and_http2_by_alpn() {
    let pki = pki();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let up = upstream(Some(&pki));
    let target = format!("https://localhost:{}", up.port());
    let s = TestServer::start(
        dir.path(),
        &format!(
            "[[routes]]\n[routes.proxy]\nupstreams = [{target:?}]\ntls_ca = {:?}\n",
            ca.display().to_string()
        ),
    );
    for _ in 0..3 {
        let r = s.get("/");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.text(), "HTTP/2.0 localhost");
    }
    // Without the private CA the upstream is not trusted: 502, never a panic or a hang.
    let s = TestServer::start(
        dir.path(),
        &format!("[[routes]]\n[routes.proxy]\nupstreams = [{target:?}]\nretries = 0\n"),
    );
    assert_eq!(s.get("/").status, 502);
}

#[test]
fn http2_by_prior_knowledge_to_a_plain_upstream() {
    let up = upstream(None);
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(
        dir.path(),
        &format!("[[routes]]\n[routes.proxy]\nupstreams = [\"http://{up}\"]\nhttp2 = true\n"),
    );
    for _ in 0..3 {
        let r = s.get("/");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.text(), "HTTP/2.0 plain");
    }
}

/// The attempts over hyper's client (here HTTP/2 to the upstreams) fail over as those over
/// the own HTTP/1.1 client do: round robin starts at the dead upstream, and every GET is
/// answered by the live one.
#[test]
fn a_dead_upstream_fails_over_on_hypers_client_too() {
    let up = upstream(None);
    let (dead, _held) = dead_addr();
    let dir = tempfile::tempdir().unwrap();
    let config = |extra: &str| {
        format!(
            "[[routes]]\n[routes.proxy]\nupstreams = [\"http://{dead}\", \"http://{up}\"]\nhttp2 = true\nmax_fails = 0\n{extra}"
        )
    };
    let s = TestServer::start(dir.path(), &config(""));
    for _ in 0..4 {
        let r = s.get("/");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.text(), "HTTP/2.0 plain");
    }
    // With no retry, half the GETs meet the dead one: a 502, as on the own client.
    let none = TestServer::start(dir.path(), &config("retries = 0\n"));
    let statuses: Vec<u16> = (0..4).map(|_| none.get("/").status).collect();
    assert_eq!(
        statuses.iter().filter(|&&c| c == 502).count(),
        2,
        "{statuses:?}"
    );
}

#[test]
fn a_client_certificate_is_shown_to_upstreams_that_ask() {
    let pki = pki();
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = (
        dir.path().join("ca.pem"),
        dir.path().join("client.pem"),
        dir.path().join("client.key"),
    );
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    std::fs::write(&cert, &pki.client_pem).unwrap();
    std::fs::write(&key, &pki.client_key_pem).unwrap();
    let up = upstream_with(Some(&pki), true);
    let target = format!("https://localhost:{}", up.port());
    let with = TestServer::start(
        dir.path(),
        &format!(
            "[[routes]]\n[routes.proxy]\nupstreams = [{target:?}]\ntls_ca = {:?}\ntls_client_cert = {:?}\ntls_client_key = {:?}\n",
            ca.display().to_string(),
            cert.display().to_string(),
            key.display().to_string()
        ),
    );
    assert_eq!(with.get("/").text(), "HTTP/2.0 localhost");
    let without = TestServer::start(
        dir.path(),
        &format!(
            "[[routes]]\n[routes.proxy]\nupstreams = [{target:?}]\ntls_ca = {:?}\nretries = 0\n",
            ca.display().to_string()
        ),
    );
    assert_eq!(without.get("/").status, 502);
}
