//! What a connection hands its requests to.
//!
//! The server drives any [`Serve`]: the gateway's router directly (its routes' metrics and
//! access log come with it), or any tower Service through [`Tower`]. In front of either,
//! each listener puts its [`Fronted`] checks: a connection-level layer that refuses or
//! answers a request before the Service sees it, and adds HSTS to what comes back.

use super::front::Front;
pub use super::http3::RequestBody as Http3Body;
use crate::body::{BoxError, GateBody, ObservedBody};
use crate::proxy::ConnInfo;
use crate::router::{GatewayRouter, RouterFuture};
use bytes::Bytes;
use gatehouse_layers::access_log::{AccessLog, LogEnd, Record};
use gatehouse_layers::metrics::{MetricsEnd, RouteMetrics};
use gatehouse_layers::watched::{Both, Watched};
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::util::Oneshot;
use tower_service::Service;

/// A Service of a connection's requests, told the connection each comes from. Clones are
/// cheap: each connection takes one.
pub trait Serve: Clone + Send + Sync + Unpin + 'static {
    /// Resolves to the response in parts: the connection takes it apart to wrap its body,
    /// and a response passed whole through each level is copied at each (callgrind).
    type Future: Future<Output = (http::response::Parts, ObservedBody)> + Send + 'static;

    fn serve(&self, req: Request<Incoming>, conn: ConnInfo) -> Self::Future;

    /// The same for a request that came over HTTP/3, whose body is not hyper's.
    type Http3Future: Future<Output = (http::response::Parts, ObservedBody)> + Send + 'static;

    fn serve_http3(&self, req: Request<Http3Body>, conn: ConnInfo) -> Self::Http3Future;

    /// Where requests refused before reaching a route are counted, if anywhere.
    fn unrouted(&self) -> Option<&'static RouteMetrics> {
        None
    }

    /// Where requests refused before reaching a route are logged, if anywhere.
    fn unrouted_log(&self) -> Option<AccessLog> {
        None
    }
}

impl Serve for GatewayRouter {
    type Future = RouterParts;

    fn serve(&self, req: Request<Incoming>, conn: ConnInfo) -> RouterParts {
        RouterParts {
            inner: self.dispatch(req, conn),
        }
    }

    type Http3Future = RouterParts;

    fn serve_http3(&self, req: Request<Http3Body>, conn: ConnInfo) -> RouterParts {
        RouterParts {
            inner: self.dispatch(req, conn),
        }
    }

    fn unrouted(&self) -> Option<&'static RouteMetrics> {
        self.unrouted_metrics()
    }

    fn unrouted_log(&self) -> Option<AccessLog> {
        GatewayRouter::unrouted_log(self)
    }
}

pin_project! {
    /// The router's response future, yielding the response in parts.
    pub struct RouterParts {
        #[pin]
        inner: RouterFuture,
    }
}

impl Future for RouterParts {
    type Output = (http::response::Parts, ObservedBody);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll_parts(cx)
    }
}

/// Any tower Service, served by gatehouse's server (see [`crate::server::serve`]). Each
/// request carries its connection as extensions: a [`ConnInfo`], axum's
/// `ConnectInfo<SocketAddr>`, and gatehouse-layers' `ClientAddr` and `Https`. The Service
/// is cloned for each request and called once, as `axum::serve` does; its response body is
/// boxed. It takes hyper's bodies over HTTP/1 and HTTP/2 and axum's `Body` over HTTP/3, as
/// any axum Router does.
#[derive(Clone)]
pub struct Tower<S>(pub S);

