use super::body::PrecompressBody;
use super::cache::{Key, Variant};
use super::encode::{self, stream::BoxError};
use super::layer::Settings;
use super::negotiate::Encoding;
use super::predicate::Predicate;
use super::service::none_match_hits;
use crate::siblings::Siblings;
use crate::upstream::StoredVersion;
use bytes::Bytes;
use http::header::{ACCEPT_RANGES, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, ETAG, VARY};
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use http_body::Body;
use http_body_util::BodyExt;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

/// What the request asked for, kept while the inner Service answers.
pub(crate) struct Ctx {
    pub encoding: Encoding,
    /// The request was HEAD, sent to the inner Service as GET.
    pub head: bool,
    /// A GET or HEAD, whose variants may be cached.
    pub cacheable: bool,
    /// The inner response has the body to encode (not a HEAD passed on as HEAD).
    pub fill: bool,
    /// `If-None-Match` as the client sent it.
    pub if_none_match: Option<Vec<HeaderValue>>,
    pub resource: u64,
}

type Fill<B> = Pin<Box<dyn Future<Output = Response<PrecompressBody<B>>> + Send>>;

pin_project! {
    /// The response future of [`Precompress`](super::Precompress).
    pub struct ResponseFuture<F, B, P> {
        #[pin]
        state: State<F, B>,
        ctx: Option<Ctx>,
        settings: Option<Arc<Settings<P>>>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, B> {
        Inner { #[pin] fut: F },
        /// A cache miss: the variant is being made (or another request is making it).
        Fill { fut: Fill<B> },
        NotAcceptable,
        Done,
    }
}

impl<F, B, P> ResponseFuture<F, B, P> {
    pub(crate) fn new(fut: F, ctx: Option<Ctx>, settings: &Arc<Settings<P>>) -> Self {
        // Identity, with Vary left to the inner Service: nothing to do on the way back,
        // so not even the settings are needed.
        let settings = (ctx.is_some() || !settings.vary_from_inner).then(|| settings.clone());
        ResponseFuture {
            state: State::Inner { fut },
            ctx,
            settings,
        }
    }

    pub(crate) fn not_acceptable() -> Self {
        ResponseFuture {
            state: State::NotAcceptable,
            ctx: None,
            settings: None,
        }
    }
}

impl<F, B, E, P> Future for ResponseFuture<F, B, P>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    P: Predicate,
{
    type Output = Result<Response<PrecompressBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Inner { fut } => {
                    let res = ready!(fut.poll(cx))?;
                    let Some(settings) = this.settings.take() else {
                        return Poll::Ready(Ok(
                            res.map(|inner| PrecompressBody::Identity { inner })
                        ));
                    };
                    match this.ctx.take() {
                        None => {
                            let mut res = res.map(|inner| PrecompressBody::Identity { inner });
                            if !settings.vary_from_inner {
                                vary_if_compressible(&mut res, &settings.predicate);
                            }
                            this.state.set(State::Done);
                            return Poll::Ready(Ok(res));
                        }
                        Some(ctx) => match respond(res, ctx, &settings) {
                            Next::Done(res) => {
                                this.state.set(State::Done);
                                return Poll::Ready(Ok(res));
                            }
                            Next::Fill(fut) => this.state.set(State::Fill { fut }),
                        },
                    }
                }
                StateProj::Fill { fut } => {
                    let res = ready!(fut.as_mut().poll(cx));
                    this.state.set(State::Done);
                    return Poll::Ready(Ok(res));
                }
                StateProj::NotAcceptable => {
                    this.state.set(State::Done);
                    return Poll::Ready(Ok(not_acceptable()));
                }
                StateProj::Done => {
                    return Poll::Ready(Ok(status(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "polled after completion\n",
                    )));
                }
            }
        }
    }
}

enum Next<B> {
    Done(Response<PrecompressBody<B>>),
    Fill(Fill<B>),
}

