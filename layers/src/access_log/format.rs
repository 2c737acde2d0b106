//! Log lines: nginx's `combined` and `common`, JSON, or a template of named fields.
//! Lines are written straight into the writer's buffer: numbers with `itoa`, the time from
//! a per-thread cache that is reformatted once a second, and no `format!`.

use http::{Method, Request, Version};
use std::cell::RefCell;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What a request's line is made of, gathered as it starts and completed as it ends.
#[derive(Debug)]
pub struct Record {
    pub start: Instant,
    pub method: Method,
    pub version: Version,
    pub remote: Option<SocketAddr>,
    pub status: u16,
    /// Body bytes sent.
    pub bytes: u64,
    pub upstream: Option<UpstreamInfo>,
    /// What a response cache did, if one answered or passed the request.
    pub cache: Option<crate::upstream::CacheStatus>,
    /// The response ended before all of its body was sent.
    pub aborted: bool,
    /// The target, host, Referer, User-Agent and X-Request-Id, copied out of the request.
    /// Clones of the request's own values would share hyper's read buffer, which hyper
    /// then could not reuse for the connection's next request while the line is pending:
    /// it allocated a new 8 KiB buffer for every request.
    text: Box<[u8]>,
    spans: [Option<(u32, u32)>; 5],
    /// The ID a [`request_id`](crate::request_id) layer gave the request: it outranks the
    /// client's `X-Request-Id`.
    id: Option<http::HeaderValue>,
    /// Not a request: a head the server could not read as one (see [`Record::unread`]).
    unread: bool,
}

const TARGET: usize = 0;
const HOST: usize = 1;
const REFERER: usize = 2;
const USER_AGENT: usize = 3;
const REQUEST_ID: usize = 4;

pub use crate::upstream::UpstreamInfo;

// A constant: a name given as a string is parsed on every lookup.
static X_REQUEST_ID: http::HeaderName = http::HeaderName::from_static("x-request-id");

impl Record {
    /// Starts a record for `req` from `remote`. Only the fields a line may show are kept:
    /// never `Authorization`, cookies or any other header.
    pub fn start<B>(req: &Request<B>, remote: Option<SocketAddr>) -> Record {
        Record::start_with_uri(req, req.uri(), remote)
    }

    /// As [`Record::start`], with the target and host taken from `uri` (the request as
    /// it came, before a rewrite) rather than from `req`.
    pub fn start_with_uri<B>(
        req: &Request<B>,
        uri: &http::Uri,
        remote: Option<SocketAddr>,
    ) -> Record {
        let (mut host, mut referer, mut user_agent, mut request_id) = (None, None, None, None);
        // One pass over the headers rather than a hashed lookup for each.
        for (name, value) in req.headers() {
            let slot = if name == http::header::HOST {
                &mut host
            } else if name == http::header::REFERER {
                &mut referer
            } else if name == http::header::USER_AGENT {
                &mut user_agent
            } else if name == X_REQUEST_ID {
                &mut request_id
            } else {
                continue;
            };
            // The first of a repeated field, as `HeaderMap::get`.
            if slot.is_none() {
                *slot = Some(value.as_bytes());
            }
        }
        let target = uri
            .path_and_query()
            .map_or(b"/".as_slice(), |pq| pq.as_str().as_bytes());
        let host = uri.authority().map(|a| a.as_str().as_bytes()).or(host);
        let parts = [Some(target), host, referer, user_agent, request_id];
        let mut text = Vec::with_capacity(parts.iter().flatten().map(|p| p.len()).sum());
        let mut spans = [None; 5];
        for (span, part) in spans.iter_mut().zip(parts) {
            if let Some(p) = part {
                let at = text.len() as u32;
                text.extend_from_slice(p);
                *span = Some((at, text.len() as u32));
            }
        }
        Record {
            start: Instant::now(),
            method: req.method().clone(),
            version: req.version(),
            remote,
            status: 0,
            bytes: 0,
            upstream: None,
            cache: None,
            aborted: false,
            text: text.into_boxed_slice(),
            spans,
            id: None,
            unread: false,
        }
    }

