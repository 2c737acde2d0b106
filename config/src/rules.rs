//! The header, redirect and rewrite rules a route's configuration makes, built by the
//! layers that run them. An error names the key under the route and says why.

use crate::schema::{HeaderRulesConfig, RedirectConfig, RewriteConfig};
use gatehouse_layers::headers::HeaderRules;
use gatehouse_layers::path_match::PathMatch;
use gatehouse_layers::redirect::RedirectRule;
use gatehouse_layers::rewrite::RewriteRule;

/// A rule that can't be made: the key under the rule's own (`set.X-A`, `regex`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleError {
    pub key: String,
    pub reason: String,
}

fn err(key: impl Into<String>, reason: impl std::fmt::Display) -> RuleError {
    RuleError {
        key: key.into(),
        reason: reason.to_string(),
    }
}

impl HeaderRulesConfig {
    /// The rule set; `response` says whether `statuses` may be given.
    pub fn rules(&self, response: bool) -> Result<HeaderRules, RuleError> {
        let mut r = HeaderRules::new();
        for n in &self.remove {
            r = r.remove(n).map_err(|e| err("remove", e))?;
        }
        for (n, v) in &self.set {
            r = r.set(n, v).map_err(|e| err(format!("set.{n}"), e))?;
        }
        for (n, v) in &self.add {
            r = r.add(n, v).map_err(|e| err(format!("add.{n}"), e))?;
        }
        if let Some((n, why)) = r.reserved_name(!response) {
            let key = if self.remove.iter().any(|x| n == x.as_str()) {
                "remove".to_string()
            } else if let Some(k) = self.set.keys().find(|k| n == k.as_str()) {
                format!("set.{k}")
            } else {
                let k = self.add.keys().find(|k| n == k.as_str());
                format!("add.{}", k.map_or(n.as_str(), |k| k.as_str()))
            };
            return Err(err(key, format!("{n} can't be changed by a rule: {why}")));
        }
        if !self.statuses.is_empty() {
            if !response {
                return Err(err("statuses", "a request has no status: responses only"));
            }
            r = r.statuses(&self.statuses).map_err(|e| err("statuses", e))?;
        }
        Ok(r)
    }
}

fn path_match(
    exact: &Option<String>,
    prefix: &Option<String>,
    regex: &Option<String>,
) -> Result<PathMatch, RuleError> {
    let slash = |key: &str, p: &str| {
        if p.starts_with('/') {
            Ok(())
        } else {
            Err(err(key, format!("{p:?} must start with '/'")))
        }
    };
    match (exact, prefix, regex) {
        (None, None, None) => Ok(PathMatch::Any),
        (Some(e), None, None) => slash("exact", e).map(|()| PathMatch::Exact(e.clone())),
        (None, Some(p), None) => slash("prefix", p).map(|()| PathMatch::Prefix(p.clone())),
        (None, None, Some(r)) => PathMatch::regex(r).map_err(|e| err("regex", e)),
        _ => Err(err("regex", "give one of exact, prefix and regex, or none")),
    }
}

impl RedirectConfig {
    pub fn rule(&self) -> Result<RedirectRule, RuleError> {
        let m = path_match(&self.exact, &self.prefix, &self.regex)?;
        let status = http::StatusCode::from_u16(self.status).map_err(|e| err("status", e))?;
        RedirectRule::new(m, &self.to, status).map_err(|e| match e {
            gatehouse_layers::redirect::RedirectError::Status(_) => err("status", e),
            _ => err("to", e),
        })
    }
}

impl RewriteConfig {
    pub fn rule(&self) -> Result<RewriteRule, RuleError> {
        let m = path_match(&self.exact, &self.prefix, &self.regex)?;
        if !self.to.starts_with('/') {
            return Err(err(
                "to",
                "a rewrite's target is a path: it starts with '/'",
            ));
        }
        RewriteRule::new(m, &self.to).map_err(|e| err("to", e))
    }
}