fn respond<B, P>(res: Response<B>, ctx: Ctx, settings: &Arc<Settings<P>>) -> Next<B>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    P: Predicate,
{
    let enc = ctx.encoding;
    let eligible = res.status() == StatusCode::OK && !res.headers().contains_key(CONTENT_ENCODING);
    // A version is named by a response cache's stored entry, or else by a strong ETag.
    let strong = if eligible && ctx.cacheable {
        let etag = res
            .headers()
            .get(ETAG)
            .filter(|e| !e.as_bytes().starts_with(b"W/"))
            .cloned();
        let version = res
            .extensions()
            .get::<StoredVersion>()
            .map_or(0, StoredVersion::id);
        (version != 0 || etag.is_some()).then_some(Key {
            resource: ctx.resource,
            version,
            etag,
            encoding: enc,
        })
    } else {
        None
    };
    let sibling = if eligible {
        res.extensions()
            .get::<Arc<Siblings>>()
            .filter(|s| s.get(enc.file_suffix()).is_some())
            .cloned()
    } else {
        None
    };
    // A variant is made only for a type that could be compressed, or from a sibling: for
    // any other response (an image, a proxied binary) the cache is not even looked in.
    // A response without a type is left to the predicate.
    let possible = sibling.is_some()
        || res
            .headers()
            .get(CONTENT_TYPE)
            .is_none_or(|ct| settings.predicate.compressible_type(ct));
    // Then a hit: the same version gets the same answer.
    if let Some(v) = strong
        .as_ref()
        .filter(|_| possible)
        .and_then(|k| settings.cache.lookup(k))
    {
        let (parts, inner) = res.into_parts();
        let b = PrecompressBody::Identity { inner };
        return Next::Done(from_variant(parts, b, &v, &ctx, settings));
    }
    if !ctx.fill || !possible {
        let res = res.map(|inner| PrecompressBody::Identity { inner });
        return Next::Done(identity(res, &ctx, settings));
    }
    let size = res.body().size_hint().exact();
    let compress = eligible && settings.predicate.should_compress(&res, size);
    if !compress && sibling.is_none() {
        let res = res.map(|inner| PrecompressBody::Identity { inner });
        return Next::Done(identity(res, &ctx, settings));
    }
    let fits = size.is_some_and(|s| s <= settings.max_size);
    let cacheable = (sibling.is_some() || fits) && !private(&res);
    let Some(key) = strong.filter(|_| cacheable) else {
        if !compress {
            let res = res.map(|inner| PrecompressBody::Identity { inner });
            return Next::Done(identity(res, &ctx, settings));
        }
        return Next::Done(streamed(res, &ctx, settings));
    };
    // A body too large to hold is only sent encoded from a sibling.
    let compress = compress && fits;
    let settings = settings.clone();
    let stored = res.extensions().get::<StoredVersion>().cloned();
    Next::Fill(Box::pin(async move {
        let (parts, body) = res.into_parts();
        let mut body = Some(body);
        let mut collected: Option<Result<Bytes, BoxError>> = None;
        let made = settings
            .cache
            .get_or_make(
                key.clone(),
                stored.as_ref(),
                make(
                    &settings,
                    &key,
                    sibling,
                    compress,
                    &mut body,
                    &mut collected,
                ),
            )
            .await;
        let identity_body = match (body, collected) {
            (Some(inner), _) => PrecompressBody::Identity { inner },
            (None, Some(Ok(bytes))) => PrecompressBody::bytes(bytes),
            // The body failed as it was read: nothing valid can be sent.
            (None, _) => {
                return status(
                    StatusCode::BAD_GATEWAY,
                    "the response body could not be read\n",
                )
            }
        };
        match made {
            Some(v) => from_variant(parts, identity_body, &v, &ctx, &settings),
            None => identity(Response::from_parts(parts, identity_body), &ctx, &settings),
        }
    }))
}

