//! Configuration loading: TOML text through `gatehouse_config::Loader` (figment extraction,
//! then normalisation and validation), with no file and no environment.
//!
//! Properties:
//! - loading never panics: it gives a configuration, or errors;
//! - errors are never an empty list, and each names a key and a reason, which its message
//!   shows;
//! - a loaded configuration has a listener and at least one route, unique route names,
//!   `/`-rooted paths and a root for each static route;
//! - normalising is idempotent: a loaded configuration written back to TOML loads to itself.
#![no_main]

use gatehouse_config::{Config, ConfigErrors, Loader};
use libfuzzer_sys::fuzz_target;
use std::collections::HashSet;

fn load(text: &str) -> Result<Config, ConfigErrors> {
    Loader::new()
        .no_default_file()
        .no_env()
        .toml_str(text)
        .load()
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match load(text) {
        Err(errors) => {
            assert!(!errors.0.is_empty(), "an empty error list for {text:?}");
            let shown = errors.to_string();
            for e in &errors.0 {
                assert!(!e.key.is_empty(), "an error without a key: {e:?}");
                assert!(!e.reason.is_empty(), "an error without a reason: {e:?}");
                assert!(
                    shown.contains(&e.key),
                    "{shown:?} does not name {:?}",
                    e.key
                );
            }
        }
        Ok(config) => {
            assert!(!config.listen.is_empty());
            assert!(!config.routes.is_empty());
            let mut names = HashSet::new();
            for r in &config.routes {
                let name = r.name.as_deref().expect("every route is named");
                assert!(names.insert(name), "two routes named {name:?}");
                assert!(r.path.starts_with('/'), "route path {:?}", r.path);
                if let Some(st) = &r.static_files {
                    assert!(st.root.is_some(), "route {name:?} has no root");
                }
            }
            // Written back out, the normalised configuration loads to itself.
            let Ok(again) = toml::to_string(&config) else {
                return;
            };
            match load(&again) {
                Ok(reloaded) => assert_eq!(reloaded, config, "{again}"),
                Err(e) => panic!("{text:?} loaded, but as written back it fails:\n{again}\n{e}"),
            }
        }
    }
});
