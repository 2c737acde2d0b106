//! A route's Service: gatehouse-layers' Layers over the Service the route mounts.
//!
//! ```text
//! Observe                          access log line and metrics, as the body ends
//!  └ RequestId?                    an ID to the request and response (request_id)
//!   └ Headers? (response rules)    on every response below, 403 and 429 included
//!    └ ErrorPages?                 a page for an error status, the status kept
//!    └ Cors?                       preflights answered, CORS fields (tower-http's)
//!     └ IpFilter?                  403 (gatehouse_layers::ip_filter)
//!      └ RateLimit?                429 (gatehouse_layers::rate_limit)
//!       └ Guard                    400 for a target routing refused
//!        └ Redirect?               301/302/303/307/308 (gatehouse_layers::redirect)
//!         └ Rewrite?               the normalised target rewritten (rewrite)
//!          └ RequireAuth?          401/403 (gatehouse_layers::auth)
//!           └ Headers? (request)   what the upstream gets (headers)
//!            └ Endpoint            the prefix taken off, then StaticFiles, Proxy (each
//!                                  maybe under Precompress) or a mounted app
//! ```
//!
//! A `?` layer a route doesn't use is `tower::util::Either`'s other branch: a match, no
//! box, built with `ServiceBuilder::option_layer`. A route with none of the `?` layers
//! has its Endpoint right under `Observe`, and the Endpoint does the Guard's part. A route
//! with only the checks (IP rules, rate limit, auth) has them unboxed ([`Checked`]); one
//! with any of the others has the whole stack with its future boxed ([`Ruled`]), or, when
//! its rules only touch responses and it has no checks, just RequestId, Headers,
//! ErrorPages and Cors over the Endpoint, in the same box.
//! Redirects, rewrites and the request header rules see the normalised target the route
//! was chosen by; the Endpoint puts back the target as received for a proxy that gets it
//! so (unless a rewrite rewrote it).

use super::{strip_prefix, MountedService};
use crate::body::{GateBody, ObservedBody};
use crate::http_util::{add_slash, plain};
use crate::proxy::{ConnInfo, Proxy, ProxyBody, ProxyFuture};
use crate::static_files::{ResponseFuture as StaticFuture, StaticBody, StaticFiles};
use gatehouse_layers::access_log::{AccessLog, LogEnd, Record};
use gatehouse_layers::auth::RequireAuth;
use gatehouse_layers::cache::{self, Cache, CacheBody};
use gatehouse_layers::cors::Cors;
use gatehouse_layers::error_pages::ErrorPages;
use gatehouse_layers::headers::Headers;
use gatehouse_layers::ip_filter::{self, IpFilter};
use gatehouse_layers::metrics::{MetricsEnd, RouteMetrics, Started};
use gatehouse_layers::precompress::{self, DefaultPredicate, Precompress, PrecompressBody};
use gatehouse_layers::rate_limit::{self, RateLimit};
use gatehouse_layers::redirect::Redirect;
use gatehouse_layers::request_id::RequestIdService;
use gatehouse_layers::rewrite::Rewrite;
use gatehouse_layers::upstream::CacheStatusWanted;
use gatehouse_layers::watched::{Both, Watched};
use http::{Request, Response, StatusCode, Uri};
use pin_project_lite::pin_project;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tower::util::future::EitherResponseFuture;
use tower::util::Either;
use tower_service::Service;

pin_project! {
    /// The request body as a route's stack sees it: the client's, with the connection it
    /// came on. The proxy and the access log read the connection here rather than from a
    /// request extension: an extension's insert and drop cost about 760 instructions of a
    /// 12.5k-instruction static hit (callgrind). Routes whose layers read the client from
    /// the extensions (IP rules, rate limit, auth) are given a `ClientAddr` as well.
    pub struct RouteBody<B> {
        #[pin]
        inner: B,
        conn: ConnInfo,
    }
}

impl<B> RouteBody<B> {
    pub(crate) fn new(inner: B, conn: ConnInfo) -> Self {
        RouteBody { inner, conn }
    }

    pub fn conn(&self) -> ConnInfo {
        self.conn
    }
}

