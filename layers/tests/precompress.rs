//! The precompress layer over plain Services and an axum app, outside the gateway: one
//! encoding per version under concurrency, the byte budget, streaming without a strong
//! validator.
use bytes::Bytes;
use gatehouse_layers::precompress::{PrecompressLayer, VariantCache};
use http::header::{ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, ETAG};
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use std::convert::Infallible;
use std::io::Read;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tower::{service_fn, Layer, ServiceExt};

/// Text that compresses about 4:1 like real markup, different per `seed`.
fn text(seed: u64, len: usize) -> Vec<u8> {
    let words = [
        "alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "lambda",
    ];
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        out.extend_from_slice(words[(x >> 33) as usize % words.len()].as_bytes());
        out.extend_from_slice(format!("{} ", (x >> 40) % 1000).as_bytes());
    }
    out.truncate(len);
    out
}

fn gunzip(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data)
        .read_to_end(&mut out)
        .expect("valid gzip");
    out
}

fn get(path: &str, ae: &str) -> Request<()> {
    Request::get(path)
        .header(ACCEPT_ENCODING, ae)
        .body(())
        .expect("request")
}

fn text_response(body: Vec<u8>, etag: Option<&str>) -> Response<Full<Bytes>> {
    let mut b = Response::builder()
        .header(CONTENT_TYPE, "text/plain")
        .header(CONTENT_LENGTH, body.len());
    if let Some(e) = etag {
        b = b.header(ETAG, e);
    }
    b.body(Full::new(Bytes::from(body))).expect("response")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_concurrent_first_requests_compress_once() {
    const N: usize = 100;
    let body = text(1, 200_000);
    let barrier = Arc::new(tokio::sync::Barrier::new(N));
    let calls = Arc::new(AtomicUsize::new(0));
    let inner = {
        let (body, barrier, calls) = (body.clone(), barrier.clone(), calls.clone());
        service_fn(move |_req: Request<()>| {
            let (body, barrier, calls) = (body.clone(), barrier.clone(), calls.clone());
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                // Every request has its inner response before any looks in the cache.
                barrier.wait().await;
                Ok::<_, Infallible>(text_response(body, Some("\"v1\"")))
            }
        })
    };
    let layer = PrecompressLayer::new();
    let cache = layer.variant_cache().clone();
    let svc = layer.layer(inner);
    let mut tasks = Vec::new();
    for _ in 0..N {
        let svc = svc.clone();
        tasks.push(tokio::spawn(async move {
            let res = svc
                .oneshot(get("/big.txt", "gzip"))
                .await
                .expect("infallible");
            assert_eq!(res.headers()[CONTENT_ENCODING], "gzip");
            res.into_body().collect().await.expect("body").to_bytes()
        }));
    }
    for t in tasks {
        assert_eq!(gunzip(&t.await.expect("task")), body);
    }
    assert_eq!(calls.load(Ordering::SeqCst), N);
    assert_eq!(
        cache.encodings(),
        1,
        "one encoding for {N} concurrent misses"
    );
}

#[tokio::test]
async fn the_budget_is_respected_and_old_variants_are_evicted() {
    const FILES: u64 = 40;
    let budget = 64 * 1024;
    let cache = VariantCache::new(budget);
    let svc = PrecompressLayer::new()
        .cache(cache.clone())
        .layer(service_fn(|req: Request<()>| async move {
            let seed: u64 = req.uri().path()[1..].parse().unwrap_or(0);
            Ok::<_, Infallible>(text_response(
                text(seed, 40_000),
                Some(&format!("\"{seed}\"")),
            ))
        }));
    let fetch = |i: u64| {
        let svc = svc.clone();
        async move {
            let res = svc
                .oneshot(get(&format!("/{i}"), "gzip"))
                .await
                .expect("infallible");
            let body = res.into_body().collect().await.expect("body").to_bytes();
            assert_eq!(gunzip(&body), text(i, 40_000));
            body.len() as u64
        }
    };
    let mut encoded = 0;
    for i in 0..FILES {
        encoded += fetch(i).await;
    }
    assert!(
        encoded > 4 * budget,
        "the files together overflow the budget"
    );
    assert_eq!(cache.encodings(), FILES);
    cache.sync();
    assert!(
        cache.weighted_size() <= budget,
        "{} bytes held, budget {budget}",
        cache.weighted_size()
    );
    assert!(cache.entry_count() < FILES);
    // What was evicted is encoded again when asked for (and still correct).
    for i in 0..FILES {
        fetch(i).await;
    }
    assert!(
        cache.encodings() >= FILES + FILES / 2,
        "only {} encodings: evicted variants must be made again",
        cache.encodings()
    );
}

