//! The gateway's integration tests, one module per feature as one test binary: 34 binaries
//! each linking the gateway and compiling `common` again were most of `cargo test`'s build.
//! A test that reads a process-wide figure (the global metrics recorder's counts, the
//! process's peak RSS) is a binary of its own: see `[[test]]` in `gateway/Cargo.toml`.

mod common;

mod access_log;
mod acme;
mod admin;
mod auth;
mod boundary;
mod cache;
mod cache_vs_nginx;
mod cli;
mod compression;
mod conditional;
mod cors;
mod cors_browser;
mod dashboards;
mod error_pages;
mod file_faults;
mod h2_floods;
mod headers;
mod hostile;
mod http3;
mod open_file_cache;
mod parking;
mod path_safety;
mod proxy_protocol;
mod proxy_tls;
mod range;
mod redirects;
mod reload;
mod request_id;
mod routing;
mod rules_vs_nginx;
mod server;
mod slowloris;
mod static_files;
mod tls;
mod try_files;
mod upstream_ejection;
mod upstream_framing;

/// Every test file is built: a file under `tests/` that is neither a module here nor a
/// `[[test]]` of its own (`autotests` is off) would be silently skipped.
#[test]
fn every_test_file_is_built() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("Cargo.toml");
    let this = include_str!("features.rs");
    for entry in std::fs::read_dir(dir.join("tests")).expect("tests/") {
        let name = entry
            .expect("entry")
            .file_name()
            .into_string()
            .expect("UTF-8 name");
        let Some(stem) = name.strip_suffix(".rs") else {
            continue;
        };
        if stem == "features" {
            continue;
        }
        let declared = this.lines().any(|l| l == format!("mod {stem};"))
            || manifest.contains(&format!("path = \"tests/{name}\""));
        assert!(
            declared,
            "tests/{name} is not built: add `mod {stem};` to tests/features.rs"
        );
    }
}
