//! Text with `$variables`, parsed once at load: header values, redirect targets and
//! rewrites. nginx's spelling: `$host`, `${host}` where a name would run on, `$1`…`$9`
//! for a regex's captures and `$$` for a dollar.
//!
//! ```
//! use gatehouse_layers::template::{Template, Vars};
//!
//! let t = Template::parse("https://example.com$request_uri", false).unwrap();
//! let uri: http::Uri = "/a?b=1".parse().unwrap();
//! let vars = Vars::new(&uri);
//! assert_eq!(t.render(&vars, None), "https://example.com/a?b=1");
//! assert!(Template::parse("$nope", false).is_err());
//! ```

use std::fmt::Write as _;
use std::net::SocketAddr;

/// A variable a template may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Var {
    /// The request's host, without a port (the authority's, else `Host`'s).
    Host,
    /// The client's address (IP only).
    RemoteAddr,
    /// `http` or `https`, by the connection.
    Scheme,
    /// The request ID ([`crate::request_id`]), or empty.
    RequestId,
    /// Path and query.
    RequestUri,
    /// The path alone.
    Path,
    /// The query, without `?`.
    Query,
    /// `?` when there is a query, else empty (nginx's `$is_args`).
    IsArgs,
    /// The upstream that answered (responses of proxy routes), or empty.
    UpstreamAddr,
    /// A regex capture, `$1`…`$9` (for a prefix match, `$1` is the rest of the path).
    Capture(u8),
}

const NAMES: &[(&str, Var)] = &[
    ("host", Var::Host),
    ("remote_addr", Var::RemoteAddr),
    ("scheme", Var::Scheme),
    ("request_id", Var::RequestId),
    ("request_uri", Var::RequestUri),
    ("uri", Var::Path),
    ("path", Var::Path),
    ("query", Var::Query),
    ("args", Var::Query),
    ("is_args", Var::IsArgs),
    ("upstream_addr", Var::UpstreamAddr),
];

#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    Var(Var),
}

/// Parsed text with variables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    pieces: Vec<Piece>,
}

/// What a template's variables read: the request, and what layers learnt of it.
#[derive(Clone, Copy, Debug)]
pub struct Vars<'a> {
    pub uri: &'a http::Uri,
    pub host: Option<&'a str>,
    pub remote: Option<SocketAddr>,
    pub https: bool,
    pub request_id: Option<&'a str>,
    pub upstream: Option<&'a str>,
}

impl<'a> Vars<'a> {
    /// Variables of `uri` alone; the rest empty.
    pub fn new(uri: &'a http::Uri) -> Self {
        Vars {
            uri,
            host: None,
            remote: None,
            https: false,
            request_id: None,
            upstream: None,
        }
    }

    /// The variables of a request: its host, client, scheme and request ID as the server
    /// and the layers above put them in its extensions.
    pub fn of<B>(req: &'a http::Request<B>) -> Self {
        let ext = req.extensions();
        Vars {
            uri: req.uri(),
            host: host_of(req),
            remote: crate::client::client_addr_in(ext),
            https: crate::client::is_https(req),
            request_id: request_id_in(ext),
            upstream: None,
        }
    }
}

/// The request ID as text, in a response's extensions for the access log (put there by
/// [`crate::request_id`]; a request carries tower-http's `RequestId`).
#[derive(Clone, Debug)]
pub struct RequestIdText(pub http::HeaderValue);

/// The request's ID, from tower-http's `RequestId` extension (the `request-id` feature).
fn request_id_in(ext: &http::Extensions) -> Option<&str> {
    #[cfg(feature = "request-id")]
    if let Some(id) = ext.get::<tower_http::request_id::RequestId>() {
        return id.header_value().to_str().ok();
    }
    let _ = ext;
    None
}

/// The host a request names, without its port.
pub fn host_of<B>(req: &http::Request<B>) -> Option<&str> {
    let h = match req.uri().host() {
        Some(h) => h,
        None => req.headers().get(http::header::HOST)?.to_str().ok()?,
    };
    Some(strip_port(h))
}

fn strip_port(h: &str) -> &str {
    if h.starts_with('[') {
        return h.find(']').map_or(h, |i| &h[..=i]);
    }
    h.rsplit_once(':').map_or(h, |(host, _)| host)
}

/// Why a template can't be parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateError(pub String);

impl std::fmt::Display for TemplateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TemplateError {}

