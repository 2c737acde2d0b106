//! HTTP/3 (RFC 9114) over QUIC (RFC 9000, RFC 9001) on the UDP side of each HTTPS
//! listener, with `tls.http3`.
//!
//! quinn runs QUIC (loss recovery, flow control, the 3× anti-amplification limit of RFC
//! 9000 §8.1, connection migration), h3 the HTTP/3 framing and QPACK. Each request goes
//! through the same [`Fronted`] checks and Service as over TCP, so routes, layers, logs
//! and metrics are the same; only the body types differ at this edge.
//!
//! Every buffer is bounded: what a connection may receive ahead of the Service
//! (`receive_window`), what it may hold unsent (`send_window`, the HTTP/2 send budget), one
//! body chunk per stream in flight, and the packets of handshakes not yet accepted.

use super::h2send;
use super::service::{Fronted, Serve};
use super::{ConnGuard, ListenerKind, Shared};
use crate::body::BoxError;
use crate::proxy::ConnInfo;
use bytes::{Buf, Bytes};
use gatehouse_config::Config;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::watch;

/// Bytes a connection may receive ahead of what its requests' Services have read, over
/// all its streams, and per stream. Uploads over loopback run at several GB/s with these;
/// over a long path they bound one upload's rate to window ÷ RTT, as a TCP window would.
const RECEIVE_WINDOW: u32 = 2 * 1024 * 1024;
const STREAM_RECEIVE_WINDOW: u32 = 512 * 1024;

/// What every HTTP/3 connection is set up with, built once at start.
pub(crate) struct H3Settings {
    pub(crate) server: quinn::ServerConfig,
    max_header_bytes: u64,
    /// A response chunk the client has not taken within this ends its stream.
    stall: Duration,
    /// A request's header section, and a GET's end, must arrive within this.
    header_read: Duration,
    /// A connection without requests for this long is closed.
    keep_alive: Duration,
    handshake_timeout: Duration,
    retry_above: usize,
    max_connections: usize,
    handshaking: AtomicUsize,
    retries: metrics::Counter,
    /// `tls.http3_early_data`.
    early_data: bool,
    early: EarlyCounts,
}

/// Requests that came in 0-RTT data: served, and refused with 425.
#[derive(Clone)]
struct EarlyCounts {
    served: metrics::Counter,
    too_early: metrics::Counter,
}

impl H3Settings {
    pub(crate) fn new(
        config: &Config,
        quic: Arc<quinn::crypto::rustls::QuicServerConfig>,
    ) -> Result<H3Settings, String> {
        let Some(tls) = &config.tls else {
            return Err("no [tls] table".into());
        };
        let mut t = quinn::TransportConfig::default();
        t.max_concurrent_bidi_streams(tls.http3_max_streams.into())
            // RFC 9114 §6.2: the peer's control stream and QPACK's two; a few more for
            // stream types a client may add (and the receiver must ignore, §6.2.3).
            .max_concurrent_uni_streams(8u32.into())
            .receive_window(RECEIVE_WINDOW.into())
            .stream_receive_window(STREAM_RECEIVE_WINDOW.into())
            .send_window(config.limits.h2_send_buffer as u64);
        let idle = quinn::IdleTimeout::try_from(config.timeouts.keep_alive)
            .map_err(|_| "timeouts.keep_alive: too long for QUIC's idle timeout".to_string())?;
        t.max_idle_timeout(Some(idle));
        let mut server = quinn::ServerConfig::with_crypto(quic);
        server
            .transport_config(Arc::new(t))
            .migration(true)
            // Packets of handshakes not yet accepted: a flood of Initials queues no more.
            .max_incoming(4096)
            .incoming_buffer_size(64 * 1024)
            .incoming_buffer_size_total(8 * 1024 * 1024);
        // 0-RTT is taken only from a client whose address a token has validated (see
        // `connection`): a NEW_TOKEN one from its last connection, good once (the log) and
        // only from the address it was given to; or a Retry's.
        let mut tokens = quinn::ValidationTokenConfig::default();
        if tls.http3_early_data {
            tokens
                .log(Arc::new(quinn::BloomTokenLog::default()))
                .sent(2);
        } else {
            tokens.log(Arc::new(quinn::NoneTokenLog)).sent(0);
        }
        server.validation_token_config(tokens);
        Ok(H3Settings {
            server,
            max_header_bytes: config.limits.max_header_bytes as u64,
            stall: config.timeouts.keep_alive,
            header_read: config.timeouts.header_read,
            keep_alive: config.timeouts.keep_alive,
            handshake_timeout: tls.handshake_timeout,
            retry_above: tls.http3_retry_above,
            max_connections: config.limits.max_connections,
            handshaking: AtomicUsize::new(0),
            retries: metrics::counter!("gatehouse_quic_retries_total"),
            early_data: tls.http3_early_data,
            early: EarlyCounts {
                served: metrics::counter!("gatehouse_quic_early_requests_total", "outcome" => "served"),
                too_early: metrics::counter!("gatehouse_quic_early_requests_total", "outcome" => "too_early"),
            },
        })
    }
}

