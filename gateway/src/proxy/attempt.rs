//! The attempts at a request: an upstream picked, the exchange over the own HTTP/1.1 client
//! or hyper's, and the retry, timeout and failure accounting between them.

use super::*;

impl Inner {
    /// Picks the first upstream and encodes the request head for it, so that nothing of
    /// the client's request is kept past the call.
    pub(super) fn start_bare(
        &self,
        pools: &[Option<Arc<pool::Pool>>],
        parts: &mut http::request::Parts,
        prep: Prepared,
    ) -> Result<Bare, Refused> {
        let i = self
            .selector
            .pick(&self.upstreams, health::now_ms(), &[], prep.key)
            .ok_or(Refused(
                StatusCode::SERVICE_UNAVAILABLE,
                "no upstream available\n",
            ))?;
        let Some(pool) = pools.get(i).cloned().flatten() else {
            return Err(Refused(StatusCode::BAD_GATEWAY, "bad gateway\n"));
        };
        let mut conn = pool.checkout_h1();
        let buf = match conn.as_mut() {
            Some(c) => c.take_wbuf(),
            None => Vec::with_capacity(512),
        };
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let mut out = h1::Outgoing::encode(
            buf,
            &parts.method,
            path,
            self.host_for(prep.client_host.as_ref(), &self.upstreams[i]),
            &parts.headers,
            prep.fwd.as_ref(),
        );
        out.recycle(std::mem::take(&mut parts.headers));
        Ok(Bare {
            // Counted as it is picked, so that the next request's pick sees it.
            guard: self.count_in(&self.upstreams[i]),
            out,
            conn,
            pool,
            first: i,
            key: prep.key,
            client_host: prep.client_host.is_some(),
        })
    }

    /// The bodiless, idempotent exchange over this crate's own HTTP/1.1 client ([`h1`]),
    /// tried on the next upstream when a connection can't be made.
    pub(super) async fn forward_bare(self: Arc<Self>, mut bare: Bare) -> Response<ProxyBody> {
        let mut tried = Tried::default();
        let may_retry = self.retries > 0 && self.upstreams.len() > 1;
        let mut i = bare.first;
        loop {
            tried.push(i);
            let up = &self.upstreams[i];
            // The first upstream was counted when it was picked.
            let guard = if tried.len() == 1 {
                bare.guard.take()
            } else {
                self.count_in(up)
            };
            let asked = std::time::Instant::now();
            up.metrics.requests.increment(1);
            // As `tokio::time::timeout` does, a deadline past what an Instant holds is far.
            let deadline = tokio::time::Instant::from_std(asked)
                .checked_add(self.response_timeout)
                .unwrap_or_else(|| tokio::time::Instant::now() + FAR);
            let sent = h1::send(
                &bare.pool,
                &up.authority,
                bare.conn.take(),
                &mut bare.out,
                deadline,
            )
            .await;
            let e = match sent {
                Ok(Ok(res)) => {
                    let res = res.map(UpstreamRes::H1);
                    return self.answered(up, res, guard, asked, None, &mut None);
                }
                Ok(Err(e)) => ProxyError::of(e, Blame::Upstream),
                Err(_) => ProxyError::timed_out(Blame::Upstream),
            };
            if let Err(r) = self.failed(up, e, may_retry, &tried) {
                return r.response();
            }
            let Some(next) = self.selector.pick(
                &self.upstreams,
                health::now_ms(),
                tried.as_slice(),
                bare.key,
            ) else {
                return plain(StatusCode::BAD_GATEWAY, "bad gateway\n");
            };
            // The client's Host stays; an upstream's own is the next one's.
            if !(bare.client_host && self.keep_host) {
                bare.out.set_host(self.upstreams[next].host.as_ref());
            }
            let Some(pool) = self.h1_pools().and_then(|p| p.get(next).cloned().flatten()) else {
                return plain(StatusCode::BAD_GATEWAY, "bad gateway\n");
            };
            bare.conn = pool.checkout_h1();
            bare.pool = pool;
            i = next;
        }
    }

    /// Counts a request against its upstream until its response is done with, when the
    /// policy picks by load: a count every worker writes, so kept only when read.
    pub(super) fn count_in(&self, up: &Arc<Upstream>) -> Option<InFlight> {
        if !matches!(self.selector, Selector::LeastRequests) {
            return None;
        }
        up.in_flight.fetch_add(1, Ordering::Relaxed);
        Some(InFlight(up.clone()))
    }

