//! One canonical request (issue 28): `gatehouse::fuzzing::route` (the routing decision
//! `GatewayRouter` runs) over small route tables and request targets, and
//! `gatehouse::fuzzing::host` (the front's canonical `Host`, and the host the table is
//! searched by) over targets and `Host` fields.
//!
//! Properties:
//! - when a proxy route `i` is given the target `t`, every lenient reading of `t` (decoded
//!   once with `%2F` and `%5C` as separators and dots resolved; the same ignoring case;
//!   segments trimmed of white space and trailing dots, before or after the dots are
//!   resolved; and with `strict_paths`, decoded twice, and Tomcat's `;` parameters
//!   dropped) chooses route `i` again: by the longest prefix on whole segments, without
//!   case for the readings that ignore it. For a route that strips its prefix, the reading
//!   is put back under the prefix and may not climb above it with `..`;
//! - a static route's files are chosen by the same route (gatehouse decodes the target
//!   once more, and resolves its dots);
//! - a refusal is a 400, or a 404 when no route is the root;
//! - a plain target (lower-case letters and digits in non-empty segments) over lower-case
//!   prefixes is never refused, and goes to the longest prefix as sent (stripped of its
//!   prefix for a route that strips it);
//! - a `Host` the front accepts is read by a lenient backend (port and trailing dot
//!   dropped, case ignored) as the host the route table was searched by, follows the
//!   `host[:port]` grammar, and is the absolute-form target's authority when there is one;
//! - nothing panics.
//!
//! Text input (the seeds): `target: <request target>`, any `route: <path> [strip]
//! [relaxed] [static]` (else `/api` and `/api/admin`, strict proxies that keep their
//! prefix, as in `gateway/tests/boundary.rs`), any `host: <value>` (else `Host: t`), and
//! `h2: on`.
#![no_main]

mod common;

use arbitrary::Arbitrary;
use gatehouse::fuzzing::{host, route, Outcome, Route};
use libfuzzer_sys::fuzz_target;

/// Route paths as the configuration allows them. A prefix is matched against the
/// normalised target, re-encoded: `/a%20b` is the path `/a b`, and `/a%25b` is `/a%b`.
const PREFIXES: &[&str] = &[
    "/a%20b",
    "/a%25b",
    "/",
    "/api",
    "/api/admin",
    "/API/x",
    "/api/Admin",
    "/a;b",
    "/admin.",
    "/admin",
    "/x",
    "/api/x",
    "/api/admin/y",
    "/Api",
    "/b",
    "/api/admin.",
];

/// The pieces that tell readers apart.
const PIECES: &[&str] = &[
    "/", "/", "/", "api", "admin", "ADMIN", "Admin", "API", "x", "y", "a", "b", "dmin", ".", "..",
    "...", "%2e", "%2E", "%2e%2e", "%2f", "%2F", "%5c", "%5C", ";", ";x", "%3b", "%25", "%2561",
    "%252e", "%252f", "%61", "%41", "%20", "%09", "%0b", "%c2%a0", "//", "..%2f", "?", "#", "\\",
    "%00", "%ff", "%c3%a4", "%", "%2", " ", "+", "~", "%7e", "admin.", "admin%20",
];

const HOSTS: &[&str] = &[
    "a.test",
    "A.Test",
    "a.test.",
    "a.test:80",
    "A.TEST.:8080",
    "b.test",
    "[::1]",
    "[::1]:80",
    "[::FFFF:127.0.0.1]",
    "[::1",
    "a..b",
    "u@a.test",
    "%61.test",
    "a.test,b.test",
    "",
    "a.test:",
    "a.test:99999",
    "a test",
    "a.test/x",
    "a_b.test",
    "*.test",
    "127.0.0.1:65535",
    "a.test:+80",
    "a.test:080",
];

#[derive(Arbitrary, Debug)]
struct Spec {
    prefix: u8,
    strip: bool,
    relaxed: bool,
    static_files: bool,
}

#[derive(Arbitrary, Debug)]
enum Piece {
    Known(u8),
    Byte(u8),
}

