//! The response cache against an origin whose answers each test sets: RFC 9111's rules,
//! RFC 5861's stale windows, coalescing, invalidation and the store's bounds.
#![cfg(feature = "cache")]

use bytes::Bytes;
use gatehouse_layers::cache::{Cache, CacheLayer};
use gatehouse_layers::upstream::{CacheStatus, CacheStatusWanted};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tower::{Layer, Service, ServiceExt};

type Answer =
    Arc<dyn Fn(&Request<()>) -> Result<Response<Full<Bytes>>, std::io::Error> + Send + Sync>;

/// An origin that answers with what the test last set, and remembers what it was asked.
#[derive(Clone)]
struct Origin {
    calls: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<Request<()>>>>,
    answer: Arc<Mutex<Answer>>,
    delay: Duration,
}

impl Origin {
    fn new() -> Origin {
        let o = Origin {
            calls: Arc::default(),
            seen: Arc::default(),
            answer: Arc::new(Mutex::new(Arc::new(|_: &Request<()>| {
                Ok(Response::new(Full::new(Bytes::new())))
            }))),
            delay: Duration::ZERO,
        };
        o.answers(200, &[("cache-control", "max-age=60")], "body");
        o
    }

    /// Answers every request with this status, these fields and this body.
    fn answers(&self, status: u16, fields: &[(&str, &str)], body: &str) {
        let fields: Vec<(String, String)> = fields
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        let body = Bytes::copy_from_slice(body.as_bytes());
        self.set(move |_| {
            let mut res = Response::new(Full::new(body.clone()));
            *res.status_mut() = StatusCode::from_u16(status).unwrap();
            for (n, v) in &fields {
                res.headers_mut().append(
                    http::HeaderName::from_bytes(n.as_bytes()).unwrap(),
                    v.parse().unwrap(),
                );
            }
            Ok(res)
        });
    }

    fn set(
        &self,
        f: impl Fn(&Request<()>) -> Result<Response<Full<Bytes>>, std::io::Error>
            + Send
            + Sync
            + 'static,
    ) {
        *self.answer.lock().unwrap() = Arc::new(f);
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn last(&self) -> HeaderMap {
        self.seen.lock().unwrap().last().unwrap().headers().clone()
    }
}

impl<B: Send + 'static> Service<Request<B>> for Origin {
    type Response = Response<Full<Bytes>>;
    type Error = std::io::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let req = req.map(|_| ());
        let this = self.clone();
        Box::pin(async move {
            this.calls.fetch_add(1, Ordering::SeqCst);
            if !this.delay.is_zero() {
                tokio::time::sleep(this.delay).await;
            }
            let f = this.answer.lock().unwrap().clone();
            let res = f(&req);
            this.seen.lock().unwrap().push(req);
            res
        })
    }
}

/// A request's body when it has none.
fn no_body() -> Empty<Bytes> {
    Empty::new()
}

struct Got {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
    cache: Option<CacheStatus>,
}

