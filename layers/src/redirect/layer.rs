use super::{Redirect, RedirectRule};
use std::sync::Arc;
use tower_layer::Layer;

/// Answers the requests its rules match with a redirect. See the [module docs](super).
#[derive(Clone, Debug, Default)]
pub struct RedirectLayer {
    rules: Vec<RedirectRule>,
}

impl RedirectLayer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a rule, tried after those before it.
    pub fn rule(mut self, rule: RedirectRule) -> Self {
        self.rules.push(rule);
        self
    }
}

impl RedirectLayer {
    /// Whether a target reads `$remote_addr` or `$scheme`: the server must put the client
    /// in the request's extensions ([`crate::client`]).
    pub fn reads_client(&self) -> bool {
        self.rules.iter().any(|r| r.to.reads_client())
    }

    /// Whether a target reads `$request_id`: a request-ID layer above must put it in the
    /// request's extensions.
    pub fn reads_request_id(&self) -> bool {
        self.rules.iter().any(|r| r.to.reads_request_id())
    }
}

impl<S> Layer<S> for RedirectLayer {
    type Service = Redirect<S>;

    fn layer(&self, inner: S) -> Redirect<S> {
        Redirect {
            inner,
            rules: Arc::from(self.rules.as_slice()),
        }
    }
}
