//! Small HTTP helpers for every module of the crate: they use nothing of it, so that the
//! services, the router and the server can all stand on them.

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub(crate) use gatehouse_layers::respond::{add_slash, plain};

pub(crate) fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        // An IPv6 literal: keep the brackets, drop a port after them.
        return match host.find(']') {
            Some(i) => &host[..=i],
            None => host,
        };
    }
    match host.rfind(':') {
        Some(i) => &host[..i],
        None => host,
    }
}

#[cfg(test)]
mod tests {
    use super::strip_port;

    #[test]
    fn ports_are_stripped() {
        assert_eq!(strip_port("example.com:8080"), "example.com");
        assert_eq!(strip_port("example.com"), "example.com");
        assert_eq!(strip_port("[::1]:8080"), "[::1]");
        assert_eq!(strip_port("[::1]"), "[::1]");
    }
}

/// What takes a connection over once its request upgrades (the proxy's WebSocket tunnel)
/// keeps this, found in the request's extensions, while it runs: the server counts the
/// connection open, against `limits.max_connections`, until the last copy is dropped.
#[derive(Clone)]
pub(crate) struct ConnHold {
    _held: std::sync::Arc<dyn std::any::Any + Send + Sync>,
}

impl ConnHold {
    pub(crate) fn new(held: std::sync::Arc<dyn std::any::Any + Send + Sync>) -> ConnHold {
        ConnHold { _held: held }
    }
}
