use super::body::PrecompressBody;
use super::future::{Ctx, ResponseFuture};
use super::layer::Settings;
use super::negotiate::{negotiate, Choice};
use super::predicate::{DefaultPredicate, Predicate};
use http::header::{HOST, IF_NONE_MATCH, IF_RANGE, RANGE};
use http::{HeaderValue, Method, Request, Response};
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use tower_service::Service;

/// Compresses responses once per version and serves the encoded variants from memory.
/// See the [module docs](super).
pub struct Precompress<S, P = DefaultPredicate> {
    pub(crate) inner: S,
    pub(crate) settings: Arc<Settings<P>>,
}

impl<S: Clone, P> Clone for Precompress<S, P> {
    fn clone(&self) -> Self {
        Precompress {
            inner: self.inner.clone(),
            settings: self.settings.clone(),
        }
    }
}

impl<S, P> Precompress<S, P> {
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The store the variants are kept in.
    pub fn variant_cache(&self) -> &super::VariantCache {
        &self.settings.cache
    }
}

impl<S, P, ReqB, B> Service<Request<ReqB>> for Precompress<S, P>
where
    S: Service<Request<ReqB>, Response = Response<B>>,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    P: Predicate,
{
    type Response = Response<PrecompressBody<B>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, B, P>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        match prepare(&self.settings, req) {
            Ok((req, ctx)) => ResponseFuture::new(self.inner.call(req), ctx, &self.settings),
            Err(()) => ResponseFuture::not_acceptable(),
        }
    }
}

impl<S, P: Predicate> Precompress<S, P> {
    /// Like `call`, with the inner Service called through `&self` by `inner`: for a caller
    /// that holds the Service shared and can call the inner one without `&mut` (gatehouse's
    /// router does), which saves cloning the Service per request.
    pub fn call_with<ReqB, F, B, E>(
        &self,
        req: Request<ReqB>,
        inner: impl FnOnce(&S, Request<ReqB>) -> F,
    ) -> ResponseFuture<F, B, P>
    where
        F: std::future::Future<Output = Result<Response<B>, E>>,
    {
        match prepare(&self.settings, req) {
            Ok((req, ctx)) => ResponseFuture::new(inner(&self.inner, req), ctx, &self.settings),
            Err(()) => ResponseFuture::not_acceptable(),
        }
    }
}

/// Negotiates, and readies the request for the inner Service. `Err` is a 406.
fn prepare<P, B>(
    settings: &Settings<P>,
    mut req: Request<B>,
) -> Result<(Request<B>, Option<Ctx>), ()> {
    let encoding = match negotiate(req.headers(), &settings.order) {
        Choice::Identity => return Ok((req, None)),
        Choice::NotAcceptable => return Err(()),
        Choice::Encode(e) => e,
    };
    let method = req.method();
    // Only a GET's answer is a representation of the resource that can be cached by URL
    // and validator (RFC 9110 §9.3.1); anything else is encoded as it streams.
    let cacheable = method == Method::GET || method == Method::HEAD;
    let head = method == Method::HEAD;
    let mut fill = true;
    let mut if_none_match = None;
    if cacheable {
        if head && !settings.head_as_get {
            // The inner Service's HEAD has no body to encode: a cached variant's headers
            // can be told, nothing can be made.
            fill = false;
        } else if head {
            // HEAD answers with the headers GET would have, and those of an encoded variant
            // are only known once it has been made: ask the inner Service for the GET and
            // drop the body. Range means nothing to HEAD (§14.2), so it must not to the GET.
            *req.method_mut() = Method::GET;
            req.headers_mut().remove(RANGE);
            req.headers_mut().remove(IF_RANGE);
        }
        if_none_match = split_if_none_match(req.headers_mut());
        // A response cache below names the version its variants are made from.
        req.extensions_mut()
            .insert(crate::upstream::StoredVersionWanted);
    }
    let resource = resource_hash(&req, settings.key_by_path);
    Ok((
        req,
        Some(Ctx {
            encoding,
            head,
            cacheable,
            fill,
            if_none_match,
            resource,
        }),
    ))
}

/// The request's resource, for the cache key: host, path and query, or the path alone.
fn resource_hash<B>(req: &Request<B>, path_only: bool) -> u64 {
    static STATE: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    let mut h = STATE.get_or_init(Default::default).build_hasher();
    if path_only {
        req.uri().path().hash(&mut h);
        return h.finish();
    }
    let host = req
        .uri()
        .authority()
        .map(|a| a.as_str().as_bytes())
        .or_else(|| req.headers().get(HOST).map(|v| v.as_bytes()))
        .unwrap_or(b"");
    host.hash(&mut h);
    req.uri()
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .hash(&mut h);
    h.finish()
}

