use super::body::{CacheBody, Fill};
use super::future::ResponseFuture;
use super::key;
use super::layer::Settings;
use super::policy::{self, CacheControl, Exchange, StoreOptions, Use};
use super::store::{Entry, Joined, Key, KeyRef};
use crate::upstream::{CacheStatus, CacheStatusWanted, StoredVersion, StoredVersionWanted};
use bytes::{Bytes, BytesMut};
use http::header::{
    AGE, AUTHORIZATION, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_LOCATION, CONTENT_RANGE, COOKIE,
    DATE, ETAG, HOST, IF_MATCH, IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_RANGE, IF_UNMODIFIED_SINCE,
    LAST_MODIFIED, LOCATION, RANGE, TRANSFER_ENCODING,
};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};
use tower_service::Service;

/// A shared HTTP cache (RFC 9111) in front of `S`. See the [module docs](super).
#[derive(Clone, Debug)]
pub struct Cache<S> {
    pub(crate) inner: S,
    pub(crate) settings: Arc<Settings>,
}

impl<S> Cache<S> {
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The store, for purging and the metrics.
    pub fn store(&self) -> &super::ResponseStore {
        &self.settings.store
    }
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// What layers above asked the cache to put in a response's extensions: the
/// [`StoredVersion`] of what it serves from the store (the compression layer) and the
/// [`CacheStatus`] (the access log). Each is put only when asked: the first extension of a
/// response allocates its map, which was a tenth of a hit's user-space instructions
/// (callgrind, cache-1k: 2k of 18.9k per request).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Wants {
    version: bool,
    status: bool,
}

fn wants<B>(req: &Request<B>) -> Wants {
    let x = req.extensions();
    Wants {
        version: x.get::<StoredVersionWanted>().is_some(),
        status: x.get::<CacheStatusWanted>().is_some(),
    }
}

/// Says what the cache did: in the response's extensions when a layer above asked (the
/// access log's `$cache_status`), and with `header` in a `Cache-Status` field (RFC 9211
/// §2) whose cache is named `gatehouse`.
pub(crate) fn mark<B>(
    res: &mut Response<B>,
    status: CacheStatus,
    header: bool,
    wants: Wants,
    detail: &str,
) {
    if wants.status {
        res.extensions_mut().insert(status);
    }
    if header {
        if let Ok(v) = HeaderValue::from_str(&format!("gatehouse; {detail}")) {
            res.headers_mut()
                .append(http::HeaderName::from_static("cache-status"), v);
        }
    }
}

/// Which of the fields a lookup reads the request has, found in one pass over its fields.
/// A lookup by name hashes the name and probes the table: six of them on every hit cost
/// about 800 instructions, where this pass over a request of a few fields costs about 100
/// (callgrind, cache-1k).
#[derive(Default)]
struct Asked<'a> {
    host: Option<&'a HeaderValue>,
    authorization: bool,
    cookie: bool,
    cache_control: bool,
}

impl<'a> Asked<'a> {
    fn scan(fields: &'a HeaderMap) -> Asked<'a> {
        let mut a = Asked::default();
        for (name, value) in fields {
            if *name == HOST {
                a.host = a.host.or(Some(value));
            } else if *name == AUTHORIZATION {
                a.authorization = true;
            } else if *name == COOKIE {
                a.cookie = true;
            } else if *name == CACHE_CONTROL {
                a.cache_control = true;
            }
        }
        a
    }
}

/// Whether a request has a field that can make the answer from a stored response other
/// than the whole of it: a condition (RFC 9110 §13.1) or a range (§14.2). `If-Range`
/// matters only with `Range`. One pass, as [`Asked`] is.
fn asks_conditionally(fields: &HeaderMap) -> bool {
    fields
        .keys()
        .any(|n| *n == IF_NONE_MATCH || *n == IF_MODIFIED_SINCE || *n == RANGE)
}

/// RFC 9111 §4.4: the methods whose success invalidates stored responses.
fn is_unsafe(m: &Method) -> bool {
    !matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    )
}

/// RFC 5861 §4: the statuses `stale-if-error` stands in for.
fn is_error(s: StatusCode) -> bool {
    matches!(s.as_u16(), 500 | 502 | 503 | 504)
}

impl<S, ReqB, B> Service<Request<ReqB>> for Cache<S>
where
    S: Service<Request<ReqB>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqB: http_body::Body + Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
{
    type Response = Response<CacheBody<B>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, B, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let s = &self.settings;
        let stats = s.store.stats();
        let method = req.method();
        let head = method == Method::HEAD;
        let asked = Asked::scan(req.headers());
        // A GET with a body (a search's query, GraphQL over GET) goes upstream with it: its
        // answer is about that body, which no key holds.
        if method != Method::GET && !head
            || !(req.body().is_end_stream() || req.body().size_hint().exact() == Some(0))
            || (asked.authorization && !s.store_authorized)
            || (asked.cookie && key::cookies_ambiguous(req.headers(), &s.parts.cookies))
        {
            bump(&stats.bypassed);
            if is_unsafe(method) {
                let inner = take(&mut self.inner);
                return ResponseFuture::boxed(Box::pin(invalidating(inner, req, s.clone())));
            }
            let wants = wants(&req);
            return ResponseFuture::pass(self.inner.call(req), s.cache_status, wants);
        }
        let req_cc = if s.ignore_request_cache_control || !asked.cache_control {
            CacheControl::default()
        } else {
            CacheControl::parse(req.headers())
        };
        let primary = key::Primary::of(&req, asked.host, &s.parts);
        let selecting = selecting_for(s, &primary, req.headers());
        let secondary = key::secondary_of(&selecting);
        let found = s.store.get_ref(&KeyRef {
            primary: &primary,
            secondary,
            selecting: &selecting,
        });
        if let Some(e) = found {
            // A fresh hit, the common case, answers without making an owned key.
            let (age, usable) = usable_now(s, &e, &req_cc);
            if usable == Use::Serve {
                return ResponseFuture::ready(hit(s, &e, &req, age));
            }
            let key = Key {
                primary: Arc::from(&*primary.text()),
                secondary,
            };
            return with_entry(&mut self.inner, s, req, key, req_cc, e);
        }
        let key = Key {
            primary: Arc::from(&*primary.text()),
            secondary,
        };
        if s.store.on_disk(&key) {
            let mut inner = take(&mut self.inner);
            let s = s.clone();
            return ResponseFuture::boxed(Box::pin(async move {
                match read_back(&s, &key, &selecting).await {
                    Some(e) => with_entry(&mut inner, &s, req, key, req_cc, e).await,
                    None if req_cc.only_if_cached => Ok(not_cached(&s, wants(&req))),
                    None => miss(inner, req, s.clone(), key, req_cc, None).await,
                }
            }));
        }
        if req_cc.only_if_cached {
            return ResponseFuture::ready(not_cached(s, wants(&req)));
        }
        let inner = take(&mut self.inner);
        ResponseFuture::boxed(Box::pin(miss(inner, req, s.clone(), key, req_cc, None)))
    }
}