async fn get(svc: &Cache<Origin>, method: &str, uri: &str, fields: &[(&str, &str)]) -> Got {
    let mut b = Request::builder()
        .method(method)
        .uri(uri)
        .header("host", "example.com")
        // As the access log asks when it shows `$cache_status`.
        .extension(CacheStatusWanted);
    for (n, v) in fields {
        b = b.header(*n, *v);
    }
    let res = svc.clone().oneshot(b.body(no_body()).unwrap()).await;
    let res = match res {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    let status = res.status();
    let headers = res.headers().clone();
    let cache = res.extensions().get::<CacheStatus>().copied();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    Got {
        status,
        headers,
        body,
        cache,
    }
}

fn cache(origin: &Origin, layer: CacheLayer) -> Cache<Origin> {
    layer.cache_status_header(true).layer(origin.clone())
}

#[tokio::test]
async fn a_fresh_response_is_served_from_the_store_with_its_age() {
    let o = Origin::new();
    let c = cache(&o, CacheLayer::new());
    let first = get(&c, "GET", "/a", &[]).await;
    assert_eq!(first.cache, Some(CacheStatus::Miss));
    assert!(first.headers["cache-status"]
        .to_str()
        .unwrap()
        .contains("stored"));
    let hit = get(&c, "GET", "/a", &[]).await;
    assert_eq!(
        (hit.status, &hit.body[..], hit.cache),
        (StatusCode::OK, &b"body"[..], Some(CacheStatus::Hit))
    );
    assert_eq!(hit.headers["age"], "0");
    assert_eq!(hit.headers["cache-status"], "gatehouse; hit");
    assert_eq!(o.calls(), 1);
    // Another target, host or query is another key.
    get(&c, "GET", "/a?x=1", &[]).await;
    get(&c, "GET", "http://other.example/a", &[]).await;
    assert_eq!(o.calls(), 3);
    assert_eq!(c.store().entry_count(), 3);
}

#[tokio::test]
async fn a_hit_sends_one_age_counted_from_the_first_the_origin_sent() {
    let o = Origin::new();
    o.answers(
        200,
        &[
            ("cache-control", "max-age=600"),
            ("age", "30"),
            ("age", "5"),
        ],
        "body",
    );
    let c = cache(&o, CacheLayer::new());
    get(&c, "GET", "/", &[]).await;
    let hit = get(&c, "GET", "/", &[]).await;
    assert_eq!(hit.cache, Some(CacheStatus::Hit));
    let ages: Vec<u64> = hit
        .headers
        .get_all("age")
        .iter()
        .map(|v| v.to_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(ages.len(), 1, "{ages:?}");
    assert!((30..40).contains(&ages[0]), "{ages:?}");
}

#[tokio::test]
async fn what_a_shared_cache_must_not_store_is_not_stored() {
    for (fields, req) in [
        (vec![("cache-control", "no-store")], vec![]),
        (vec![("cache-control", "private, max-age=60")], vec![]),
        (
            vec![("cache-control", "max-age=60"), ("set-cookie", "a=b")],
            vec![],
        ),
        (vec![("cache-control", "max-age=60"), ("vary", "*")], vec![]),
        (
            vec![("cache-control", "max-age=60")],
            vec![("cache-control", "no-store")],
        ),
        // No freshness and a status with no heuristic.
        (
            vec![("last-modified", "Mon, 01 Jan 2024 00:00:00 GMT")],
            vec![],
        ),
    ] {
        let o = Origin::new();
        let status = if fields.len() == 1 && fields[0].0 == "last-modified" {
            302
        } else {
            200
        };
        o.answers(status, &fields, "x");
        let c = cache(&o, CacheLayer::new());
        get(&c, "GET", "/", &req).await;
        let again = get(&c, "GET", "/", &req).await;
        assert_eq!(o.calls(), 2, "{fields:?} {req:?}");
        assert_eq!(again.cache, Some(CacheStatus::Miss));
        assert!(!again.headers["cache-status"]
            .to_str()
            .unwrap()
            .contains("stored"));
    }
    // Authorization bypasses the cache unless it is part of the key.
    let o = Origin::new();
    let c = cache(&o, CacheLayer::new());
    let auth = [("authorization", "Bearer a")];
    assert_eq!(
        get(&c, "GET", "/", &auth).await.cache,
        Some(CacheStatus::Bypass)
    );
    get(&c, "GET", "/", &auth).await;
    assert_eq!(o.calls(), 2);
    let c = cache(&o, CacheLayer::new().store_authorized(true));
    get(&c, "GET", "/", &auth).await;
    assert_eq!(
        get(&c, "GET", "/", &auth).await.cache,
        Some(CacheStatus::Hit)
    );
    let other = get(&c, "GET", "/", &[("authorization", "Bearer b")]).await;
    assert_eq!(
        other.cache,
        Some(CacheStatus::Miss),
        "another user's credentials"
    );
    // A GET with a body goes upstream with it, every time: no key holds the body.
    let o = Origin::new();
    let c = cache(&o, CacheLayer::new());
    get(&c, "GET", "/search", &[]).await;
    for q in ["{\"q\":1}", "{\"q\":2}"] {
        let req = Request::get("/search")
            .header("host", "example.com")
            .header("content-length", q.len())
            .body(Full::new(Bytes::from(q)))
            .unwrap();
        let res = c.clone().oneshot(req).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        assert!(res.headers()["cache-status"]
            .to_str()
            .unwrap()
            .contains("fwd=bypass"));
    }
    assert_eq!(o.calls(), 3, "the bodies' requests went upstream");
    assert_eq!(
        get(&c, "GET", "/search", &[]).await.cache,
        Some(CacheStatus::Hit),
        "the stored answer to the request without a body stays"
    );
    // Set-Cookie is stored when allowed.
    o.answers(
        200,
        &[("cache-control", "max-age=60"), ("set-cookie", "a=b")],
        "x",
    );
    let c = cache(&o, CacheLayer::new().store_set_cookie(true));
    get(&c, "GET", "/c", &[]).await;
    assert_eq!(
        get(&c, "GET", "/c", &[]).await.cache,
        Some(CacheStatus::Hit)
    );
}

#[tokio::test]
async fn vary_files_each_variant_under_its_own_key() {
    let o = Origin::new();
    o.answers(
        200,
        &[("cache-control", "max-age=60"), ("vary", "Accept-Language")],
        "x",
    );
    let c = cache(&o, CacheLayer::new());
    let fr = [("accept-language", "fr")];
    let de = [("accept-language", "de")];
    get(&c, "GET", "/", &fr).await;
    assert_eq!(get(&c, "GET", "/", &fr).await.cache, Some(CacheStatus::Hit));
    assert_eq!(
        get(&c, "GET", "/", &de).await.cache,
        Some(CacheStatus::Miss)
    );
    assert_eq!(get(&c, "GET", "/", &de).await.cache, Some(CacheStatus::Hit));
    assert_eq!(
        get(&c, "GET", "/", &[]).await.cache,
        Some(CacheStatus::Miss)
    );
    assert_eq!(o.calls(), 3);
    // A configured key field splits entries without a Vary.
    let o = Origin::new();
    let c = cache(
        &o,
        CacheLayer::new().key_headers([http::HeaderName::from_static("x-tenant")]),
    );
    get(&c, "GET", "/", &[("x-tenant", "a")]).await;
    assert_eq!(
        get(&c, "GET", "/", &[("x-tenant", "b")]).await.cache,
        Some(CacheStatus::Miss)
    );
    assert_eq!(
        get(&c, "GET", "/", &[("x-tenant", "a")]).await.cache,
        Some(CacheStatus::Hit)
    );
}

#[tokio::test]
async fn a_stale_response_is_revalidated_and_a_304_updates_its_head() {
    let o = Origin::new();
    o.answers(
        200,
        &[
            ("cache-control", "max-age=0"),
            ("etag", "\"v1\""),
            ("x-version", "1"),
        ],
        "one",
    );
    let c = cache(&o, CacheLayer::new());
    get(&c, "GET", "/", &[]).await;
    o.answers(
        304,
        &[
            ("cache-control", "max-age=60"),
            ("etag", "\"v1\""),
            ("x-version", "2"),
        ],
        "",
    );
    let r = get(&c, "GET", "/", &[]).await;
    assert_eq!(o.last()["if-none-match"], "\"v1\"");
    assert_eq!(
        (r.status, &r.body[..], r.cache),
        (StatusCode::OK, &b"one"[..], Some(CacheStatus::Revalidated))
    );
    assert_eq!(r.headers["x-version"], "2");
    assert_eq!(r.headers["content-length"], "3");
    // Now fresh by the 304's max-age.
    let r = get(&c, "GET", "/", &[]).await;
    assert_eq!(
        (r.cache, &r.body[..]),
        (Some(CacheStatus::Hit), &b"one"[..])
    );
    assert_eq!(r.headers["x-version"], "2");
    assert_eq!(o.calls(), 2);
    // Last-Modified alone validates too; a 200 replaces the entry.
    let o = Origin::new();
    let lm = "Mon, 01 Jan 2024 00:00:00 GMT";
    o.answers(
        200,
        &[("cache-control", "max-age=0"), ("last-modified", lm)],
        "old",
    );
    let c = cache(&o, CacheLayer::new());
    get(&c, "GET", "/", &[]).await;
    o.answers(200, &[("cache-control", "max-age=60")], "new");
    let r = get(&c, "GET", "/", &[]).await;
    assert_eq!(o.last()["if-modified-since"], lm);
    assert_eq!(
        (r.cache, &r.body[..]),
        (Some(CacheStatus::Miss), &b"new"[..])
    );
    assert_eq!(&get(&c, "GET", "/", &[]).await.body[..], b"new");
}

#[tokio::test]
async fn a_304_that_changes_vary_files_the_entry_under_the_fields_it_names() {
    let o = Origin::new();
    let vary = |v| {
        [
            ("cache-control", "max-age=0"),
            ("etag", "\"v1\""),
            ("vary", v),
        ]
    };
    o.answers(200, &vary("accept-language"), "one");
    let c = cache(&o, CacheLayer::new());
    let asks = [("accept-language", "fr"), ("x-device", "phone")];
    get(&c, "GET", "/", &asks).await;
    o.answers(
        304,
        &[
            ("cache-control", "max-age=60"),
            ("etag", "\"v1\""),
            ("vary", "x-device"),
        ],
        "",
    );
    let r = get(&c, "GET", "/", &asks).await;
    assert_eq!(r.cache, Some(CacheStatus::Revalidated));
    // Found again, by the field the 304 named: the language no longer selects.
    for lang in ["fr", "de"] {
        let r = get(
            &c,
            "GET",
            "/",
            &[("accept-language", lang), ("x-device", "phone")],
        )
        .await;
        assert_eq!(
            (r.cache, &r.body[..]),
            (Some(CacheStatus::Hit), &b"one"[..]),
            "{lang}"
        );
    }
    o.answers(
        200,
        &[("cache-control", "max-age=60"), ("vary", "x-device")],
        "two",
    );
    let r = get(
        &c,
        "GET",
        "/",
        &[("accept-language", "fr"), ("x-device", "desk")],
    )
    .await;
    assert_eq!(
        (r.cache, &r.body[..]),
        (Some(CacheStatus::Miss), &b"two"[..])
    );
    assert_eq!(o.calls(), 3);
}

#[tokio::test]
async fn a_url_that_starts_to_vary_leaves_no_entry_behind() {
    let o = Origin::new();
    o.answers(
        200,
        &[("cache-control", "max-age=0"), ("etag", "\"v1\"")],
        "one",
    );
    let c = cache(&o, CacheLayer::new());
    let phone = [("x-device", "phone")];
    get(&c, "GET", "/", &phone).await;
    assert_eq!(c.store().entry_count(), 1);
    o.answers(
        304,
        &[
            ("cache-control", "max-age=60"),
            ("etag", "\"v1\""),
            ("vary", "x-device"),
        ],
        "",
    );
    let r = get(&c, "GET", "/", &phone).await;
    assert_eq!(r.cache, Some(CacheStatus::Revalidated));
    assert_eq!(
        c.store().entry_count(),
        1,
        "the entry filed before the URL had a Vary is gone"
    );
    let r = get(&c, "GET", "/", &phone).await;
    assert_eq!(
        (r.cache, &r.body[..]),
        (Some(CacheStatus::Hit), &b"one"[..])
    );
}

#[tokio::test]
async fn the_request_cache_control_is_obeyed_or_ignored_as_configured() {
    let o = Origin::new();
    let c = cache(&o, CacheLayer::new());
    get(&c, "GET", "/", &[]).await;
    for cc in ["no-cache", "max-age=0"] {
        let r = get(&c, "GET", "/", &[("cache-control", cc)]).await;
        assert_eq!(r.cache, Some(CacheStatus::Miss), "{cc}");
    }
    assert_eq!(o.calls(), 3);
    let c = cache(&o, CacheLayer::new().ignore_request_cache_control(true));
    get(&c, "GET", "/", &[]).await;
    let r = get(&c, "GET", "/", &[("cache-control", "no-cache")]).await;
    assert_eq!(r.cache, Some(CacheStatus::Hit));
    // only-if-cached: 504 with nothing stored, and the origin is not asked.
    let c = cache(&o, CacheLayer::new());
    let before = o.calls();
    let r = get(
        &c,
        "GET",
        "/nothing",
        &[("cache-control", "only-if-cached")],
    )
    .await;
    assert_eq!((r.status, o.calls()), (StatusCode::GATEWAY_TIMEOUT, before));
    // Logged as a miss, and counted as one.
    assert_eq!(r.cache, Some(CacheStatus::Miss));
    assert_eq!(c.store().stats().misses.load(Ordering::SeqCst), 1);
}

/// A cache whose entry for `/` ("old") is stale within its `stale-while-revalidate`.
async fn stale_within_its_window(o: &Origin) -> Cache<Origin> {
    o.answers(
        200,
        &[("cache-control", "max-age=0, stale-while-revalidate=60")],
        "old",
    );
    let c = cache(o, CacheLayer::new());
    get(&c, "GET", "/", &[]).await;
    c
}

/// Waits (up to 5 s) until the store has stored `n` responses, a refresh's among them.
async fn until_stored(c: &Cache<Origin>, n: u64) {
    for _ in 0..500 {
        if c.store().stats().stored.load(Ordering::SeqCst) == n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn stale_while_revalidate_serves_at_once_and_refreshes_behind() {
    let o = Origin::new();
    let c = stale_within_its_window(&o).await;
    o.answers(200, &[("cache-control", "max-age=60")], "new");
    let r = get(&c, "GET", "/", &[]).await;
    assert_eq!(
        (r.cache, &r.body[..]),
        (Some(CacheStatus::Stale), &b"old"[..])
    );
    until_stored(&c, 2).await;
    let r = get(&c, "GET", "/", &[]).await;
    assert_eq!(
        (r.cache, &r.body[..]),
        (Some(CacheStatus::Hit), &b"new"[..])
    );
    assert_eq!(o.calls(), 2);
    // The refresh is counted as one, not as a request that was revalidated.
    let stats = c.store().stats();
    assert_eq!(stats.refreshed.load(Ordering::SeqCst), 1);
    assert_eq!(stats.revalidated.load(Ordering::SeqCst), 0);
    // A route default applies where the response has none.
    let o = Origin::new();
    o.answers(200, &[("cache-control", "max-age=0")], "old");
    let c = cache(
        &o,
        CacheLayer::new().stale_while_revalidate(Duration::from_secs(60)),
    );
    get(&c, "GET", "/", &[]).await;
    assert_eq!(
        get(&c, "GET", "/", &[]).await.cache,
        Some(CacheStatus::Stale)
    );
}

#[tokio::test]
async fn stale_if_error_stands_in_for_failures_within_its_window_only() {
    let o = Origin::new();
    o.answers(
        200,
        &[("cache-control", "max-age=1, stale-if-error=1")],
        "kept",
    );
    let c = cache(&o, CacheLayer::new());
    get(&c, "GET", "/", &[]).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    o.answers(503, &[], "down");
    let r = get(&c, "GET", "/", &[]).await;
    assert_eq!(
        (r.status, &r.body[..], r.cache),
        (StatusCode::OK, &b"kept"[..], Some(CacheStatus::Stale))
    );
    assert!(r.headers["cache-status"]
        .to_str()
        .unwrap()
        .contains("stale-if-error-503"));
    o.set(|_| Err(std::io::Error::other("refused")));
    let r = get(&c, "GET", "/", &[]).await;
    assert_eq!(
        (r.status, r.cache),
        (StatusCode::OK, Some(CacheStatus::Stale))
    );
    // Past the window, the failure is the answer.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    o.answers(503, &[], "down");
    let r = get(&c, "GET", "/", &[]).await;
    assert_eq!(
        (r.status, &r.body[..]),
        (StatusCode::SERVICE_UNAVAILABLE, &b"down"[..])
    );
    // must-revalidate forbids it whatever the route's default.
    let o = Origin::new();
    o.answers(
        200,
        &[("cache-control", "max-age=0, must-revalidate")],
        "kept",
    );
    let c = cache(
        &o,
        CacheLayer::new().stale_if_error(Duration::from_secs(60)),
    );
    get(&c, "GET", "/", &[]).await;
    o.answers(502, &[], "down");
    assert_eq!(
        get(&c, "GET", "/", &[]).await.status,
        StatusCode::BAD_GATEWAY
    );
}

#[tokio::test]
async fn an_unsafe_method_that_succeeds_invalidates_its_target_and_location() {
    let o = Origin::new();
    let c = cache(&o, CacheLayer::new());
    for p in ["/a", "/b", "/c"] {
        get(&c, "GET", p, &[]).await;
    }
    o.answers(
        201,
        &[
            ("location", "/b"),
            ("content-location", "http://elsewhere.example/c"),
        ],
        "",
    );
    let r = get(&c, "POST", "/a", &[]).await;
    assert_eq!(r.cache, Some(CacheStatus::Bypass));
    o.answers(200, &[("cache-control", "max-age=60")], "body");
    assert_eq!(
        get(&c, "GET", "/a", &[]).await.cache,
        Some(CacheStatus::Miss)
    );
    assert_eq!(
        get(&c, "GET", "/b", &[]).await.cache,
        Some(CacheStatus::Miss)
    );
    assert_eq!(
        get(&c, "GET", "/c", &[]).await.cache,
        Some(CacheStatus::Hit),
        "another host's"
    );
    // A failed one invalidates nothing.
    o.answers(500, &[], "");
    get(&c, "DELETE", "/a", &[]).await;
    assert_eq!(
        get(&c, "GET", "/a", &[]).await.cache,
        Some(CacheStatus::Hit)
    );
}

/// With a disk tier, the target's file goes too: out of the index before the response
/// is answered (so no read brings it back), off the disk soon after (so a restart does
/// not), unlinked on the blocking pool rather than on the event loop.
#[tokio::test]
async fn an_unsafe_methods_success_removes_the_disk_copy_too() {
    let dir = tempfile::tempdir().unwrap();
    let o = Origin::new();
    o.answers(200, &[("cache-control", "max-age=600")], "stored");
    let c = cache(&o, CacheLayer::new().disk(dir.path(), 1 << 20).unwrap());
    get(&c, "GET", "/p", &[]).await;
    let entries = || {
        std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "entry"))
            })
            .count()
    };
    for _ in 0..500 {
        if entries() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(entries(), 1);
    o.answers(204, &[], "");
    get(&c, "DELETE", "/p", &[]).await;
    assert_eq!(c.store().disk_usage().map(|(_, f)| f), Some(0));
    for _ in 0..500 {
        if entries() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(entries(), 0, "unlinked");
    o.answers(200, &[("cache-control", "max-age=600")], "new");
    let again = cache(&o, CacheLayer::new().disk(dir.path(), 1 << 20).unwrap());
    let r = get(&again, "GET", "/p", &[]).await;
    assert_eq!(r.cache, Some(CacheStatus::Miss));
    assert_eq!(&r.body[..], b"new");
}

#[tokio::test]
async fn head_ranges_and_conditions_are_answered_from_a_stored_get() {
    let o = Origin::new();
    let lm = "Mon, 01 Jan 2024 00:00:00 GMT";
    o.answers(
        200,
        &[
            ("cache-control", "max-age=60"),
            ("etag", "\"e\""),
            ("last-modified", lm),
        ],
        "0123456789",
    );
    let c = cache(&o, CacheLayer::new());
    get(&c, "GET", "/", &[]).await;
    let h = get(&c, "HEAD", "/", &[]).await;
    assert_eq!(
        (h.status, h.body.len(), h.cache),
        (StatusCode::OK, 0, Some(CacheStatus::Hit))
    );
    assert_eq!(h.headers["content-length"], "10");
    let r = get(&c, "GET", "/", &[("range", "bytes=2-4")]).await;
    assert_eq!(
        (r.status, &r.body[..]),
        (StatusCode::PARTIAL_CONTENT, &b"234"[..])
    );
    assert_eq!(r.headers["content-range"], "bytes 2-4/10");
    let r = get(&c, "GET", "/", &[("range", "bytes=20-")]).await;
    assert_eq!(r.status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(r.headers["content-range"], "bytes */10");
    let r = get(
        &c,
        "GET",
        "/",
        &[("range", "bytes=2-4"), ("if-range", "\"other\"")],
    )
    .await;
    assert_eq!((r.status, r.body.len()), (StatusCode::OK, 10));
    let r = get(&c, "GET", "/", &[("if-none-match", "W/\"e\"")]).await;
    assert_eq!((r.status, r.body.len()), (StatusCode::NOT_MODIFIED, 0));
    let r = get(&c, "GET", "/", &[("if-modified-since", lm)]).await;
    assert_eq!(r.status, StatusCode::NOT_MODIFIED);
    let r = get(
        &c,
        "GET",
        "/",
        &[("if-none-match", "\"x\""), ("if-modified-since", lm)],
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "If-None-Match outranks If-Modified-Since"
    );
    assert_eq!(o.calls(), 1);
    // A HEAD miss stays a HEAD upstream and stores nothing.
    get(&c, "HEAD", "/h", &[]).await;
    assert_eq!(o.seen.lock().unwrap().last().unwrap().method(), "HEAD");
    assert_eq!(
        get(&c, "GET", "/h", &[]).await.cache,
        Some(CacheStatus::Miss)
    );
}

#[tokio::test]
async fn a_response_larger_than_the_object_bound_passes_unstored() {
    let o = Origin::new();
    o.answers(200, &[("cache-control", "max-age=60")], &"x".repeat(2000));
    let c = cache(&o, CacheLayer::new().max_object_bytes(1000));
    let r = get(&c, "GET", "/", &[]).await;
    assert_eq!(r.body.len(), 2000);
    get(&c, "GET", "/", &[]).await;
    assert_eq!(o.calls(), 2);
    assert_eq!(c.store().entry_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_misses_make_one_upstream_request() {
    let mut o = Origin::new();
    o.delay = Duration::from_millis(200);
    let c = cache(&o, CacheLayer::new());
    let mut tasks = Vec::new();
    for _ in 0..1000 {
        let c = c.clone();
        tasks.push(tokio::spawn(
            async move { get(&c, "GET", "/cold", &[]).await },
        ));
    }
    let mut statuses = std::collections::HashMap::new();
    for t in tasks {
        let r = t.await.unwrap();
        assert_eq!(&r.body[..], b"body");
        *statuses.entry(r.cache).or_insert(0) += 1;
    }
    assert_eq!(o.calls(), 1, "{statuses:?}");
    assert_eq!(statuses[&Some(CacheStatus::Miss)], 1);
    assert_eq!(c.store().stats().coalesced.load(Ordering::SeqCst), 999);
    assert_eq!(c.store().flights_in_progress(), 0);
    // Waiters for a response that may not be stored go upstream themselves; after the
    // lock timeout they stop waiting.
    o.answers(200, &[("cache-control", "no-store")], "x");
    let c = cache(
        &o,
        CacheLayer::new().coalesce(true, Duration::from_millis(50)),
    );
    let before = o.calls();
    let t0 = std::time::Instant::now();
    let rs = futures_join(&c, 10).await;
    assert!(rs.iter().all(|r| r.status == StatusCode::OK));
    assert_eq!(o.calls() - before, 10);
    assert!(
        t0.elapsed() < Duration::from_millis(1000),
        "{:?}",
        t0.elapsed()
    );
}

/// An origin answering `body` with `cache_control` and an ETag, and 304 to a request that
/// sends one back.
fn etag_validated(
    cache_control: &'static str,
) -> impl Fn(&Request<()>) -> Result<Response<Full<Bytes>>, std::io::Error> + Send + Sync + 'static
{
    move |req| {
        let mut res = Response::new(Full::new(Bytes::from_static(b"body")));
        if req.headers().contains_key("if-none-match") {
            *res.status_mut() = StatusCode::NOT_MODIFIED;
        }
        let h = res.headers_mut();
        h.insert("cache-control", cache_control.parse().unwrap());
        h.insert("etag", "\"v1\"".parse().unwrap());
        Ok(res)
    }
}

/// A popular entry going stale: the requests that find it so wait for one revalidation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_for_a_stale_entry_make_one_revalidation() {
    let mut o = Origin::new();
    o.delay = Duration::from_millis(200);
    o.set(etag_validated("max-age=1"));
    let c = cache(&o, CacheLayer::new());
    assert_eq!(
        get(&c, "GET", "/hot", &[]).await.cache,
        Some(CacheStatus::Miss)
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut tasks = Vec::new();
    for _ in 0..200 {
        let c = c.clone();
        tasks.push(tokio::spawn(
            async move { get(&c, "GET", "/hot", &[]).await },
        ));
    }
    let mut statuses = std::collections::HashMap::new();
    for t in tasks {
        let r = t.await.unwrap();
        assert_eq!((r.status, &r.body[..]), (StatusCode::OK, &b"body"[..]));
        *statuses.entry(r.cache).or_insert(0) += 1;
    }
    assert_eq!(o.calls(), 2, "{statuses:?}");
    assert_eq!(statuses[&Some(CacheStatus::Revalidated)], 1, "{statuses:?}");
    assert_eq!(statuses[&Some(CacheStatus::Hit)], 199, "{statuses:?}");
    assert!(o.last().contains_key("if-none-match"));
    assert_eq!(c.store().flights_in_progress(), 0);

    // An entry that must be revalidated every time is not waited for: the requests go
    // upstream side by side, not one after the other.
    o.set(etag_validated("no-cache"));
    get(&c, "GET", "/always", &[]).await;
    let before = o.calls();
    let t0 = std::time::Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let c = c.clone();
        tasks.push(tokio::spawn(
            async move { get(&c, "GET", "/always", &[]).await },
        ));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().cache, Some(CacheStatus::Revalidated));
    }
    assert_eq!(o.calls() - before, 10);
    assert!(
        t0.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t0.elapsed()
    );

    // Nor for requests that ask their own revalidation (max-age=0) of a fresh entry.
    let before = o.calls();
    let waited = c.store().stats().coalesced.load(Ordering::SeqCst);
    let t0 = std::time::Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            get(&c, "GET", "/hot", &[("cache-control", "max-age=0")]).await
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().status, StatusCode::OK);
    }
    assert_eq!(o.calls() - before, 10);
    let now = c.store().stats().coalesced.load(Ordering::SeqCst);
    assert_eq!(now, waited, "no request waited for another");
    assert!(
        t0.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t0.elapsed()
    );
}

async fn futures_join(c: &Cache<Origin>, n: usize) -> Vec<Got> {
    let mut tasks = Vec::new();
    for _ in 0..n {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            get(&c, "GET", "/nostore", &[]).await
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test]
async fn the_disk_tier_keeps_entries_for_the_next_store_with_their_original_times() {
    let dir = tempfile::tempdir().unwrap();
    let o = Origin::new();
    o.answers(
        200,
        &[
            ("cache-control", "max-age=2"),
            ("etag", "\"d\""),
            ("vary", "accept-language"),
        ],
        "kept",
    );
    let first = cache(&o, CacheLayer::new().disk(dir.path(), 1 << 20).unwrap());
    get(&first, "GET", "/d", &[("accept-language", "fr")]).await;
    for _ in 0..500 {
        if first
            .store()
            .disk_usage()
            .is_some_and(|(_, files)| files == 1)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(first);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // A new store on the same directory: a process started again.
    let second = cache(&o, CacheLayer::new().disk(dir.path(), 1 << 20).unwrap());
    assert_eq!(second.store().disk_usage().map(|(_, f)| f), Some(1));
    // Fifty at once after the restart: one read of the file, the others waiting for it.
    let at_once: Vec<_> = (0..50)
        .map(|_| {
            let c = second.clone();
            tokio::spawn(async move { get(&c, "GET", "/d", &[("accept-language", "fr")]).await })
        })
        .collect();
    for t in at_once {
        assert_eq!(t.await.unwrap().cache, Some(CacheStatus::Hit));
    }
    // (Those that start after the read find it in memory; how many waited varies.)
    assert_eq!(second.store().stats().disk_reads.load(Ordering::Relaxed), 1);
    let r = get(&second, "GET", "/d", &[("accept-language", "fr")]).await;
    assert_eq!(
        (r.cache, &r.body[..]),
        (Some(CacheStatus::Hit), &b"kept"[..])
    );
    assert_eq!(
        r.headers["age"], "1",
        "its age counts from when it was first fetched"
    );
    // Another language is another variant, not on disk.
    let r = get(&second, "GET", "/d", &[("accept-language", "de")]).await;
    assert_eq!(r.cache, Some(CacheStatus::Miss));
    assert_eq!(o.calls(), 2);
    // Stale by its original time: revalidated.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    o.answers(
        304,
        &[("cache-control", "max-age=60"), ("etag", "\"d\"")],
        "",
    );
    let r = get(&second, "GET", "/d", &[("accept-language", "fr")]).await;
    assert_eq!(
        (r.cache, &r.body[..]),
        (Some(CacheStatus::Revalidated), &b"kept"[..])
    );
    // A purge reaches the disk.
    assert!(second.store().invalidate("GET http://example.com/d") >= 1);
    let third = cache(&o, CacheLayer::new().disk(dir.path(), 1 << 20).unwrap());
    for _ in 0..500 {
        if third
            .store()
            .disk_usage()
            .is_some_and(|(_, files)| files == 0)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(third.store().disk_usage().map(|(_, f)| f), Some(0));
}

#[tokio::test]
async fn responses_being_copied_in_share_the_stores_budget() {
    // Two 6,000-byte responses at once into a 10,000-byte store: the second one is sent
    // but not copied, so concurrent large misses cannot grow memory past the bound.
    let o = Origin::new();
    let body = "x".repeat(6000);
    o.answers(
        200,
        &[("cache-control", "max-age=60"), ("content-length", "6000")],
        &body,
    );
    let c = cache(
        &o,
        CacheLayer::new().limits(10_000, 100).max_object_bytes(8000),
    );
    let call = |p: &'static str| {
        let c = c.clone();
        async move {
            let req = Request::builder()
                .uri(p)
                .header("host", "h")
                .body(no_body())
                .unwrap();
            c.oneshot(req).await.unwrap()
        }
    };
    let (a, b) = (call("/a").await, call("/b").await);
    assert_eq!(c.store().filling_bytes(), 6000);
    let stored: Vec<bool> = [&a, &b]
        .iter()
        .map(|r| {
            r.headers()["cache-status"]
                .to_str()
                .unwrap()
                .contains("stored")
        })
        .collect();
    assert_eq!(stored, [true, false]);
    for r in [a, b] {
        assert_eq!(
            r.into_body().collect().await.unwrap().to_bytes().len(),
            6000
        );
    }
    assert_eq!(c.store().filling_bytes(), 0, "released when done");
    assert_eq!(c.store().entry_count(), 1);
}

#[tokio::test]
async fn a_revalidation_never_stores_one_clients_cookie_and_obeys_a_new_private() {
    let o = Origin::new();
    o.answers(
        200,
        &[("cache-control", "max-age=0"), ("etag", "\"v\"")],
        "page",
    );
    let c = cache(&o, CacheLayer::new());
    get(&c, "GET", "/", &[]).await;
    // The 304 to client A sets A's session cookie: A gets it, the entry does not.
    o.answers(
        304,
        &[
            ("cache-control", "max-age=60"),
            ("etag", "\"v\""),
            ("set-cookie", "sid=A"),
        ],
        "",
    );
    let a = get(&c, "GET", "/", &[]).await;
    assert_eq!(a.cache, Some(CacheStatus::Revalidated));
    assert_eq!(a.headers["set-cookie"], "sid=A");
    let b = get(&c, "GET", "/", &[]).await;
    assert_eq!(
        (b.cache, &b.body[..]),
        (Some(CacheStatus::Hit), &b"page"[..])
    );
    assert!(
        !b.headers.contains_key("set-cookie"),
        "another client got A's cookie"
    );
    // A 304 that makes the response private takes it out of the shared store.
    let o = Origin::new();
    o.answers(
        200,
        &[("cache-control", "max-age=0"), ("etag", "\"v\"")],
        "page",
    );
    let c = cache(&o, CacheLayer::new());
    get(&c, "GET", "/", &[]).await;
    o.answers(
        304,
        &[("cache-control", "private, max-age=60"), ("etag", "\"v\"")],
        "",
    );
    assert_eq!(&get(&c, "GET", "/", &[]).await.body[..], b"page");
    assert_eq!(c.store().entry_count(), 0);
    // With store_set_cookie, the cookie goes to the client that caused the fetch only.
    let o = Origin::new();
    o.answers(
        200,
        &[("cache-control", "max-age=60"), ("set-cookie", "sid=first")],
        "x",
    );
    let c = cache(&o, CacheLayer::new().store_set_cookie(true));
    assert_eq!(
        get(&c, "GET", "/", &[]).await.headers["set-cookie"],
        "sid=first"
    );
    let hit = get(&c, "GET", "/", &[]).await;
    assert_eq!(hit.cache, Some(CacheStatus::Hit));
    assert!(!hit.headers.contains_key("set-cookie"));
}

#[tokio::test]
async fn credentials_stay_in_the_key_whatever_the_builders_order() {
    let o = Origin::new();
    let c = cache(
        &o,
        CacheLayer::new()
            .store_authorized(true)
            .key_headers([http::HeaderName::from_static("x-tenant")]),
    );
    get(&c, "GET", "/", &[("authorization", "Bearer a")]).await;
    let other = get(&c, "GET", "/", &[("authorization", "Bearer b")]).await;
    assert_eq!(
        other.cache,
        Some(CacheStatus::Miss),
        "user b answered from user a's entry"
    );
}

#[tokio::test]
async fn a_keyed_cookie_the_origin_could_read_otherwise_bypasses_the_cache() {
    let o = Origin::new();
    let c = cache(&o, CacheLayer::new().key_cookies(["lang".to_string()]));
    for cookie in ["lang=de; lang=fr", "lang =de"] {
        let r = get(&c, "GET", "/", &[("cookie", cookie)]).await;
        assert_eq!(r.cache, Some(CacheStatus::Bypass), "{cookie}");
    }
    assert_eq!(c.store().entry_count(), 0);
    get(&c, "GET", "/", &[("cookie", "lang=de")]).await;
    assert_eq!(
        get(&c, "GET", "/", &[("cookie", "lang=de")]).await.cache,
        Some(CacheStatus::Hit)
    );
}

/// The status is put in a response's extensions only when a layer above asks (the access
/// log does when it shows `$cache_status`): the first extension allocates a map per hit.
#[tokio::test]
async fn the_status_goes_in_the_extensions_only_when_asked() {
    let o = Origin::new();
    let c = cache(&o, CacheLayer::new());
    let send = |asked: bool| {
        let c = c.clone();
        async move {
            let mut b = Request::builder().uri("/s").header("host", "example.com");
            if asked {
                b = b.extension(CacheStatusWanted);
            }
            let r = c.oneshot(b.body(no_body()).unwrap()).await.unwrap();
            let status = r.extensions().get::<CacheStatus>().copied();
            r.into_body().collect().await.unwrap();
            status
        }
    };
    assert_eq!(send(false).await, None);
    assert_eq!(send(true).await, Some(CacheStatus::Hit));
    assert_eq!(send(false).await, None);
    assert_eq!(
        o.seen.lock().unwrap().len(),
        1,
        "the first request stored it"
    );
}

#[tokio::test]
async fn an_unsafe_method_over_tls_invalidates_the_entries_filed_under_https() {
    let o = Origin::new();
    let c = cache(&o, CacheLayer::new());
    let tls = |method: &str| {
        let mut r = Request::builder()
            .method(method)
            .uri("/t")
            .header("host", "example.com")
            .body(no_body())
            .unwrap();
        r.extensions_mut()
            .insert(gatehouse_layers::client::Https(true));
        r.extensions_mut().insert(CacheStatusWanted);
        r
    };
    // Each body read to its end: that is when a response is stored.
    let send = |method: &'static str| {
        let c = c.clone();
        async move {
            let r = c.oneshot(tls(method)).await.unwrap();
            let status = r.extensions().get::<CacheStatus>().copied();
            r.into_body().collect().await.unwrap();
            status
        }
    };
    send("GET").await;
    assert_eq!(send("GET").await, Some(CacheStatus::Hit));
    send("PUT").await;
    assert_eq!(send("GET").await, Some(CacheStatus::Miss));
}

/// Compression above the cache: each variant of a stored response is made once, with or
/// without an `ETag`, and leaves memory with the entry, whether it is purged or evicted.
#[cfg(feature = "precompress")]
#[tokio::test]
async fn compressed_variants_are_made_once_and_leave_with_their_entry() {
    use gatehouse_layers::precompress::PrecompressLayer;
    use std::io::Read;
    let o = Origin::new();
    let text = "a cached page, compressed once. ".repeat(200);
    o.answers(
        200,
        &[
            ("cache-control", "max-age=60"),
            ("content-type", "text/html"),
        ],
        &text,
    );
    let c = cache(&o, CacheLayer::new().limits(1 << 20, 4));
    let pre = PrecompressLayer::new();
    let variants = pre.variant_cache().clone();
    let svc = pre.layer(c.clone());
    let fetch = |path: &'static str| {
        let svc = svc.clone();
        async move {
            let req = Request::get(path)
                .header("host", "example.com")
                .header("accept-encoding", "gzip")
                .body(no_body())
                .unwrap();
            let res = svc.oneshot(req).await.expect("a response");
            assert_eq!(res.headers()["content-encoding"], "gzip");
            let gz = res.into_body().collect().await.unwrap().to_bytes();
            let mut plain = String::new();
            flate2::read::GzDecoder::new(&gz[..])
                .read_to_string(&mut plain)
                .unwrap();
            plain
        }
    };
    for _ in 0..5 {
        assert_eq!(fetch("/page").await, text);
    }
    assert_eq!(o.calls(), 1);
    assert_eq!(variants.encodings(), 1, "no ETag, and made once");
    variants.sync();
    assert_eq!(variants.entry_count(), 1);

    // Purged: the variant goes with the entry, and the next request makes both again.
    assert_eq!(c.store().invalidate("GET http://example.com/page"), 1);
    variants.sync();
    assert_eq!(variants.entry_count(), 0);
    assert_eq!(fetch("/page").await, text);
    assert_eq!((o.calls(), variants.encodings()), (2, 2));

    // Revalidated with a 304: the same body, and its variants stay.
    o.set(move |req| {
        let mut res = Response::new(Full::new(Bytes::from(
            "a page revalidated, compressed once. ".repeat(200),
        )));
        if req.headers().contains_key("if-none-match") {
            *res.status_mut() = StatusCode::NOT_MODIFIED;
        }
        let h = res.headers_mut();
        h.insert("cache-control", "max-age=1".parse().unwrap());
        h.insert("content-type", "text/html".parse().unwrap());
        h.insert("etag", "\"r1\"".parse().unwrap());
        Ok(res)
    });
    let revalidated = "a page revalidated, compressed once. ".repeat(200);
    assert_eq!(fetch("/r").await, revalidated);
    let made = variants.encodings();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(fetch("/r").await, revalidated);
    assert!(o.last().contains_key("if-none-match"), "a revalidation");
    assert_eq!(variants.encodings(), made, "no new compression after a 304");

    // Evicted: the store holds 4 entries, and others push this one out.
    for i in 0..40 {
        fetch(["/a", "/b", "/c", "/d", "/e", "/f", "/g", "/h"][i % 8]).await;
    }
    assert!(c.store().entry_count() <= 4);
    variants.sync();
    assert!(
        variants.entry_count() <= c.store().entry_count(),
        "{} variants for {} entries",
        variants.entry_count(),
        c.store().entry_count()
    );
}