/// The suffixes this layer gives variant tags.
const VARIANT_SUFFIXES: [&str; 3] = ["-br\"", "-zstd\"", "-gzip\""];

/// Takes the tags of encoded variants out of `If-None-Match`, which the inner Service
/// can't match (it knows only its own validator), and returns the header as the client
/// sent it, for the layer to evaluate against the variant it sends.
fn split_if_none_match(headers: &mut http::HeaderMap) -> Option<Vec<HeaderValue>> {
    if !headers.contains_key(IF_NONE_MATCH) {
        return None;
    }
    let original: Vec<HeaderValue> = headers.get_all(IF_NONE_MATCH).iter().cloned().collect();
    let is_variant = |t: &str| VARIANT_SUFFIXES.iter().any(|s| t.ends_with(s));
    let any_variant = original
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(entity_tags)
        .any(is_variant);
    if any_variant {
        let kept: Vec<&str> = original
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(entity_tags)
            .filter(|t| !is_variant(t))
            .collect();
        // With If-None-Match gone the inner Service would fall back to If-Modified-Since
        // (RFC 9110 §13.1.3), and could answer 304 for a new version with the same
        // modification second: leave it a tag that matches nothing instead.
        let v = if kept.is_empty() {
            Ok(HeaderValue::from_static("\"gatehouse-no-match\""))
        } else {
            HeaderValue::from_str(&kept.join(", "))
        };
        if let Ok(v) = v {
            headers.insert(IF_NONE_MATCH, v);
        }
    }
    Some(original)
}

/// The members of an `If-None-Match` list (`*` or entity tags, RFC 9110 §13.1.2), split on
/// the commas outside quotes.
pub(crate) fn entity_tags(v: &str) -> impl Iterator<Item = &str> {
    let mut rest = v;
    std::iter::from_fn(move || loop {
        rest = rest.trim_start_matches([' ', '\t', ',']);
        if rest.is_empty() {
            return None;
        }
        let mut quoted = false;
        let end = rest
            .char_indices()
            .find(|&(_, c)| {
                if c == '"' {
                    quoted = !quoted;
                }
                c == ',' && !quoted
            })
            .map_or(rest.len(), |(i, _)| i);
        let tag = rest[..end].trim();
        rest = &rest[end..];
        if !tag.is_empty() {
            return Some(tag);
        }
    })
}

/// Weak comparison (RFC 9110 §8.8.3.2), as `If-None-Match` uses: `W/` is ignored.
pub(crate) fn none_match_hits(values: &[HeaderValue], etag: &HeaderValue) -> bool {
    let Ok(etag) = etag.to_str() else {
        return false;
    };
    let etag = etag.strip_prefix("W/").unwrap_or(etag);
    values
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(entity_tags)
        .any(|t| t == "*" || t.strip_prefix("W/").unwrap_or(t) == etag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_split_outside_quotes() {
        let t: Vec<&str> = entity_tags(r#""a", W/"b,c" ,"d""#).collect();
        assert_eq!(t, [r#""a""#, r#"W/"b,c""#, r#""d""#]);
        assert_eq!(entity_tags("*").collect::<Vec<_>>(), ["*"]);
        assert_eq!(entity_tags(" , ").count(), 0);
    }

    #[test]
    fn variant_tags_are_hidden_from_the_inner_service() {
        let mut h = http::HeaderMap::new();
        h.insert(
            IF_NONE_MATCH,
            HeaderValue::from_static(r#""x-br", "y", W/"z-gzip""#),
        );
        let orig = split_if_none_match(&mut h).unwrap();
        assert_eq!(h.get(IF_NONE_MATCH).unwrap(), r#""y""#);
        assert_eq!(orig.len(), 1);
        let mut h = http::HeaderMap::new();
        h.insert(IF_NONE_MATCH, HeaderValue::from_static(r#""x-zstd""#));
        split_if_none_match(&mut h);
        assert_eq!(h.get(IF_NONE_MATCH).unwrap(), "\"gatehouse-no-match\"");
    }

    #[test]
    fn none_match_is_weak() {
        let v = [HeaderValue::from_static(r#"W/"a-br", "b""#)];
        assert!(none_match_hits(&v, &HeaderValue::from_static(r#""a-br""#)));
        assert!(!none_match_hits(
            &v,
            &HeaderValue::from_static(r#""a-gzip""#)
        ));
        assert!(none_match_hits(
            &[HeaderValue::from_static("*")],
            &HeaderValue::from_static(r#""q""#)
        ));
    }
}