impl Template {
    /// Parses `text`; `captures` says whether `$1`…`$9` have a meaning here (a redirect's
    /// or rewrite's target).
    pub fn parse(text: &str, captures: bool) -> Result<Template, TemplateError> {
        let mut pieces = Vec::new();
        let mut lit = String::new();
        let mut rest = text;
        while let Some(at) = rest.find('$') {
            lit.push_str(&rest[..at]);
            rest = &rest[at + 1..];
            let (name, after) = if let Some(r) = rest.strip_prefix('{') {
                let end = r
                    .find('}')
                    .ok_or_else(|| TemplateError(format!("`${{` without `}}` in {text:?}")))?;
                (&r[..end], &r[end + 1..])
            } else if let Some(r) = rest.strip_prefix('$') {
                lit.push('$');
                rest = r;
                continue;
            } else if rest.starts_with(|c: char| c.is_ascii_digit()) {
                (&rest[..1], &rest[1..])
            } else {
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                (&rest[..end], &rest[end..])
            };
            let number = !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit());
            let var = match name.parse::<u8>().ok().filter(|_| number).ok_or(()) {
                Ok(n) if (1..=9).contains(&n) && captures => Var::Capture(n),
                Ok(_) if captures => {
                    return Err(TemplateError(format!("${name}: captures are $1 to $9")))
                }
                Ok(_) => {
                    return Err(TemplateError(format!(
                        "${name}: only a redirect's or rewrite's target has captures"
                    )))
                }
                Err(()) => NAMES
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| *v)
                    .ok_or_else(|| {
                        let known: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
                        TemplateError(format!(
                            "unknown variable ${name} (known: ${}; `$$` is a dollar)",
                            known.join(", $")
                        ))
                    })?,
            };
            if !lit.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut lit)));
            }
            pieces.push(Piece::Var(var));
            rest = after;
        }
        lit.push_str(rest);
        if !lit.is_empty() {
            pieces.push(Piece::Text(lit));
        }
        Ok(Template { pieces })
    }

    /// A path under a root that may read the request's path only (`$path`, `$uri`): a
    /// `try_files` entry.
    pub fn parse_path(text: &str) -> Result<Template, TemplateError> {
        let t = Template::parse(text, false)?;
        let path_first = ["$path", "$uri", "${path}", "${uri}"];
        if !(text.starts_with('/') || path_first.iter().any(|p| text.starts_with(p))) {
            return Err(TemplateError(format!(
                "{text:?} is not a path: it starts with '/' or $path"
            )));
        }
        let other = t
            .pieces
            .iter()
            .any(|p| matches!(p, Piece::Var(v) if *v != Var::Path));
        if other {
            return Err(TemplateError(format!(
                "{text:?}: a try_files entry may use $path (or $uri) only"
            )));
        }
        Ok(t)
    }

    /// The text, if the template names no variable.
    pub fn as_literal(&self) -> Option<&str> {
        match self.pieces.as_slice() {
            [] => Some(""),
            [Piece::Text(t)] => Some(t),
            _ => None,
        }
    }

    /// Whether the template reads `var`.
    pub fn uses(&self, var: Var) -> bool {
        self.pieces.contains(&Piece::Var(var))
    }

    /// Whether the template reads what a server says of the connection: `$remote_addr`
    /// or `$scheme` (from [`ClientAddr`](crate::client::ClientAddr) and
    /// [`Https`](crate::client::Https)).
    pub fn reads_client(&self) -> bool {
        self.uses(Var::RemoteAddr) || self.uses(Var::Scheme)
    }

    /// Whether the template reads `$request_id` (from tower-http's `RequestId` extension).
    pub fn reads_request_id(&self) -> bool {
        self.uses(Var::RequestId)
    }

    /// Whether the template reads a regex's captures.
    pub fn uses_captures(&self) -> bool {
        self.pieces
            .iter()
            .any(|p| matches!(p, Piece::Var(Var::Capture(_))))
    }

    /// The text with the variables' values; `captures` are a regex's (`$1` is index 1).
    pub fn render(&self, vars: &Vars<'_>, captures: Option<&[Option<&str>]>) -> String {
        let mut out = String::new();
        for p in &self.pieces {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Var(v) => match v {
                    Var::Host => out.push_str(vars.host.unwrap_or("")),
                    Var::RemoteAddr => {
                        if let Some(a) = vars.remote {
                            let _ = write!(out, "{}", a.ip());
                        }
                    }
                    Var::Scheme => out.push_str(if vars.https { "https" } else { "http" }),
                    Var::RequestId => out.push_str(vars.request_id.unwrap_or("")),
                    Var::RequestUri => out.push_str(
                        vars.uri
                            .path_and_query()
                            .map_or(vars.uri.path(), |pq| pq.as_str()),
                    ),
                    Var::Path => out.push_str(vars.uri.path()),
                    Var::Query => out.push_str(vars.uri.query().unwrap_or("")),
                    Var::IsArgs => {
                        if vars.uri.query().is_some() {
                            out.push('?')
                        }
                    }
                    Var::UpstreamAddr => out.push_str(vars.upstream.unwrap_or("")),
                    Var::Capture(n) => {
                        let cap = captures
                            .and_then(|c| c.get(usize::from(*n)).copied().flatten())
                            .unwrap_or("");
                        // A capture comes from the normalised path, where `&`, `=` and
                        // `+` are decoded: past the `?` they would become the query's syntax
                        // (`/u/bob%26role%3Dadmin` as `?name=bob&role=admin`), so they are
                        // escaped there, as nginx escapes captures in a rewrite's arguments.
                        // The rest is escaped already (`%20`, `%3B`, `%C3%A9`).
                        if out.contains('?') {
                            out.extend(percent_encoding::utf8_percent_encode(cap, QUERY_DATA));
                        } else {
                            out.push_str(cap)
                        }
                    }
                },
            }
        }
        out
    }
}

