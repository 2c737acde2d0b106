use super::{IpFilter, IpRules, Net};
use crate::cidr::CidrSet;
use tower_layer::Layer;

/// Refuses the clients its rules don't let through. See the [module docs](super).
#[derive(Clone, Debug, Default)]
pub struct IpFilterLayer {
    rules: IpRules,
}

impl IpFilterLayer {
    /// No rules: every client with a known address passes.
    pub fn new() -> Self {
        Self::default()
    }

    /// The layer of rules made elsewhere (a configuration's).
    pub fn from_rules(rules: IpRules) -> Self {
        IpFilterLayer { rules }
    }

    /// Lets clients in `net` pass; once one network is allowed, only allowed ones pass.
    pub fn allow(mut self, net: Net) -> Self {
        self.rules.allow = add(&self.rules.allow, net);
        self
    }

    /// Refuses clients in `net`, even if allowed.
    pub fn deny(mut self, net: Net) -> Self {
        self.rules.deny = add(&self.rules.deny, net);
        self
    }

    /// Believes the `X-Forwarded-For` of peers in `net` about who the client is.
    pub fn trust_proxy(mut self, net: Net) -> Self {
        self.rules.trusted = add(&self.rules.trusted, net);
        self
    }
}

fn add(set: &CidrSet, net: Net) -> CidrSet {
    CidrSet::new(set.nets().chain(std::iter::once((net.addr, net.prefix))))
}

impl<S> Layer<S> for IpFilterLayer {
    type Service = IpFilter<S>;

    fn layer(&self, inner: S) -> IpFilter<S> {
        IpFilter {
            inner,
            rules: std::sync::Arc::new(self.rules.clone()),
        }
    }
}
