//! `/metrics` on the admin listener: the request metrics every route records (see
//! [`gatehouse_layers::metrics`]), plus what is read at scrape time — caches, upstream
//! health, certificate expiry, ACME renewals, access-log drops, connections — and the
//! process's own figures.
//!
//! Figures kept inside the caches and the log writers are carried over as the increase
//! since the last scrape, so that a reload, which makes new caches starting from zero,
//! doesn't look like a counter reset.

use crate::router::GatewayRouter;
use crate::tls::acme::AcmeStatus;
use crate::tls::Tls;
use gatehouse_layers::metrics::installed;
use metrics::{counter, gauge};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// Installs the Prometheus recorder (once per process; again is harmless): before the
/// router and the listeners are made, so that their handles record.
pub fn install() -> Result<(), String> {
    gatehouse_layers::metrics::install().map_err(|e| e.to_string())?;
    metrics::describe_gauge!("gatehouse_build_info", "Always 1; the version is a label.");
    gauge!("gatehouse_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    describe();
    Ok(())
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, Unit};
    describe_gauge!(
        "gatehouse_connections_open",
        "Client connections open, by listener."
    );
    describe_counter!(
        "gatehouse_connections_refused_total",
        "Connections closed on accept because limits.max_connections were open."
    );
    describe_counter!(
        "gatehouse_tls_handshakes_total",
        "TLS handshakes completed."
    );
    describe_counter!(
        "gatehouse_tls_handshake_failures_total",
        "TLS handshakes that failed or timed out."
    );
    describe_counter!(
        "gatehouse_upstream_requests_total",
        "Requests sent to an upstream (each attempt)."
    );
    describe_counter!(
        "gatehouse_upstream_failures_total",
        "Upstream attempts that failed: no connection, an error, or no response in time."
    );
    describe_counter!(
        "gatehouse_upstream_ejections_total",
        "Times an upstream was taken out of rotation."
    );
    describe_gauge!(
        "gatehouse_upstream_healthy",
        "1 while an upstream may be chosen, else 0."
    );
    describe_counter!(
        "gatehouse_open_file_cache_hits_total",
        "Open-file cache lookups answered from memory."
    );
    describe_counter!(
        "gatehouse_open_file_cache_misses_total",
        "Paths resolved on the file system."
    );
    describe_counter!(
        "gatehouse_open_file_cache_evictions_total",
        "Entries pushed out to make room."
    );
    describe_counter!(
        "gatehouse_open_file_cache_expired_total",
        "Entries dropped after going unrequested for `inactive`."
    );
    describe_counter!(
        "gatehouse_compression_cache_hits_total",
        "Responses sent from a stored compressed variant."
    );
    describe_counter!(
        "gatehouse_compression_cache_misses_total",
        "Responses that made (or waited for) a variant."
    );
    describe_counter!(
        "gatehouse_compression_cache_evictions_total",
        "Variants pushed out to stay in budget."
    );
    describe_gauge!(
        "gatehouse_compression_cache_bytes",
        Unit::Bytes,
        "Bytes of compressed variants held."
    );
    describe_counter!(
        "gatehouse_cache_requests_total",
        "Requests to a route's response cache, by what it did: hit, miss, stale (served stale \
         while refreshed or for a failed upstream), revalidated (a 304), bypass."
    );
    describe_counter!(
        "gatehouse_cache_coalesced_total",
        "Requests that waited for another request's upstream fetch of their key."
    );
    describe_counter!(
        "gatehouse_cache_stored_total",
        "Responses stored in a route's response cache."
    );
    describe_counter!(
        "gatehouse_cache_invalidated_total",
        "Stored responses removed by an unsafe method's success or a purge."
    );
    describe_counter!(
        "gatehouse_cache_disk_skipped_total",
        "Stored responses not written to the disk tier because its write queue was full."
    );
    describe_counter!(
        "gatehouse_cache_refreshed_total",
        "Background refreshes of stale entries (stale-while-revalidate) the upstream answered."
    );
    describe_counter!(
        "gatehouse_cache_disk_reads_total",
        "Stored responses read back from the disk tier (once per key, however many requests \
         wait for it)."
    );
    describe_counter!(
        "gatehouse_cache_disk_reads_abandoned_total",
        "Memory misses that went upstream without reading the disk tier: the read outlasted \
         lock_timeout, or 64 were under way (a disk that stopped answering)."
    );
    describe_gauge!(
        "gatehouse_cache_bytes",
        Unit::Bytes,
        "Bytes held by a route's response cache."
    );
    describe_gauge!(
        "gatehouse_cache_entries",
        "Responses held by a route's response cache."
    );
    describe_gauge!(
        "gatehouse_cache_disk_bytes",
        Unit::Bytes,
        "Bytes held by a route's response cache on disk."
    );
    describe_gauge!(
        "gatehouse_cache_disk_entries",
        "Responses held by a route's response cache on disk."
    );
    describe_gauge!(
        "gatehouse_tls_certificate_expiry_timestamp_seconds",
        Unit::Seconds,
        "When a certificate served for a domain expires (Unix time)."
    );
    describe_counter!("gatehouse_acme_renewals_total", "ACME orders, by outcome.");
    describe_counter!(
        "gatehouse_access_log_lines_dropped_total",
        "Access log lines dropped because the writer fell behind (should stay 0)."
    );
    describe_counter!(
        "gatehouse_http_requests_by_protocol_total",
        "Requests read by the listeners, by HTTP version (HTTP/1.0, HTTP/1.1, HTTP/2, HTTP/3)."
    );
    describe_counter!(
        "gatehouse_quic_retries_total",
        "QUIC Retries sent: new HTTP/3 clients asked to prove their address first."
    );
    describe_counter!(
        "gatehouse_quic_early_requests_total",
        "HTTP/3 requests that came in 0-RTT data, by outcome: served (safe methods) or too_early (425)."
    );
    describe_counter!(
        "gatehouse_access_log_lines_failed_total",
        "Access log lines lost because the destination refused them, e.g. a full disk (should stay 0)."
    );
}

