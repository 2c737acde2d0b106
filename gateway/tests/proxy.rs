//! The reverse proxy against in-process backends (small axum servers the tests start):
//! balancing, failures, health, headers and limits.
mod common;
use axum::extract::Request as AxumRequest;
use axum::routing::any;
use common::*;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A backend on its own runtime thread, answering with `app`. Lives as long as the test.
struct Backend {
    addr: SocketAddr,
}

fn backend(app: axum::Router) -> Backend {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    backend_on(listener, app)
}

fn backend_on(listener: std::net::TcpListener, app: axum::Router) -> Backend {
    Backend {
        addr: serve_axum(listener, app),
    }
}

/// A backend that answers every request with its name.
fn named(name: &'static str) -> Backend {
    backend(axum::Router::new().fallback(any(move || async move { name })))
}

fn proxy_toml(upstreams: &[String], extra: &str) -> String {
    let list: Vec<String> = upstreams.iter().map(|u| format!("{u:?}")).collect();
    format!(
        "[[routes]]\n[routes.proxy]\nupstreams = [{}]\n{extra}\n",
        list.join(", ")
    )
}

fn url(a: SocketAddr) -> String {
    format!("http://{a}")
}

fn start(toml: &str) -> TestServer {
    let dir = std::env::temp_dir();
    TestServer::start(&dir, toml)
}

fn count<'a>(bodies: impl Iterator<Item = &'a str>, name: &str) -> usize {
    bodies.filter(|b| *b == name).count()
}

#[test]
fn round_robin_follows_weights() {
    let (a, b) = (named("a"), named("b"));
    let toml = format!(
        "[[routes]]\n[routes.proxy]\nupstreams = [{{ url = {:?}, weight = 2 }}, {:?}]\n",
        url(a.addr),
        url(b.addr)
    );
    let s = start(&toml);
    let bodies: Vec<String> = (0..30).map(|_| s.get("/").text()).collect();
    assert_eq!(count(bodies.iter().map(String::as_str), "a"), 20);
    assert_eq!(count(bodies.iter().map(String::as_str), "b"), 10);
}

#[test]
fn least_requests_avoids_the_busy_upstream() {
    let slow = backend(axum::Router::new().fallback(any(|| async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        "slow"
    })));
    let fast = named("fast");
    let s = start(&proxy_toml(
        &[url(slow.addr), url(fast.addr)],
        "policy = \"least_requests\"",
    ));
    let addr = s.addr;
    let threads: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = Conn::open(addr);
                (0..10)
                    .map(|_| c.request("GET / HTTP/1.1\r\nHost: t\r\n\r\n").text())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let all: Vec<String> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let (n_slow, n_fast) = (
        count(all.iter().map(String::as_str), "slow"),
        count(all.iter().map(String::as_str), "fast"),
    );
    assert_eq!(n_slow + n_fast, 80);
    assert!(n_fast > 3 * n_slow, "fast {n_fast}, slow {n_slow}");
    assert!(n_slow > 0, "the slow upstream still gets some");
}

#[test]
fn hash_on_a_header_is_sticky_and_spreads() {
    let (a, b) = (named("a"), named("b"));
    let s = start(&proxy_toml(
        &[url(a.addr), url(b.addr)],
        "policy = \"hash\"\nhash_on = \"header:x-user\"",
    ));
    let mut seen = std::collections::HashMap::new();
    for round in 0..3 {
        for u in 0..40 {
            let got = s.get_with("/", &format!("X-User: user{u}\r\n")).text();
            let first = seen.entry(u).or_insert_with(|| got.clone());
            assert_eq!(*first, got, "user{u} moved in round {round}");
        }
    }
    let on_a = seen.values().filter(|v| *v == "a").count();
    assert!((8..=32).contains(&on_a), "{on_a} of 40 users on a");
}

#[test]
fn a_dead_upstream_fails_over_for_idempotent_requests_and_gives_502_otherwise() {
    let live = named("live");
    let (dead, _held) = dead_addr();
    let s = start(&proxy_toml(&[url(dead), url(live.addr)], "max_fails = 0"));
    // Round robin starts at the dead one: the GET goes on to the live one.
    for _ in 0..4 {
        let r = s.get("/");
        assert_eq!(r.status, 200);
        assert_eq!(r.text(), "live");
    }
    // A POST with a body is not replayed.
    let mut saw_502 = false;
    for _ in 0..4 {
        let r = send(
            s.addr,
            "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc",
        );
        if r.status == 502 {
            saw_502 = true;
            assert_eq!(r.text(), "bad gateway\n");
        } else {
            assert_eq!(r.text(), "live");
        }
    }
    assert!(saw_502);
}

