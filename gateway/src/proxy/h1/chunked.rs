//! Body framing: a length, chunked (RFC 9112 §7.1), or to the connection's close; the
//! chunked decoder with its size lines and trailer section.

use super::*;

pub(super) enum State {
    /// This many body bytes are still to come.
    Length(u64),
    Chunked(Chunk),
    /// Delimited by the upstream closing the connection.
    Eof,
    Done,
}

/// RFC 9112 §7.1: where a chunked body's decoder is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Chunk {
    Size,
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    Trailers,
}

/// A chunk-size line (§7.1): hex digits, then optional extensions, which are ignored.
/// Only blanks may come between the two (§7.1.1: BWS before `;`).
pub(super) fn chunk_size(line: &[u8]) -> Option<u64> {
    let digits = line
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(line.len());
    let rest = &line[digits..];
    let blanks = rest
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(rest.len());
    let ext = &rest[blanks..];
    if digits == 0 || digits > 16 || !(ext.is_empty() || ext[0] == b';') {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(&line[..digits]).ok()?, 16).ok()
}

pub(super) enum Step {
    Data(Bytes),
    /// The state moved on: look again.
    Again,
    End,
    /// Needs more bytes; about this many are coming.
    More(u64),
}

/// The next step of reading a body from `buf`, whose state is `state`.
pub(super) fn decode(state: &mut State, buf: &mut BytesMut) -> io::Result<Step> {
    match *state {
        State::Done | State::Length(0) => Ok(Step::End),
        State::Length(n) if !buf.is_empty() => {
            let take = usize::try_from(n).map_or(buf.len(), |n| n.min(buf.len()));
            *state = State::Length(n - take as u64);
            Ok(Step::Data(buf.split_to(take).freeze()))
        }
        State::Length(n) => Ok(Step::More(n)),
        State::Eof if !buf.is_empty() => Ok(Step::Data(buf.split().freeze())),
        State::Eof => Ok(Step::More(READ_CHUNK as u64)),
        State::Chunked(c) => chunked_step(state, c, buf),
    }
}

pub(super) fn chunked_step(state: &mut State, c: Chunk, buf: &mut BytesMut) -> io::Result<Step> {
    let next = match c {
        Chunk::Size | Chunk::Trailers => {
            let Some(end) = line_end(buf) else {
                if buf.len() > MAX_LINE {
                    return Err(invalid("chunk-size line or trailer too long"));
                }
                return Ok(Step::More(0));
            };
            let line = buf.split_to(end + 2);
            let line = &line[..end];
            if c == Chunk::Trailers {
                // Trailer fields are not forwarded; the empty line ends the message.
                if line.is_empty() {
                    return Ok(Step::End);
                }
                // But they must be field lines (RFC 9112 §7.1.2): anything else says the
                // body is not framed as the upstream meant, a head smuggled after the
                // last chunk, say.
                if !field_line(line) {
                    return Err(invalid("bad trailer field"));
                }
                Chunk::Trailers
            } else {
                // No control but HTAB in it, extensions included (RFC 9112 §7.1.1: tokens
                // and quoted strings): a reader ending lines at a bare CR or LF (§2.2)
                // would see another chunk there.
                if !line.iter().all(|&b| field_text(b)) {
                    return Err(invalid("bad chunk-size line"));
                }
                match chunk_size(line) {
                    Some(0) => Chunk::Trailers,
                    Some(n) => Chunk::Data(n),
                    None => return Err(invalid("bad chunk size")),
                }
            }
        }
        Chunk::Data(n) => {
            if buf.is_empty() {
                return Ok(Step::More(n));
            }
            let take = usize::try_from(n).map_or(buf.len(), |n| n.min(buf.len()));
            let data = buf.split_to(take).freeze();
            let left = n - take as u64;
            *state = State::Chunked(if left == 0 {
                Chunk::DataEnd
            } else {
                Chunk::Data(left)
            });
            return Ok(Step::Data(data));
        }
        Chunk::DataEnd => {
            if buf.len() < 2 {
                return Ok(Step::More(0));
            }
            if &buf[..2] != b"\r\n" {
                return Err(invalid("chunk data not followed by CRLF"));
            }
            buf.advance(2);
            Chunk::Size
        }
    };
    *state = State::Chunked(next);
    Ok(Step::Again)
}