/// `key`'s entry from the disk tier: one read per key, the other requests for it waiting
/// for that read (after a restart, a popular URL's first requests all find it on disk),
/// then finding it in memory; a waiter left without it joins once more, then goes
/// upstream.
async fn read_back(s: &Settings, key: &Key, selecting: &[u8]) -> Option<Arc<Entry>> {
    // A read is bounded as a wait for another request's fetch is.
    let limit = if s.lock_timeout.is_zero() {
        Duration::from_secs(5)
    } else {
        s.lock_timeout
    };
    if !s.lock {
        return s.store.load(key, selecting, s.heuristic_max, limit).await;
    }
    // A waiter whose leader gave up (its client went, or the read outlasted the lock's
    // timeout) joins again rather than reading too: each read holds a whole copy of the
    // entry, and a thousand waiters after a restart on a slow disk each read one (found
    // in review). After a second wait it goes upstream, as a miss.
    for _ in 0..2 {
        match s.store.join(key) {
            Joined::Lead(_flight) => {
                return s.store.load(key, selecting, s.heuristic_max, limit).await
            }
            Joined::Wait(rx) => {
                wait(s, rx).await;
                if let Some(e) = s.store.get(key, selecting) {
                    return Some(e);
                }
            }
        }
    }
    None
}

/// The entry's age now, and what it may do for a request with `req_cc` under the route's
/// stale windows.
fn usable_now(s: &Settings, e: &Entry, req_cc: &CacheControl) -> (Duration, Use) {
    let age = e.age(SystemTime::now());
    let usable = policy::usable(
        age,
        e.lifetime,
        req_cc,
        &e.cc,
        s.stale_while_revalidate,
        s.stale_if_error,
    );
    (age, usable)
}

/// What a stored entry does for a request (RFC 9111 §4, RFC 5861): answers it, answers it
/// stale while a refresh runs, or goes upstream to revalidate it.
fn with_entry<S, ReqB, B>(
    inner: &mut S,
    s: &Arc<Settings>,
    req: Request<ReqB>,
    key: Key,
    req_cc: CacheControl,
    e: Arc<Entry>,
) -> ResponseFuture<S::Future, B, S::Error>
where
    S: Service<Request<ReqB>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqB: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
{
    let stats = s.store.stats();
    let head = req.method() == Method::HEAD;
    let (age, usable) = usable_now(s, &e, &req_cc);
    match usable {
        Use::Serve => ResponseFuture::ready(hit(s, &e, &req, age)),
        Use::OnlyIfCached => ResponseFuture::ready(not_cached(s, wants(&req))),
        Use::Revalidate {
            while_revalidate: true,
            ..
        } => {
            bump(&stats.stale);
            let res = respond(
                s,
                &e,
                head,
                req.headers(),
                age,
                CacheStatus::Stale,
                wants(&req),
            );
            if let (Ok(rt), false) = (tokio::runtime::Handle::try_current(), head) {
                if let Joined::Lead(flight) = s.store.join(&key) {
                    rt.spawn(refresh(inner.clone(), req, s.clone(), key, e, flight));
                }
            }
            ResponseFuture::ready(res)
        }
        Use::Revalidate { if_error, .. } => {
            let inner = take(inner);
            let stale = Some((e, if_error));
            ResponseFuture::boxed(Box::pin(miss(inner, req, s.clone(), key, req_cc, stale)))
        }
    }
}

/// The Service made ready, for a future that outlives this call; a clone stays.
fn take<S: Clone>(inner: &mut S) -> S {
    let clone = inner.clone();
    std::mem::replace(inner, clone)
}

/// The request's values of the fields its URL's stored `Vary` names ([`key::selecting`]);
/// empty when no response of the URL had one.
fn selecting_for(s: &Settings, primary: &key::Primary<'_>, headers: &HeaderMap) -> Vec<u8> {
    match s.store.vary_names(primary) {
        Some(names) => key::selecting(headers, &names),
        None => Vec::new(),
    }
}

/// The request's key, and its [`key::selecting`] bytes.
fn lookup_key<B>(s: &Settings, req: &Request<B>) -> (Key, Vec<u8>) {
    let primary = key::Primary::of(req, req.headers().get(HOST), &s.parts);
    let selecting = selecting_for(s, &primary, req.headers());
    let key = Key {
        primary: Arc::from(&*primary.text()),
        secondary: key::secondary_of(&selecting),
    };
    (key, selecting)
}

/// §5.2.1.7: `only-if-cached` with nothing usable stored. Counted as the miss its status
/// says it is.
fn not_cached<B>(s: &Settings, wants: Wants) -> Response<CacheBody<B>> {
    bump(&s.store.stats().misses);
    let mut res = Response::new(CacheBody::empty());
    *res.status_mut() = StatusCode::GATEWAY_TIMEOUT;
    mark(
        &mut res,
        CacheStatus::Miss,
        s.cache_status,
        wants,
        "fwd=miss; detail=only-if-cached",
    );
    res
}

