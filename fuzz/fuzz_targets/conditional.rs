//! Conditional requests (RFC 9110 §13): `gatehouse::static_files::conditional::{evaluate,
//! range_allowed}`, with `If-Match`, `If-None-Match`, `If-Modified-Since`,
//! `If-Unmodified-Since` and `If-Range` lines that are either arbitrary bytes or well-formed
//! values built from the representation's own validators.
//!
//! Properties:
//! - with no precondition header, the answer is to proceed, and a Range is allowed;
//! - §13.2.2's order: 412 comes from `If-Match`/`If-Unmodified-Since` alone, and otherwise
//!   the answer is the one `If-None-Match`/`If-Modified-Since` alone give;
//! - `If-Match` never matches a weak entity tag (ours or theirs) other than through `*`;
//! - for well-formed values the answer is the one the RFC gives, computed here from the
//!   parts the value was built from (tags, `*`, dates relative to Last-Modified).
//!
//! Text input (the seeds): `etag: "v7"` or `etag: W/"v7"`, `modified: <unix seconds>`, and
//! request header lines, taken as they are.
#![no_main]

mod common;

use arbitrary::Arbitrary;
use gatehouse::static_files::conditional::{evaluate, range_allowed, Precondition};
use http::header::{IF_MATCH, IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_RANGE, IF_UNMODIFIED_SINCE};
use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use std::time::{Duration, UNIX_EPOCH};

#[derive(Arbitrary, Debug, Clone, Copy, PartialEq)]
enum Name {
    Match,
    NoneMatch,
    ModifiedSince,
    UnmodifiedSince,
    Range,
}

impl Name {
    fn header(self) -> HeaderName {
        match self {
            Name::Match => IF_MATCH,
            Name::NoneMatch => IF_NONE_MATCH,
            Name::ModifiedSince => IF_MODIFIED_SINCE,
            Name::UnmodifiedSince => IF_UNMODIFIED_SINCE,
            Name::Range => IF_RANGE,
        }
    }
}

/// One entity tag in a well-formed list.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Tag {
    /// Our opaque tag, strong.
    Ours,
    /// Our opaque tag marked weak.
    OursWeak,
    /// Another tag, weak or not (the number makes its opaque part).
    Other(u8, bool),
}

#[derive(Arbitrary, Debug, Clone)]
enum Value {
    /// Anything a header value may hold.
    Raw(Vec<u8>),
    /// `*`.
    Star,
    /// A comma-separated list of tags, with some spaces.
    Tags(Vec<Tag>, u8),
    /// An HTTP-date this many seconds after (or before) Last-Modified.
    Date(i16),
}

#[derive(Arbitrary, Debug, Default)]
struct Input {
    /// Our validator's opaque part (as a number) and whether it is weak.
    etag: (u8, bool),
    /// Last modification: seconds past 2001-09-09 and nanoseconds.
    modified: (u32, u32),
    lines: Vec<(Name, Value)>,
}

const BASE_SECS: u64 = 1_000_000_000;

fn opaque(n: u8) -> String {
    format!("\"v{n}\"")
}

fn tag_text(t: Tag, ours: u8) -> String {
    match t {
        Tag::Ours => opaque(ours),
        Tag::OursWeak => format!("W/{}", opaque(ours)),
        Tag::Other(n, true) => format!("W/\"o{n}\""),
        Tag::Other(n, false) => format!("\"o{n}\""),
    }
}

/// Whether the tag's opaque part is ours, and whether it is strong.
fn tag_is_ours(t: Tag) -> (bool, bool) {
    match t {
        Tag::Ours => (true, true),
        Tag::OursWeak => (true, false),
        Tag::Other(_, weak) => (false, !weak),
    }
}

fn value_text(v: &Value, ours: u8, modified_secs: u64) -> Option<Vec<u8>> {
    Some(match v {
        Value::Raw(b) => b.clone(),
        Value::Star => b"*".to_vec(),
        Value::Tags(tags, spaces) => {
            let sep = [",", ", ", " , ", ",\t"][usize::from(*spaces % 4)];
            let mut s = String::new();
            if spaces & 4 != 0 {
                s.push(' ');
            }
            let parts: Vec<String> = tags.iter().map(|&t| tag_text(t, ours)).collect();
            s.push_str(&parts.join(sep));
            s.into_bytes()
        }
        Value::Date(off) => {
            let secs = modified_secs.checked_add_signed(i64::from(*off))?;
            httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs)).into_bytes()
        }
    })
}

/// The RFC's answer for well-formed lines only (no `Raw`), from how they were built.
fn model(lines: &[(Name, Value)], ours_strong: bool) -> Precondition {
    let of = |name: Name| {
        lines
            .iter()
            .filter(move |(n, _)| *n == name)
            .map(|(_, v)| v)
    };
    // A list-valued field on several lines is one list; `*` matches any representation.
    let any_line = |name: Name, strong: bool| {
        of(name).any(|v| match v {
            Value::Star => true,
            Value::Tags(tags, _) => tags.iter().any(|&t| {
                let (ours, theirs_strong) = tag_is_ours(t);
                ours && (!strong || (theirs_strong && ours_strong))
            }),
            _ => false,
        })
    };
    // A date field is a single value: the first line is the one read.
    let first_date = |name: Name| match of(name).next() {
        Some(Value::Date(off)) => Some(i64::from(*off)),
        _ => None,
    };
    if of(Name::Match).next().is_some() {
        if !any_line(Name::Match, true) {
            return Precondition::Failed;
        }
    } else if let Some(off) = first_date(Name::UnmodifiedSince) {
        if off < 0 {
            return Precondition::Failed;
        }
    }
    if of(Name::NoneMatch).next().is_some() {
        if any_line(Name::NoneMatch, false) {
            return Precondition::NotModified;
        }
    } else if let Some(off) = first_date(Name::ModifiedSince) {
        if off >= 0 {
            return Precondition::NotModified;
        }
    }
    Precondition::Proceed
}

