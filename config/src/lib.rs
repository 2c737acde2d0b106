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

mod error;
mod schema;
mod validate;

pub use error::{ConfigError, ConfigErrors};
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
        let mut fig = Figment::from(Serialized::defaults(Config::default()));
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
            fig = fig
                .merge(Serialized::default(key, value.clone()).profile(figment::Profile::Default));
        }
        Ok(fig)
    }

    /// Extracts and validates the configuration.
    pub fn load(&self) -> Result<Config, ConfigErrors> {
        let fig = self.figment()?;
        let mut config: Config = fig
            .extract()
            .map_err(|e| ConfigErrors::from_figment(e, &fig))?;
        validate::normalise_and_validate(&mut config, &fig)?;
        Ok(config)
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
