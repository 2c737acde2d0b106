//! Latency histograms for the hot path, rendered by this crate rather than the recorder.
//!
//! The Prometheus recorder keeps every histogram sample until a scrape folds them into
//! buckets: each sample is a write to a shared, growing buffer and a `crossbeam-epoch` pin
//! (a sequentially consistent fence), about 4% of a proxied request's user-space time.
//! Here a sample is two relaxed adds to this thread's own cache lines (a bucket count and
//! the sum), and the buckets are only added up when `/metrics` is rendered.

use super::DURATION_BUCKETS;
use crate::tally::{slot, SLOTS};
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

const BUCKETS: usize = DURATION_BUCKETS.len();

/// The bucket bounds in nanoseconds, inclusive (`le`).
const BOUNDS_NS: [u64; BUCKETS] = {
    let mut b = [0u64; BUCKETS];
    let mut i = 0;
    while i < BUCKETS {
        b[i] = (DURATION_BUCKETS[i] * 1e9) as u64;
        i += 1;
    }
    b
};

/// The sum is kept in units of 64 ns (rounded per sample), so that it takes about 37
/// years of requests finishing at a combined 1,000 seconds per second to wrap, where
/// nanoseconds would take 200 days.
const SUM_SHIFT: u32 = 6;

#[repr(align(128))]
struct Shard {
    /// Samples per bucket, the last past the largest bound (`+Inf`), not cumulative.
    counts: [AtomicU64; BUCKETS + 1],
    sum: AtomicU64,
}

/// A histogram of durations with [`DURATION_BUCKETS`], counted in per-thread shards.
/// Get one with [`latency_histogram`].
pub struct LatencyHistogram {
    shards: [Shard; SLOTS],
}

impl std::fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (counts, _) = self.snapshot();
        write!(
            f,
            "LatencyHistogram({} samples)",
            counts.iter().sum::<u64>()
        )
    }
}

impl LatencyHistogram {
    fn new() -> LatencyHistogram {
        LatencyHistogram {
            shards: std::array::from_fn(|_| Shard {
                counts: std::array::from_fn(|_| AtomicU64::new(0)),
                sum: AtomicU64::new(0),
            }),
        }
    }

    pub fn record(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let bucket = BOUNDS_NS.partition_point(|&b| b < ns);
        let shard = &self.shards[slot()];
        shard.counts[bucket].fetch_add(1, Ordering::Relaxed);
        let units = ns.saturating_add(1 << (SUM_SHIFT - 1)) >> SUM_SHIFT;
        shard.sum.fetch_add(units, Ordering::Relaxed);
    }

    /// Samples per bucket (not cumulative) and their sum in seconds.
    fn snapshot(&self) -> ([u64; BUCKETS + 1], f64) {
        let mut counts = [0u64; BUCKETS + 1];
        let mut sum = 0u64;
        for s in &self.shards {
            for (c, a) in counts.iter_mut().zip(&s.counts) {
                *c = c.wrapping_add(a.load(Ordering::Relaxed));
            }
            sum = sum.wrapping_add(s.sum.load(Ordering::Relaxed));
        }
        (counts, (sum << SUM_SHIFT) as f64 / 1e9)
    }

    /// One series in the text exposition format: cumulative buckets, sum and count.
    fn render(&self, out: &mut String, name: &str, label: &str, value: &str) {
        let (counts, sum) = self.snapshot();
        let mut cumulative = 0u64;
        for (i, c) in counts.iter().enumerate() {
            cumulative += c;
            let _ = match DURATION_BUCKETS.get(i) {
                Some(le) => writeln!(
                    out,
                    "{name}_bucket{{{label}=\"{value}\",le=\"{le}\"}} {cumulative}"
                ),
                None => writeln!(
                    out,
                    "{name}_bucket{{{label}=\"{value}\",le=\"+Inf\"}} {cumulative}"
                ),
            };
        }
        let _ = writeln!(out, "{name}_sum{{{label}=\"{value}\"}} {sum}");
        let _ = writeln!(out, "{name}_count{{{label}=\"{value}\"}} {cumulative}");
    }
}