impl<B: http_body::Body> http_body::Body for RouteBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        self.project().inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// What routing decided of a target not in normal form, or refused, for the layers below
/// it (a request extension: only such targets pay for one).
#[derive(Clone)]
pub(crate) struct Decided {
    /// The target as received (the request has the normalised one).
    pub(crate) original: Option<Uri>,
    /// Refused with 400 once the IP rules and the rate limit have run.
    pub(crate) refused: bool,
    /// The route's Service gets the target as received: a proxy's.
    pub(crate) as_received: bool,
}

/// Applies what routing decided ([`Decided`]), once, at the route's Service: whether the
/// target is refused; if not, the target as received is put back for a proxy that gets it
/// so, unless a rewrite rewrote the normalised one (which goes on as rewritten). The layers
/// above see the normalised target, which the route was chosen by.
fn refused<B>(req: &mut Request<B>) -> bool {
    if let Some(d) = req.extensions_mut().remove::<Decided>() {
        if d.refused {
            return true;
        }
        let rewritten = || {
            req.extensions()
                .get::<gatehouse_layers::rewrite::Rewritten>()
                .is_some()
        };
        if let (true, Some(o)) = (d.as_received && !rewritten(), d.original) {
            *req.uri_mut() = o;
        }
    }
    false
}

fn bad_request() -> Response<GateBody> {
    plain(StatusCode::BAD_REQUEST, "bad request\n")
}

/// A route's Service: the Service it mounts, behind its prefix. Under no other layer
/// (a route with no IP rules, rate limit or auth), it also plays [`Guard`]'s part.
#[derive(Clone)]
pub(crate) struct Endpoint {
    pub(crate) svc: RouteService,
    /// How many bytes of the path the Service doesn't see (the prefix), or 0.
    pub(crate) strip: usize,
    /// The prefix alone is redirected to itself with a slash (a static route's root
    /// directory), so that relative links in its index resolve.
    pub(crate) slash: bool,
}

/// The Services a route can mount, as a closed set so that calling one needs no box (but
/// for a program's own Service).
#[derive(Clone)]
pub(crate) enum RouteService {
    Static(StaticFiles),
    Compressed(Precompress<StaticFiles>),
    Proxy(RouteProxy),
    ProxyCompressed(Precompress<RouteProxy>),
    /// A proxy behind a response cache (`[routes.cache]`), compressed above it.
    Cached(Cache<RouteProxy>),
    CachedCompressed(Precompress<Cache<RouteProxy>>),
    Mounted(MountedService),
}

/// The proxy as a route's Service: it reads the connection from the [`RouteBody`].
#[derive(Clone)]
pub(crate) struct RouteProxy(pub(crate) Proxy);

impl<B> Service<Request<RouteBody<B>>> for RouteProxy
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<crate::http_util::BoxError>,
{
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = ProxyFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<RouteBody<B>>) -> ProxyFuture {
        let conn = req.body().conn;
        self.0.serve(req, conn)
    }
}

type MountedFuture = tower::util::Oneshot<MountedService, Request<axum::body::Body>>;
pub(crate) type CompressedFuture =
    precompress::ResponseFuture<StaticFuture, StaticBody, DefaultPredicate>;
pub(crate) type ProxyCompressedFuture =
    precompress::ResponseFuture<ProxyFuture, ProxyBody, DefaultPredicate>;
pub(crate) type CachedFuture = cache::ResponseFuture<ProxyFuture, ProxyBody, Infallible>;
pub(crate) type CachedCompressedFuture =
    precompress::ResponseFuture<CachedFuture, CacheBody<ProxyBody>, DefaultPredicate>;

