//! `Accept-Encoding` negotiation, RFC 9110 §12.5.3.

use http::header::ACCEPT_ENCODING;
use http::{HeaderMap, HeaderValue};

/// A content coding the layer can produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    Br,
    Zstd,
    Gzip,
}

impl Encoding {
    /// The coding's token, as in `Content-Encoding` (RFC 9110 §8.4.1).
    pub fn token(self) -> &'static str {
        match self {
            Encoding::Br => "br",
            Encoding::Zstd => "zstd",
            Encoding::Gzip => "gzip",
        }
    }

    /// The file-name suffix of a precompressed sibling (`app.js.br`).
    pub fn file_suffix(self) -> &'static str {
        match self {
            Encoding::Br => ".br",
            Encoding::Zstd => ".zst",
            Encoding::Gzip => ".gz",
        }
    }

    pub(crate) fn header_value(self) -> HeaderValue {
        HeaderValue::from_static(self.token())
    }

    pub(crate) fn parse(token: &str) -> Option<Encoding> {
        let t = token.trim();
        if t.eq_ignore_ascii_case("br") {
            Some(Encoding::Br)
        } else if t.eq_ignore_ascii_case("zstd") {
            Some(Encoding::Zstd)
        } else if t.eq_ignore_ascii_case("gzip") || t.eq_ignore_ascii_case("x-gzip") {
            // §8.4.1.3: x-gzip is to be treated as gzip.
            Some(Encoding::Gzip)
        } else {
            None
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A coding [`Encoding`]'s `FromStr` doesn't know: it holds what was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownEncoding(pub String);

impl std::fmt::Display for UnknownEncoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unknown encoding {:?} (expected br, zstd or gzip)",
            self.0
        )
    }
}

impl std::error::Error for UnknownEncoding {}

impl std::str::FromStr for Encoding {
    type Err = UnknownEncoding;
    fn from_str(s: &str) -> Result<Self, UnknownEncoding> {
        Encoding::parse(s).ok_or_else(|| UnknownEncoding(s.to_string()))
    }
}

/// What the client accepts, as decided for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// Send the representation as it is.
    Identity,
    /// Send it in this coding when the response can be encoded; else as it is.
    Encode(Encoding),
    /// Nothing the server can send is acceptable: identity is refused (`identity;q=0`, or
    /// `*;q=0` without identity listed) and no coding the server offers has a q above 0.
    NotAcceptable,
}

/// Weights in thousandths, as q-values have at most three decimals (RFC 9110 §12.4.2).
type Q = u16;

/// Decides the coding for a request. `order` is the server's preference, used to break
/// ties between codings the client weights equally.
pub fn negotiate(headers: &HeaderMap, order: &[Encoding]) -> Choice {
    let all = headers.get_all(ACCEPT_ENCODING);
    let mut values = all.iter();
    // No Accept-Encoding: any coding is acceptable to the client, but, like nginx and
    // every browser-facing server, send identity, which any client can read.
    let Some(first) = values.next() else {
        return Choice::Identity;
    };
    if values.next().is_some() || first.len() > MEMO_MAX {
        return decide(all.iter(), order);
    }
    let value = first.as_bytes();
    let memo = LAST.try_with(|m| {
        let m = m.try_borrow().ok()?;
        (m.value == value && m.order == order).then_some(m.choice)
    });
    if let Ok(Some(choice)) = memo {
        return choice;
    }
    let choice = decide(std::iter::once(first), order);
    let _ = LAST.try_with(|m| {
        if let Ok(mut m) = m.try_borrow_mut() {
            m.value.clear();
            m.value.extend_from_slice(value);
            m.order.clear();
            m.order.extend_from_slice(order);
            m.choice = choice;
        }
    });
    choice
}

/// The last single `Accept-Encoding` value negotiated on this thread, with its answer:
/// clients send the same value request after request, and parsing one costs about a
/// thousand instructions, comparing it a few dozen.
struct Last {
    value: Vec<u8>,
    order: Vec<Encoding>,
    choice: Choice,
}

/// Longer values are negotiated every time (and not copied).
const MEMO_MAX: usize = 256;

