use super::{AccessLog, AccessLogService};
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
    type Service = AccessLogService<S>;

    fn layer(&self, inner: S) -> AccessLogService<S> {
        AccessLogService {
            inner,
            log: self.log.clone(),
        }
    }
}