impl<B> Service<Request<RouteBody<B>>> for Endpoint
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<crate::http_util::BoxError>,
{
    type Response = Response<GateBody>;
    type Error = Infallible;
    type Future = EndpointFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<RouteBody<B>>) -> EndpointFuture {
        if refused(&mut req) {
            return EndpointFuture::ready(bad_request());
        }
        if self.slash && req.uri().path().len() == self.strip {
            return EndpointFuture::ready(add_slash(req.uri()));
        }
        if self.strip > 0 {
            strip_prefix(req.uri_mut(), self.strip);
        }
        let kind = match &mut self.svc {
            RouteService::Static(s) => Kind::Static { fut: s.call(req) },
            RouteService::Compressed(s) => Kind::Compressed { fut: s.call(req) },
            RouteService::Proxy(p) => Kind::Proxy { fut: p.call(req) },
            RouteService::ProxyCompressed(p) => Kind::ProxyCompressed { fut: p.call(req) },
            // Boxed: inline, they made every route's future 48 bytes larger (the router
            // test below), for one allocation on cached routes only.
            RouteService::Cached(c) => {
                connection_scheme(&mut req);
                let peer = req.body().conn.peer.map(|p| p.ip());
                c.get_ref().0.drop_untrusted_claims(&mut req, peer);
                Kind::Cached {
                    fut: Box::pin(c.call(req)),
                }
            }
            RouteService::CachedCompressed(c) => {
                connection_scheme(&mut req);
                let peer = req.body().conn.peer.map(|p| p.ip());
                c.get_ref()
                    .get_ref()
                    .0
                    .drop_untrusted_claims(&mut req, peer);
                Kind::CachedCompressed {
                    fut: Box::pin(c.call(req)),
                }
            }
            RouteService::Mounted(s) => {
                // The app reads its client as an app under gatehouse::serve does.
                let conn = req.body().conn;
                conn.insert_into(&mut req);
                // Boxed: the other routes' futures stay as small as they were.
                Kind::Mounted {
                    fut: Box::pin(tower::util::Oneshot::new(
                        s.clone(),
                        req.map(axum::body::Body::new),
                    )),
                }
            }
        };
        EndpointFuture { kind }
    }
}

pin_project! {
    /// The response future of [`Endpoint`].
    pub struct EndpointFuture {
        #[pin]
        kind: Kind,
    }
}

