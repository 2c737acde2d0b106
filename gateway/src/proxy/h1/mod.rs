//! The common proxied exchange — an idempotent request with no body, to a plain-HTTP/1.1
//! upstream — done in the request's own task.
//!
//! hyper's client drives each upstream connection from a task of its own and hands the
//! request and response across a channel: about 17,700 instructions per proxied 1 KiB
//! response, nearly half of the request's. Here the request's task writes the head and
//! parses the response's, and the response body reads the socket itself, so there is no
//! second task, no channel and no extra wake-up. Requests with a body, upgrades and
//! everything else keep hyper's client ([`super::pool`]).
//!
//! Framing follows RFC 9112 §6.3; 1xx responses are skipped (RFC 9110 §15.2), as
//! hyper's client does.

#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;

mod body;
mod chunked;
mod conn;
mod encode;
mod parse;

pub(crate) use body::Body;
use chunked::*;
pub(crate) use conn::{send, Conn};
pub(crate) use encode::Outgoing;
use parse::*;

use super::headers::Forwarding;
use super::pool::{Pool, SendError, Settings};
use bytes::{Buf, Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, HOST, TRANSFER_ENCODING};
use http::uri::Authority;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Response, StatusCode, Version};
use std::future::Future;
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// As many response header fields as hyper's client accepts.
const MAX_HEADERS: usize = 100;
/// A chunk-size line or trailer field longer than this is an error, not a wait for more.
const MAX_LINE: usize = 4096;
const INIT_BUF: usize = 8192;
/// The most a body read asks for at once.
const READ_CHUNK: usize = 64 * 1024;
/// A body dropped unread with at most this much of it left is read to its end, so that
/// its connection can carry the next request (see `Body::salvage`).
pub(super) const SALVAGE_MAX: u64 = 64 * 1024;
/// How long the rest of such a body may take to arrive before its connection is closed.
pub(super) const SALVAGE_TIME: std::time::Duration = std::time::Duration::from_secs(1);