/// Which socket of its address's group (`listener::bind_udp_group`) an endpoint serves.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Steer {
    pub(crate) index: usize,
    pub(crate) of: usize,
}

/// Connection IDs whose first byte, modulo the group's size, is the number of the socket
/// whose endpoint made them: the group's BPF program steers every packet sent to one of
/// them to that socket, from whatever address it comes (RFC 9000 §9).
struct SteeredCid {
    steer: Steer,
    random: &'static dyn rustls::crypto::SecureRandom,
    fallback: std::hash::RandomState,
    made: u64,
}

impl quinn::ConnectionIdGenerator for SteeredCid {
    fn generate_cid(&mut self) -> quinn::ConnectionId {
        let mut id = [0u8; CID_LEN];
        if self.random.fill(&mut id).is_err() {
            use std::hash::BuildHasher;
            self.made += 1;
            id.copy_from_slice(&self.fallback.hash_one(self.made).to_ne_bytes());
        }
        let (of, index) = (self.steer.of as u16, self.steer.index as u16);
        let mut first = u16::from(id[0]) / of * of + index;
        if first > 255 {
            first -= of;
        }
        id[0] = first as u8;
        quinn::ConnectionId::new(&id)
    }

    fn cid_len(&self) -> usize {
        CID_LEN
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

/// quinn's default length.
const CID_LEN: usize = 8;

/// Serves HTTP/3 on `socket` until shutdown, then drains: each connection is sent a
/// GOAWAY (RFC 9114 §5.2) and closes once its requests are answered.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn serve<T: Serve>(
    socket: std::net::UdpSocket,
    steer: Steer,
    kind: Arc<ListenerKind>,
    svc: T,
    settings: Arc<H3Settings>,
    send_pool: Arc<h2send::Pool>,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut config = quinn::EndpointConfig::default();
    if steer.of > 1 {
        let random = rustls::crypto::aws_lc_rs::default_provider().secure_random;
        config.cid_generator(move || {
            Box::new(SteeredCid {
                steer,
                random,
                fallback: std::hash::RandomState::new(),
                made: 0,
            })
        });
    }
    let fd = std::os::fd::AsRawFd::as_raw_fd(&socket);
    let endpoint = match quinn::Endpoint::new(
        config,
        Some(settings.server.clone()),
        socket,
        Arc::new(quinn::TokioRuntime),
    ) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!("http3 listener: {e}");
            return;
        }
    };
    // `fd` is the endpoint's socket, open while the endpoint lives.
    if steer.of > 1 {
        if let Err(e) = super::listener::udp_gro_off(fd) {
            tracing::warn!("http3: cannot turn UDP GRO off on a steered socket: {e}");
        }
    }
    if *shutdown.borrow() {
        return;
    }
    loop {
        let incoming = tokio::select! {
            i = endpoint.accept() => i,
            _ = shutdown.changed() => break,
        };
        let Some(incoming) = incoming else { break };
        let open = shared.connections.fetch_add(1, Ordering::SeqCst);
        if settings.max_connections > 0 && open >= settings.max_connections {
            shared.connections.fetch_sub(1, Ordering::SeqCst);
            kind.refused.increment(1);
            incoming.refuse();
            continue;
        }
        // RFC 9000 §8.1.2: under a flood of Initials (from spoofed addresses, say), make
        // each client prove its address with a Retry before any handshake state is kept.
        // Counted here, not in the task: quinn hands over a burst without yielding.
        let validated = incoming.remote_address_validated();
        let Some(counted) = Handshaking::reserve(&settings, validated) else {
            shared.connections.fetch_sub(1, Ordering::SeqCst);
            settings.retries.increment(1);
            let _ = incoming.retry();
            continue;
        };
        let connecting = match incoming.accept() {
            Ok(c) => c,
            Err(e) => {
                shared.connections.fetch_sub(1, Ordering::SeqCst);
                tracing::debug!("quic: {e}");
                continue;
            }
        };
        kind.open.increment(1.0);
        let guard = ConnGuard(shared.clone(), kind.clone());
        let svc = Fronted::new(kind.front.clone(), svc.clone());
        let (settings, rx, kind) = (settings.clone(), shutdown.clone(), kind.clone());
        let budget = Arc::new(h2send::ConnBudget::new(send_pool.clone()));
        tokio::spawn(async move {
            let early = settings.early_data && validated;
            connection(
                connecting, early, counted, &kind, svc, &settings, budget, rx,
            )
            .await;
            drop(guard);
        });
    }
    // No new connections; those open finish within the drain, then the rest are closed.
    endpoint.set_server_config(None);
    shared.drained().await;
    // H3_NO_ERROR (RFC 9114 §8.1), 0x100: fits any VarInt.
    endpoint.close(quinn::VarInt::from_u32(0x100), b"shutdown");
    let _ = tokio::time::timeout(DRAIN_WAIT, endpoint.wait_idle()).await;
}