pin_project! {
    #[project = KindProj]
    pub(crate) enum Kind {
        Static { #[pin] fut: StaticFuture },
        Compressed { #[pin] fut: CompressedFuture },
        Proxy { #[pin] fut: ProxyFuture },
        ProxyCompressed { #[pin] fut: ProxyCompressedFuture },
        Cached { fut: Pin<Box<CachedFuture>> },
        CachedCompressed { fut: Pin<Box<CachedCompressedFuture>> },
        Mounted { fut: Pin<Box<MountedFuture>> },
        Ready { res: Option<Response<GateBody>> },
    }
}

impl EndpointFuture {
    fn ready(res: Response<GateBody>) -> Self {
        EndpointFuture {
            kind: Kind::Ready { res: Some(res) },
        }
    }
}

/// The layer's body as the gateway's, with no boxing for the common cases: a variant from
/// memory becomes a plain in-memory body, and an identity file body stays eligible for
/// sendfile.
fn from_precompress<B: Into<GateBody>>(b: PrecompressBody<B>) -> GateBody {
    match b {
        PrecompressBody::Identity { inner } => inner.into(),
        PrecompressBody::Full { data } => GateBody::Full(data),
        PrecompressBody::Encoded { inner } => GateBody::Boxed(axum::body::Body::new(inner)),
    }
}

impl Future for EndpointFuture {
    type Output = Result<Response<GateBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let res = match self.project().kind.project() {
            KindProj::Static { fut } => {
                let Ok(res) = std::task::ready!(fut.poll(cx));
                res.map(GateBody::from)
            }
            KindProj::Compressed { fut } => {
                let Ok(res) = std::task::ready!(fut.poll(cx));
                res.map(from_precompress)
            }
            KindProj::Proxy { fut } => {
                let Ok(res) = std::task::ready!(fut.poll(cx));
                res.map(GateBody::from)
            }
            KindProj::ProxyCompressed { fut } => {
                let Ok(res) = std::task::ready!(fut.poll(cx));
                res.map(from_precompress)
            }
            KindProj::Cached { fut } => {
                let Ok(res) = std::task::ready!(fut.as_mut().poll(cx));
                res.map(GateBody::from)
            }
            KindProj::CachedCompressed { fut } => {
                let Ok(res) = std::task::ready!(fut.as_mut().poll(cx));
                res.map(from_precompress)
            }
            KindProj::Mounted { fut } => {
                match std::task::ready!(crate::http_util::poll_caught(fut.as_mut(), cx)) {
                    Some(Ok(res)) => res.map(GateBody::Boxed),
                    None => crate::http_util::internal_error(),
                }
            }
            KindProj::Ready { res } => res
                .take()
                .unwrap_or_else(|| plain(StatusCode::INTERNAL_SERVER_ERROR, "polled twice\n")),
        };
        Poll::Ready(Ok(res))
    }
}

/// Refuses, with 400, a target routing found ambiguous (see [`super::decide`]), once the
/// IP rules and rate limit above it have run.
#[derive(Clone)]
pub(crate) struct Guard<S> {
    inner: S,
}

/// The layer of [`Guard`].
#[derive(Clone, Copy, Default)]
pub(crate) struct GuardLayer;

impl<S> tower_layer::Layer<S> for GuardLayer {
    type Service = Guard<S>;

    fn layer(&self, inner: S) -> Guard<S> {
        Guard { inner }
    }
}

impl<S, B> Service<Request<B>> for Guard<S>
where
    S: Service<Request<B>, Response = Response<GateBody>, Error = Infallible>,
{
    type Response = Response<GateBody>;
    type Error = Infallible;
    type Future = GuardFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // Only looked at: the Endpoint applies the decision (see [`refused`]).
        if req.extensions().get::<Decided>().is_some_and(|d| d.refused) {
            return GuardFuture::Refused {
                res: Some(bad_request()),
            };
        }
        GuardFuture::Inner {
            fut: self.inner.call(req),
        }
    }
}

pin_project! {
    /// The response future of [`Guard`].
    #[project = GuardProj]
    pub enum GuardFuture<F> {
        Inner { #[pin] fut: F },
        Refused { res: Option<Response<GateBody>> },
    }
}

impl<F> Future for GuardFuture<F>
where
    F: Future<Output = Result<Response<GateBody>, Infallible>>,
{
    type Output = Result<Response<GateBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            GuardProj::Inner { fut } => fut.poll(cx),
            GuardProj::Refused { res } => Poll::Ready(Ok(res
                .take()
                .unwrap_or_else(|| plain(StatusCode::INTERNAL_SERVER_ERROR, "polled twice\n")))),
        }
    }
}

/// The stack of a route with IP rules, a rate limit or auth, each `Either` a layer the
/// route may not use.
pub(crate) type Authed = Either<RequireAuth<Endpoint>, Endpoint>;
pub(crate) type Guarded = Guard<Authed>;
pub(crate) type Limited = Either<RateLimit<Guarded>, Guarded>;
pub(crate) type Checked = Either<IpFilter<Limited>, Limited>;

/// The stack of a route with header rules, redirects, rewrites, error pages, CORS or
/// request IDs (and maybe the checks too), its future boxed: unboxed, it made every
/// route's future 608 bytes rather than 256, and the bare routes paid for moving it (a
/// proxy-1k request took 2–15% more CPU in a same-run A/B). A box costs these routes one
/// allocation.
pub(crate) type Ruled = Boxed<Either<RuledAll, Dressed>>;
type RuledAll = Either<RequestIdService<RuledHeaded>, RuledHeaded>;
type RuledToUpstream = Either<Headers<Endpoint>, Endpoint>;
type RuledAuthed = Either<RequireAuth<RuledToUpstream>, RuledToUpstream>;
type RuledRewritten = Either<Rewrite<RuledAuthed>, RuledAuthed>;
type RuledRedirected = Either<Redirect<RuledRewritten>, RuledRewritten>;
type RuledGuarded = Guard<RuledRedirected>;
type RuledLimited = Either<RateLimit<RuledGuarded>, RuledGuarded>;
type RuledFiltered = Either<IpFilter<RuledLimited>, RuledLimited>;
type RuledShared = Either<Cors<RuledFiltered>, RuledFiltered>;
type RuledPaged = Either<ErrorPages<RuledShared>, RuledShared>;
type RuledHeaded = Either<Headers<RuledPaged>, RuledPaged>;

/// The stack under [`Ruled`]'s box of a route whose rules only touch responses (request
/// IDs, response header rules, error pages, CORS) and which has none of the checks: four
/// levels over the Endpoint, which does the Guard's part, where the whole stack has eleven.
/// With the room left in a file's fields (`open_file_cache/front.rs`), rules-1k took 567
/// instructions a request fewer (20,927 to 20,360, callgrind; the two not measured apart).
type Dressed = Either<RequestIdService<DressedHeaded>, DressedHeaded>;
type DressedShared = Either<Cors<Endpoint>, Endpoint>;
type DressedPaged = Either<ErrorPages<DressedShared>, DressedShared>;
type DressedHeaded = Either<Headers<DressedPaged>, DressedPaged>;

/// A route's whole stack. A route with none of the checks goes straight to its Endpoint:
/// each level of the stack moves the Service's future into its own, and with the six
/// levels a static hit took 2% more instructions than with two (callgrind).
pub(crate) type Stack = Observe<Either<Either<Checked, Ruled>, Endpoint>>;

/// A Service whose future is boxed.
#[derive(Clone)]
pub(crate) struct Boxed<S>(pub(crate) S);

pub(crate) type BoxedFuture =
    Pin<Box<dyn Future<Output = Result<Response<GateBody>, Infallible>> + Send>>;

impl<S, R> Service<R> for Boxed<S>
where
    S: Service<R, Response = Response<GateBody>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response<GateBody>;
    type Error = Infallible;
    type Future = BoxedFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> BoxedFuture {
        Box::pin(self.0.call(req))
    }
}

