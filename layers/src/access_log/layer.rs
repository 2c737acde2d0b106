use super::{AccessLog, AccessLogging};
use tower_layer::Layer;

/// Logs every request of the Service it wraps. See the [module docs](super).
#[derive(Clone, Debug)]
pub struct AccessLogLayer {
    log: AccessLog,
}

impl AccessLogLayer {
    pub fn new(log: AccessLog) -> Self {
        AccessLogLayer { log }
    }
}

impl<S> Layer<S> for AccessLogLayer {
    type Service = AccessLogging<S>;

    fn layer(&self, inner: S) -> AccessLogging<S> {
        AccessLogging {
            inner,
            log: self.log.clone(),
        }
    }
}
