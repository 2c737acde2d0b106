//! The PROXY protocol, versions 1 and 2 (HAProxy's `proxy-protocol.txt`): the header an L4
//! load balancer sends first on each connection, naming the client it accepted. Only
//! peers in `proxy_protocol_from` may send one; it is required from them, and a
//! connection with a broken or missing header is closed.
//!
//! The header is read with `peek`, and only its own bytes are consumed: the bytes after it
//! (a request, a TLS ClientHello) stay in the socket for the connection's own reader.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;
use tokio::io::AsyncReadExt;

/// Version 2's signature (§2.2).
const V2_SIG: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// Version 1's longest line, CRLF included (§2.1).
const V1_MAX: usize = 107;
/// The longest version 2 header taken: the addresses and a few TLVs (HAProxy's SSL
/// information is a few hundred bytes). A longer one is refused, so the buffer is bounded.
pub const V2_MAX: usize = 16 + 1024;

/// What a buffer holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A header's first bytes, not yet all of it.
    Incomplete,
    /// A header of `len` bytes. `source` is the client it names; `None` when it names
    /// none (v1 `UNKNOWN`, v2 `LOCAL`, or a family other than TCP over IPv4 or IPv6): the
    /// connection's own peer stands (§2.1, §2.2).
    Done {
        len: usize,
        source: Option<SocketAddr>,
    },
    /// Not a PROXY header, or a broken one.
    Invalid(&'static str),
}

/// Parses the header at the start of `buf`.
pub fn parse(buf: &[u8]) -> Parsed {
    if buf.is_empty() {
        return Parsed::Incomplete;
    }
    if buf[0] == b'P' {
        return parse_v1(buf);
    }
    if buf[0] == b'\r' {
        return parse_v2(buf);
    }
    Parsed::Invalid("not a PROXY protocol header")
}

fn parse_v1(buf: &[u8]) -> Parsed {
    let sig = b"PROXY ";
    let n = buf.len().min(sig.len());
    if buf[..n] != sig[..n] {
        return Parsed::Invalid("not a PROXY protocol header");
    }
    let Some(end) = buf.windows(2).take(V1_MAX - 1).position(|w| w == b"\r\n") else {
        return if buf.len() >= V1_MAX {
            Parsed::Invalid("a version 1 line longer than 107 bytes")
        } else if buf[..buf.len().min(V1_MAX)].contains(&b'\n') {
            Parsed::Invalid("a bare LF in a version 1 line")
        } else {
            Parsed::Incomplete
        };
    };
    let len = end + 2;
    let Ok(line) = std::str::from_utf8(&buf[sig.len()..end]) else {
        return Parsed::Invalid("a version 1 line that isn't ASCII");
    };
    let parts: Vec<&str> = line.split(' ').collect();
    match parts.as_slice() {
        ["UNKNOWN", ..] => Parsed::Done { len, source: None },
        [proto @ ("TCP4" | "TCP6"), src, dst, sport, dport] => {
            let (Some(src), Some(_), Some(sport), Some(_)) = (
                v1_addr(proto, src),
                v1_addr(proto, dst),
                v1_port(sport),
                v1_port(dport),
            ) else {
                return Parsed::Invalid("a version 1 line with a bad address or port");
            };
            Parsed::Done {
                len,
                source: Some(SocketAddr::new(src, sport)),
            }
        }
        _ => Parsed::Invalid("a version 1 line of the wrong shape"),
    }
}

fn v1_addr(proto: &str, s: &str) -> Option<IpAddr> {
    match proto {
        "TCP4" => s.parse::<Ipv4Addr>().ok().map(IpAddr::V4),
        _ => s.parse::<Ipv6Addr>().ok().map(IpAddr::V6),
    }
}