type AuthedFuture = EitherResponseFuture<
    gatehouse_layers::auth::ResponseFuture<EndpointFuture, GateBody, Infallible>,
    EndpointFuture,
>;
type LimitedFuture = EitherResponseFuture<
    rate_limit::ResponseFuture<GuardFuture<AuthedFuture>, GateBody>,
    GuardFuture<AuthedFuture>,
>;
pub(crate) type CheckedFuture =
    EitherResponseFuture<ip_filter::ResponseFuture<LimitedFuture, GateBody>, LimitedFuture>;
/// The response future of a route's stack below [`Observe`].
pub(crate) type InnerFuture =
    EitherResponseFuture<EitherResponseFuture<CheckedFuture, BoxedFuture>, EndpointFuture>;

/// The route's access log and metrics: a request is counted, and its line written, as its
/// response body ends (or is dropped, sent or cut off), with one count of the bytes for
/// both. Outermost in the route's stack, so that what the layers below answer (403, 429,
/// 401) is logged and counted too.
#[derive(Clone)]
pub(crate) struct Observe<S> {
    inner: S,
    log: Option<AccessLog>,
    /// Whether requests ask a cache below for its status ([`CacheStatusWanted`]): only
    /// on routes that may have one and whose log shows it, since the request's first
    /// extension costs an allocation.
    cache_status: bool,
    /// `&'static`: no reference count bounced between the cores per request.
    metrics: Option<&'static RouteMetrics>,
}

/// The layer of [`Observe`].
#[derive(Clone)]
pub(crate) struct ObserveLayer {
    pub(crate) log: Option<AccessLog>,
    pub(crate) cache_status: bool,
    pub(crate) metrics: Option<&'static RouteMetrics>,
}

impl<S> tower_layer::Layer<S> for ObserveLayer {
    type Service = Observe<S>;

    fn layer(&self, inner: S) -> Observe<S> {
        Observe {
            inner,
            log: self.log.clone(),
            cache_status: self.cache_status,
            metrics: self.metrics,
        }
    }
}

/// A request being logged: its record so far and where its line goes.
type PendingLog = (Box<Record>, AccessLog);

