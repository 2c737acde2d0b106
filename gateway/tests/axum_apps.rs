//! gatehouse and axum both ways round, running the two examples' own code: an axum app on
//! gatehouse's server (`examples/axum_on_gatehouse.rs`), and the gateway's router in a
//! plain `axum::serve` app (`examples/gatehouse_in_axum.rs`).
mod common;
use common::pki::Ca;
use common::tls::{client_config, connect, H1, H2};
use common::*;
use std::net::SocketAddr;
use std::path::Path;

#[path = "../examples/axum_on_gatehouse.rs"]
mod on_gatehouse;

#[path = "../examples/gatehouse_in_axum.rs"]
mod in_axum;

/// A backend that answers with what the gateway told it of the client.
fn echo_backend() -> SocketAddr {
    let app = axum::Router::new().fallback(|req: http::Request<axum::body::Body>| async move {
        let h = |n: &str| {
            req.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
                .to_string()
        };
        format!(
            "path={} proto={} for={}\n",
            req.uri().path(),
            h("x-forwarded-proto"),
            h("x-forwarded-for")
        )
    });
    serve_axum(loopback(), app)
}

/// The sum of a counter's series whose labels include every one of `labels`.
fn counted(text: &str, name: &str, labels: &[&str]) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_axum_app_runs_on_gatehouses_server_with_tls_h2_and_metrics() {
    gatehouse::metrics::install().expect("metrics");
    let backend = echo_backend();
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    copy_dir(&fixtures().join("site"), &site);
    std::fs::write(site.join("big.css"), "body { margin: 0 }\n".repeat(200)).unwrap();
    let app = on_gatehouse::app(&site, Some(&format!("http://{backend}"))).expect("app");

    let ca = Ca::new("axum app test CA");
    let leaf = ca.leaf(&["localhost"], "L");
    let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
    std::fs::write(&cert, &leaf.cert_pem).unwrap();
    std::fs::write(&key, &leaf.key_pem).unwrap();
    // Per core, two runtimes: the app is cloned onto each.
    let config = load_config(format!(
        "root = {:?}\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\nruntime = \"per-core\"\nworkers = 2\n\
         [timeouts]\ndrain = \"2s\"\n[tls]\nlisten = \"127.0.0.1:0\"\n[[tls.certs]]\ncert = {:?}\nkey = {:?}\n",
        site.display().to_string(),
        cert.display().to_string(),
        key.display().to_string()
    ))
    .expect("config");
    let handle = gatehouse::serve(&config, app).expect("serve");
    let (plain, https) = (handle.addrs()[0], handle.https_addrs()[0]);

    // The app's own handler sees the client through ConnectInfo and the ConnInfo extension.
    let r = send(plain, "GET /whoami HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!((r.status, r.text().as_str()), (200, "127.0.0.1 http\n"));
    // gatehouse's StaticFiles, nested, under gatehouse's compression layer.
    let r = send(
        plain,
        "GET /static/big.css HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-encoding"),
        Some("gzip"),
        "{:?}",
        r.headers
    );
    let r = send(
        plain,
        "GET /static/nothing-here HTTP/1.1\r\nHost: a\r\n\r\n",
    );
    assert_eq!(r.status, 404);
    // gatehouse's Proxy, nested: the upstream is told who the client is.
    let r = send(plain, "GET /api/thing HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "path=/thing proto=http for=127.0.0.1\n");

    // TLS with HTTP/2 by ALPN: the app learns the request came over HTTPS.
    let cfg = client_config(&ca.pem, &[b"h2"], None);
    let mut h2 = H2::new(connect(https, "localhost", &cfg).await.unwrap()).await;
    let got = h2.get("localhost", "/whoami").await.unwrap();
    assert_eq!(
        (got.status, &got.body[..]),
        (200, &b"127.0.0.1 https\n"[..])
    );
    let got = h2.get("localhost", "/api/over-h2").await.unwrap();
    assert_eq!(&got.body[..], b"path=/over-h2 proto=https for=127.0.0.1\n");
    let cfg = client_config(&ca.pem, &[b"http/1.1"], None);
    let mut h1 = H1::new(connect(https, "localhost", &cfg).await.unwrap()).await;
    let got = h1.get("localhost", "/static/hello.txt").await.unwrap();
    assert_eq!(got.status, 200);
    drop((h1, h2));

    // The server's front checks stand in front of any Service: no Host is a 400.
    let r = send(plain, "GET /whoami HTTP/1.1\r\n\r\n");
    assert_eq!(r.status, 400);

    // gatehouse's metrics layer counted the app's requests, on gatehouse's /metrics.
    let scraped = send(
        handle.admin_addr(),
        "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n",
    );
    assert_eq!(scraped.status, 200);
    let text = scraped.text();
    let app_200 = counted(
        &text,
        "gatehouse_http_requests_total",
        &["route=\"app\"", "status=\"200\""],
    );
    let app_404 = counted(
        &text,
        "gatehouse_http_requests_total",
        &["route=\"app\"", "status=\"404\""],
    );
    // Six answered by the app, one 404 of its files; the 400 never reached it.
    assert_eq!((app_200, app_404), (6, 1), "in\n{text}");
    assert!(text.contains("gatehouse_connections_open"), "{text}");

    // Drain: a connection with a request in flight finishes; the server then stops.
    assert!(
        handle.shutdown(),
        "connections were cut at the drain timeout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_router_in_axum_serve_keeps_its_logs_metrics_and_https() {
    gatehouse::metrics::install().expect("metrics");
    let backend = echo_backend();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let config = load_config(format!(
        "root = {:?}\n\
         [[routes]]\nname = \"files\"\n[routes.static]\n[routes.access_log]\npath = {:?}\n\
         [[routes]]\nname = \"api\"\npath = \"/api\"\n[routes.proxy]\nupstreams = [\"http://{backend}\"]\nstrip_prefix = true\n",
        fixtures().join("site").display().to_string(),
        log.display().to_string()
    ))
    .expect("config");
    let gateway = gatehouse::router::build(&config).expect("router");

    let serve = |behind_https: bool| {
        let app = in_axum::app(gateway.clone(), behind_https);
        let listener = loopback();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await;
        });
        addr
    };
    let (plain, behind_tls) = (serve(false), serve(true));
    let get = |addr: SocketAddr, path: &str| {
        let raw = format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        tokio::task::spawn_blocking(move || send(addr, &raw))
    };

    let r = get(plain, "/healthz").await.unwrap();
    assert_eq!((r.status, r.text().as_str()), (200, "ok\n"));
    let r = get(plain, "/hello.txt").await.unwrap();
    assert_eq!(r.status, 200);
    let r = get(plain, "/api/x").await.unwrap();
    assert_eq!(r.text(), "path=/x proto=http for=127.0.0.1\n");
    // Told by the app's extension that its connections are HTTPS.
    let r = get(behind_tls, "/api/y").await.unwrap();
    assert_eq!(r.text(), "path=/y proto=https for=127.0.0.1\n");

    // The route's access log has the line, with the client's address from ConnectInfo.
    gateway.close_logs();
    let lines = std::fs::read_to_string(&log).unwrap();
    assert!(
        lines
            .lines()
            .any(|l| l.starts_with("127.0.0.1 ") && l.contains("\"GET /hello.txt HTTP/1.1\" 200")),
        "{lines}"
    );
    // Per-route metrics, recorded in the process's recorder and shown by the app.
    let text = get(plain, "/metrics").await.unwrap().text();
    let api = counted(
        &text,
        "gatehouse_http_requests_total",
        &["route=\"api\"", "status=\"200\""],
    );
    let files = counted(
        &text,
        "gatehouse_http_requests_total",
        &["route=\"files\"", "status=\"200\""],
    );
    assert_eq!((api, files), (2, 1), "{text}");
}