/// The access log above the cache asks for the status when its format shows it (JSON
/// always), and its lines say what the cache did; a format that doesn't show it leaves the
/// responses without it.
#[cfg(feature = "access-log")]
#[tokio::test]
async fn the_access_log_asks_for_the_status_when_its_format_shows_it() {
    use gatehouse_layers::access_log::{AccessLog, AccessLogLayer, Destination, Format, LogWriter};
    let dir = tempfile::tempdir().unwrap();
    for (format, shows) in [
        (Format::Json, true),
        (
            Format::template("$request_uri $cache_status").unwrap(),
            true,
        ),
        (Format::Combined, false),
    ] {
        assert_eq!(format.shows_cache_status(), shows, "{format:?}");
        let path = dir
            .path()
            .join(format!("{shows}-{}.log", format!("{format:?}").len()));
        let writer = LogWriter::open(Destination::File(path.clone()), None, 1 << 20).unwrap();
        let o = Origin::new();
        let app = AccessLogLayer::new(AccessLog::new(writer.clone(), format.clone()))
            .layer(CacheLayer::new().layer(o.clone()));
        let mut said = Vec::new();
        for _ in 0..2 {
            let req = Request::get("/l")
                .header("host", "example.com")
                .body(no_body())
                .unwrap();
            let res = app.clone().oneshot(req).await.unwrap();
            said.push(res.extensions().get::<CacheStatus>().copied());
            res.into_body().collect().await.unwrap();
        }
        writer.close();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{format:?}: {text}");
        if shows {
            assert_eq!(
                said,
                [Some(CacheStatus::Miss), Some(CacheStatus::Hit)],
                "{format:?}"
            );
            assert!(
                lines[0].contains("MISS") && lines[1].contains("HIT"),
                "{format:?}: {text}"
            );
        } else {
            assert_eq!(said, [None, None]);
        }
        assert_eq!(
            o.seen.lock().unwrap().len(),
            1,
            "{format:?}: the second was a hit"
        );
    }
}

