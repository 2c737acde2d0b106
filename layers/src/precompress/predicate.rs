//! Which responses are worth compressing.

use http::header::{CACHE_CONTROL, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE};
use http::{Response, StatusCode};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Decides whether a response may be compressed. The layer only asks about 200 responses
/// without a `Content-Encoding` of their own.
pub trait Predicate: Clone + Send + Sync + 'static {
    /// `size` is the body's exact length when known.
    fn should_compress<B>(&self, res: &Response<B>, size: Option<u64>) -> bool;

    /// Whether a response of this `Content-Type` could be compressed for some client: such
    /// responses get `Vary: Accept-Encoding` even when sent as they are. It must hold for
    /// every type `should_compress` may accept: a response of a type it refuses is sent as
    /// it is without asking `should_compress` (or looking in the variant cache).
    fn compressible_type(&self, content_type: &http::HeaderValue) -> bool {
        let _ = content_type;
        true
    }
}

/// The default predicate: compressible types at or above a minimum size, never a response
/// that is already encoded or marked `Cache-Control: no-transform` (RFC 9111 §5.2.2.6).
#[derive(Debug, Clone)]
pub struct DefaultPredicate {
    min_size: u64,
    types: Vec<TypePattern>,
    /// Names this list of types in the per-thread memo of answers.
    id: u64,
}

fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The last few answers of `type_matches`, per thread: a server sends the same handful of
/// types again and again, and matching one against the list costs several hundred
/// instructions, a lookup here a few dozen.
struct Memo {
    slots: [(u64, Vec<u8>, bool); MEMO_SLOTS],
    next: usize,
}

const MEMO_SLOTS: usize = 8;

thread_local! {
    static MEMO: RefCell<Memo> = RefCell::new(Memo {
        slots: Default::default(),
        next: 0,
    });
}

/// The media types compressed by default: text, scripts, data formats, SVG, wasm and
/// uncompressed font formats. Images, video, audio and archives are compressed already.
pub const DEFAULT_TYPES: &[&str] = &[
    "text/*",
    "application/javascript",
    "application/x-javascript",
    "application/ecmascript",
    "application/json",
    "application/*+json",
    "application/xml",
    "application/*+xml",
    "image/svg+xml",
    "application/wasm",
    "font/ttf",
    "font/otf",
    "application/x-font-ttf",
    "application/x-font-otf",
    "application/vnd.ms-fontobject",
];

/// Never compressed whatever the list says: events must reach the client as they are sent.
const NEVER: &[&str] = &["text/event-stream"];

impl Default for DefaultPredicate {
    fn default() -> Self {
        DefaultPredicate {
            min_size: 1024,
            types: DEFAULT_TYPES.iter().map(|t| TypePattern::new(t)).collect(),
            id: next_id(),
        }
    }
}

impl DefaultPredicate {
    pub fn new() -> Self {
        Self::default()
    }

    /// Bodies smaller than this are sent as they are (default 1 KiB): the coding's framing
    /// would eat most of the gain.
    pub fn min_size(mut self, bytes: u64) -> Self {
        self.min_size = bytes;
        self
    }

    /// Replaces the list of compressible media types. A pattern is `type/subtype`,
    /// `type/*`, or `type/*+suffix`; parameters and case are ignored.
    pub fn types<I, S>(mut self, types: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.types = types
            .into_iter()
            .map(|t| TypePattern::new(t.as_ref()))
            .collect();
        self.id = next_id();
        self
    }

    fn type_matches(&self, content_type: &[u8]) -> bool {
        let memo = MEMO.try_with(|m| {
            let m = m.try_borrow().ok()?;
            m.slots
                .iter()
                .find(|(id, ct, _)| *id == self.id && ct.as_slice() == content_type)
                .map(|s| s.2)
        });
        if let Ok(Some(answer)) = memo {
            return answer;
        }
        let answer = self.match_types(content_type);
        if content_type.len() <= 128 {
            let _ = MEMO.try_with(|m| {
                if let Ok(mut m) = m.try_borrow_mut() {
                    let i = m.next;
                    m.next = (i + 1) % MEMO_SLOTS;
                    let slot = &mut m.slots[i];
                    slot.0 = self.id;
                    slot.1.clear();
                    slot.1.extend_from_slice(content_type);
                    slot.2 = answer;
                }
            });
        }
        answer
    }

    fn match_types(&self, content_type: &[u8]) -> bool {
        // Asked on every response, so no allocation and no UTF-8 pass: bytes, lowercased
        // into a stack buffer only when they need it.
        let essence = match content_type.iter().position(|&b| b == b';') {
            Some(i) => &content_type[..i],
            None => content_type,
        };
        let essence = essence.trim_ascii();
        let mut buf = [0u8; 128];
        let essence = if essence.iter().any(u8::is_ascii_uppercase) {
            let Some(dst) = buf.get_mut(..essence.len()) else {
                return false;
            };
            dst.copy_from_slice(essence);
            dst.make_ascii_lowercase();
            &*dst
        } else {
            essence
        };
        let Some(slash) = essence.iter().position(|&b| b == b'/') else {
            return false;
        };
        if NEVER.iter().any(|n| n.as_bytes() == essence) {
            return false;
        }
        let (top, sub) = (&essence[..=slash], &essence[slash + 1..]);
        !sub.is_empty() && self.types.iter().any(|p| p.matches(essence, top, sub))
    }
}