async fn ready_call<S, R>(svc: &mut S, req: R) -> Result<S::Response, S::Error>
where
    S: Service<R>,
{
    std::future::poll_fn(|cx| svc.poll_ready(cx)).await?;
    svc.call(req).await
}

/// A miss, or a stale entry that must be revalidated before use: one GET per key goes
/// upstream while the others wait for its response (nginx's `proxy_cache_lock`), up to the
/// lock timeout, so that a popular entry going stale sends one request upstream, not one
/// per client.
async fn miss<S, ReqB, B>(
    inner: S,
    req: Request<ReqB>,
    s: Arc<Settings>,
    key: Key,
    req_cc: CacheControl,
    stale: Option<(Arc<Entry>, bool)>,
) -> Result<Response<CacheBody<B>>, S::Error>
where
    S: Service<Request<ReqB>, Response = Response<B>>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
{
    // For a stale entry, worth waiting only if it would serve this request once
    // confirmed, at the age a waiter finds it (just over zero): not one that must be
    // revalidated every time (no-cache, max-age=0), nor a request asking its own
    // revalidation (no-cache, max-age=0).
    let worth_waiting = stale.as_ref().is_none_or(|(e, _)| {
        let (age, zero) = (Duration::from_millis(1), Duration::ZERO);
        policy::usable(age, e.lifetime, &req_cc, &e.cc, zero, zero) == Use::Serve
    });
    let mut flight = None;
    let validating = stale.as_ref().is_some_and(|(e, _)| has_validator(e));
    let get = req.method() == Method::GET && !req_cc.no_store;
    if s.lock && get && shaped_alone(req.headers(), &s, validating) {
        // Its answer (a 206, a 412) would not be stored: leading, it would end the flight
        // with nothing for the others, who would then all go upstream at once. It may
        // still wait for another's fetch and be answered from what that stored.
        if let Some(rx) = s.store.in_flight(&key).filter(|_| worth_waiting) {
            wait(&s, rx).await;
            if let Some(res) = stored_for(&s, &req, &req_cc) {
                return Ok(res);
            }
        }
    } else if s.lock && worth_waiting && get {
        match s.store.join(&key) {
            Joined::Lead(f) => flight = Some(f),
            Joined::Wait(rx) => {
                wait(&s, rx).await;
                if let Some(res) = stored_for(&s, &req, &req_cc) {
                    return Ok(res);
                }
            }
        }
    }
    fetch(inner, req, s, key, req_cc, stale, flight).await
}

/// Waits for another request's fetch of the key, up to the lock timeout; then
/// [`stored_for`] tells whether it stored what this request may use, or it goes itself.
async fn wait(s: &Settings, mut rx: tokio::sync::watch::Receiver<()>) {
    bump(&s.store.stats().coalesced);
    let _ = tokio::time::timeout(s.lock_timeout, rx.changed()).await;
}

/// What the fetch a request waited for stored, if it is fresh enough for the request.
fn stored_for<ReqB, B>(
    s: &Settings,
    req: &Request<ReqB>,
    req_cc: &CacheControl,
) -> Option<Response<CacheBody<B>>> {
    // The response may have had a Vary: the key is looked up anew.
    let (key, selecting) = lookup_key(s, req);
    let e = s.store.get(&key, &selecting)?;
    let age = e.age(SystemTime::now());
    let ok = policy::usable(
        age,
        e.lifetime,
        req_cc,
        &e.cc,
        Duration::ZERO,
        Duration::ZERO,
    );
    if ok != Use::Serve {
        return None;
    }
    Some(hit(s, &e, req, age))
}

/// A stored response that may answer the request as it is, counted as a hit.
fn hit<ReqB, B>(
    s: &Settings,
    e: &Entry,
    req: &Request<ReqB>,
    age: Duration,
) -> Response<CacheBody<B>> {
    s.store.stats().hits.add(1);
    let head = req.method() == Method::HEAD;
    respond(s, e, head, req.headers(), age, CacheStatus::Hit, wants(req))
}

/// The validators of a stored response, as the request's conditions (§4.3.1), in place
/// of the client's own: the client's are evaluated against whatever comes back.
fn add_conditions<B>(req: &mut Request<B>, e: &Entry) {
    let h = req.headers_mut();
    for n in [
        IF_NONE_MATCH,
        IF_MODIFIED_SINCE,
        IF_MATCH,
        IF_UNMODIFIED_SINCE,
        IF_RANGE,
        RANGE,
    ] {
        h.remove(n);
    }
    if let Some(etag) = e.headers.get(ETAG) {
        h.insert(IF_NONE_MATCH, etag.clone());
    }
    if let Some(lm) = e.headers.get(LAST_MODIFIED) {
        h.insert(IF_MODIFIED_SINCE, lm.clone());
    }
}

/// `If-Match` or `If-Unmodified-Since`: passed on as sent (RFC 9111 §4.3.2 leaves them to
/// the origin), so the answer is about this client's copy (a 412, RFC 9110 §15.5.13).
fn has_preconditions(fields: &HeaderMap) -> bool {
    fields.contains_key(IF_MATCH) || fields.contains_key(IF_UNMODIFIED_SINCE)
}

/// Whether a miss for a request with `fields` goes upstream in a shape whose answer is
/// this request's alone, never stored unless it is a whole 200: a range passed on as it
/// is, or preconditions when not revalidating.
fn shaped_alone(fields: &HeaderMap, s: &Settings, validating: bool) -> bool {
    let range = fields
        .get(RANGE)
        .is_some_and(|r| !validating && !worth_widening(r, s.max_object_bytes));
    range || (!validating && has_preconditions(fields))
}

fn has_validator(e: &Entry) -> bool {
    e.headers.contains_key(ETAG) || e.headers.contains_key(LAST_MODIFIED)
}

