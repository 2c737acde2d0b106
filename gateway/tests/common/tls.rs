//! A TLS client for the tests: rustls over tokio, with hyper's client connections.
#![allow(dead_code)]

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

pub fn client_config(
    ca_pem: &str,
    alpn: &[&[u8]],
    identity: Option<(&str, &str)>,
) -> Arc<rustls::ClientConfig> {
    client_config_versions(ca_pem, alpn, identity, rustls::DEFAULT_VERSIONS)
}

pub fn client_config_versions(
    ca_pem: &str,
    alpn: &[&[u8]],
    identity: Option<(&str, &str)>,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let b = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots);
    let mut cfg = match identity {
        Some((cert, key)) => {
            let chain: Vec<_> = CertificateDer::pem_slice_iter(cert.as_bytes())
                .collect::<Result<_, _>>()
                .unwrap();
            let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
            b.with_client_auth_cert(chain, key).unwrap()
        }
        None => b.with_no_client_auth(),
    };
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(cfg)
}

pub async fn connect(
    addr: SocketAddr,
    sni: &str,
    cfg: &Arc<rustls::ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(sni.to_string()).map_err(std::io::Error::other)?;
    tokio_rustls::TlsConnector::from(cfg.clone())
        .connect(name, tcp)
        .await
}

/// The common name of the certificate the server showed.
pub fn peer_cn(s: &TlsStream<TcpStream>) -> String {
    let certs = s.get_ref().1.peer_certificates().expect("a certificate");
    cn_of(&certs[0])
}

pub fn cn_of(der: &[u8]) -> String {
    let (_, c) = x509_parser::parse_x509_certificate(der).unwrap();
    let cn = c
        .subject()
        .iter_common_name()
        .next()
        .and_then(|a| a.as_str().ok())
        .unwrap_or("")
        .to_string();
    cn
}

pub fn serial_of(der: &[u8]) -> String {
    let (_, c) = x509_parser::parse_x509_certificate(der).unwrap();
    c.raw_serial_as_string()
}

pub struct Got {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

/// HTTP/1.1 requests on one connection.
pub struct H1 {
    send: hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
}

impl H1 {
    pub async fn new(s: TlsStream<TcpStream>) -> H1 {
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s))
            .await
            .unwrap();
        tokio::spawn(conn);
        H1 { send }
    }

    pub async fn get(&mut self, host: &str, path: &str) -> Result<Got, hyper::Error> {
        let req = http::Request::get(path)
            .header("host", host)
            .body(Empty::new())
            .unwrap();
        self.send.ready().await?;
        let res = self.send.send_request(req).await?;
        collect(res).await
    }
}

/// HTTP/2 requests, any number at once.
#[derive(Clone)]
pub struct H2 {
    send: hyper::client::conn::http2::SendRequest<Empty<Bytes>>,
}

impl H2 {
    pub async fn new<S>(s: S) -> H2
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(s))
                .await
                .unwrap();
        tokio::spawn(conn);
        H2 { send }
    }

    pub async fn get(&mut self, authority: &str, path: &str) -> Result<Got, hyper::Error> {
        let req = http::Request::get(format!("https://{authority}{path}"))
            .body(Empty::new())
            .unwrap();
        self.send.ready().await?;
        let res = self.send.send_request(req).await?;
        collect(res).await
    }
}

async fn collect(res: http::Response<hyper::body::Incoming>) -> Result<Got, hyper::Error> {
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let body = res.into_body().collect().await?.to_bytes();
    Ok(Got {
        status,
        headers,
        body,
    })
}