/// A body in frames of the given sizes, its length announced.
struct Frames {
    parts: std::collections::VecDeque<Bytes>,
    left: u64,
}

impl http_body::Body for Frames {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
        let part = self.parts.pop_front();
        if let Some(p) = &part {
            self.left -= p.len() as u64;
        }
        std::task::Poll::Ready(part.map(|p| Ok(http_body::Frame::data(p))))
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.left)
    }
}

/// An origin sending one fresh 200 in frames of `frame` bytes, whatever it is asked (it
/// ignores `Range`, as a server may), and keeping the fields of what it was asked.
#[derive(Clone)]
struct Framed {
    body: Bytes,
    frame: usize,
    asked: Arc<Mutex<Vec<HeaderMap>>>,
}

impl<B> Service<Request<B>> for Framed {
    type Response = Response<Frames>;
    type Error = std::io::Error;
    type Future = std::future::Ready<Result<Response<Frames>, std::io::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        self.asked.lock().unwrap().push(req.headers().clone());
        let parts = (0..self.body.len())
            .step_by(self.frame)
            .map(|i| self.body.slice(i..(i + self.frame).min(self.body.len())))
            .collect();
        let res = Response::builder()
            .header("cache-control", "max-age=60")
            .header("etag", "\"v\"")
            .header("content-length", self.body.len())
            .body(Frames {
                parts,
                left: self.body.len() as u64,
            })
            .unwrap();
        std::future::ready(Ok(res))
    }
}

