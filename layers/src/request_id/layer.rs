use super::RequestIdService;
use crate::cidr::CidrSet;
use http::HeaderName;
use std::sync::Arc;
use tower_layer::Layer;

/// Gives each request an ID. See the [module docs](super).
#[derive(Clone, Debug)]
pub struct RequestIdLayer {
    header: HeaderName,
    trusted: CidrSet,
    extension: bool,
    request_extension: bool,
}

impl Default for RequestIdLayer {
    fn default() -> Self {
        RequestIdLayer {
            header: HeaderName::from_static("x-request-id"),
            trusted: CidrSet::default(),
            extension: true,
            request_extension: true,
        }
    }
}

impl RequestIdLayer {
    /// IDs in `X-Request-Id`, and no client's kept.
    pub fn new() -> Self {
        Self::default()
    }

    /// The header the ID goes in (and is read from, from a trusted peer).
    pub fn header(mut self, name: HeaderName) -> Self {
        self.header = name;
        self
    }

    /// Whether each response carries the ID in its extensions, as a
    /// [`RequestIdText`](crate::template::RequestIdText), for an access log outside this
    /// layer (on by default). Off, a request costs three allocations fewer: gatehouse
    /// turns it off on a route with no access log.
    pub fn response_extension(mut self, on: bool) -> Self {
        self.extension = on;
        self
    }

    /// Whether each request carries the ID as tower-http's
    /// [`RequestId`](tower_http::request_id::RequestId) extension, for templates'
    /// `$request_id` and the Service below (on by default). The ID is in the request's
    /// header either way. Off, a request costs three allocations fewer: gatehouse turns it
    /// off on a route where nothing reads it.
    pub fn request_extension(mut self, on: bool) -> Self {
        self.request_extension = on;
        self
    }

    /// Keeps the ID of requests from peers in `set`.
    pub fn trust(mut self, set: CidrSet) -> Self {
        self.trusted = set;
        self
    }
}

impl RequestIdLayer {
    /// Whether some peer's own ID is kept: the server must put the client in the
    /// request's extensions ([`crate::client`]).
    pub fn trusts_anyone(&self) -> bool {
        !self.trusted.is_empty()
    }
}

impl<S> Layer<S> for RequestIdLayer {
    type Service = RequestIdService<S>;

    fn layer(&self, inner: S) -> RequestIdService<S> {
        RequestIdService {
            inner,
            header: self.header.clone(),
            trusted: Arc::new(self.trusted.clone()),
            extension: self.extension,
            request_extension: self.request_extension,
        }
    }
}