/// Renders `/metrics`: `None` when metrics are off.
pub(crate) struct Exporter {
    router: Option<GatewayRouter>,
    tls: Option<Arc<Tls>>,
    acme: Option<Arc<AcmeStatus>>,
    /// Last value read of each figure kept elsewhere, by (its owner's id, name).
    seen: Mutex<HashMap<(u64, &'static str), u64>>,
}

impl Exporter {
    pub(crate) fn new(
        router: Option<GatewayRouter>,
        tls: Option<Arc<Tls>>,
        acme: Option<Arc<AcmeStatus>>,
    ) -> Option<Exporter> {
        installed()?;
        Some(Exporter {
            router,
            tls,
            acme,
            seen: Mutex::new(HashMap::new()),
        })
    }

    /// Histogram samples are folded into buckets here; run every few seconds so that
    /// rare scrapes don't let them pile up.
    pub(crate) fn upkeep(&self) {
        if let Some(h) = installed() {
            h.run_upkeep();
        }
    }

    pub(crate) fn render(&self) -> String {
        self.collect();
        match installed() {
            Some(h) => gatehouse_layers::metrics::render(h),
            None => String::new(),
        }
    }

    fn collect(&self) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        // Owners gone since the last scrape (replaced by a reload) are forgotten.
        let before = std::mem::take(&mut *seen);
        let mut carry = |owner: u64, name: &'static str, now: u64, c: metrics::Counter| {
            let last = before.get(&(owner, name)).copied().unwrap_or(0);
            seen.insert((owner, name), now);
            c.increment(now.saturating_sub(last));
        };
        if let Some(router) = &self.router {
            for c in router.caches() {
                let route = c.route;
                if let Some(f) = &c.files {
                    let id = f.identity();
                    for (name, v) in [
                        ("gatehouse_open_file_cache_hits_total", f.hits()),
                        ("gatehouse_open_file_cache_misses_total", f.loads()),
                        ("gatehouse_open_file_cache_evictions_total", f.evictions()),
                        ("gatehouse_open_file_cache_expired_total", f.expired()),
                    ] {
                        carry(id, name, v, counter!(name, "route" => route.clone()));
                    }
                }
                if let Some(v) = &c.variants {
                    let id = v.identity();
                    for (name, n) in [
                        ("gatehouse_compression_cache_hits_total", v.hits()),
                        ("gatehouse_compression_cache_misses_total", v.misses()),
                        ("gatehouse_compression_cache_evictions_total", v.evictions()),
                    ] {
                        carry(id, name, n, counter!(name, "route" => route.clone()));
                    }
                    gauge!("gatehouse_compression_cache_bytes", "route" => route.clone())
                        .set(v.weighted_size() as f64);
                }
                if let Some(r) = &c.responses {
                    let id = r.identity();
                    let st = r.stats();
                    let n = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
                    const REQUESTS: &str = "gatehouse_cache_requests_total";
                    for (key, status, v) in [
                        ("cache/hit", "hit", st.hits.get()),
                        ("cache/miss", "miss", n(&st.misses)),
                        ("cache/stale", "stale", n(&st.stale)),
                        ("cache/revalidated", "revalidated", n(&st.revalidated)),
                        ("cache/bypass", "bypass", n(&st.bypassed)),
                    ] {
                        let c = counter!(REQUESTS, "route" => route.clone(), "status" => status);
                        carry(id, key, v, c);
                    }
                    for (name, v) in [
                        ("gatehouse_cache_coalesced_total", n(&st.coalesced)),
                        ("gatehouse_cache_stored_total", n(&st.stored)),
                        ("gatehouse_cache_invalidated_total", n(&st.invalidated)),
                        ("gatehouse_cache_disk_skipped_total", n(&st.disk_skipped)),
                        ("gatehouse_cache_disk_reads_total", n(&st.disk_reads)),
                        (
                            "gatehouse_cache_disk_reads_abandoned_total",
                            n(&st.disk_reads_abandoned),
                        ),
                        ("gatehouse_cache_refreshed_total", n(&st.refreshed)),
                    ] {
                        carry(id, name, v, counter!(name, "route" => route.clone()));
                    }
                    gauge!("gatehouse_cache_bytes", "route" => route.clone())
                        .set(r.weighted_size() as f64);
                    gauge!("gatehouse_cache_entries", "route" => route.clone())
                        .set(r.entry_count() as f64);
                    if let Some((bytes, files)) = r.disk_usage() {
                        gauge!("gatehouse_cache_disk_bytes", "route" => route.clone())
                            .set(bytes as f64);
                        gauge!("gatehouse_cache_disk_entries", "route" => route.clone())
                            .set(files as f64);
                    }
                }
            }
            let now_ms = crate::proxy::health::now_ms();
            for p in router.proxies() {
                for u in p.upstreams() {
                    let up = if u.available(now_ms) { 1.0 } else { 0.0 };
                    gauge!("gatehouse_upstream_healthy", "upstream" => u.authority.to_string())
                        .set(up);
                }
            }
            carry(
                0,
                "gatehouse_access_log_lines_dropped_total",
                router.log_lines_dropped(),
                counter!("gatehouse_access_log_lines_dropped_total"),
            );
            carry(
                0,
                "gatehouse_access_log_lines_failed_total",
                router.log_lines_failed(),
                counter!("gatehouse_access_log_lines_failed_total"),
            );
        }
        if let Some(a) = &self.acme {
            for (outcome, v) in [
                ("success", a.obtained.load(Ordering::Relaxed)),
                ("failure", a.failed.load(Ordering::Relaxed)),
            ] {
                counter!("gatehouse_acme_renewals_total", "outcome" => outcome).absolute(v);
            }
        }
        if let Some(t) = &self.tls {
            for (l, acme) in t.store.all() {
                let at = l
                    .not_after
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64());
                let source = if acme { "acme" } else { "file" };
                for name in &l.names {
                    gauge!(
                        "gatehouse_tls_certificate_expiry_timestamp_seconds",
                        "domain" => name.clone(),
                        "source" => source
                    )
                    .set(at);
                }
            }
        }
    }
}