/// Goes upstream for `req`: a plain miss, or, with `stale`, the revalidation of a stored
/// response (and whether it may stand in for an error, RFC 5861 §4).
async fn fetch<S, ReqB, B>(
    mut inner: S,
    mut req: Request<ReqB>,
    s: Arc<Settings>,
    key: Key,
    req_cc: CacheControl,
    stale: Option<(Arc<Entry>, bool)>,
    flight: Option<super::store::Flight>,
) -> Result<Response<CacheBody<B>>, S::Error>
where
    S: Service<Request<ReqB>, Response = Response<B>>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
{
    let stats = s.store.stats();
    let head = req.method() == Method::HEAD;
    let wants = wants(&req);
    let asked = req.headers().clone();
    let validating = stale.as_ref().is_some_and(|(e, _)| has_validator(e));
    // As nginx's proxy_cache does, a range is not passed on: the whole is fetched to be
    // stored, and the range is cut from it as it passes (RFC 9111 §3.4 leaves partial
    // content unstored; RFC 9110 §14.2 lets the range be served from the whole). Not for
    // a range starting past what could be stored: that response would not be.
    let mut widened = !head
        && asked
            .get(RANGE)
            .is_some_and(|r| worth_widening(r, s.max_object_bytes));
    if widened {
        req.headers_mut().remove(RANGE);
        req.headers_mut().remove(IF_RANGE);
    }
    // The client's own validators are not passed on either, as nginx's proxy_cache does:
    // a 304 from the origin could not be stored, so a client revalidating its copy would
    // go around an empty cache for as long as it kept one. The whole is fetched to be
    // stored, and the conditions are evaluated against it as against a stored response
    // (RFC 9111 §4.3.2). Not for a request that forbids storing what comes back, nor
    // with a range passed on, whose answer is stored only if it is the whole anyway.
    let validators = asked.contains_key(IF_NONE_MATCH) || asked.contains_key(IF_MODIFIED_SINCE);
    let own_conditions = !head
        && !req_cc.no_store
        && validators
        && (widened || validating || !asked.contains_key(RANGE));
    if own_conditions {
        req.headers_mut().remove(IF_NONE_MATCH);
        req.headers_mut().remove(IF_MODIFIED_SINCE);
    }
    // Whether the client's own validators were left behind, here or by add_conditions:
    // an unstored answer then goes out whole, its conditions unanswered.
    let stripped = (own_conditions || validating) && validators;
    if let (Some((e, _)), true) = (&stale, validating) {
        // Removes `Range` too: a 200 to the revalidation is cut as above.
        add_conditions(&mut req, e);
        widened |= !head && asked.contains_key(RANGE);
    }
    let request_time = SystemTime::now();
    let result = ready_call(&mut inner, req).await;
    let exchange = Exchange {
        request_time,
        response_time: SystemTime::now(),
    };
    let res = match (result, &stale) {
        (Ok(res), _) => res,
        (Err(_), Some((e, true))) => {
            let why = "error";
            return Ok(stale_for_error(&s, e, head, &asked, why, wants));
        }
        (Err(err), _) => return Err(err),
    };
    let status = res.status();
    if let Some((e, if_error)) = &stale {
        if status == StatusCode::NOT_MODIFIED && validating {
            let updated = e.updated(res.headers(), exchange, s.heuristic_max);
            let updated = store_updated(&s, key, &asked, &req_cc, updated);
            bump(&stats.revalidated);
            let age = updated.age(SystemTime::now());
            let status = CacheStatus::Revalidated;
            let mut out = respond(&s, &updated, head, &asked, age, status, wants);
            // The 304's cookies are this client's: sent to it, never stored.
            for c in res.headers().get_all(http::header::SET_COOKIE) {
                out.headers_mut()
                    .append(http::header::SET_COOKIE, c.clone());
            }
            return Ok(out);
        }
        if *if_error && is_error(status) {
            let why = status.as_str();
            return Ok(stale_for_error(&s, e, head, &asked, why, wants));
        }
    }
    bump(&stats.misses);
    // What went upstream as the client sent it and shapes an answer for that client alone:
    // a range (a 206 or 416 for it), `If-Match` or `If-Unmodified-Since` (a 412 about its
    // own copy, RFC 9110 §15.5.13; RFC 9111 §4.3.2 leaves them to the origin). A later
    // request for the URL must not get such an answer: only a whole 200 is stored. For a
    // GET, a range not widened is the one `shaped_alone` names; a HEAD is never stored.
    let shaped = shaped_alone(&asked, &s, validating);
    let fill = if head || (shaped && status != StatusCode::OK) {
        None
    } else {
        fill_for(&s, &key, &asked, &req_cc, &res, exchange, flight)
    };
    let stored = fill.is_some();
    let mut res = res;
    if let Some(v) = fill.as_ref().and_then(|f| f.version.clone()) {
        res.extensions_mut().insert(v);
    }
    let mut res = res.map(|b| CacheBody::filling(b, fill));
    // §13.2.2: the conditions before the range. Only for a response being stored, as
    // nginx does: one that is not would be read for nothing, and its connection closed
    // if it is long, and §4.3.2's rules are for a stored response. The 200 goes out.
    if own_conditions
        && stored
        && status == StatusCode::OK
        && not_modified(&asked, res.headers(), exchange.response_time)
    {
        *res.status_mut() = StatusCode::NOT_MODIFIED;
        res.headers_mut().remove(CONTENT_LENGTH);
        res.headers_mut().remove(TRANSFER_ENCODING);
        // No body for the client: the whole is read into the store behind it.
        let body = std::mem::replace(res.body_mut(), CacheBody::empty());
        *res.body_mut() = body.window(0, 0);
    } else if widened && (stored || !stripped) {
        // The range only after the conditions: with them left unanswered, the whole.
        cut_range(&mut res, &asked);
    }
    if s.cache_status {
        let fwd = if stale.is_some() { "stale" } else { "uri-miss" };
        let detail = format!(
            "fwd={fwd}; fwd-status={}{}",
            status.as_u16(),
            if stored { "; stored" } else { "" }
        );
        mark(&mut res, CacheStatus::Miss, true, wants, &detail);
    } else {
        mark(&mut res, CacheStatus::Miss, false, wants, "");
    }
    Ok(res)
}