#[test]
fn a_slow_upstream_gives_504() {
    let slow = backend(axum::Router::new().fallback(any(|| async {
        tokio::time::sleep(Duration::from_secs(5)).await;
        "late"
    })));
    let s = start(&proxy_toml(
        &[url(slow.addr)],
        "response_timeout = \"300ms\"\nconnect_timeout = \"100ms\"",
    ));
    let t = Instant::now();
    let r = s.get("/");
    assert_eq!(r.status, 504);
    assert_eq!(r.text(), "gateway timeout\n");
    assert!(t.elapsed() < Duration::from_secs(2));
}

/// An upstream connection's timer stays registered between requests at an earlier
/// request's deadline: it must neither cut a later request short nor fire it as a 504
/// after going off while the connection sat idle.
#[test]
fn the_response_timeout_counts_from_each_request_on_a_reused_connection() {
    // /slow answers after 5 s, the rest at once.
    let (addr, conns) = hyper_backend(|req| async move {
        if req.uri().path() == "/slow" {
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        http::Response::new(Full::from("fast"))
    });
    let s = start(&proxy_toml(
        &[url(addr)],
        "response_timeout = \"600ms\"\nconnect_timeout = \"200ms\"",
    ));
    // One client connection: one runtime, so one upstream connection from its pool.
    let mut c = Conn::open(s.addr);
    let fast = "GET /fast HTTP/1.1\r\nHost: t\r\n\r\n";
    assert_eq!(c.request(fast).status, 200);
    // Idle past the first request's deadline: the timer goes off with nobody waiting.
    std::thread::sleep(Duration::from_millis(900));
    let r = c.request(fast);
    assert_eq!((r.status, r.text()), (200, "fast".to_string()));
    assert_eq!(
        conns.load(Ordering::SeqCst),
        1,
        "the upstream connection was reused"
    );
    // The timer is now due 600 ms after that request; 400 ms on, a slow one starts.
    std::thread::sleep(Duration::from_millis(400));
    let t = Instant::now();
    let r = c.request("GET /slow HTTP/1.1\r\nHost: t\r\n\r\n");
    let took = t.elapsed();
    assert_eq!(r.status, 504);
    assert!(
        took >= Duration::from_millis(550) && took < Duration::from_secs(3),
        "504 after {took:?}, not 600 ms after the request"
    );
}

#[test]
fn passive_ejection_and_recovery() {
    let good = named("good");
    let flaky_addr = std::net::SocketAddr::from(([127, 0, 0, 1], common::free_port()));
    let s = start(&proxy_toml(
        &[url(flaky_addr), url(good.addr)],
        "max_fails = 1\nfail_timeout = \"1s\"\nretries = 0",
    ));
    // The first request goes to the dead upstream and fails; it is ejected.
    assert_eq!(s.get("/").status, 502);
    for _ in 0..6 {
        assert_eq!(s.get("/").text(), "good");
    }
    // It comes back to life, and after the cooldown it gets traffic again.
    let _flaky = backend_on(
        std::net::TcpListener::bind(flaky_addr).unwrap(),
        axum::Router::new().fallback(any(|| async { "flaky" })),
    );
    std::thread::sleep(Duration::from_millis(1100));
    let bodies: Vec<String> = (0..6).map(|_| s.get("/").text()).collect();
    assert_eq!(
        count(bodies.iter().map(String::as_str), "flaky"),
        3,
        "{bodies:?}"
    );
}

#[test]
fn active_health_checks_take_an_upstream_out_and_bring_it_back() {
    let healthy = Arc::new(AtomicBool::new(false));
    let h = healthy.clone();
    let sick = backend(
        axum::Router::new()
            .route(
                "/health",
                any(move || {
                    let ok = h.load(Ordering::SeqCst);
                    async move {
                        if ok {
                            (http::StatusCode::OK, "ok")
                        } else {
                            (http::StatusCode::INTERNAL_SERVER_ERROR, "no")
                        }
                    }
                }),
            )
            .fallback(any(|| async { "sick" })),
    );
    let well = backend(
        axum::Router::new()
            .route("/health", any(|| async { "ok" }))
            .fallback(any(|| async { "well" })),
    );
    let s = start(&proxy_toml(
        &[url(sick.addr), url(well.addr)],
        "[routes.proxy.health_check]\ninterval = \"50ms\"\npath = \"/health\"\nhealthy = 2\nunhealthy = 2",
    ));
    std::thread::sleep(Duration::from_millis(400));
    for _ in 0..6 {
        assert_eq!(s.get("/").text(), "well");
    }
    healthy.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(400));
    let bodies: Vec<String> = (0..6).map(|_| s.get("/").text()).collect();
    assert_eq!(
        count(bodies.iter().map(String::as_str), "sick"),
        3,
        "{bodies:?}"
    );
}

