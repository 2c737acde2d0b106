//! Header rules: `set`, `add` and `remove` on responses (nginx's `add_header`, Caddy's
//! `header`) and on requests before the Service (nginx's `proxy_set_header`, Caddy's
//! `header_up`).
//!
//! A rule set applies in one order: `remove`, then `set` (replacing any field of the
//! name), then `add` (appending one more). Values may name [variables](crate::template):
//! `$host`, `$remote_addr`, `$scheme`, `$request_id`, and on a response `$upstream_addr`.
//! A response rule set may be restricted to statuses (`2xx`, `404`): unlike nginx's
//! `add_header` without `always`, a rule set with no statuses applies to every response,
//! errors included. [`HeaderRules::reserved_name`] names a field a rule should not touch
//! (framing, connection-specific, and a request's `Host`); gatehouse's configuration refuses
//! such rules.
//!
//! ```
//! use axum::{routing::get, Router};
//! use gatehouse_layers::headers::{HeaderRules, HeadersLayer};
//!
//! let security = HeaderRules::new()
//!     .set("X-Frame-Options", "DENY").unwrap()
//!     .remove("Server").unwrap();
//! let cache = HeaderRules::new()
//!     .set("Cache-Control", "public, max-age=3600").unwrap()
//!     .statuses(["2xx"]).unwrap();
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(HeadersLayer::new().response(security).response(cache));
//! # let _ = app;
//! ```

mod future;
mod layer;
mod service;

pub use future::ResponseFuture;
pub use layer::HeadersLayer;
pub use service::Headers;

use crate::template::{Template, TemplateError, Vars};
use http::{HeaderMap, HeaderName, HeaderValue};

/// A header value: fixed, or rendered per request.
#[derive(Clone, Debug)]
enum Value {
    Fixed(HeaderValue),
    Template(Template),
}

impl Value {
    fn parse(text: &str) -> Result<Value, HeaderRuleError> {
        let t = Template::parse(text, false).map_err(HeaderRuleError::Template)?;
        match t.as_literal() {
            Some(lit) => HeaderValue::from_str(lit)
                .map(Value::Fixed)
                .map_err(|_| HeaderRuleError::Value(text.to_string())),
            None => Ok(Value::Template(t)),
        }
    }

    /// The value, or `None` if what the variables held can't be a field value.
    fn get(&self, vars: &Vars<'_>) -> Option<HeaderValue> {
        match self {
            Value::Fixed(v) => Some(v.clone()),
            Value::Template(t) => HeaderValue::try_from(t.render(vars, None)).ok(),
        }
    }
}

/// Statuses as a bit set over 100..=999.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Statuses([u64; 16]);

impl Statuses {
    fn contains(&self, status: u16) -> bool {
        let s = usize::from(status);
        s < 1024 && self.0[s / 64] & (1 << (s % 64)) != 0
    }

    fn insert(&mut self, s: u16) {
        let s = usize::from(s);
        self.0[s / 64] |= 1 << (s % 64);
    }
}

/// Why a rule can't be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderRuleError {
    Name(String),
    Value(String),
    Status(String),
    Template(TemplateError),
}

impl std::fmt::Display for HeaderRuleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderRuleError::Name(n) => write!(f, "{n:?} is not a header field name"),
            HeaderRuleError::Value(v) => write!(
                f,
                "{v:?} is not a header field value (no control characters)"
            ),
            HeaderRuleError::Status(s) => write!(
                f,
                "{s:?} is not a status or class (`404`, `2xx`, from 100 to 999)"
            ),
            HeaderRuleError::Template(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for HeaderRuleError {}

/// One set of rules: what it removes, sets and adds, and (on responses) for which
/// statuses.
#[derive(Clone, Debug, Default)]
pub struct HeaderRules {
    statuses: Option<Statuses>,
    remove: Vec<HeaderName>,
    set: Vec<(HeaderName, Value)>,
    add: Vec<(HeaderName, Value)>,
}

fn name(n: &str) -> Result<HeaderName, HeaderRuleError> {
    HeaderName::from_bytes(n.as_bytes()).map_err(|_| HeaderRuleError::Name(n.to_string()))
}

fn reserved(n: &HeaderName, request: bool) -> Option<&'static str> {
    use http::header::{CONNECTION, CONTENT_LENGTH, HOST, TE, TRAILER, TRANSFER_ENCODING, UPGRADE};
    if n == CONTENT_LENGTH || n == TRANSFER_ENCODING || n == TRAILER {
        Some("it frames the message, and only the server writes it")
    } else if n == CONNECTION
        || n == TE
        || n == UPGRADE
        || n == "keep-alive"
        || n == "proxy-connection"
    {
        Some("it belongs to one connection, and only the server writes it")
    } else if request && n == HOST {
        Some("the route was chosen by it; routes.proxy.keep_host says which Host the upstream gets")
    } else {
        None
    }
}

