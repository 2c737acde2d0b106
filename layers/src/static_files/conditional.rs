//! Conditional requests, RFC 9110 §13.

use http::header::{IF_MATCH, IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_RANGE, IF_UNMODIFIED_SINCE};
use http::{HeaderMap, HeaderValue};
use std::time::{SystemTime, UNIX_EPOCH};

/// The outcome of evaluating the preconditions of a GET or HEAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    /// Serve the representation (ranges permitting).
    Proceed,
    /// 304 Not Modified.
    NotModified,
    /// 412 Precondition Failed.
    Failed,
}

/// Evaluates the preconditions in the order of RFC 9110 §13.2.2.
pub fn evaluate(headers: &HeaderMap, etag: &HeaderValue, modified: SystemTime) -> Precondition {
    // Step 1: If-Match, strong comparison (§13.1.1).
    // A list header may come on several lines (RFC 9110 §5.3): any line may match.
    if headers.contains_key(IF_MATCH) {
        if !headers
            .get_all(IF_MATCH)
            .iter()
            .any(|v| list_matches(v, etag, true))
        {
            return Precondition::Failed;
        }
    } else if let Some(date) = headers.get(IF_UNMODIFIED_SINCE).and_then(parse_date) {
        // Step 2: If-Unmodified-Since, only without If-Match (§13.1.4).
        if secs(modified) > date {
            return Precondition::Failed;
        }
    }
    // Step 3: If-None-Match, weak comparison (§13.1.2); for GET and HEAD a match is 304.
    if headers.contains_key(IF_NONE_MATCH) {
        if headers
            .get_all(IF_NONE_MATCH)
            .iter()
            .any(|v| list_matches(v, etag, false))
        {
            return Precondition::NotModified;
        }
    } else if let Some(date) = headers.get(IF_MODIFIED_SINCE).and_then(parse_date) {
        // Step 4: If-Modified-Since, only without If-None-Match (§13.1.3).
        if secs(modified) <= date {
            return Precondition::NotModified;
        }
    }
    Precondition::Proceed
}

/// Whether a Range may be honoured given If-Range (§13.1.5): an entity tag must match
/// strongly, a date must equal Last-Modified exactly. Without If-Range, yes.
pub fn range_allowed(headers: &HeaderMap, etag: &HeaderValue, last_modified: &HeaderValue) -> bool {
    let Some(v) = headers.get(IF_RANGE) else {
        return true;
    };
    let bytes = v.as_bytes();
    if bytes.starts_with(b"\"") || bytes.starts_with(b"W/") {
        // A weak tag never matches strongly.
        return !bytes.starts_with(b"W/") && trim(bytes) == etag.as_bytes();
    }
    v.as_bytes() == last_modified.as_bytes()
}

/// `*` or a comma-separated list of entity tags, compared with `etag`.
fn list_matches(value: &HeaderValue, etag: &HeaderValue, strong: bool) -> bool {
    let bytes = value.as_bytes();
    if trim(bytes) == b"*" {
        return true;
    }
    let ours = strip_weak(etag.as_bytes());
    let ours_weak = etag.as_bytes().starts_with(b"W/");
    split_tags(bytes).any(|tag| {
        let theirs_weak = tag.starts_with(b"W/");
        if strong && (theirs_weak || ours_weak) {
            return false;
        }
        strip_weak(tag) == ours
    })
}

