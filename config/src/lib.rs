//! Typed configuration for gatehouse, loaded with [figment].
//!
//! Sources, later ones overriding earlier ones:
//! 1. built-in defaults ([`Config::default`]);
//! 2. a TOML file (`--config FILE`, or `gatehouse.toml` in the working directory);
//! 3. environment variables `GATEHOUSE_*`, with `__` for nesting
//!    (`GATEHOUSE_TIMEOUTS__KEEP_ALIVE=30s`);
//! 4. command-line flags, given to [`Loader::cli`].
//!
//! Unknown keys are errors, so a typo can't pass silently. [`Loader::load`] returns every
//! problem it finds, each with its key, the source that set it and the reason.
//!
//! ```
//! use gatehouse_config::Loader;
//! let root = std::env::temp_dir();
//! let config = Loader::new()
//!     .no_default_file()
//!     .no_env()
//!     .toml_str(format!("root = {:?}\nlisten = \"127.0.0.1:8080\"", root.display().to_string()))
//!     .load()
//!     .unwrap();
//! assert_eq!(config.routes.len(), 1); // with no [[routes]], one static route serves `root`
//! ```

#![forbid(unsafe_code)]

mod error;
mod rules;
mod schema;
mod validate;

pub use error::{ConfigError, ConfigErrors};
pub use rules::RuleError;
pub use schema::*;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use std::path::{Path, PathBuf};

/// The file read when no `--config` is given, if it exists in the working directory.
pub const DEFAULT_FILE: &str = "gatehouse.toml";

/// Builds a [`Config`] from defaults, a TOML file, the environment and CLI flags.
#[derive(Debug, Clone)]
pub struct Loader {
    file: Option<PathBuf>,
    default_file: bool,
    toml: Option<String>,
    env: bool,
    cli: Vec<(String, figment::value::Value)>,
}

impl Default for Loader {
    fn default() -> Self {
        Self::new()
    }
}

impl Loader {
    pub fn new() -> Self {
        Loader {
            file: None,
            default_file: true,
            toml: None,
            env: true,
            cli: Vec::new(),
        }
    }

    /// Reads this TOML file; it must exist.
    pub fn file(mut self, path: impl Into<PathBuf>) -> Self {
        self.file = Some(path.into());
        self
    }

    /// Don't look for `gatehouse.toml` in the working directory.
    pub fn no_default_file(mut self) -> Self {
        self.default_file = false;
        self
    }

    /// TOML text in place of a file (tests, embedding).
    pub fn toml_str(mut self, text: impl Into<String>) -> Self {
        self.toml = Some(text.into());
        self
    }

    /// Ignore `GATEHOUSE_*` environment variables.
    pub fn no_env(mut self) -> Self {
        self.env = false;
        self
    }

    /// A command-line override of one key (dotted for nesting), applied last.
    pub fn cli(mut self, key: &str, value: impl Into<figment::value::Value>) -> Self {
        self.cli.push((key.to_string(), value.into()));
        self
    }

    /// The merged sources, before extraction.
    pub fn figment(&self) -> Result<Figment, ConfigErrors> {
        let mut fig = Figment::from(Named {
            inner: Serialized::defaults(Config::default()),
            name: error::DEFAULT_SOURCE.into(),
        });
        match &self.file {
            Some(path) => {
                if !path.is_file() {
                    return Err(ConfigErrors::single(ConfigError {
                        key: "--config".into(),
                        source: path.display().to_string(),
                        reason: "the file does not exist or is not a regular file".into(),
                    }));
                }
                fig = fig.merge(Toml::file_exact(path));
            }
            None if self.default_file && Path::new(DEFAULT_FILE).is_file() => {
                fig = fig.merge(Toml::file_exact(DEFAULT_FILE));
            }
            None => {}
        }
        if let Some(text) = &self.toml {
            fig = fig.merge(Toml::string(text));
        }
        if self.env {
            fig = fig.merge(Env::prefixed("GATEHOUSE_").split("__"));
        }
        for (key, value) in &self.cli {
            fig = fig.merge(Named {
                inner: Serialized::default(key, value.clone()).profile(figment::Profile::Default),
                name: format!("the --{} flag", key.replace('_', "-")),
            });
        }
        Ok(fig)
    }