#[derive(Arbitrary, Debug)]
enum HostField {
    Known(u8),
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
struct Input {
    routes: Vec<Spec>,
    pieces: Vec<Piece>,
    query: bool,
    /// An absolute-form target, with this authority.
    authority: Option<HostField>,
    hosts: Vec<HostField>,
    h2: bool,
}

/// A case as the properties take it.
struct Case {
    routes: Vec<(String, bool, bool, bool)>,
    target: String,
    hosts: Vec<Vec<u8>>,
    h2: bool,
}

fn host_bytes(f: &HostField) -> Vec<u8> {
    match f {
        HostField::Known(i) => HOSTS[*i as usize % HOSTS.len()].as_bytes().to_vec(),
        HostField::Raw(b) => b.iter().take(64).copied().collect(),
    }
}

impl Input {
    fn case(&self) -> Case {
        let mut routes: Vec<(String, bool, bool, bool)> = Vec::new();
        for s in self.routes.iter().take(5) {
            let p = PREFIXES[s.prefix as usize % PREFIXES.len()].to_string();
            // The configuration refuses two routes on one path.
            if routes.iter().all(|r| r.0 != p) {
                routes.push((p, s.strip, !s.relaxed, !s.static_files));
            }
        }
        let mut path = String::new();
        for p in self.pieces.iter().take(24) {
            match p {
                Piece::Known(i) => path.push_str(PIECES[*i as usize % PIECES.len()]),
                Piece::Byte(b) if b.is_ascii_graphic() => path.push(*b as char),
                Piece::Byte(_) => {}
            }
        }
        if !path.starts_with('/') {
            path.insert(0, '/');
        }
        if self.query {
            path.push_str("?q=/api/admin/../x");
        }
        let target = match &self.authority {
            Some(a) => format!("http://{}{path}", String::from_utf8_lossy(&host_bytes(a))),
            None => path,
        };
        Case {
            routes,
            target,
            hosts: self.hosts.iter().take(3).map(host_bytes).collect(),
            h2: self.h2,
        }
    }
}

fn text(data: &[u8]) -> Option<Case> {
    let mut case = Case {
        routes: Vec::new(),
        target: String::new(),
        hosts: Vec::new(),
        h2: false,
    };
    let mut has_target = false;
    for (name, value) in common::header_lines(data)? {
        match name {
            "target" => {
                case.target = value.to_string();
                has_target = true;
            }
            "route" => {
                let mut words = value.split(' ');
                let path = words.next()?.to_string();
                let flags: Vec<&str> = words.collect();
                case.routes.push((
                    path,
                    flags.contains(&"strip"),
                    !flags.contains(&"relaxed"),
                    !flags.contains(&"static"),
                ));
            }
            "host" => case.hosts.push(value.as_bytes().to_vec()),
            "h2" => case.h2 = value == "on",
            _ => return None,
        }
    }
    if !has_target {
        return None;
    }
    if case.routes.is_empty() {
        case.routes = vec![
            ("/api".into(), false, true, true),
            ("/api/admin".into(), false, true, true),
        ];
    }
    if case.hosts.is_empty() {
        case.hosts.push(b"t".to_vec());
    }
    Some(case)
}

/// Percent-decodes once; a `%` not followed by two hex digits stays.
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push(h * 16 + l);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// RFC 3986 §5.2.4 over `/`- and `\`-separated segments, empty ones dropped; and whether a
/// `..` climbed above the root.
fn resolve<'a>(segments: impl Iterator<Item = &'a str>) -> (String, bool) {
    let mut out: Vec<&str> = Vec::new();
    let mut above = false;
    for seg in segments {
        match seg {
            "" | "." => {}
            ".." => above |= out.pop().is_none(),
            s => out.push(s),
        }
    }
    (format!("/{}", out.join("/")), above)
}

fn split(path: &str) -> impl Iterator<Item = &str> {
    path.split(['/', '\\'])
}