/// Makes the variant for `key`: from a fresh precompressed sibling when there is one,
/// else by encoding the body on the blocking pool.
async fn make<B, P>(
    settings: &Settings<P>,
    key: &Key,
    sibling: Option<Arc<Siblings>>,
    compress: bool,
    body: &mut Option<B>,
    collected: &mut Option<Result<Bytes, BoxError>>,
) -> Option<Arc<Variant>>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let (cache, levels, max_size) = (&settings.cache, settings.levels, settings.max_size);
    let enc = key.encoding;
    if let Some(s) = sibling {
        let read =
            tokio::task::spawn_blocking(move || s.read_fresh(enc.file_suffix(), max_size)).await;
        if let Ok(Ok(Some(data))) = read {
            cache.count_sibling_read();
            return Some(Arc::new(Variant::new(
                Some(Bytes::from(data)),
                key.etag.as_ref(),
                enc,
            )));
        }
    }
    if !compress {
        // No usable sibling, and the body is not to be encoded here: remember to send it
        // as it is, rather than look again on every request.
        return Some(Arc::new(Variant::new(None, key.etag.as_ref(), enc)));
    }
    let b = body.take()?;
    let data = match b.collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => {
            *collected = Some(Err(e.into()));
            return None;
        }
    };
    *collected = Some(Ok(data.clone()));
    let encoded = tokio::task::spawn_blocking(move || encode::encode(enc, levels, &data)).await;
    cache.count_encoding();
    let original = collected
        .as_ref()
        .and_then(|c| c.as_ref().ok())
        .map_or(0, |b| b.len());
    match encoded {
        // Kept even when no smaller, marked so, so that the file isn't tried again.
        Ok(Ok(e)) if e.len() < original => {
            Some(Arc::new(Variant::new(Some(e), key.etag.as_ref(), enc)))
        }
        Ok(Ok(_)) => Some(Arc::new(Variant::new(None, key.etag.as_ref(), enc))),
        _ => None,
    }
}

/// The response for a variant: 304 when the client holds it, else its bytes.
fn from_variant<B, P: Predicate>(
    mut parts: http::response::Parts,
    identity_body: PrecompressBody<B>,
    v: &Variant,
    ctx: &Ctx,
    settings: &Settings<P>,
) -> Response<PrecompressBody<B>> {
    let Some(data) = &v.body else {
        return identity(Response::from_parts(parts, identity_body), ctx, settings);
    };
    let h = &mut parts.headers;
    // Without a strong ETag of its own (a cached response's variant), a weak one stays.
    if let Some(e) = &v.etag {
        h.insert(ETAG, e.clone());
    }
    add_vary(h);
    if ctx
        .if_none_match
        .as_deref()
        .zip(v.etag.as_ref())
        .is_some_and(|(inm, e)| none_match_hits(inm, e))
    {
        // RFC 9110 §15.4.5: a 304 carries the validators and Vary, not the content's
        // metadata.
        parts.status = StatusCode::NOT_MODIFIED;
        h.remove(CONTENT_LENGTH);
        h.remove(CONTENT_TYPE);
        h.remove(ACCEPT_RANGES);
        return Response::from_parts(parts, PrecompressBody::empty());
    }
    // Ranges are served from the identity representation only. Removed first, so that
    // the slot it frees takes Content-Encoding without growing the map.
    h.remove(ACCEPT_RANGES);
    h.insert(CONTENT_ENCODING, ctx.encoding.header_value());
    h.insert(CONTENT_LENGTH, v.len.clone());
    let body = if ctx.head {
        PrecompressBody::empty()
    } else {
        PrecompressBody::bytes(data.clone())
    };
    Response::from_parts(parts, body)
}

/// The response as the inner Service made it, with `Vary` when another client could get
/// it encoded, and without a body if the request was HEAD.
fn identity<B, P: Predicate>(
    mut res: Response<PrecompressBody<B>>,
    ctx: &Ctx,
    settings: &Settings<P>,
) -> Response<PrecompressBody<B>> {
    if ctx.head {
        *res.body_mut() = PrecompressBody::empty();
    }
    if !settings.vary_from_inner {
        vary_if_compressible(&mut res, &settings.predicate);
    }
    res
}

