//! Request-path normalisation shared by everything that maps a URL path to a resource:
//! the static files, and later the auth rules, so that no spelling of a path reaches a
//! resource by a route another spelling is refused on.
//!
//! RFC 3986 §6.2.2: the path is percent-decoded exactly once, then dot-segments are removed
//! (§5.2.4) without ever climbing above the root.

use std::fmt;

/// Why a path was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// Not `/`-rooted, a bad `%` escape, or not UTF-8 once decoded: 400.
    Malformed,
    /// A NUL byte: 400.
    Nul,
    /// A backslash, which some file systems read as a separator: 400.
    Backslash,
    /// A segment starting with `.` while dotfiles are hidden: 404.
    Hidden,
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PathError::Malformed => "malformed path",
            PathError::Nul => "NUL byte in path",
            PathError::Backslash => "backslash in path",
            PathError::Hidden => "hidden path",
        })
    }
}

impl std::error::Error for PathError {}

/// A path reduced to its segments: no empty, `.` or `..` segment, nothing undecoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NormalPath {
    /// `/`-joined segments without a leading slash; empty for the root.
    pub relative: String,
    /// The request named a directory (it ended with `/`, or was the root).
    pub trailing_slash: bool,
}

impl NormalPath {
    /// `/` followed by the segments, and a trailing `/` when the request had one.
    pub fn to_absolute(&self) -> String {
        let mut s = String::with_capacity(self.relative.len() + 2);
        s.push('/');
        s.push_str(&self.relative);
        if self.trailing_slash && !self.relative.is_empty() {
            s.push('/');
        }
        s
    }
}

/// Normalises a raw request path (as sent, without the query).
pub fn normalize(raw: &str, hide_dotfiles: bool) -> Result<NormalPath, PathError> {
    if !raw.starts_with('/') {
        return Err(PathError::Malformed);
    }
    let decoded = percent_encoding::percent_decode_str(raw);
    // A stray '%' not followed by two hex digits is passed through by the decoder; refuse it
    // instead, so that the decoding is unambiguous.
    if !valid_escapes(raw.as_bytes()) {
        return Err(PathError::Malformed);
    }
    let bytes: Vec<u8> = decoded.collect();
    if bytes.contains(&0) {
        return Err(PathError::Nul);
    }
    if bytes.contains(&b'\\') {
        return Err(PathError::Backslash);
    }
    let text = String::from_utf8(bytes).map_err(|_| PathError::Malformed)?;

    let trailing_slash = text.ends_with('/') || text.ends_with("/.") || text.ends_with("/..");
    let mut segments: Vec<&str> = Vec::new();
    for seg in text.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    if hide_dotfiles && segments.iter().any(|s| s.starts_with('.')) {
        return Err(PathError::Hidden);
    }
    Ok(NormalPath {
        relative: segments.join("/"),
        trailing_slash: trailing_slash || segments.is_empty(),
    })
}