/// A revalidated entry goes back in only if its merged head may still be stored (a 304
/// can add `private` or `no-store`); otherwise the old one is removed. A request with
/// `no-store` stores nothing (RFC 9111 §5.2.1.5: no part of the response to it): it
/// answers from the merged head, and the stored entry stays as it was, unless the merged
/// head may not be stored at all.
fn store_updated(
    s: &Settings,
    key: Key,
    asked: &HeaderMap,
    req_cc: &CacheControl,
    updated: Entry,
) -> Arc<Entry> {
    let keep_as_it_was = req_cc.no_store;
    let req_cc = match keep_as_it_was {
        true => &CacheControl {
            no_store: false,
            ..req_cc.clone()
        },
        false => req_cc,
    };
    let ok = policy::storable(
        &Method::GET,
        asked,
        req_cc,
        updated.status,
        &updated.headers,
        &updated.cc,
        StoreOptions {
            authorized: s.store_authorized,
            set_cookie: s.store_set_cookie,
        },
    );
    if ok.is_ok() && keep_as_it_was {
        Arc::new(updated)
    } else if ok.is_ok() {
        // A 304 may name other fields in `Vary` (§4.3.4 replaces the stored ones): the
        // entry is filed under this request's values of those, where the old key would
        // leave it where no request looks.
        let vary = key::vary_names(&updated.headers);
        let selecting = key::selecting(asked, &vary);
        let key = Key {
            secondary: key::secondary_of(&selecting),
            ..key
        };
        s.store
            .insert(key, vary, updated.with_selecting(selecting.into()))
    } else {
        s.store.remove(&key);
        updated.version.remove();
        Arc::new(updated)
    }
}

fn stale_for_error<B>(
    s: &Settings,
    e: &Entry,
    head: bool,
    asked: &HeaderMap,
    why: &str,
    wants: Wants,
) -> Response<CacheBody<B>> {
    bump(&s.store.stats().stale);
    let age = e.age(SystemTime::now());
    let mut res = respond(s, e, head, asked, age, CacheStatus::Stale, wants);
    if s.cache_status {
        // respond() marked it a hit: say it stood in for a failed forward.
        res.headers_mut().remove("cache-status");
        mark(
            &mut res,
            CacheStatus::Stale,
            true,
            wants,
            &format!("fwd=stale; detail=stale-if-error-{why}"),
        );
    }
    res
}

/// A stored response's copy-in for `res`, if it may be stored (§3): `None` ends the
/// flight, so that waiting requests go upstream themselves.
fn fill_for<B>(
    s: &Settings,
    key: &Key,
    asked: &HeaderMap,
    req_cc: &CacheControl,
    res: &Response<B>,
    exchange: Exchange,
    flight: Option<super::store::Flight>,
) -> Option<Box<Fill>> {
    let res_cc = CacheControl::parse(res.headers());
    let options = StoreOptions {
        authorized: s.store_authorized,
        set_cookie: s.store_set_cookie,
    };
    policy::storable(
        &Method::GET,
        asked,
        req_cc,
        res.status(),
        res.headers(),
        &res_cc,
        options,
    )
    .ok()?;
    let len = res
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if len.is_some_and(|n| n > s.max_object_bytes) {
        return None;
    }
    // The announced length is reserved at once: its buffer is allocated whole.
    let reserved = len.unwrap_or(0);
    if !s.store.reserve(reserved) {
        return None;
    }
    let vary = key::vary_names(res.headers());
    let selecting = key::selecting(asked, &vary);
    let secondary = key::secondary_of(&selecting);
    // The values still share the upstream connection's read buffer: the entry copies them
    // into one of its own ([`Entry::new`]), not to keep that alive (cache-cold held 4 KiB
    // per 1 KiB entry). Set-Cookie (stored only with store_set_cookie) goes to the client
    // that caused the fetch, never to the others the entry answers.
    let mut headers = HeaderMap::with_capacity(res.headers().len());
    for (n, v) in res.headers() {
        if n != TRANSFER_ENCODING && n != http::header::SET_COOKIE {
            headers.append(n.clone(), v.clone());
        }
    }
    Some(Box::new(Fill {
        store: s.store.clone(),
        key: Key {
            primary: key.primary.clone(),
            secondary,
        },
        vary,
        selecting: selecting.into(),
        status: res.status(),
        headers,
        exchange,
        heuristic_max: s.heuristic_max,
        max: s.max_object_bytes,
        buf: BytesMut::with_capacity(reserved as usize),
        reserved,
        _flight: flight,
        version: Some(StoredVersion::new()),
    }))
}

/// RFC 5861 §3: a stale response was served; this brings the store up to date in the
/// background, with the client's request made conditional.
async fn refresh<S, ReqB, B>(
    mut inner: S,
    mut req: Request<ReqB>,
    s: Arc<Settings>,
    key: Key,
    e: Arc<Entry>,
    flight: super::store::Flight,
) where
    S: Service<Request<ReqB>, Response = Response<B>>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
{
    let asked = req.headers().clone();
    let req_cc = if s.ignore_request_cache_control {
        CacheControl::default()
    } else {
        CacheControl::parse(&asked)
    };
    let validating = has_validator(&e);
    // The client's own conditions and range go too, validators or not: the answer to
    // them (a 304 for its copy, a part) could not be stored.
    add_conditions(&mut req, &e);
    let request_time = SystemTime::now();
    let Ok(res) = ready_call(&mut inner, req).await else {
        return;
    };
    bump(&s.store.stats().refreshed);
    let exchange = Exchange {
        request_time,
        response_time: SystemTime::now(),
    };
    if res.status() == StatusCode::NOT_MODIFIED && validating {
        let updated = e.updated(res.headers(), exchange, s.heuristic_max);
        store_updated(&s, key, &asked, &req_cc, updated);
        return;
    }
    let Some(fill) = fill_for(&s, &key, &asked, &req_cc, &res, exchange, Some(flight)) else {
        return;
    };
    let body = CacheBody::filling(res.into_body(), Some(fill));
    let mut body = std::pin::pin!(body);
    // Read to its end, which stores it; an error drops it.
    while let Some(Ok(_)) =
        std::future::poll_fn(|cx| http_body::Body::poll_frame(body.as_mut(), cx)).await
    {}
}

