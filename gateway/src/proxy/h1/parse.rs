//! A response head, parsed (RFC 9112 §4, §5): the status line, the fields, and what the
//! hop-by-hop ones say about framing.

use super::*;

/// A parsed response head. The hop-by-hop fields (RFC 9110 §7.6.1) are left out of
/// `headers` as it is built, and what they say about framing is kept here instead.
pub(super) struct Head {
    pub(super) status: StatusCode,
    pub(super) version: Version,
    pub(super) headers: HeaderMap,
    /// `Transfer-Encoding` was present, and whether its last coding is chunked.
    pub(super) transfer: Option<bool>,
    /// A transfer coding other than chunked was named.
    pub(super) coded: bool,
    /// `Content-Length`: `Err` when invalid or when several disagree (RFC 9112 §6.3).
    pub(super) length: Option<Result<u64, ()>>,
    /// `Connection: close`.
    pub(super) close: bool,
    /// A `Connection` field naming other fields was kept, for them to be removed.
    pub(super) names_others: bool,
}

/// Parses heads off the front of `buf` until a final one, skipping 1xx (RFC 9110 §15.2),
/// or returns `None` for more.
pub(super) fn final_head(buf: &mut BytesMut, spare: &mut HeaderMap) -> io::Result<Option<Head>> {
    loop {
        match parse_into(buf, spare)? {
            Some(head) if head.status.is_informational() => {
                // A 101 is never asked for on this path (upgrades go through hyper).
                if head.status == StatusCode::SWITCHING_PROTOCOLS {
                    return Err(invalid("101 to a request without Upgrade"));
                }
                // Its map, emptied, is the final head's.
                let mut map = head.headers;
                map.clear();
                *spare = map;
                if buf.is_empty() {
                    return Ok(None);
                }
            }
            head => return Ok(head),
        }
    }
}

#[cfg(test)]
pub(super) fn parse(buf: &mut BytesMut) -> io::Result<Option<Head>> {
    parse_into(buf, &mut HeaderMap::new())
}

/// Parses a complete head off the front of `buf`, or returns `None` for more. The fields
/// go into `spare` (taken; left empty), grown as needed.
pub(super) fn parse_into(buf: &mut BytesMut, spare: &mut HeaderMap) -> io::Result<Option<Head>> {
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut res = httparse::Response::new(&mut []);
    // Where each field's name and value lie in the head, so the values can be slices of
    // one shared buffer rather than a copy each.
    let mut spans = [(0u32, 0u32, 0u32, 0u32); MAX_HEADERS];
    let base = buf.as_ptr() as usize;
    let parsed = httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut res, buf, &mut slots);
    let (len, code, minor, n) = match parsed {
        Ok(httparse::Status::Complete(len)) => {
            for (s, h) in spans.iter_mut().zip(res.headers.iter()) {
                let name = h.name.as_ptr() as usize - base;
                let value = h.value.as_ptr() as usize - base;
                *s = (
                    name as u32,
                    (name + h.name.len()) as u32,
                    value as u32,
                    (value + h.value.len()) as u32,
                );
            }
            (
                len,
                res.code.unwrap_or(0),
                res.version.unwrap_or(1),
                res.headers.len(),
            )
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad response head: {e}"),
            ))
        }
    };
    let status = StatusCode::from_u16(code).map_err(|_| invalid("bad status code"))?;
    let bytes = buf.split_to(len).freeze();
    let mut headers = std::mem::take(spare);
    if !headers.is_empty() {
        headers.clear();
    }
    headers.reserve(n + 1);
    let mut head = Head {
        status,
        version: if minor == 0 {
            Version::HTTP_10
        } else {
            Version::HTTP_11
        },
        headers,
        transfer: None,
        coded: false,
        length: None,
        close: false,
        names_others: false,
    };
    let spans = &spans[..n];
    let ascii = bytes.is_ascii();
    // Without the memo (the thread is ending, or it is in use) the names are made anew.
    let mut fill = |names: Option<&mut Names>| fields(&mut head, &bytes, ascii, spans, names);
    match NAMES.try_with(|m| fill(m.try_borrow_mut().ok().as_deref_mut())) {
        Ok(done) => done?,
        Err(_) => fill(None)?,
    }
    Ok(Some(head))
}

