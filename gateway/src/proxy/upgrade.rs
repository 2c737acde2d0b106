//! A protocol upgrade (WebSocket and the like): what may be asked for, and the tunnel once
//! both sides switched.

use super::*;

/// The protocols a client asks to upgrade to that the route allows, if it asks
/// (`Connection: upgrade` and `Upgrade`, RFC 9110 §7.8), over HTTP/1.1. Anything else
/// (`h2c` above all, whose bytes would reach the upstream past the route's checks) is
/// dropped with the rest of the hop-by-hop fields, and the request goes as a plain one.
pub(super) fn requested_upgrade(h: &http::HeaderMap, allowed: &[Box<str>]) -> Option<HeaderValue> {
    let asks = h.get_all(CONNECTION).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        })
    });
    let mut values = h.get_all(UPGRADE).iter();
    match (asks, values.next(), values.next()) {
        (true, Some(v), None) => allowed_protocols(v, allowed),
        _ => None,
    }
}

/// The protocols of an `Upgrade` value that are in `allowed` (by name, or name/version),
/// as one value; `None` when there are none.
pub(super) fn allowed_protocols(v: &HeaderValue, allowed: &[Box<str>]) -> Option<HeaderValue> {
    let v = v.to_str().ok()?;
    let kept: Vec<&str> = v
        .split(',')
        .map(str::trim)
        .filter(|p| {
            let lower = p.to_ascii_lowercase();
            let name = lower.split('/').next().unwrap_or("");
            name != "h2c" && allowed.iter().any(|a| **a == *lower || **a == *name)
        })
        .collect();
    if kept.is_empty() {
        return None;
    }
    HeaderValue::from_str(&kept.join(", ")).ok()
}

/// The client's side of an upgrade it asked for: hyper's handle on its connection, and
/// what counts that connection open by the server while the tunnel runs.
pub(super) struct ClientSide {
    pub(super) on: hyper::upgrade::OnUpgrade,
    pub(super) count: Option<crate::http_util::ConnCount>,
}

/// Relays a 101 and joins the two upgraded connections until either side closes, or
/// neither sends a byte for `idle` (as nginx's `proxy_read_timeout` closes a WebSocket):
/// a silent tunnel held two descriptors and an upstream connection for ever. The server's
/// drain closes it too, as Caddy closes its upgraded streams: a WebSocket never ends on its
/// own, and its client reconnects.
pub(super) fn tunnel(
    mut res: Response<UpstreamRes>,
    client_side: ClientSide,
    idle: Duration,
) -> Response<ProxyBody> {
    let upstream_side = hyper::upgrade::on(&mut res);
    let proto = res.headers().get(UPGRADE).cloned();
    let ClientSide { on, count } = client_side;
    let mut hold = count.map(|c| c.start());
    tokio::spawn(async move {
        match (on.await, upstream_side.await) {
            (Ok(c), Ok(u)) => {
                let last = Arc::new(AtomicU64::new(0));
                let since = tokio::time::Instant::now();
                let mut c = Touched::new(hyper_util::rt::TokioIo::new(c), &last, since);
                let mut u = Touched::new(hyper_util::rt::TokioIo::new(u), &last, since);
                let copy = tokio::io::copy_bidirectional(&mut c, &mut u);
                tokio::pin!(copy);
                let mut deadline = since + idle;
                let draining = async {
                    match hold.as_mut() {
                        Some(h) => h.draining().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::pin!(draining);
                loop {
                    tokio::select! {
                        _ = &mut draining => {
                            tracing::debug!("tunnel closed: the server is draining");
                            break;
                        }
                        r = &mut copy => {
                            if let Err(e) = r {
                                tracing::debug!("tunnel closed: {e}");
                            }
                            break;
                        }
                        _ = tokio::time::sleep_until(deadline) => {
                            let moved = since + Duration::from_millis(last.load(Ordering::Relaxed));
                            if moved + idle <= tokio::time::Instant::now() {
                                tracing::debug!("tunnel closed: idle for {idle:?}");
                                break;
                            }
                            deadline = moved + idle;
                        }
                    }
                }
            }
            (Err(e), _) | (_, Err(e)) => tracing::debug!("upgrade failed: {e}"),
        }
        drop(hold);
    });
    let (mut parts, _) = res.into_parts();
    headers::remove_hop_by_hop(&mut parts.headers);
    parts
        .headers
        .insert(CONNECTION, HeaderValue::from_static("upgrade"));
    if let Some(p) = proto {
        parts.headers.insert(UPGRADE, p);
    }
    headers::add_via(&mut parts.headers, parts.version);
    Response::from_parts(parts, ProxyBody::empty())
}

pin_project_lite::pin_project! {
    /// One side of a tunnel, stamping when it last read a byte (in ms since `since`):
    /// a write follows a read of the other side, so reads tell all the traffic.
    struct Touched<T> {
        #[pin]
        io: T,
        last: Arc<AtomicU64>,
        since: tokio::time::Instant,
    }
}

impl<T> Touched<T> {
    fn new(io: T, last: &Arc<AtomicU64>, since: tokio::time::Instant) -> Self {
        Touched {
            io,
            last: last.clone(),
            since,
        }
    }
}

impl<T: tokio::io::AsyncRead> tokio::io::AsyncRead for Touched<T> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.project();
        let before = buf.filled().len();
        let r = this.io.poll_read(cx, buf);
        if buf.filled().len() > before {
            let ms = this.since.elapsed().as_millis() as u64;
            this.last.store(ms, Ordering::Relaxed);
        }
        r
    }
}

impl<T: tokio::io::AsyncWrite> tokio::io::AsyncWrite for Touched<T> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.project().io.poll_write(cx, buf)
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.project().io.poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.project().io.poll_shutdown(cx)
    }
}
