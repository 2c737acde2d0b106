//! What the targets share: reading an input either as readable text (the seed corpora are
//! written so) or, when it is not, as the structured value `arbitrary` makes of its bytes.

#![allow(dead_code)]

use arbitrary::{Arbitrary, Unstructured};

/// `Name: value` lines (a value's leading blanks dropped), empty lines skipped; `None` when
/// the input is not UTF-8 or a line is not of that form.
pub fn header_lines(data: &[u8]) -> Option<Vec<(&str, &str)>> {
    let text = std::str::from_utf8(data).ok()?;
    let mut out = Vec::new();
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        let (name, value) = line.split_once(':')?;
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic()) {
            return None;
        }
        out.push((name, value.trim_start_matches([' ', '\t'])));
    }
    (!out.is_empty()).then_some(out)
}

/// The text reading of `data` when `text` accepts it, else the arbitrary one.
pub fn input<'a, T: Arbitrary<'a>>(
    data: &'a [u8],
    text: impl FnOnce(&'a [u8]) -> Option<T>,
) -> Option<T> {
    text(data).or_else(|| T::arbitrary_take_rest(Unstructured::new(data)).ok())
}
