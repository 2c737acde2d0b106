//! A request readied for its upstreams: its body, its head's forwarding fields, and what
//! every attempt shares.

use super::*;

/// A request body on its way upstream: most requests have none, and need no box.
pub enum ReqBody {
    Empty,
    Boxed(axum::body::Body),
    /// A body whose progress is watched, to tell whose fault a failure was.
    Tracked(axum::body::Body, Arc<Progress>),
}

impl ReqBody {
    /// The body, watched when it has anything to send.
    pub(super) fn tracked(self) -> (ReqBody, Option<Arc<Progress>>) {
        match self {
            ReqBody::Boxed(b) => {
                let p = Arc::new(Progress::default());
                (ReqBody::Tracked(b, p.clone()), Some(p))
            }
            other => (other, None),
        }
    }
}

/// How far a request body has gone upstream: still sending, waiting on the client for
/// more (its last poll was pending), or sent in full, and when.
#[derive(Default)]
pub struct Progress {
    pub(super) state: AtomicU8,
    /// [`health::now_ms`] when the body was sent in full; written before `state` says so.
    pub(super) sent_at: AtomicU64,
}

impl Progress {
    const SENDING: u8 = 0;
    const AWAITING_CLIENT: u8 = 1;
    const SENT: u8 = 2;
    /// The client's body passed `max_body_bytes`.
    const TOO_LARGE: u8 = 3;
    /// The client's body failed (a broken chunk, the client gone). An HTTP/2 upstream's
    /// client then resets the stream, and its error no longer says why.
    const CLIENT_FAILED: u8 = 4;

    pub(super) fn set(&self, state: u8) {
        let was = self.state.load(Ordering::Relaxed);
        // Sent, too large and failed are where a body ends.
        if was == state || was >= Progress::SENT {
            return;
        }
        if state == Progress::SENT {
            self.sent_at.store(health::now_ms(), Ordering::Relaxed);
        }
        self.state.store(state, Ordering::Release);
    }

    pub(super) fn get(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }

    /// When the body was sent in full, if it was.
    pub(super) fn sent_at(&self) -> Option<u64> {
        (self.get() == Progress::SENT).then(|| self.sent_at.load(Ordering::Relaxed))
    }
}

/// Whose fault a failed attempt was. Only the upstream's count towards `max_fails`: a
/// client that stalls its upload (or that the upstream gave up on for stalling it) must
/// not be able to eject an upstream for everyone.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Blame {
    /// The upstream's: it was refused, reset, or sent a bad head, or it sent no head in
    /// time for a request sent in full.
    Upstream,
    /// The body was still being sent and the upstream not reading it: no response head
    /// in time, but the request never arrived whole. Not counted.
    Unsent,
    /// The body was waiting on the client when it failed or timed out. Not counted.
    Client,
    /// The client's body passed `max_body_bytes`. Not counted.
    BodyTooLarge,
    /// The client's body failed. Not counted.
    ClientBody,
}

impl Blame {
    /// For an attempt that timed out (`timeout`) or failed, by how far its body had got.
    pub(super) fn of(progress: Option<&Progress>, timeout: bool) -> Blame {
        match progress.map(Progress::get) {
            None | Some(Progress::SENT) => Blame::Upstream,
            Some(Progress::AWAITING_CLIENT) => Blame::Client,
            Some(Progress::TOO_LARGE) => Blame::BodyTooLarge,
            Some(Progress::CLIENT_FAILED) => Blame::ClientBody,
            // Only a response head timeout needs the request fully sent (a reset or a
            // bad head mid-upload is still the upstream's).
            Some(_) if timeout => Blame::Unsent,
            Some(_) => Blame::Upstream,
        }
    }
}

