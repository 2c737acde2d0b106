//! `Range` header parsing (RFC 9110 §14): `gatehouse::static_files::range::parse`.
//!
//! Properties:
//! - a satisfiable set is non-empty, each range non-empty and within the length, sorted,
//!   with overlapping and adjacent ranges merged (so strictly increasing with gaps);
//! - whether the header is ignored (`Full`) is a matter of syntax alone, whatever the length;
//! - a set satisfiable for one length stays so for any longer one, and covers at least as
//!   much;
//! - a zero-length representation never has a satisfiable range.
//!
//! Text input (the seeds): a first line with the length and optionally a second length to
//! compare with, then the header value.
#![no_main]

mod common;

use arbitrary::Arbitrary;
use gatehouse::static_files::range::{parse, Ranges};
use libfuzzer_sys::fuzz_target;
use std::ops::Range;

#[derive(Arbitrary, Debug)]
enum Len {
    Small(u8),
    Medium(u32),
    Any(u64),
}

impl Len {
    fn get(&self) -> u64 {
        match *self {
            Len::Small(n) => n.into(),
            Len::Medium(n) => n.into(),
            Len::Any(n) => n,
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    len: Len,
    other: Len,
    value: &'a [u8],
}

fn check_set(v: &[Range<u64>], len: u64, value: &[u8]) {
    assert!(!v.is_empty(), "{value:?}: empty satisfiable set");
    assert!(len > 0, "{value:?}: satisfiable on an empty representation");
    for r in v {
        assert!(r.start < r.end, "{value:?} len {len}: empty range {r:?}");
        assert!(r.end <= len, "{value:?} len {len}: {r:?} past the end");
    }
    for w in v.windows(2) {
        assert!(
            w[0].end < w[1].start,
            "{value:?} len {len}: {:?} and {:?} not sorted and merged",
            w[0],
            w[1]
        );
    }
}

fn covered(v: &[Range<u64>]) -> u128 {
    v.iter().map(|r| u128::from(r.end - r.start)).sum()
}

fn text(data: &[u8]) -> Option<Input<'_>> {
    let nl = data.iter().position(|&b| b == b'\n')?;
    let first = std::str::from_utf8(&data[..nl]).ok()?;
    let mut lens = first.split(' ').map(|n| n.parse::<u64>());
    let len = lens.next()?.ok()?;
    let other = match lens.next() {
        Some(n) => n.ok()?,
        None => len.saturating_mul(2).saturating_add(1),
    };
    let value = &data[nl + 1..];
    Some(Input {
        len: Len::Any(len),
        other: Len::Any(other),
        value: value.strip_suffix(b"\n").unwrap_or(value),
    })
}

fuzz_target!(|data: &[u8]| {
    let Some(input) = common::input(data, text) else {
        return;
    };
    let (len, other) = (input.len.get(), input.other.get());
    let a = parse(input.value, len);
    let b = parse(input.value, other);
    assert_eq!(
        a == Ranges::Full,
        b == Ranges::Full,
        "{:?}: ignored for one length and not another: {len} → {a:?}, {other:?} → {b:?}",
        input.value
    );
    for (r, l) in [(&a, len), (&b, other)] {
        if let Ranges::Satisfiable(v) = r {
            check_set(v, l, input.value);
        }
    }
    // Longer representations satisfy at least what shorter ones do.
    let ((short, s), (long, l)) = if len <= other {
        ((&a, len), (&b, other))
    } else {
        ((&b, other), (&a, len))
    };
    if let Ranges::Satisfiable(sv) = short {
        let Ranges::Satisfiable(lv) = long else {
            panic!(
                "{:?}: satisfiable for {s} bytes, {long:?} for {l}",
                input.value
            );
        };
        assert!(covered(lv) >= covered(sv), "{:?}", input.value);
    }
    if len == 0 {
        assert!(!matches!(a, Ranges::Satisfiable(_)));
    }
});