/// Counts a handshake in progress while it lives.
struct Handshaking(Arc<H3Settings>);

impl Handshaking {
    /// Counts one more, unless the client's address is not validated and `retry_above`
    /// are in progress already. Checked and counted in one step: every runtime's endpoint
    /// accepts at once, and a load then an add let two of them both take the last place.
    fn reserve(settings: &Arc<H3Settings>, validated: bool) -> Option<Handshaking> {
        let limit = settings.retry_above;
        settings
            .handshaking
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (validated || n < limit).then_some(n + 1)
            })
            .ok()?;
        Some(Handshaking(settings.clone()))
    }
}

impl Drop for Handshaking {
    fn drop(&mut self) {
        self.0.handshaking.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One connection. With `early` (0-RTT on, and the client's address validated by a
/// token), requests are read before the handshake ends: those that came before it are
/// early data, which [`Fronted::serve_http3`] answers by RFC 8470. Otherwise 0-RTT data
/// waits in quinn until the handshake is done, and is then served as any request.
#[allow(clippy::too_many_arguments)]
async fn connection<T: Serve>(
    connecting: quinn::Connecting,
    early: bool,
    counted: Handshaking,
    kind: &ListenerKind,
    svc: Fronted<T>,
    settings: &H3Settings,
    budget: Arc<h2send::ConnBudget>,
    mut shutdown: watch::Receiver<bool>,
) {
    let connecting = match early {
        true => connecting.into_0rtt(),
        false => Err(connecting),
    };
    let (conn, zero_rtt) = match connecting {
        // A server's `into_0rtt` always succeeds; the future resolves when the handshake
        // ends (to what, see `handshake` below).
        Ok((conn, done)) => (conn, Some(done)),
        Err(connecting) => {
            let conn = match tokio::time::timeout(settings.handshake_timeout, connecting).await {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => {
                    kind.handshake_failures.increment(1);
                    tracing::debug!("quic handshake: {e}");
                    return;
                }
                Err(_) => {
                    kind.handshake_failures.increment(1);
                    tracing::debug!("quic handshake: timed out");
                    return;
                }
            };
            (conn, None)
        }
    };
    let mut counted = Some(counted);
    let mut confirmed = zero_rtt.is_none();
    if confirmed {
        drop(counted.take());
        kind.handshakes.increment(1);
    }
    // Its deadline counts from here, not from its first poll (after h3's setup below).
    let deadline = tokio::time::Instant::now() + settings.handshake_timeout;
    let watched = conn.clone();
    let handshake = async move {
        match zero_rtt {
            // It resolves when the handshake ends either way, and on a server always to
            // false (quinn-proto sets `accepted_0rtt` on clients only): whether the
            // connection is still up tells success.
            Some(done) => {
                tokio::time::timeout_at(deadline, done).await.is_ok()
                    && watched.close_reason().is_none()
            }
            None => std::future::pending().await,
        }
    };
    tokio::pin!(handshake);
    // The address the handshake validated (or with 0-RTT, the token), for every request of
    // the connection. quinn moves a connection to a new address on its first packet from
    // there (RFC 9000 §9), before that path is validated: a forged source address must not
    // become the client that IP rules, rate limits and X-Forwarded-For see.
    let conn_info = ConnInfo {
        peer: Some(conn.remote_address()),
        https: true,
    };
    let mut builder = h3::server::builder();
    builder.max_field_section_size(settings.max_header_bytes);
    let build = builder.build::<_, Bytes>(h3_quinn::Connection::new(conn.clone()));
    let built = tokio::select! {
        b = tokio::time::timeout(settings.handshake_timeout, build) => b,
        _ = shutdown.changed() => return,
    };
    let mut h3 = match built {
        Ok(Ok(h)) => h,
        Ok(Err(e)) => {
            tracing::debug!("http3 connection: {e}");
            return;
        }
        Err(_) => return,
    };
    // The connection's requests: aborted with it when it ends (the client went away), as
    // hyper drops an HTTP/2 connection's streams.
    let mut tasks = tokio::task::JoinSet::new();
    // One Service for the connection's requests, as hyper shares one among an HTTP/2
    // connection's streams: a clone for each would clone the router and miss the stack
    // it keeps from the request before.
    let svc = Arc::new(svc);
    let mut closing = *shutdown.borrow();
    if closing {
        let _ = crate::rt::within(DRAIN_WAIT, h3.shutdown(0)).await;
    }
    // QUIC's idle timeout restarts with every PING: a connection without requests is
    // closed after keep_alive, as an idle HTTP/1.1 or HTTP/2 one is, and as there, by a
    // timer that ticks every quarter of it (at most 1 s): to within a tick. Ended requests
    // are reaped (`try_join_next`) when the next one comes and at each tick, not each as it
    // ends: `join_next` would wake this task once more per request, for 3% of h3-1k's CPU.
    let tick = (settings.keep_alive / 4).clamp(Duration::from_millis(5), Duration::from_secs(1));
    let quiet_for = settings
        .keep_alive
        .as_nanos()
        .div_ceil(tick.as_nanos().max(1));
    let (mut quiet, mut active) = (0u128, false);
    let idle = tokio::time::sleep(tick);
    tokio::pin!(idle);
    // One wait for the shutdown signal, not one per pass of the loop: made anew, it was
    // registered and dropped at each wakeup (1.6% of h3-1k's CPU samples, perf).
    let stop = shutdown.changed();
    tokio::pin!(stop);
    loop {
        if closing && tasks.is_empty() {
            break;
        }
        tokio::select! {
            accepted = h3.accept() => match accepted {
                Ok(Some(resolver)) => {
                    // The client's Finished and its first 1-RTT requests often come in one
                    // batch of datagrams, both ready here at once: the handshake is asked
                    // first, so that a request sent after it is not taken for early data
                    // (RFC 8470 §5.2: no 425 for a request that was not).
                    if !confirmed {
                        match futures_util::FutureExt::now_or_never(handshake.as_mut()) {
                            Some(false) => {
                                kind.handshake_failures.increment(1);
                                break;
                            }
                            Some(true) => {
                                confirmed = true;
                                drop(counted.take());
                                kind.handshakes.increment(1);
                            }
                            None => {}
                        }
                    }
                    let svc = svc.clone();
                    let limits = Limits {
                        stall: settings.stall,
                        header_read: settings.header_read,
                    };
                    let budget = budget.clone();
                    // Opened before the handshake ended: sent in 0-RTT data.
                    let early = (!confirmed).then(|| settings.early.clone());
                    active = true;
                    while tasks.try_join_next().is_some() {}
                    let mut request = Box::pin(async move {
                        // A stream opened with its HEADERS never completed holds a task
                        // only this long (QUIC's stream limit bounds how many).
                        let resolved =
                            crate::rt::within(limits.header_read, resolver.resolve_request());
                        if let Some(Ok((req, stream))) = resolved.await {
                            if let Some(counts) = &early {
                                match super::front::is_safe(req.method()) {
                                    true => counts.served.increment(1),
                                    false => counts.too_early.increment(1),
                                }
                            }
                            let early = early.is_some();
                            request(req, stream, svc, conn_info, &budget, limits, early).await;
                        }
                    });
                    // As an HTTP/2 stream is (`InlineFirst`): polled once here, and given a
                    // task only if it isn't done, so that an answer from memory costs no
                    // task to allocate, schedule and reap (h3-1k: 63,804 → 59,478
                    // instructions a request, callgrind).
                    if poll_once(request.as_mut()) {
                        tasks.spawn(request);
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!("http3 connection: {e}");
                    break;
                }
            },
            Some(_) = tasks.join_next(), if closing && !tasks.is_empty() => {}
            ok = &mut handshake, if !confirmed => {
                if !ok {
                    kind.handshake_failures.increment(1);
                    break;
                }
                confirmed = true;
                drop(counted.take());
                kind.handshakes.increment(1);
            }
            _ = &mut idle, if !closing => {
                while tasks.try_join_next().is_some() {
                    active = true;
                }
                quiet = match active || !tasks.is_empty() {
                    true => 0,
                    false => quiet + 1,
                };
                if quiet >= quiet_for {
                    break;
                }
                active = false;
                idle.as_mut().reset(tokio::time::Instant::now() + tick);
            }
            _ = &mut stop, if !closing => {
                closing = true;
                // RFC 9114 §5.2: GOAWAY; the requests already accepted are answered. Not
                // waited on for longer than a drain's last wait: a client that gives the
                // control stream no credit would hold this loop, and every drain, to the
                // drain timeout (found in review).
                let _ = crate::rt::within(DRAIN_WAIT, h3.shutdown(0)).await;
            }
        }
    }
    if closing {
        // Dropping `h3` closes the connection at once, and the last responses may still be
        // unacknowledged: the client closes it once it has them (§5.2), or this wait ends.
        let _ = tokio::time::timeout(DRAIN_WAIT, conn.closed()).await;
    }
}

/// Polls a request's future once with a waker that wakes nothing, and says whether it is
/// still pending: the task it is then spawned on polls it again at once, with its own
/// waker. A panic ends the request alone, as it would in a task of its own.
fn poll_once(fut: Pin<&mut (impl std::future::Future<Output = ()> + ?Sized)>) -> bool {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.poll(&mut cx)));
    matches!(polled, Ok(Poll::Pending))
}

/// How long a drained connection is left for its client to close.
const DRAIN_WAIT: Duration = Duration::from_secs(2);

type Stream = h3::server::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>;
type RecvHalf = h3::server::RequestStream<h3_quinn::RecvStream, Bytes>;

#[derive(Clone, Copy)]
struct Limits {
    stall: Duration,
    header_read: Duration,
}

/// One request: through the listener's checks and the Service, then its response out.
async fn request<T: Serve>(
    req: Request<()>,
    stream: Stream,
    svc: Arc<Fronted<T>>,
    conn: ConnInfo,
    budget: &h2send::ConnBudget,
    Limits { stall, header_read }: Limits,
    early: bool,
) {
    let (mut send, recv) = stream.split();
    let head_only = req.method() == Method::HEAD;
    // RFC 9114 §4.1.2, §4.2: malformed; answered 400 by the listener's checks.
    let bad = |why| Some((StatusCode::BAD_REQUEST, why));
    let (declared, mut refused) = match content_length(req.headers()) {
        Ok(_) if connection_specific(req.headers()) => {
            (None, bad("connection-specific header field\n"))
        }
        // RFC 9220 §3: `:protocol` without SETTINGS_ENABLE_CONNECT_PROTOCOL, never sent.
        Ok(_) if req.extensions().get::<h3::ext::Protocol>().is_some() => {
            (None, bad("extended CONNECT is not enabled\n"))
        }
        Ok(n) => (n, None),
        Err(()) => (None, bad("bad Content-Length\n")),
    };
    let mut body = RequestBody::new(recv, declared);
    // A GET or HEAD is ended by its HEADERS frame's FIN as a rule; without this one look the
    // proxy could not tell an empty body from a body to come, and would forward it chunked.
    // One whose stream stays open gets a 408, counted and logged as any refused request.
    if declared.is_none() && refused.is_none() {
        body.peek();
        if matches!(*req.method(), Method::GET | Method::HEAD)
            && crate::rt::within(header_read, body.settle())
                .await
                .is_none()
        {
            refused = Some((StatusCode::REQUEST_TIMEOUT, "request not ended in time\n"));
        }
    }
    let req = req.map(|()| body);
    let mut fut = std::pin::pin!(svc.serve_http3(req, conn, early, refused));
    let (mut parts, body) = std::future::poll_fn(|cx| fut.as_mut().poll_parts(cx)).await;
    // RFC 9114 §4.2: connection-specific fields are malformed in HTTP/3.
    for name in &CONNECTION_SPECIFIC {
        parts.headers.remove(name);
    }
    // Read as it is sent, within the connection's budget, as over HTTP/2.
    let mut body = super::conn::ConnBody::http3(body, budget);
    let bodiless = head_only
        || parts.status == StatusCode::NO_CONTENT
        || parts.status == StatusCode::NOT_MODIFIED;
    let head = crate::rt::within(stall, send.send_response(Response::from_parts(parts, ())));
    match head.await {
        Some(Ok(())) => {}
        Some(Err(_)) => return,
        None => {
            send.stop_stream(h3::error::Code::H3_REQUEST_CANCELLED);
            return;
        }
    }
    if !bodiless {
        loop {
            let frame = match body.frame().await {
                None => break,
                Some(Ok(f)) => f,
                Some(Err(e)) => {
                    tracing::debug!("http3 response body: {e}");
                    send.stop_stream(h3::error::Code::H3_INTERNAL_ERROR);
                    return;
                }
            };
            match frame.into_data() {
                Ok(data) if data.is_empty() => {}
                Ok(data) => match crate::rt::within(stall, send.send_data(data)).await {
                    Some(Ok(())) => {}
                    Some(Err(_)) => return,
                    None => {
                        send.stop_stream(h3::error::Code::H3_REQUEST_CANCELLED);
                        return;
                    }
                },
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        let sent = crate::rt::within(stall, send.send_trailers(trailers));
                        if sent.await.is_none() {
                            send.stop_stream(h3::error::Code::H3_REQUEST_CANCELLED);
                        }
                        return;
                    }
                }
            }
        }
    }
    drop(body);
    if crate::rt::within(stall, send.finish()).await.is_none() {
        send.stop_stream(h3::error::Code::H3_REQUEST_CANCELLED);
    }
}

