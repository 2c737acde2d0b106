use super::{BYTES, DURATION, IN_FLIGHT, REQUESTS};
use http::Method;
use metrics::{Counter, Gauge, Histogram, SharedString};
use std::sync::OnceLock;
use std::time::Instant;

/// The handles of one route's metrics. Make one per route, at start-up; recording through
/// it takes no lock and allocates nothing.
pub struct RouteMetrics {
    route: SharedString,
    /// By method slot, then status (100 to 599), each made and registered on first use.
    requests: [OnceLock<Box<[OnceLock<Counter>]>>; METHODS.len()],
    duration: Histogram,
    bytes: Counter,
    in_flight: Gauge,
}

impl std::fmt::Debug for RouteMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteMetrics")
            .field("route", &&*self.route)
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
    /// The handles for the route named `route` (the `route` label).
    pub fn new(route: &str) -> RouteMetrics {
        let route = SharedString::from(route.to_string());
        let labels = [("route", route.clone())];
        RouteMetrics {
            requests: std::array::from_fn(|_| OnceLock::new()),
            duration: metrics::histogram!(DURATION, &labels),
            bytes: metrics::counter!(BYTES, &labels),
            in_flight: metrics::gauge!(IN_FLIGHT),
            route,
        }
    }

    pub fn route(&self) -> &str {
        &self.route
    }

    /// A request has arrived.
    pub fn start(&self, method: &Method) -> Started {
        self.in_flight.increment(1.0);
        Started {
            at: Instant::now(),
            method: method_slot(method) as u8,
        }
    }

    /// A request that [`start`](Self::start)ed elsewhere (on another route's handles, or
    /// before its route was known) is counted here; the in-flight gauge is shared.
    pub fn finish(&self, s: Started, status: u16, bytes: u64) {
        self.in_flight.decrement(1.0);
        self.duration.record(s.at.elapsed().as_secs_f64());
        if bytes > 0 {
            self.bytes.increment(bytes);
        }
        let m = s.method as usize;
        if !(100..600).contains(&status) {
            // Outside RFC 9110 §15's classes: looked up by label, allocating.
            return self.counter(m, status).increment(1);
        }
        let table = self.requests[m].get_or_init(|| (100..600).map(|_| OnceLock::new()).collect());
        table[usize::from(status - 100)]
            .get_or_init(|| self.counter(m, status))
            .increment(1);
    }

    fn counter(&self, method: usize, status: u16) -> Counter {
        metrics::counter!(
            REQUESTS,
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
