//! HTTPS: the rustls server configuration of every TLS listener, certificates by SNI,
//! reloaded when their files change, and certificates from ACME ([`acme`]).
//!
//! The crypto provider is *ring*: it is already what the proxy's client uses, it builds
//! with a C compiler alone (aws-lc-rs wants cmake and takes minutes on two cores), and its
//! AES-GCM and ChaCha20 come from BoringSSL's assembly, the same lineage as aws-lc's.

pub mod acme;
pub mod certs;

use certs::{CertStore, Loaded, Stamp};
use gatehouse_config::{CertConfig, Challenge, Config, TlsConfig};
use http::HeaderValue;
use rustls::crypto::CryptoProvider;
use rustls::server::{ServerSessionMemoryCache, WebPkiClientVerifier};
use rustls::ServerConfig;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The TLS side of the server, shared by every HTTPS listener.
pub struct Tls {
    pub(crate) config: Arc<ServerConfig>,
    /// The QUIC side's configuration, when `tls.http3` is on.
    pub(crate) quic: Option<Arc<quinn::crypto::rustls::QuicServerConfig>>,
    pub store: Arc<CertStore>,
    provider: Arc<CryptoProvider>,
    watched: Mutex<Vec<Watched>>,
    pub(crate) hsts: Option<HeaderValue>,
    pub(crate) handshake_timeout: Duration,
    watch_interval: Duration,
}

struct Watched {
    config: CertConfig,
    stamps: [Stamp; 2],
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls")
    }
}

/// aws-lc-rs's suites, with AES-128-GCM put first. aws-lc's AES-GCM uses 512-bit vector
/// instructions where the CPU has them: 24.5 GB/s against ring's 12.2 on this machine's
/// cores (16 KiB records), and AES-GCM was a quarter of a 1 MiB HTTPS response's CPU.
/// The server chooses (`ignore_client_order`), and rustls clients (oha among them) list
/// AES-256-GCM first: AES-128 has 10 rounds to AES-256's 14 and is what Go's (so Caddy's)
/// servers prefer. For a 1 MiB response over TLS it saved 6–12% of the user CPU. Every
/// suite stays offered.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    let mut p = rustls::crypto::aws_lc_rs::default_provider();
    p.cipher_suites.sort_by_key(|s| {
        use rustls::CipherSuite::*;
        match s.suite() {
            TLS13_AES_128_GCM_SHA256
            | TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
            | TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => 0,
            _ => 1,
        }
    });
    Arc::new(p)
}