/// What RFC 9110 §14.1.2 makes of one `bytes` range of a body of `len`: its first and
/// last offsets, or `None` when unsatisfiable.
fn satisfied(first: Option<u64>, last: Option<u64>, len: u64) -> Option<(u64, u64)> {
    match (first, last) {
        (None, Some(n)) => (n > 0 && len > 0).then(|| (len - n.min(len), len - 1)),
        (Some(a), b) => (a < len).then(|| (a, b.unwrap_or(u64::MAX).min(len - 1))),
        (None, None) => unreachable!(),
    }
}

#[tokio::test]
async fn a_range_on_a_miss_fetches_the_whole_stores_it_and_gets_its_part() {
    let whole: Bytes = (0..23u8).map(|i| b'a' + i).collect::<Vec<u8>>().into();
    let mut cases = 0;
    for len in [0usize, 1, 7, 23] {
        let body = whole.slice(..len);
        for frame in [1, 4, len.max(1)] {
            let mut ranges = Vec::new();
            for a in 0..=len as u64 + 1 {
                ranges.push((Some(a), None));
                ranges.push((None, Some(a)));
                for b in a..=len as u64 + 1 {
                    ranges.push((Some(a), Some(b)));
                }
            }
            // A bound under the whole: the copy is given up, the part still cut right.
            for max in [u64::MAX, len as u64 / 2] {
                for &(a, b) in &ranges {
                    cases += 1;
                    let spec = format!(
                        "bytes={}-{}",
                        a.map_or(String::new(), |a| a.to_string()),
                        b.map_or(String::new(), |b| b.to_string())
                    );
                    let origin = Framed {
                        body: body.clone(),
                        frame,
                        asked: Arc::default(),
                    };
                    let layer = CacheLayer::new().max_object_bytes(max);
                    let c = layer.layer(origin.clone());
                    let req = Request::get("/f")
                        .header("host", "example.com")
                        .header("range", &spec)
                        .body(no_body())
                        .unwrap();
                    let res = c.clone().oneshot(req).await.unwrap();
                    let (status, fields) = (res.status(), res.headers().clone());
                    let got = res.into_body().collect().await.unwrap().to_bytes();
                    let what = format!("{spec} of {len} bytes in frames of {frame}, max {max}");
                    // A range from the end is passed on: the object may be any size.
                    let widened = a.is_some_and(|a| a <= max);
                    let passed_on = origin.asked.lock().unwrap()[0].contains_key("range");
                    assert_eq!(passed_on, !widened, "{what}: Range sent upstream");
                    if !widened {
                        // The origin's whole 200, passed on as it came.
                        assert_eq!((status, &got), (StatusCode::OK, &body), "{what}");
                        continue;
                    }
                    match satisfied(a, b, len as u64) {
                        Some((x, y)) => {
                            assert_eq!(status, StatusCode::PARTIAL_CONTENT, "{what}");
                            assert_eq!(got, body.slice(x as usize..=y as usize), "{what}");
                            assert_eq!(
                                fields["content-range"],
                                format!("bytes {x}-{y}/{len}").as_str(),
                                "{what}"
                            );
                            assert_eq!(fields["content-length"], got.len().to_string().as_str());
                        }
                        None => {
                            assert_eq!(status, StatusCode::RANGE_NOT_SATISFIABLE, "{what}");
                            assert_eq!(got.len(), 0, "{what}");
                            assert_eq!(
                                fields["content-range"],
                                format!("bytes */{len}").as_str(),
                                "{what}"
                            );
                        }
                    }
                    // The whole was stored, unless it was over the bound.
                    let req = Request::get("/f")
                        .header("host", "example.com")
                        .body(no_body())
                        .unwrap();
                    let again = c.clone().oneshot(req).await.unwrap();
                    let again = again.into_body().collect().await.unwrap().to_bytes();
                    assert_eq!(again, body, "{what}");
                    let calls = origin.asked.lock().unwrap().len();
                    let stored = len as u64 <= max;
                    assert_eq!(
                        calls,
                        if stored { 1 } else { 2 },
                        "{what}: upstream requests"
                    );
                }
            }
        }
    }
    assert!(cases > 1000);
}