/// A port in decimal, without a leading zero (§2.1).
fn v1_port(s: &str) -> Option<u16> {
    if s.is_empty() || s.len() > 5 || (s.len() > 1 && s.starts_with('0')) {
        return None;
    }
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn parse_v2(buf: &[u8]) -> Parsed {
    let n = buf.len().min(V2_SIG.len());
    if buf[..n] != V2_SIG[..n] {
        return Parsed::Invalid("not a PROXY protocol header");
    }
    if buf.len() < 16 {
        return Parsed::Incomplete;
    }
    let (ver, cmd) = (buf[12] >> 4, buf[12] & 0xf);
    if ver != 2 {
        return Parsed::Invalid("a version 2 header of another version");
    }
    let rest = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    let len = 16 + rest;
    if len > V2_MAX {
        return Parsed::Invalid("a version 2 header longer than gatehouse takes");
    }
    if buf.len() < len {
        return Parsed::Incomplete;
    }
    let body = &buf[16..len];
    let source = match cmd {
        // LOCAL: the balancer's own connection (a health check).
        0 => None,
        1 => match (buf[13] >> 4, buf[13] & 0xf) {
            // TCP over IPv4: 4 + 4 + 2 + 2 bytes.
            (1, 1) if body.len() >= 12 => Some(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::new(body[0], body[1], body[2], body[3])),
                u16::from_be_bytes([body[8], body[9]]),
            )),
            // TCP over IPv6: 16 + 16 + 2 + 2 bytes.
            (2, 1) if body.len() >= 36 => {
                let mut a = [0u8; 16];
                a.copy_from_slice(&body[..16]);
                Some(SocketAddr::new(
                    IpAddr::V6(Ipv6Addr::from(a)),
                    u16::from_be_bytes([body[32], body[33]]),
                ))
            }
            (1, 1) | (2, 1) => {
                return Parsed::Invalid("a version 2 header too short for its addresses")
            }
            // UNSPEC, UNIX or datagrams: the connection's own peer stands (§2.2).
            _ => None,
        },
        _ => return Parsed::Invalid("a version 2 header with an unknown command"),
    };
    Parsed::Done { len, source }
}