impl Tls {
    /// Builds the server configuration and loads every certificate file. Fails, naming the
    /// file and why, if any of them can't be used.
    pub fn new(config: &Config) -> Result<Arc<Tls>, String> {
        let Some(tls) = &config.tls else {
            return Err("no [tls] table".into());
        };
        let provider = provider();
        let store = Arc::new(CertStore::default());
        let (files, watched) = load_all(&provider, &tls.certs)?;
        store.set_files(files);

        let verifier = match &tls.client_ca {
            Some(path) => Some(client_verifier(&provider, path, tls.client_auth_optional)?),
            None => None,
        };
        let base = |versions: &[&'static rustls::SupportedProtocolVersion]| {
            let builder = ServerConfig::builder_with_provider(provider.clone())
                .with_protocol_versions(versions)
                .map_err(|e| format!("tls: {e}"))?;
            let builder = match &verifier {
                Some(v) => builder.with_client_cert_verifier(v.clone()),
                None => builder.with_no_client_auth(),
            };
            Ok::<_, String>(builder.with_cert_resolver(store.clone()))
        };
        let mut sc = base(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
        if tls.http2 {
            sc.alpn_protocols.push(b"h2".to_vec());
        }
        sc.alpn_protocols.push(b"http/1.1".to_vec());
        // A client offering only http/1.0 would otherwise get a fatal alert (RFC 7301 §3.2:
        // no protocol in common); nginx serves it, and so does the HTTP/1 side here. Listed
        // last: the server's order decides, so a client offering both gets http/1.1.
        sc.alpn_protocols.push(b"http/1.0".to_vec());
        if config
            .acme
            .as_ref()
            .is_some_and(|a| a.challenge == Challenge::TlsAlpn01)
        {
            sc.alpn_protocols.push(certs::ACME_TLS_ALPN.to_vec());
        }
        // Resumption: stateless tickets (TLS 1.2 and 1.3), keys rotated by rustls every
        // six hours; and a session-ID cache for TLS 1.2 clients without ticket support.
        sc.ticketer =
            rustls::crypto::aws_lc_rs::Ticketer::new().map_err(|e| format!("tls: {e}"))?;
        sc.session_storage = ServerSessionMemoryCache::new(16 * 1024);
        sc.ignore_client_order = true;

        // QUIC carries TLS 1.3 only (RFC 9001 §4.2), with the same certificates (SNI,
        // reloads, ACME) and the same client verifier.
        let quic = if tls.http3_on(config.proxy_protocol) {
            let mut qc = base(&[&rustls::version::TLS13])?;
            qc.alpn_protocols = vec![b"h3".to_vec()];
            qc.ignore_client_order = true;
            // Stateful resumption only (no ticketer): rustls then takes a session out of
            // the cache when it is resumed with early data, so each ticket's 0-RTT is
            // accepted once and a replayed ClientHello gets a full handshake (RFC 8446
            // §8.1). QUIC allows no early-data limit but none or all (RFC 9001 §4.6.1).
            qc.session_storage = ServerSessionMemoryCache::new(16 * 1024);
            if tls.http3_early_data {
                qc.max_early_data_size = u32::MAX;
            }
            let qc = quinn::crypto::rustls::QuicServerConfig::try_from(qc)
                .map_err(|e| format!("tls.http3: {e}"))?;
            Some(Arc::new(qc))
        } else {
            None
        };

        let hsts = match &tls.hsts {
            Some(h) => Some(HeaderValue::from_str(h).map_err(|e| format!("tls.hsts: {e}"))?),
            None => None,
        };
        Ok(Arc::new(Tls {
            config: Arc::new(sc),
            quic,
            store,
            provider,
            watched: Mutex::new(watched),
            hsts,
            handshake_timeout: tls.handshake_timeout,
            watch_interval: tls.watch_interval,
        }))
    }

    /// Loads the certificate files of `tls` again (SIGHUP, `POST /reload`). All or
    /// nothing: if one of them is broken the old set stays and the error names it. Other
    /// TLS settings are read at start only.
    pub fn reload(&self, tls: &TlsConfig) -> Result<(), String> {
        let (files, watched) = load_all(&self.provider, &tls.certs)?;
        self.store.set_files(files);
        if let Ok(mut w) = self.watched.lock() {
            *w = watched;
        }
        Ok(())
    }

    /// Reloads each certificate whose cert or key file changed since it was loaded. A
    /// broken new file is refused (logged once per change) and the old certificate stays.
    pub fn check_files(&self) {
        let Ok(mut watched) = self.watched.lock() else {
            return;
        };
        // Parallel to `watched`: both are built by load_all.
        let mut files = self.store.files();
        let mut changed = false;
        for (i, w) in watched.iter_mut().enumerate() {
            if !w.stamps.iter().any(|s| s.changed()) {
                continue;
            }
            w.stamps = [Stamp::of(&w.config.cert), Stamp::of(&w.config.key)];
            match load_one(&self.provider, &w.config) {
                Ok(l) => {
                    if let Some(slot) = files.get_mut(i) {
                        tracing::info!("tls: {} changed: reloaded", w.config.cert.display());
                        *slot = l;
                        changed = true;
                    }
                }
                Err(e) => tracing::error!("tls: new certificate refused, the old one stays: {e}"),
            }
        }
        if changed {
            self.store.set_files(files);
        }
    }

    /// Checks the certificate files every `watch_interval`, on the current runtime.
    pub fn spawn_watch(self: &Arc<Self>) {
        let this = Arc::downgrade(self);
        let every = self.watch_interval;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(tls) = this.upgrade() else { return };
                // Reading a few small files: quick, but off the event loop all the same.
                let _ = tokio::task::spawn_blocking(move || tls.check_files()).await;
            }
        });
    }
}

/// The mTLS verifier of `tls.client_ca`.
fn client_verifier(
    provider: &Arc<CryptoProvider>,
    path: &std::path::Path,
    optional: bool,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, String> {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(path).map_err(|e| format!("tls.client_ca: {}: {e}", path.display()))?;
    use rustls::pki_types::pem::PemObject;
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
        let c = c.map_err(|e| format!("tls.client_ca: {}: {e}", path.display()))?;
        roots
            .add(c)
            .map_err(|e| format!("tls.client_ca: {}: {e}", path.display()))?;
    }
    if roots.is_empty() {
        return Err(format!(
            "tls.client_ca: {}: no certificate in it",
            path.display()
        ));
    }
    let mut v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
    if optional {
        v = v.allow_unauthenticated();
    }
    v.build().map_err(|e| format!("tls.client_ca: {e}"))
}

fn load_one(provider: &CryptoProvider, c: &CertConfig) -> Result<Loaded, String> {
    certs::load_files(provider, &c.cert, &c.key, &c.names)
}

fn load_all(
    provider: &CryptoProvider,
    certs: &[CertConfig],
) -> Result<(Vec<Loaded>, Vec<Watched>), String> {
    let mut files = Vec::new();
    let mut watched = Vec::new();
    for (i, c) in certs.iter().enumerate() {
        let stamps = [Stamp::of(&c.cert), Stamp::of(&c.key)];
        let l = load_one(provider, c).map_err(|e| format!("tls.certs.{i}: {e}"))?;
        if l.names.is_empty() && i > 0 {
            tracing::warn!(
                "tls.certs.{i}: {} names no DNS name; it is never chosen by SNI",
                c.cert.display()
            );
        }
        files.push(l);
        watched.push(Watched {
            config: c.clone(),
            stamps,
        });
    }
    Ok((files, watched))
}