/// Takes the fields of a head into `head`: framing and hop-by-hop ones noted, the rest
/// kept with values sliced from `bytes` (`ascii`: all of it is).
#[allow(unsafe_code)] // HeaderValue::from_maybe_shared_unchecked, measured below.
pub(super) fn fields(
    head: &mut Head,
    bytes: &Bytes,
    ascii: bool,
    spans: &[(u32, u32, u32, u32)],
    mut names: Option<&mut Names>,
) -> io::Result<()> {
    for (i, &(ns, ne, vs, ve)) in spans.iter().enumerate() {
        let name = name_at(names.as_deref_mut(), i, &bytes[ns as usize..ne as usize])?;
        let raw = &bytes[vs as usize..ve as usize];
        if name == CONNECTION {
            let mut others = false;
            for t in raw.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                if t.eq_ignore_ascii_case(b"close") {
                    head.close = true;
                } else if !t.is_empty() && !t.eq_ignore_ascii_case(b"keep-alive") {
                    others = true;
                }
            }
            // The fields it names go too: kept for `remove_hop_by_hop` to find them.
            if !others {
                continue;
            }
            head.names_others = true;
        } else if name == TRANSFER_ENCODING {
            // Codings are tokens (RFC 9112 §6.1): a field with other bytes names none that
            // can be trusted, and a reader taking it as text (hyper's client) would not
            // see the `chunked` at its end: another framing than this one.
            if !ascii && !raw.is_ascii() {
                return Err(invalid("Transfer-Encoding not ASCII"));
            }
            let last = raw.rsplit(|&b| b == b',').next().unwrap_or_default();
            head.transfer = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
            head.coded |= crate::proxy::headers::names_other_coding(raw);
            continue;
        } else if crate::proxy::headers::is_hop_by_hop(&name) {
            continue;
        } else if name == CONTENT_LENGTH {
            head.length = Some(match (content_length(raw), head.length) {
                (Some(n), None) => Ok(n),
                (Some(n), Some(Ok(m))) if n == m => Ok(n),
                _ => Err(()),
            });
        }
        let slice = bytes.slice(vs as usize..ve as usize);
        // Checking each value byte by byte again cost ~450 instructions a response, and
        // httparse already took it only if every byte is HTAB, SP, VCHAR or obs-text (its
        // `is_header_value_token`, RFC 9110 §5.5), the bytes `HeaderValue` allows. In an
        // all-ASCII head (one check over the whole of it) a value is then also the valid
        // UTF-8 that `from_maybe_shared_unchecked` asks for; else each is checked.
        let value = if ascii {
            // SAFETY: ASCII, so valid UTF-8, and every byte one httparse accepted above.
            unsafe { HeaderValue::from_maybe_shared_unchecked(slice) }
        } else {
            HeaderValue::from_maybe_shared(slice).map_err(|_| invalid("bad header value"))?
        };
        head.headers.append(name, value);
    }
    Ok(())
}

/// The names of the last response head parsed on this thread, by position, as the
/// upstream spelled them: an upstream sends the same fields in the same order on every
/// response, and comparing the bytes costs a fraction of `HeaderName::from_bytes`
/// (lowercasing, then matching against the standard names): about 800 instructions of a
/// proxied request's eight-field head (callgrind).
pub(super) struct Names([(Vec<u8>, Option<HeaderName>); NAME_SLOTS]);

pub(super) const NAME_SLOTS: usize = 16;

thread_local! {
    static NAMES: std::cell::RefCell<Names> =
        std::cell::RefCell::new(Names(std::array::from_fn(|_| (Vec::new(), None))));
}