/// The fields RFC 9114 §4.2 calls connection-specific (and `TE` but for `trailers`).
static CONNECTION_SPECIFIC: [http::header::HeaderName; 5] = [
    http::header::CONNECTION,
    http::header::TRANSFER_ENCODING,
    http::header::UPGRADE,
    http::header::HeaderName::from_static("keep-alive"),
    http::header::HeaderName::from_static("proxy-connection"),
];

/// RFC 9114 §4.2: a request with a connection-specific field is malformed. Taken on, a
/// `Connection: early-data` would have the proxy strip the `Early-Data` added here.
fn connection_specific(h: &HeaderMap) -> bool {
    CONNECTION_SPECIFIC.iter().any(|n| h.contains_key(n))
        || h.get_all(http::header::TE).iter().any(|v| v != "trailers")
}

/// The one `Content-Length` of a request, if any; two that differ, or one that is not a
/// number, is an error (RFC 9110 §8.6).
fn content_length(h: &HeaderMap) -> Result<Option<u64>, ()> {
    let mut found = None;
    for v in h.get_all(http::header::CONTENT_LENGTH) {
        let n = std::str::from_utf8(v.as_bytes())
            .ok()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or(())?;
        if found.is_some_and(|f| f != n) {
            return Err(());
        }
        found = Some(n);
    }
    Ok(found)
}

