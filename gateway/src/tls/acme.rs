//! Certificates from an ACME CA (RFC 8555), with instant-acme as the protocol client.
//!
//! One background thread per process owns the account and every configured certificate.
//! At start, certificates already in the state directory are installed at once, so a
//! restart serves them and orders nothing. Each certificate is then ordered when it is
//! missing, covers other domains than configured, or is due for renewal; a failed
//! attempt is logged and retried with exponential backoff and jitter, and the certificate
//! in use keeps being served until a new one has been obtained.
//!
//! Challenges: HTTP-01 (§8.3) is answered by the plain listeners through
//! [`ChallengeTokens`]; TLS-ALPN-01 (RFC 8737) by the certificate resolver, which shows
//! the challenge certificate to handshakes that offer only `acme-tls/1`.

use super::certs::{self, CertStore, Loaded};
use gatehouse_config::{AcmeCertConfig, AcmeConfig, Challenge};
use gatehouse_layers::acme::ChallengeTokens;
use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, ExternalAccountKey,
    Identifier, NewAccount, NewOrder, OrderStatus, RetryPolicy,
};
use rustls::crypto::CryptoProvider;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

const DAY: Duration = Duration::from_secs(86_400);

/// Counts of ordering attempts, by outcome (for tests now, metrics later).
#[derive(Debug, Default)]
pub struct AcmeStatus {
    pub obtained: AtomicU64,
    pub failed: AtomicU64,
}

/// The ACME side of the server.
pub struct Acme {
    cfg: AcmeConfig,
    store: Arc<CertStore>,
    tokens: ChallengeTokens,
    provider: Arc<CryptoProvider>,
    pub status: Arc<AcmeStatus>,
}

