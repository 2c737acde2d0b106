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
#[derive(Debug, Clone)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    pub fn single(e: ConfigError) -> Self {
        ConfigErrors(vec![e])
    }

    pub(crate) fn from_figment(err: figment::Error, fig: &figment::Figment) -> Self {
        let mut out = Vec::new();
        for e in err {
            let key = if e.path.is_empty() {
                "(top level)".to_string()
            } else {
                key_path(&e.path)
            };
            let source = describe_source(e.metadata.as_ref(), fig, &key);
            out.push(ConfigError {
                key,
                source,
                reason: e.kind.to_string(),
            });
        }
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

pub(crate) fn describe_source(
    meta: Option<&figment::Metadata>,
    fig: &figment::Figment,
    key: &str,
) -> String {
    let meta = meta.or_else(|| fig.find_metadata(key));
    match meta {
        Some(m) => match &m.source {
            Some(src) => src.to_string(),
            // Name the exact variable rather than figment's "`GATEHOUSE_` environment variable(s)".
            None if m.name.contains("environment") => format!(
                "environment variable GATEHOUSE_{}",
                key.to_ascii_uppercase().replace('.', "__")
            ),
            None => m.name.to_string(),
        },
        None => "default".into(),
    }
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
    fn keys_that_are_not_bare_are_quoted() {
        let p = |v: &[&str]| key_path(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(p(&["timeouts", "header_read"]), "timeouts.header_read");
        assert_eq!(p(&[""]), "\"\"");
        assert_eq!(p(&["routes", "a.b"]), "routes.\"a.b\"");
    }
}