    /// Extracts and validates the configuration, reporting every problem: serde stops at
    /// the first wrong type or unknown key, so each is taken out in turn and the rest read
    /// again, as many times as there are problems.
    pub fn load(&self) -> Result<Config, ConfigErrors> {
        let fig = self.figment()?;
        let first = match fig.extract::<Config>() {
            Ok(mut config) => {
                validate::normalise_and_validate(&mut config, &fig)?;
                return Ok(config);
            }
            Err(e) => e,
        };
        let mut errors = ConfigErrors::from_figment(first.clone(), &fig, true).0;
        let Ok(mut data) = fig.find_value("") else {
            return Err(ConfigErrors(errors));
        };
        let mut removed: Vec<Vec<String>> = Vec::new();
        // Whether `a`'s segments begin with all of `b`'s.
        let under = |a: &[String], b: &[String]| a.len() >= b.len() && a[..b.len()] == *b;
        let mut last: Vec<figment::Error> = first.into_iter().collect();
        let mut complete = false;
        // Each round takes out at least one value, so this ends; the bound is for the
        // unforeseen (a path that can't be taken out is a stop, below).
        for _ in 0..256 {
            let mut progress = false;
            for e in &last {
                let mut path = e.path.clone();
                if let figment::error::Kind::UnknownField(name, _) = &e.kind {
                    if path.last() != Some(name) {
                        path.push(name.clone());
                    }
                }
                // A value in a list can't be taken out alone (the rest would be
                // renumbered): then the list goes, and what else is wrong in it is not seen.
                while !path.is_empty() {
                    if remove(&mut data, &path) {
                        removed.push(path);
                        progress = true;
                        break;
                    }
                    path.pop();
                }
            }
            if !progress {
                break;
            }
            let retry = Figment::from(Serialized::defaults(&data));
            match retry.extract::<Config>() {
                Ok(mut config) => {
                    complete = true;
                    // What validation finds in what was taken out (or in what holds it) is
                    // a consequence of the errors above, not news.
                    if let Err(more) = validate::normalise_and_validate(&mut config, &fig) {
                        let related = |key: &str| {
                            let key: Vec<String> = key.split('.').map(String::from).collect();
                            removed.iter().any(|p| under(&key, p) || under(p, &key))
                        };
                        errors.extend(more.0.into_iter().filter(|e| !related(&e.key)));
                    }
                    break;
                }
                Err(e) => {
                    last = e.into_iter().collect();
                    for e in &last {
                        // A required field taken out above is missing now: no news.
                        if let figment::error::Kind::MissingField(name) = &e.kind {
                            let mut p = e.path.clone();
                            p.push(name.to_string());
                            if removed.contains(&p) {
                                continue;
                            }
                        }
                        // The retry's own metadata names no source; the original figment does.
                        errors.push(ConfigError::from_figment(e, &fig, false));
                    }
                }
            }
        }
        if !complete {
            errors.push(ConfigError {
                key: "(top level)".into(),
                source: "the errors above".into(),
                reason: "further errors may be hidden behind these".into(),
            });
        }
        errors.dedup();
        Err(ConfigErrors(errors))
    }
}

/// A provider under a name a user can read: figment names `Serialized` values by the line
/// of gatehouse's code that made them, which would appear in errors as their source.
struct Named<P> {
    inner: P,
    name: String,
}

impl<P: figment::Provider> figment::Provider for Named<P> {
    fn metadata(&self) -> figment::Metadata {
        figment::Metadata::named(self.name.clone())
    }

    fn data(
        &self,
    ) -> Result<figment::value::Map<figment::Profile, figment::value::Dict>, figment::Error> {
        self.inner.data()
    }
}

/// Takes the value at `path` (dict keys and array indices) out of `value`.
fn remove(value: &mut figment::value::Value, path: &[String]) -> bool {
    use figment::value::Value;
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let mut v = value;
    for seg in parents {
        v = match v {
            Value::Dict(_, d) => match d.get_mut(seg) {
                Some(next) => next,
                None => return false,
            },
            Value::Array(_, a) => match seg.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                Some(next) => next,
                None => return false,
            },
            _ => return false,
        };
    }
    match v {
        Value::Dict(_, d) => d.remove(last).is_some(),
        // Taking an element out of a list would renumber the rest.
        _ => false,
    }
}

/// An address or CIDR (`10.0.0.0/8`, `::1`, `fd00::/8`): the network and prefix length.
pub fn parse_cidr(s: &str) -> Option<(std::net::IpAddr, u8)> {
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let ip: std::net::IpAddr = addr.trim().parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = match len {
        Some(l) => l.trim().parse::<u8>().ok().filter(|&l| l <= max)?,
        None => max,
    };
    Some((ip, len))
}