impl Acme {
    /// Prepares the state directory and installs the certificates already in it.
    pub fn new(
        cfg: &AcmeConfig,
        store: Arc<CertStore>,
        tokens: ChallengeTokens,
    ) -> Result<Acme, String> {
        let dir = cfg.state_dir.join("certs");
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("acme.state_dir: {}: {e}", dir.display()))?;
        set_mode(&cfg.state_dir, 0o700);
        let acme = Acme {
            cfg: cfg.clone(),
            store,
            tokens,
            provider: super::provider(),
            status: Arc::default(),
        };
        for c in &cfg.certificates {
            if let Some(l) = acme.stored(c) {
                tracing::info!(
                    "acme: {}: using the stored certificate (serial {}), valid until {}",
                    c.domains.join(", "),
                    l.serial,
                    httpdate::fmt_http_date(l.not_after)
                );
                acme.store.set_acme(&c.domains[0], l);
            }
        }
        Ok(acme)
    }

    /// Runs the ordering and renewal loop on a thread of its own.
    pub fn spawn(self) -> std::io::Result<()> {
        crate::rt::spawn_on_own_runtime("gatehouse-acme", self.run()).map(|_| ())
    }

    fn cert_dir(&self, c: &AcmeCertConfig) -> PathBuf {
        self.cfg.state_dir.join("certs").join(&c.domains[0])
    }

    /// The stored certificate for `c`, if it loads and covers exactly its domains.
    fn stored(&self, c: &AcmeCertConfig) -> Option<Loaded> {
        let dir = self.cert_dir(c);
        let l = certs::load_files(
            &self.provider,
            &dir.join("cert.pem"),
            &dir.join("key.pem"),
            &[],
        )
        .ok()?;
        let mut have = l.names.clone();
        let mut want = c.domains.clone();
        have.sort();
        want.sort();
        (have == want).then_some(l)
    }

    /// When `l` should be renewed: a third of its lifetime before expiry (at least 30 days
    /// before, for a certificate of 90 days or more), or `renew_before` if configured.
    pub fn renew_at(&self, l: &Loaded) -> SystemTime {
        renew_at(l, self.cfg.renew_before)
    }

    async fn run(self) {
        let now = SystemTime::now();
        // Per certificate: when to try next, and consecutive failures.
        let mut plan: Vec<(SystemTime, u32)> = self
            .cfg
            .certificates
            .iter()
            .map(|c| {
                let due = self
                    .store
                    .acme(&c.domains[0])
                    .map_or(now, |l| self.renew_at(&l));
                (due, 0)
            })
            .collect();
        let mut account: Option<Account> = None;
        loop {
            let Some((i, due)) = plan
                .iter()
                .enumerate()
                .min_by_key(|(_, (due, _))| *due)
                .map(|(i, (due, _))| (i, *due))
            else {
                return;
            };
            if let Ok(wait) = due.duration_since(SystemTime::now()) {
                tokio::time::sleep(wait).await;
            }
            let c = &self.cfg.certificates[i];
            let names = c.domains.join(", ");
            tracing::info!("acme: {names}: ordering from {}", self.cfg.directory);
            match self.order(&mut account, c).await {
                Ok(l) => {
                    self.status.obtained.fetch_add(1, Ordering::Relaxed);
                    // Never sooner than retry_min, whatever renew_before says.
                    let next = self
                        .renew_at(&l)
                        .max(SystemTime::now() + self.cfg.retry_min);
                    tracing::info!(
                        "acme: {names}: certificate obtained (serial {}), valid until {}; renewal from {}",
                        l.serial,
                        httpdate::fmt_http_date(l.not_after),
                        httpdate::fmt_http_date(next)
                    );
                    plan[i] = (next, 0);
                }
                Err(e) => {
                    self.status.failed.fetch_add(1, Ordering::Relaxed);
                    // The account is made again next time: the CA may have been down.
                    account = None;
                    let failures = plan[i].1 + 1;
                    let wait = backoff(self.cfg.retry_min, self.cfg.retry_max, failures);
                    let current = match self.store.acme(&c.domains[0]) {
                        Some(l) => format!("serial {} stays in use", l.serial),
                        None => "no certificate yet".into(),
                    };
                    tracing::error!(
                        "acme: {names}: ordering failed: {e}; {current}; next attempt in {}s",
                        wait.as_secs_f32().round()
                    );
                    plan[i] = (SystemTime::now() + wait, failures);
                }
            }
        }
    }

    async fn account(&self) -> Result<Account, String> {
        let path = self.account_path();
        let builder = || match &self.cfg.directory_ca {
            Some(ca) => Account::builder_with_root(ca),
            None => Account::builder(),
        };
        if let Ok(text) = std::fs::read_to_string(&path) {
            match serde_json::from_str::<AccountCredentials>(&text) {
                Ok(creds) => {
                    return builder()
                        .map_err(|e| format!("acme client: {e}"))?
                        .from_credentials(creds)
                        .await
                        .map_err(|e| format!("account: {e}"));
                }
                Err(e) => tracing::warn!(
                    "acme: {}: unreadable account ({e}); creating a new one",
                    path.display()
                ),
            }
        }
        let contact: Vec<&str> = self.cfg.contact.iter().map(String::as_str).collect();
        let eab = match (&self.cfg.eab_kid, &self.cfg.eab_hmac_key) {
            (Some(kid), Some(key)) => {
                use base64::Engine;
                let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(key.trim_end_matches('='))
                    .map_err(|e| format!("acme.eab_hmac_key: not base64url: {e}"))?;
                Some(ExternalAccountKey::new(kid.clone(), &raw))
            }
            _ => None,
        };
        let (account, creds) = builder()
            .map_err(|e| format!("acme client: {e}"))?
            .create(
                &NewAccount {
                    contact: &contact,
                    terms_of_service_agreed: true,
                    only_return_existing: false,
                },
                self.cfg.directory.clone(),
                eab.as_ref(),
            )
            .await
            .map_err(|e| format!("new account: {e}"))?;
        let json = serde_json::to_vec_pretty(&creds).map_err(|e| format!("account: {e}"))?;
        write_private(&path, &json).map_err(|e| format!("{}: {e}", path.display()))?;
        tracing::info!("acme: account created at {}", self.cfg.directory);
        Ok(account)
    }

    /// One file per directory URL: an account belongs to one CA.
    fn account_path(&self) -> PathBuf {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.cfg.directory.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.cfg.state_dir.join(format!("account-{h:016x}.json"))
    }

    async fn order(
        &self,
        account: &mut Option<Account>,
        c: &AcmeCertConfig,
    ) -> Result<Loaded, String> {
        let acct = match account {
            Some(a) => a.clone(),
            None => {
                let a = self.account().await?;
                *account = Some(a.clone());
                a
            }
        };
        let ids: Vec<Identifier> = c.domains.iter().cloned().map(Identifier::Dns).collect();
        let mut order = acct
            .new_order(&NewOrder::new(&ids))
            .await
            .map_err(|e| format!("new order: {e}"))?;
        let mut pending = Pending {
            tokens: &self.tokens,
            store: &self.store,
            http: Vec::new(),
            alpn: Vec::new(),
        };
        let kind = match self.cfg.challenge {
            Challenge::Http01 => ChallengeType::Http01,
            Challenge::TlsAlpn01 => ChallengeType::TlsAlpn01,
        };
        let mut authzs = order.authorizations();
        while let Some(a) = authzs.next().await {
            let mut a = a.map_err(|e| format!("authorization: {e}"))?;
            let domain = a.identifier().to_string();
            match a.status {
                AuthorizationStatus::Pending => {}
                AuthorizationStatus::Valid => continue,
                s => return Err(format!("authorization for {domain} is {s:?}")),
            }
            let mut ch = a
                .challenge(kind.clone())
                .ok_or_else(|| format!("the CA offers no {kind:?} challenge for {domain}"))?;
            let ka = ch.key_authorization();
            match self.cfg.challenge {
                Challenge::Http01 => {
                    self.tokens.insert(ch.token.clone(), ka.as_str());
                    pending.http.push(ch.token.clone());
                }
                Challenge::TlsAlpn01 => {
                    let key = self.alpn_cert(&domain, ka.digest().as_ref())?;
                    self.store.set_challenge(&domain, Some(key));
                    pending.alpn.push(domain.clone());
                }
            }
            ch.set_ready()
                .await
                .map_err(|e| format!("challenge for {domain}: {e}"))?;
        }
        let patience = RetryPolicy::new().timeout(Duration::from_secs(120));
        let status = order
            .poll_ready(&patience)
            .await
            .map_err(|e| format!("waiting for validation: {e}"))?;
        if status != OrderStatus::Ready {
            let why = order
                .state()
                .error
                .as_ref()
                .map(|p| p.to_string())
                .unwrap_or_else(|| "an authorization failed".into());
            return Err(format!("order is {status:?}: {why}"));
        }
        drop(pending);
        let key_pem = order
            .finalize()
            .await
            .map_err(|e| format!("finalize: {e}"))?;
        let chain = order
            .poll_certificate(&patience)
            .await
            .map_err(|e| format!("certificate: {e}"))?;
        let loaded = certs::load_pem(&self.provider, chain.as_bytes(), key_pem.as_bytes(), &[])
            .map_err(|e| format!("issued certificate: {e}"))?;
        let dir = self.cert_dir(c);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        // Key first: a cert.pem never stands beside a key it doesn't match for long.
        write_private(&dir.join("key.pem"), key_pem.as_bytes())
            .and_then(|_| write_private(&dir.join("cert.pem"), chain.as_bytes()))
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        self.store.set_acme(&c.domains[0], loaded.clone());
        Ok(loaded)
    }

    /// RFC 8737 §3: a self-signed certificate for `domain` carrying the SHA-256 of the
    /// key authorization in a critical acmeIdentifier extension.
    fn alpn_cert(
        &self,
        domain: &str,
        digest: &[u8],
    ) -> Result<Arc<rustls::sign::CertifiedKey>, String> {
        let key = rcgen::KeyPair::generate().map_err(|e| format!("tls-alpn-01 key: {e}"))?;
        let mut params = rcgen::CertificateParams::new(vec![domain.to_string()])
            .map_err(|e| format!("tls-alpn-01 certificate: {e}"))?;
        params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
        let cert = params
            .self_signed(&key)
            .map_err(|e| format!("tls-alpn-01 certificate: {e}"))?;
        // Not CertifiedKey::from_der: its key check parses the certificate with webpki,
        // which refuses the critical extension this certificate exists to carry.
        let der = rustls::pki_types::PrivatePkcs8KeyDer::from(key.serialize_der());
        let signer = self
            .provider
            .key_provider
            .load_private_key(der.into())
            .map_err(|e| format!("tls-alpn-01 key: {e}"))?;
        Ok(Arc::new(rustls::sign::CertifiedKey::new(
            vec![cert.der().clone()],
            signer,
        )))
    }
}

