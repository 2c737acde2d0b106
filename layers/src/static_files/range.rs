//! Byte ranges, RFC 9110 §14.

use std::ops::Range;

/// More ranges than this in one request are ignored (a 200 with the whole file), as
/// §14.2 allows, so that a request can't ask for the same bytes a thousand times.
const MAX_RANGES: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ranges {
    /// No usable Range header: serve the whole representation.
    Full,
    /// Byte ranges to send, sorted and with overlaps merged, each within the length.
    Satisfiable(Vec<Range<u64>>),
    /// A well-formed header none of whose ranges overlaps the representation: 416.
    Unsatisfiable,
}

/// Parses a `Range` value (§14.1.2) against a representation of `len` bytes. A malformed
/// header, or one in another unit, is ignored (§14.2).
pub fn parse(value: &[u8], len: u64) -> Ranges {
    let Ok(text) = std::str::from_utf8(value) else {
        return Ranges::Full;
    };
    let Some((unit, specs)) = text.split_once('=') else {
        return Ranges::Full;
    };
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return Ranges::Full;
    }
    let mut out: Vec<Range<u64>> = Vec::new();
    let mut count = 0;
    for spec in specs.split(',') {
        let spec = spec.trim();
        if spec.is_empty() {
            continue;
        }
        count += 1;
        if count > MAX_RANGES {
            return Ranges::Full;
        }
        let Some((first, last)) = spec.split_once('-') else {
            return Ranges::Full;
        };
        let (first, last) = (first.trim(), last.trim());
        if first.is_empty() {
            // suffix-range: the last N bytes.
            let Some(n) = digits(last) else {
                return Ranges::Full;
            };
            if n > 0 && len > 0 {
                out.push(len.saturating_sub(n)..len);
            }
            continue;
        }
        let Some(start) = digits(first) else {
            return Ranges::Full;
        };
        let end = if last.is_empty() {
            len
        } else {
            match digits(last) {
                Some(l) if l >= start => l.saturating_add(1).min(len),
                _ => return Ranges::Full,
            }
        };
        if start < len {
            out.push(start..end);
        }
    }
    if count == 0 {
        return Ranges::Full;
    }
    if out.is_empty() {
        return Ranges::Unsatisfiable;
    }
    out.sort_by_key(|r| r.start);
    let mut merged: Vec<Range<u64>> = Vec::with_capacity(out.len());
    for r in out {
        match merged.last_mut() {
            Some(prev) if r.start <= prev.end => prev.end = prev.end.max(r.end),
            _ => merged.push(r),
        }
    }
    Ranges::Satisfiable(merged)
}

fn digits(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    fn p(s: &str, len: u64) -> Ranges {
        parse(s.as_bytes(), len)
    }

    #[test]
    fn single_forms() {
        assert_eq!(p("bytes=0-9", 100), Ranges::Satisfiable(vec![0..10]));
        assert_eq!(p("bytes=90-", 100), Ranges::Satisfiable(vec![90..100]));
        assert_eq!(p("bytes=-10", 100), Ranges::Satisfiable(vec![90..100]));
        assert_eq!(p("bytes=-500", 100), Ranges::Satisfiable(vec![0..100]));
        assert_eq!(p("bytes=50-5000", 100), Ranges::Satisfiable(vec![50..100]));
        assert_eq!(p("BYTES = 1-1", 100), Ranges::Satisfiable(vec![1..2]));
    }

    #[test]
    fn multiple_sorted_and_merged() {
        assert_eq!(
            p("bytes=50-59, 0-9", 100),
            Ranges::Satisfiable(vec![0..10, 50..60])
        );
        assert_eq!(p("bytes=0-10,5-20", 100), Ranges::Satisfiable(vec![0..21]));
        assert_eq!(
            p("bytes=0-9,200-300", 100),
            Ranges::Satisfiable(vec![0..10])
        );
    }

    #[test]
    fn unsatisfiable() {
        assert_eq!(p("bytes=100-", 100), Ranges::Unsatisfiable);
        assert_eq!(p("bytes=-0", 100), Ranges::Unsatisfiable);
        assert_eq!(p("bytes=0-", 0), Ranges::Unsatisfiable);
    }

    #[test]
    fn malformed_is_ignored() {
        for s in [
            "bytes=5-1",
            "bytes=a-b",
            "bytes",
            "items=0-1",
            "bytes=1",
            "bytes=--1",
            "bytes=",
            "bytes=0-1,x",
            "bytes=+1-2",
        ] {
            assert_eq!(p(s, 100), Ranges::Full, "{s}");
        }
        let many = format!("bytes={}", vec!["0-0"; 33].join(","));
        assert_eq!(p(&many, 100), Ranges::Full);
    }
}
