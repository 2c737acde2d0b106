//! gatehouse's own HTTP/1.1 client reading a response from bytes instead of a socket, and
//! [`check`], which compares that reading with hyper's client reading the same bytes. For
//! the `h1_response` fuzz target (`fuzz/`) and for `cargo test`, which replays its seeds;
//! built only for tests and with the `fuzzing` feature.
//!
//! [`read`] runs the same code as a proxied exchange — [`final_head`], [`Head::framing`],
//! [`decode`] — and only stands in for the socket: `reads` are what successive reads
//! return, and their end is the upstream closing the connection.

use super::{decode, final_head, Chunk, State, Step};
use bytes::{Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Version};
use std::io;

/// How a response's body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Length(u64),
    Chunked,
    /// Read until the connection closes.
    Close,
}

/// A response as gatehouse's client read it.
#[derive(Debug, PartialEq)]
pub struct Message {
    pub status: StatusCode,
    pub version: Version,
    /// The fields as the proxy gets them: the hop-by-hop ones left out, but a `Connection`
    /// naming other fields (those are removed later, with it).
    pub headers: HeaderMap,
    pub framing: Framing,
    pub body: Vec<u8>,
    /// The bytes of the input the message took, any 1xx heads before it included.
    pub consumed: usize,
    /// Where a chunked body's trailer section begins in the input.
    pub trailers: Option<usize>,
    /// Whether the connection would carry another exchange: the message allows it, and
    /// nothing came after it (bytes read later are seen by the pool's check when the
    /// connection is taken out again: not reused either).
    pub reuse: bool,
}

/// Reads a response to a GET (or a HEAD) from `reads`, as [`super::exchange`] and
/// [`super::Body`] do from a socket. Errors are the messages gatehouse fails with.
pub fn read(reads: &[&[u8]], head_request: bool, max_buf: usize) -> Result<Message, String> {
    let err = |e: io::Error| e.to_string();
    let mut reads = reads.iter().filter(|r| !r.is_empty());
    let mut buf = BytesMut::new();
    let mut fed = 0;
    let mut spare = HeaderMap::new();
    let mut head = loop {
        if !buf.is_empty() {
            match final_head(&mut buf, &mut spare).map_err(err)? {
                Some(head) => break head,
                None if buf.len() >= max_buf => return Err("response head too large".into()),
                None => {}
            }
        }
        let Some(r) = reads.next() else {
            return Err("connection closed in response head".into());
        };
        buf.extend_from_slice(r);
        fed += r.len();
    };
    let (mut state, keep) = head.framing(head_request).map_err(err)?;
    let framing = match state {
        State::Length(n) => Framing::Length(n),
        State::Chunked(_) => Framing::Chunked,
        State::Eof => Framing::Close,
        State::Done => unreachable!("framing never says done"),
    };
    let mut body = Vec::new();
    let mut trailers = None;
    let reuse = loop {
        if trailers.is_none() && matches!(state, State::Chunked(Chunk::Trailers)) {
            trailers = Some(fed - buf.len());
        }
        match decode(&mut state, &mut buf).map_err(err)? {
            Step::Data(d) => body.extend_from_slice(&d),
            Step::Again => {}
            Step::End => break keep && buf.is_empty() && reads.next().is_none(),
            Step::More(_) => match reads.next() {
                Some(r) => {
                    buf.extend_from_slice(r);
                    fed += r.len();
                }
                None if matches!(state, State::Eof) => break false,
                None => return Err("the upstream closed the connection mid-body".into()),
            },
        }
    };
    Ok(Message {
        status: head.status,
        version: head.version,
        headers: head.headers,
        framing,
        body,
        consumed: fed - buf.len(),
        trailers,
        reuse,
    })
}

/// hyper's default limit on a response head, far above what the fuzzer makes.
const MAX_BUF: usize = 400 * 1024;