#[tokio::test]
async fn hits_are_served_from_memory() {
    let cache = VariantCache::new(1 << 20);
    let svc = PrecompressLayer::new()
        .cache(cache.clone())
        .layer(service_fn(|_req: Request<()>| async {
            Ok::<_, Infallible>(text_response(text(7, 30_000), Some("\"seven\"")))
        }));
    for coding in ["gzip", "br", "zstd"] {
        for _ in 0..5 {
            let res = svc
                .clone()
                .oneshot(get("/x", coding))
                .await
                .expect("infallible");
            assert_eq!(res.headers()[CONTENT_ENCODING], coding);
        }
    }
    assert_eq!(cache.encodings(), 3, "one per coding, then hits");
}

#[tokio::test]
async fn a_type_not_compressible_is_not_looked_up() {
    let cache = VariantCache::new(1 << 20);
    let png = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let svc = PrecompressLayer::new()
        .cache(cache.clone())
        .layer(service_fn({
            let png = png.clone();
            move |_req: Request<()>| {
                let png = png.load(Ordering::SeqCst);
                async move {
                    let mut res = text_response(text(9, 30_000), Some("\"same\""));
                    if png {
                        res.headers_mut()
                            .insert(CONTENT_TYPE, "image/png".parse().expect("value"));
                    }
                    Ok::<_, Infallible>(res)
                }
            }
        }));
    for _ in 0..2 {
        let res = svc.clone().oneshot(get("/x", "gzip")).await.expect("ok");
        assert_eq!(res.headers()[CONTENT_ENCODING], "gzip");
    }
    assert_eq!(cache.hits(), 1);
    // The same URL and validator, now of a type that is never compressed: sent as it is,
    // without a look in the cache (the variant there would have been a hit).
    png.store(true, Ordering::SeqCst);
    let res = svc.clone().oneshot(get("/x", "gzip")).await.expect("ok");
    assert!(res.headers().get(CONTENT_ENCODING).is_none());
    assert_eq!(res.headers()[CONTENT_TYPE], "image/png");
    assert_eq!(cache.hits(), 1);
}

#[tokio::test]
async fn without_a_strong_etag_the_body_is_encoded_as_it_streams() {
    let cache = VariantCache::new(1 << 20);
    for etag in [None, Some("W/\"weak\"")] {
        let svc = PrecompressLayer::new()
            .cache(cache.clone())
            .layer(service_fn(move |_req: Request<()>| async move {
                Ok::<_, Infallible>(text_response(text(3, 30_000), etag))
            }));
        let before = cache.encodings();
        for _ in 0..2 {
            let res = svc
                .clone()
                .oneshot(get("/s", "gzip"))
                .await
                .expect("infallible");
            assert_eq!(res.headers()[CONTENT_ENCODING], "gzip");
            assert!(res.headers().get(CONTENT_LENGTH).is_none());
            assert_eq!(res.headers().get(ETAG).map(|v| v.to_str().unwrap()), etag);
            let body = res.into_body().collect().await.expect("body").to_bytes();
            assert_eq!(gunzip(&body), text(3, 30_000));
        }
        assert_eq!(
            cache.encodings(),
            before + 2,
            "nothing cached: encoded each time"
        );
        cache.sync();
        assert_eq!(cache.entry_count(), 0);
    }
}

#[tokio::test]
async fn reusable_over_a_plain_axum_handler() {
    use axum::{routing::get as route_get, Router};
    let page = String::from_utf8(text(9, 20_000)).expect("ascii");
    let expected = page.clone();
    let app: Router = Router::new()
        .route(
            "/page",
            route_get(move || {
                let page = page.clone();
                async move { ([(ETAG, "\"page-1\"")], page) }
            }),
        )
        .layer(PrecompressLayer::new());
    let res = app
        .clone()
        .oneshot(
            Request::get("/page")
                .header(ACCEPT_ENCODING, "gzip")
                .body(axum::body::Body::empty())
                .expect("request"),
        )
        .await
        .expect("infallible");
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()[CONTENT_ENCODING], "gzip");
    assert_eq!(res.headers()[ETAG], "\"page-1-gzip\"");
    assert_eq!(res.headers()["vary"], "accept-encoding");
    let body = res.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(gunzip(&body), expected.as_bytes());
    // 406 from the layer, before the handler.
    let res = app
        .oneshot(
            Request::get("/page")
                .header(ACCEPT_ENCODING, "identity;q=0")
                .body(axum::body::Body::empty())
                .expect("request"),
        )
        .await
        .expect("infallible");
    assert_eq!(res.status(), 406);
}

