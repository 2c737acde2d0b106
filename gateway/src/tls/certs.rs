//! Certificates chosen by SNI: exact names, then wildcards, then the default; and the
//! TLS-ALPN-01 challenge certificates (RFC 8737 §3) while an ACME order is pending.
//!
//! The table is an `ArcSwap`: a handshake reads it without a lock, and a reload or a new
//! ACME certificate swaps a whole new table in. Open connections keep the keys they were
//! made with.

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

pub(crate) const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// One loaded certificate: the key rustls signs with, the names it is chosen for, and
/// its validity.
#[derive(Clone)]
pub struct Loaded {
    pub key: Arc<CertifiedKey>,
    pub names: Vec<String>,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    pub serial: String,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("names", &self.names)
            .field("serial", &self.serial)
            .finish()
    }
}

/// Parses a PEM chain and key. `names` overrides the certificate's own DNS names.
pub fn load_pem(
    provider: &CryptoProvider,
    cert_pem: &[u8],
    key_pem: &[u8],
    names: &[String],
) -> Result<Loaded, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("certificate: {e}"))?;
    let Some(leaf) = chain.first() else {
        return Err("no certificate in the PEM file".into());
    };
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| format!("private key: {e}"))?;
    let ck = CertifiedKey::from_der(chain.clone(), key, provider)
        .map_err(|e| format!("certificate and key: {e}"))?;
    let (_, x509) =
        x509_parser::parse_x509_certificate(leaf).map_err(|e| format!("certificate: {e}"))?;
    let validity = x509.validity();
    let to_time = |t: x509_parser::time::ASN1Time| {
        let secs = t.timestamp();
        if secs >= 0 {
            SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs as u64)
        } else {
            SystemTime::UNIX_EPOCH
        }
    };
    let mut own = Vec::new();
    if let Ok(Some(san)) = x509.subject_alternative_name() {
        for n in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(d) = n {
                own.push(d.to_ascii_lowercase());
            }
        }
    }
    let names = if names.is_empty() {
        own
    } else {
        names.to_vec()
    };
    Ok(Loaded {
        key: Arc::new(ck),
        names,
        not_before: to_time(validity.not_before),
        not_after: to_time(validity.not_after),
        serial: x509.raw_serial_as_string(),
    })
}

/// Reads and parses a certificate and key from files.
pub fn load_files(
    provider: &CryptoProvider,
    cert: &Path,
    key: &Path,
    names: &[String],
) -> Result<Loaded, String> {
    let c = std::fs::read(cert).map_err(|e| format!("{}: {e}", cert.display()))?;
    let k = std::fs::read(key).map_err(|e| format!("{}: {e}", key.display()))?;
    load_pem(provider, &c, &k, names)
        .map_err(|e| format!("{} with {}: {e}", cert.display(), key.display()))
}

#[derive(Default)]
struct Table {
    exact: HashMap<String, Arc<CertifiedKey>>,
    /// `example.com` for `*.example.com`.
    wildcard: HashMap<String, Arc<CertifiedKey>>,
    default: Option<Arc<CertifiedKey>>,
}

/// What the table is made from: the configured files (in order, the first the default)
/// and the ACME certificates (by their first domain).
#[derive(Default)]
struct Sources {
    files: Vec<Loaded>,
    acme: Vec<(String, Loaded)>,
}

/// The certificate resolver of every HTTPS listener.
pub struct CertStore {
    table: ArcSwap<Table>,
    sources: Mutex<Sources>,
    challenges: ArcSwap<HashMap<String, Arc<CertifiedKey>>>,
}

impl std::fmt::Debug for CertStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CertStore")
    }
}

impl Default for CertStore {
    fn default() -> Self {
        CertStore {
            table: ArcSwap::from_pointee(Table::default()),
            sources: Mutex::new(Sources::default()),
            challenges: ArcSwap::from_pointee(HashMap::new()),
        }
    }
}