/// The fuzz target's input: the request's method, how many bytes each read returns (0: all
/// at once) and the response. As text (the seeds): a first line `GET` or `HEAD`, optionally
/// followed by a space and the read size, then the response as sent. Otherwise the first
/// byte: bit 0 set for HEAD, the other bits the read size.
pub fn input(data: &[u8]) -> (bool, usize, &[u8]) {
    if let Some(nl) = data.iter().position(|&b| b == b'\n') {
        let line = std::str::from_utf8(&data[..nl]).unwrap_or_default();
        let mut words = line.trim_end_matches('\r').split(' ');
        let head = match words.next() {
            Some("GET") => Some(false),
            Some("HEAD") => Some(true),
            _ => None,
        };
        let size = match words.next() {
            None => Some(0),
            Some(w) => w.parse().ok(),
        };
        if let (Some(head), Some(size), None) = (head, size, words.next()) {
            return (head, size, &data[nl + 1..]);
        }
    }
    match data.split_first() {
        Some((&b, rest)) => (b & 1 == 1, usize::from(b >> 1), rest),
        None => (false, 0, data),
    }
}

/// Reads the response in `data` (see [`input`]) with gatehouse's client and with hyper's,
/// and panics where they disagree in a way that matters:
///
/// - however the bytes arrive, gatehouse reads the same message (or, for a line longer
///   than it allows, refuses);
/// - every field value gatehouse took unchecked is a valid `HeaderValue`;
/// - when gatehouse accepts a response, hyper's client accepts the same bytes as one
///   response with the same status, version, fields (but the hop-by-hop ones), framing
///   (checked against RFC 9112 §6.3 spelled out below as well) and body, *ending at the
///   same byte*: hyper reads the message whole from exactly the bytes gatehouse took and
///   not from one byte fewer. A different end is a response-splitting desync on a pooled
///   connection;
/// - gatehouse reuses the connection only when §6.3 and §9.3 allow it;
/// - when gatehouse refuses a response hyper's client reads whole, it is one of the cases
///   where gatehouse is stricter on purpose (refusing is always safe), listed in
///   [`stricter`].
pub fn check(data: &[u8]) {
    let (head_request, size, response) = input(data);
    let whole = read(&[response], head_request, MAX_BUF);
    if size > 0 {
        let reads: Vec<&[u8]> = response.chunks(size).collect();
        match read(&reads, head_request, MAX_BUF) {
            // A line is refused once more than `MAX_LINE` bytes of it are buffered: in one
            // read of the whole response, it may already be complete.
            Err(e) if e == "chunk-size line or trailer too long" => {}
            pieces => assert_eq!(pieces, whole, "read {size} bytes at a time"),
        }
    }
    match whole {
        Ok(m) => accepted(&m, response, head_request),
        Err(e) => refused(&e, response, head_request),
    }
}

