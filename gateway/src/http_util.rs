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

/// The answer to a request whose Service failed or panicked: the server's fault, not the
/// client's.
pub(crate) fn internal_error<B: From<bytes::Bytes>>() -> http::Response<B> {
    plain(http::StatusCode::INTERNAL_SERVER_ERROR, "internal error\n")
}

/// Polls `fut`, a Service's future from outside gatehouse (a mounted route's, or the one
/// [`crate::serve`] serves): `None` if it panicked, which its caller answers 500, as
/// tower-http's `CatchPanicLayer` does. The connection and its other requests go on, and the route
/// logs and counts a 500, not a request its client gave up. The default hook has already
/// printed the panic.
pub(crate) fn poll_caught<F>(
    fut: std::pin::Pin<&mut F>,
    cx: &mut std::task::Context<'_>,
) -> std::task::Poll<Option<F::Output>>
where
    F: std::future::Future + ?Sized,
{
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.poll(cx))) {
        Ok(polled) => polled.map(Some),
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("(no message)");
            tracing::error!("a Service panicked, answered 500: {what}");
            std::task::Poll::Ready(None)
        }
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

/// In the extensions of a request that may upgrade: what takes its connection over (the
/// proxy's WebSocket tunnel) starts it once the upgrade is agreed, and keeps the
/// [`ConnHold`] while it runs.
#[derive(Clone)]
pub(crate) struct ConnCount(std::sync::Arc<dyn Fn() -> ConnHold + Send + Sync>);

impl ConnCount {
    pub(crate) fn new(start: impl Fn() -> ConnHold + Send + Sync + 'static) -> ConnCount {
        ConnCount(std::sync::Arc::new(start))
    }

    pub(crate) fn start(&self) -> ConnHold {
        (self.0)()
    }
}

/// A connection taken over by an upgrade, counted open by the server (against
/// `limits.max_connections`) until this is dropped; and the server's drain, which ends it.
pub(crate) struct ConnHold {
    _held: Box<dyn std::any::Any + Send + Sync>,
    shutdown: tokio::sync::watch::Receiver<bool>,
}

impl ConnHold {
    pub(crate) fn new(
        held: Box<dyn std::any::Any + Send + Sync>,
        shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> ConnHold {
        ConnHold {
            _held: held,
            shutdown,
        }
    }

    /// Resolves once the server drains (at once if it already is).
    pub(crate) async fn draining(&mut self) {
        let _ = self.shutdown.wait_for(|down| *down).await;
    }
}