#[tokio::test]
async fn a_range_miss_whose_if_range_fails_gets_the_whole_which_is_stored() {
    let o = Origin::new();
    o.answers(
        200,
        &[
            ("cache-control", "max-age=60"),
            ("etag", "\"e\""),
            ("content-length", "10"),
        ],
        "0123456789",
    );
    let c = cache(&o, CacheLayer::new());
    let r = get(
        &c,
        "GET",
        "/",
        &[("range", "bytes=2-4"), ("if-range", "\"old\"")],
    )
    .await;
    assert_eq!((r.status, r.body.len()), (StatusCode::OK, 10));
    assert!(!o.last().contains_key("range") && !o.last().contains_key("if-range"));
    let r = get(
        &c,
        "GET",
        "/",
        &[("range", "bytes=2-4"), ("if-range", "\"e\"")],
    )
    .await;
    assert_eq!(
        (r.status, &r.body[..]),
        (StatusCode::PARTIAL_CONTENT, &b"234"[..])
    );
    assert_eq!((r.cache, o.calls()), (Some(CacheStatus::Hit), 1));
}

#[tokio::test]
async fn if_range_with_a_date_holds_only_for_a_strong_last_modified() {
    let o = Origin::new();
    let (lm, later) = (
        "Mon, 01 Jan 2024 00:00:00 GMT",
        "Mon, 01 Jan 2024 00:00:05 GMT",
    );
    // Last-Modified a second or more before Date: strong (RFC 9110 §8.8.2.2).
    for (date, holds) in [(later, true), (lm, false)] {
        o.answers(
            200,
            &[
                ("cache-control", "max-age=60"),
                ("last-modified", lm),
                ("date", date),
            ],
            "0123456789",
        );
        let c = cache(&o, CacheLayer::new());
        get(&c, "GET", "/", &[]).await;
        let r = get(&c, "GET", "/", &[("range", "bytes=2-4"), ("if-range", lm)]).await;
        let want = if holds {
            StatusCode::PARTIAL_CONTENT
        } else {
            StatusCode::OK
        };
        assert_eq!(r.status, want, "Date {date}");
    }
}

