use super::{Rewrite, RewriteRule};
use std::sync::Arc;
use tower_layer::Layer;

/// Rewrites the targets its rules match. See the [module docs](super).
#[derive(Clone, Debug, Default)]
pub struct RewriteLayer {
    rules: Vec<RewriteRule>,
    within: Option<String>,
}

impl RewriteLayer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a rule, tried after those before it.
    pub fn rule(mut self, rule: RewriteRule) -> Self {
        self.rules.push(rule);
        self
    }

    /// A rewritten path must stay under `prefix` (on whole segments), or the request is
    /// refused: the prefix a server routed the request by.
    pub fn within(mut self, prefix: &str) -> Self {
        let p = prefix.trim_end_matches('/');
        self.within = (!p.is_empty()).then(|| p.to_string());
        self
    }
}

impl<S> Layer<S> for RewriteLayer {
    type Service = Rewrite<S>;

    fn layer(&self, inner: S) -> Rewrite<S> {
        Rewrite {
            inner,
            rules: Arc::from(self.rules.as_slice()),
            within: self.within.as_deref().map(Arc::from),
        }
    }
}
