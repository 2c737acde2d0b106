//! `[routes.cache]`: the response cache on a proxy route, through the server, against
//! backends the tests start and stop: hits, coalescing over real connections, stale
//! content with the backend gone, purging on the admin listener, the access log's
//! `$cache_status`, metrics and configuration errors.

use super::common::*;
use axum::extract::Request as AxumRequest;
use axum::routing::any;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A backend that can be killed: its runtime is dropped, which closes its listener and
/// every connection.
struct Killable {
    addr: SocketAddr,
    calls: Arc<AtomicUsize>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Killable {
    /// Answers every request with `cache_control` and the path as the body, after `delay`.
    fn start(cache_control: &'static str, delay: Duration) -> Killable {
        Killable::start_padded(cache_control, delay, 0)
    }

    /// As [`Killable::start`], the body padded with `pad` bytes.
    fn start_padded(cache_control: &'static str, delay: Duration, pad: usize) -> Killable {
        let listener = loopback();
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let app = axum::Router::new().fallback(any(move |req: AxumRequest| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                (
                    [
                        ("cache-control", cache_control),
                        ("etag", "\"v1\""),
                        ("content-type", "text/plain"),
                    ],
                    format!("body of {}{}", req.uri().path(), "x".repeat(pad)),
                )
            }
        }));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let l = tokio::net::TcpListener::from_std(listener).unwrap();
                tokio::select! {
                    _ = axum::serve(l, app) => {}
                    _ = rx => {}
                }
            });
            rt.shutdown_background();
        });
        Killable {
            addr,
            calls,
            stop: Some(tx),
            thread: Some(thread),
        }
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn kill(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Killable {
    fn drop(&mut self) {
        self.kill();
    }
}

fn cached(up: SocketAddr, cache: &str) -> TestServer {
    TestServer::start(
        &std::env::temp_dir(),
        &format!(
            "[[routes]]\nname = \"api\"\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n\
             [routes.cache]\ncache_status_header = true\n{cache}\n"
        ),
    )
}

#[test]
fn a_proxy_route_with_a_cache_answers_repeats_from_memory() {
    let b = Killable::start("max-age=600", Duration::ZERO);
    let s = cached(b.addr, "");
    let first = s.get("/a");
    assert_eq!(
        (first.status, first.text()),
        (200, "body of /a".to_string())
    );
    assert!(first
        .header("cache-status")
        .unwrap()
        .contains("fwd=uri-miss"));
    for _ in 0..5 {
        let r = s.get("/a");
        assert_eq!((r.status, r.text()), (200, "body of /a".to_string()));
        assert_eq!(r.header("cache-status"), Some("gatehouse; hit"));
        assert!(r.header("age").is_some());
    }
    assert_eq!(b.calls(), 1);
    // HEAD and a range from the stored GET; another path is another key.
    assert_eq!(s.head("/a").header("content-length"), Some("10"));
    let r = s.get_with("/a", "Range: bytes=0-3\r\n");
    assert_eq!((r.status, r.text()), (206, "body".to_string()));
    s.get("/b");
    assert_eq!(b.calls(), 2);
    // A POST passes through and invalidates the target.
    let r = send(
        s.addr,
        "POST /a HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    assert!(s
        .get("/a")
        .header("cache-status")
        .unwrap()
        .contains("fwd=uri-miss"));
    assert_eq!(b.calls(), 4);
}

/// With a field in the keys, a POST's success invalidates the URL for every value of it
/// (RFC 9111 §4.4), not only the poster's: another user's stored answer is fetched again.
#[test]
fn an_unsafe_method_invalidates_the_url_under_every_keyed_value() {
    let b = Killable::start("max-age=600", Duration::ZERO);
    let s = cached(b.addr, "key_headers = [\"x-tenant\"]");
    let status = |tenant: &str| {
        let r = s.get_with("/a", &format!("X-Tenant: {tenant}\r\n"));
        assert_eq!(r.status, 200);
        r.header("cache-status").unwrap_or_default().to_string()
    };
    assert!(status("1").contains("fwd=uri-miss"));
    assert!(status("2").contains("fwd=uri-miss"));
    assert_eq!(status("2"), "gatehouse; hit");
    assert_eq!(b.calls(), 2);
    let r = send(
        s.addr,
        "POST /a HTTP/1.1\r\nHost: test\r\nX-Tenant: 1\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    assert!(status("2").contains("fwd=uri-miss"), "tenant 2's copy went");
    assert!(status("1").contains("fwd=uri-miss"));
    assert_eq!(status("2"), "gatehouse; hit");
    assert_eq!(b.calls(), 5);
    // Another URL's entries stay.
    assert!(s
        .get_with("/b", "X-Tenant: 2\r\n")
        .header("cache-status")
        .unwrap()
        .contains("fwd=uri-miss"));
    send(
        s.addr,
        "POST /a HTTP/1.1\r\nHost: test\r\nX-Tenant: 1\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(
        s.get_with("/b", "X-Tenant: 2\r\n").header("cache-status"),
        Some("gatehouse; hit")
    );
}

#[test]
fn a_range_on_a_miss_is_cut_from_the_whole_which_is_stored() {
    let b = Killable::start_padded("max-age=600", Duration::ZERO, 100_000);
    let s = cached(b.addr, "");
    let r = s.get_with("/r", "Range: bytes=5-9\r\n");
    assert_eq!((r.status, r.text()), (206, "of /r".to_string()));
    assert_eq!(r.header("content-range"), Some("bytes 5-9/100010"));
    let r = s.get_with("/r", "Range: bytes=-3\r\n");
    assert_eq!((r.status, r.text()), (206, "xxx".to_string()));
    assert_eq!(r.header("cache-status"), Some("gatehouse; hit"));
    let r = s.get("/r");
    assert_eq!((r.status, r.body.len()), (200, 100_010));
    assert_eq!(b.calls(), 1, "the range's miss stored the whole");
    // Past the end: a 416, whose body the server never reads, and the whole still stored.
    let r = s.get_with("/q", "Range: bytes=200000-\r\n");
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */100010"));
    let r = s.get("/q");
    assert_eq!((r.status, r.body.len()), (200, 100_010));
    assert_eq!(b.calls(), 2, "the 416's miss stored the whole");
    // From the end: passed on (the origin, which knows no ranges, sends the whole).
    let r = s.get_with("/e", "Range: bytes=-3\r\n");
    assert_eq!((r.status, r.body.len()), (200, 100_010));
}

/// Reloads `s` with the route of [`cached`] under `name`, its `[routes.cache]` `cache`.
fn reload_cached(s: &TestServer, up: SocketAddr, name: &str, cache: &str) {
    let toml = format!(
        "root = {:?}\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\nworkers = 1\n\
         [[routes]]\nname = \"{name}\"\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n\
         [routes.cache]\ncache_status_header = true\n{cache}\n",
        std::env::temp_dir().display().to_string()
    );
    s.router.reload(&load_config(toml).unwrap()).unwrap();
}

#[test]
fn a_reload_keeps_a_routes_cached_responses_unless_its_cache_settings_change() {
    let b = Killable::start("max-age=600", Duration::ZERO);
    let s = cached(b.addr, "");
    let hit = |s: &TestServer| s.get("/a").header("cache-status") == Some("gatehouse; hit");
    assert!(!hit(&s));
    assert!(hit(&s));
    // The same route and settings, in a new table: still a hit.
    reload_cached(&s, b.addr, "api", "");
    assert!(
        hit(&s),
        "a reload with unchanged settings emptied the cache"
    );
    // How stored answers are used, not what they are: kept.
    reload_cached(&s, b.addr, "api", "stale_if_error = \"1m\"\nlock = false");
    assert!(hit(&s));
    assert_eq!(b.calls(), 1);
    // Another upstream: what it would answer is not what was stored.
    let other = Killable::start("max-age=600", Duration::ZERO);
    reload_cached(&s, other.addr, "api", "");
    assert!(!hit(&s));
    assert_eq!(other.calls(), 1);
    reload_cached(&s, b.addr, "api", "");
    assert!(!hit(&s));
    assert_eq!(b.calls(), 2);
    // A key field more: what was stored may not be what the new key would keep apart.
    reload_cached(&s, b.addr, "api", "key_headers = [\"x-user\"]");
    assert!(!hit(&s));
    assert_eq!(b.calls(), 3);
    assert!(hit(&s));
    // Another route (a new name) starts empty, as does a changed bound.
    reload_cached(&s, b.addr, "other", "key_headers = [\"x-user\"]");
    assert!(!hit(&s));
    reload_cached(
        &s,
        b.addr,
        "other",
        "key_headers = [\"x-user\"]\nmax_entries = 10",
    );
    assert!(!hit(&s));
    assert!(hit(&s));
    assert_eq!(b.calls(), 5);
}

#[test]
fn a_thousand_concurrent_requests_for_a_cold_key_make_one_upstream_request() {
    let b = Killable::start("max-age=600", Duration::from_millis(300));
    let s = cached(b.addr, "");
    let addr = s.addr;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let bodies: Vec<String> = rt.block_on(async move {
        let mut tasks = Vec::new();
        for _ in 0..1000 {
            tasks.push(tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
                c.write_all(b"GET /cold HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
                    .await
                    .unwrap();
                let mut out = Vec::new();
                c.read_to_end(&mut out).await.unwrap();
                String::from_utf8_lossy(&out).into_owned()
            }));
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    let ok = bodies
        .iter()
        .filter(|r| r.starts_with("HTTP/1.1 200") && r.ends_with("body of /cold"))
        .count();
    assert_eq!(ok, 1000);
    assert_eq!(b.calls(), 1, "upstream requests for one cold key");
}

#[test]
fn stale_content_is_served_while_the_backend_is_down_then_502() {
    let mut b = Killable::start("max-age=1", Duration::ZERO);
    let s = cached(b.addr, "stale_if_error = \"2s\"");
    assert_eq!(s.get("/page").status, 200);
    b.kill();
    std::thread::sleep(Duration::from_millis(1100));
    // Stale (past max-age=1) and the backend refuses: the stored page stands in.
    let r = s.get("/page");
    assert_eq!((r.status, r.text()), (200, "body of /page".to_string()));
    assert!(
        r.header("cache-status").unwrap().contains("stale-if-error"),
        "{:?}",
        r.header("cache-status")
    );
    // Past max-age + stale-if-error, the failure is the answer.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = s.get("/page");
        if r.status == 502 {
            break;
        }
        assert_eq!(r.status, 200);
        assert!(Instant::now() < deadline, "never 502");
        std::thread::sleep(Duration::from_millis(200));
    }
    // A key never stored is a 502 at once.
    assert_eq!(s.get("/never").status, 502);
}

#[test]
fn the_admin_listener_purges_by_url_and_prefix_with_the_token() {
    let b = Killable::start("max-age=600", Duration::ZERO);
    let s = TestServer::start(
        &std::env::temp_dir(),
        &format!(
            "admin_token = \"t0ken-t0ken-t0ken-t0ken\"\n[[routes]]\nname = \"api\"\n[routes.proxy]\n\
             upstreams = [\"http://{}\"]\n[routes.cache]\n",
            b.addr
        ),
    );
    for p in ["/x/1", "/x/2", "/y"] {
        s.get(p);
    }
    assert_eq!(b.calls(), 3);
    let purge = |q: &str, token: &str| {
        send(
            s.admin,
            &format!(
                "POST /cache/purge?{q} HTTP/1.1\r\nHost: a\r\n{token}Content-Length: 0\r\n\r\n"
            ),
        )
    };
    let bearer = "Authorization: Bearer t0ken-t0ken-t0ken-t0ken\r\n";
    assert_eq!(purge("url=http://test/y", "").status, 401);
    assert_eq!(
        purge("url=http://test/y", "Authorization: Bearer nope\r\n").status,
        401
    );
    let r = purge("url=http://test/y", bearer);
    assert_eq!((r.status, r.text()), (200, "purged 1\n".to_string()));
    let r = purge("url=http%3A%2F%2Ftest%2Fx%2F&prefix=1&route=api", bearer);
    assert_eq!((r.status, r.text()), (200, "purged 2\n".to_string()));
    assert_eq!(purge("url=http://test/y&route=nope", bearer).status, 404);
    assert_eq!(purge("path=/y", bearer).status, 400);
    for p in ["/x/1", "/x/2", "/y"] {
        s.get(p);
    }
    assert_eq!(b.calls(), 6, "each purged URL went upstream again");
    // An absolute-form https:// target on a plain connection is filed under http: a
    // client cannot choose what HTTPS users are answered with.
    send(
        s.addr,
        "GET https://test/abs HTTP/1.1\r\nHost: test\r\n\r\n",
    );
    let r = purge("url=https://test/abs", bearer);
    assert_eq!(r.text(), "purged 0\n");
    let r = purge("url=http://test/abs", bearer);
    assert_eq!(r.text(), "purged 1\n");
    // A target with escapes is keyed as sent: the URL is found written either way, and
    // with the scheme in capitals.
    for (path, query) in [
        ("/a%20b", "url=http://test/a%20b"),
        ("/a%20b", "url=http://test/a%2520b"),
        ("/c+d", "url=HTTP://test/c+d"),
    ] {
        s.get(path);
        let r = purge(query, bearer);
        assert_eq!(r.text(), "purged 1\n", "{query}");
    }
    // Purges run on the blocking pool one at a time: eight sent at once all answer, each
    // for its own URL.
    for i in 0..8 {
        s.get(&format!("/many/{i}"));
    }
    let admin = s.admin;
    let answers: Vec<_> = std::thread::scope(|scope| {
        let purges: Vec<_> = (0..8)
            .map(|i| {
                scope.spawn(move || {
                    send(
                        admin,
                        &format!(
                            "POST /cache/purge?url=http://test/many/{i} HTTP/1.1\r\nHost: a\r\n\
                             {bearer}Content-Length: 0\r\n\r\n"
                        ),
                    )
                })
            })
            .collect();
        purges.into_iter().map(|p| p.join().unwrap()).collect()
    });
    for r in answers {
        assert_eq!((r.status, r.text()), (200, "purged 1\n".to_string()));
    }
}

#[test]
fn the_access_log_and_metrics_say_what_the_cache_did() {
    let b = Killable::start("max-age=600", Duration::ZERO);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let s = TestServer::start(
        &std::env::temp_dir(),
        &format!(
            "[[routes]]\nname = \"api\"\n[routes.proxy]\nupstreams = [\"http://{}\"]\n\
             [routes.cache]\n[routes.access_log]\npath = {:?}\ntemplate = \"$request_uri $cache_status\"\n",
            b.addr,
            log.display().to_string()
        ),
    );
    s.get("/m");
    s.get("/m");
    send(s.addr, "DELETE /m HTTP/1.1\r\nHost: test\r\n\r\n");
    let deadline = Instant::now() + Duration::from_secs(5);
    let text = loop {
        let t = std::fs::read_to_string(&log).unwrap_or_default();
        if t.lines().count() >= 3 || Instant::now() > deadline {
            break t;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(text, "/m MISS\n/m HIT\n/m BYPASS\n");
    let caches = s.router.response_caches();
    let store = caches
        .iter()
        .find_map(|(r, s)| (r == "api").then_some(s))
        .unwrap();
    assert_eq!(store.stats().hits.get(), 1);
    assert_eq!(store.stats().misses.load(Ordering::Relaxed), 1);
    assert_eq!(store.stats().bypassed.load(Ordering::Relaxed), 1);
    assert_eq!(store.entry_count(), 0, "the DELETE removed it");
}

#[test]
fn a_bad_cache_table_is_refused_naming_its_key() {
    for (table, key, why) in [
        ("[[routes]]\n[routes.static]\n[routes.cache]\n", "routes.0.cache", "proxy"),
        (
            "[[routes]]\n[routes.proxy]\nupstreams = [\"http://127.0.0.1:1\"]\n[routes.cache]\nkey_headers = [\"bad header\"]\n",
            "routes.0.cache.key_headers.0",
            "not a header name",
        ),
        (
            "[[routes]]\n[routes.proxy]\nupstreams = [\"http://127.0.0.1:1\"]\n[routes.cache]\nmax_bytes = 100\nmax_object_bytes = 1000\n",
            "routes.0.cache.max_object_bytes",
            "at most max_bytes",
        ),
        (
            "[[routes]]\n[routes.proxy]\nupstreams = [\"http://127.0.0.1:1\"]\n[routes.cache]\nstale_if_error = \"soon\"\n",
            "stale_if_error",
            "",
        ),
        (
            "[[routes]]\n[routes.proxy]\nupstreams = [\"http://127.0.0.1:1\"]\n[routes.cache]\nmax_entries = 0\n",
            "routes.0.cache.max_entries",
            "at least 1",
        ),
        (
            "[[routes]]\n[routes.proxy]\nupstreams = [\"http://127.0.0.1:1\"]\n[routes.cache]\ndisk_path = \"/tmp/c\"\n\
             [[routes]]\npath = \"/b\"\n[routes.proxy]\nupstreams = [\"http://127.0.0.1:1\"]\n[routes.cache]\ndisk_path = \"/tmp/c\"\n",
            "routes.1.cache.disk_path",
            "routes.0.cache.disk_path already",
        ),
    ] {
        let e = load_config(format!("root = \"/tmp\"\n{table}")).expect_err(table);
        assert!(e.contains(key) && e.contains(why), "{table}: {e}");
    }
}

/// The gatehouse binary with a cached proxy route to `up` plus `cache` in its table.
fn spawn_cached(up: SocketAddr, cache: &str) -> Spawned {
    spawn_gatehouse_in(
        &std::env::temp_dir(),
        &format!(
            "[[routes]]\nname = \"api\"\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n\
             [routes.cache]\ncache_status_header = true\n{cache}\n"
        ),
    )
}

fn metric(admin: SocketAddr, name: &str) -> f64 {
    let text = send(admin, "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n").text();
    text.lines()
        .find(|l| l.starts_with(name) && !l.starts_with('#'))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
}

#[test]
fn the_disk_tier_survives_a_restart_with_its_entries_original_times() {
    // Six seconds: the restart below must come well within them on a loaded machine.
    let mut b = Killable::start("max-age=6", Duration::ZERO);
    let dir = tempfile::tempdir().unwrap();
    let cache = format!(
        "disk_path = {:?}",
        dir.path().join("c").display().to_string()
    );
    let g = spawn_cached(b.addr, &cache);
    assert!(send(g.addr, "GET /p HTTP/1.1\r\nHost: test\r\n\r\n")
        .header("cache-status")
        .unwrap()
        .contains("stored"));
    let fetched = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(5);
    while metric(g.admin, "gatehouse_cache_disk_entries") < 1.0 {
        assert!(Instant::now() < deadline, "never written to disk");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(g);
    // The backend is gone too: only the disk can answer now.
    b.kill();
    std::thread::sleep(Duration::from_millis(1000));
    let g = spawn_cached(b.addr, &cache);
    let r = send(g.addr, "GET /p HTTP/1.1\r\nHost: test\r\n\r\n");
    assert_eq!((r.status, r.text()), (200, "body of /p".to_string()));
    assert_eq!(r.header("cache-status"), Some("gatehouse; hit"));
    let age: u64 = r.header("age").unwrap().parse().unwrap();
    assert!(
        age >= 1 && age as f64 <= fetched.elapsed().as_secs_f64() + 1.0,
        "age {age}"
    );
    // Stale by its original time (max-age=6), with the backend down: 502.
    std::thread::sleep(Duration::from_secs(6).saturating_sub(fetched.elapsed()));
    let r = send(g.addr, "GET /p HTTP/1.1\r\nHost: test\r\n\r\n");
    assert_eq!(r.status, 502);
}

/// Peak and current resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[test]
fn far_more_keys_than_fit_keep_memory_within_the_bound() {
    // 4,000 distinct 16 KiB responses (64 MiB) into an 8 MiB cache.
    let b = Killable::start_padded("max-age=600", Duration::ZERO, 16 << 10);
    let g = spawn_cached(b.addr, "max_bytes = 8388608");
    let mut c = Conn::open(g.addr);
    let mut get = |i: usize| {
        c.send(format!("GET /k/{i} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes());
        let r = c.read_response(false).expect("a response");
        assert_eq!(r.status, 200);
    };
    for i in 0..200 {
        get(i);
    }
    let before = rss_kib(g.child.id());
    for i in 200..4_000 {
        get(i);
    }
    let held = metric(g.admin, "gatehouse_cache_bytes");
    assert!(held <= 8388608.0, "{held} bytes held");
    assert!(metric(g.admin, "gatehouse_cache_entries") >= 100.0);
    let grown = rss_kib(g.child.id()).saturating_sub(before);
    // The bound (8 MiB) plus the allocator's slack; 64 MiB went through.
    assert!(
        grown < 24 * 1024,
        "RSS grew {grown} KiB over 3,800 responses"
    );
}

/// Forward auth's `response_headers` (the user it names) join the key: one user's
/// cached answer never reaches another, though their requests differ only by a cookie
/// the cache does not key by.
#[test]
fn forward_auths_granted_fields_keep_users_apart() {
    let auth = serve_axum(
        loopback(),
        axum::Router::new().fallback(|h: http::HeaderMap| async move {
            let user = match h.get("cookie").and_then(|v| v.to_str().ok()) {
                Some("session=a") => "alice",
                Some("session=b") => "bob",
                _ => {
                    return http::Response::builder()
                        .status(401)
                        .body(String::new())
                        .unwrap()
                }
            };
            http::Response::builder()
                .status(204)
                .header("x-auth-user", user)
                .body(String::new())
                .unwrap()
        }),
    );
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let up = serve_axum(
        loopback(),
        axum::Router::new().fallback(move |h: http::HeaderMap| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                let user = h
                    .get("x-auth-user")
                    .map_or("nobody", |v| v.to_str().unwrap());
                (
                    [("cache-control", "max-age=60")],
                    format!("the page of {user}"),
                )
            }
        }),
    );
    let s = TestServer::start(
        &std::env::temp_dir(),
        &format!(
            "[[routes]]\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n\
             [routes.auth.forward]\nurl = \"http://{auth}/check\"\nresponse_headers = [\"x-auth-user\"]\n\
             [routes.cache]\ncache_status_header = true\n"
        ),
    );
    let as_user = |c: &str| s.get_with("/me", &format!("Cookie: session={c}\r\n"));
    let a = as_user("a");
    assert_eq!((a.status, a.text().as_str()), (200, "the page of alice"));
    let b = as_user("b");
    assert_eq!((b.status, b.text().as_str()), (200, "the page of bob"));
    let again = as_user("a");
    assert_eq!(again.text(), "the page of alice");
    assert_eq!(again.header("cache-status"), Some("gatehouse; hit"));
    assert_eq!(as_user("b").text(), "the page of bob");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(s.get("/me").status, 401);
}

/// What the key holds is what reaches the upstream: a field a route's rule sets can't be
/// taken off by a client's `Connection` after the key was made, and behind trusted proxies
/// the forwarded scheme the upstream builds its links from is part of the key.
#[test]
fn the_upstream_answers_the_request_the_key_describes() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let up = serve_axum(
        loopback(),
        axum::Router::new().fallback(move |h: http::HeaderMap| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                let field = |n: &str| {
                    h.get(n)
                        .map_or("none", |v| v.to_str().unwrap_or("?"))
                        .to_string()
                };
                (
                    [("cache-control", "max-age=600")],
                    format!(
                        "tenant={} proto={}",
                        field("x-tenant"),
                        field("x-forwarded-proto")
                    ),
                )
            }
        }),
    );
    let s = TestServer::start(
        &std::env::temp_dir(),
        &format!(
            "[[routes]]\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n\
             trusted_proxies = [\"127.0.0.2/32\"]\n\
             [[routes.headers.request]]\nset = {{ \"X-Tenant\" = \"acme\" }}\n\
             [routes.cache]\ncache_status_header = true\n"
        ),
    );
    let first = s.get_with("/t", "Connection: x-tenant\r\nX-Tenant: other\r\n");
    assert_eq!(first.text(), "tenant=acme proto=http");
    let plain = s.get("/t");
    assert_eq!(plain.text(), "tenant=acme proto=http");
    assert_eq!(plain.header("cache-status"), Some("gatehouse; hit"));
    // A Connection naming Host would make the request another: refused.
    assert_eq!(s.get_with("/t", "Connection: host\r\n").status, 400);

    // From the trusted proxy (127.0.0.2), the scheme it forwards keys the answer.
    let from_proxy = |path: &str, proto: &str| {
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.bind(&"127.0.0.2:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        sock.connect(&s.addr.into()).unwrap();
        Conn::from_stream(sock.into()).request(&format!(
            "GET {path} HTTP/1.1\r\nHost: test\r\nX-Forwarded-Proto: {proto}\r\n\r\n"
        ))
    };
    let over_http = from_proxy("/p", "http");
    assert_eq!(over_http.text(), "tenant=acme proto=http");
    let over_https = from_proxy("/p", "https");
    assert_eq!(over_https.text(), "tenant=acme proto=https");
    let again = from_proxy("/p", "https");
    assert_eq!(again.header("cache-status"), Some("gatehouse; hit"));
    assert_eq!(again.text(), "tenant=acme proto=https");
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    // A client that reaches the gateway itself (127.0.0.1, not trusted) claims https over
    // plain HTTP: the upstream is told http, and the answer is not filed for the proxy's
    // https clients.
    let direct = s.get_with("/q", "X-Forwarded-Proto: https\r\n");
    assert_eq!(direct.text(), "tenant=acme proto=http");
    assert_eq!(from_proxy("/q", "https").text(), "tenant=acme proto=https");
    assert_eq!(calls.load(Ordering::SeqCst), 5);
}