impl CertStore {
    /// Replaces the certificates loaded from files.
    pub fn set_files(&self, files: Vec<Loaded>) {
        if let Ok(mut s) = self.sources.lock() {
            s.files = files;
            self.publish(&s);
        }
    }

    /// The certificates loaded from files, in configuration order.
    pub fn files(&self) -> Vec<Loaded> {
        self.sources
            .lock()
            .map(|s| s.files.clone())
            .unwrap_or_default()
    }

    /// Adds or replaces the ACME certificate named by `id` (its first domain).
    pub fn set_acme(&self, id: &str, cert: Loaded) {
        if let Ok(mut s) = self.sources.lock() {
            match s.acme.iter_mut().find(|(i, _)| i == id) {
                Some(slot) => slot.1 = cert,
                None => s.acme.push((id.to_string(), cert)),
            }
            self.publish(&s);
        }
    }

    /// Every certificate held, from files and from ACME (tagged `true`).
    pub fn all(&self) -> Vec<(Loaded, bool)> {
        self.sources
            .lock()
            .map(|s| {
                s.files
                    .iter()
                    .map(|l| (l.clone(), false))
                    .chain(s.acme.iter().map(|(_, l)| (l.clone(), true)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The ACME certificate named by `id`, if one is installed.
    pub fn acme(&self, id: &str) -> Option<Loaded> {
        let s = self.sources.lock().ok()?;
        s.acme.iter().find(|(i, _)| i == id).map(|(_, l)| l.clone())
    }

    fn publish(&self, s: &Sources) {
        let mut t = Table::default();
        // Files first: a configured file wins over an ACME certificate for the same name.
        for l in s.files.iter().chain(s.acme.iter().map(|(_, l)| l)) {
            for n in &l.names {
                let slot = match n.strip_prefix("*.") {
                    Some(base) => t.wildcard.entry(base.to_string()),
                    None => t.exact.entry(n.clone()),
                };
                slot.or_insert_with(|| l.key.clone());
            }
            if t.default.is_none() {
                t.default = Some(l.key.clone());
            }
        }
        self.table.store(Arc::new(t));
    }

    /// Answers `acme-tls/1` handshakes for `domain` with `key` (or stops, with `None`).
    pub fn set_challenge(&self, domain: &str, key: Option<Arc<CertifiedKey>>) {
        let mut m = HashMap::clone(&self.challenges.load());
        match key {
            Some(k) => m.insert(domain.to_string(), k),
            None => m.remove(domain),
        };
        self.challenges.store(Arc::new(m));
    }

    fn lookup(&self, sni: Option<&str>) -> Option<Arc<CertifiedKey>> {
        let t = self.table.load();
        if let Some(name) = sni {
            // rustls hands SNI over lowercased and without a trailing dot.
            if let Some(k) = t.exact.get(name) {
                return Some(k.clone());
            }
            if let Some((_, base)) = name.split_once('.') {
                if let Some(k) = t.wildcard.get(base) {
                    return Some(k.clone());
                }
            }
        }
        t.default.clone()
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let sni = hello.server_name();
        // RFC 8737 §3: a client offering only acme-tls/1 is the CA validating a challenge.
        let acme_only = hello
            .alpn()
            .map(|mut p| p.all(|p| p == ACME_TLS_ALPN))
            .unwrap_or(false);
        if acme_only {
            return self.challenges.load().get(sni?).cloned();
        }
        self.lookup(sni)
    }
}

/// A file the watcher checks: path and what it looked like when last loaded.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct Stamp {
    path: PathBuf,
    seen: Option<(SystemTime, u64, u64)>,
}

impl Stamp {
    pub(crate) fn of(path: &Path) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        // metadata follows symlinks: a Kubernetes Secret swaps the `..data` link, not the
        // file, and the target's inode changes.
        let seen = std::fs::metadata(path).ok().map(|m| {
            (
                m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                m.len(),
                m.ino(),
            )
        });
        Stamp {
            path: path.to_path_buf(),
            seen,
        }
    }

    pub(crate) fn changed(&self) -> bool {
        Stamp::of(&self.path) != *self
    }
}