impl Body for ReqBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        use std::task::Poll;
        let polled = match self.get_mut() {
            ReqBody::Empty => Poll::Ready(None),
            ReqBody::Boxed(b) => Pin::new(b).poll_frame(cx),
            ReqBody::Tracked(b, p) => {
                let polled = Pin::new(&mut *b).poll_frame(cx);
                p.set(match &polled {
                    Poll::Pending => Progress::AWAITING_CLIENT,
                    Poll::Ready(None) => Progress::SENT,
                    Poll::Ready(Some(Ok(f))) if f.is_trailers() || b.is_end_stream() => {
                        Progress::SENT
                    }
                    Poll::Ready(Some(Ok(_))) => Progress::SENDING,
                    Poll::Ready(Some(Err(e))) if super::error::too_large(e) => Progress::TOO_LARGE,
                    Poll::Ready(Some(Err(_))) => Progress::CLIENT_FAILED,
                });
                polled
            }
        };
        // The client's trailer fields stay here, as nginx's do: a route decides the head
        // its upstream gets (forwarding fields, an auth's identity), and a trailer of the
        // same name would arrive beside it unchecked. Trailers end a body (RFC 9110 §6.5),
        // so the body ends where they were.
        match polled {
            Poll::Ready(Some(Ok(f))) if f.is_trailers() => Poll::Ready(None),
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ReqBody::Empty => true,
            ReqBody::Boxed(b) => b.is_end_stream(),
            ReqBody::Tracked(b, p) => {
                let end = b.is_end_stream();
                if end {
                    p.set(Progress::SENT);
                }
                end
            }
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            ReqBody::Empty => http_body::SizeHint::with_exact(0),
            ReqBody::Boxed(b) | ReqBody::Tracked(b, _) => b.size_hint(),
        }
    }
}
impl Inner {
    /// Readies the request's head for its upstreams (RFC 9110 §7.6: hop-by-hop fields out,
    /// the forwarding fields in), and notes what every attempt shares. `Err` is the answer
    /// when the request can't go at all.
    ///
    /// With `own_client` (the request may go over [`h1`]), the forwarding fields of the
    /// common case are left for the head's encoding ([`headers::Forwarding`]).
    pub(super) fn prepare(
        &self,
        parts: &mut http::request::Parts,
        bodiless: bool,
        conn: ConnInfo,
        own_client: bool,
    ) -> Result<Prepared, Refused> {
        if self.max_body > 0 {
            let declared = parts
                .headers
                .get(CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
            if declared.is_some_and(|n| n > self.max_body) {
                return Err(Refused(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "request body too large\n",
                ));
            }
        }
        // RFC 9110 §7.8: an upgrade (WebSocket) keeps its Connection/Upgrade pair, which
        // is otherwise hop-by-hop; the client's side of the tunnel is taken here.
        let hop = headers::HopScan::of(&parts.headers);
        let upgrade = if hop.connection() {
            requested_upgrade(&parts.headers, &self.upgrades)
        } else {
            None
        };
        let client_upgrade = upgrade
            .as_ref()
            .and_then(|_| parts.extensions.remove::<hyper::upgrade::OnUpgrade>())
            .map(|on| ClientSide {
                on,
                count: parts.extensions.remove::<crate::http_util::ConnCount>(),
            });
        let host_field = parts.headers.get(HOST).cloned();
        let client_host = host_field.clone().or_else(|| {
            parts
                .uri
                .authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        });
        headers::remove_scanned(&mut parts.headers, hop);
        if parts.version >= http::Version::HTTP_2 {
            headers::join_cookies(&mut parts.headers);
        }
        // X-Forwarded-Host is the Host that is left: a `Connection` field may have named it.
        let host_field = if hop.connection() {
            parts.headers.get(HOST).cloned()
        } else {
            host_field
        };
        // Only a request that can be sent again as it was may go to another upstream: an
        // idempotent method (RFC 9110 §9.2.2) and no body to replay.
        let replayable = matches!(
            parts.method,
            Method::GET
                | Method::HEAD
                | Method::OPTIONS
                | Method::TRACE
                | Method::PUT
                | Method::DELETE
        ) && bodiless;
        let peer = conn.peer.map(|p| p.ip());
        let scheme = if conn.https { "https" } else { "http" };
        // A hash on a header reads the map as it is sent.
        let hashes_header = matches!(
            &self.selector,
            Selector::Hash {
                on: HashOn::Header(_),
                ..
            }
        );
        let fwd = if own_client && replayable && client_upgrade.is_none() && !hashes_header {
            headers::Forwarding::direct(
                host_field.as_ref(),
                peer,
                scheme,
                &self.trusted,
                self.forwarded,
                parts.version,
            )
            .map(|f| f.keeping(self.route_claims))
        } else {
            None
        };
        if fwd.is_none() {
            headers::forward_keeping(
                &mut parts.headers,
                peer,
                scheme,
                &self.trusted,
                self.forwarded,
                self.route_claims,
            );
            headers::add_via(&mut parts.headers, parts.version);
        }
        if let (Some(u), Some(_)) = (&upgrade, &client_upgrade) {
            parts
                .headers
                .insert(CONNECTION, HeaderValue::from_static("upgrade"));
            parts.headers.insert(UPGRADE, u.clone());
        }
        let key = match &self.selector {
            Selector::Hash { on, .. } => hash_key(on, parts, conn),
            _ => None,
        };
        Ok(Prepared {
            client_upgrade,
            client_host,
            key,
            replayable,
            fwd,
        })
    }

    /// The Host an upstream is sent: the client's (the default), or the upstream's own.
    pub(super) fn host_for<'a>(
        &self,
        client_host: Option<&'a HeaderValue>,
        up: &'a Upstream,
    ) -> Option<&'a HeaderValue> {
        match client_host {
            Some(h) if self.keep_host => Some(h),
            _ => up.host.as_ref(),
        }
    }
}

/// A request answered by the proxy itself: a status and a short body naming no upstream.
pub(super) struct Refused(pub(super) StatusCode, pub(super) &'static str);

impl Refused {
    pub(super) fn response(self) -> Response<ProxyBody> {
        plain(self.0, self.1)
    }
}

/// What every attempt at a request shares, once its head is ready.
pub(super) struct Prepared {
    pub(super) client_upgrade: Option<ClientSide>,
    pub(super) client_host: Option<HeaderValue>,
    pub(super) key: Option<u64>,
    pub(super) replayable: bool,
    /// The forwarding fields, when they are not in the map yet.
    pub(super) fwd: Option<headers::Forwarding>,
}

impl Prepared {
    /// Whether the request may go over [`h1`]: bodiless, idempotent, not an upgrade.
    pub(super) fn bare(&self) -> bool {
        self.replayable && self.client_upgrade.is_none()
    }
}

pub(super) fn hash_key(on: &HashOn, parts: &http::request::Parts, conn: ConnInfo) -> Option<u64> {
    match on {
        HashOn::ClientIp => conn
            .peer
            .map(|p| balance::fnv1a(p.ip().to_string().as_bytes())),
        HashOn::Header(name) => parts
            .headers
            .get(name)
            .map(|v| balance::fnv1a(v.as_bytes())),
        HashOn::Cookie(name) => parts
            .headers
            .get_all(COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|c| c.trim().split_once('='))
            .find(|(k, _)| k == name)
            .map(|(_, v)| balance::fnv1a(v.as_bytes())),
    }
}