#[tokio::test]
async fn an_answer_to_a_range_passed_on_is_stored_only_if_it_is_the_whole() {
    let o = Origin::new();
    let c = cache(&o, CacheLayer::new());
    // A range from the end goes upstream as it came; the origin's 416 (or 206) answers
    // that range, not the URL, however long it says it may be kept.
    for (status, range) in [(416, "bytes=-0"), (206, "bytes=-3")] {
        o.answers(status, &[("cache-control", "max-age=60")], "");
        let r = get(&c, "GET", "/r", &[("range", range)]).await;
        assert_eq!(r.status.as_u16(), status);
        assert!(o.last().contains_key("range"));
    }
    o.answers(200, &[("cache-control", "max-age=60")], "whole");
    let r = get(&c, "GET", "/r", &[]).await;
    assert_eq!((r.status, &r.body[..]), (StatusCode::OK, &b"whole"[..]));
    assert_eq!(r.cache, Some(CacheStatus::Miss));
    // An origin that ignores the range sends the whole: that is stored.
    let r = get(&c, "GET", "/w", &[("range", "bytes=-3")]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        get(&c, "GET", "/w", &[]).await.cache,
        Some(CacheStatus::Hit)
    );
}

/// A client revalidating its own copy on a cold key: its `If-None-Match` and
/// `If-Modified-Since` are not passed on (a 304 could not be stored); the whole is fetched
/// and stored, and the conditions are evaluated against it (RFC 9110 §13.2.2's order, then
/// the range). Passed on as they came where nothing could be stored: a HEAD, a request
/// with `no-store`, a range passed on.
#[tokio::test]
async fn a_conditional_miss_fetches_the_whole_stores_it_and_answers_the_conditions() {
    let lm = "Mon, 01 Jan 2024 00:00:00 GMT";
    let (earlier, later) = (
        "Sun, 31 Dec 2023 00:00:00 GMT",
        "Tue, 02 Jan 2024 00:00:00 GMT",
    );
    let o = Origin::new();
    o.answers(
        200,
        &[
            ("cache-control", "max-age=60"),
            ("etag", "\"v1\""),
            ("last-modified", lm),
        ],
        "0123456789",
    );
    let c = cache(&o, CacheLayer::new());
    let (nm, ok, partial) = (
        StatusCode::NOT_MODIFIED,
        StatusCode::OK,
        StatusCode::PARTIAL_CONTENT,
    );
    // (method, request fields, status, body, conditions passed upstream, whole stored)
    type Case<'a> = (
        &'a str,
        &'a [(&'a str, &'a str)],
        StatusCode,
        &'a str,
        bool,
        bool,
    );
    let cases: &[Case] = &[
        ("GET", &[("if-none-match", "\"v1\"")], nm, "", false, true),
        ("GET", &[("if-none-match", "W/\"v1\"")], nm, "", false, true),
        (
            "GET",
            &[("if-none-match", "\"a\", \"v1\"")],
            nm,
            "",
            false,
            true,
        ),
        ("GET", &[("if-none-match", "*")], nm, "", false, true),
        (
            "GET",
            &[("if-none-match", "\"v2\"")],
            ok,
            "0123456789",
            false,
            true,
        ),
        ("GET", &[("if-modified-since", lm)], nm, "", false, true),
        ("GET", &[("if-modified-since", later)], nm, "", false, true),
        (
            "GET",
            &[("if-modified-since", earlier)],
            ok,
            "0123456789",
            false,
            true,
        ),
        (
            "GET",
            &[("if-none-match", "\"v2\""), ("if-modified-since", lm)],
            ok,
            "0123456789",
            false,
            true,
        ),
        (
            "GET",
            &[("if-none-match", "\"v1\""), ("range", "bytes=2-4")],
            nm,
            "",
            false,
            true,
        ),
        (
            "GET",
            &[("if-none-match", "\"v2\""), ("range", "bytes=2-4")],
            partial,
            "234",
            false,
            true,
        ),
        // The origin here ignores conditions: its 200 is what the client gets.
        (
            "GET",
            &[("if-none-match", "\"v1\""), ("cache-control", "no-store")],
            ok,
            "0123456789",
            true,
            false,
        ),
        // This origin sends a body even to a HEAD; a server drops it.
        (
            "HEAD",
            &[("if-none-match", "\"v1\"")],
            ok,
            "0123456789",
            true,
            false,
        ),
        (
            "GET",
            &[("if-none-match", "\"v1\""), ("range", "bytes=-3")],
            ok,
            "0123456789",
            true,
            // This origin answered with the whole, which is stored.
            true,
        ),
    ];
    for (i, (method, fields, status, body, passed, stored)) in cases.iter().enumerate() {
        let what = format!("{method} {fields:?}");
        let path = format!("/c{i}");
        let before = o.calls();
        let r = get(&c, method, &path, fields).await;
        assert_eq!(
            (r.status, &r.body[..]),
            (*status, body.as_bytes()),
            "{what}"
        );
        assert_eq!(o.calls(), before + 1, "{what}");
        let sent = o.last();
        assert_eq!(
            sent.contains_key("if-none-match") || sent.contains_key("if-modified-since"),
            *passed,
            "{what}: conditions sent upstream"
        );
        assert_eq!(r.cache, Some(CacheStatus::Miss), "{what}");
        if r.status == nm {
            assert_eq!(r.headers["etag"], "\"v1\"", "{what}");
            assert_eq!(r.headers["cache-control"], "max-age=60", "{what}");
            assert!(!r.headers.contains_key("content-length"), "{what}");
        }
        let again = get(&c, "GET", &path, &[]).await;
        assert_eq!(&again.body[..], b"0123456789", "{what}: the whole");
        assert_eq!(
            again.cache == Some(CacheStatus::Hit),
            *stored,
            "{what}: stored"
        );
        // And the client's copy now revalidates against the stored one.
        if *stored {
            let calls = o.calls();
            let r = get(&c, "GET", &path, &[("if-none-match", "\"v1\"")]).await;
            assert_eq!((r.status, r.cache), (nm, Some(CacheStatus::Hit)), "{what}");
            assert_eq!(o.calls(), calls, "{what}");
        }
    }

    // A response that is not stored goes out whole, as nginx sends it: answering the
    // conditions would have read it for nothing (and closed a long one's connection).
    // Not stored: too large, or not storable.
    let c = cache(&o, CacheLayer::new().max_object_bytes(5));
    for (path, cc) in [("/large", "max-age=60"), ("/private", "private")] {
        o.answers(
            200,
            &[
                ("cache-control", cc),
                ("etag", "\"v1\""),
                ("content-length", "10"),
            ],
            "0123456789",
        );
        let r = get(&c, "GET", path, &[("if-none-match", "\"v1\"")]).await;
        assert_eq!((r.status, &r.body[..]), (ok, &b"0123456789"[..]), "{path}");
        // Nor is a range cut from it: the conditions come first (RFC 9110 §13.2.2).
        let fields = [("if-none-match", "\"v1\""), ("range", "bytes=2-4")];
        let r = get(&c, "GET", path, &fields).await;
        assert_eq!((r.status, &r.body[..]), (ok, &b"0123456789"[..]), "{path}");
        let calls = o.calls();
        let again = get(&c, "GET", path, &[]).await;
        assert_eq!((again.status, again.cache), (ok, Some(CacheStatus::Miss)));
        assert_eq!(o.calls(), calls + 1, "{path}");
    }
}

/// The background refresh of a stale entry without validators sends neither the client's
/// conditions nor its range: their answer (a 304 for the client's copy, a part) could not
/// be stored, and the entry would stay stale.
#[tokio::test]
async fn a_refresh_leaves_the_clients_conditions_and_range_behind() {
    let o = Origin::new();
    let c = stale_within_its_window(&o).await;
    // An origin that honours them: a 304 to any If-None-Match, a part to a range.
    o.set(|req| {
        let mut res = Response::new(Full::new(Bytes::from_static(b"new")));
        res.headers_mut()
            .insert("cache-control", "max-age=60".parse().unwrap());
        if req.headers().contains_key("if-none-match") {
            *res.status_mut() = StatusCode::NOT_MODIFIED;
        } else if req.headers().contains_key("range") {
            *res.status_mut() = StatusCode::PARTIAL_CONTENT;
            res.headers_mut()
                .insert("content-range", "bytes 0-0/3".parse().unwrap());
        }
        Ok(res)
    });
    let fields = [("if-none-match", "\"mine\""), ("range", "bytes=0-0")];
    let r = get(&c, "GET", "/", &fields).await;
    assert_eq!(
        (r.status, r.cache, &r.body[..]),
        (
            StatusCode::PARTIAL_CONTENT,
            Some(CacheStatus::Stale),
            &b"o"[..]
        )
    );
    until_stored(&c, 2).await;
    let sent = o.last();
    assert!(!sent.contains_key("if-none-match") && !sent.contains_key("range"));
    let r = get(&c, "GET", "/", &[]).await;
    assert_eq!(
        (r.cache, &r.body[..]),
        (Some(CacheStatus::Hit), &b"new"[..])
    );
    assert_eq!(o.calls(), 2);
}