thread_local! {
    static LAST: std::cell::RefCell<Last> = const {
        std::cell::RefCell::new(Last {
            value: Vec::new(),
            order: Vec::new(),
            choice: Choice::Identity,
        })
    };
}

fn decide<'a>(values: impl Iterator<Item = &'a HeaderValue>, order: &[Encoding]) -> Choice {
    let mut listed: [Option<Q>; 3] = [None; 3];
    let mut identity: Option<Q> = None;
    let mut star: Option<Q> = None;
    for value in values {
        let Ok(value) = value.to_str() else { continue };
        for element in value.split(',') {
            let mut params = element.split(';');
            let coding = params.next().unwrap_or("").trim();
            if coding.is_empty() {
                continue;
            }
            let mut q: Q = 1000;
            let mut valid = true;
            for p in params {
                let p = p.trim();
                if let Some(v) = p.strip_prefix("q=").or_else(|| p.strip_prefix("Q=")) {
                    match parse_q(v.trim()) {
                        Some(v) => q = v,
                        None => valid = false,
                    }
                }
            }
            // A malformed weight makes the element meaningless: ignore it rather than
            // guess.
            if !valid {
                continue;
            }
            if coding == "*" {
                star = Some(star.map_or(q, |s| s.max(q)));
            } else if coding.eq_ignore_ascii_case("identity") {
                identity = Some(identity.map_or(q, |s| s.max(q)));
            } else if let Some(enc) = Encoding::parse(coding) {
                let slot = &mut listed[enc.index()];
                *slot = Some(slot.map_or(q, |s| s.max(q)));
            }
        }
    }
    // §12.5.3: a coding not listed takes the weight of `*`, else is not acceptable.
    // Identity not listed takes the weight of `*`, else is acceptable but weighs nothing
    // against a coding the client asked for.
    let identity_q = identity.or(star);
    let mut best: Option<(Encoding, Q)> = None;
    for &enc in order {
        let q = listed[enc.index()].or(star).unwrap_or(0);
        if q > 0 && best.is_none_or(|(_, b)| q > b) {
            best = Some((enc, q));
        }
    }
    match best {
        // A client that weights identity above every coding it accepts gets identity.
        Some((_, q)) if identity_q.is_some_and(|i| i > q) => Choice::Identity,
        Some((enc, _)) => Choice::Encode(enc),
        None if identity_q == Some(0) => Choice::NotAcceptable,
        None => Choice::Identity,
    }
}