fn invalid(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_size_lines() {
        assert_eq!(chunk_size(b"1a"), Some(26));
        assert_eq!(chunk_size(b"FF;name=value"), Some(255));
        assert_eq!(chunk_size(b"0"), Some(0));
        assert_eq!(chunk_size(b""), None);
        assert_eq!(chunk_size(b"x1"), None);
        assert_eq!(chunk_size(b"1x"), None);
        // 17 hex digits would overflow a u64.
        assert_eq!(chunk_size(b"10000000000000000"), None);
        // Blanks only before extensions, or at the end.
        assert_eq!(chunk_size(b"5 \t;a=b"), Some(5));
        assert_eq!(chunk_size(b"5\t"), Some(5));
        assert_eq!(chunk_size(b"5 x"), None);
        assert_eq!(chunk_size(b"5 5"), None);
        assert_eq!(chunk_size(b"5 =a"), None);
    }

    #[test]
    fn chunk_extensions_hold_no_line_break_or_control() {
        assert_eq!(
            chunked(b"5;a=\"b\tc\\\xff\"\r\nhello\r\n0\r\n\r\n").unwrap(),
            b"hello"
        );
        // Read up to the CRLF, a bare CR or LF was taken for part of the extension; a
        // reader ending the line there would take "xyz" for data (RFC 9112 §2.2).
        for ext in [
            &b"\rxyz"[..],
            b"\nxyz",
            b"=a\rb",
            b"=a\nb",
            b"=\x00",
            b"=\x1b",
            b"=\x7f",
        ] {
            let mut b = b"5;".to_vec();
            b.extend_from_slice(ext);
            b.extend_from_slice(b"\r\nhello\r\n0\r\n\r\n");
            assert!(chunked(&b).is_err(), "{:?}", String::from_utf8_lossy(ext));
            let mut last = b"2\r\nok\r\n0;".to_vec();
            last.extend_from_slice(ext);
            last.extend_from_slice(b"\r\n\r\n");
            assert!(
                chunked(&last).is_err(),
                "{:?}",
                String::from_utf8_lossy(ext)
            );
        }
    }

    /// A chunked body read from `bytes` (all of it there at once), or the error.
    fn chunked(bytes: &[u8]) -> io::Result<Vec<u8>> {
        let mut buf = BytesMut::from(bytes);
        let mut state = State::Chunked(Chunk::Size);
        let mut body = Vec::new();
        loop {
            match decode(&mut state, &mut buf)? {
                Step::Data(d) => body.extend_from_slice(&d),
                Step::Again => {}
                Step::End => return Ok(body),
                Step::More(_) => return Err(io::ErrorKind::UnexpectedEof.into()),
            }
        }
    }

    #[test]
    fn trailer_sections_are_field_lines() {
        let with = |trailers: &[u8]| {
            let mut b = b"2\r\nok\r\n0\r\n".to_vec();
            b.extend_from_slice(trailers);
            chunked(&b)
        };
        assert_eq!(with(b"\r\n").unwrap(), b"ok");
        assert_eq!(
            with(b"X-Sum: 1\r\nExpires: a\t\xff b\r\nE:\r\n\r\n").unwrap(),
            b"ok"
        );
        for bad in [
            &b"X-S w: 1"[..],
            b"X-Sum : 1",
            b": 1",
            b"no colon",
            b" X: folded",
            b"HTTP/1.1 200 OK",
            b"X: a\x00b",
            b"X: a\rb",
            b"X: a\nb",
            b"X: a\x7f",
        ] {
            let mut t = bad.to_vec();
            t.extend_from_slice(b"\r\n\r\n");
            assert!(with(&t).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn content_lengths() {
        assert_eq!(content_length(b"0"), Some(0));
        assert_eq!(content_length(b"1024"), Some(1024));
        assert_eq!(content_length(b""), None);
        assert_eq!(content_length(b"+5"), None);
        assert_eq!(content_length(b"5 "), None);
        assert_eq!(content_length(b"99999999999999999999"), None);
    }

    #[test]
    fn heads_parse_with_shared_values_and_need_their_empty_line() {
        let mut b = BytesMut::from(&b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: b\r\n"[..]);
        assert!(parse(&mut b).unwrap().is_none());
        b.extend_from_slice(b"\r\nok");
        let h = parse(&mut b).unwrap().unwrap();
        assert_eq!(h.status, StatusCode::OK);
        assert_eq!(h.headers["content-length"], "2");
        assert_eq!(h.headers["x-a"], "b");
        assert_eq!(h.length, Some(Ok(2)));
        assert_eq!(&b[..], b"ok");
        // Hop-by-hop fields are noted, not kept; one naming another field is kept so
        // that the field it names can be removed too.
        let mut b = BytesMut::from(
            &b"HTTP/1.1 200 OK\r\nConnection: close, x-priv\r\nKeep-Alive: 5\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"[..],
        );
        let h = parse(&mut b).unwrap().unwrap();
        assert!(h.close);
        assert_eq!(h.transfer, Some(true));
        assert_eq!(h.length, Some(Err(())));
        assert_eq!(h.headers.get("keep-alive"), None);
        assert_eq!(h.headers.get("transfer-encoding"), None);
        assert_eq!(h.headers["connection"], "close, x-priv");
        let mut bad = BytesMut::from(&b"SSH-2.0-OpenSSH\r\n\r\n"[..]);
        assert!(parse(&mut bad).is_err());
        // ASCII values are taken unchecked after httparse: what it lets through is what
        // HeaderValue allows (tab, obs-text), and it refuses the rest (DEL, controls) —
        // at every offset, so through its 8-, 16- and 32-byte matchers too.
        let mut b = BytesMut::from(&b"HTTP/1.1 200 OK\r\nX-A: a\tb\xe9\r\n\r\n"[..]);
        let h = parse(&mut b).unwrap().unwrap();
        assert_eq!(h.headers["x-a"].as_bytes(), b"a\tb\xe9");
        for at in [0, 1, 7, 8, 15, 16, 31, 32, 40, 63, 64, 70] {
            for c in [0x7fu8, 0x01, 0x00, 0x1f, b'\r'] {
                let mut head = b"HTTP/1.1 200 OK\r\nX-A: ".to_vec();
                head.extend(std::iter::repeat_n(b'v', at));
                head.push(c);
                head.extend(std::iter::repeat_n(b'w', 40));
                head.extend_from_slice(b"\r\n\r\n");
                assert!(
                    parse(&mut BytesMut::from(&head[..])).is_err(),
                    "{c:#x} at {at}"
                );
            }
            // (A value's leading tab would be whitespace around it, not part of it.)
            let mut head = b"HTTP/1.1 200 OK\r\nX-A: v".to_vec();
            head.extend(std::iter::repeat_n(b'v', at));
            head.extend_from_slice(b"\t\xff~ w\r\n\r\n");
            let h = parse(&mut BytesMut::from(&head[..])).unwrap().unwrap();
            assert!(h.headers["x-a"].as_bytes().ends_with(b"\t\xff~ w"), "{at}");
        }
    }

    #[test]
    fn transfer_codings_are_ascii() {
        let te = |value: &[u8]| {
            let mut head = b"HTTP/1.1 200 OK\r\nX-A: \xe9\r\nTransfer-Encoding: ".to_vec();
            head.extend_from_slice(value);
            head.extend_from_slice(b"\r\n\r\n");
            parse(&mut BytesMut::from(&head[..])).map(|h| h.unwrap().transfer)
        };
        assert_eq!(te(b"gzip, chunked").unwrap(), Some(true));
        assert_eq!(te(b"chunked, gzip").unwrap(), Some(false));
        // Chunked here, and read to the close by hyper's client, which takes the field as
        // text: refused.
        assert!(te(b"k\x8c, chunked").is_err());
        assert!(te(b"chunked\xff").is_err());
    }

    #[test]
    fn names_remembered_by_position_are_only_reused_for_the_same_bytes() {
        let names = |head: &[u8]| -> Vec<String> {
            let mut b = BytesMut::from(head);
            let h = parse(&mut b).unwrap().unwrap();
            h.headers.keys().map(|k| k.to_string()).collect()
        };
        let first = b"HTTP/1.1 200 OK\r\nServer: a\r\nX-One: 1\r\nContent-Length: 0\r\n\r\n";
        for _ in 0..2 {
            assert_eq!(names(first), ["server", "x-one", "content-length"]);
        }
        // Same positions, other names (one of the same length, one only in case).
        assert_eq!(
            names(b"HTTP/1.1 200 OK\r\nX-Two: 2\r\nX-Abc: 1\r\ncontent-LENGTH: 0\r\n\r\n"),
            ["x-two", "x-abc", "content-length"]
        );
        assert_eq!(names(first), ["server", "x-one", "content-length"]);
        // Past the remembered slots; a bad name (refused by httparse itself).
        let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..NAME_SLOTS + 4 {
            many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(names(&many).len(), NAME_SLOTS + 4);
        assert_eq!(
            names(&many)[NAME_SLOTS + 3],
            format!("x-{}", NAME_SLOTS + 3)
        );
        let mut bad = BytesMut::from(&b"HTTP/1.1 200 OK\r\nServer: a\r\nX\x7fOne: 1\r\n\r\n"[..]);
        assert!(parse(&mut bad).is_err());
    }

    #[test]
    fn the_requests_map_takes_the_responses_fields() {
        let mut req = HeaderMap::with_capacity(24);
        req.insert("host", HeaderValue::from_static("site"));
        req.insert("x-from-the-client", HeaderValue::from_static("1"));
        let room = req.capacity();
        let mut out = Outgoing::encode(Vec::new(), &Method::GET, "/", None, &req, None);
        out.recycle(req);
        // Emptied at once: nothing of the client's buffer is held while the response is
        // awaited.
        assert!(out.spare.is_empty());
        let mut b = BytesMut::from(&b"HTTP/1.1 200 OK\r\nX-A: 1\r\nContent-Length: 0\r\n\r\n"[..]);
        let h = parse_into(&mut b, &mut out.spare).unwrap().unwrap();
        let names: Vec<&str> = h.headers.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["x-a", "content-length"]);
        assert_eq!(h.headers.capacity(), room, "the map was reallocated");
        // A spare that still holds fields (never by `recycle`) is emptied first.
        let mut stale = HeaderMap::new();
        stale.insert("x-stale", HeaderValue::from_static("1"));
        let mut b = BytesMut::from(&b"HTTP/1.1 204 No Content\r\nX-B: 2\r\n\r\n"[..]);
        let h = parse_into(&mut b, &mut stale).unwrap().unwrap();
        assert_eq!(h.headers.len(), 1);
        assert!(h.headers.get("x-stale").is_none());
    }

    #[test]
    fn request_heads_are_encoded_in_origin_form() {
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("up"));
        h.append("x-n", HeaderValue::from_static("1"));
        h.append("x-n", HeaderValue::from_static("2"));
        h.insert("x-a", HeaderValue::from_static("b"));
        let host = HeaderValue::from_static("client.example");
        let mut out = Outgoing::encode(Vec::new(), &Method::GET, "/a?b=c", Some(&host), &h, None);
        // The given Host, first, in place of the one among the fields.
        assert_eq!(
            out.as_bytes(),
            b"GET /a?b=c HTTP/1.1\r\nhost: client.example\r\nx-n: 1\r\nx-n: 2\r\nx-a: b\r\n\r\n"
        );
        assert!(!out.head_request);
        out.set_host(Some(&HeaderValue::from_static("up:8080")));
        assert_eq!(
            out.as_bytes(),
            b"GET /a?b=c HTTP/1.1\r\nhost: up:8080\r\nx-n: 1\r\nx-n: 2\r\nx-a: b\r\n\r\n"
        );
        out.set_host(None);
        assert_eq!(
            out.as_bytes(),
            b"GET /a?b=c HTTP/1.1\r\nx-n: 1\r\nx-n: 2\r\nx-a: b\r\n\r\n"
        );
        out.set_host(Some(&host));
        assert_eq!(
            out.as_bytes(),
            b"GET /a?b=c HTTP/1.1\r\nhost: client.example\r\nx-n: 1\r\nx-n: 2\r\nx-a: b\r\n\r\n"
        );
        let head = Outgoing::encode(out.bytes, &Method::HEAD, "/", None, &HeaderMap::new(), None);
        assert_eq!(head.as_bytes(), b"HEAD / HTTP/1.1\r\n\r\n");
        assert!(head.head_request);
    }

    /// The fields a head carries, each name's values in order (how a recipient combines
    /// them, RFC 9110 §5.3), names sorted.
    fn fields_of(head: &[u8]) -> Vec<(String, Vec<String>)> {
        let mut slots = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut slots);
        assert!(matches!(req.parse(head), Ok(httparse::Status::Complete(_))));
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for f in req.headers.iter() {
            let name = f.name.to_ascii_lowercase();
            let value = String::from_utf8_lossy(f.value).into_owned();
            match out.iter_mut().find(|(n, _)| *n == name) {
                Some((_, vs)) => vs.push(value),
                None => out.push((name, vec![value])),
            }
        }
        out.sort();
        out
    }

    #[test]
    fn forwarding_written_into_the_head_is_what_the_map_would_send() {
        use super::super::headers::{add_via, forward, remove_hop_by_hop, trusted};
        let untrusted = trusted(&[]);
        let claims: [&[(&str, &str)]; 5] = [
            &[],
            &[("host", "site.example"), ("accept", "*/*")],
            &[
                ("host", "site.example"),
                ("x-forwarded-for", "6.6.6.6"),
                ("x-forwarded-for", "7.7.7.7"),
                ("x-forwarded-proto", "https"),
                ("x-forwarded-host", "evil"),
                ("forwarded", "for=6.6.6.6"),
                ("via", "1.0 other"),
                ("x-kept", "1"),
            ],
            &[
                ("via", "1.1 a"),
                ("via", "2 b"),
                ("x-forwarded-host", "evil"),
            ],
            // Host named hop-by-hop: still the upstream's Host line, but no X-Forwarded-Host.
            &[
                ("host", "site.example"),
                ("connection", "host"),
                ("x-forwarded-host", "evil"),
            ],
        ];
        let peers = [
            Some("192.0.2.7".parse().unwrap()),
            Some("2001:db8::1".parse().unwrap()),
            Some("::ffff:10.1.2.3".parse().unwrap()),
            None,
        ];
        let versions = [Version::HTTP_10, Version::HTTP_11, Version::HTTP_2];
        for claim in claims {
            let mut client = HeaderMap::new();
            for (k, v) in claim {
                client.append(*k, HeaderValue::from_static(v));
            }
            // As `prepare` has them: the Host line from the client's map, the rest from the
            // map with the hop-by-hop fields gone.
            let host = client.get("host");
            let mut h = client.clone();
            remove_hop_by_hop(&mut h);
            for peer in peers {
                for scheme in ["http", "https"] {
                    for version in versions {
                        let mut mapped = h.clone();
                        forward(&mut mapped, peer, scheme, &untrusted, false);
                        add_via(&mut mapped, version);
                        let want =
                            Outgoing::encode(Vec::new(), &Method::GET, "/", host, &mapped, None);
                        let fwd = Forwarding::direct(
                            h.get("host"),
                            peer,
                            scheme,
                            &untrusted,
                            false,
                            version,
                        )
                        .expect("an untrusted peer's fields go straight in");
                        let got =
                            Outgoing::encode(Vec::new(), &Method::GET, "/", host, &h, Some(&fwd));
                        let ctx = format!("{claim:?} {peer:?} {scheme} {version:?}");
                        assert_eq!(fields_of(&got.bytes), fields_of(&want.bytes), "{ctx}");
                        // And the map's way, for a request that goes over hyper's client.
                        let mut applied = h.clone();
                        fwd.apply(&mut applied);
                        assert_eq!(applied, mapped, "{ctx}");
                    }
                }
            }
        }
        // A trusted peer's chain, and RFC 7239, are left to the map.
        let all = trusted(&["0.0.0.0/0".to_string()]);
        let peer = peers[0];
        assert!(Forwarding::direct(None, peer, "http", &all, false, Version::HTTP_11).is_none());
        assert!(
            Forwarding::direct(None, peer, "http", &untrusted, true, Version::HTTP_11).is_none()
        );
    }
}
