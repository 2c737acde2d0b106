//! The libraries' floor under TLS: hyper over rustls (HTTP/2 and HTTP/1.1 by ALPN) on TCP,
//! and h3 over quinn on UDP, on one address, answering every request with the same `Bytes`
//! (a file read once at start), with nothing else: no routing, no layers, no logs.
//! `cargo run --release --example bare_tls -- 127.0.0.1:18443 CERT KEY [FILE]` (without a
//! file, 1 KiB of `x`). `FLOOR=1 bench/run.sh` benches it as `hyper-floor` in https-1k,
//! h2-1k, h3-1k and h3-1m: what these libraries cost per request on this machine, the floor
//! under gatehouse's h3-1k ÷ h2-1k.
//!
//! TCP is served as gatehouse's per-core mode does, one current-thread runtime per core on
//! a `SO_REUSEPORT` group. QUIC has one endpoint, on its own current-thread runtime:
//! without steering (gatehouse's, crate-private) a group would split a connection's
//! packets, and one endpoint pays no cross-core cost, so this floor is if anything low.

use bytes::Bytes;
use http::{header, Request, Response};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

fn main() {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:18443".into())
        .parse()
        .expect("an address such as 127.0.0.1:18443");
    let cert = args.next().expect("a certificate file (PEM)");
    let key = args.next().expect("a key file (PEM)");
    let body = match args.next() {
        Some(path) => Bytes::from(std::fs::read(&path).expect("a readable file")),
        None => Bytes::from(vec![b'x'; 1024]),
    };

    use rustls::pki_types::pem::PemObject;
    let chain: Vec<_> = rustls::pki_types::CertificateDer::pem_file_iter(&cert)
        .expect("the certificate file")
        .collect::<Result<_, _>>()
        .expect("certificates");
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&key).expect("the key file");
    // aws-lc-rs with AES-128-GCM first, as gatehouse's own TLS is set up.
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider
        .cipher_suites
        .sort_by_key(|s| !matches!(s.suite(), rustls::CipherSuite::TLS13_AES_128_GCM_SHA256));
    let provider = Arc::new(provider);
    let tls = |alpn: &[&[u8]]| {
        let mut c = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("TLS 1.3")
            .with_no_client_auth()
            .with_single_cert(chain.clone(), key.clone_key())
            .expect("the certificate and key");
        c.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
        c.ignore_client_order = true;
        c
    };
    let tcp_tls = Arc::new(tls(&[b"h2", b"http/1.1"]));
    let quic = quinn::crypto::rustls::QuicServerConfig::try_from(tls(&[b"h3"])).expect("QUIC");

    let udp = std::net::UdpSocket::bind(addr).expect("bind udp");
    let h3_body = body.clone();
    let quic_thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(serve_h3(udp, quic, h3_body));
    });

    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let listeners = gatehouse::server::listener::bind_group(addr, cores, false)
        .expect("bind")
        .0;
    let mut threads: Vec<_> = listeners
        .into_iter()
        .map(|l| {
            let (body, tcp_tls) = (body.clone(), tcp_tls.clone());
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(serve_tcp(l, tcp_tls, body));
            })
        })
        .collect();
    threads.push(quic_thread);
    for t in threads {
        let _ = t.join();
    }
}

async fn serve_tcp(l: std::net::TcpListener, tls: Arc<rustls::ServerConfig>, body: Bytes) {
    let l = tokio::net::TcpListener::from_std(l).expect("listener");
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    loop {
        let Ok((s, _)) = l.accept().await else {
            continue;
        };
        let _ = s.set_nodelay(true);
        let (acceptor, body) = (acceptor.clone(), body.clone());
        tokio::spawn(async move {
            let Ok(s) = acceptor.accept(s).await else {
                return;
            };
            let svc = service_fn(move |_req: Request<hyper::body::Incoming>| {
                let res = Response::new(Full::new(body.clone()));
                async move { Ok::<_, Infallible>(res) }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(s), svc)
                .await;
        });
    }
}

async fn serve_h3(
    udp: std::net::UdpSocket,
    quic: quinn::crypto::rustls::QuicServerConfig,
    body: Bytes,
) {
    let server = quinn::ServerConfig::with_crypto(Arc::new(quic));
    let endpoint = quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        Some(server),
        udp,
        Arc::new(quinn::TokioRuntime),
    )
    .expect("endpoint");
    while let Some(incoming) = endpoint.accept().await {
        let body = body.clone();
        tokio::spawn(async move {
            let Ok(conn) = incoming.await else {
                return;
            };
            let Ok(mut h3) = h3::server::builder()
                .build::<_, Bytes>(h3_quinn::Connection::new(conn))
                .await
            else {
                return;
            };
            while let Ok(Some(resolver)) = h3.accept().await {
                let body = body.clone();
                tokio::spawn(async move {
                    let Ok((_req, mut stream)) = resolver.resolve_request().await else {
                        return;
                    };
                    let res = Response::builder()
                        .header(header::CONTENT_LENGTH, body.len())
                        .body(())
                        .expect("a response");
                    if stream.send_response(res).await.is_ok()
                        && stream.send_data(body).await.is_ok()
                    {
                        let _ = stream.finish().await;
                    }
                });
            }
        });
    }
}