/// Encodes as the body streams: for a response without a strong validator, which can't be
/// told apart from the next version, or one too large to hold.
fn streamed<B, P>(
    res: Response<B>,
    ctx: &Ctx,
    settings: &Settings<P>,
) -> Response<PrecompressBody<B>>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let (mut parts, body) = res.into_parts();
    let h = &mut parts.headers;
    h.remove(CONTENT_LENGTH);
    h.remove(ACCEPT_RANGES);
    h.insert(CONTENT_ENCODING, ctx.encoding.header_value());
    add_vary(h);
    // A strong validator names exact bytes (RFC 9110 §8.8.1), and these are not the
    // identity's: weaken it, so that If-Range can't splice the two. A weak one stays.
    if let Some(e) = h.get(ETAG).filter(|e| !e.as_bytes().starts_with(b"W/")) {
        let mut weak = b"W/".to_vec();
        weak.extend_from_slice(e.as_bytes());
        match HeaderValue::from_bytes(&weak) {
            Ok(v) => h.insert(ETAG, v),
            Err(_) => h.remove(ETAG),
        };
    }
    let body = if ctx.head {
        PrecompressBody::empty()
    } else {
        settings.cache.count_encoding();
        PrecompressBody::Encoded {
            inner: encode::stream::encode(ctx.encoding, settings.levels, body),
        }
    };
    Response::from_parts(parts, body)
}

/// `Cache-Control: private` or `no-store` (RFC 9111 §5.2.2): not to be kept in a store
/// shared by every client.
fn private<B>(res: &Response<B>) -> bool {
    res.headers()
        .get_all(http::header::CACHE_CONTROL)
        .iter()
        .any(|v| {
            v.to_str().is_ok_and(|s| {
                s.split(',').any(|d| {
                    let d = d.trim();
                    let name = d.split('=').next().unwrap_or("").trim();
                    name.eq_ignore_ascii_case("private") || name.eq_ignore_ascii_case("no-store")
                })
            })
        })
}

fn vary_if_compressible<B, P: Predicate>(res: &mut Response<B>, predicate: &P) {
    let st = res.status();
    // A 304 gets the Vary its 200 would have had, judged by the same type, so it needs
    // the inner Service to say the type (gatehouse's static files do).
    let applies = match st {
        StatusCode::OK | StatusCode::PARTIAL_CONTENT | StatusCode::NOT_MODIFIED => {
            !res.headers().contains_key(CONTENT_ENCODING)
                && res
                    .headers()
                    .get(CONTENT_TYPE)
                    .is_some_and(|ct| predicate.compressible_type(ct))
        }
        _ => false,
    };
    if applies {
        add_vary(res.headers_mut());
    }
}

/// Adds `Accept-Encoding` to `Vary` unless it is there already (or `Vary: *`).
fn add_vary(h: &mut HeaderMap) {
    let present = h.get_all(VARY).iter().any(|v| {
        // The common case, the value this layer (or the static files) put there.
        v.as_bytes().eq_ignore_ascii_case(b"accept-encoding")
            || v.to_str().is_ok_and(|s| {
                s.split(',').any(|f| {
                    let f = f.trim();
                    f == "*" || f.eq_ignore_ascii_case("accept-encoding")
                })
            })
    });
    if !present {
        h.append(VARY, HeaderValue::from_static("accept-encoding"));
    }
}

fn not_acceptable<B>() -> Response<PrecompressBody<B>> {
    let mut res = status(
        StatusCode::NOT_ACCEPTABLE,
        "no acceptable content coding (identity is refused and br, zstd and gzip are not accepted)\n",
    );
    add_vary(res.headers_mut());
    res
}

fn status<B>(status: StatusCode, text: &'static str) -> Response<PrecompressBody<B>> {
    crate::text_response(status, text).map(PrecompressBody::bytes)
}
