//! A request head, encoded for an upstream in origin form (RFC 9112 §3.2.1).

use super::*;

/// A request head encoded for an upstream (RFC 9112 §3): the request-line, `Host` as the
/// first field (§3.2 asks for it first), the other fields, the forwarding fields when they
/// are written here ([`Forwarding`]), the empty line.
///
/// It is encoded while the request is first handled, so that nothing of the client's
/// request — whose fields are slices of the client connection's read buffer — outlives
/// that call: hyper reads the connection again while the response is awaited, and a
/// buffer still shared would have to be a new one.
pub(crate) struct Outgoing {
    pub(super) bytes: Vec<u8>,
    /// Where the `Host` field line lies, to put another upstream's in its place.
    pub(super) host: std::ops::Range<usize>,
    pub(super) head_request: bool,
    /// An empty map with room, to take the response's fields: see [`Outgoing::recycle`].
    pub(super) spare: HeaderMap,
}

impl Outgoing {
    /// Encodes into `buf` (cleared; given for its capacity). `headers` are sent as they
    /// are, but for `Host`, which is `host`, and the fields `fwd` replaces.
    pub(crate) fn encode(
        mut buf: Vec<u8>,
        method: &Method,
        path: &str,
        host: Option<&HeaderValue>,
        headers: &HeaderMap,
        fwd: Option<&Forwarding>,
    ) -> Outgoing {
        buf.clear();
        buf.extend_from_slice(method.as_str().as_bytes());
        buf.push(b' ');
        buf.extend_from_slice(path.as_bytes());
        buf.extend_from_slice(b" HTTP/1.1\r\n");
        let start = buf.len();
        host_line(&mut buf, host);
        let host = start..buf.len();
        for (name, value) in headers {
            if name == HOST || fwd.is_some_and(|f| f.replaces(name)) {
                continue;
            }
            buf.extend_from_slice(name.as_str().as_bytes());
            buf.extend_from_slice(b": ");
            buf.extend_from_slice(value.as_bytes());
            buf.extend_from_slice(b"\r\n");
        }
        if let Some(f) = fwd {
            f.write(&mut buf);
        }
        buf.extend_from_slice(b"\r\n");
        Outgoing {
            bytes: buf,
            host,
            head_request: method == Method::HEAD,
            spare: HeaderMap::new(),
        }
    }

    /// Keeps the request's map, emptied now (its values are slices of the client's read
    /// buffer), for the response's fields. hyper's HTTP/1 server keeps each response's map
    /// for the connection's next request, so one map goes round and round: no allocation
    /// for either head once it has grown to fit. (hyper's HTTP/2 server keeps none: there
    /// the response's map is the request's, and each request's is new.)
    pub(crate) fn recycle(&mut self, mut map: HeaderMap) {
        map.clear();
        self.spare = map;
    }

    /// Puts `host` in the place of the `Host` field (none: no field).
    pub(crate) fn set_host(&mut self, host: Option<&HeaderValue>) {
        let mut line = Vec::with_capacity(64);
        host_line(&mut line, host);
        let end = self.host.start + line.len();
        self.bytes.splice(self.host.clone(), line);
        self.host = self.host.start..end;
    }

    #[cfg(test)]
    pub(super) fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

pub(super) fn host_line(out: &mut Vec<u8>, host: Option<&HeaderValue>) {
    if let Some(h) = host {
        out.extend_from_slice(b"host: ");
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}