    /// A record of a head from `remote` that could not be read as a request, which the
    /// server answered with `status` itself (nginx logs the 400s it answers so): its
    /// `$request` is `-`, and its method and target are `-` too.
    pub fn unread(remote: Option<SocketAddr>, status: http::StatusCode) -> Record {
        Record {
            start: Instant::now(),
            method: Method::from_bytes(b"-").unwrap_or_default(),
            version: Version::HTTP_11,
            remote,
            status: status.as_u16(),
            bytes: 0,
            upstream: None,
            cache: None,
            aborted: false,
            text: Box::new(*b"-"),
            spans: [Some((0, 1)), None, None, None, None],
            id: None,
            unread: true,
        }
    }

    fn part(&self, i: usize) -> Option<&[u8]> {
        let (a, b) = self.spans[i]?;
        self.text.get(a as usize..b as usize)
    }

    /// The request target: path and query.
    pub fn target(&self) -> &[u8] {
        self.part(TARGET).unwrap_or(b"/")
    }

    /// The target's authority, or else the `Host` field.
    pub fn host(&self) -> Option<&[u8]> {
        self.part(HOST)
    }

    pub fn referer(&self) -> Option<&[u8]> {
        self.part(REFERER)
    }

    pub fn user_agent(&self) -> Option<&[u8]> {
        self.part(USER_AGENT)
    }

    pub fn request_id(&self) -> Option<&[u8]> {
        match &self.id {
            Some(id) => Some(id.as_bytes()),
            None => self.part(REQUEST_ID),
        }
    }
}

impl Record {
    /// Takes the response's status, and what the layers below put in its extensions: the
    /// upstream a proxy chose, the ID a request-ID layer gave.
    pub fn respond(&mut self, status: http::StatusCode, extensions: &http::Extensions) {
        self.status = status.as_u16();
        self.upstream = extensions.get::<UpstreamInfo>().cloned();
        self.cache = extensions.get::<crate::upstream::CacheStatus>().copied();
        self.id = extensions
            .get::<crate::template::RequestIdText>()
            .map(|t| t.0.clone());
    }
}

/// A line's layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Format {
    /// `$remote_addr - - [$time_local] "$request" $status $bytes_sent "$http_referer"
    /// "$http_user_agent"`, as nginx's `combined`.
    Combined,
    /// nginx's `common`: `combined` without referer and user agent.
    Common,
    /// One JSON object per line.
    Json,
    /// Literal text and `$field`s (see [`Field`]).
    Template(Vec<Piece>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    Lit(String),
    Field(Field),
}

/// The fields a template may name. Request headers beyond these can't be logged, so no
/// template can put a credential in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    RemoteAddr,
    TimeLocal,
    TimeIso8601,
    Request,
    Method,
    Uri,
    Protocol,
    Host,
    Status,
    BytesSent,
    DurationUs,
    RequestTime,
    Referer,
    UserAgent,
    RequestId,
    UpstreamAddr,
    UpstreamTime,
    CacheStatus,
    Aborted,
}

const FIELDS: &[(&str, Field)] = &[
    ("remote_addr", Field::RemoteAddr),
    ("time_local", Field::TimeLocal),
    ("time_iso8601", Field::TimeIso8601),
    ("request", Field::Request),
    ("request_method", Field::Method),
    ("request_uri", Field::Uri),
    ("server_protocol", Field::Protocol),
    ("host", Field::Host),
    ("status", Field::Status),
    ("body_bytes_sent", Field::BytesSent),
    ("duration_us", Field::DurationUs),
    ("request_time", Field::RequestTime),
    ("http_referer", Field::Referer),
    ("http_user_agent", Field::UserAgent),
    ("request_id", Field::RequestId),
    ("upstream_addr", Field::UpstreamAddr),
    ("upstream_response_time", Field::UpstreamTime),
    ("cache_status", Field::CacheStatus),
    ("aborted", Field::Aborted),
];