impl<S, B> Serve for Tower<S>
where
    S: Service<Request<Incoming>, Response = Response<B>>
        + Service<Request<axum::body::Body>, Response = Response<B>>
        + Clone
        + Send
        + Sync
        + Unpin
        + 'static,
    <S as Service<Request<Incoming>>>::Future: Send + 'static,
    <S as Service<Request<Incoming>>>::Error: Into<BoxError>,
    <S as Service<Request<axum::body::Body>>>::Future: Send + 'static,
    <S as Service<Request<axum::body::Body>>>::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Future = TowerFuture<S, Request<Incoming>>;

    fn serve(&self, mut req: Request<Incoming>, conn: ConnInfo) -> Self::Future {
        conn.insert_into(&mut req);
        TowerFuture {
            inner: Oneshot::new(self.0.clone(), req),
        }
    }

    type Http3Future = TowerFuture<S, Request<axum::body::Body>>;

    fn serve_http3(&self, req: Request<Http3Body>, conn: ConnInfo) -> Self::Http3Future {
        let mut req = req.map(axum::body::Body::new);
        conn.insert_into(&mut req);
        TowerFuture {
            inner: Oneshot::new(self.0.clone(), req),
        }
    }
}

pin_project! {
    /// The response future of [`Tower`].
    pub struct TowerFuture<S: Service<R>, R> {
        #[pin]
        inner: Oneshot<S, R>,
    }
}

impl<S, R, B> Future for TowerFuture<S, R>
where
    S: Service<R, Response = Response<B>>,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Output = (http::response::Parts, ObservedBody);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let res = match std::task::ready!(crate::http_util::poll_caught(self.project().inner, cx)) {
            Some(Ok(res)) => res.map(|b| GateBody::Boxed(axum::body::Body::new(b))),
            None => crate::http_util::internal_error(),
            Some(Err(e)) => {
                // A Service's error is a fault of the server's, not the client's.
                let e: BoxError = e.into();
                tracing::error!("service error: {e}");
                crate::http_util::internal_error()
            }
        };
        let (parts, body) = res.into_parts();
        Poll::Ready((parts, Watched::passthrough(body)))
    }
}

/// A listener's checks in front of its Service (see [`Front`]): a request refused or
/// answered here (400, 414, 501, an ACME challenge, the redirect to HTTPS) never reaches
/// the Service, and is counted as unrouted.
#[derive(Clone)]
pub(crate) struct Fronted<T> {
    front: Arc<Front>,
    inner: T,
    /// Where a connection taken over by an upgrade is counted open: the server's
    /// connections and the listener's.
    counted: Option<(Arc<super::Shared>, Arc<super::ListenerKind>)>,
}

impl<T: Serve> Fronted<T> {
    pub(crate) fn new(front: Arc<Front>, inner: T) -> Self {
        Fronted {
            front,
            inner,
            counted: None,
        }
    }

    /// Counts what a request's upgrade takes over as an open connection of `kind`.
    pub(crate) fn counting(
        mut self,
        shared: Arc<super::Shared>,
        kind: Arc<super::ListenerKind>,
    ) -> Self {
        self.counted = Some((shared, kind));
        self
    }

    /// For a request that may upgrade: what counts its connection open once an upgrade
    /// takes it from hyper (whose connection then ends), for as long as the taker runs.
    pub(crate) fn count(&self) -> Option<crate::http_util::ConnCount> {
        let (shared, kind) = self.counted.clone()?;
        Some(crate::http_util::ConnCount::new(move || {
            super::ConnGuard::again(&shared, &kind)
        }))
    }

    /// A head hyper could not read as a request, and answered with `status` itself (400,
    /// 414 or 431): counted and logged as unrouted, as nginx logs the 400s it
    /// answers. There was no request, so its line's `$request` is `-`.
    pub(crate) fn unread(&self, status: StatusCode, conn: ConnInfo) {
        self.front.protocols.count(http::Version::HTTP_11);
        if let Some(metrics) = self.inner.unrouted() {
            let started = metrics.start(&http::Method::from_bytes(b"-").unwrap_or_default());
            metrics.finish(started, status.as_u16(), 0);
        }
        if let Some(log) = self.inner.unrouted_log() {
            log.log(&Record::unread(conn.peer, status));
        }
    }

    /// Whether file bodies may go out with sendfile on this listener.
    pub(crate) fn sendfile(&self) -> bool {
        self.front.sendfile
    }

    pub(crate) fn serve(&self, req: Request<Incoming>, conn: ConnInfo) -> FrontFuture<T::Future> {
        self.front(req, conn, false, None, |req| self.inner.serve(req, conn))
    }