    /// A response came: it goes back to the client (or, a 101, becomes a tunnel).
    pub(super) fn answered(
        &self,
        up: &Arc<Upstream>,
        res: Response<UpstreamRes>,
        guard: Option<InFlight>,
        asked: std::time::Instant,
        lent: Option<pool::Lent>,
        client_upgrade: &mut Option<hyper::upgrade::OnUpgrade>,
    ) -> Response<ProxyBody> {
        let took = asked.elapsed();
        up.metrics.response.record(took);
        self.passive.succeeded(up);
        if res.status() == StatusCode::SWITCHING_PROTOCOLS {
            // Only to a protocol the route allows (and so asked for): never h2c.
            let allowed = res
                .headers()
                .get(UPGRADE)
                .is_some_and(|v| allowed_protocols(v, &self.upgrades).is_some());
            if let (Some(client_side), true) = (client_upgrade.take(), allowed) {
                return tunnel(res, client_side);
            }
            // A 101 nobody asked for can't be relayed.
            return plain(StatusCode::BAD_GATEWAY, "bad gateway\n");
        }
        let mut res = respond(res, guard, self.body_idle, lent);
        if self.upstream_info {
            res.extensions_mut().insert(UpstreamInfo {
                addr: up.authority.clone(),
                time: took,
            });
        }
        res
    }

    /// Runs an exchange until its response head, or `Err` past the response timeout. That
    /// counts from the request sent: while its body is still on its way it counts from the
    /// start, and once the body is sent the upstream has a whole `response_timeout` from
    /// then. A client trickling its body to end just before the deadline would otherwise
    /// leave the upstream no time, and a 504 held against it.
    pub(super) async fn within_response_timeout<F: Future>(
        &self,
        exchange: F,
        progress: Option<&Progress>,
    ) -> Result<F::Output, tokio::time::error::Elapsed> {
        let mut exchange = std::pin::pin!(exchange);
        let mut deadline = tokio::time::Instant::now() + self.response_timeout;
        loop {
            let elapsed = match tokio::time::timeout_at(deadline, exchange.as_mut()).await {
                Ok(out) => return Ok(out),
                Err(e) => e,
            };
            let Some(sent_at) = progress.and_then(Progress::sent_at) else {
                return Err(elapsed);
            };
            let due = sent_at.saturating_add(self.response_timeout.as_millis() as u64);
            let left = due.saturating_sub(health::now_ms());
            if left == 0 {
                return Err(elapsed);
            }
            deadline = tokio::time::Instant::now() + Duration::from_millis(left);
        }
    }

    /// An attempt failed: `Ok` when it may go to another upstream, else the answer. Only
    /// the upstream's own faults are held against it.
    pub(super) fn failed(
        &self,
        up: &Upstream,
        e: ProxyError,
        may_retry: bool,
        tried: &Tried,
    ) -> Result<(), Refused> {
        if e.upstreams_fault() {
            tracing::warn!(upstream = %up.authority, timeout = ?self.response_timeout, "{e}");
            up.metrics.failures.increment(1);
            self.passive.failed(&self.upstreams, up);
        } else if e.kind() == ErrorKind::UnsentTimeout {
            tracing::warn!(upstream = %up.authority, timeout = ?self.response_timeout, "{e}");
        } else {
            tracing::debug!(upstream = %up.authority, "{e}");
        }
        let n = tried.len();
        let again = e.retry()
            && may_retry
            && n <= self.retries as usize
            && n < self.upstreams.len().min(Tried::MAX);
        if again {
            Ok(())
        } else {
            Err(e.answer())
        }
    }