#[test]
fn the_examples_build_their_apps_from_a_site_alone() {
    // Without an upstream, the first example has no /api; a missing site is an error
    // naming it, not a panic.
    let e = on_gatehouse::app(Path::new("/nonexistent/site"), None).err();
    assert!(e.is_some_and(|e| e.contains("/nonexistent/site")));
}

#[test]
fn an_axum_router_mounted_as_a_route_is_behind_the_routes_checks() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    let app = axum::Router::new()
        .route(
            "/hi",
            axum::routing::get(|uri: http::Uri| async move { format!("hi at {}\n", uri.path()) }),
        )
        .route(
            "/",
            axum::routing::get(
                |axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<SocketAddr>| async move {
                    format!("root, for {}\n", peer.ip())
                },
            ),
        );
    let config = load_config(format!(
        "root = {:?}\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\nworkers = 1\n\
         [[routes]]\nname = \"app\"\npath = \"/app\"\nmount = \"app\"\n[routes.access_log]\npath = {:?}\n\
         [[routes]]\nname = \"closed\"\npath = \"/closed\"\nmount = \"app\"\n[routes.access]\ndeny = [\"127.0.0.0/8\"]\n\
         [[routes]]\n[routes.static]\n",
        fixtures().join("site").display().to_string(),
        log.display().to_string()
    ))
    .expect("config");

    // Without the Service, the route is an error naming its key and the name.
    let e = gatehouse::router::build(&config).err().expect("an error");
    assert!(
        e.to_string().contains("routes.0.mount") && e.to_string().contains("\"app\""),
        "{e}"
    );

    let mounts = gatehouse::router::Mounts::new().mount("app", app);
    let router = gatehouse::router::build_with(&config, mounts).expect("router");
    let handle = gatehouse::start(&config, router.clone()).expect("start");
    let addr = handle.addrs()[0];
    let get = |path: &str| send(addr, &format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n"));

    // The prefix is stripped, as for a static route or axum's nest_service.
    let r = get("/app/hi");
    assert_eq!((r.status, r.text().as_str()), (200, "hi at /hi\n"));
    assert_eq!(get("/app/nothing").status, 404);
    // The bare prefix is the app's `/`, not a redirect; the app sees its client.
    let r = get("/app");
    assert_eq!(
        (r.status, r.text().as_str()),
        (200, "root, for 127.0.0.1\n")
    );
    // The route's IP rules stand in front of the app.
    assert_eq!(get("/closed/hi").status, 403);
    // The other routes are untouched.
    assert_eq!(get("/hello.txt").status, 200);
    // A reload keeps the mounted Service.
    router.reload(&config).expect("reload");
    assert_eq!(get("/app/hi").status, 200);

    handle.shutdown();
    router.close_logs();
    let lines = std::fs::read_to_string(&log).unwrap();
    let logged: Vec<&str> = lines
        .lines()
        .filter(|l| l.contains("\"GET /app/"))
        .collect();
    assert_eq!(logged.len(), 3, "{lines}");
    assert!(
        logged[0].contains("\"GET /app/hi HTTP/1.1\" 200"),
        "{lines}"
    );
}