/// Why [`Format::template`] refused a template.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FormatError {
    /// A `${` without its `}`.
    Unclosed,
    /// A `$name` that is no field; its Display lists the fields there are.
    UnknownField(String),
}

impl std::fmt::Display for FormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FormatError::Unclosed => f.write_str("a '${' without its '}'"),
            FormatError::UnknownField(name) => {
                write!(f, "unknown field ${name}; the fields are ")?;
                for (i, (n, _)) in FIELDS.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    f.write_str(n)?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for FormatError {}

impl Format {
    /// Whether a line in this format shows a response cache's status (`$cache_status`;
    /// the JSON object's `cache_status`).
    pub fn shows_cache_status(&self) -> bool {
        match self {
            Format::Json => true,
            Format::Template(pieces) => pieces.contains(&Piece::Field(Field::CacheStatus)),
            Format::Combined | Format::Common => false,
        }
    }

    /// Parses a template such as `$remote_addr "$request" $status ${duration_us}us`.
    /// An unknown field is an error naming it and the fields there are.
    pub fn template(t: &str) -> Result<Format, FormatError> {
        let mut pieces = Vec::new();
        let mut lit = String::new();
        let mut rest = t;
        while let Some(i) = rest.find('$') {
            lit.push_str(&rest[..i]);
            rest = &rest[i + 1..];
            let (name, after) = if let Some(r) = rest.strip_prefix('{') {
                let end = r.find('}').ok_or(FormatError::Unclosed)?;
                (&r[..end], &r[end + 1..])
            } else {
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                (&rest[..end], &rest[end..])
            };
            let Some(&(_, f)) = FIELDS.iter().find(|(n, _)| *n == name) else {
                return Err(FormatError::UnknownField(name.to_string()));
            };
            if !lit.is_empty() {
                pieces.push(Piece::Lit(std::mem::take(&mut lit)));
            }
            pieces.push(Piece::Field(f));
            rest = after;
        }
        lit.push_str(rest);
        if !lit.is_empty() {
            pieces.push(Piece::Lit(lit));
        }
        Ok(Format::Template(pieces))
    }

    /// Appends `r`'s line, with its newline, to `out`.
    pub fn write(&self, r: &Record, out: &mut Vec<u8>) {
        let now = SystemTime::now();
        match self {
            Format::Combined | Format::Common => {
                remote(r, out);
                out.extend_from_slice(b" - - [");
                time_local(now, out);
                out.extend_from_slice(b"] \"");
                request_line(r, out, Esc::Nginx);
                out.extend_from_slice(b"\" ");
                num(r.status as u64, out);
                out.push(b' ');
                num(r.bytes, out);
                if *self == Format::Combined {
                    out.extend_from_slice(b" \"");
                    header(r.referer(), out, Esc::Nginx);
                    out.extend_from_slice(b"\" \"");
                    header(r.user_agent(), out, Esc::Nginx);
                    out.push(b'"');
                }
                if r.aborted {
                    out.extend_from_slice(b" aborted");
                }
            }
            Format::Json => json(r, now, out),
            Format::Template(pieces) => {
                for p in pieces {
                    match p {
                        Piece::Lit(s) => out.extend_from_slice(s.as_bytes()),
                        Piece::Field(f) => field(*f, r, now, out),
                    }
                }
            }
        }
        out.push(b'\n');
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Esc {
    /// nginx's: `"`, `\` and bytes outside printable ASCII as `\xHH`.
    Nginx,
    Json,
}

/// Bytes written as they are: printable ASCII but `"` and `\`.
static PLAIN: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0x20;
    while b < 0x7f {
        t[b] = b != b'"' as usize && b != b'\\' as usize;
        b += 1;
    }
    t
};

fn escaped(bytes: &[u8], out: &mut Vec<u8>, esc: Esc) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let plain = |b: &u8| PLAIN[*b as usize];
    let mut rest = bytes;
    // Runs of plain bytes are copied whole; most values are one run.
    while !rest.is_empty() {
        let n = rest.iter().position(|b| !plain(b)).unwrap_or(rest.len());
        out.extend_from_slice(&rest[..n]);
        let Some(&b) = rest.get(n) else { break };
        rest = &rest[n + 1..];
        if esc == Esc::Json {
            match b {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                _ => {
                    out.extend_from_slice(b"\\u00");
                    out.push(HEX[(b >> 4) as usize]);
                    out.push(HEX[(b & 15) as usize]);
                }
            }
        } else {
            out.extend_from_slice(b"\\x");
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 15) as usize]);
        }
    }
}