/// Marked down by the health checks, every one of them: they are tried anyway (as nginx
/// does), rather than a 503 to every client until one passes again.
#[test]
fn with_every_upstream_down_they_are_tried_anyway() {
    let failing_checks = |name: &'static str| {
        backend(
            axum::Router::new()
                .route(
                    "/health",
                    any(|| async { (http::StatusCode::SERVICE_UNAVAILABLE, "no") }),
                )
                .fallback(any(move || async move { name })),
        )
    };
    let (a, b) = (failing_checks("a"), failing_checks("b"));
    let checks =
        "[routes.proxy.health_check]\ninterval = \"50ms\"\npath = \"/health\"\nunhealthy = 1";
    let s = start(&proxy_toml(&[url(a.addr), url(b.addr)], checks));
    let one = start(&proxy_toml(&[url(a.addr)], checks));
    std::thread::sleep(Duration::from_millis(300));
    let bodies: Vec<String> = (0..4).map(|_| s.get("/").text()).collect();
    assert_eq!(
        count(bodies.iter().map(String::as_str), "a"),
        2,
        "{bodies:?}"
    );
    assert_eq!(
        count(bodies.iter().map(String::as_str), "b"),
        2,
        "{bodies:?}"
    );
    let r = one.get("/");
    assert_eq!((r.status, r.text()), (200, "a".to_string()));
}

/// Echoes the request's headers, one `name: value` a line.
fn echo() -> Backend {
    backend(
        axum::Router::new().fallback(any(|req: AxumRequest| async move {
            let mut out = String::new();
            out.push_str(&format!("path: {}\n", req.uri()));
            for (k, v) in req.headers() {
                out.push_str(&format!("{k}: {}\n", v.to_str().unwrap_or("?")));
            }
            (
                [
                    ("connection", "x-resp-hop"),
                    ("x-resp-hop", "1"),
                    ("x-resp-kept", "1"),
                ],
                out,
            )
        })),
    )
}

fn lines(r: &Resp) -> Vec<String> {
    r.text().lines().map(str::to_string).collect()
}

type Full = http_body_util::Full<bytes::Bytes>;