/// What a capture written into a query escapes: the bytes the normalised path leaves
/// decoded that would end or split a parameter (RFC 3986 §3.4 leaves them to the
/// application). The path's other reserved bytes (`%`, space, `#`, `;`, `?`) come in it
/// escaped already.
const QUERY_DATA: &percent_encoding::AsciiSet =
    &percent_encoding::CONTROLS.add(b'&').add(b'=').add(b'+');

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capture_in_the_query_is_escaped() {
        // As the router hands them over: the normalised path of `/u/bob%26role%3Dadmin+1`
        // keeps `&`, `=` and `+` decoded, and `%20`, `%3B`, `%C3%A9` escaped.
        let uri: http::Uri = "/u/x".parse().unwrap();
        let vars = Vars::new(&uri);
        let t = Template::parse("/users/$1?name=$1&x=1", true).unwrap();
        let cap = "bob&role=admin+1%20caf%C3%A9%3B";
        let caps = [Some("/u/x"), Some(cap)];
        assert_eq!(
            t.render(&vars, Some(&caps)),
            format!("/users/{cap}?name=bob%26role%3Dadmin%2B1%20caf%C3%A9%3B&x=1")
        );
    }

    #[test]
    fn variables_captures_and_dollars() {
        let uri: http::Uri = "/x/y?q=1".parse().unwrap();
        let mut vars = Vars::new(&uri);
        vars.host = Some("a.test");
        vars.remote = Some("[2001:db8::1]:5000".parse().unwrap());
        vars.https = true;
        vars.request_id = Some("abc");
        let t = Template::parse(
            "$scheme://${host}x/$1-$2$$ $remote_addr $request_id $uri$is_args$args",
            true,
        )
        .unwrap();
        let caps = [Some("/x/y"), Some("y"), None];
        assert_eq!(
            t.render(&vars, Some(&caps)),
            "https://a.testx/y-$ 2001:db8::1 abc /x/y?q=1"
        );
        assert_eq!(
            Template::parse("plain", false).unwrap().as_literal(),
            Some("plain")
        );
        assert_eq!(
            Template::parse("a$$b", false).unwrap().as_literal(),
            Some("a$b")
        );
        assert!(Template::parse("$1", false).is_err());
        assert!(Template::parse("$0", true).is_err());
        assert!(Template::parse("${+1}", true).is_err());
        assert!(Template::parse_path("${path}.html").is_ok());
        assert!(Template::parse_path("$host/x").is_err());
        assert!(Template::parse("${host", false).is_err());
        assert!(Template::parse("$hostx", false)
            .unwrap_err()
            .0
            .contains("$hostx"));
    }

    #[test]
    fn host_without_port() {
        for (h, want) in [
            ("a.test", "a.test"),
            ("a.test:8080", "a.test"),
            ("[::1]:80", "[::1]"),
            ("[::1]", "[::1]"),
        ] {
            assert_eq!(strip_port(h), want);
        }
    }
}
