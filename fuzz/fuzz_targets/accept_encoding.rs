//! `Accept-Encoding` negotiation (RFC 9110 §12.5.3):
//! `gatehouse_layers::precompress::negotiate`, over header lines that are either arbitrary
//! bytes or well-formed lists built from codings and q-values.
//!
//! Properties:
//! - a chosen coding is one the server offers, and one the header names (itself, as
//!   `x-gzip` for gzip, or through `*`);
//! - 406 (`NotAcceptable`) only when the header refuses identity (`identity;q=0`, `*;q=0`);
//! - for well-formed lists, the choice is the RFC's: the offered coding of highest q above
//!   0 (ties to the server's order), unless identity weighs more; 406 when nothing offered
//!   is acceptable and identity is refused; identity otherwise.
//!
//! Text input (the seeds): `order: br zstd gzip` (the server's preference; default all
//! three), and `Accept-Encoding:` lines, taken as they are.
#![no_main]

mod common;

use arbitrary::Arbitrary;
use gatehouse_layers::precompress::{negotiate, Choice, Encoding};
use http::header::ACCEPT_ENCODING;
use http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug, Clone, Copy, PartialEq)]
enum Coding {
    Br,
    Zstd,
    Gzip,
    XGzip,
    Identity,
    Star,
    Deflate,
    Compress,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Q {
    /// No `q` parameter: 1.
    Absent,
    /// A valid weight in thousandths (taken modulo 1001), spelled in one of several ways.
    Valid(u16, u8),
    /// A malformed weight: the element is ignored.
    Invalid(u8),
}

#[derive(Arbitrary, Debug, Clone)]
struct Element {
    coding: Coding,
    /// Upper case, spaces around the `;`, another parameter before `q`.
    style: u8,
    q: Q,
}

#[derive(Arbitrary, Debug)]
enum Line {
    Raw(Vec<u8>),
    List(Vec<Element>),
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// The server's preference: each byte picks br, zstd or gzip.
    order: Vec<u8>,
    lines: Vec<Line>,
}

const ALL: [Encoding; 3] = [Encoding::Br, Encoding::Zstd, Encoding::Gzip];

impl Coding {
    fn token(self) -> &'static str {
        match self {
            Coding::Br => "br",
            Coding::Zstd => "zstd",
            Coding::Gzip => "gzip",
            Coding::XGzip => "x-gzip",
            Coding::Identity => "identity",
            Coding::Star => "*",
            Coding::Deflate => "deflate",
            Coding::Compress => "compress",
        }
    }

    fn encoding(self) -> Option<Encoding> {
        match self {
            Coding::Br => Some(Encoding::Br),
            Coding::Zstd => Some(Encoding::Zstd),
            Coding::Gzip | Coding::XGzip => Some(Encoding::Gzip),
            _ => None,
        }
    }
}

impl Q {
    /// The weight in thousandths, `None` for a malformed one.
    fn value(self) -> Option<u16> {
        match self {
            Q::Absent => Some(1000),
            Q::Valid(t, _) => Some(t % 1001),
            Q::Invalid(_) => None,
        }
    }

    fn text(self) -> Option<String> {
        match self {
            Q::Absent => None,
            Q::Valid(t, spelling) => {
                let t = t % 1001;
                Some(if t == 1000 {
                    ["1", "1.", "1.0", "1.000"][usize::from(spelling % 4)].to_string()
                } else if t == 0 && spelling % 2 == 0 {
                    "0".to_string()
                } else {
                    let mut s = format!("0.{t:03}");
                    if spelling % 3 == 0 {
                        while s.ends_with('0') {
                            s.pop();
                        }
                    }
                    s
                })
            }
            Q::Invalid(n) => Some(
                [
                    "2", "1.5", "0.5555", "abc", "-1", "", ".5", "1.001", "0.5.0", "0.5x",
                ][usize::from(n % 10)]
                .to_string(),
            ),
        }
    }
}