/// A request's body, read from its stream as the Service asks for it. With a
/// `Content-Length`, DATA that adds up to more or less is an error (RFC 9114 §4.1.2), so
/// that what is forwarded under that length is exactly what came.
pub struct RequestBody {
    recv: RecvHalf,
    first: Option<Bytes>,
    done: bool,
    declared: Option<u64>,
    received: u64,
    failed: Option<BoxError>,
    /// The stream was read from. h3 starts a read from quinn before it hands out DATA it
    /// has buffered already, so even a read that gave data can leave one pending, with
    /// h3-quinn holding the stream in its future; its `stop_sending` would then unwrap
    /// the stream that isn't there (a panic: seen with a GET left open past
    /// `header_read`, and, found in review, with one DATA frame sent and the stream kept
    /// open). So once read from, a stream is left for quinn to stop as it is dropped.
    read_from: bool,
}

impl RequestBody {
    fn new(recv: RecvHalf, declared: Option<u64>) -> RequestBody {
        RequestBody {
            recv,
            first: None,
            done: declared == Some(0),
            declared,
            received: 0,
            failed: None,
            read_from: false,
        }
    }

    /// Takes what has arrived already, without waiting: a DELETE or OPTIONS whose stream
    /// ended with its HEADERS is then known to have no body, as over HTTP/2 (END_STREAM).
    fn peek(&mut self) {
        if self.done || self.first.is_some() || self.failed.is_some() {
            return;
        }
        // A waker that wakes nothing: a Pending here is polled again, with the Service's.
        let mut cx = Context::from_waker(std::task::Waker::noop());
        self.read_from = true;
        match self.recv.poll_recv_data(&mut cx) {
            Poll::Ready(Ok(None)) => self.done = true,
            Poll::Ready(Ok(Some(mut b))) => self.first = Some(b.copy_to_bytes(b.remaining())),
            Poll::Ready(Err(e)) => self.failed = Some(Box::new(e)),
            Poll::Pending => {}
        }
    }

