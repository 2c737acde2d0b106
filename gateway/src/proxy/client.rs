//! The clients an upstream is reached with: hyper-util's, per worker, and its TLS setup.

use super::*;

pub(crate) type Client =
    hyper_util::client::legacy::Client<hyper_rustls::HttpsConnector<HttpConnector>, ReqBody>;

/// A pooled client for a route's upstreams; the TLS configuration is built once, shared.
pub(super) fn client(cfg: &ProxyConfig, tls: rustls::ClientConfig) -> Client {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(cfg.connect_timeout));
    // The TLS layer over it takes https:// URLs.
    connector.enforce_http(false);
    // Built once per route: roots, client certificate and ALPN; the connector sets SNI
    // to each upstream's host.
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(connector);
    hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_idle_timeout(cfg.pool_idle_timeout)
        .pool_max_idle_per_host(cfg.pool_max_idle)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .http2_only(cfg.http2)
        // A response head larger than this is a 502, as nginx's "upstream sent too
        // big header"; hyper's default would take (and pass on) some 400 KiB.
        .http1_max_buf_size(max_buf(cfg))
        .http2_max_header_list_size(cfg.max_response_header_bytes.min(u32::MAX as usize) as u32)
        .build(connector)
}

/// The most an upstream's HTTP/1 response head may take (hyper's floor is 8 KiB).
pub(super) fn max_buf(cfg: &ProxyConfig) -> usize {
    cfg.max_response_header_bytes.max(8192)
}

pub(super) fn tls_config(cfg: &ProxyConfig) -> std::io::Result<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |what: &str, e: &dyn std::fmt::Display| std::io::Error::other(format!("{what}: {e}"));
    let mut roots = rustls::RootCertStore::empty();
    match cfg.tls_roots {
        gatehouse_config::TlsRoots::Webpki => {
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        }
        gatehouse_config::TlsRoots::System => {
            let found = rustls_native_certs::load_native_certs();
            for e in &found.errors {
                tracing::warn!("system roots: {e}");
            }
            roots.add_parsable_certificates(found.certs);
        }
    }
    if let Some(ca) = &cfg.tls_ca {
        let certs =
            CertificateDer::pem_file_iter(ca).map_err(|e| bad(&ca.display().to_string(), &e))?;
        for c in certs {
            let c = c.map_err(|e| bad(&ca.display().to_string(), &e))?;
            roots
                .add(c)
                .map_err(|e| bad(&ca.display().to_string(), &e))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("tls", &e))?
        .with_root_certificates(roots);
    Ok(match (&cfg.tls_client_cert, &cfg.tls_client_key) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .and_then(|i| i.collect::<Result<Vec<_>, _>>())
                .map_err(|e| bad(&cert.display().to_string(), &e))?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| bad(&key.display().to_string(), &e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| bad("client certificate", &e))?
        }
        _ => builder.with_no_client_auth(),
    })
}