fn headers(lines: &[(Name, HeaderValue)], keep: &[Name]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (n, v) in lines {
        if keep.contains(n) {
            h.append(n.header(), v.clone());
        }
    }
    h
}

fn text(data: &[u8]) -> Option<Input> {
    let mut input = Input::default();
    for (name, value) in common::header_lines(data)? {
        let name = match name.to_ascii_lowercase().as_str() {
            "etag" => {
                let (weak, tag) = match value.strip_prefix("W/") {
                    Some(t) => (true, t),
                    None => (false, value),
                };
                let n = tag.strip_prefix("\"v")?.strip_suffix('"')?.parse().ok()?;
                input.etag = (n, weak);
                continue;
            }
            "modified" => {
                let secs: u64 = value.parse().ok()?;
                input.modified = (u32::try_from(secs.checked_sub(BASE_SECS)?).ok()?, 0);
                continue;
            }
            "if-match" => Name::Match,
            "if-none-match" => Name::NoneMatch,
            "if-modified-since" => Name::ModifiedSince,
            "if-unmodified-since" => Name::UnmodifiedSince,
            "if-range" => Name::Range,
            _ => return None,
        };
        input
            .lines
            .push((name, Value::Raw(value.as_bytes().to_vec())));
    }
    Some(input)
}

fuzz_target!(|data: &[u8]| {
    let Some(input) = common::input(data, text) else {
        return;
    };
    let ours_n = input.etag.0;
    let ours_strong = !input.etag.1;
    let etag = if ours_strong {
        opaque(ours_n)
    } else {
        format!("W/{}", opaque(ours_n))
    };
    let etag = HeaderValue::from_str(&etag).unwrap();
    let modified_secs = BASE_SECS + u64::from(input.modified.0);
    let modified = UNIX_EPOCH + Duration::new(modified_secs, input.modified.1 % 1_000_000_000);
    let last_modified = HeaderValue::from_str(&httpdate::fmt_http_date(modified)).unwrap();

    let mut lines = Vec::new();
    let mut built = Vec::new();
    for (name, v) in input.lines.iter().take(16) {
        let Some(text) = value_text(v, ours_n, modified_secs) else {
            continue;
        };
        let Ok(hv) = HeaderValue::from_bytes(&text) else {
            continue;
        };
        lines.push((*name, hv));
        built.push((*name, v.clone()));
    }

    use Name::*;
    let all = headers(
        &lines,
        &[Match, NoneMatch, ModifiedSince, UnmodifiedSince, Range],
    );
    let got = evaluate(&all, &etag, modified);

    if all.is_empty() {
        assert_eq!(got, Precondition::Proceed);
        assert!(range_allowed(&all, &etag, &last_modified));
    }
    // If-Range plays no part in evaluate.
    assert_eq!(
        got,
        evaluate(
            &headers(&lines, &[Match, NoneMatch, ModifiedSince, UnmodifiedSince]),
            &etag,
            modified
        )
    );
    // §13.2.2: steps 1-2 decide 412 alone; if they pass, steps 3-4 decide alone.
    let pre = evaluate(&headers(&lines, &[Match, UnmodifiedSince]), &etag, modified);
    assert_ne!(pre, Precondition::NotModified, "{lines:?}");
    let post = evaluate(
        &headers(&lines, &[NoneMatch, ModifiedSince]),
        &etag,
        modified,
    );
    assert_ne!(post, Precondition::Failed, "{lines:?}");
    let expect = if pre == Precondition::Failed {
        Precondition::Failed
    } else {
        post
    };
    assert_eq!(got, expect, "{lines:?}");

    // If-Match with only tags (no `*`) never passes for a weak validator of ours.
    let if_match: Vec<&HeaderValue> = all.get_all(IF_MATCH).iter().collect();
    let star = if_match.iter().any(|v| v.as_bytes().contains(&b'*'));
    if !if_match.is_empty() && !ours_strong && !star {
        assert_eq!(got, Precondition::Failed, "{lines:?}");
    }

    // Well-formed values: the RFC's answer.
    if built.iter().all(|(_, v)| !matches!(v, Value::Raw(_))) {
        assert_eq!(got, model(&built, ours_strong), "{lines:?}");
        let allowed = range_allowed(&all, &etag, &last_modified);
        let want = match built.iter().find(|(n, _)| *n == Range).map(|(_, v)| v) {
            None => true,
            // If-Range holds one validator: a single strong tag of ours, or Last-Modified;
            // a list or `*` is no validator.
            Some(Value::Tags(tags, spaces)) if tags.len() == 1 && spaces & 4 == 0 => {
                let (ours, strong) = tag_is_ours(tags[0]);
                ours && strong && ours_strong
            }
            Some(Value::Tags(..)) | Some(Value::Star) => false,
            Some(Value::Date(off)) => *off == 0,
            Some(Value::Raw(_)) => unreachable!(),
        };
        assert_eq!(allowed, want, "{lines:?}");
    }
});