/// An unsafe method: passed on, and on success the stored responses for its target and
/// for a same-host `Location` or `Content-Location` are removed (§4.4).
async fn invalidating<S, ReqB, B>(
    mut inner: S,
    req: Request<ReqB>,
    s: Arc<Settings>,
) -> Result<Response<CacheBody<B>>, S::Error>
where
    S: Service<Request<ReqB>, Response = Response<B>>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
{
    let wants = wants(&req);
    let head = Request::builder()
        .uri(req.uri().clone())
        .body(())
        .map(|mut r| {
            *r.headers_mut() = req.headers().clone();
            // The connection's scheme, as the entries were filed by.
            if let Some(h) = req.extensions().get::<crate::client::Https>() {
                r.extensions_mut().insert(*h);
            }
            r
        });
    let res = ready_call(&mut inner, req).await?;
    if let (Ok(r), true) = (
        head,
        res.status().is_success() || res.status().is_redirection(),
    ) {
        s.store
            .invalidate_later(&key::primary(&r, r.headers().get(HOST), &s.parts));
        // With fields or cookies in the keys, the URL's entries under other values go too:
        // §4.4 invalidates the URI, not this client's variant of it.
        let keyed = !s.parts.headers.is_empty() || !s.parts.cookies.is_empty();
        let bare = key::KeyParts::default();
        if keyed {
            s.store
                .invalidate_url(&key::primary(&r, r.headers().get(HOST), &bare));
        }
        for name in [LOCATION, CONTENT_LOCATION] {
            if let Some(target) = res.headers().get(name).and_then(|v| same_host(&r, v)) {
                s.store
                    .invalidate_later(&key::primary_for(&r, &target, &s.parts));
                if keyed {
                    s.store
                        .invalidate_url(&key::primary_for(&r, &target, &bare));
                }
            }
        }
    }
    let mut res = res.map(|b| CacheBody::filling(b, None));
    mark(
        &mut res,
        CacheStatus::Bypass,
        s.cache_status,
        wants,
        "fwd=method",
    );
    Ok(res)
}

/// The target a `Location` names, if it is on the request's host: an absolute path, or an
/// absolute URI with the same host (§4.4 invalidates no other origin's responses).
fn same_host<B>(req: &Request<B>, v: &HeaderValue) -> Option<String> {
    let uri: http::Uri = v.to_str().ok()?.parse().ok()?;
    let pq = uri.path_and_query().map(|pq| pq.as_str().to_string());
    match uri.authority() {
        None => pq.filter(|p| p.starts_with('/')),
        Some(a) => {
            let host = req
                .uri()
                .authority()
                .map(|a| a.as_str().to_string())
                .or_else(|| {
                    req.headers()
                        .get(http::header::HOST)
                        .and_then(|h| h.to_str().ok())
                        .map(str::to_string)
                })?;
            a.as_str()
                .eq_ignore_ascii_case(&host)
                .then(|| pq.unwrap_or_else(|| "/".into()))
        }
    }
}

/// A stored response as the answer to a request with `asked`'s fields: 304 for a
/// matching condition (RFC 9110 §13.1.2, §13.1.3), 206 or 416 for one byte range
/// (§14.2), the whole otherwise; no body for HEAD. With `Age` (§5.1).
pub(crate) fn respond<B>(
    s: &Settings,
    e: &Entry,
    head: bool,
    asked: &HeaderMap,
    age: Duration,
    status: CacheStatus,
    wants: Wants,
) -> Response<CacheBody<B>> {
    let mut res = Response::new(CacheBody::empty());
    *res.status_mut() = e.status;
    *res.headers_mut() = e.headers.clone();
    // Stored with every entry ([`Entry::new`]): replaced in place, where an `insert` took
    // 140 instructions a hit (callgrind, cache-1k).
    let age = age_value(age.as_secs());
    match res.headers_mut().get_mut(AGE) {
        Some(v) => *v = age,
        None => {
            res.headers_mut().insert(AGE, age);
        }
    }
    // Only when a layer above asked: a clone on every hit writes a count every core's
    // hits share.
    if wants.version && !e.version.is_removed() {
        res.extensions_mut().insert(e.version.clone());
    }
    let detail = match status {
        CacheStatus::Hit => "hit",
        CacheStatus::Stale => "hit; fwd=stale; detail=stale-while-revalidate",
        CacheStatus::Revalidated => "fwd=stale; fwd-status=304",
        _ => "",
    };
    let mut body = e.body.clone();
    if e.status == StatusCode::OK && asks_conditionally(asked) {
        if not_modified(asked, &e.headers, e.exchange.response_time) {
            *res.status_mut() = StatusCode::NOT_MODIFIED;
            res.headers_mut().remove(CONTENT_LENGTH);
            mark(&mut res, status, s.cache_status, wants, detail);
            return res;
        }
        if let (Some(range), false) = (asked.get(RANGE), head) {
            if if_range_holds(asked, &e.headers) {
                match byte_range(range, body.len() as u64) {
                    Some(Ok((start, end))) => {
                        *res.status_mut() = StatusCode::PARTIAL_CONTENT;
                        let cr = format!("bytes {start}-{end}/{}", body.len());
                        if let Ok(v) = HeaderValue::from_str(&cr) {
                            res.headers_mut().insert(CONTENT_RANGE, v);
                        }
                        body = body.slice(start as usize..=end as usize);
                    }
                    Some(Err(())) => {
                        *res.status_mut() = StatusCode::RANGE_NOT_SATISFIABLE;
                        let cr = format!("bytes */{}", body.len());
                        if let Ok(v) = HeaderValue::from_str(&cr) {
                            res.headers_mut().insert(CONTENT_RANGE, v);
                        }
                        body = Bytes::new();
                    }
                    None => {}
                }
            }
        }
    }
    // A stored entry's Content-Length is its body's ([`Fill::finish`]).
    if body.len() != e.body.len() || !e.has_length {
        res.headers_mut()
            .insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
    }
    if !head {
        *res.body_mut() = CacheBody::stored(body);
    }
    mark(&mut res, status, s.cache_status, wants, detail);
    res
}

