//! Whether an upstream may be chosen: passive (consecutive failures of real requests eject
//! it for a cooldown) and active (a periodic request to a health path).

use super::balance::Upstream;
use super::Client;
use gatehouse_config::HealthCheckConfig;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Milliseconds on a monotonic clock, as the upstreams' ejection deadlines are kept; read
/// per proxied request, so the coarse one.
pub fn now_ms() -> u64 {
    gatehouse_layers::clock::coarse_ms()
}

/// Passive health settings.
#[derive(Debug, Clone, Copy)]
pub struct Passive {
    pub max_fails: u32,
    pub fail_timeout: Duration,
}

impl Passive {
    /// Counts a failure of `u`, one of the route's `ups`, that was the upstream's fault (see
    /// the proxy's `Blame`), and ejects it at `max_fails` in a row — unless no other
    /// upstream of the route is available: the last one is never ejected (a route with one
    /// upstream never is, as nginx counts nothing against a lone server), since a 503 to
    /// every client for `fail_timeout` is worse than trying it.
    pub fn failed(&self, ups: &[Arc<Upstream>], u: &Upstream) {
        if self.max_fails == 0 {
            return;
        }
        let n = u.fails.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= self.max_fails {
            u.fails.store(0, Ordering::Relaxed);
            let now = now_ms();
            let others = ups
                .iter()
                .any(|o| !std::ptr::eq(&**o, u) && o.available(now));
            if !others {
                tracing::debug!(
                    upstream = %u.authority,
                    "{n} consecutive failures, but it is the route's last available upstream: kept"
                );
                return;
            }
            let until = now + self.fail_timeout.as_millis() as u64;
            u.down_until.store(until, Ordering::Relaxed);
            u.metrics.ejections.increment(1);
            tracing::warn!(
                upstream = %u.authority,
                "ejected for {:?} after {n} consecutive failures",
                self.fail_timeout
            );
        }
    }

    pub fn succeeded(&self, u: &Upstream) {
        if u.fails.load(Ordering::Relaxed) != 0 {
            u.fails.store(0, Ordering::Relaxed);
        }
    }
}

/// Checks every upstream every `interval` until `retired` is set (a reload replaced the
/// pool) or the runtime stops.
pub async fn run_checks(
    upstreams: Vec<Arc<Upstream>>,
    client: Client,
    cfg: HealthCheckConfig,
    retired: Arc<std::sync::atomic::AtomicBool>,
) {
    let mut tick = tokio::time::interval(cfg.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if retired.load(Ordering::Relaxed) {
            return;
        }
        for u in &upstreams {
            let ok = probe(&client, u, &cfg).await;
            record(u, ok, &cfg);
        }
    }
}

async fn probe(client: &Client, u: &Upstream, cfg: &HealthCheckConfig) -> bool {
    let uri = format!("{}://{}{}", u.scheme, u.authority, cfg.path);
    let Ok(req) = http::Request::get(uri)
        .header(http::header::USER_AGENT, "gatehouse-health-check")
        .body(super::ReqBody::Empty)
    else {
        return false;
    };
    match tokio::time::timeout(cfg.timeout, client.request(req)).await {
        Ok(Ok(res)) => res.status().as_u16() == cfg.expect_status,
        _ => false,
    }
}

/// Counts a streak of passes or failures; `healthy` passes bring an upstream back,
/// `unhealthy` failures take it out.
pub fn record(u: &Upstream, ok: bool, cfg: &HealthCheckConfig) {
    let down = u.check_down.load(Ordering::Relaxed);
    if ok != down {
        // The result agrees with the current state: no streak towards a change.
        u.check_streak.store(0, Ordering::Relaxed);
        return;
    }
    let n = u.check_streak.fetch_add(1, Ordering::Relaxed) + 1;
    let needed = if down { cfg.healthy } else { cfg.unhealthy };
    if n >= needed {
        u.check_streak.store(0, Ordering::Relaxed);
        u.check_down.store(!down, Ordering::Relaxed);
        if down {
            tracing::info!(upstream = %u.authority, "healthy again after {n} checks");
        } else {
            u.metrics.ejections.increment(1);
            tracing::warn!(upstream = %u.authority, "unhealthy after {n} failed checks");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaks_change_state() {
        let u = Upstream::new(http::uri::Scheme::HTTP, "a:1".parse().unwrap(), 1);
        let cfg = HealthCheckConfig {
            healthy: 2,
            unhealthy: 3,
            ..HealthCheckConfig::default()
        };
        for _ in 0..2 {
            record(&u, false, &cfg);
        }
        record(&u, true, &cfg);
        assert!(u.available(0), "a pass breaks the streak");
        for _ in 0..3 {
            record(&u, false, &cfg);
        }
        assert!(!u.available(0));
        record(&u, true, &cfg);
        assert!(!u.available(0));
        record(&u, true, &cfg);
        assert!(u.available(0));
    }

    #[test]
    fn passive_ejection_expires() {
        let ups = two();
        let (u, other) = (&ups[0], &ups[1]);
        let p = Passive {
            max_fails: 2,
            fail_timeout: Duration::from_secs(5),
        };
        p.failed(&ups, u);
        assert!(u.available(now_ms()));
        p.failed(&ups, u);
        assert!(!u.available(now_ms()));
        assert!(u.available(now_ms() + 5_001));
        assert!(other.available(now_ms()));
    }

    fn two() -> Vec<Arc<Upstream>> {
        ["a:1", "b:1"]
            .iter()
            .map(|a| {
                Arc::new(Upstream::new(
                    http::uri::Scheme::HTTP,
                    a.parse().unwrap(),
                    1,
                ))
            })
            .collect()
    }

    #[test]
    fn the_last_available_upstream_is_never_ejected() {
        let p = Passive {
            max_fails: 1,
            fail_timeout: Duration::from_secs(5),
        };
        let one = vec![Arc::new(Upstream::new(
            http::uri::Scheme::HTTP,
            "a:1".parse().unwrap(),
            1,
        ))];
        for _ in 0..5 {
            p.failed(&one, &one[0]);
        }
        assert!(one[0].available(now_ms()), "a route's only upstream");
        let ups = two();
        p.failed(&ups, &ups[0]);
        assert!(!ups[0].available(now_ms()));
        p.failed(&ups, &ups[1]);
        assert!(ups[1].available(now_ms()), "the other is out");
        // Out by the health checks counts as out.
        let ups = two();
        ups[1].check_down.store(true, Ordering::Relaxed);
        p.failed(&ups, &ups[0]);
        assert!(ups[0].available(now_ms()));
    }
}