fn num(n: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

fn remote(r: &Record, out: &mut Vec<u8>) {
    // The IP alone, as nginx's $remote_addr.
    match r.remote.map(|a| a.ip()) {
        Some(std::net::IpAddr::V4(ip)) => {
            let o = ip.octets();
            for (i, b) in o.iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                num(u64::from(*b), out);
            }
        }
        Some(ip) => {
            use std::io::Write;
            let _ = write!(out, "{ip}");
        }
        None => out.push(b'-'),
    }
}

fn protocol(v: Version) -> &'static [u8] {
    match v {
        Version::HTTP_09 => b"HTTP/0.9",
        Version::HTTP_10 => b"HTTP/1.0",
        Version::HTTP_2 => b"HTTP/2.0",
        Version::HTTP_3 => b"HTTP/3.0",
        _ => b"HTTP/1.1",
    }
}

fn request_line(r: &Record, out: &mut Vec<u8>, esc: Esc) {
    if r.unread {
        out.push(b'-');
        return;
    }
    escaped(r.method.as_str().as_bytes(), out, esc);
    out.push(b' ');
    escaped(r.target(), out, esc);
    out.push(b' ');
    out.extend_from_slice(protocol(r.version));
}

fn header(v: Option<&[u8]>, out: &mut Vec<u8>, esc: Esc) {
    match v {
        Some(v) => escaped(v, out, esc),
        None if esc == Esc::Nginx => out.push(b'-'),
        None => {}
    }
}

fn elapsed_us(r: &Record) -> u64 {
    r.start.elapsed().as_micros() as u64
}

/// Seconds with milliseconds, as nginx's `$request_time`.
fn seconds_ms(d: Duration, out: &mut Vec<u8>) {
    let ms = d.as_millis() as u64;
    num(ms / 1000, out);
    out.push(b'.');
    let frac = ms % 1000;
    out.extend_from_slice(&[
        b'0' + (frac / 100) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ]);
}

fn request_id(r: &Record, out: &mut Vec<u8>, esc: Esc) {
    match r.request_id() {
        Some(v) => escaped(v, out, esc),
        None => {
            // Unique within the process: a per-process start value and a counter.
            static NEXT: AtomicU64 = AtomicU64::new(0);
            static BASE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
            let base = *BASE.get_or_init(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64)
                    .rotate_left(32)
            });
            let id = base.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed));
            const HEX: &[u8; 16] = b"0123456789abcdef";
            for i in (0..16).rev() {
                out.push(HEX[((id >> (i * 4)) & 15) as usize]);
            }
        }
    }
}