    /// Every other exchange: with a body, an upgrade, HTTP/2 or TLS to the upstream — over
    /// hyper's client.
    pub(super) async fn forward(
        self: Arc<Self>,
        parts: http::request::Parts,
        body: ReqBody,
        prep: Prepared,
    ) -> Response<ProxyBody> {
        let Prepared {
            mut client_upgrade,
            client_host,
            key,
            replayable,
            // Already applied to the map (`serve`).
            fwd: _,
        } = prep;
        let path: PathAndQuery = parts
            .uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        let (body, progress) = body.tracked();
        let mut body = Some(body);
        let mut tried = Tried::default();
        // The request is copied for a second attempt only when one can happen.
        let may_retry = replayable && self.retries > 0 && self.upstreams.len() > 1;
        let mut spare = Some(parts);
        loop {
            let now = health::now_ms();
            let Some(i) = self
                .selector
                .pick(&self.upstreams, now, tried.as_slice(), key)
            else {
                return if tried.len() == 0 {
                    plain(StatusCode::SERVICE_UNAVAILABLE, "no upstream available\n")
                } else {
                    plain(StatusCode::BAD_GATEWAY, "bad gateway\n")
                };
            };
            tried.push(i);
            let up = &self.upstreams[i];
            let next = if may_retry {
                spare.clone()
            } else {
                spare.take()
            };
            let Some(mut p) = next else {
                return plain(StatusCode::BAD_GATEWAY, "bad gateway\n");
            };
            let pool = self.pool(i);
            // RFC 9112 §3.2.1: to an origin server, the target in origin form; hyper-util's
            // client wants the absolute form, to pick its connection by.
            p.uri = match pool {
                Some(_) => Uri::from(path.clone()),
                None => {
                    let uri = Uri::builder()
                        .scheme(up.scheme.clone())
                        .authority(up.authority.clone())
                        .path_and_query(path.clone())
                        .build();
                    let Ok(uri) = uri else {
                        return plain(StatusCode::BAD_REQUEST, "bad request\n");
                    };
                    uri
                }
            };
            p.version = if self.http2 {
                http::Version::HTTP_2
            } else {
                http::Version::HTTP_11
            };
            if let Some(h) = self.host_for(client_host.as_ref(), up) {
                p.headers.insert(HOST, h.clone());
            }
            let b = body.take().unwrap_or(ReqBody::Empty);
            let guard = self.count_in(up);
            let asked = std::time::Instant::now();
            up.metrics.requests.increment(1);
            let exchange = async {
                match pool {
                    // Boxed: rarer, and it would make every request's future larger.
                    Some(pool) => {
                        Box::pin(pool::send(pool, &up.authority, Request::from_parts(p, b)))
                            .await
                            .map(|(res, lent)| (res.map(UpstreamRes::Hyper), Some(lent)))
                    }
                    None => match self.client().request(Request::from_parts(p, b)).await {
                        Ok(res) => Ok((res.map(UpstreamRes::Hyper), None)),
                        Err(e) => Err(pool::SendError::Client(e)),
                    },
                }
            };
            let sent = self
                .within_response_timeout(exchange, progress.as_deref())
                .await;
            let e = match sent {
                Ok(Ok((res, lent))) => {
                    return self.answered(up, res, guard, asked, lent, &mut client_upgrade);
                }
                Ok(Err(e)) => ProxyError::of(e, Blame::of(progress.as_deref(), false)),
                Err(_) => ProxyError::timed_out(Blame::of(progress.as_deref(), true)),
            };
            if let Err(r) = self.failed(up, e, may_retry, &tried) {
                return r.response();
            }
            body = Some(ReqBody::Empty);
        }
    }
}

/// A deadline that never comes: about 30 years, as tokio's own.
pub(super) const FAR: Duration = Duration::from_secs(86400 * 365 * 30);

/// A bodiless request on its way over [`h1`]: its head encoded, the upstream's pool, and
/// an idle connection out of it, if there was one.
pub(super) struct Bare {
    /// The first upstream's in-flight count, under least_requests.
    pub(super) guard: Option<InFlight>,
    pub(super) out: h1::Outgoing,
    pub(super) conn: Option<h1::Conn>,
    pub(super) pool: Arc<pool::Pool>,
    pub(super) first: usize,
    pub(super) key: Option<u64>,
    /// The client sent a Host (kept unless the route sends the upstream's).
    pub(super) client_host: bool,
}

impl Drop for Bare {
    /// A connection checked out for a request that never went (its client left before the
    /// future first ran) is still clean: it goes back.
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool.give_back_h1(conn);
        }
    }
}

/// The upstreams tried so far, on the stack: at most [`Tried::MAX`] attempts.
#[derive(Default)]
pub(super) struct Tried {
    pub(super) buf: [usize; Tried::MAX],
    pub(super) n: usize,
}

impl Tried {
    const MAX: usize = 16;

    pub(super) fn push(&mut self, i: usize) {
        if let Some(slot) = self.buf.get_mut(self.n) {
            *slot = i;
            self.n += 1;
        }
    }

    pub(super) fn len(&self) -> usize {
        self.n
    }

    pub(super) fn as_slice(&self) -> &[usize] {
        &self.buf[..self.n]
    }
}

/// Counts a request against its upstream until the response body is done with.
pub(crate) struct InFlight(Arc<Upstream>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}
