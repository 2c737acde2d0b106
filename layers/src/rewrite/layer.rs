use super::{Rewrite, RewriteRule};
use std::sync::Arc;
use tower_layer::Layer;

/// Rewrites the targets its rules match. See the [module docs](super).
#[derive(Clone, Debug, Default)]
pub struct RewriteLayer {
    rules: Vec<RewriteRule>,
    within: Option<String>,
    excluding: Vec<String>,
    loosely: bool,
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

impl RewriteLayer {
    /// A rewritten path must not be `prefix` or under it (on whole segments): the prefix of
    /// another route nested in this one's, whose rules it would skip.
    pub fn excluding(mut self, prefix: &str) -> Self {
        let p = prefix.trim_end_matches('/');
        if !p.is_empty() {
            self.excluding.push(p.to_string());
        }
        self
    }

    /// Holds a rewritten path to [`within`](Self::within) and
    /// [`excluding`](Self::excluding) as a lenient backend reads it too
    /// ([`crate::path::loose`], [`crate::path::loose_trimmed`]): for a proxy, whose
    /// upstream may fold case or trim segments (`/app/ADMIN/x`, `/app/admin%20/x` are
    /// `/app/admin/x` to some).
    pub fn read_loosely(mut self) -> Self {
        self.loosely = true;
        self
    }

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

impl<S> Layer<S> for RewriteLayer {
    type Service = Rewrite<S>;

    fn layer(&self, inner: S) -> Rewrite<S> {
        Rewrite {
            inner,
            rules: Arc::from(self.rules.as_slice()),
            within: self.within.as_deref().map(Arc::from),
            excluding: self
                .excluding
                .iter()
                .map(|p| Arc::from(p.as_str()))
                .collect(),
            loose: self.loosely.then(|| {
                Arc::new(super::service::LooseBounds {
                    within: self.within.as_deref().map(crate::path::loose),
                    excluding: self
                        .excluding
                        .iter()
                        .map(|p| crate::path::loose(p))
                        .collect(),
                })
            }),
        }
    }
}