fn json(r: &Record, now: SystemTime, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"time\":\"");
    time_iso(now, true, out);
    out.extend_from_slice(b"\",\"remote_addr\":\"");
    remote(r, out);
    out.extend_from_slice(b"\",\"method\":\"");
    escaped(r.method.as_str().as_bytes(), out, Esc::Json);
    out.extend_from_slice(b"\",\"uri\":\"");
    escaped(r.target(), out, Esc::Json);
    out.extend_from_slice(b"\",\"protocol\":\"");
    out.extend_from_slice(protocol(r.version));
    out.extend_from_slice(b"\",\"host\":\"");
    escaped(r.host().unwrap_or(b""), out, Esc::Json);
    out.extend_from_slice(b"\",\"status\":");
    num(r.status as u64, out);
    out.extend_from_slice(b",\"bytes_sent\":");
    num(r.bytes, out);
    out.extend_from_slice(b",\"duration_us\":");
    num(elapsed_us(r), out);
    out.extend_from_slice(b",\"user_agent\":\"");
    header(r.user_agent(), out, Esc::Json);
    out.extend_from_slice(b"\",\"referer\":\"");
    header(r.referer(), out, Esc::Json);
    out.extend_from_slice(b"\",\"request_id\":\"");
    request_id(r, out, Esc::Json);
    out.push(b'"');
    if let Some(u) = &r.upstream {
        out.extend_from_slice(b",\"upstream_addr\":\"");
        escaped(u.addr.as_str().as_bytes(), out, Esc::Json);
        out.extend_from_slice(b"\",\"upstream_time_us\":");
        num(u.time.as_micros() as u64, out);
    }
    if let Some(c) = r.cache {
        out.extend_from_slice(b",\"cache_status\":\"");
        out.extend_from_slice(c.as_str().as_bytes());
        out.push(b'"');
    }
    if r.aborted {
        out.extend_from_slice(b",\"aborted\":true");
    }
    out.push(b'}');
}

fn field(f: Field, r: &Record, now: SystemTime, out: &mut Vec<u8>) {
    let e = Esc::Nginx;
    match f {
        Field::RemoteAddr => remote(r, out),
        Field::TimeLocal => time_local(now, out),
        Field::TimeIso8601 => time_iso(now, false, out),
        Field::Request => request_line(r, out, e),
        Field::Method => escaped(r.method.as_str().as_bytes(), out, e),
        Field::Uri => escaped(r.target(), out, e),
        Field::Protocol => out.extend_from_slice(protocol(r.version)),
        Field::Host => match r.host() {
            Some(h) => escaped(h, out, e),
            None => out.push(b'-'),
        },
        Field::Status => num(r.status as u64, out),
        Field::BytesSent => num(r.bytes, out),
        Field::DurationUs => num(elapsed_us(r), out),
        Field::RequestTime => seconds_ms(r.start.elapsed(), out),
        Field::Referer => header(r.referer(), out, e),
        Field::UserAgent => header(r.user_agent(), out, e),
        Field::RequestId => request_id(r, out, e),
        Field::UpstreamAddr => match &r.upstream {
            Some(u) => escaped(u.addr.as_str().as_bytes(), out, e),
            None => out.push(b'-'),
        },
        Field::UpstreamTime => match &r.upstream {
            Some(u) => seconds_ms(u.time, out),
            None => out.push(b'-'),
        },
        Field::CacheStatus => match r.cache {
            Some(c) => out.extend_from_slice(c.as_str().as_bytes()),
            None => out.push(b'-'),
        },
        Field::Aborted => out.extend_from_slice(if r.aborted { b"aborted" } else { b"-" }),
    }
}

struct TimeCache {
    sec: u64,
    /// `10/Oct/2000:13:55:36 +0000`
    local: [u8; 26],
    /// `2000-10-10T13:55:36`
    iso: [u8; 19],
}

thread_local! {
    static TIME: RefCell<TimeCache> = const { RefCell::new(TimeCache { sec: u64::MAX, local: [0; 26], iso: [0; 19] }) };
}

fn with_time<R>(now: SystemTime, f: impl FnOnce(&TimeCache, u32) -> R) -> R {
    let d = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let (sec, ms) = (d.as_secs(), d.subsec_millis());
    TIME.with(|t| {
        let mut t = t.borrow_mut();
        if t.sec != sec {
            fill_time(&mut t, sec);
        }
        f(&t, ms)
    })
}

fn time_local(now: SystemTime, out: &mut Vec<u8>) {
    with_time(now, |t, _| out.extend_from_slice(&t.local));
}