/// An app whose `/panic` panics in its handler, and whose `/slow` answers after 400 ms.
fn panicking_app() -> axum::Router {
    axum::Router::new()
        .route(
            "/panic",
            axum::routing::get(|| async {
                if std::hint::black_box(true) {
                    panic!("a handler's bug, on purpose");
                }
                "never"
            }),
        )
        .route(
            "/slow",
            axum::routing::get(|| async {
                tokio::time::sleep(std::time::Duration::from_millis(400)).await;
                "slow, done\n"
            }),
        )
}

/// A mounted Service that panics is answered 500, as Caddy answers a handler's panic: over
/// HTTP/2 a stream running beside it on the connection finishes, and over HTTP/1 the
/// connection takes the next request. The route logs and counts a 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_mounted_service_is_answered_500_and_the_connection_goes_on() {
    use http_body_util::{BodyExt, Empty};
    gatehouse::metrics::install().expect("metrics");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    let config = load_config(format!(
        "root = {:?}\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\nworkers = 1\nh2c = true\n\
         [[routes]]\nname = \"panicky\"\nmount = \"app\"\n[routes.access_log]\npath = {:?}\n",
        fixtures().join("site").display().to_string(),
        log.display().to_string()
    ))
    .expect("config");
    let mounts = gatehouse::router::Mounts::new().mount("app", panicking_app());
    let router = gatehouse::router::build_with(&config, mounts).expect("router");
    let handle = gatehouse::start(&config, router.clone()).expect("start");
    let tcp = tokio::net::TcpStream::connect(handle.addrs()[0])
        .await
        .unwrap();
    let (h2, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let get = |path: &str| {
        let mut h2 = h2.clone();
        let req = http::Request::get(format!("http://a{path}"))
            .body(Empty::<bytes::Bytes>::new())
            .unwrap();
        async move {
            let res = h2.send_request(req).await?;
            let status = res.status().as_u16();
            let body = res.into_body().collect().await?.to_bytes();
            Ok::<_, hyper::Error>((status, body))
        }
    };
    let slow = tokio::spawn(get("/slow"));
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let (status, body) = get("/panic")
        .await
        .expect("an answer to the panicking stream");
    assert_eq!((status, &body[..]), (500, &b"internal error\n"[..]));
    let (status, body) = slow.await.unwrap().expect("the stream beside it");
    assert_eq!((status, &body[..]), (200, &b"slow, done\n"[..]));

    // HTTP/1: the same connection goes on after the 500.
    let addr = handle.addrs()[0];
    let (first, second) = tokio::task::spawn_blocking(move || {
        let mut c = Conn::open(addr);
        let first = c.request("GET /panic HTTP/1.1\r\nHost: a\r\n\r\n");
        let second = c.request("GET /slow HTTP/1.1\r\nHost: a\r\n\r\n");
        (first.status, second.status)
    })
    .await
    .unwrap();
    assert_eq!((first, second), (500, 200));

    let admin = handle.admin_addr();
    let m = tokio::task::spawn_blocking(move || {
        send(admin, "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n").text()
    })
    .await
    .unwrap();
    let counted_500 = counted(
        &m,
        "gatehouse_http_requests_total",
        &["route=\"panicky\"", "status=\"500\""],
    );
    assert_eq!(counted_500, 2, "{m}");
    handle.shutdown();
    router.close_logs();
    let lines = std::fs::read_to_string(&log).unwrap();
    let count = |what: &str| lines.lines().filter(|l| l.contains(what)).count();
    assert_eq!(
        (
            count("\"GET /panic HTTP/2.0\" 500"),
            count("\"GET /panic HTTP/1.1\" 500"),
            count("\" 200 ")
        ),
        (1, 1, 2),
        "{lines}"
    );
}

/// The same under `gatehouse::serve`, which serves any tower Service: 500, and the
/// connection goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_service_served_whole_is_answered_500() {
    let config = load_config(format!(
        "root = {:?}\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\nworkers = 1\n",
        fixtures().join("site").display().to_string()
    ))
    .expect("config");
    let handle = gatehouse::serve(&config, panicking_app()).expect("serve");
    let addr = handle.addrs()[0];
    let (first, second) = tokio::task::spawn_blocking(move || {
        let mut c = Conn::open(addr);
        let first = c.request("GET /panic HTTP/1.1\r\nHost: a\r\n\r\n");
        let second = c.request("GET /slow HTTP/1.1\r\nHost: a\r\n\r\n");
        ((first.status, first.text()), second.status)
    })
    .await
    .unwrap();
    assert_eq!(first, (500, "internal error\n".to_string()));
    assert_eq!(second, 200);
    assert!(handle.shutdown());
}