impl Element {
    fn text(&self) -> String {
        let mut s = self.coding.token().to_string();
        if self.style & 1 != 0 {
            s = s.to_ascii_uppercase();
        }
        let semi = if self.style & 2 != 0 { " ; " } else { ";" };
        if self.style & 4 != 0 {
            s.push_str(semi);
            s.push_str("level=5");
        }
        if let Some(q) = self.q.text() {
            s.push_str(semi);
            s.push_str(if self.style & 8 != 0 { "Q=" } else { "q=" });
            s.push_str(&q);
        }
        s
    }
}

/// The RFC's choice for well-formed lists.
fn model(elements: &[&Element], order: &[Encoding]) -> Choice {
    let max = |pred: &dyn Fn(Coding) -> bool| {
        elements
            .iter()
            .filter(|e| pred(e.coding))
            .filter_map(|e| e.q.value())
            .max()
    };
    let star = max(&|c| c == Coding::Star);
    let identity = max(&|c| c == Coding::Identity).or(star);
    let weight = |enc: Encoding| max(&|c| c.encoding() == Some(enc)).or(star).unwrap_or(0);
    let best = order
        .iter()
        .map(|&e| (e, weight(e)))
        .filter(|&(_, q)| q > 0)
        // The first of the highest: max_by_key keeps the last, so look from the end.
        .rev()
        .max_by_key(|&(_, q)| q);
    match best {
        Some((_, q)) if identity.is_some_and(|i| i > q) => Choice::Identity,
        Some((e, _)) => Choice::Encode(e),
        None if identity == Some(0) => Choice::NotAcceptable,
        None => Choice::Identity,
    }
}

fn text(data: &[u8]) -> Option<Input> {
    let mut input = Input {
        order: vec![0, 1, 2],
        lines: Vec::new(),
    };
    for (name, value) in common::header_lines(data)? {
        match name.to_ascii_lowercase().as_str() {
            "order" => {
                input.order = value
                    .split_whitespace()
                    .map(|t| ALL.iter().position(|e| e.token() == t).map(|i| i as u8))
                    .collect::<Option<_>>()?;
            }
            "accept-encoding" => input.lines.push(Line::Raw(value.as_bytes().to_vec())),
            _ => return None,
        }
    }
    Some(input)
}

fuzz_target!(|data: &[u8]| {
    let Some(input) = common::input(data, text) else {
        return;
    };
    let order: Vec<Encoding> = input
        .order
        .iter()
        .take(4)
        .map(|b| ALL[usize::from(b % 3)])
        .collect();
    let mut h = HeaderMap::new();
    let mut elements: Vec<&Element> = Vec::new();
    let mut raw = false;
    for line in input.lines.iter().take(8) {
        let (text, elems) = match line {
            Line::Raw(b) => (b.clone(), None),
            Line::List(es) => (
                es.iter()
                    .map(Element::text)
                    .collect::<Vec<_>>()
                    .join(", ")
                    .into_bytes(),
                Some(es),
            ),
        };
        let Ok(v) = HeaderValue::from_bytes(&text) else {
            continue;
        };
        h.append(ACCEPT_ENCODING, v);
        match elems {
            Some(es) => elements.extend(es.iter()),
            None => raw = true,
        }
    }
    let choice = negotiate(&h, &order);

    let text: String = h
        .get_all(ACCEPT_ENCODING)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).to_ascii_lowercase())
        .collect::<Vec<_>>()
        .join(",");
    match choice {
        Choice::Encode(e) => {
            assert!(order.contains(&e), "{e:?} is not offered: {order:?}");
            assert!(
                text.contains(e.token()) || text.contains('*'),
                "{e:?} chosen from {text:?}"
            );
        }
        Choice::NotAcceptable => {
            assert!(
                text.contains("identity") || text.contains('*'),
                "406 from {text:?}, which does not refuse identity"
            );
        }
        Choice::Identity => {}
    }
    if h.is_empty() {
        assert_eq!(choice, Choice::Identity);
    }
    if !raw {
        assert_eq!(choice, model(&elements, &order), "{text:?} {order:?}");
    }
});