/// Reads the header off `stream` within `timeout`: the client it names, the connection's
/// `peer` if it names none, or `None` if the connection is to be closed.
pub(crate) async fn read_header(
    stream: &mut tokio::net::TcpStream,
    peer: SocketAddr,
    timeout: Duration,
) -> Option<SocketAddr> {
    let read = async {
        let mut buf = vec![0u8; V2_MAX];
        // Bytes of an incomplete header are all the header's: they are taken off the
        // socket, so that the next peek waits for more (or sees the close) rather than
        // returning the same bytes again.
        let mut have = 0;
        loop {
            let n = stream.peek(&mut buf[have..]).await.ok()?;
            if n == 0 {
                return None;
            }
            match parse(&buf[..have + n]) {
                Parsed::Done { len, source } => {
                    stream.read_exact(&mut buf[have..len]).await.ok()?;
                    return Some(source.unwrap_or(peer));
                }
                Parsed::Incomplete if have + n < buf.len() => {
                    stream.read_exact(&mut buf[have..have + n]).await.ok()?;
                    have += n;
                }
                Parsed::Incomplete => return None,
                Parsed::Invalid(why) => {
                    tracing::debug!(%peer, "PROXY protocol: {why}: connection closed");
                    return None;
                }
            }
        }
    };
    tokio::time::timeout(timeout, read).await.ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2(cmd: u8, fam: u8, body: &[u8]) -> Vec<u8> {
        let mut out = V2_SIG.to_vec();
        out.push(0x20 | cmd);
        out.push(fam);
        out.extend_from_slice(&(body.len() as u16).to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn version_1_lines() {
        let line = b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\nGET /";
        assert_eq!(
            parse(line),
            Parsed::Done {
                len: 45,
                source: Some("192.0.2.1:56324".parse().unwrap())
            }
        );
        let six = b"PROXY TCP6 2001:db8::1 2001:db8::2 1 2\r\n";
        assert_eq!(
            parse(six),
            Parsed::Done {
                len: six.len(),
                source: Some("[2001:db8::1]:1".parse().unwrap())
            }
        );
        assert_eq!(
            parse(b"PROXY UNKNOWN\r\n"),
            Parsed::Done {
                len: 15,
                source: None
            }
        );
        for bad in [
            &b"GET / HTTP/1.1\r\n"[..],
            b"PROXY TCP4 192.0.2.1 198.51.100.2 56324\r\n",
            b"PROXY TCP4 2001:db8::1 198.51.100.2 1 2\r\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.2 056324 443\r\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.2 65536 443\r\n",
            b"PROXY TCP4 192.0.2.1  198.51.100.2 1 443\r\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.2 1 2\n",
        ] {
            assert!(
                matches!(parse(bad), Parsed::Invalid(_)),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let long = [b"PROXY UNKNOWN ".as_slice(), &[b'x'; 200]].concat();
        assert!(matches!(parse(&long), Parsed::Invalid(_)));
        // Every prefix of a good line is incomplete, never wrong.
        for i in 0..line.len() - 5 {
            assert_eq!(parse(&line[..i]), Parsed::Incomplete, "{i}");
        }
    }

    #[test]
    fn version_2_headers() {
        let mut body = vec![192, 0, 2, 1, 198, 51, 100, 2];
        body.extend_from_slice(&56324u16.to_be_bytes());
        body.extend_from_slice(&443u16.to_be_bytes());
        body.extend_from_slice(&[0x04, 0, 1, 0]); // a TLV, skipped
        let h = v2(1, 0x11, &body);
        assert_eq!(
            parse(&[h.as_slice(), b"rest"].concat()),
            Parsed::Done {
                len: h.len(),
                source: Some("192.0.2.1:56324".parse().unwrap())
            }
        );
        for i in 0..h.len() {
            assert_eq!(parse(&h[..i]), Parsed::Incomplete, "{i}");
        }
        let mut six = vec![0u8; 36];
        six[15] = 1;
        six[32..34].copy_from_slice(&8080u16.to_be_bytes());
        assert_eq!(
            parse(&v2(1, 0x21, &six)),
            Parsed::Done {
                len: 52,
                source: Some("[::1]:8080".parse().unwrap())
            }
        );
        assert_eq!(
            parse(&v2(0, 0, &[])),
            Parsed::Done {
                len: 16,
                source: None
            }
        );
        assert_eq!(
            parse(&v2(1, 0x31, &[0; 216])),
            Parsed::Done {
                len: 232,
                source: None
            }
        );
        assert!(matches!(parse(&v2(1, 0x11, &[0; 4])), Parsed::Invalid(_)));
        assert!(matches!(parse(&v2(2, 0x11, &body)), Parsed::Invalid(_)));
        assert!(matches!(
            parse(&v2(1, 0x11, &vec![0; 2000])),
            Parsed::Invalid(_)
        ));
        let mut v3 = v2(1, 0x11, &body);
        v3[12] = 0x31;
        assert!(matches!(parse(&v3), Parsed::Invalid(_)));
    }

    /// Any bytes: no panic, a length within the buffer, and a header that parses the same
    /// alone (a property test over random and mutated inputs, standing in for a fuzz run).
    #[test]
    fn any_bytes_parse_safely() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let good: Vec<Vec<u8>> = vec![
            b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n".to_vec(),
            v2(1, 0x11, &[1, 2, 3, 4, 5, 6, 7, 8, 0, 80, 1, 187]),
        ];
        for i in 0..200_000 {
            let mut buf = good[i % 2].clone();
            let edits = next() % 4;
            for _ in 0..edits {
                let at = (next() as usize) % (buf.len() + 1);
                match next() % 3 {
                    0 if at < buf.len() => buf[at] = next() as u8,
                    1 => buf.insert(at, next() as u8),
                    _ => buf.truncate(at),
                }
            }
            if let Parsed::Done { len, source } = parse(&buf) {
                assert!(len <= buf.len());
                assert_eq!(parse(&buf[..len]), Parsed::Done { len, source });
            }
        }
    }
}