/// The decimal text of every number below [`AGES`], each right-aligned in four bytes.
static AGE_TEXT: [u8; 4 * AGES] = age_text();
const AGES: usize = 10_000;

const fn age_text() -> [u8; 4 * AGES] {
    let mut t = [b'0'; 4 * AGES];
    let mut n = 0;
    while n < AGES {
        let mut d = 0;
        let mut rest = n;
        while d < 4 {
            t[4 * n + 3 - d] = b'0' + (rest % 10) as u8;
            rest /= 10;
            d += 1;
        }
        n += 1;
    }
    t
}

/// `Age`'s value (RFC 9111 §5.1): for the first [`AGES`] seconds, a slice of a static
/// table, where formatting the number allocated on every hit (callgrind, cache-1k: about
/// 200 of 17k instructions a request).
fn age_value(secs: u64) -> HeaderValue {
    if let Ok(n) = usize::try_from(secs) {
        if n < AGES {
            let digits = match n {
                0..=9 => 1,
                10..=99 => 2,
                100..=999 => 3,
                _ => 4,
            };
            let text: &'static [u8] = &AGE_TEXT[4 * n + 4 - digits..4 * n + 4];
            if let Ok(v) = HeaderValue::from_maybe_shared(Bytes::from_static(text)) {
                return v;
            }
        }
    }
    HeaderValue::from(secs)
}

/// RFC 9110 §13.1.2 and §13.1.3, for GET and HEAD: `If-None-Match` (weak comparison)
/// when present, else `If-Modified-Since` against `Last-Modified`, or, for a stored
/// response without one, its `Date` or the time it was received (RFC 9111 §4.3.2).
fn not_modified(asked: &HeaderMap, stored: &HeaderMap, received: SystemTime) -> bool {
    if asked.contains_key(IF_NONE_MATCH) {
        let mut tags = asked
            .get_all(IF_NONE_MATCH)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim);
        // `*` matches any current representation, with an ETag or without (§13.1.2).
        let Some(etag) = stored.get(ETAG).and_then(|v| v.to_str().ok()) else {
            return tags.any(|t| t == "*");
        };
        let weak = |t: &str| t.trim().trim_start_matches("W/").to_string();
        let etag = weak(etag);
        return tags.any(|t| t == "*" || weak(t) == etag);
    }
    let date = |h: &HeaderMap, n| {
        h.get(n)
            .and_then(|v: &HeaderValue| v.to_str().ok())
            .and_then(|v| httpdate::parse_http_date(v).ok())
    };
    let Some(since) = date(asked, IF_MODIFIED_SINCE) else {
        return false;
    };
    let modified = date(stored, LAST_MODIFIED)
        .or_else(|| date(stored, DATE))
        .unwrap_or(received);
    modified <= since
}

/// Whether a miss asking for `range` should fetch the whole instead: only for one range
/// from an offset (`bytes=100-`, `bytes=0-99`) within `max_object_bytes`. Past it, the
/// whole could not be stored; and the bytes skipped before the range, read for nothing if
/// the response turns out not storable, stay within that bound. A range from the end
/// (`-500`) is not: the object may be any size (the end of a large archive).
fn worth_widening(range: &HeaderValue, max_object_bytes: u64) -> bool {
    let from_end = range
        .to_str()
        .ok()
        .and_then(|r| r.split_once('='))
        .is_none_or(|(_, spec)| spec.trim_start().starts_with('-'));
    match byte_range(range, u64::MAX) {
        Some(Ok((first, _))) => first <= max_object_bytes && !from_end,
        _ => false,
    }
}

/// A whole 200 fetched for a request with `Range` (`asked`), made the 206 or 416 that
/// request gets, its body cut to the range as it passes; unchanged when the range doesn't
/// apply (`If-Range` fails, or no length is announced), so the whole is sent, as RFC 9110
/// §14.2 allows.
fn cut_range<B: http_body::Body<Data = Bytes> + Send + 'static>(
    res: &mut Response<CacheBody<B>>,
    asked: &HeaderMap,
) {
    let Some(range) = asked.get(RANGE) else {
        return;
    };
    if res.status() != StatusCode::OK || !if_range_holds(asked, res.headers()) {
        return;
    }
    let announced = res
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let Some(len) = announced.or_else(|| http_body::Body::size_hint(res.body()).exact()) else {
        return;
    };
    let (status, content_range, first, n) = match byte_range(range, len) {
        Some(Ok((a, b))) => (
            StatusCode::PARTIAL_CONTENT,
            format!("bytes {a}-{b}/{len}"),
            a,
            b - a + 1,
        ),
        Some(Err(())) => (
            StatusCode::RANGE_NOT_SATISFIABLE,
            format!("bytes */{len}"),
            len,
            0,
        ),
        None => return,
    };
    let Ok(v) = HeaderValue::from_str(&content_range) else {
        return;
    };
    *res.status_mut() = status;
    res.headers_mut().insert(CONTENT_RANGE, v);
    res.headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from(n));
    let body = std::mem::replace(res.body_mut(), CacheBody::empty());
    *res.body_mut() = body.window(first, n);
}

/// RFC 9110 §13.1.5: a range is served only if `If-Range` names the stored response by a
/// strong `ETag` or its exact `Last-Modified`.
fn if_range_holds(asked: &HeaderMap, stored: &HeaderMap) -> bool {
    let Some(cond) = asked.get(IF_RANGE) else {
        return true;
    };
    let strong = |v: &HeaderValue| !v.as_bytes().starts_with(b"W/");
    if cond.as_bytes().starts_with(b"\"") || cond.as_bytes().starts_with(b"W/") {
        stored
            .get(ETAG)
            .is_some_and(|e| strong(e) && strong(cond) && e == cond)
    } else {
        // A date is strong only if it is at least a second before the response's Date
        // (§8.8.2.2): else the resource may have changed twice within that second.
        let date = |v: Option<&HeaderValue>| httpdate::parse_http_date(v?.to_str().ok()?).ok();
        let lm = stored.get(LAST_MODIFIED);
        lm == Some(cond)
            && date(lm)
                .zip(date(stored.get(DATE)))
                .is_some_and(|(lm, sent)| lm + Duration::from_secs(1) <= sent)
    }
}