/// A reading: its name, the path read, whether it ignores case, whether it climbed above
/// the root.
type Reading = (&'static str, String, bool, bool);

/// How lenient backends read the path they are sent; each exists in the wild.
fn readings(path: &str, strict: bool) -> Vec<Reading> {
    let once = decode(path);
    let (resolved, above) = resolve(split(&once));
    let trimmed = resolved
        .split('/')
        .map(|s| s.trim().trim_end_matches('.'))
        .collect::<Vec<_>>()
        .join("/");
    // Windows-like: each segment is trimmed first, and `.. ` is then `..`.
    let pre: Vec<String> = split(&once)
        .map(|s| {
            let t = s.trim();
            if t == "." || t == ".." {
                t.to_string()
            } else {
                t.trim_end_matches(|c: char| c == '.' || c.is_whitespace())
                    .to_string()
            }
        })
        .collect();
    let (pre_trimmed, pre_above) = resolve(pre.iter().map(String::as_str));
    let mut out = vec![
        ("decodes %2F, resolves dots", resolved.clone(), false, above),
        ("ignores case", resolved.to_ascii_lowercase(), true, above),
        ("trims segments", trimmed.to_ascii_lowercase(), true, above),
        (
            "trims segments, then resolves dots",
            pre_trimmed.to_ascii_lowercase(),
            true,
            pre_above,
        ),
    ];
    if strict {
        let (twice, above) = resolve(split(&decode(&once)));
        out.push(("decodes twice", twice, false, above));
        let tomcat: String = path
            .split('/')
            .map(|s| s.split(';').next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("/");
        let (tomcat, above) = resolve(split(&decode(&tomcat)));
        out.push(("drops ;parameters", tomcat, false, above));
    }
    out
}

/// `""` for the root route, else the path without a trailing slash.
fn prefix(path: &str) -> &str {
    if path == "/" {
        ""
    } else {
        path.trim_end_matches('/')
    }
}

/// The route a reader of `path` takes: the longest prefix (decoded, as the path is) on
/// whole segments, the first configured of equal ones; ignoring case if the reader does.
fn model_route(routes: &[(String, bool, bool, bool)], path: &str, ci: bool) -> Option<usize> {
    let fold = |s: &str| {
        if ci {
            s.to_ascii_lowercase()
        } else {
            s.to_string()
        }
    };
    let path = fold(path);
    let mut best: Option<(usize, usize)> = None;
    for (i, r) in routes.iter().enumerate() {
        let p = fold(&decode(prefix(&r.0)));
        let under = p.is_empty()
            || (path.starts_with(&p) && matches!(path.as_bytes().get(p.len()), None | Some(b'/')));
        if under && best.is_none_or(|(_, len)| p.len() > len) {
            best = Some((i, p.len()));
        }
    }
    best.map(|(i, _)| i)
}

fn is_plain(path: &str) -> bool {
    path.strip_prefix('/').is_some_and(|rest| {
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        rest.split('/').all(|s| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
    })
}

fn check_route(case: &Case) {
    let routes: Vec<Route<'_>> = case
        .routes
        .iter()
        .map(|(path, strip, strict, proxy)| Route {
            path,
            strip: *strip,
            strict: *strict,
            proxy: *proxy,
        })
        .collect();
    let outcome = route(&routes, &case.target);
    let has_root = case.routes.iter().any(|r| prefix(&r.0).is_empty());

    if is_plain(&case.target)
        && case
            .routes
            .iter()
            .all(|r| !r.0.bytes().any(|b| b.is_ascii_uppercase()))
    {
        let expected = match model_route(&case.routes, &case.target, false) {
            None => Outcome::Refused(404),
            Some(i) => {
                let (path, strip, _, proxy) = &case.routes[i];
                let p = prefix(path);
                if (*strip || !proxy) && !p.is_empty() {
                    let rest = &case.target[p.len()..];
                    if rest.is_empty() && !proxy {
                        Outcome::Redirect { route: i }
                    } else if rest.is_empty() {
                        Outcome::Forward {
                            route: i,
                            target: "/".into(),
                        }
                    } else {
                        Outcome::Forward {
                            route: i,
                            target: rest.into(),
                        }
                    }
                } else {
                    Outcome::Forward {
                        route: i,
                        target: case.target.clone(),
                    }
                }
            }
        };
        assert_eq!(outcome, expected, "a plain target: {}", case.target);
    }

    match outcome {
        Outcome::Refused(404) => assert!(!has_root, "404 with a root route"),
        Outcome::Refused(s) => assert_eq!(s, 400, "refused with {s}"),
        Outcome::Redirect { route } => assert!(!case.routes[route].3, "a proxy redirected"),
        Outcome::Forward { route: i, target } => {
            let (rpath, strip, strict, proxy) = &case.routes[i];
            let p = prefix(rpath);
            let path = target.split('?').next().unwrap_or("");
            assert!(
                path.starts_with('/'),
                "{} forwarded as {target}",
                case.target
            );
            let strips = (*strip || !proxy) && !p.is_empty();
            let reads = if *proxy {
                readings(path, *strict)
            } else {
                // The static files: decoded once more, dots resolved, as the route chose.
                readings(path, false).into_iter().take(1).collect()
            };
            for (reader, read, ci, above) in reads {
                let full = if strips {
                    assert!(
                        !above,
                        "{} was forwarded to {rpath} as {target}, which a backend that {reader} \
                         reads as climbing above the prefix",
                        case.target
                    );
                    format!("{}{read}", decode(p))
                } else {
                    read.clone()
                };
                let chosen = model_route(&case.routes, &full, ci);
                assert_eq!(
                    chosen,
                    Some(i),
                    "{} was forwarded to {rpath} as {target}, which a backend that {reader} reads \
                     as {read}: the path of {:?}",
                    case.target,
                    chosen.map(|j| &case.routes[j].0)
                );
            }
        }
    }
}

/// A `Host` by the grammar: a name of letters, digits, `-`, `.`, `_`, `~` with no empty
/// label (one trailing dot allowed) or a bracketed IPv6 literal; then `:port` up to 65535.
fn host_in_grammar(h: &str) -> bool {
    let (name, port) = if let Some(rest) = h.strip_prefix('[') {
        match rest.split_once(']') {
            Some((lit, port)) if lit.parse::<std::net::Ipv6Addr>().is_ok() => (None, port),
            _ => return false,
        }
    } else {
        match h.find(':') {
            Some(i) => (Some(&h[..i]), &h[i..]),
            None => (Some(h), ""),
        }
    };
    let port_ok = port.is_empty()
        || port.strip_prefix(':').is_some_and(|d| {
            !d.is_empty()
                && d.len() <= 5
                && d.bytes().all(|b| b.is_ascii_digit())
                && d.parse::<u32>().is_ok_and(|n| n <= 65535)
        });
    let name_ok = name.is_none_or(|n| {
        let n = n.strip_suffix('.').unwrap_or(n);
        !n.is_empty()
            && n.split('.').all(|l| {
                !l.is_empty()
                    && l.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'~'))
            })
    });
    port_ok && name_ok
}

/// A `Host` value's name and port (80 if none: the targets are `http://`).
fn name_port(h: &str) -> (&str, Option<u32>) {
    let end = if h.starts_with('[') {
        h.find(']').map_or(h.len(), |i| i + 1)
    } else {
        h.find(':').unwrap_or(h.len())
    };
    let port = match h[end..].strip_prefix(':') {
        Some(p) => p.parse().ok(),
        None => Some(80),
    };
    (&h[..end], port)
}

/// How a lenient backend names the host of a `Host` value: without port or trailing
/// dots, in lower case.
fn host_reading(h: &str) -> String {
    name_port(h).0.trim_end_matches('.').to_ascii_lowercase()
}

fn check_host(case: &Case) {
    let hosts: Vec<&[u8]> = case.hosts.iter().map(Vec::as_slice).collect();
    let Ok((key, sent)) = host(case.h2, &case.target, &hosts) else {
        return;
    };
    let authority = case
        .target
        .strip_prefix("http://")
        .and_then(|rest| rest.split(['/', '?', '#']).next())
        .filter(|a| !a.is_empty());
    let Some(sent) = sent else {
        assert!(
            case.h2 && authority.is_none() && key.is_empty(),
            "no Host forwarded for {:?}",
            case.target
        );
        return;
    };
    assert!(host_in_grammar(&sent), "Host {sent:?} forwarded");
    assert_eq!(
        host_reading(&sent),
        key,
        "Host {sent:?} was forwarded for a request routed by host {key:?}"
    );
    if let Some(a) = authority {
        // The authority, or a Host that names the same origin (RFC 3986 §6.2.3).
        let (sent_name, sent_port) = name_port(&sent);
        let (name, port) = name_port(a);
        assert!(
            sent_name.eq_ignore_ascii_case(name) && sent_port == port,
            "Host {sent:?} was forwarded for {}",
            case.target
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let Some(case) = text(data).or_else(|| {
        let input: Input = common::input(data, |_| None)?;
        Some(input.case())
    }) else {
        return;
    };
    check_route(&case);
    check_host(&case);
});
