//! htpasswd files and HTTP Basic: `gatehouse_layers::auth::{Htpasswd, BasicAuth}`.
//!
//! Properties:
//! - parsing any text gives users or an error naming a line of the text;
//! - a `{SHA}` entry appended for a user verifies with that password and no other;
//! - a Basic check lets in exactly the known user/password pairs (403 for a known user not
//!   among those allowed, 401 for anything else), and a success, once cached, is answered
//!   the same way without verifying again.
//!
//! Text input (the seeds): `Authorization: <value>` alone is checked as a request header;
//! text that starts with a `#` comment is an htpasswd file, verified with the user and
//! password of its first `# verify user:password` line, if any.
#![no_main]

mod common;

use arbitrary::Arbitrary;
use base64::Engine;
use gatehouse_layers::auth::{AuthError, BasicAuth, Htpasswd, Verdict};
use http::header::AUTHORIZATION;
use http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use sha1::Digest;
use std::sync::OnceLock;
use std::time::Duration;

/// The users of the fixed file: `{SHA}` and `$apr1$` hashes (bcrypt's cost would make the
/// fuzzer crawl).
const USERS: &[(&str, &str)] = &[("ann", "s3cret"), ("bob", "password"), ("carol", "")];
const FILE: &str = "# users\n\
ann:{SHA}/vNB+F2HQ559kaLUZbmHHvZrXpg=\n\
\n\
bob:$apr1$lZL6V/ci$eIMz/iKDkbtys/uU7LEK00\n\
carol:{SHA}2jmj7l5rSw0yVb/vlWAYkK/YBwk=\n";

struct Fixture {
    all: BasicAuth,
    /// Only ann and carol are let in.
    some: BasicAuth,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let path =
            std::env::temp_dir().join(format!("gatehouse-fuzz-htpasswd-{}", std::process::id()));
        std::fs::write(&path, FILE).unwrap();
        let ttl = Duration::from_secs(3600);
        let all = BasicAuth::open(&path, "fuzz", ttl).unwrap();
        let some = BasicAuth::open(&path, "fuzz", ttl)
            .unwrap()
            .allow_users(["ann".to_string(), "carol".to_string()]);
        Fixture { all, some }
    })
}

#[derive(Arbitrary, Debug)]
enum Input {
    /// Any file text, then a user and password to verify against it.
    Parse {
        text: String,
        user: String,
        password: String,
    },
    /// Any `Authorization` value.
    RawHeader(Vec<u8>),
    /// `scheme base64(user:password)`, with `user` and `password` picked or arbitrary.
    Basic {
        scheme: u8,
        user: Pick,
        password: Pick,
    },
}

#[derive(Arbitrary, Debug)]
enum Pick {
    Known(u8),
    /// A known one, edited: text added before or after, or the case changed.
    Near(u8, u8, String),
    Any(String),
}

impl Pick {
    fn get(&self, field: usize) -> String {
        let known = |i: u8| {
            let (u, p) = USERS[usize::from(i) % USERS.len()];
            [u, p][field].to_string()
        };
        match self {
            Pick::Known(i) => known(*i),
            Pick::Near(i, how, extra) => {
                let k = known(*i);
                match how % 3 {
                    0 => format!("{k}{extra}"),
                    1 => format!("{extra}{k}"),
                    _ => k.to_uppercase(),
                }
            }
            Pick::Any(s) => s.clone(),
        }
    }
}