    /// Reads until the body is known to be empty or its first chunk is in.
    async fn settle(&mut self) {
        if self.done || self.first.is_some() || self.failed.is_some() {
            return;
        }
        self.read_from = true;
        match self.recv.recv_data().await {
            Ok(None) => self.done = true,
            Ok(Some(mut b)) => self.first = Some(b.copy_to_bytes(b.remaining())),
            // Reported when the body is read, if it ever is.
            Err(e) => self.failed = Some(Box::new(e)),
        }
    }
}

/// RFC 9114 §4.1.1: a body the Service did not read to its end (a refusal, a response
/// that did not need it) is stopped with H3_NO_ERROR, not quinn's code 0 on drop; once it
/// was read from, by quinn as it is dropped (code 0, which §9 has a peer take as
/// H3_NO_ERROR).
impl Drop for RequestBody {
    fn drop(&mut self) {
        if !self.done && !self.read_from {
            self.recv.stop_sending(h3::error::Code::H3_NO_ERROR);
        }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Some(e) = this.failed.take() {
            this.done = true;
            return Poll::Ready(Some(Err(e)));
        }
        let chunk = match this.first.take() {
            Some(b) => Some(b),
            None if this.done => return Poll::Ready(None),
            None => {
                this.read_from = true;
                match std::task::ready!(this.recv.poll_recv_data(cx)) {
                    Ok(Some(mut b)) => Some(b.copy_to_bytes(b.remaining())),
                    Ok(None) => None,
                    Err(e) => {
                        this.done = true;
                        return Poll::Ready(Some(Err(Box::new(e))));
                    }
                }
            }
        };
        match chunk {
            Some(b) => {
                this.received += b.len() as u64;
                if this.declared.is_some_and(|d| this.received > d) {
                    this.done = true;
                    return Poll::Ready(Some(
                        Err("request body longer than Content-Length".into()),
                    ));
                }
                Poll::Ready(Some(Ok(Frame::data(b))))
            }
            None => {
                this.done = true;
                if this.declared.is_some_and(|d| this.received != d) {
                    return Poll::Ready(Some(Err(
                        "request body shorter than Content-Length".into()
                    )));
                }
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.first.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match self.declared {
            Some(d) => SizeHint::with_exact(d.saturating_sub(self.received)),
            None if self.is_end_stream() => SizeHint::with_exact(0),
            None => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quinn::ConnectionIdGenerator;

    /// Every ID an endpoint makes is steered back to its own socket, whatever its random
    /// first byte was (255 included, where rounding down and adding the index overflows).
    #[test]
    fn connection_ids_carry_their_socket() {
        let random = rustls::crypto::aws_lc_rs::default_provider().secure_random;
        for of in 2..=7 {
            let mut seen = vec![0usize; 256];
            for index in 0..of {
                let mut g = SteeredCid {
                    steer: Steer { index, of },
                    random,
                    fallback: std::hash::RandomState::new(),
                    made: 0,
                };
                for _ in 0..2000 {
                    let id = g.generate_cid();
                    assert_eq!(id.len(), g.cid_len());
                    assert_eq!(id[0] as usize % of, index, "of {of}");
                    seen[id[0] as usize] += 1;
                }
            }
            // Across all sockets the first byte still takes (nearly) every value.
            assert!(seen.iter().filter(|&&n| n > 0).count() > 240, "of {of}");
        }
    }
}