fn accepted(m: &Message, response: &[u8], head_request: bool) {
    for (name, value) in &m.headers {
        assert!(
            HeaderValue::from_bytes(value.as_bytes()).is_ok(),
            "{name}: {value:?} is not a valid field value"
        );
        assert_eq!(
            HeaderName::from_bytes(name.as_str().as_bytes())
                .ok()
                .as_ref(),
            Some(name)
        );
    }
    assert!(m.consumed <= response.len());
    if m.framing == Framing::Close {
        assert_eq!(
            m.consumed,
            response.len(),
            "a close-delimited body ends at the close"
        );
    }
    let took = &response[..m.consumed];
    let Hyper::Head {
        status,
        version,
        headers,
        exact,
        body,
        end,
    } = hyper(took, head_request)
    else {
        panic!("gatehouse read a response head that hyper's client refuses: {took:?}");
    };
    assert_eq!(m.status, status, "status");
    assert_eq!(m.version, version, "version");
    let framing = rfc9112_framing(status, version, &headers, head_request)
        .unwrap_or_else(|e| panic!("gatehouse read a body where RFC 9112 says {e}"));
    assert_eq!(m.framing, framing, "framing");
    let no_body = head_request || status == 204 || status == 304;
    let te_decides = !no_body && headers.contains_key(TRANSFER_ENCODING);
    assert_eq!(m.headers, forwarded(&headers, te_decides), "header fields");
    match framing {
        Framing::Length(n) => assert_eq!(exact, Some(n), "hyper's length"),
        _ => assert_eq!(exact, None, "hyper's length"),
    }
    assert_eq!(m.body, body, "body");
    match end {
        Ok(()) => {}
        // hyper's client refuses a trailer section of more than 100 fields or 16 KiB;
        // gatehouse does not keep trailer fields (it reads each line and drops it, RFC 9110
        // §6.5.1 lets a recipient discard them), so it needs no such limit. Where the
        // section ends is then checked here: field lines, each without CR or LF, ended by
        // CRLF, up to the first empty line (RFC 9112 §7.1.2).
        Err(e)
            if e.contains("chunk trailers count overflow")
                || e.contains("chunk trailers bytes over limit") =>
        {
            let at = m.trailers.expect("a chunked body has a trailer section");
            let section = &response[at..m.consumed];
            let lines: Vec<&[u8]> = section.split(|&b| b == b'\n').collect();
            assert!(lines.len() > 100 || section.len() >= 16 * 1024, "{e}");
            assert_eq!(lines.last(), Some(&&b""[..]), "the section ends with CRLF");
            let (end, fields) = lines[..lines.len() - 1].split_last().expect("lines");
            assert_eq!(*end, b"\r", "the section ends with an empty line");
            for f in fields {
                let f = f.strip_suffix(b"\r").expect("every line ends with CRLF");
                assert!(!f.is_empty() && !f.contains(&b'\r'), "{f:?}");
            }
            return;
        }
        Err(e) => panic!("gatehouse read a response hyper's client refuses ({e}): {took:?}"),
    }
    // The message ends where gatehouse says: hyper read it whole from these bytes (above),
    // and cannot from one byte fewer.
    if framing != Framing::Close {
        let short = &took[..took.len() - 1];
        if let Hyper::Head { end: Ok(()), .. } = hyper(short, head_request) {
            panic!(
                "hyper's client reads a whole response from {} bytes, gatehouse from {}: {took:?}",
                short.len(),
                took.len()
            );
        }
    }
    // RFC 9112 §9.3: a connection is used again only after an HTTP/1.1 message without
    // `Connection: close` whose end is known from its framing, and not after a message
    // carrying both Transfer-Encoding and Content-Length (§6.3, point 3).
    let close = headers.get_all(CONNECTION).iter().any(|v| {
        v.as_bytes()
            .split(|&b| b == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"))
    });
    let both = te_decides && headers.contains_key(CONTENT_LENGTH);
    let keep = version == Version::HTTP_11 && !close && framing != Framing::Close && !both;
    assert_eq!(
        m.reuse,
        keep && m.consumed == response.len(),
        "connection reuse"
    );
}

/// The reasons gatehouse may refuse a response that hyper's client reads whole, as
/// `status`, `version` and `h`: each a place where gatehouse is stricter, on purpose.
fn stricter(e: &str, response: &[u8], status: StatusCode, version: Version, h: &HeaderMap) -> bool {
    let te = h.get_all(TRANSFER_ENCODING);
    match e {
        // RFC 9110 §15.2.2: a server must not switch protocols unasked; this client never
        // asks (upgrades go through hyper's), where hyper's hands the 101 on.
        "101 to a request without Upgrade" => status == StatusCode::SWITCHING_PROTOCOLS,
        // RFC 9112 §6.1: Transfer-Encoding in an HTTP/1.0 message is faulty framing, even on
        // a response that has no body anyway (to a HEAD, a 204, a 304), which hyper takes.
        "Transfer-Encoding in an HTTP/1.0 response" => {
            version == Version::HTTP_10 && te.iter().next().is_some()
        }
        // RFC 9112 §6.1: codings are tokens. hyper's client, not seeing `chunked` in a field
        // that is not text, reads such a body to the close. (gatehouse refuses it on a 1xx
        // too, which hyper skips.)
        "Transfer-Encoding not ASCII" => !response.is_ascii(),
        // RFC 9110 §8.6 lets a recipient take `Content-Length: 5, 5` (hyper does) or refuse
        // it; gatehouse wants plain digits, at most 19 of them (hyper takes leading zeros up
        // to u64::MAX).
        "invalid Content-Length" => h.get_all(CONTENT_LENGTH).iter().any(|v| {
            let v = v.as_bytes();
            v.len() > 19 || !v.iter().all(u8::is_ascii_digit)
        }),
        // RFC 9112 §7.1.1: an extension is tokens and quoted strings, with no control but
        // HTAB; hyper refuses only a CR or LF in one.
        "bad chunk-size line" => true,
        // RFC 9112 §2.2 lets a recipient end a line at a bare LF, or refuse it; hyper hands
        // the trailer section to httparse, which does the former (and ends the section at
        // a leading one, unread). gatehouse refuses a bare CR or LF in a trailer line.
        "bad trailer field" => response
            .windows(2)
            .any(|w| (w[0] != b'\r' && w[1] == b'\n') || (w[0] == b'\r' && w[1] != b'\n')),
        // RFC 9112 §6.1: only chunked is decoded; hyper's client reads a body coded
        // otherwise (`gzip`, `gzip, chunked`) and hands the coded bytes on.
        "a transfer coding other than chunked" => te
            .iter()
            .any(|v| crate::proxy::headers::names_other_coding(v.as_bytes())),
        // At most 16 hex digits (hyper takes leading zeros).
        "bad chunk size" => {
            let mut run = 0;
            response.iter().any(|b| {
                run = if b.is_ascii_hexdigit() { run + 1 } else { 0 };
                run > 16
            })
        }
        _ => false,
    }
}

fn refused(e: &str, response: &[u8], head_request: bool) {
    if let Hyper::Head {
        status,
        version,
        headers,
        end: Ok(()),
        ..
    } = hyper(response, head_request)
    {
        assert!(
            stricter(e, response, status, version, &headers),
            "gatehouse refuses ({e}) a response hyper's client reads whole: {response:?}"
        );
    }
}

/// The hop-by-hop fields, which gatehouse leaves out as it parses (RFC 9110 §7.6.1); a
/// `Connection` naming other fields is kept, for them to be removed with it later. The
/// Content-Length of a message framed by Transfer-Encoding is dropped (RFC 9112 §6.3,
/// point 3).
fn forwarded(h: &HeaderMap, te_decides: bool) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in h {
        let keep = match name.as_str() {
            "connection" => value.as_bytes().split(|&b| b == b',').any(|t| {
                let t = t.trim_ascii();
                !t.is_empty()
                    && !t.eq_ignore_ascii_case(b"close")
                    && !t.eq_ignore_ascii_case(b"keep-alive")
            }),
            "keep-alive" | "te" | "trailer" | "transfer-encoding" | "upgrade" => false,
            n if n.starts_with("proxy-") => false,
            "content-length" => !te_decides,
            _ => true,
        };
        if keep {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

/// RFC 9112 §6.3, the message body length of a response, spelled out over its head.
fn rfc9112_framing(
    status: StatusCode,
    version: Version,
    h: &HeaderMap,
    head_request: bool,
) -> Result<Framing, &'static str> {
    // 1. No body after a HEAD, a 1xx, a 204 or a 304 (2. is CONNECT, never sent here).
    if head_request || status.is_informational() || status == 204 || status == 304 {
        return Ok(Framing::Length(0));
    }
    // 3. Transfer-Encoding overrides Content-Length: chunked when it is the final coding,
    // else until the connection closes. §6.1: not in HTTP/1.0.
    if let Some(te) = h.get_all(TRANSFER_ENCODING).iter().next_back() {
        if version == Version::HTTP_10 {
            return Err("Transfer-Encoding in HTTP/1.0 is faulty framing");
        }
        let last = te
            .as_bytes()
            .rsplit(|&b| b == b',')
            .next()
            .unwrap_or_default();
        return Ok(if last.trim_ascii().eq_ignore_ascii_case(b"chunked") {
            Framing::Chunked
        } else {
            Framing::Close
        });
    }
    // 5. Content-Length, the same number in every field and list member (RFC 9110 §8.6);
    // 4. anything else is unrecoverable.
    let mut length = None;
    for v in h.get_all(CONTENT_LENGTH) {
        for n in v.as_bytes().split(|&b| b == b',') {
            let n = n.trim_ascii();
            let n = std::str::from_utf8(n)
                .ok()
                .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|n| n.parse::<u64>().ok())
                .ok_or("an invalid Content-Length is an error")?;
            if length.is_some_and(|l| l != n) {
                return Err("differing Content-Lengths are an error");
            }
            length = Some(n);
        }
    }
    // 7. Otherwise until the connection closes.
    Ok(length.map_or(Framing::Close, Framing::Length))
}

/// What hyper's client made of a response.
enum Hyper {
    /// No response head: the error.
    NoHead,
    Head {
        status: StatusCode,
        version: Version,
        headers: HeaderMap,
        /// The body's exact length, as hyper knows it from the head.
        exact: Option<u64>,
        body: Vec<u8>,
        /// How the body ended: whole, or the error after `body`.
        end: Result<(), String>,
    },
}

/// hyper's HTTP/1 client (as `hyper::client::conn::http1`, over an in-memory pipe) sending
/// a GET or HEAD and reading `response` back, which is followed by the connection closing.
fn hyper(response: &[u8], head_request: bool) -> Hyper {
    thread_local! {
        static RT: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread runtime");
    }
    RT.with(|rt| rt.block_on(hyper_reads(response, head_request)))
}

async fn hyper_reads(response: &[u8], head_request: bool) -> Hyper {
    use http_body_util::{BodyExt, Empty};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let (near, mut far) = tokio::io::duplex(64 * 1024);
    let (mut send, conn) = hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(
        hyper_util::rt::TokioIo::new(near),
    )
    .await
    .expect("an HTTP/1 handshake does no I/O");
    let method = if head_request {
        Method::HEAD
    } else {
        Method::GET
    };
    let req = Request::builder()
        .method(method)
        .uri("/")
        .header("host", "upstream")
        .body(Empty::new())
        .expect("a valid request");
    // The upstream answers once the request head is in, then closes.
    let upstream = async move {
        let mut got = Vec::new();
        let mut b = [0u8; 1024];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match far.read(&mut b).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&b[..n]),
            }
        }
        let _ = far.write_all(response).await;
        let _ = far.shutdown().await;
    };
    let client = async move {
        let Ok(res) = send.send_request(req).await else {
            return Hyper::NoHead;
        };
        let (parts, mut body) = res.into_parts();
        let exact = http_body::Body::size_hint(&body).exact();
        let mut data = Vec::new();
        let end = loop {
            match body.frame().await {
                None => break Ok(()),
                Some(Ok(f)) => {
                    if let Ok(d) = f.into_data() {
                        data.extend_from_slice(&d);
                    }
                }
                Some(Err(e)) => break Err(chain(&e)),
            }
        };
        Hyper::Head {
            status: parts.status,
            version: parts.version,
            headers: parts.headers,
            exact,
            body: data,
            end,
        }
    };
    // The connection and the upstream run only for as long as the client needs them.
    let others = async {
        let _ = tokio::join!(conn, upstream);
        std::future::pending::<()>().await
    };
    tokio::select! {
        h = client => h,
        () = others => unreachable!(),
    }
}

/// An error and its sources, for matching on what hyper says.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(c) = source {
        s.push_str(": ");
        s.push_str(&c.to_string());
        source = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fuzz target's seeds go through the same comparison, and each is read or refused
    /// as its name says (`refused-*`): so CI sees a regression without the fuzzer.
    #[test]
    fn the_fuzz_seeds_read_alike_in_gatehouse_and_hyper() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/h1_response");
        let mut seeds = 0;
        for entry in std::fs::read_dir(&dir).expect("the seed corpus") {
            let path = entry.expect("a seed").path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .expect("a name")
                .to_string();
            let data = std::fs::read(&path).expect("a seed");
            let (head_request, _, response) = input(&data);
            let read = read(&[response], head_request, MAX_BUF);
            assert_eq!(
                read.is_err(),
                name.starts_with("refused-"),
                "{name}: {read:?}"
            );
            let compared = std::panic::catch_unwind(|| check(&data));
            assert!(compared.is_ok(), "{name}");
            seeds += 1;
        }
        assert!(seeds >= 20, "{seeds} seeds in {dir:?}");
    }
}
