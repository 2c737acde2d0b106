use super::{names, LatencyHistogram, DURATION_HELP};
use crate::tally::Tally;
use http::Method;
use metrics::{Counter, SharedString};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// The handles of one route's metrics. Make one per route, at start-up.
///
/// Counts are kept in per-thread [`Tally`] slots, so that two cores serving the same route
/// never pass a cache line back and forth, and are handed to the recorder's counters by
/// [`refresh`] just before a scrape renders them. A request costs a few uncontended atomic
/// adds (a histogram sample is two more): no lock, no label hashing, no allocation.
pub struct RouteMetrics {
    shared: Arc<Shared>,
}

struct Shared {
    route: SharedString,
    /// By method slot, then status (100 to 599), each made and registered on first use.
    requests: [OnceLock<StatusTable>; METHODS.len()],
    duration: &'static LatencyHistogram,
    bytes: Slot,
}

/// One method's counters, by status - 100.
type StatusTable = Box<[OnceLock<Box<Slot>>]>;

/// A counter of the recorder and the count it is brought up to at each refresh.
struct Slot {
    counter: Counter,
    tally: Tally,
}

impl Slot {
    fn new(counter: Counter) -> Slot {
        Slot {
            counter,
            tally: Tally::default(),
        }
    }

    fn refresh(&self) {
        self.counter.absolute(self.tally.get());
    }
}

/// A counter of the recorder's, counted per thread on the hot path and handed to the
/// recorder by [`refresh`]. Get one with [`sharded_counter`].
pub struct ShardedCounter(Slot);

impl ShardedCounter {
    pub fn increment(&self, n: u64) {
        self.0.tally.add(n);
    }
}

impl std::fmt::Debug for ShardedCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ShardedCounter({})", self.0.tally.get())
    }
}

/// By metric name and label value: made once, kept, so a reload counts on.
type Counters = Vec<(&'static str, String, &'static ShardedCounter)>;
static COUNTERS: Mutex<Counters> = Mutex::new(Vec::new());

/// The counter of metric `name` whose one label `label` is `value`, for a count taken on
/// every request: made on first use and kept for the life of the process (asking again
/// gives the same one). Values should be bounded, such as upstream addresses from the
/// configuration.
pub fn sharded_counter(
    name: &'static str,
    label: &'static str,
    value: &str,
) -> &'static ShardedCounter {
    let mut all = COUNTERS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, _, c)) = all.iter().find(|(n, v, _)| *n == name && v == value) {
        return c;
    }
    let counter = metrics::counter!(name, label => value.to_string());
    let c: &'static ShardedCounter = Box::leak(Box::new(ShardedCounter(Slot::new(counter))));
    all.push((name, value.to_string(), c));
    c
}

/// Every route's counts, for [`refresh`]; and requests started and finished, whose
/// difference is the in-flight gauge.
static ROUTES: Mutex<Vec<Arc<Shared>>> = Mutex::new(Vec::new());
static STARTED: Tally = Tally::new();
static FINISHED: Tally = Tally::new();

/// Brings the recorder's request counters and the in-flight gauge up to date. [`render`]
/// does it before rendering; call it before rendering a [`PrometheusHandle`] yourself.
///
/// [`render`]: super::render
/// [`PrometheusHandle`]: super::PrometheusHandle
pub fn refresh() {
    for c in COUNTERS.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        c.2 .0.refresh();
    }
    let routes = ROUTES.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for r in routes {
        r.bytes.refresh();
        for table in r.requests.iter().filter_map(OnceLock::get) {
            for slot in table.iter().filter_map(OnceLock::get) {
                slot.refresh();
            }
        }
    }
    // Read in this order, a request can't be finished without being started.
    let finished = FINISHED.get();
    let started = STARTED.get();
    metrics::gauge!(names().in_flight).set(started.saturating_sub(finished) as f64);
}

impl std::fmt::Debug for RouteMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteMetrics")
            .field("route", &&*self.shared.route)
            .finish()
    }
}

const METHODS: [&str; 10] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE", "OTHER",
];

fn method_slot(m: &Method) -> usize {
    match *m {
        Method::GET => 0,
        Method::HEAD => 1,
        Method::POST => 2,
        Method::PUT => 3,
        Method::DELETE => 4,
        Method::PATCH => 5,
        Method::OPTIONS => 6,
        Method::CONNECT => 7,
        Method::TRACE => 8,
        _ => 9,
    }
}

/// A request being measured: when it arrived and its method.
#[derive(Clone, Copy, Debug)]
pub struct Started {
    at: Instant,
    method: u8,
}

impl RouteMetrics {
    /// The handles for the route named `route` (the `route` label), under the names
    /// [`install_with_prefix`](super::install_with_prefix) chose: install first.
    pub fn new(route: &str) -> RouteMetrics {
        let route = SharedString::from(route.to_string());
        let labels = [("route", route.clone())];
        let shared = Arc::new(Shared {
            requests: std::array::from_fn(|_| OnceLock::new()),
            duration: super::latency_histogram(names().duration, DURATION_HELP, "route", &route),
            bytes: Slot::new(metrics::counter!(names().bytes, &labels)),
            route,
        });
        ROUTES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(shared.clone());
        RouteMetrics { shared }
    }

    pub fn route(&self) -> &str {
        &self.shared.route
    }

    /// A request has arrived.
    pub fn start(&self, method: &Method) -> Started {
        STARTED.add(1);
        Started {
            at: Instant::now(),
            method: method_slot(method) as u8,
        }
    }

    /// A request that [`start`](Self::start)ed elsewhere (on another route's handles, or
    /// before its route was known) is counted here; the in-flight gauge is shared.
    pub fn finish(&self, s: Started, status: u16, bytes: u64) {
        FINISHED.add(1);
        let r = &*self.shared;
        r.duration.record(s.at.elapsed());
        if bytes > 0 {
            r.bytes.tally.add(bytes);
        }
        let m = s.method as usize;
        if !(100..600).contains(&status) {
            // Outside RFC 9110 §15's classes: looked up by label, allocating.
            return r.counter(m, status).increment(1);
        }
        let table = r.requests[m].get_or_init(|| (100..600).map(|_| OnceLock::new()).collect());
        table[usize::from(status - 100)]
            .get_or_init(|| Box::new(Slot::new(r.counter(m, status))))
            .tally
            .add(1);
    }
}

impl Shared {
    fn counter(&self, method: usize, status: u16) -> Counter {
        metrics::counter!(
            names().requests,
            "route" => self.route.clone(),
            "method" => METHODS[method],
            "status" => status.to_string()
        )
    }
}

impl AsRef<RouteMetrics> for RouteMetrics {
    fn as_ref(&self) -> &RouteMetrics {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sharded_counter_asked_for_again_counts_on() {
        let a = sharded_counter("test_sharded_total", "upstream", "a:1");
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| (0..100).for_each(|_| a.increment(1)));
            }
        });
        let again = sharded_counter("test_sharded_total", "upstream", "a:1");
        assert!(std::ptr::eq(a, again));
        again.increment(2);
        assert_eq!(a.0.tally.get(), 402);
        let other = sharded_counter("test_sharded_total", "upstream", "b:1");
        assert_eq!(other.0.tally.get(), 0);
    }
}