/// The field name spelled `raw`, the `i`th of its head.
pub(super) fn name_at(names: Option<&mut Names>, i: usize, raw: &[u8]) -> io::Result<HeaderName> {
    let Some((seen, name)) = names.and_then(|m| m.0.get_mut(i)) else {
        return HeaderName::from_bytes(raw).map_err(|_| invalid("bad header name"));
    };
    if let Some(n) = name.as_ref().filter(|_| seen.as_slice() == raw) {
        return Ok(n.clone());
    }
    let n = HeaderName::from_bytes(raw).map_err(|_| invalid("bad header name"))?;
    if raw.len() <= 64 {
        seen.clear();
        seen.extend_from_slice(raw);
        *name = Some(n.clone());
    }
    Ok(n)
}

impl Head {
    pub(super) fn into_response(
        mut self,
        conn: Conn,
        pool: &Arc<Pool>,
        head_request: bool,
    ) -> io::Result<Response<Body>> {
        let (state, keep) = self.framing(head_request)?;
        let mut body = Body {
            conn: Some(conn),
            pool: pool.clone(),
            state,
            keep,
            names_others: self.names_others,
        };
        if matches!(body.state, State::Length(0)) {
            body.finish();
        }
        let mut res = Response::new(body);
        *res.status_mut() = self.status;
        *res.version_mut() = self.version;
        *res.headers_mut() = self.headers;
        Ok(res)
    }

    /// RFC 9112 §6.3: how the body is delimited, and §9.3 whether the connection may be
    /// used again after it.
    pub(super) fn framing(&mut self, head_request: bool) -> io::Result<(State, bool)> {
        // RFC 9112 §6.1: Transfer-Encoding in an HTTP/1.0 message is faulty framing.
        if self.version == Version::HTTP_10 && self.transfer.is_some() {
            return Err(invalid("Transfer-Encoding in an HTTP/1.0 response"));
        }
        let mut keep = self.version == Version::HTTP_11 && !self.close;
        let state = if head_request
            || self.status == StatusCode::NO_CONTENT
            || self.status == StatusCode::NOT_MODIFIED
        {
            State::Length(0)
        } else if self.coded {
            // The coding would be taken off with the field (hop-by-hop), and the client
            // would get coded bytes it can't know are: a 502, as nginx answers it.
            return Err(invalid("a transfer coding other than chunked"));
        } else if let Some(chunked) = self.transfer {
            // A response with both is a smuggling attempt or a broken upstream: the
            // connection is not trusted again (§6.3, point 3).
            if self.length.is_some() {
                keep = false;
                self.headers.remove(CONTENT_LENGTH);
            }
            if chunked {
                State::Chunked(Chunk::Size)
            } else {
                keep = false;
                State::Eof
            }
        } else {
            match self.length {
                Some(Ok(n)) => State::Length(n),
                Some(Err(())) => return Err(invalid("invalid Content-Length")),
                None => {
                    keep = false;
                    State::Eof
                }
            }
        };
        Ok((state, keep))
    }
}

pub(super) fn content_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// The position of the first CRLF in `b`.
pub(super) fn line_end(b: &[u8]) -> Option<usize> {
    b.windows(2).position(|w| w == b"\r\n")
}

/// `field-name ":" field-value` (RFC 9110 §5.1, §5.5): a token, then HTAB, SP, VCHAR or
/// obs-text, as httparse takes a head's fields.
pub(super) fn field_line(line: &[u8]) -> bool {
    let Some(colon) = line.iter().position(|&b| b == b':') else {
        return false;
    };
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    let tchar = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    !name.is_empty() && name.iter().all(tchar) && value.iter().all(|&b| field_text(b))
}

/// HTAB, SP, VCHAR, obs-text: no control but HTAB (a bare CR or LF among them).
pub(super) fn field_text(b: u8) -> bool {
    b == b'\t' || (b >= b' ' && b != 0x7f)
}