/// `If-Match` and `If-Unmodified-Since` are the origin's to evaluate (RFC 9111 §4.3.2): they
/// go upstream, and a 412 about one client's copy, however fresh its headers say it is, is
/// never stored for the URL (nor is any answer to them but a whole 200).
#[tokio::test]
async fn an_answer_to_if_match_or_if_unmodified_since_is_stored_only_if_whole() {
    let lm = "Mon, 01 Jan 2024 00:00:00 GMT";
    let o = Origin::new();
    o.set(move |req| {
        let h = req.headers();
        let failed = h.get("if-match").is_some_and(|v| v != "\"v1\"")
            || h.get("if-unmodified-since").is_some_and(|v| v != lm);
        let mut res = Response::new(Full::new(Bytes::from_static(b"0123456789")));
        if failed {
            *res.status_mut() = StatusCode::PRECONDITION_FAILED;
        }
        for (n, v) in [
            ("cache-control", "max-age=60"),
            ("etag", "\"v1\""),
            ("last-modified", lm),
        ] {
            res.headers_mut().insert(n, v.parse().unwrap());
        }
        Ok(res)
    });
    let c = cache(&o, CacheLayer::new());
    let failing: [&[(&str, &str)]; 3] = [
        &[("if-match", "\"nope\"")],
        &[("if-unmodified-since", "Sun, 31 Dec 2023 00:00:00 GMT")],
        &[("if-match", "\"nope\""), ("range", "bytes=2-4")],
    ];
    for (i, fields) in failing.iter().enumerate() {
        let path = format!("/f{i}");
        let r = get(&c, "GET", &path, fields).await;
        assert_eq!(r.status, StatusCode::PRECONDITION_FAILED, "{fields:?}");
        let sent = o.last();
        assert!(sent.contains_key("if-match") || sent.contains_key("if-unmodified-since"));
        let again = get(&c, "GET", &path, &[]).await;
        assert_eq!(
            (again.status, again.cache),
            (StatusCode::OK, Some(CacheStatus::Miss)),
            "{fields:?}: the 412 was stored"
        );
    }
    // A whole 200 to them is the resource's, and is stored.
    let r = get(&c, "GET", "/ok", &[("if-match", "\"v1\"")]).await;
    assert_eq!(
        (r.status, &r.body[..]),
        (StatusCode::OK, &b"0123456789"[..])
    );
    let again = get(&c, "GET", "/ok", &[]).await;
    assert_eq!(again.cache, Some(CacheStatus::Hit));
}

/// A request whose answer is its own (a 412 to its `If-Match`, a 206 to a range passed on)
/// could not serve the requests that wait for its fetch: it never leads one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_answer_is_its_own_never_leads_a_fetch_others_wait_for() {
    let mut o = Origin::new();
    o.delay = Duration::from_millis(200);
    o.set(|req| {
        let failed = req.headers().get("if-match").is_some_and(|v| v != "\"v1\"");
        let suffix = req.headers().get("range").is_some_and(|v| v == "bytes=-3");
        let body: &'static [u8] = if suffix { b"789" } else { b"0123456789" };
        let mut res = Response::new(Full::new(Bytes::from_static(body)));
        if failed {
            *res.status_mut() = StatusCode::PRECONDITION_FAILED;
        } else if suffix {
            *res.status_mut() = StatusCode::PARTIAL_CONTENT;
            let cr = "bytes 7-9/10".parse().unwrap();
            res.headers_mut().insert("content-range", cr);
        }
        let h = res.headers_mut();
        h.insert("cache-control", "max-age=60".parse().unwrap());
        h.insert("etag", "\"v1\"".parse().unwrap());
        Ok(res)
    });
    let c = cache(&o, CacheLayer::new());
    for (path, own) in [
        ("/if-match", ("if-match", "\"nope\"")),
        ("/suffix", ("range", "bytes=-3")),
    ] {
        let before = o.calls();
        let first = {
            let c = c.clone();
            tokio::spawn(async move { get(&c, "GET", path, &[own]).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let rs = {
            let mut tasks = Vec::new();
            for _ in 0..50 {
                let c = c.clone();
                tasks.push(tokio::spawn(async move { get(&c, "GET", path, &[]).await }));
            }
            let mut rs = Vec::new();
            for t in tasks {
                rs.push(t.await.unwrap());
            }
            rs
        };
        let first = first.await.unwrap();
        assert!(first.status.as_u16() == 412 || first.status.as_u16() == 206);
        assert!(rs
            .iter()
            .all(|r| r.status == StatusCode::OK && &r.body[..] == b"0123456789"));
        // Its own, and one for the 50 others.
        assert_eq!(o.calls() - before, 2, "{path}");
    }
    // It may still wait for a fetch already going, and be answered from what that stored.
    let before = o.calls();
    let lead = {
        let c = c.clone();
        tokio::spawn(async move { get(&c, "GET", "/waits", &[]).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let r = get(&c, "GET", "/waits", &[("range", "bytes=-3")]).await;
    assert_eq!(lead.await.unwrap().status, StatusCode::OK);
    assert_eq!(
        (r.status, &r.body[..], r.cache),
        (
            StatusCode::PARTIAL_CONTENT,
            &b"789"[..],
            Some(CacheStatus::Hit)
        )
    );
    assert_eq!(o.calls() - before, 1);
    assert_eq!(c.store().flights_in_progress(), 0);
}

/// RFC 9111 §5.2.1.5: no part of the response to a `no-store` request is stored, and
/// what is stored stays; the client's conditions left behind by a revalidation it can't
/// store leave the 200 whole (§13.2.2: no range past unanswered conditions).
#[tokio::test]
async fn a_no_store_request_neither_updates_nor_evicts_what_is_stored() {
    let o = Origin::new();
    o.set(etag_validated("max-age=0"));
    let c = cache(&o, CacheLayer::new());
    get(&c, "GET", "/", &[]).await;
    let r = get(&c, "GET", "/", &[("cache-control", "no-store")]).await;
    assert_eq!(o.last()["if-none-match"], "\"v1\"");
    assert_eq!((r.status, &r.body[..]), (StatusCode::OK, &b"body"[..]));
    let r = get(&c, "GET", "/", &[]).await;
    assert_eq!(
        r.cache,
        Some(CacheStatus::Revalidated),
        "the no-store request's 304 evicted the entry"
    );
    // The origin has a new version; a no-store client already holding it asks for a range.
    o.answers(
        200,
        &[("cache-control", "max-age=0"), ("etag", "\"v2\"")],
        "0123456789",
    );
    let r = get(
        &c,
        "GET",
        "/",
        &[
            ("cache-control", "no-cache, no-store"),
            ("if-none-match", "\"v2\""),
            ("range", "bytes=0-4"),
        ],
    )
    .await;
    assert_eq!(o.last()["if-none-match"], "\"v1\"");
    assert_eq!(
        (r.status, &r.body[..]),
        (StatusCode::OK, &b"0123456789"[..])
    );
}

/// RFC 9110 §13.1.2: `If-None-Match: *` is false for any current representation, with
/// an ETag or without.
#[tokio::test]
async fn if_none_match_star_matches_a_stored_response_without_an_etag() {
    let o = Origin::new();
    let c = cache(&o, CacheLayer::new());
    get(&c, "GET", "/", &[]).await;
    let r = get(&c, "GET", "/", &[("if-none-match", "*")]).await;
    assert_eq!(
        (r.status, &r.body[..], r.cache),
        (StatusCode::NOT_MODIFIED, &b""[..], Some(CacheStatus::Hit))
    );
    let r = get(&c, "GET", "/", &[("if-none-match", "\"other\"")]).await;
    assert_eq!(r.status, StatusCode::OK);
}

/// Found in review: a revalidation whose 304 made the entry `private` took it out of
/// memory only, and the next request read the disk tier's copy back and served it.
#[tokio::test]
async fn an_entry_a_revalidation_made_unstorable_leaves_the_disk_too() {
    let dir = tempfile::tempdir().unwrap();
    let o = Origin::new();
    o.answers(
        200,
        &[("cache-control", "max-age=600"), ("etag", "\"p\"")],
        "shared once",
    );
    let c = cache(&o, CacheLayer::new().disk(dir.path(), 1 << 20).unwrap());
    get(&c, "GET", "/p", &[]).await;
    for _ in 0..500 {
        if c.store().disk_usage().is_some_and(|(_, files)| files == 1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(c.store().disk_usage().map(|(_, f)| f), Some(1));
    o.answers(304, &[("cache-control", "private"), ("etag", "\"p\"")], "");
    let r = get(&c, "GET", "/p", &[("cache-control", "no-cache")]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(c.store().disk_usage().map(|(_, f)| f), Some(0));
    o.answers(200, &[("cache-control", "private")], "yours");
    let r = get(&c, "GET", "/p", &[]).await;
    assert_eq!(r.cache, Some(CacheStatus::Miss));
    assert_eq!(&r.body[..], b"yours");
    assert_eq!(o.calls(), 3);
}