/// Splits a list of entity tags on the commas outside quotes.
fn split_tags(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = bytes;
    std::iter::from_fn(move || loop {
        rest = trim(rest);
        while let [b',', tail @ ..] = rest {
            rest = trim(tail);
        }
        if rest.is_empty() {
            return None;
        }
        let mut in_quotes = false;
        let mut end = rest.len();
        for (i, &b) in rest.iter().enumerate() {
            match b {
                b'"' => in_quotes = !in_quotes,
                b',' if !in_quotes => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        let tag = trim(&rest[..end]);
        rest = &rest[end..];
        if !tag.is_empty() {
            return Some(tag);
        }
    })
}

fn strip_weak(tag: &[u8]) -> &[u8] {
    tag.strip_prefix(b"W/").unwrap_or(tag)
}

fn trim(mut b: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = b {
        b = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = b {
        b = rest;
    }
    b
}

fn parse_date(v: &HeaderValue) -> Option<u64> {
    let s = v.to_str().ok()?;
    let t = httpdate::parse_http_date(s).ok()?;
    Some(secs(t))
}

/// HTTP dates have one-second resolution.
fn secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn h(pairs: &[(http::HeaderName, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        m
    }

    const TAG: &str = "\"abc\"";

    fn at() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }

    fn eval(pairs: &[(http::HeaderName, &str)]) -> Precondition {
        evaluate(&h(pairs), &HeaderValue::from_static(TAG), at())
    }

    #[test]
    fn if_none_match_lists_star_and_weak() {
        assert_eq!(
            eval(&[(IF_NONE_MATCH, "\"abc\"")]),
            Precondition::NotModified
        );
        assert_eq!(
            eval(&[(IF_NONE_MATCH, "\"x\", W/\"abc\"")]),
            Precondition::NotModified
        );
        assert_eq!(eval(&[(IF_NONE_MATCH, "*")]), Precondition::NotModified);
        assert_eq!(
            eval(&[(IF_NONE_MATCH, "\"x\", \"y\"")]),
            Precondition::Proceed
        );
        assert_eq!(eval(&[(IF_NONE_MATCH, "\"a,bc\"")]), Precondition::Proceed);
    }

    #[test]
    fn list_headers_on_several_lines() {
        assert_eq!(
            eval(&[(IF_MATCH, "\"x\""), (IF_MATCH, "\"abc\"")]),
            Precondition::Proceed
        );
        assert_eq!(
            eval(&[(IF_NONE_MATCH, "\"x\""), (IF_NONE_MATCH, "\"abc\"")]),
            Precondition::NotModified
        );
        assert_eq!(
            eval(&[(IF_NONE_MATCH, "\"x\""), (IF_NONE_MATCH, "\"y\"")]),
            Precondition::Proceed
        );
    }

    #[test]
    fn if_match_is_strong() {
        assert_eq!(eval(&[(IF_MATCH, "\"abc\"")]), Precondition::Proceed);
        assert_eq!(eval(&[(IF_MATCH, "W/\"abc\"")]), Precondition::Failed);
        assert_eq!(eval(&[(IF_MATCH, "\"nope\"")]), Precondition::Failed);
        assert_eq!(eval(&[(IF_MATCH, "*")]), Precondition::Proceed);
    }

    #[test]
    fn dates() {
        let before = httpdate::fmt_http_date(at() - Duration::from_secs(10));
        let same = httpdate::fmt_http_date(at());
        assert_eq!(
            eval(&[(IF_MODIFIED_SINCE, &same)]),
            Precondition::NotModified
        );
        assert_eq!(eval(&[(IF_MODIFIED_SINCE, &before)]), Precondition::Proceed);
        assert_eq!(
            eval(&[(IF_UNMODIFIED_SINCE, &before)]),
            Precondition::Failed
        );
        assert_eq!(eval(&[(IF_UNMODIFIED_SINCE, &same)]), Precondition::Proceed);
        assert_eq!(
            eval(&[(IF_MODIFIED_SINCE, "garbage")]),
            Precondition::Proceed
        );
    }

    #[test]
    fn precedence() {
        let same = httpdate::fmt_http_date(at());
        let before = httpdate::fmt_http_date(at() - Duration::from_secs(10));
        // If-None-Match wins over If-Modified-Since.
        assert_eq!(
            eval(&[(IF_NONE_MATCH, "\"x\""), (IF_MODIFIED_SINCE, &same)]),
            Precondition::Proceed
        );
        // If-Match wins over If-Unmodified-Since.
        assert_eq!(
            eval(&[(IF_MATCH, "\"abc\""), (IF_UNMODIFIED_SINCE, &before)]),
            Precondition::Proceed
        );
        // A failed If-Match is 412 even when If-None-Match would be 304.
        assert_eq!(
            eval(&[(IF_MATCH, "\"x\""), (IF_NONE_MATCH, "\"abc\"")]),
            Precondition::Failed
        );
    }

    #[test]
    fn if_range() {
        let tag = HeaderValue::from_static(TAG);
        let lm = HeaderValue::from_static("Tue, 14 Nov 2023 22:13:20 GMT");
        assert!(range_allowed(&h(&[]), &tag, &lm));
        assert!(range_allowed(&h(&[(IF_RANGE, "\"abc\"")]), &tag, &lm));
        assert!(!range_allowed(&h(&[(IF_RANGE, "W/\"abc\"")]), &tag, &lm));
        assert!(!range_allowed(&h(&[(IF_RANGE, "\"old\"")]), &tag, &lm));
        assert!(range_allowed(
            &h(&[(IF_RANGE, "Tue, 14 Nov 2023 22:13:20 GMT")]),
            &tag,
            &lm
        ));
        assert!(!range_allowed(
            &h(&[(IF_RANGE, "Tue, 14 Nov 2023 22:13:21 GMT")]),
            &tag,
            &lm
        ));
    }
}