fn time_iso(now: SystemTime, millis: bool, out: &mut Vec<u8>) {
    with_time(now, |t, ms| {
        out.extend_from_slice(&t.iso);
        if millis {
            out.extend_from_slice(&[
                b'.',
                b'0' + (ms / 100) as u8,
                b'0' + (ms / 10 % 10) as u8,
                b'0' + (ms % 10) as u8,
                b'Z',
            ]);
        } else {
            out.extend_from_slice(b"+00:00");
        }
    });
}

fn fill_time(t: &mut TimeCache, sec: u64) {
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    let days = (sec / 86_400) as i64;
    let rem = sec % 86_400;
    let (hh, mm, ss) = ((rem / 3600) as u8, (rem / 60 % 60) as u8, (rem % 60) as u8);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let year = (yoe + era * 400 + i64::from(month <= 2)) as u32;
    let two = |n: u8| [b'0' + n / 10, b'0' + n % 10];
    let y = [
        b'0' + (year / 1000 % 10) as u8,
        b'0' + (year / 100 % 10) as u8,
        b'0' + (year / 10 % 10) as u8,
        b'0' + (year % 10) as u8,
    ];
    let mut l = Vec::with_capacity(26);
    l.extend_from_slice(&two(day));
    l.push(b'/');
    l.extend_from_slice(MONTHS[(month - 1) as usize]);
    l.push(b'/');
    l.extend_from_slice(&y);
    l.push(b':');
    l.extend_from_slice(&two(hh));
    l.push(b':');
    l.extend_from_slice(&two(mm));
    l.push(b':');
    l.extend_from_slice(&two(ss));
    l.extend_from_slice(b" +0000");
    t.local.copy_from_slice(&l);
    let mut i = Vec::with_capacity(19);
    i.extend_from_slice(&y);
    i.push(b'-');
    i.extend_from_slice(&two(month));
    i.push(b'-');
    i.extend_from_slice(&two(day));
    i.push(b'T');
    i.extend_from_slice(&two(hh));
    i.push(b':');
    i.extend_from_slice(&two(mm));
    i.push(b':');
    i.extend_from_slice(&two(ss));
    t.iso.copy_from_slice(&i);
    t.sec = sec;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_match_known_timestamps() {
        let mut t = TimeCache {
            sec: 0,
            local: [0; 26],
            iso: [0; 19],
        };
        for (sec, local, iso) in [
            (0, "01/Jan/1970:00:00:00 +0000", "1970-01-01T00:00:00"),
            (
                971_186_136,
                "10/Oct/2000:13:55:36 +0000",
                "2000-10-10T13:55:36",
            ),
            (
                1_709_164_800,
                "29/Feb/2024:00:00:00 +0000",
                "2024-02-29T00:00:00",
            ),
            (
                1_798_761_599,
                "31/Dec/2026:23:59:59 +0000",
                "2026-12-31T23:59:59",
            ),
        ] {
            fill_time(&mut t, sec);
            assert_eq!(std::str::from_utf8(&t.local).unwrap(), local);
            assert_eq!(std::str::from_utf8(&t.iso).unwrap(), iso);
        }
    }

    #[test]
    fn a_head_not_read_as_a_request_shows_as_dashes() {
        let peer: SocketAddr = "192.0.2.7:4000".parse().unwrap();
        let r = Record::unread(
            Some(peer),
            http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        );
        let line = |f: &Format| {
            let mut out = Vec::new();
            f.write(&r, &mut out);
            String::from_utf8(out).unwrap()
        };
        let combined = line(&Format::Combined);
        assert!(combined.starts_with("192.0.2.7 - - ["), "{combined}");
        assert!(
            combined.ends_with("] \"-\" 431 0 \"-\" \"-\"\n"),
            "{combined}"
        );
        let json = line(&Format::Json);
        assert!(
            json.contains("\"method\":\"-\",\"uri\":\"-\",\"protocol\":\"HTTP/1.1\""),
            "{json}"
        );
        assert!(json.contains("\"status\":431,\"bytes_sent\":0"), "{json}");
        let t = Format::template("$request|$request_method|$request_uri|$status").unwrap();
        assert_eq!(line(&t), "-|-|-|431\n");
    }
}
