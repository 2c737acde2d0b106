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
                e.path.join(".")
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