/// A hyper HTTP/1.1 backend answering each request with `answer`; counts the connections
/// it accepts.
fn hyper_backend<F, Fut>(answer: F) -> (SocketAddr, Arc<AtomicUsize>)
where
    F: Fn(http::Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = http::Response<Full>> + Send + 'static,
{
    let (addr, accepted, _) = hyper_backend_counted(answer);
    (addr, accepted)
}

/// [`hyper_backend`], also counting the connections open on it.
fn hyper_backend_counted<F, Fut>(answer: F) -> (SocketAddr, Arc<AtomicUsize>, Arc<AtomicUsize>)
where
    F: Fn(http::Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = http::Response<Full>> + Send + 'static,
{
    let accepted = Arc::new(AtomicUsize::new(0));
    let open = Arc::new(AtomicUsize::new(0));
    let (a, o) = (accepted.clone(), open.clone());
    let addr = serve_each(loopback(), move |stream| {
        a.fetch_add(1, Ordering::SeqCst);
        o.fetch_add(1, Ordering::SeqCst);
        let (o, answer) = (o.clone(), answer.clone());
        async move {
            let svc = hyper::service::service_fn(move |req| {
                let answered = answer(req);
                async move { Ok::<_, std::convert::Infallible>(answered.await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                .await;
            o.fetch_sub(1, Ordering::SeqCst);
        }
    });
    (addr, accepted, open)
}

/// A client's trailer fields are not forwarded, over HTTP/1.1 or HTTP/2 to the upstream:
/// an `X-Forwarded-For` or an identity field in trailers would reach the upstream beside
/// the head the route decided, unchecked. The body still arrives whole.
#[test]
fn a_clients_trailers_do_not_reach_the_upstream() {
    use http_body_util::BodyExt;
    let b = backend(
        axum::Router::new().fallback(any(|req: AxumRequest| async move {
            match req.into_body().collect().await {
                Ok(got) => {
                    let names: Vec<String> = got
                        .trailers()
                        .map(|t| t.keys().map(|k| k.to_string()).collect())
                        .unwrap_or_default();
                    format!("{} {names:?}", got.to_bytes().len())
                }
                Err(e) => format!("body failed: {e}"),
            }
        })),
    );
    for http2 in [false, true] {
        let s = start(&proxy_toml(&[url(b.addr)], &format!("http2 = {http2}")));
        let r = send(
            s.addr,
            "POST /up HTTP/1.1\r\nHost: t\r\nTE: trailers\r\nTrailer: X-User, X-Forwarded-For\r\n\
             Transfer-Encoding: chunked\r\n\r\nb\r\nhello world\r\n0\r\n\
             X-User: admin\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n",
        );
        assert_eq!(
            (r.status, r.text()),
            (200, "11 []".to_string()),
            "http2 = {http2}"
        );
    }
}

#[test]
fn forwarding_headers_and_hop_by_hop_removal() {
    let e = echo();
    let s = start(&proxy_toml(&[url(e.addr)], "forwarded = true"));
    let r = s.get_with(
        "/x?y=1",
        "X-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: https\r\nConnection: x-secret\r\nX-Secret: 1\r\nProxy-Authorization: Basic eA==\r\nTE: trailers\r\n",
    );
    let l = lines(&r);
    assert!(l.contains(&"path: /x?y=1".to_string()), "{l:?}");
    // An untrusted client's claim is replaced, not extended.
    assert!(
        l.contains(&"x-forwarded-for: 127.0.0.1".to_string()),
        "{l:?}"
    );
    assert!(l.contains(&"x-forwarded-proto: http".to_string()), "{l:?}");
    assert!(l.contains(&"x-forwarded-host: test".to_string()), "{l:?}");
    assert!(
        l.contains(&"forwarded: for=127.0.0.1;proto=http;host=\"test\"".to_string()),
        "{l:?}"
    );
    assert!(l.contains(&"via: 1.1 gatehouse".to_string()), "{l:?}");
    assert!(
        l.contains(&"host: test".to_string()),
        "the client's Host is kept: {l:?}"
    );
    for gone in ["x-secret", "proxy-authorization", "te:"] {
        assert!(
            !l.iter().any(|x| x.starts_with(gone)),
            "{gone} reached the upstream: {l:?}"
        );
    }
    // And on the way back.
    assert_eq!(r.header("x-resp-hop"), None);
    assert_eq!(r.header("x-resp-kept"), Some("1"));
    assert_eq!(r.header("via"), Some("1.1 gatehouse"));

    // From a trusted proxy, the chain is extended, in one field.
    let s = start(&proxy_toml(
        &[url(e.addr)],
        "trusted_proxies = [\"127.0.0.0/8\"]",
    ));
    let r = s.get_with(
        "/",
        "X-Forwarded-For: 203.0.113.9\r\nX-Forwarded-For: 10.0.0.1\r\n",
    );
    let l = lines(&r);
    let xff: Vec<&String> = l
        .iter()
        .filter(|x| x.starts_with("x-forwarded-for"))
        .collect();
    assert_eq!(xff, ["x-forwarded-for: 203.0.113.9, 10.0.0.1, 127.0.0.1"]);
}

/// The default route (no trusted proxies, no `Forwarded`) sends a bodiless GET over its own
/// client with the forwarding fields written into the head, and a POST with a body over
/// hyper's with them set in the map: both replace what the client claimed, the same way.
#[test]
fn an_untrusted_clients_forwarding_fields_are_replaced_on_either_client() {
    let e = echo();
    let s = start(&proxy_toml(&[url(e.addr)], ""));
    let claims = "X-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: evil\r\nForwarded: for=6.6.6.6\r\nVia: 1.0 other\r\nX-Kept: 1\r\n";
    let post = |extra: &str| {
        send(
            s.addr,
            &format!(
                "POST /p HTTP/1.1\r\nHost: test\r\n{claims}{extra}Content-Length: 2\r\n\r\nhi"
            ),
        )
    };
    // A request whose `Connection` names Host is refused before routing: without its Host
    // it would be another request (gateway/src/server/front.rs).
    let named = "Connection: host\r\n";
    assert_eq!(s.get_with("/g", &format!("{claims}{named}")).status, 400);
    assert_eq!(post(named).status, 400);
    let cases: [(&str, Resp, &[&str]); 2] = [
        ("GET", s.get_with("/g", claims), &["test"]),
        ("POST", post(""), &["test"]),
    ];
    for (what, r, xfh) in cases {
        assert_eq!(r.status, 200, "{what}");
        let l = lines(&r);
        let fields = |name: &str| -> Vec<&str> {
            l.iter()
                .filter_map(|x| x.strip_prefix(name)?.strip_prefix(": "))
                .collect()
        };
        assert_eq!(fields("x-forwarded-for"), ["127.0.0.1"], "{what}: {l:?}");
        assert_eq!(fields("x-forwarded-proto"), ["http"], "{what}: {l:?}");
        assert_eq!(fields("x-forwarded-host"), xfh, "{what}: {l:?}");
        assert_eq!(fields("forwarded"), Vec::<&str>::new(), "{what}: {l:?}");
        // RFC 9110 §7.6.3: this hop comes after the ones before it.
        assert_eq!(
            fields("via"),
            ["1.0 other", "1.1 gatehouse"],
            "{what}: {l:?}"
        );
        assert_eq!(fields("host"), ["test"], "{what}: {l:?}");
        assert_eq!(fields("x-kept"), ["1"], "{what}: {l:?}");
        // Which way each went: written into the head, X-Forwarded-For comes after the
        // client's other fields; set in the map, it keeps the place of the client's.
        let at = |name: &str| l.iter().position(|x| x.starts_with(name));
        assert_eq!(
            at("x-forwarded-for:") > at("x-kept:"),
            what.starts_with("GET"),
            "{what}: {l:?}"
        );
    }
}

#[test]
fn prefix_stripping_and_the_upstreams_host() {
    let e = echo();
    let toml = format!(
        "[[routes]]\npath = \"/api\"\n[routes.proxy]\nupstreams = [{:?}]\nstrip_prefix = true\nkeep_host = false\n\n[[routes]]\npath = \"/raw\"\n[routes.proxy]\nupstreams = [{:?}]\n",
        url(e.addr),
        url(e.addr)
    );
    let s = start(&toml);
    let l = lines(&s.get("/api/users/7?x=1"));
    assert!(l.contains(&"path: /users/7?x=1".to_string()), "{l:?}");
    assert!(l.contains(&format!("host: {}", e.addr)), "{l:?}");
    let l = lines(&s.get("/raw/users/7"));
    assert!(l.contains(&"path: /raw/users/7".to_string()), "{l:?}");
    // A proxy route's bare prefix is passed on, not redirected.
    assert_eq!(s.get("/raw").status, 200);
}

#[test]
fn a_failed_over_request_carries_the_next_upstreams_host() {
    let e = echo();
    let (dead, _held) = dead_addr();
    let s = start(&proxy_toml(
        &[url(dead), url(e.addr)],
        "max_fails = 0\nkeep_host = false",
    ));
    // Round robin starts at the dead one each second request: the head made for it
    // goes on to the live one, with the live one's Host, once.
    for _ in 0..4 {
        let l = lines(&s.get("/h?q=1"));
        let hosts: Vec<&String> = l.iter().filter(|x| x.starts_with("host:")).collect();
        assert_eq!(hosts, [&format!("host: {}", e.addr)], "{l:?}");
        assert!(l.contains(&"path: /h?q=1".to_string()), "{l:?}");
    }
}

#[test]
fn bodies_over_the_limit_get_413() {
    let counter = backend(axum::Router::new().fallback(any(
        |body: axum::body::Bytes| async move { body.len().to_string() },
    )));
    let s = start(&proxy_toml(&[url(counter.addr)], "max_body_bytes = 1000"));
    let ok = send(
        s.addr,
        &format!(
            "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n{}",
            "a".repeat(1000)
        ),
    );
    assert_eq!(ok.text(), "1000");
    let r = send(
        s.addr,
        &format!(
            "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1001\r\n\r\n{}",
            "a".repeat(1001)
        ),
    );
    assert_eq!(r.status, 413);
    // Chunked, so only counted as it streams.
    let chunk = "a".repeat(600);
    let r = send(
        s.addr,
        &format!("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n258\r\n{chunk}\r\n258\r\n{chunk}\r\n0\r\n\r\n"),
    );
    assert_eq!(r.status, 413);
}

#[test]
fn connections_to_upstreams_are_reused() {
    // per-core: each runtime keeps its own pool, so two workers may hold one each.
    for runtime in [
        "runtime = \"shared\"\n",
        "runtime = \"per-core\"\nworkers = 2\n",
    ] {
        let (addr, conns) = hyper_backend(|_| async { http::Response::new(Full::from("pooled")) });
        let s = start(&format!("{runtime}{}", proxy_toml(&[url(addr)], "")));
        for _ in 0..50 {
            assert_eq!(s.get("/").text(), "pooled", "{runtime}");
        }
        assert!(
            conns.load(Ordering::SeqCst) <= 2,
            "{runtime}: {} connections for 50 requests",
            conns.load(Ordering::SeqCst)
        );
    }
}

/// A backend that answers each connection's first request with "ok", keeps the
/// connection alive for `linger`, then closes it. Counts the connections it accepted.
fn closing_backend(linger: Duration) -> (SocketAddr, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let conns = Arc::new(AtomicUsize::new(0));
    let c = conns.clone();
    let addr = serve_each(loopback(), move |mut stream| {
        c.fetch_add(1, Ordering::SeqCst);
        async move {
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .await;
            tokio::time::sleep(linger).await;
        }
    });
    (addr, conns)
}

#[test]
fn an_upstream_closing_its_idle_connections_costs_no_request() {
    // Each pooled connection is closed by the upstream before it is used again: the proxy
    // must notice and open another, not answer 502.
    let (addr, conns) = closing_backend(Duration::from_millis(20));
    let s = start(&proxy_toml(&[url(addr)], ""));
    for i in 0..5 {
        let r = s.get("/");
        assert_eq!((r.status, r.text()), (200, "ok".to_string()), "request {i}");
        std::thread::sleep(Duration::from_millis(150));
    }
    assert_eq!(conns.load(Ordering::SeqCst), 5);
}

/// A keep-alive backend answering `body` after `delay`, counting the connections open on it.
fn counting_backend(body: &'static [u8], delay: Duration) -> (SocketAddr, Arc<AtomicUsize>) {
    let (addr, _, open) = hyper_backend_counted(move |_| async move {
        tokio::time::sleep(delay).await;
        http::Response::new(Full::from(body))
    });
    (addr, open)
}

/// Waits up to 3 s for at most `n` connections to be open.
fn wait_open_at_most(open: &AtomicUsize, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while open.load(Ordering::SeqCst) > n && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_response_over_hypers_client_served_from_the_compression_cache_keeps_its_connection() {
    let (addr, conns) = hyper_backend(|req| async {
        use http_body_util::BodyExt;
        let _ = req.into_body().collect().await;
        let mut res = http::Response::new(Full::from("gatehouse ".repeat(300)));
        let h = res.headers_mut();
        h.insert("content-type", http::HeaderValue::from_static("text/plain"));
        h.insert("etag", http::HeaderValue::from_static("\"v1\""));
        res
    });
    let s = start(&format!(
        "runtime = \"shared\"\n{}",
        proxy_toml(&[url(addr)], "")
    ));
    // A GET with a body goes over hyper's client; only bodiless ones take the own client.
    let req = "GET / HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\nContent-Length: 1\r\n\r\nx";
    let mut c = Conn::open(s.addr);
    let first = c.request(req);
    assert_eq!(first.header("content-encoding"), Some("gzip"));
    for _ in 0..10 {
        let r = c.request(req);
        assert_eq!(r.header("content-encoding"), Some("gzip"));
        assert_eq!(r.body, first.body);
        // The dropped body is read out by a task: time for it to run on a busy machine.
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        conns.load(Ordering::SeqCst),
        1,
        "11 requests, one connection"
    );
}

#[test]
fn idle_upstream_connections_close_after_the_pool_idle_timeout() {
    let (addr, open) = counting_backend(b"kept", Duration::ZERO);
    let s = start(&proxy_toml(&[url(addr)], "pool_idle_timeout = \"300ms\"\n"));
    assert_eq!(s.get("/").text(), "kept");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(open.load(Ordering::SeqCst), 1, "kept open while fresh");
    wait_open_at_most(&open, 0);
    assert_eq!(
        open.load(Ordering::SeqCst),
        0,
        "closed once idle past the timeout"
    );
    // And the next request opens a new one.
    assert_eq!(s.get("/").text(), "kept");
}

#[test]
fn at_most_pool_max_idle_connections_are_kept() {
    let (addr, open) = counting_backend(b"slow", Duration::from_millis(200));
    let s = start(&proxy_toml(&[url(addr)], "pool_max_idle = 1\n"));
    // Four at once need four connections; afterwards one stays.
    let a = s.addr;
    let handles: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(move || send(a, "GET / HTTP/1.1\r\nHost: t\r\n\r\n").text()))
        .collect();
    for h in handles {
        assert_eq!(h.join().expect("client"), "slow");
    }
    wait_open_at_most(&open, 1);
    assert_eq!(open.load(Ordering::SeqCst), 1);
}

/// A backend that accepts `Upgrade: websocket` and then echoes whatever bytes come.
fn websocket_echo() -> SocketAddr {
    serve_each(loopback(), |stream| async move {
        let svc = hyper::service::service_fn(
            |mut req: http::Request<hyper::body::Incoming>| async move {
                let asked = req.headers().get("upgrade").map(|v| v.as_bytes().to_vec());
                let on = hyper::upgrade::on(&mut req);
                tokio::spawn(async move {
                    if let Ok(up) = on.await {
                        let mut io = hyper_util::rt::TokioIo::new(up);
                        let (mut r, mut w) = tokio::io::split(&mut io);
                        let _ = tokio::io::copy(&mut r, &mut w).await;
                    }
                });
                let mut res = http::Response::new(http_body_util::Empty::<bytes::Bytes>::new());
                if asked.as_deref() == Some(b"websocket") {
                    *res.status_mut() = http::StatusCode::SWITCHING_PROTOCOLS;
                    res.headers_mut()
                        .insert("connection", "upgrade".parse().unwrap());
                    res.headers_mut()
                        .insert("upgrade", "websocket".parse().unwrap());
                } else {
                    *res.status_mut() = http::StatusCode::BAD_REQUEST;
                }
                Ok::<_, std::convert::Infallible>(res)
            },
        );
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
            .with_upgrades()
            .await;
    })
}

const WS_UPGRADE: &str = "GET /chat HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";

#[test]
fn websocket_upgrades_are_tunnelled_both_ways() {
    let addr = websocket_echo();
    let s = start(&proxy_toml(&[url(addr)], ""));
    let mut c = Conn::open(s.addr);
    let r = c.request(WS_UPGRADE);
    assert_eq!(r.status, 101);
    assert_eq!(r.header("upgrade"), Some("websocket"));
    for msg in ["hello", "through the proxy", "and back"] {
        ws_echo(&mut c, msg);
    }
}

fn ws_echo(c: &mut Conn, msg: &str) {
    use std::io::{Read, Write};
    c.stream.write_all(msg.as_bytes()).unwrap();
    let mut buf = vec![0u8; msg.len()];
    c.stream.read_exact(&mut buf).unwrap();
    assert_eq!(buf, msg.as_bytes());
}

#[test]
fn a_tunnel_counts_as_open_and_closes_when_idle() {
    let addr = websocket_echo();
    let s = start(&proxy_toml(
        &[url(addr)],
        "body_idle_timeout = \"1s\"\n[limits]\nmax_connections = 2\n",
    ));
    // Each tunnel counts once its upgrade is agreed, and its hyper connection stops
    // counting as it lets the socket go: one count a tunnel, settled.
    let settles_at = |n: usize| {
        let t = Instant::now();
        while s.handle().connections() != n && t.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(5));
        }
        s.handle().connections()
    };
    let mut a = Conn::open(s.addr);
    assert_eq!(a.request(WS_UPGRADE).status, 101);
    ws_echo(&mut a, "a");
    assert_eq!(settles_at(1), 1);
    let mut b = Conn::open(s.addr);
    assert_eq!(b.request(WS_UPGRADE).status, 101);
    ws_echo(&mut b, "b");
    // The tunnels still count, so a third connection is over `max_connections`.
    assert_eq!(settles_at(2), 2);
    let mut c = Conn::open(s.addr);
    assert!(
        c.closed_within(Duration::from_secs(2)),
        "a third connection was served"
    );
    // Kept busy, a tunnel outlives the idle timeout; left silent, it is closed.
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_millis(1500) {
        ws_echo(&mut a, "ping");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        b.closed_within(Duration::from_secs(3)),
        "an idle tunnel stayed open"
    );
    ws_echo(&mut a, "still open");
    assert!(
        a.closed_within(Duration::from_secs(3)),
        "an idle tunnel stayed open"
    );
    let started = std::time::Instant::now();
    while s.handle().connections() > 0 && started.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(s.handle().connections(), 0);
}

#[test]
fn large_bodies_stream_both_ways() {
    const MIB: usize = 1 << 20;
    const SIZE: usize = 256 * MIB;
    // Uploads are counted as they arrive; downloads are generated as they are sent.
    let b = backend(
        axum::Router::new()
            .route(
                "/up",
                any(|body: axum::body::Body| async move {
                    use http_body_util::BodyExt;
                    let mut body = body;
                    let mut n = 0usize;
                    while let Some(f) = body.frame().await {
                        if let Ok(d) = f.map(|f| f.into_data()) {
                            n += d.map_or(0, |d| d.len());
                        }
                    }
                    n.to_string()
                }),
            )
            .route(
                "/down",
                any(|| async {
                    let chunk = bytes::Bytes::from(vec![7u8; MIB]);
                    let stream = futures_util::stream::iter(
                        (0..SIZE / MIB)
                            .map(move |_| Ok::<_, std::convert::Infallible>(chunk.clone())),
                    );
                    axum::body::Body::from_stream(stream)
                }),
            ),
    );
    let s = start(&proxy_toml(&[url(b.addr)], ""));
    let rss_before = peak_rss_kib();
    use std::io::{Read, Write};
    // Upload, chunked, 1 MiB at a time.
    let mut c = Conn::open(s.addr);
    c.send(b"POST /up HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n");
    let chunk = vec![b'u'; MIB];
    for _ in 0..SIZE / MIB {
        c.send(format!("{:x}\r\n", MIB).as_bytes());
        c.send(&chunk);
        c.send(b"\r\n");
    }
    c.send(b"0\r\n\r\n");
    let r = c.read_response(false).expect("response");
    assert_eq!(r.text(), SIZE.to_string());
    // Download, read and dropped as it comes.
    let mut d = std::net::TcpStream::connect(s.addr).unwrap();
    d.write_all(b"GET /down HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0usize;
    loop {
        let n = d.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        total += n;
    }
    assert!(
        total > SIZE,
        "{total} bytes (head and chunk framing included)"
    );
    let grown_mib = (peak_rss_kib().saturating_sub(rss_before)) / 1024;
    assert!(
        grown_mib < 64,
        "peak RSS grew by {grown_mib} MiB for 512 MiB proxied"
    );
}

fn peak_rss_kib() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

#[test]
fn an_upstream_body_that_stalls_is_cut_off() {
    // A raw backend: a head promising 1000 bytes, 100 of them, then silence.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n");
                let _ = s.write_all(&[b'x'; 100]);
                std::thread::sleep(Duration::from_secs(10));
            });
        }
    });
    let s = start(&proxy_toml(&[url(addr)], "body_idle_timeout = \"300ms\""));
    let t = Instant::now();
    let mut c = std::net::TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    use std::io::{Read, Write};
    c.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(got.len() < 1000, "the stalled body must not be completed");
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "closed after {:?}",
        t.elapsed()
    );
}

