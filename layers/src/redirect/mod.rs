//! Redirects: a request whose path matches a rule is answered with its target and status
//! (301, 302, 307 or 308), and never reaches the Service. nginx's `return 301 …` and
//! `rewrite … permanent`, Caddy's `redir`.
//!
//! Rules are tried in order and the first that matches answers. The target is a
//! [template](crate::template): `$1`…`$9` are the match's captures (a prefix match's `$1`
//! is the rest of the path), `$request_uri` is path and query, `$host` and `$scheme` the
//! request's. A whole host is moved, path and query kept, with a rule that matches any
//! path and the target `https://example.com$request_uri`.
//!
//! The path matched is the one the server routed by: gatehouse normalises it first.
//!
//! ```
//! use axum::{routing::get, Router};
//! use gatehouse_layers::path_match::PathMatch;
//! use gatehouse_layers::redirect::{RedirectLayer, RedirectRule};
//! use http::StatusCode;
//!
//! let moved = RedirectRule::new(
//!     PathMatch::regex(r"^/blog/(\d+)$").unwrap(),
//!     "/posts/$1",
//!     StatusCode::MOVED_PERMANENTLY,
//! )
//! .unwrap();
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RedirectLayer::new().rule(moved));
//! # let _ = app;
//! ```

mod layer;
mod service;

pub use crate::answer::ResponseFuture;
pub use layer::RedirectLayer;
pub use service::Redirect;

use crate::path_match::PathMatch;
use crate::template::{Template, TemplateError};
use http::StatusCode;

/// One redirect: which paths, where to, and with which status.
#[derive(Clone, Debug)]
pub struct RedirectRule {
    pub(crate) matches: PathMatch,
    pub(crate) to: Template,
    pub(crate) status: StatusCode,
    /// The target, made once when it names no variable.
    pub(crate) literal: Option<http::HeaderValue>,
}

/// Why a redirect can't be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedirectError {
    Status(u16),
    Template(TemplateError),
}

impl std::fmt::Display for RedirectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RedirectError::Status(s) => {
                write!(
                    f,
                    "{s} is not a redirect's status (301, 302, 303, 307 or 308)"
                )
            }
            RedirectError::Template(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for RedirectError {}

impl RedirectRule {
    /// Paths that `matches` are sent to `to` (a template) with `status`.
    pub fn new(matches: PathMatch, to: &str, status: StatusCode) -> Result<Self, RedirectError> {
        if !matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308) {
            return Err(RedirectError::Status(status.as_u16()));
        }
        let to = Template::parse(to, true).map_err(RedirectError::Template)?;
        let literal = to
            .as_literal()
            .and_then(|t| http::HeaderValue::from_str(t).ok());
        Ok(RedirectRule {
            matches,
            to,
            status,
            literal,
        })
    }
}
