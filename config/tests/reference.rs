//! The configuration reference, `docs/src/configuration.md`, documents every key a file may
//! set and no other.
//!
//! The keys come from the code: a probe key placed in a table makes serde refuse it with
//! the list of fields that table accepts (every table denies unknown fields), under their
//! serde names and without the `#[serde(skip)]` ones. A field whose value is itself a table
//! (or an array of tables) takes the probe one level down and is walked in turn; any
//! other field is a key. In the reference, each key is a table row whose first cell is the
//! dotted key in backticks: `` | `routes.proxy.strict_paths` | ... ``.

use figment::error::Kind;
use figment::providers::{Format, Toml};
use figment::Figment;
use gatehouse_config::Config;
use std::collections::BTreeSet;

const PROBE: &str = "__reference_probe";
const REFERENCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/src/configuration.md");

#[derive(Clone, Copy)]
enum Shape {
    Table,
    ArrayOfTables,
}

/// The TOML value holding the probe at the end of `path`.
fn nested(path: &[(&str, Shape)]) -> String {
    let Some(((_, shape), rest)) = path.split_first() else {
        return format!("{{ {PROBE} = 1 }}");
    };
    let inner = match rest.first() {
        Some((key, _)) => format!("{{ {key} = {} }}", nested(rest)),
        None => nested(rest),
    };
    match shape {
        Shape::Table => inner,
        Shape::ArrayOfTables => format!("[{inner}]"),
    }
}

/// The fields the table at `path` accepts, if what is there is a table of known fields.
fn fields_at(path: &[(&str, Shape)]) -> Option<&'static [&'static str]> {
    let doc = match path.first() {
        Some((key, _)) => format!("{key} = {}", nested(path)),
        None => format!("{PROBE} = 1"),
    };
    let err = Figment::from(Toml::string(&doc))
        .extract::<Config>()
        .err()?;
    err.into_iter().find_map(|e| match e.kind {
        Kind::UnknownField(field, expected) if field == PROBE => Some(expected),
        _ => None,
    })
}

fn walk(
    path: &mut Vec<(&'static str, Shape)>,
    keys: &mut BTreeSet<String>,
    tables: &mut BTreeSet<String>,
) {
    let fields = fields_at(path).expect("a table of known fields");
    for &field in fields {
        let mut table = false;
        for shape in [Shape::Table, Shape::ArrayOfTables] {
            path.push((field, shape));
            if fields_at(path).is_some() {
                tables.insert(dotted(path));
                walk(path, keys, tables);
                table = true;
            }
            path.pop();
            if table {
                break;
            }
        }
        if !table {
            path.push((field, Shape::Table));
            keys.insert(dotted(path));
            path.pop();
        }
    }
}

fn dotted(path: &[(&str, Shape)]) -> String {
    path.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(".")
}

/// Every key and every table of the configuration, as dotted paths.
fn schema() -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut keys, mut tables) = (BTreeSet::new(), BTreeSet::new());
    walk(&mut Vec::new(), &mut keys, &mut tables);
    (keys, tables)
}

/// The code spans of a Markdown line: the odd pieces between backticks.
fn code_spans(line: &str) -> impl Iterator<Item = &str> {
    line.split('`').skip(1).step_by(2)
}

#[test]
fn the_walk_finds_keys_tables_and_renamed_fields() {
    let (keys, tables) = schema();
    for key in [
        "root",
        "timeouts.keep_alive",
        "tls.certs.cert",
        "acme.certificates.domains",
        "routes.static.open_file_cache.inactive",
        "routes.proxy.health_check.unhealthy",
        "routes.auth.jwt.require",
        "routes.auth.forward.url",
    ] {
        assert!(keys.contains(key), "{key} not found in {keys:?}");
    }
    assert!(tables.contains("routes.static") && tables.contains("tls.certs"));
    // Filled in by loading, never read from a file.
    assert!(!keys.contains("admin_token_resolved"));
}

#[test]
fn the_reference_documents_every_key_and_no_other() {
    let (keys, tables) = schema();
    let text = std::fs::read_to_string(REFERENCE).expect("docs/src/configuration.md");
    let top: BTreeSet<&str> = keys
        .iter()
        .chain(&tables)
        .map(|k| k.split('.').next().unwrap_or(k))
        .collect();

    let mut documented = BTreeSet::new();
    let mut twice = Vec::new();
    let mut unknown = Vec::new();
    for line in text.lines() {
        if line.starts_with("| `") {
            if let Some(key) = code_spans(line).next() {
                if !documented.insert(key.to_string()) {
                    twice.push(key.to_string());
                }
            }
        }
        // Anywhere in the text, a dotted name under a top-level key must exist (indexes,
        // as in `routes.0.name`, aside).
        for span in code_spans(line) {
            let parts: Vec<&str> = span.split('.').collect();
            let is_name = parts.len() > 1
                && top.contains(parts[0])
                && parts.iter().all(|p| {
                    !p.is_empty()
                        && p.bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
                });
            if !is_name {
                continue;
            }
            let name: Vec<&str> = parts
                .into_iter()
                .filter(|p| !p.bytes().all(|b| b.is_ascii_digit()))
                .collect();
            let name = name.join(".");
            if !keys.contains(&name) && !tables.contains(&name) {
                unknown.push(name);
            }
        }
    }
    let missing: Vec<&String> = keys.difference(&documented).collect();
    let stray: Vec<&String> = documented.difference(&keys).collect();
    assert!(
        missing.is_empty() && stray.is_empty() && twice.is_empty() && unknown.is_empty(),
        "docs/src/configuration.md against the schema:\n\
         keys with no row: {missing:?}\n\
         rows naming no key: {stray:?}\n\
         keys with two rows: {twice:?}\n\
         names in the text that are no key or table: {unknown:?}"
    );
}