/// The credentials of an `Authorization: Basic` value, decoded here on their own.
fn decode_basic(v: &[u8]) -> Option<(String, String)> {
    // A header value is text only when it is visible ASCII, spaces and tabs.
    if !v.iter().all(|&b| b == b'\t' || (0x20..0x7f).contains(&b)) {
        return None;
    }
    let v = std::str::from_utf8(v).ok()?.trim();
    let (scheme, token) = v.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(token.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (u, p) = text.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

fn known(user: &str, password: &str) -> bool {
    USERS.iter().any(|&(u, p)| u == user && p == password)
}

fn check_basic(value: &[u8]) {
    let Ok(v) = HeaderValue::from_bytes(value) else {
        return;
    };
    let mut h = HeaderMap::new();
    h.insert(AUTHORIZATION, v);
    let creds = decode_basic(value);
    let f = fixture();
    for (auth, lets_in) in [
        (&f.all, &(|_: &str| true) as &dyn Fn(&str) -> bool),
        (&f.some, &|u: &str| u == "ann" || u == "carol"),
    ] {
        let first = match auth.check(&h) {
            Verdict::Verify(p) => auth.verify(p),
            v => v,
        };
        let want = match &creds {
            Some((u, p)) if known(u, p) && lets_in(u) => "allowed",
            Some((u, p)) if known(u, p) => "forbidden",
            _ => "unauthorized",
        };
        let got = match first {
            Verdict::Allowed => "allowed",
            Verdict::Forbidden => "forbidden",
            Verdict::Unauthorized => "unauthorized",
            Verdict::Verify(_) => panic!("verify asked to verify again"),
        };
        assert_eq!(got, want, "{creds:?}");
        // A success is cached: the same credentials are decided at once, the same way.
        if want != "unauthorized" {
            let again = match auth.check(&h) {
                Verdict::Allowed => "allowed",
                Verdict::Forbidden => "forbidden",
                v => panic!("{creds:?}: not cached: {v:?}"),
            };
            assert_eq!(again, want, "{creds:?}");
        }
    }
}

fn text(data: &[u8]) -> Option<Input> {
    let text = std::str::from_utf8(data).ok()?;
    if let Some(v) = text.strip_prefix("Authorization: ") {
        let v = v.strip_suffix('\n').unwrap_or(v);
        return Some(Input::RawHeader(v.as_bytes().to_vec()));
    }
    if !text.starts_with('#') {
        return None;
    }
    let (user, password) = text
        .lines()
        .find_map(|l| l.strip_prefix("# verify "))
        .and_then(|l| l.split_once(':'))
        .unwrap_or(("", ""));
    Some(Input::Parse {
        text: text.to_string(),
        user: user.to_string(),
        password: password.to_string(),
    })
}

fuzz_target!(|data: &[u8]| {
    let Some(input) = common::input(data, text) else {
        return;
    };
    run(input);
});

fn run(input: Input) {
    match input {
        Input::Parse {
            text,
            user,
            password,
        } => {
            // Hashes whose cost the text sets (bcrypt, SHA-crypt rounds) could take seconds.
            let slow = |t: &str| t.contains("$2") || t.contains("$5$") || t.contains("$6$");
            match Htpasswd::parse(&text) {
                Err(e) => {
                    let AuthError::Htpasswd { line: n, .. } = e else {
                        panic!("{e:?} names no line");
                    };
                    assert!(n >= 1 && n <= text.lines().count(), "{e:?}");
                }
                Ok(users) => {
                    let lines = text
                        .lines()
                        .filter(|l| !l.trim().is_empty() && !l.trim().starts_with('#'))
                        .count();
                    assert!(users.len() <= lines);
                    if !slow(&text) {
                        let _ = users.verify(&user, &password);
                    }
                }
            }
            // The user's line, last so that it stands: its password and no other.
            let plain = !user.contains([':', '\n', '\r'])
                && user.trim() == user
                && !user.starts_with('#')
                && !user.is_empty();
            if plain && !slow(&text) {
                let digest = sha1::Sha1::digest(password.as_bytes());
                let hash = base64::engine::general_purpose::STANDARD.encode(digest);
                let mut file = text.clone();
                file.push_str(&format!("\n{user}:{{SHA}}{hash}\n"));
                if let Ok(users) = Htpasswd::parse(&file) {
                    assert!(users.verify(&user, &password), "{file:?}");
                    let wrong = format!("{password}x");
                    assert!(!users.verify(&user, &wrong), "{file:?}");
                }
            }
        }
        Input::RawHeader(v) => check_basic(&v),
        Input::Basic {
            scheme,
            user,
            password,
        } => {
            let creds = format!("{}:{}", user.get(0), password.get(1));
            let token = base64::engine::general_purpose::STANDARD.encode(creds);
            let scheme =
                ["Basic", "basic", "BASIC", "Bearer", " Basic", "Basic "][usize::from(scheme % 6)];
            check_basic(format!("{scheme} {token}").as_bytes());
        }
    }
}
