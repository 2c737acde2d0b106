//! Internal rewrites: a request whose path matches a rule has its target rewritten before
//! the Service sees it; the client is not told. nginx's `rewrite … break`, Caddy's
//! `rewrite` and `uri`.
//!
//! Rules are tried in order and only the first that matches rewrites (a rewritten path is
//! not matched again, nor routed again). The target is a [template](crate::template) as
//! a redirect's. A target with no `?` keeps the request's query; one with a `?` replaces
//! it. The result is normalised with [`crate::path::normalize`] like any request's, and
//! one that can't be, that leaves the layer's prefix ([`RewriteLayer::within`]) or that
//! lands under a prefix it is told to keep out of ([`RewriteLayer::excluding`]: another
//! route's, with rules of its own), is refused with 400: a rewrite can't climb out of
//! where the request was routed. A rewritten request carries a [`Rewritten`] extension.
//!
//! ```
//! use axum::{routing::get, Router};
//! use gatehouse_layers::path_match::PathMatch;
//! use gatehouse_layers::rewrite::{RewriteLayer, RewriteRule};
//!
//! let rule = RewriteRule::new(PathMatch::regex(r"^/u/(\w+)$").unwrap(), "/users?name=$1")
//!     .unwrap();
//! let app: Router = Router::new()
//!     .route("/users", get(|| async { "a user" }))
//!     .layer(RewriteLayer::new().rule(rule));
//! # let _ = app;
//! ```

mod layer;
mod service;

pub use crate::answer::ResponseFuture;
pub use layer::RewriteLayer;
pub use service::Rewrite;

/// Put in a rewritten request's extensions: the target it came with.
#[derive(Clone, Debug)]
pub struct Rewritten {
    pub original: http::Uri,
}

use crate::path_match::PathMatch;
use crate::template::{Template, TemplateError};

/// One rewrite: which paths, and the target they get.
#[derive(Clone, Debug)]
pub struct RewriteRule {
    pub(crate) matches: PathMatch,
    pub(crate) to: Template,
}

impl RewriteRule {
    /// Paths that `matches` are rewritten to `to` (a template).
    pub fn new(matches: PathMatch, to: &str) -> Result<Self, TemplateError> {
        Ok(RewriteRule {
            matches,
            to: Template::parse(to, true)?,
        })
    }
}