/// Challenges being answered for an order; withdrawn when it is done, however it ends.
struct Pending<'a> {
    tokens: &'a ChallengeTokens,
    store: &'a CertStore,
    http: Vec<String>,
    alpn: Vec<String>,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        for t in &self.http {
            self.tokens.remove(t);
        }
        for d in &self.alpn {
            self.store.set_challenge(d, None);
        }
    }
}

pub(crate) fn renew_at(l: &Loaded, renew_before: Option<Duration>) -> SystemTime {
    let lifetime = l.not_after.duration_since(l.not_before).unwrap_or_default();
    let before = renew_before.unwrap_or_else(|| {
        let third = lifetime / 3;
        if lifetime >= 90 * DAY {
            third.max(30 * DAY)
        } else {
            third
        }
    });
    l.not_after
        .checked_sub(before)
        .map_or(l.not_before, |t| t.max(l.not_before))
}

/// `min · 2^(failures-1)`, capped at `max`, then scaled by a random 50–100% so that many
/// servers failing together don't retry together.
pub(crate) fn backoff(min: Duration, max: Duration, failures: u32) -> Duration {
    let exp = min.saturating_mul(1u32 << failures.saturating_sub(1).min(20));
    let capped = exp.min(max);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    // xorshift of the clock's nanoseconds: jitter needs no better randomness.
    let mut x = u64::from(nanos) | 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    let frac = 0.5 + (x % 1000) as f64 / 2000.0;
    capped.mul_f64(frac).max(min.min(capped))
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
}

