//! The response body every route produces: one enum, so that the common cases (a body in
//! memory, an empty one, a file stream) need no boxing, and anything else still fits.

use crate::proxy::ProxyBody;
use crate::static_files::{FileBody, StaticBody};
use bytes::Bytes;
use gatehouse_layers::access_log::LogEnd;
use gatehouse_layers::metrics::{MetricsEnd, RouteMetrics};
use gatehouse_layers::watched::{Both, Watched};
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};

pub use crate::http_util::BoxError;

/// What watches a response body to its end: the route's access log line and its metrics.
pub type Observers = Both<Option<LogEnd>, Option<MetricsEnd<&'static RouteMetrics>>>;

/// A response body as the server sends it: the route's body, watched.
pub type ObservedBody = Watched<GateBody, Observers>;

pub enum GateBody {
    Empty,
    Full(Option<Bytes>),
    File(FileBody),
    /// A proxied response, streamed as it comes.
    Upstream(crate::proxy::UpstreamBody),
    Boxed(axum::body::Body),
}

impl GateBody {
    pub fn empty() -> Self {
        GateBody::Empty
    }

    pub fn full(b: impl Into<Bytes>) -> Self {
        GateBody::Full(Some(b.into()))
    }
}

/// The body of an answer with none (a CORS preflight's).
impl Default for GateBody {
    fn default() -> Self {
        GateBody::Empty
    }
}

impl From<Bytes> for GateBody {
    fn from(b: Bytes) -> Self {
        GateBody::Full(Some(b))
    }
}

/// Flattened, so that the connection sees a file body as `File` whichever Service made it.
impl From<StaticBody> for GateBody {
    fn from(b: StaticBody) -> Self {
        match b {
            StaticBody::Empty => GateBody::Empty,
            StaticBody::Full(b) => GateBody::Full(b),
            StaticBody::File(f) => GateBody::File(f),
        }
    }
}

impl From<ProxyBody> for GateBody {
    fn from(b: ProxyBody) -> Self {
        match b {
            ProxyBody::Empty => GateBody::Empty,
            ProxyBody::Full(b) => GateBody::Full(b),
            ProxyBody::Upstream(u) => GateBody::Upstream(u),
        }
    }
}

/// A hit is bytes from memory; a response passing unstored stays the proxy's body; only
/// one being copied into the store is boxed (a miss, which went upstream anyway).
impl From<gatehouse_layers::cache::CacheBody<ProxyBody>> for GateBody {
    fn from(b: gatehouse_layers::cache::CacheBody<ProxyBody>) -> Self {
        use gatehouse_layers::cache::Split;
        match b.split() {
            Split::Stored(data) => GateBody::Full(data),
            Split::Passing(p) => p.into(),
            Split::Filling(b) => GateBody::Boxed(axum::body::Body::new(b)),
        }
    }
}

impl From<axum::body::Body> for GateBody {
    fn from(b: axum::body::Body) -> Self {
        GateBody::Boxed(b)
    }
}

impl Body for GateBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            GateBody::Empty => Poll::Ready(None),
            GateBody::Full(b) => Poll::Ready(
                b.take()
                    .filter(|b| !b.is_empty())
                    .map(|b| Ok(Frame::data(b))),
            ),
            GateBody::File(f) => Pin::new(f).poll_frame(cx).map_err(Into::into),
            GateBody::Upstream(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
            GateBody::Boxed(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            GateBody::Empty => true,
            GateBody::Full(b) => b.as_ref().is_none_or(|b| b.is_empty()),
            GateBody::File(f) => f.is_end_stream(),
            GateBody::Upstream(b) => b.is_end_stream(),
            GateBody::Boxed(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            GateBody::Empty => SizeHint::with_exact(0),
            GateBody::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            GateBody::File(f) => f.size_hint(),
            GateBody::Upstream(b) => b.size_hint(),
            GateBody::Boxed(b) => b.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every response is moved several times between the Service and hyper (out of each
    /// future, apart into parts and back), and each move copies the body inline. A proxied
    /// body held its upstream connection inline and made every body 192 bytes; memmove was
    /// the largest user-space entry in an https-1k profile (8% of user time).
    #[test]
    fn a_body_stays_small() {
        assert!(
            std::mem::size_of::<GateBody>() <= 112,
            "GateBody is {} bytes",
            std::mem::size_of::<GateBody>()
        );
    }
}
