use super::{HeaderRules, Headers};
use std::sync::Arc;
use tower_layer::Layer;

/// Applies header rules to requests and responses. See the [module docs](super).
#[derive(Clone, Debug, Default)]
pub struct HeadersLayer {
    request: Vec<HeaderRules>,
    response: Vec<HeaderRules>,
}

impl HeadersLayer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Rules applied to each request before the Service sees it.
    pub fn request(mut self, rules: HeaderRules) -> Self {
        self.request.push(rules);
        self
    }

    /// Rules applied to each response, in the order given.
    pub fn response(mut self, rules: HeaderRules) -> Self {
        self.response.push(rules);
        self
    }
}

impl HeadersLayer {
    /// Whether a rule reads `$remote_addr` or `$scheme`: the server must put the client
    /// in the request's extensions ([`crate::client`]).
    pub fn reads_client(&self) -> bool {
        self.request
            .iter()
            .chain(&self.response)
            .any(HeaderRules::reads_client)
    }
}

impl HeadersLayer {
    /// Whether a rule reads `$request_id`: a request-ID layer above must put it in the
    /// request's extensions.
    pub fn reads_request_id(&self) -> bool {
        self.request
            .iter()
            .chain(&self.response)
            .any(HeaderRules::reads_request_id)
    }
}

impl<S> Layer<S> for HeadersLayer {
    type Service = Headers<S>;

    fn layer(&self, inner: S) -> Headers<S> {
        let capture = self.response.iter().any(HeaderRules::uses_vars);
        Headers {
            inner,
            request: Arc::from(self.request.as_slice()),
            response: Arc::from(self.response.as_slice()),
            capture,
        }
    }
}
