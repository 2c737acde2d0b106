use std::fmt;

/// One problem in the configuration: which key, which source set it, and why it is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Dotted key path, such as `routes.0.static.root`.
    pub key: String,
    /// Where the value came from: a file path, an environment variable, `default`, `cli`.
    pub source: String,
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} (from {})", self.key, self.reason, self.source)
    }
}

/// Every problem found in one load; never empty.
impl ConfigError {
    /// One of figment's errors, its source found in `fig` (see [`ConfigErrors::from_figment`]).
    pub(crate) fn from_figment(
        e: &figment::Error,
        fig: &figment::Figment,
        own_metadata: bool,
    ) -> Self {
        let key = if e.path.is_empty() {
            "(top level)".to_string()
        } else {
            key_path(&e.path)
        };
        let meta = e.metadata.as_ref().filter(|_| own_metadata);
        // Looked up by the path's own segments: the displayed key may be quoted.
        let source = describe_source(meta, fig, &e.path.join("."));
        ConfigError {
            key,
            source,
            reason: e.kind.to_string(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    pub fn single(e: ConfigError) -> Self {
        ConfigErrors(vec![e])
    }

    /// `own_metadata`: whether the error's metadata is `fig`'s (or, when false, a re-read's
    /// whose sources mean nothing, so the source is looked up in `fig` by key).
    pub(crate) fn from_figment(
        err: figment::Error,
        fig: &figment::Figment,
        own_metadata: bool,
    ) -> Self {
        let mut out: Vec<ConfigError> = err
            .into_iter()
            .map(|e| ConfigError::from_figment(&e, fig, own_metadata))
            .collect();
        if out.is_empty() {
            out.push(ConfigError {
                key: "(top level)".into(),
                source: "unknown".into(),
                reason: "the configuration could not be read".into(),
            });
        }
        ConfigErrors(out)
    }
}

/// A key's path as TOML would write it: a segment that is not a bare key (empty, or with a
/// dot, a space, a quote) is quoted, so an error always names something visible.
fn key_path(path: &[String]) -> String {
    let bare = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    path.iter()
        .map(|s| if bare(s) { s.clone() } else { format!("{s:?}") })
        .collect::<Vec<_>>()
        .join(".")
}

/// The name of the built-in defaults' provider, and what a key no source set comes from.
pub(crate) const DEFAULT_SOURCE: &str = "built-in default";

/// Where `key`'s value came from: `file:line:column`, the environment variable, the flag,
/// or the built-in default.
pub(crate) fn describe_source(
    meta: Option<&figment::Metadata>,
    fig: &figment::Figment,
    key: &str,
) -> String {
    let meta = meta.or_else(|| metadata_of(fig, key));
    match meta {
        Some(m) => match &m.source {
            Some(figment::Source::File(path)) => match locate(path, key) {
                Some((line, col)) => format!("{}:{line}:{col}", path.display()),
                None => path.display().to_string(),
            },
            Some(src) => src.to_string(),
            // Name the exact variable rather than figment's "`GATEHOUSE_` environment variable(s)".
            None if m.name.contains("environment") => format!(
                "environment variable GATEHOUSE_{}",
                key.to_ascii_uppercase().replace('.', "__")
            ),
            None => m.name.to_string(),
        },
        None => DEFAULT_SOURCE.into(),
    }
}

/// The metadata of the value at `key` in the merged sources, walking arrays by index
/// (`routes.1.path`), which figment's own `find_metadata` does not.
fn metadata_of<'a>(fig: &'a figment::Figment, key: &str) -> Option<&'a figment::Metadata> {
    use figment::value::Value;
    let root = fig.find_value("").ok()?;
    let mut v = &root;
    for seg in key.split('.') {
        v = match v {
            Value::Dict(_, d) => d.get(seg)?,
            Value::Array(_, a) => a.get(seg.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    fig.get_metadata(v.tag())
}

/// The line and column (from 1) in a TOML file where `key` is written: the key itself, or
/// for an element of an array of tables, its `[[header]]`. Where the file has only part of
/// the path, the deepest part it has.
pub(crate) fn locate(path: &std::path::Path, key: &str) -> Option<(usize, usize)> {
    let text = std::fs::read_to_string(path).ok()?;
    let span = span_of(&text, key)?;
    let before = text.get(..span)?;
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    Some((line, col))
}

fn span_of(text: &str, key: &str) -> Option<usize> {
    use toml_edit::{Item, Table, Value};
    enum Node<'a> {
        Table(&'a Table),
        Tables(&'a toml_edit::ArrayOfTables),
        Value(&'a Value),
    }
    fn of(item: &Item) -> Option<Node<'_>> {
        match item {
            Item::Table(t) => Some(Node::Table(t)),
            Item::ArrayOfTables(a) => Some(Node::Tables(a)),
            Item::Value(v) => Some(Node::Value(v)),
            Item::None => None,
        }
    }
    let doc = toml_edit::ImDocument::parse(text).ok()?;
    let mut node = Node::Table(doc.as_table());
    let mut found = None;
    for seg in key.split('.') {
        let index = seg.parse::<usize>().ok();
        let (next, span) = match node {
            Node::Table(t) => (t.get(seg).and_then(of), t.key(seg).and_then(|k| k.span())),
            Node::Tables(a) => {
                let t = index.and_then(|i| a.get(i));
                (t.map(Node::Table), t.and_then(|t| t.span()))
            }
            Node::Value(Value::InlineTable(t)) => (
                t.get(seg).map(Node::Value),
                t.key(seg).and_then(|k| k.span()),
            ),
            Node::Value(Value::Array(a)) => {
                let e = index.and_then(|i| a.get(i));
                (e.map(Node::Value), e.and_then(|e| e.span()))
            }
            Node::Value(_) => (None, None),
        };
        found = span.map(|r| r.start).or(found);
        match next {
            Some(n) => node = n,
            None => break,
        }
    }
    found
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "error: {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_in_the_file_by_line_and_column() {
        let text = "workers = 2\n[limits]\n  max_headers = 3\n[[routes]]\npath = \"/a\"\n[[routes]]\npath = \"/b\"\nproxy = { upstreams = [\"x\", \"y\"] }\n";
        let at = |key: &str| {
            span_of(text, key).map(|o| {
                let before = &text[..o];
                (
                    before.matches('\n').count() + 1,
                    o - before.rfind('\n').map_or(0, |p| p + 1) + 1,
                )
            })
        };
        assert_eq!(at("workers"), Some((1, 1)));
        assert_eq!(at("limits.max_headers"), Some((3, 3)));
        assert_eq!(at("routes.1"), Some((6, 1)));
        assert_eq!(at("routes.1.path"), Some((7, 1)));
        assert_eq!(at("routes.1.proxy.upstreams.1"), Some((8, 29)));
        // Only part of the path is in the file: the deepest part.
        assert_eq!(at("routes.0.static.root"), Some((4, 1)));
        assert_eq!(at("nothing"), None);
    }

    #[test]
    fn keys_that_are_not_bare_are_quoted() {
        let p = |v: &[&str]| key_path(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(p(&["timeouts", "header_read"]), "timeouts.header_read");
        assert_eq!(p(&[""]), "\"\"");
        assert_eq!(p(&["routes", "a.b"]), "routes.\"a.b\"");
    }
}