/// `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )`, RFC 9110 §12.4.2.
fn parse_q(s: &str) -> Option<Q> {
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, f),
        None => (s, ""),
    };
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut thousandths: Q = 0;
    for (i, b) in frac.bytes().enumerate() {
        thousandths += Q::from(b - b'0') * [100, 10, 1][i];
    }
    match int {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORDER: [Encoding; 3] = [Encoding::Br, Encoding::Zstd, Encoding::Gzip];

    fn choose(v: &str) -> Choice {
        let mut h = HeaderMap::new();
        h.insert(ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
        negotiate(&h, &ORDER)
    }

    #[test]
    fn absent_header_means_identity() {
        assert_eq!(negotiate(&HeaderMap::new(), &ORDER), Choice::Identity);
    }

    #[test]
    fn empty_header_means_identity() {
        assert_eq!(choose(""), Choice::Identity);
    }

    #[test]
    fn server_order_breaks_ties() {
        assert_eq!(
            choose("gzip, deflate, br, zstd"),
            Choice::Encode(Encoding::Br)
        );
        assert_eq!(choose("gzip, zstd"), Choice::Encode(Encoding::Zstd));
        let mut h = HeaderMap::new();
        h.insert(ACCEPT_ENCODING, HeaderValue::from_static("gzip, br"));
        assert_eq!(
            negotiate(&h, &[Encoding::Gzip, Encoding::Br]),
            Choice::Encode(Encoding::Gzip)
        );
    }

    #[test]
    fn q_values_are_respected() {
        assert_eq!(
            choose("br;q=0.5, gzip;q=0.8"),
            Choice::Encode(Encoding::Gzip)
        );
        assert_eq!(choose("br;q=0, gzip"), Choice::Encode(Encoding::Gzip));
        assert_eq!(choose("gzip;q=0"), Choice::Identity);
        assert_eq!(choose("GZIP;Q=1.000"), Choice::Encode(Encoding::Gzip));
        assert_eq!(choose("gzip; q=0.001"), Choice::Encode(Encoding::Gzip));
        // Identity weighted above the only acceptable coding wins.
        assert_eq!(choose("gzip;q=0.5, identity"), Choice::Identity);
        // Equal weights: the server may encode.
        assert_eq!(
            choose("gzip;q=0.5, identity;q=0.5"),
            Choice::Encode(Encoding::Gzip)
        );
    }

    #[test]
    fn star_covers_unlisted_codings() {
        assert_eq!(choose("*"), Choice::Encode(Encoding::Br));
        assert_eq!(choose("br;q=0, *"), Choice::Encode(Encoding::Zstd));
        assert_eq!(choose("*;q=0.5, gzip"), Choice::Encode(Encoding::Gzip));
        assert_eq!(choose("*;q=0"), Choice::NotAcceptable);
        assert_eq!(choose("*;q=0, identity"), Choice::Identity);
    }

    #[test]
    fn identity_refused_with_nothing_acceptable_is_406() {
        assert_eq!(choose("identity;q=0"), Choice::NotAcceptable);
        assert_eq!(choose("deflate, identity;q=0"), Choice::NotAcceptable);
        assert_eq!(choose("identity;q=0, gzip"), Choice::Encode(Encoding::Gzip));
    }

    #[test]
    fn unknown_codings_and_bad_weights_are_ignored() {
        assert_eq!(choose("compress, deflate, snappy"), Choice::Identity);
        assert_eq!(choose("gzip;q=2, br;q=abc"), Choice::Identity);
        assert_eq!(choose("gzip;q=0.5555"), Choice::Identity);
        assert_eq!(choose("x-gzip"), Choice::Encode(Encoding::Gzip));
        assert_eq!(choose(" , ,gzip"), Choice::Encode(Encoding::Gzip));
    }

    #[test]
    fn a_remembered_value_is_told_apart_from_another_and_from_another_order() {
        assert_eq!(choose("gzip, br"), Choice::Encode(Encoding::Br));
        assert_eq!(choose("gzip, br"), Choice::Encode(Encoding::Br));
        assert_eq!(choose("gzip, bR;q=0"), Choice::Encode(Encoding::Gzip));
        let mut h = HeaderMap::new();
        h.insert(ACCEPT_ENCODING, HeaderValue::from_static("gzip, bR;q=0"));
        assert_eq!(negotiate(&h, &[Encoding::Zstd]), Choice::Identity);
        assert_eq!(choose("gzip, bR;q=0"), Choice::Encode(Encoding::Gzip));
        // A second line changes the answer though the first is the remembered one.
        h.append(ACCEPT_ENCODING, HeaderValue::from_static("zstd"));
        assert_eq!(negotiate(&h, &ORDER), Choice::Encode(Encoding::Zstd));
    }

    #[test]
    fn multiple_header_lines_combine() {
        let mut h = HeaderMap::new();
        h.append(ACCEPT_ENCODING, HeaderValue::from_static("gzip;q=0.2"));
        h.append(ACCEPT_ENCODING, HeaderValue::from_static("zstd"));
        assert_eq!(negotiate(&h, &ORDER), Choice::Encode(Encoding::Zstd));
    }

    #[test]
    fn q_parsing() {
        assert_eq!(parse_q("0"), Some(0));
        assert_eq!(parse_q("0.5"), Some(500));
        assert_eq!(parse_q("0.25"), Some(250));
        assert_eq!(parse_q("1"), Some(1000));
        assert_eq!(parse_q("1.0"), Some(1000));
        assert_eq!(parse_q("1.5"), None);
        assert_eq!(parse_q("2"), None);
        assert_eq!(parse_q("-1"), None);
    }
}