impl<S, B> Service<Request<RouteBody<B>>> for Observe<S>
where
    S: Service<Request<RouteBody<B>>, Response = Response<GateBody>, Error = Infallible>,
{
    type Response = Response<ObservedBody>;
    type Error = Infallible;
    type Future = ObserveFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<RouteBody<B>>) -> Self::Future {
        let started = self.metrics.map(|m| (m, m.start(req.method())));
        if self.cache_status {
            req.extensions_mut().insert(CacheStatusWanted);
        }
        let log = self.log.as_ref().map(|l| {
            // Logged with the target it came with, before any rewrite.
            let uri = req
                .extensions()
                .get::<Decided>()
                .and_then(|d| d.original.as_ref())
                .unwrap_or(req.uri());
            let peer = req.body().conn.peer;
            (Box::new(Record::start_with_uri(&req, uri, peer)), l.clone())
        });
        ObserveFuture::new(self.inner.call(req), log, started)
    }
}

/// The cache keys by the connection's scheme, not the one a client wrote: said with an
/// [`Https`](gatehouse_layers::client::Https) extension unless the target's own scheme
/// already tells it (a plain connection's origin-form target reads as http). The
/// extension would be the request's first, whose map costs an allocation a hit (callgrind,
/// cache-1k: ~500 of 17.8k instructions a request).
fn connection_scheme<B>(req: &mut Request<RouteBody<B>>) {
    let https = req.body().conn.https;
    if https || req.uri().scheme().is_some() {
        req.extensions_mut()
            .insert(gatehouse_layers::client::Https(https));
    }
}

pin_project! {
    /// The response future of [`Observe`]: the route's, and what is watched of its
    /// response, finished as its body ends.
    pub struct ObserveFuture<F> {
        #[pin]
        inner: F,
        log: Option<PendingLog>,
        metrics: Option<(&'static RouteMetrics, Started)>,
    }

    impl<F> PinnedDrop for ObserveFuture<F> {
        fn drop(this: Pin<&mut Self>) {
            // Dropped before a response was made: the client went away.
            let this = this.project();
            if let Some((record, log)) = this.log.take() {
                log.log_abandoned(record);
            }
            if let Some((m, started)) = this.metrics.take() {
                m.finish(started, 499, 0);
            }
        }
    }
}

impl<F> ObserveFuture<F> {
    pub(crate) fn new(
        inner: F,
        log: Option<PendingLog>,
        metrics: Option<(&'static RouteMetrics, Started)>,
    ) -> Self {
        ObserveFuture {
            inner,
            log,
            metrics,
        }
    }
}

impl<F> ObserveFuture<F>
where
    F: Future<Output = Result<Response<GateBody>, Infallible>>,
{
    /// The watched response, in parts: gatehouse's own connection takes it apart anyway
    /// (see [`crate::server::Serve`]).
    pub(crate) fn poll_parts(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<(http::response::Parts, ObservedBody)> {
        let this = self.project();
        let Ok(res) = std::task::ready!(this.inner.poll(cx));
        let (parts, body) = res.into_parts();
        let log = this.log.take().map(|(mut record, log)| {
            record.respond(parts.status, &parts.extensions);
            LogEnd { record, log }
        });
        let metrics = this.metrics.take().map(|(metrics, started)| MetricsEnd {
            metrics,
            started,
            status: parts.status.as_u16(),
        });
        let body = match (log, metrics) {
            (None, None) => Watched::passthrough(body),
            (log, metrics) => Watched::new(body, Both(log, metrics)),
        };
        Poll::Ready((parts, body))
    }
}

impl<F> Future for ObserveFuture<F>
where
    F: Future<Output = Result<Response<GateBody>, Infallible>>,
{
    type Output = Result<Response<ObservedBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (parts, body) = std::task::ready!(self.poll_parts(cx));
        Poll::Ready(Ok(Response::from_parts(parts, body)))
    }
}

#[cfg(test)]
mod tests {
    /// The rules' layers live in a box: a route without them keeps its future's size.
    #[test]
    fn the_rules_do_not_grow_other_routes_futures() {
        let inner = std::mem::size_of::<super::InnerFuture>();
        let largest = std::mem::size_of::<super::CheckedFuture>()
            .max(std::mem::size_of::<super::EndpointFuture>());
        assert!(
            inner <= largest + 16,
            "InnerFuture is {inner} bytes, its largest branch {largest}"
        );
    }
}
