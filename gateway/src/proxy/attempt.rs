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
    ) -> Result<BareStart, Refused> {
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
        Ok(BareStart {
            bare: Bare {
                out,
                conn,
                pool,
                client_host: prep.client_host.is_some(),
            },
            first: i,
            // Counted as it is picked, so that the next request's pick sees it.
            guard: self.count_in(&self.upstreams[i]),
            key: prep.key,
        })
    }

    /// The bodiless, idempotent exchange over this crate's own HTTP/1.1 client ([`h1`]),
    /// its first upstream picked in the call ([`Inner::start_bare`]).
    pub(super) fn forward_bare(
        self: Arc<Self>,
        start: BareStart,
    ) -> impl Future<Output = Response<ProxyBody>> {
        let BareStart {
            bare,
            first,
            guard,
            key,
        } = start;
        let may_retry = self.retries > 0 && self.upstreams.len() > 1;
        self.attempts(bare, Some((first, guard, ())), key, may_retry)
    }

    /// The attempts at a request, the same over either [`Transport`]: an upstream picked
    /// (unless the call already did: `first`), counted, asked; on a failure, held against
    /// it only when it was its fault, and tried on the next one when the error and the
    /// route's `retries` allow.
    pub(super) async fn attempts<T: Transport>(
        self: Arc<Self>,
        mut t: T,
        mut first: Option<(usize, Option<InFlight>, T::Ready)>,
        key: Option<u64>,
        may_retry: bool,
    ) -> Response<ProxyBody> {
        let mut tried = Tried::default();
        loop {
            let (i, guard, ready) = match first.take() {
                Some(picked) => picked,
                None => {
                    let picked = self.selector.pick(
                        &self.upstreams,
                        health::now_ms(),
                        tried.as_slice(),
                        key,
                    );
                    let Some(i) = picked else {
                        return if tried.len() == 0 {
                            plain(StatusCode::SERVICE_UNAVAILABLE, "no upstream available\n")
                        } else {
                            plain(StatusCode::BAD_GATEWAY, "bad gateway\n")
                        };
                    };
                    let ready = match t.to(&self, i) {
                        Ok(ready) => ready,
                        Err(r) => return r.response(),
                    };
                    (i, self.count_in(&self.upstreams[i]), ready)
                }
            };
            tried.push(i);
            let up = &self.upstreams[i];
            let asked = std::time::Instant::now();
            up.metrics.requests.increment(1);
            match t.exchange(&self, i, ready, asked).await {
                Ok((res, lent)) => {
                    let mut upgrade = t.take_upgrade();
                    return self.answered(up, res, guard, asked, lent, &mut upgrade);
                }
                Err(e) => {
                    if let Err(r) = self.failed(up, e, may_retry, &tried) {
                        return r.response();
                    }
                }
            }
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
        client_upgrade: &mut Option<ClientSide>,
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
                return tunnel(res, client_side, self.body_idle);
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
        } else if e.kind() == ErrorKind::NoLocalResources {
            // Not the upstream's, but an operator's to hear of (a descriptor limit, ports
            // exhausted): once per 10 s, not per request of a storm.
            let now = health::now_ms() / 10_000;
            if self.shortage_logged.swap(now, Ordering::Relaxed) != now {
                tracing::warn!(upstream = %up.authority, "{e}");
            }
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
    pub(super) fn forward(
        self: Arc<Self>,
        parts: http::request::Parts,
        body: ReqBody,
        prep: Prepared,
    ) -> impl Future<Output = Response<ProxyBody>> {
        let Prepared {
            client_upgrade,
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
        // The request is copied for a second attempt only when one can happen.
        let may_retry = replayable && self.retries > 0 && self.upstreams.len() > 1;
        let t = ViaHyper {
            spare: Some(parts),
            path,
            body: Some(body),
            progress,
            client_upgrade,
            client_host,
            may_retry,
        };
        self.attempts(t, None, key, may_retry)
    }
}

/// One way of carrying a request to an upstream: the own HTTP/1.1 client ([`Bare`]) or
/// hyper's ([`ViaHyper`]). [`Inner::attempts`] is the one loop over both.
pub(super) trait Transport {
    /// The request readied for one upstream.
    type Ready;

    /// Readies the request for upstream `i`, picked in the loop; `Err` when it can't be.
    fn to(&mut self, inner: &Inner, i: usize) -> Result<Self::Ready, Refused>;

    /// One exchange with upstream `i`, asked at `asked`, until its response head or the
    /// route's response timeout.
    async fn exchange(
        &mut self,
        inner: &Inner,
        i: usize,
        ready: Self::Ready,
        asked: std::time::Instant,
    ) -> Result<(Response<UpstreamRes>, Option<pool::Lent>), ProxyError>;

    /// The client's side of the upgrade it asked for, if it did.
    fn take_upgrade(&mut self) -> Option<ClientSide> {
        None
    }
}

impl Transport for Bare {
    /// The head is in `out`, its Host set for the upstream.
    type Ready = ();

    fn to(&mut self, inner: &Inner, i: usize) -> Result<(), Refused> {
        // The client's Host stays; an upstream's own is the next one's.
        if !(self.client_host && inner.keep_host) {
            self.out.set_host(inner.upstreams[i].host.as_ref());
        }
        let Some(pool) = inner.h1_pools().and_then(|p| p.get(i).cloned().flatten()) else {
            return Err(Refused(StatusCode::BAD_GATEWAY, "bad gateway\n"));
        };
        self.conn = pool.checkout_h1();
        self.pool = pool;
        Ok(())
    }

    async fn exchange(
        &mut self,
        inner: &Inner,
        i: usize,
        (): (),
        asked: std::time::Instant,
    ) -> Result<(Response<UpstreamRes>, Option<pool::Lent>), ProxyError> {
        // As `tokio::time::timeout` does, a deadline past what an Instant holds is far.
        let deadline = tokio::time::Instant::from_std(asked)
            .checked_add(inner.response_timeout)
            .unwrap_or_else(|| tokio::time::Instant::now() + FAR);
        let up = &inner.upstreams[i];
        let sent = h1::send(
            &self.pool,
            &up.authority,
            self.conn.take(),
            &mut self.out,
            deadline,
        )
        .await;
        match sent {
            Ok(Ok(res)) => Ok((res.map(UpstreamRes::H1), None)),
            // Nothing of the request's is the client's: every failure is the upstream's.
            Ok(Err(e)) => Err(ProxyError::of(e, Blame::Upstream)),
            Err(_) => Err(ProxyError::timed_out(Blame::Upstream)),
        }
    }
}

/// A request over hyper's client: its head kept for another attempt when one may happen,
/// its body watched to tell whose fault a failure was.
pub(super) struct ViaHyper {
    spare: Option<http::request::Parts>,
    path: PathAndQuery,
    body: Option<ReqBody>,
    progress: Option<Arc<Progress>>,
    client_upgrade: Option<ClientSide>,
    client_host: Option<HeaderValue>,
    may_retry: bool,
}

impl Transport for ViaHyper {
    type Ready = Request<ReqBody>;

    fn to(&mut self, inner: &Inner, i: usize) -> Result<Request<ReqBody>, Refused> {
        let up = &inner.upstreams[i];
        let next = if self.may_retry {
            self.spare.clone()
        } else {
            self.spare.take()
        };
        let Some(mut p) = next else {
            return Err(Refused(StatusCode::BAD_GATEWAY, "bad gateway\n"));
        };
        // RFC 9112 §3.2.1: to an origin server, the target in origin form; hyper-util's
        // client wants the absolute form, to pick its connection by.
        p.uri = match inner.pool(i) {
            Some(_) => Uri::from(self.path.clone()),
            None => Uri::builder()
                .scheme(up.scheme.clone())
                .authority(up.authority.clone())
                .path_and_query(self.path.clone())
                .build()
                .map_err(|_| Refused(StatusCode::BAD_REQUEST, "bad request\n"))?,
        };
        p.version = if inner.http2 {
            http::Version::HTTP_2
        } else {
            http::Version::HTTP_11
        };
        if let Some(h) = inner.host_for(self.client_host.as_ref(), up) {
            p.headers.insert(HOST, h.clone());
        }
        // A second attempt happens only for a request with no body (`may_retry`).
        let b = self.body.take().unwrap_or(ReqBody::Empty);
        Ok(Request::from_parts(p, b))
    }

    async fn exchange(
        &mut self,
        inner: &Inner,
        i: usize,
        req: Request<ReqBody>,
        _asked: std::time::Instant,
    ) -> Result<(Response<UpstreamRes>, Option<pool::Lent>), ProxyError> {
        let up = &inner.upstreams[i];
        let pool = inner.pool(i);
        let head_request = req.method() == http::Method::HEAD;
        let exchange = async {
            match pool {
                // Boxed: rarer, and it would make every request's future larger.
                Some(pool) => Box::pin(pool::send(pool, &up.authority, req))
                    .await
                    .map(|(res, lent)| (res.map(UpstreamRes::Hyper), Some(lent))),
                None => match inner.client().request(req).await {
                    Ok(res) => Ok((res.map(UpstreamRes::Hyper), None)),
                    Err(e) => Err(pool::SendError::Client(e)),
                },
            }
        };
        let progress = self.progress.as_deref();
        match inner.within_response_timeout(exchange, progress).await {
            // As the own client refuses it ([`h1`]): the coding would go with the field.
            Ok(Ok((res, _))) if !head_request && headers::codings_besides_chunked(&res) => {
                let e = std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "a transfer coding other than chunked",
                );
                Err(ProxyError::of(pool::SendError::Io(e), Blame::Upstream))
            }
            Ok(Ok(res)) => Ok(res),
            Ok(Err(e)) => Err(ProxyError::of(e, Blame::of(progress, false))),
            Err(_) => Err(ProxyError::timed_out(Blame::of(progress, true))),
        }
    }

    fn take_upgrade(&mut self) -> Option<ClientSide> {
        self.client_upgrade.take()
    }
}

/// A deadline that never comes: about 30 years, as tokio's own.
pub(super) const FAR: Duration = Duration::from_secs(86400 * 365 * 30);

/// A bodiless request on its way over [`h1`]: its head encoded, the upstream's pool, and
/// an idle connection out of it, if there was one.
pub(super) struct Bare {
    pub(super) out: h1::Outgoing,
    pub(super) conn: Option<h1::Conn>,
    pub(super) pool: Arc<pool::Pool>,
    /// The client sent a Host (kept unless the route sends the upstream's).
    pub(super) client_host: bool,
}

/// A [`Bare`] exchange as [`Inner::start_bare`] leaves it: its first upstream picked.
pub(super) struct BareStart {
    pub(super) bare: Bare,
    pub(super) first: usize,
    /// The first upstream's in-flight count, under least_requests.
    pub(super) guard: Option<InFlight>,
    pub(super) key: Option<u64>,
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