#[test]
fn head_goes_upstream_as_head_even_when_compression_is_negotiated() {
    let gets = Arc::new(AtomicUsize::new(0));
    let g = gets.clone();
    let b = backend(axum::Router::new().fallback(any(move |req: AxumRequest| {
        let g = g.clone();
        async move {
            if req.method() == http::Method::GET {
                g.fetch_add(1, Ordering::SeqCst);
            }
            (
                [("content-type", "text/plain"), ("etag", "\"v1\"")],
                "x".repeat(5000),
            )
        }
    })));
    let s = start(&proxy_toml(&[url(b.addr)], ""));
    let h = s.head_with("/", "Accept-Encoding: gzip\r\n");
    assert_eq!(h.status, 200);
    assert_eq!(
        gets.load(Ordering::SeqCst),
        0,
        "a HEAD must not become a GET upstream"
    );
    let g1 = s.get_with("/", "Accept-Encoding: gzip\r\n");
    assert_eq!(g1.header("content-encoding"), Some("gzip"));
    // Now the variant is known, HEAD reports it.
    let h = s.head_with("/", "Accept-Encoding: gzip\r\n");
    assert_eq!(h.header("content-encoding"), Some("gzip"));
    assert_eq!(h.header("content-length"), g1.header("content-length"));
    assert_eq!(gets.load(Ordering::SeqCst), 1);
}

