use super::{RouteMetrics, Started};
use crate::watched::{OnEnd, Watched};
use std::sync::Arc;

/// A response body that counts what it hands out and records the request when it ends or
/// is dropped.
pub type MetricsBody<B, M = Arc<RouteMetrics>> = Watched<B, MetricsEnd<M>>;

/// A request's figures, recorded when its body ends.
pub struct MetricsEnd<M: AsRef<RouteMetrics> = Arc<RouteMetrics>> {
    pub metrics: M,
    pub started: Started,
    pub status: u16,
}

impl<M: AsRef<RouteMetrics>> OnEnd for MetricsEnd<M> {
    fn on_end(self, bytes: u64, _aborted: bool) {
        self.metrics
            .as_ref()
            .finish(self.started, self.status, bytes);
    }
}