/// Writes `bytes` to `path` through a temporary file (mode 0600) and a rename, so a
/// reader never sees half a file.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    set_mode(&tmp, 0o600);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loaded(days: u32) -> Loaded {
        let before = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        let provider = rustls::crypto::ring::default_provider();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["a.test".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let mut l = certs::load_pem(
            &provider,
            cert.pem().as_bytes(),
            key.serialize_pem().as_bytes(),
            &[],
        )
        .unwrap();
        l.not_before = before;
        l.not_after = before + days * DAY;
        l
    }

    #[test]
    fn renewal_at_a_third_of_the_lifetime_and_30_days_for_long_certificates() {
        let l = loaded(90);
        assert_eq!(renew_at(&l, None), l.not_after - 30 * DAY);
        let l = loaded(6);
        assert_eq!(renew_at(&l, None), l.not_after - 2 * DAY);
        let l = loaded(365 * 5);
        assert_eq!(renew_at(&l, None), l.not_after - (365 * 5 * DAY) / 3);
        // Configured, and never before the start of validity.
        let l = loaded(90);
        assert_eq!(renew_at(&l, Some(7 * DAY)), l.not_after - 7 * DAY);
        assert_eq!(renew_at(&l, Some(900 * DAY)), l.not_before);
    }

    #[test]
    fn backoff_doubles_with_jitter_and_is_capped() {
        let min = Duration::from_secs(60);
        let max = Duration::from_secs(3600);
        for failures in 1..10 {
            let want = (min * (1 << (failures - 1))).min(max);
            let got = backoff(min, max, failures);
            assert!(got <= want, "{failures}: {got:?} > {want:?}");
            assert!(got >= want / 2, "{failures}: {got:?} < half of {want:?}");
        }
        assert!(backoff(min, max, 60) <= max);
    }
}