/// One `bytes` range of a body of `len` (RFC 9110 §14.1.2), as first and last offsets:
/// `None` to send the whole (not a single bytes range), `Err` when unsatisfiable.
fn byte_range(v: &HeaderValue, len: u64) -> Option<Result<(u64, u64), ()>> {
    // Range units are case-insensitive (§14.1).
    let (unit, spec) = v.to_str().ok()?.trim().split_once('=')?;
    if !unit.trim_end().eq_ignore_ascii_case("bytes") {
        return None;
    }
    let spec = spec.trim();
    if spec.contains(',') {
        return None;
    }
    let (a, b) = spec.split_once('-')?;
    let (a, b) = (a.trim(), b.trim());
    let num = |t: &str| -> Option<u64> {
        (!t.is_empty() && t.bytes().all(|c| c.is_ascii_digit()))
            .then(|| t.parse().ok())
            .flatten()
    };
    if a.is_empty() {
        let n = num(b)?;
        if n == 0 || len == 0 {
            return Some(Err(()));
        }
        return Some(Ok((len.saturating_sub(n), len - 1)));
    }
    let start = num(a)?;
    let end = if b.is_empty() { u64::MAX } else { num(b)? };
    if end < start {
        return None;
    }
    if start >= len {
        return Some(Err(()));
    }
    Some(Ok((start, end.min(len - 1))))
}

#[cfg(test)]
mod tests {
    use super::{age_value, asks_conditionally, byte_range, not_modified, Asked};
    use http::{HeaderMap, HeaderValue};
    use std::time::{Duration, SystemTime};

    #[test]
    fn if_modified_since_falls_back_to_date_then_to_the_time_received() {
        let t = |secs: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        let map = |pairs: &[(&'static str, SystemTime)]| {
            let mut m = HeaderMap::new();
            for (n, v) in pairs {
                m.insert(*n, httpdate::fmt_http_date(*v).parse().unwrap());
            }
            m
        };
        let asked = map(&[("if-modified-since", t(2_000_000))]);
        let received = t(3_000_000);
        let lm = map(&[("last-modified", t(1_000_000)), ("date", t(3_000_000))]);
        assert!(not_modified(&asked, &lm, received));
        assert!(not_modified(
            &asked,
            &map(&[("date", t(1_500_000))]),
            received
        ));
        assert!(!not_modified(
            &asked,
            &map(&[("date", t(2_500_000))]),
            received
        ));
        assert!(!not_modified(&asked, &HeaderMap::new(), received));
        assert!(not_modified(&asked, &HeaderMap::new(), t(1_000_000)));
        // If-None-Match, when present, decides alone (RFC 9110 §13.1.3).
        let mut both = asked.clone();
        both.insert("if-none-match", "\"x\"".parse().unwrap());
        assert!(!not_modified(&both, &lm, received));
    }

    #[test]
    fn byte_ranges_as_rfc_9110_reads_them() {
        let r = |s: &str, len| byte_range(&HeaderValue::from_str(s).unwrap(), len);
        assert_eq!(r("bytes=0-9", 100), Some(Ok((0, 9))));
        assert_eq!(r("bytes=90-", 100), Some(Ok((90, 99))));
        assert_eq!(r("Bytes=90-", 100), Some(Ok((90, 99))));
        assert_eq!(r("items=90-", 100), None);
        assert_eq!(r("bytes=-10", 100), Some(Ok((90, 99))));
        assert_eq!(r("bytes=-1000", 100), Some(Ok((0, 99))));
        assert_eq!(r("bytes=50-1000", 100), Some(Ok((50, 99))));
        assert_eq!(r("bytes=100-", 100), Some(Err(())));
        assert_eq!(r("bytes=-0", 100), Some(Err(())));
        assert_eq!(r("bytes=0-1,5-6", 100), None);
        assert_eq!(r("bytes=5-1", 100), None);
        assert_eq!(r("items=0-1", 100), None);
        assert_eq!(r("bytes=x-1", 100), None);
    }

    #[test]
    fn age_values_from_the_table_are_the_numbers_formatted() {
        let boundaries = [
            0,
            9,
            10,
            99,
            100,
            999,
            1_000,
            9_999,
            10_000,
            10_001,
            u64::MAX,
        ];
        for n in (0..12_000).chain(boundaries) {
            assert_eq!(age_value(n), HeaderValue::from(n), "{n}");
        }
    }

    #[test]
    fn one_pass_finds_what_lookups_by_name_find() {
        let names = [
            "host",
            "authorization",
            "cookie",
            "cache-control",
            "if-none-match",
            "if-modified-since",
            "range",
            "if-range",
            "accept",
        ];
        // Every subset of the names, each with two values of host, in both orders.
        for set in 0u32..(1 << names.len()) {
            let mut h = HeaderMap::new();
            for (i, n) in names.iter().enumerate().rev() {
                if set & (1 << i) != 0 {
                    h.append(*n, HeaderValue::from_static("a"));
                    h.append(*n, HeaderValue::from(i));
                }
            }
            let a = Asked::scan(&h);
            assert_eq!(a.host, h.get("host"));
            assert_eq!(a.authorization, h.contains_key("authorization"));
            assert_eq!(a.cookie, h.contains_key("cookie"));
            assert_eq!(a.cache_control, h.contains_key("cache-control"));
            let conditional = ["if-none-match", "if-modified-since", "range"]
                .iter()
                .any(|n| h.contains_key(*n));
            assert_eq!(asks_conditionally(&h), conditional);
        }
    }
}