#[test]
fn dot_segments_never_reach_an_upstream() {
    let e = echo();
    let toml = format!(
        "[[routes]]\npath = \"/api\"\n[routes.proxy]\nupstreams = [{:?}]\nstrip_prefix = true\n",
        url(e.addr)
    );
    let s = start(&toml);
    // Routed on the normalised path, the first two name /admin, which no route serves;
    // the third stays under /api but would reach the upstream with its dot segment.
    for (p, status) in [
        ("/api/../admin", 404),
        ("/api/%2e%2e/admin", 404),
        ("/api/./x", 400),
        ("/x/../api/%2e%2e/../secret", 404),
    ] {
        assert_eq!(s.get(p).status, status, "{p}");
    }
    assert_eq!(s.get("/api/ok").status, 200);
}

#[test]
fn a_client_that_abandons_its_upload_does_not_eject_the_upstream() {
    let sink = backend(
        axum::Router::new().fallback(any(|body: axum::body::Bytes| async move {
            body.len().to_string()
        })),
    );
    let s = start(&proxy_toml(&[url(sink.addr)], "max_fails = 1\nretries = 0"));
    for _ in 0..3 {
        let mut c = Conn::open(s.addr);
        c.send(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\npartial");
        drop(c);
    }
    std::thread::sleep(Duration::from_millis(200));
    // Still in the pool: the failures were the clients'.
    let r = send(
        s.addr,
        "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nok",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), "2");
}