impl Predicate for DefaultPredicate {
    fn should_compress<B>(&self, res: &Response<B>, size: Option<u64>) -> bool {
        if res.status() != StatusCode::OK || res.headers().contains_key(CONTENT_ENCODING) {
            return false;
        }
        let size = size.or_else(|| {
            res.headers()
                .get(CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse().ok())
        });
        if size.is_some_and(|s| s < self.min_size) {
            return false;
        }
        if no_transform(res) {
            return false;
        }
        res.headers()
            .get(CONTENT_TYPE)
            .is_some_and(|ct| self.type_matches(ct.as_bytes()))
    }

    fn compressible_type(&self, content_type: &http::HeaderValue) -> bool {
        self.type_matches(content_type.as_bytes())
    }
}

pub(crate) fn no_transform<B>(res: &Response<B>) -> bool {
    res.headers().get_all(CACHE_CONTROL).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',')
                .any(|d| d.trim().eq_ignore_ascii_case("no-transform"))
        })
    })
}

#[derive(Debug, Clone)]
enum TypePattern {
    Exact(Box<[u8]>),
    /// `text/*`: the top-level type, with its slash.
    Top(Box<[u8]>),
    /// `application/*+json`: the top-level type with its slash, and the suffix with its plus.
    Suffix(Box<[u8]>, Box<[u8]>),
}

impl TypePattern {
    fn new(p: &str) -> TypePattern {
        let p = p
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let bytes = |s: &str| s.as_bytes().to_vec().into_boxed_slice();
        match p.split_once("/*") {
            Some((top, "")) => TypePattern::Top(bytes(&format!("{top}/"))),
            Some((top, rest)) if rest.starts_with('+') => {
                TypePattern::Suffix(bytes(&format!("{top}/")), bytes(rest))
            }
            _ => TypePattern::Exact(bytes(&p)),
        }
    }

    /// `essence` is lowercase, `top` its type with the slash, `sub` the rest (not empty).
    fn matches(&self, essence: &[u8], top: &[u8], sub: &[u8]) -> bool {
        match self {
            TypePattern::Exact(t) => **t == *essence,
            TypePattern::Top(t) => **t == *top,
            TypePattern::Suffix(t, suffix) => {
                **t == *top && sub.len() > suffix.len() && sub.ends_with(suffix)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn res(ct: &str, len: u64) -> Response<()> {
        let mut r = Response::new(());
        r.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_str(ct).unwrap());
        r.headers_mut()
            .insert(CONTENT_LENGTH, HeaderValue::from(len));
        r
    }

    #[test]
    fn default_types() {
        let p = DefaultPredicate::default();
        for ct in [
            "text/html; charset=utf-8",
            "text/css",
            "application/javascript",
            "application/json",
            "application/ld+json",
            "application/rss+xml",
            "image/svg+xml",
            "application/wasm",
            "font/ttf",
            "TEXT/PLAIN",
        ] {
            assert!(p.should_compress(&res(ct, 4096), None), "{ct}");
        }
        for ct in [
            "image/png",
            "image/jpeg",
            "video/mp4",
            "application/zip",
            "application/gzip",
            "font/woff2",
            "text/event-stream",
            "application/octet-stream",
        ] {
            assert!(!p.should_compress(&res(ct, 4096), None), "{ct}");
        }
    }

    #[test]
    fn small_encoded_and_no_transform_are_left_alone() {
        let p = DefaultPredicate::default();
        assert!(!p.should_compress(&res("text/plain", 1023), None));
        assert!(p.should_compress(&res("text/plain", 1024), None));
        assert!(!p.should_compress(&res("text/plain", 4096), Some(10)));
        let mut r = res("text/plain", 4096);
        r.headers_mut()
            .insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        assert!(!p.should_compress(&r, None));
        let mut r = res("text/plain", 4096);
        r.headers_mut().insert(
            CACHE_CONTROL,
            HeaderValue::from_static("public, No-Transform"),
        );
        assert!(!p.should_compress(&r, None));
        let mut r = res("text/plain", 4096);
        *r.status_mut() = StatusCode::PARTIAL_CONTENT;
        assert!(!p.should_compress(&r, None));
    }

    #[test]
    fn custom_types_and_size() {
        let p = DefaultPredicate::new()
            .types(["application/x-custom"])
            .min_size(0);
        assert!(p.should_compress(&res("application/x-custom", 1), None));
        assert!(!p.should_compress(&res("text/plain", 1), None));
    }
}