#[tokio::test]
async fn static_style_keys_ignore_the_query_and_other_methods_are_not_cached() {
    let cache = VariantCache::new(1 << 20);
    let inner = service_fn(|_req: Request<()>| async {
        Ok::<_, Infallible>(text_response(text(11, 30_000), Some("\"eleven\"")))
    });
    let svc = PrecompressLayer::new()
        .cache(cache.clone())
        .key_by_path(true)
        .layer(inner);
    for q in ["/a.js", "/a.js?v=1", "/a.js?v=2", "/a.js?x"] {
        let res = svc
            .clone()
            .oneshot(get(q, "gzip"))
            .await
            .expect("infallible");
        assert_eq!(res.headers()[CONTENT_ENCODING], "gzip");
    }
    assert_eq!(
        cache.encodings(),
        1,
        "one version, one encoding, whatever the query"
    );
    // A POST's answer is encoded, but never cached nor served to a GET.
    let post = Request::post("/a.js")
        .header(ACCEPT_ENCODING, "gzip")
        .body(())
        .expect("request");
    let res = svc.clone().oneshot(post).await.expect("infallible");
    assert_eq!(res.headers()[CONTENT_ENCODING], "gzip");
    assert!(res.headers()[ETAG].to_str().unwrap().starts_with("W/"));
    let body = res.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(gunzip(&body), text(11, 30_000));
    cache.sync();
    assert_eq!(cache.entry_count(), 1);
}

#[tokio::test]
async fn private_responses_are_not_kept() {
    let cache = VariantCache::new(1 << 20);
    let svc = PrecompressLayer::new()
        .cache(cache.clone())
        .layer(service_fn(|_req: Request<()>| async {
            let mut res = text_response(text(12, 30_000), Some("\"twelve\""));
            res.headers_mut().insert(
                http::header::CACHE_CONTROL,
                "private, max-age=60".parse().unwrap(),
            );
            Ok::<_, Infallible>(res)
        }));
    for _ in 0..2 {
        let res = svc
            .clone()
            .oneshot(get("/me", "gzip"))
            .await
            .expect("infallible");
        assert_eq!(res.headers()[CONTENT_ENCODING], "gzip");
        let body = res.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(gunzip(&body), text(12, 30_000));
    }
    cache.sync();
    assert_eq!(cache.entry_count(), 0);
    assert_eq!(cache.encodings(), 2);
}

#[tokio::test]
async fn an_abandoned_compression_leaves_nothing_in_flight() {
    let cache = VariantCache::new(1 << 20);
    let svc = PrecompressLayer::new()
        .cache(cache.clone())
        .layer(service_fn(|_req: Request<()>| async {
            let res = Response::builder()
                .header(CONTENT_TYPE, "text/plain")
                .header(ETAG, "\"forever\"")
                .body(Stalled(30_000))
                .expect("response");
            Ok::<_, Infallible>(res)
        }));
    let pending = tokio::spawn(svc.clone().oneshot(get("/f", "gzip")));
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(cache.in_flight(), 1);
    pending.abort();
    let _ = pending.await;
    assert_eq!(
        cache.in_flight(),
        0,
        "the abandoned key must not stay in flight"
    );
}

/// A body of a known length that never yields: a client gone mid-compression.
struct Stalled(u64);

impl http_body::Body for Stalled {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        std::task::Poll::Pending
    }
    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.0)
    }
}

#[tokio::test]
async fn head_can_pass_through_as_head() {
    let gets = Arc::new(AtomicUsize::new(0));
    let g = gets.clone();
    let cache = VariantCache::new(1 << 20);
    let svc = PrecompressLayer::new()
        .cache(cache.clone())
        .head_as_get(false)
        .layer(service_fn(move |req: Request<()>| {
            let g = g.clone();
            async move {
                let head = req.method() == http::Method::HEAD;
                if !head {
                    g.fetch_add(1, Ordering::SeqCst);
                }
                let mut res = text_response(text(5, 30_000), Some("\"five\""));
                if head {
                    *res.body_mut() = Full::new(Bytes::new());
                }
                Ok::<_, Infallible>(res)
            }
        }));
    let head = || {
        Request::head("/h")
            .header(ACCEPT_ENCODING, "gzip")
            .body(())
            .expect("request")
    };
    // Before any GET: the identity's headers, and the inner Service saw a HEAD.
    let res = svc.clone().oneshot(head()).await.expect("infallible");
    assert!(res.headers().get(CONTENT_ENCODING).is_none());
    assert_eq!(res.headers()[CONTENT_LENGTH], "30000");
    assert_eq!(gets.load(Ordering::SeqCst), 0);
    assert_eq!(cache.encodings(), 0, "nothing is made from a HEAD");
    // After a GET made the variant, HEAD tells its headers.
    let got = svc
        .clone()
        .oneshot(get("/h", "gzip"))
        .await
        .expect("infallible");
    let len = got.headers()[CONTENT_LENGTH].clone();
    let res = svc.clone().oneshot(head()).await.expect("infallible");
    assert_eq!(res.headers()[CONTENT_ENCODING], "gzip");
    assert_eq!(res.headers()[CONTENT_LENGTH], len);
    let body = res.into_body().collect().await.expect("body").to_bytes();
    assert!(body.is_empty());
    assert_eq!(gets.load(Ordering::SeqCst), 1);
}