/// A client that trickles its upload while not reading the response the upstream sent at
/// once: its bytes are no progress of the response, which waits on it, and the connection
/// is closed after `keep_alive` as a stalled one (nginx's `send_timeout`).
#[test]
fn a_trickled_upload_does_not_keep_a_stalled_response_open() {
    let b = backend(axum::Router::new().fallback(any(|| async {
        // 64 MiB, more than loopback's buffers hold, made as it is sent.
        let chunks = futures_util::stream::iter(
            (0..1024).map(|_| Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b'x'; 64 << 10]))),
        );
        axum::body::Body::from_stream(chunks)
    })));
    let s = start(&proxy_toml(
        &[url(b.addr)],
        "[timeouts]\nkeep_alive = \"1s\"\n",
    ));
    let mut c = Conn::open(s.addr);
    c.send(b"POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n\r\n");
    let started = Instant::now();
    let mut open_for = Duration::ZERO;
    while started.elapsed() < Duration::from_secs(8) {
        use std::io::Write;
        if c.stream.write_all(b"x").is_err() || s.handle().connections() == 0 {
            open_for = started.elapsed();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        open_for > Duration::ZERO && open_for < Duration::from_secs(5),
        "still open after {:?}",
        started.elapsed()
    );
}

/// A drain closes open tunnels rather than waiting out `timeouts.drain` for them: a
/// WebSocket never ends on its own.
#[test]
fn a_drain_closes_open_tunnels() {
    let addr = websocket_echo();
    let s = start(&proxy_toml(&[url(addr)], "[timeouts]\ndrain = \"20s\"\n"));
    let mut a = Conn::open(s.addr);
    assert_eq!(a.request(WS_UPGRADE).status, 101);
    ws_echo(&mut a, "before the drain");
    assert_eq!(s.handle().connections(), 1);
    let t = Instant::now();
    assert!(s.shutdown(), "the drain timed out");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(a.closed_within(Duration::from_secs(2)));
}