fn valid_escapes(raw: &[u8]) -> bool {
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' {
            if i + 2 >= raw.len() {
                return false;
            }
            if !(raw[i + 1].is_ascii_hexdigit() && raw[i + 2].is_ascii_hexdigit()) {
                return false;
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    true
}

/// Characters kept as they are when the normalised path is written back into a URI.
const PATH_KEEP: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    // A `;` decoded from `%3B` stays encoded: Tomcat and Spring read a bare one as the
    // start of path parameters (`/admin;x` is `/admin` to them).
    .add(b';')
    .add(b'`')
    .add(b'{')
    .add(b'}')
    .add(b'\\')
    .add(b'^')
    .add(b'|');

/// `uri` with its path normalised (and re-encoded where a URI needs it), or `None` if the
/// path can't be normalised (a bad escape, a NUL, a backslash, not UTF-8).
pub fn normalized_uri(uri: &http::Uri) -> Option<http::Uri> {
    let n = normalize(uri.path(), false).ok()?;
    let abs = n.to_absolute();
    let mut pq: String = percent_encoding::utf8_percent_encode(&abs, PATH_KEEP).collect();
    if let Some(q) = uri.query() {
        pq.push('?');
        pq.push_str(q);
    }
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(http::uri::PathAndQuery::try_from(pq).ok()?);
    http::Uri::from_parts(parts).ok()
}

/// Whether a lenient backend trims `c` off a segment: Unicode's white space, and the
/// separators U+001C to U+001F, which Python's `str.strip` takes as well.
pub fn is_loose_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// `path` as a lenient backend may read it: `%`-escapes decoded, and case folded as the
/// most lenient readers fold it. A letter whose lower case, or whose upper case's lower
/// case, is an ASCII letter reads as that letter: Java's `equalsIgnoreCase` and Python's
/// `re.IGNORECASE` take `ı` and `İ` for `i` and `ſ` for `s`, and the Kelvin sign
/// lower-cases to `k`.
pub fn loose(path: &str) -> String {
    let decoded = percent_encoding::percent_decode_str(path).decode_utf8_lossy();
    let mut out = String::with_capacity(decoded.len());
    for c in decoded.chars() {
        if c.is_ascii() {
            out.push(c.to_ascii_lowercase());
            continue;
        }
        // Those readers map one character to one (Unicode's simple case mappings): a full
        // mapping to several (`ß` to `SS`, `ﬁ` to `FI`) is none to them. `İ`'s simple
        // lower case is `i`; Rust gives its full one, `i` and a combining dot.
        let lower = if c == '\u{130}' {
            Some('i')
        } else {
            one(c.to_lowercase())
        };
        let upper_lower = one(c.to_uppercase()).and_then(|u| one(u.to_lowercase()));
        match (lower, upper_lower) {
            (Some(l), _) if l.is_ascii() => out.push(l),
            (_, Some(u)) if u.is_ascii() => out.push(u),
            _ => out.extend(c.to_lowercase()),
        }
    }
    out
}

/// The one character of a case mapping, if it maps to one.
fn one(mut m: impl Iterator<Item = char>) -> Option<char> {
    let first = m.next()?;
    m.next().is_none().then_some(first)
}

/// A [`loose`] path as a backend that trims segments reads it: each segment without
/// white space around it ([`is_loose_space`]) or dots after it, the empty ones dropped;
/// `None` if that changes nothing.
pub fn loose_trimmed(loose: &str) -> Option<String> {
    let trim = |s: &str| -> usize {
        s.trim_matches(is_loose_space)
            .trim_end_matches(|c: char| c == '.' || is_loose_space(c))
            .len()
    };
    let untouched = !loose.contains("//") && loose.split('/').all(|s| trim(s) == s.len());
    if untouched {
        return None;
    }
    let mut out = String::with_capacity(loose.len());
    for seg in loose.split('/') {
        let seg = seg
            .trim_matches(is_loose_space)
            .trim_end_matches(|c: char| c == '.' || is_loose_space(c));
        if !seg.is_empty() {
            out.push('/');
            out.push_str(seg);
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(p: &str) -> String {
        normalize(p, true).unwrap().relative
    }

    #[test]
    fn dot_segments_never_climb_above_root() {
        assert_eq!(rel("/a/b/../c"), "a/c");
        assert_eq!(rel("/../../etc/passwd"), "etc/passwd");
        assert_eq!(rel("/%2e%2e/%2e%2e/etc/passwd"), "etc/passwd");
        assert_eq!(rel("/a/..%2f..%2fetc"), "etc");
        assert_eq!(rel("/./a//b/"), "a/b");
        assert_eq!(rel("/"), "");
    }

    #[test]
    fn lenient_readings_fold_case_trim_and_decode() {
        let both = |p: &str| {
            let l = loose(p);
            loose_trimmed(&l).unwrap_or(l)
        };
        assert_eq!(loose("/API/Admin%20/x"), "/api/admin /x");
        assert_eq!(both("/API/Admin%20/x"), "/api/admin/x");
        assert_eq!(both("/api/admin./x"), "/api/admin/x");
        assert_eq!(both("/api/%09admin%09"), "/api/admin");
        assert_eq!(both("/%20/%C2%A0x/"), "/x");
        // Letters Java and Python fold to ASCII, and Python's extra separators.
        assert_eq!(loose("/adm%C4%B1n"), "/admin");
        assert_eq!(loose("/adm%C4%B0n"), "/admin");
        assert_eq!(loose("/%C5%BFecret"), "/secret");
        assert_eq!(loose("/\u{212a}ey"), "/key");
        assert_eq!(both("/admin%1F/x"), "/admin/x");
        assert_eq!(both("/admin%1C%1D"), "/admin");
        // Other letters keep their own lower case, and a letter whose upper case is
        // several (`ß`, `ﬁ`) is no ASCII letter to those readers.
        assert_eq!(loose("/CAF%C3%89"), "/caf\u{e9}");
        assert_eq!(loose("/stra\u{df}e"), "/stra\u{df}e");
        assert_eq!(loose("/\u{fb01}le"), "/\u{fb01}le");
        assert_eq!(loose_trimmed("/a/b.txt"), None);
        assert_eq!(loose_trimmed("/a/b/"), None);
        assert_eq!(loose_trimmed("/"), None);
    }

    #[test]
    fn decodes_exactly_once() {
        // %252e is "%2e" after one decode: a literal file name, never a dot segment.
        assert_eq!(rel("/%252e%252e/x"), "%2e%2e/x");
        assert_eq!(rel("/a%20b"), "a b");
    }

    #[test]
    fn refuses_nul_backslash_and_bad_escapes() {
        assert_eq!(normalize("/a%00b", true), Err(PathError::Nul));
        assert_eq!(normalize("/a\\..\\b", true), Err(PathError::Backslash));
        assert_eq!(normalize("/a%5c..%5cb", true), Err(PathError::Backslash));
        assert_eq!(normalize("/a%zz", true), Err(PathError::Malformed));
        assert_eq!(normalize("/a%2", true), Err(PathError::Malformed));
        assert_eq!(normalize("/a%", true), Err(PathError::Malformed));
        assert_eq!(normalize("/%c0%ae%c0%ae/", true), Err(PathError::Malformed));
        assert_eq!(normalize("relative", true), Err(PathError::Malformed));
    }

    #[test]
    fn hides_dotfiles_when_asked() {
        assert_eq!(normalize("/.git/config", true), Err(PathError::Hidden));
        assert_eq!(normalize("/a/%2eenv", true), Err(PathError::Hidden));
        assert_eq!(rel("/a/.hidden/../b"), "a/b");
        assert_eq!(normalize("/.env", false).unwrap().relative, ".env");
    }

    #[test]
    fn trailing_slash_is_kept() {
        assert!(normalize("/dir/", true).unwrap().trailing_slash);
        assert!(!normalize("/dir", true).unwrap().trailing_slash);
        assert!(normalize("/dir/..", true).unwrap().trailing_slash);
        assert_eq!(normalize("/a/b/", true).unwrap().to_absolute(), "/a/b/");
    }
}