struct Family {
    name: &'static str,
    help: &'static str,
    label: &'static str,
    /// By label value (escaped for the exposition format), in the order first asked for.
    series: Vec<(String, &'static LatencyHistogram)>,
}

static FAMILIES: Mutex<Vec<Family>> = Mutex::new(Vec::new());

/// The histogram of metric `name` whose one label `label` is `value`: made on first use
/// and kept for the life of the process, so that asking again (a reload rebuilding its
/// routes) continues the same series. Values should be bounded, such as route names or
/// upstream addresses from the configuration.
pub fn latency_histogram(
    name: &'static str,
    help: &'static str,
    label: &'static str,
    value: &str,
) -> &'static LatencyHistogram {
    let value = escape(value);
    let mut families = FAMILIES.lock().unwrap_or_else(|e| e.into_inner());
    let family = match families.iter().position(|f| f.name == name) {
        Some(i) => &mut families[i],
        None => {
            families.push(Family {
                name,
                help,
                label,
                series: Vec::new(),
            });
            let last = families.len() - 1;
            &mut families[last]
        }
    };
    if let Some((_, h)) = family.series.iter().find(|(v, _)| *v == value) {
        return h;
    }
    let h: &'static LatencyHistogram = Box::leak(Box::new(LatencyHistogram::new()));
    family.series.push((value, h));
    h
}

/// Every histogram made with [`latency_histogram`], in the text exposition format.
pub fn render(out: &mut String) {
    let families = FAMILIES.lock().unwrap_or_else(|e| e.into_inner());
    for f in families.iter().filter(|f| !f.series.is_empty()) {
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} histogram", f.name);
        for (value, h) in &f.series {
            h.render(out, f.name, f.label, value);
        }
        out.push('\n');
    }
}

/// A label value in the exposition format: backslash, double quote and newline escaped.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series<'a>(page: &'a str, prefix: &str) -> Vec<&'a str> {
        page.lines().filter(|l| l.starts_with(prefix)).collect()
    }

    #[test]
    fn samples_from_every_thread_land_in_their_buckets() {
        let h = latency_histogram("test_a_seconds", "Test.", "route", "r\"1");
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..250 {
                        // On a bound: counted in it (`le` is inclusive).
                        h.record(Duration::from_micros(50));
                        h.record(Duration::from_millis(3));
                        h.record(Duration::from_secs(11));
                    }
                });
            }
        });
        let (counts, sum) = h.snapshot();
        assert_eq!(counts[0], 1000);
        assert_eq!(counts[6], 1000, "3 ms is in the le=0.005 bucket");
        assert_eq!(counts[BUCKETS], 1000, "11 s is past the last bound");
        assert_eq!(counts.iter().sum::<u64>(), 3000);
        // Summed in 64 ns units: each 50 µs sample counts 16 ns short.
        assert!(
            (sum - 1000.0 * (0.00005 + 0.003 + 11.0)).abs() < 1e-4,
            "{sum}"
        );
        let mut page = String::new();
        render(&mut page);
        let name = "test_a_seconds_bucket{route=\"r\\\"1\"";
        let lines = series(&page, name);
        assert_eq!(lines.len(), BUCKETS + 1, "{page}");
        assert_eq!(lines[0], format!("{name},le=\"0.00005\"}} 1000"));
        assert_eq!(lines[5], format!("{name},le=\"0.0025\"}} 1000"));
        assert_eq!(lines[6], format!("{name},le=\"0.005\"}} 2000"));
        assert_eq!(lines[13], format!("{name},le=\"1\"}} 2000"));
        assert_eq!(lines[BUCKETS], format!("{name},le=\"+Inf\"}} 3000"));
        assert_eq!(
            series(&page, "test_a_seconds_count"),
            ["test_a_seconds_count{route=\"r\\\"1\"} 3000"]
        );
        assert!(page.contains("# TYPE test_a_seconds histogram\n"), "{page}");
    }

    #[test]
    fn asking_again_continues_the_same_series() {
        let a = latency_histogram("test_b_seconds", "Test.", "upstream", "x:1");
        a.record(Duration::from_millis(1));
        let b = latency_histogram("test_b_seconds", "Test.", "upstream", "x:1");
        b.record(Duration::from_millis(1));
        assert!(std::ptr::eq(a, b));
        let other = latency_histogram("test_b_seconds", "Test.", "upstream", "y:1");
        assert!(!std::ptr::eq(a, other));
        let mut page = String::new();
        render(&mut page);
        assert_eq!(
            series(&page, "test_b_seconds_count"),
            [
                "test_b_seconds_count{upstream=\"x:1\"} 2",
                "test_b_seconds_count{upstream=\"y:1\"} 0"
            ]
        );
        assert_eq!(page.matches("# TYPE test_b_seconds histogram").count(), 1);
    }
}