    /// `early`: the request came in 0-RTT data, before its client's handshake was done.
    /// `refused`: the HTTP/3 layer's answer to a request it refuses (400 for one RFC 9114
    /// §4.1.2 calls malformed), answered here and counted as any other refused request.
    pub(crate) fn serve_http3(
        &self,
        req: Request<Http3Body>,
        conn: ConnInfo,
        early: bool,
        refused: Option<(StatusCode, &'static str)>,
    ) -> FrontFuture<T::Http3Future> {
        self.front(req, conn, early, refused, |req| {
            self.inner.serve_http3(req, conn)
        })
    }

    fn front<B, F>(
        &self,
        mut req: Request<B>,
        conn: ConnInfo,
        in_early_data: bool,
        refused: Option<(StatusCode, &'static str)>,
        inner: impl FnOnce(Request<B>) -> F,
    ) -> FrontFuture<F> {
        let front = &self.front;
        front.protocols.count(req.version());
        let refused = match refused {
            Some((status, why)) => Some(crate::http_util::plain(status, why)),
            None => front.canonicalize(&mut req),
        };
        let early = match refused {
            Some(res) => Some(res),
            None if in_early_data => super::front::early_data(&mut req),
            None => None,
        };
        let early = match early {
            None if front.intercepts() => front.intercept(&req),
            other => other,
        };
        let kind = match early {
            None => FrontKind::Inner { fut: inner(req) },
            Some(res) => {
                let (parts, body) = res.into_parts();
                let metrics = self.inner.unrouted().map(|metrics| MetricsEnd {
                    metrics,
                    started: metrics.start(req.method()),
                    status: parts.status.as_u16(),
                });
                let log = self.inner.unrouted_log().map(|log| {
                    let mut record = Box::new(Record::start(&req, conn.peer));
                    record.respond(parts.status, &parts.extensions);
                    LogEnd { record, log }
                });
                let body = match (log, metrics) {
                    (None, None) => Watched::passthrough(body),
                    (log, metrics) => Watched::new(body, Both(log, metrics)),
                };
                FrontKind::Early {
                    res: Some(Response::from_parts(parts, body)),
                }
            }
        };
        FrontFuture {
            kind,
            hsts: front.hsts.clone(),
            alt_svc: front.alt_svc.clone(),
        }
    }
}

pin_project! {
    /// The response future of [`Fronted`].
    pub(crate) struct FrontFuture<F> {
        #[pin]
        kind: FrontKind<F>,
        hsts: Option<http::HeaderValue>,
        alt_svc: Option<http::HeaderValue>,
    }
}

pin_project! {
    #[project = FrontKindProj]
    enum FrontKind<F> {
        Inner { #[pin] fut: F },
        Early { res: Option<Response<ObservedBody>> },
    }
}

impl<F> FrontFuture<F>
where
    F: Future<Output = (http::response::Parts, ObservedBody)>,
{
    /// The response, in parts: the connection takes it apart anyway, and a response
    /// returned whole through one more level is one more copy of it.
    pub(crate) fn poll_parts(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<(http::response::Parts, ObservedBody)> {
        let this = self.project();
        let (mut parts, body) = match this.kind.project() {
            FrontKindProj::Inner { fut } => std::task::ready!(fut.poll(cx)),
            FrontKindProj::Early { res } => match res.take() {
                Some(res) => res.into_parts(),
                None => {
                    crate::http_util::plain(StatusCode::INTERNAL_SERVER_ERROR, "polled twice\n")
                        .map(Watched::passthrough)
                        .into_parts()
                }
            },
        };
        if let Some(h) = this.hsts.take() {
            // RFC 6797 §7.2: only over a secure transport, which is why it is per listener.
            parts
                .headers
                .insert(http::header::STRICT_TRANSPORT_SECURITY, h);
        }
        if let Some(h) = this.alt_svc.take() {
            parts.headers.insert(http::header::ALT_SVC, h);
        }
        Poll::Ready((parts, body))
    }
}