impl HeaderRules {
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces every field `name` with one of `value`.
    pub fn set(mut self, name_: &str, value: &str) -> Result<Self, HeaderRuleError> {
        self.set.push((name(name_)?, Value::parse(value)?));
        Ok(self)
    }

    /// Appends a field `name` of `value`.
    pub fn add(mut self, name_: &str, value: &str) -> Result<Self, HeaderRuleError> {
        self.add.push((name(name_)?, Value::parse(value)?));
        Ok(self)
    }

    /// Removes every field `name`.
    pub fn remove(mut self, name_: &str) -> Result<Self, HeaderRuleError> {
        self.remove.push(name(name_)?);
        Ok(self)
    }

    /// Applies (on responses) only to these statuses: `"404"` or a class, `"2xx"`.
    pub fn statuses<I, S>(mut self, list: I) -> Result<Self, HeaderRuleError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let set = self.statuses.get_or_insert(Statuses([0; 16]));
        for s in list {
            let s = s.as_ref();
            let bad = || HeaderRuleError::Status(s.to_string());
            match s.as_bytes() {
                [c @ b'1'..=b'9', b'x' | b'X', b'x' | b'X'] => {
                    let base = u16::from(c - b'0') * 100;
                    (base..base + 100).for_each(|v| set.insert(v));
                }
                _ => match s.parse::<u16>() {
                    Ok(v) if (100..=999).contains(&v) && s.bytes().all(|b| b.is_ascii_digit()) => {
                        set.insert(v)
                    }
                    _ => return Err(bad()),
                },
            }
        }
        Ok(self)
    }

    /// A name these rules may not touch, with why: the fields that frame a message or
    /// belong to one connection (RFC 9110 §7.6.1, RFC 9112 §6, RFC 9113 §8.2.2) are the
    /// server's and the proxy's to write, and on a request `Host` is what the route was
    /// chosen by. A rule that set `Content-Length` or `Transfer-Encoding` could frame a
    /// message differently from its body, which is how requests are smuggled.
    pub fn reserved_name(&self, request: bool) -> Option<(&HeaderName, &'static str)> {
        let names = self
            .remove
            .iter()
            .chain(self.set.iter().map(|(n, _)| n))
            .chain(self.add.iter().map(|(n, _)| n));
        names
            .into_iter()
            .find_map(|n| reserved(n, request).map(|why| (n, why)))
    }

    fn applies(&self, status: u16) -> bool {
        self.statuses.as_ref().is_none_or(|s| s.contains(status))
    }

    fn values(&self) -> impl Iterator<Item = &Value> {
        self.set.iter().chain(&self.add).map(|(_, v)| v)
    }

    fn reads_client(&self) -> bool {
        self.values()
            .any(|v| matches!(v, Value::Template(t) if t.reads_client()))
    }

    fn reads_request_id(&self) -> bool {
        self.values()
            .any(|v| matches!(v, Value::Template(t) if t.reads_request_id()))
    }

    fn uses_vars(&self) -> bool {
        self.values().any(|v| matches!(v, Value::Template(_)))
    }

    fn apply(&self, headers: &mut HeaderMap, vars: &Vars<'_>) {
        for n in &self.remove {
            headers.remove(n);
        }
        for (n, v) in &self.set {
            match v.get(vars) {
                Some(v) => {
                    headers.insert(n.clone(), v);
                }
                None => {
                    headers.remove(n);
                }
            }
        }
        for (n, v) in &self.add {
            if let Some(v) = v.get(vars) {
                headers.append(n.clone(), v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_take_codes_and_classes() {
        let r = HeaderRules::new().statuses(["2xx", "404"]).unwrap();
        for (s, want) in [
            (200, true),
            (299, true),
            (304, false),
            (404, true),
            (500, false),
        ] {
            assert_eq!(r.applies(s), want, "{s}");
        }
        assert!(HeaderRules::new().applies(503));
        for bad in ["0xx", "99", "1000", "2x", "abc", "+200"] {
            assert!(HeaderRules::new().statuses([bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn remove_then_set_then_add() {
        let r = HeaderRules::new()
            .remove("server")
            .unwrap()
            .set("X-A", "1")
            .unwrap()
            .add("X-A", "2")
            .unwrap()
            .set("X-Host", "$host")
            .unwrap();
        let mut h = HeaderMap::new();
        h.insert("server", HeaderValue::from_static("x"));
        h.append("x-a", HeaderValue::from_static("0"));
        h.append("x-a", HeaderValue::from_static("00"));
        let uri: http::Uri = "/".parse().unwrap();
        let mut vars = Vars::new(&uri);
        vars.host = Some("a.test");
        r.apply(&mut h, &vars);
        assert!(h.get("server").is_none());
        let a: Vec<_> = h.get_all("x-a").iter().collect();
        assert_eq!(a, ["1", "2"]);
        assert_eq!(h["x-host"], "a.test");
        assert!(HeaderRules::new().set("bad name", "x").is_err());
        assert!(HeaderRules::new().set("x", "a\nb").is_err());
        assert!(HeaderRules::new().set("x", "$nope").is_err());
    }
}
