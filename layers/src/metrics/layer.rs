use super::{Metrics, RouteMetrics};
use std::sync::Arc;
use tower_layer::Layer;

/// Measures every request of the Service it wraps under one `route` label. See the
/// [module docs](super).
#[derive(Clone, Debug)]
pub struct MetricsLayer {
    metrics: Arc<RouteMetrics>,
}

impl MetricsLayer {
    /// Registers the route's handles: install the recorder first.
    pub fn new(route: &str) -> Self {
        MetricsLayer {
            metrics: Arc::new(RouteMetrics::new(route)),
        }
    }
}

impl<S> Layer<S> for MetricsLayer {
    type Service = Metrics<S>;

    fn layer(&self, inner: S) -> Metrics<S> {
        Metrics {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}
