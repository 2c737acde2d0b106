//! Reload: `POST /reload` swaps routes and upstream pools atomically, under load, with no
//! failed request; a broken configuration is refused and serving goes on.
use crate::common;
use common::*;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn named(name: &'static str) -> SocketAddr {
    serve_axum(
        loopback(),
        axum::Router::new().fallback(axum::routing::any(move || async move { name })),
    )
}
use std::net::SocketAddr;

fn proxy_to(addr: SocketAddr) -> String {
    format!("[[routes]]\n[routes.proxy]\nupstreams = [\"http://{addr}\"]\n")
}

/// A server whose reloader reads `file`, as the binary's reads its --config.
fn server_with_file(dir: &std::path::Path, first: &str) -> (TestServer, PathBuf) {
    let file = dir.join("gatehouse.toml");
    std::fs::write(&file, first).unwrap();
    let s = TestServer::start(dir, first);
    let (router, f, root) = (s.router.clone(), file.clone(), dir.to_path_buf());
    s.handle().set_reloader(Arc::new(move || {
        let text = std::fs::read_to_string(&f).map_err(|e| e.to_string())?;
        let toml = format!(
            "root = {:?}\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n{text}",
            root.display().to_string()
        );
        let config = load_config(toml)?;
        router.reload(&config).map_err(|e| e.to_string())?;
        Ok(Vec::new())
    }));
    (s, file)
}

fn post_reload(s: &TestServer) -> Resp {
    send(
        s.admin,
        "POST /reload HTTP/1.1\r\nHost: admin\r\nContent-Length: 0\r\n\r\n",
    )
}

#[test]
fn a_reload_under_load_fails_no_request() {
    let (a, b) = (named("a"), named("b"));
    let dir = tempfile::tempdir().unwrap();
    let (s, file) = server_with_file(dir.path(), &proxy_to(a));
    assert_eq!(s.get("/").text(), "a");

    let stop = Arc::new(AtomicBool::new(false));
    let (failures, saw_b) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let addr = s.addr;
    let load: Vec<_> = (0..4)
        .map(|_| {
            let (stop, failures, saw_b) = (stop.clone(), failures.clone(), saw_b.clone());
            std::thread::spawn(move || {
                // Keep-alive connections that stay open across the reload.
                let mut c = Conn::open(addr);
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    let r = c.request("GET / HTTP/1.1\r\nHost: t\r\n\r\n");
                    match (r.status, r.text().as_str()) {
                        (200, "a") => {}
                        (200, "b") => {
                            saw_b.fetch_add(1, Ordering::SeqCst);
                        }
                        _ => {
                            failures.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    n += 1;
                }
                n
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    std::fs::write(&file, proxy_to(b)).unwrap();
    let r = post_reload(&s);
    assert_eq!(r.status, 200, "{}", r.text());
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::SeqCst);
    let total: usize = load.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(total > 100, "only {total} requests");
    assert_eq!(failures.load(Ordering::SeqCst), 0);
    assert!(
        saw_b.load(Ordering::SeqCst) > 0,
        "the open connections moved to the new pool"
    );
    assert_eq!(s.get("/").text(), "b");
}

#[test]
fn a_broken_config_is_refused_and_serving_goes_on() {
    let a = named("a");
    let dir = tempfile::tempdir().unwrap();
    let (s, file) = server_with_file(dir.path(), &proxy_to(a));
    std::fs::write(
        &file,
        "[[routes]]\n[routes.proxy]\nupstreams = [\"http://x:1\"]\npolicy = \"fastest\"\n",
    )
    .unwrap();
    let r = post_reload(&s);
    assert_eq!(r.status, 400);
    assert!(r.text().contains("routes.0.proxy.policy"), "{}", r.text());
    assert!(r.text().contains("old one stays"), "{}", r.text());
    assert_eq!(s.get("/").text(), "a");
    // A valid one after that goes through.
    std::fs::write(
        &file,
        "[[routes]]\npath = \"/x\"\n[routes.proxy]\nupstreams = [\"http://127.0.0.1:1\"]\n",
    )
    .unwrap();
    assert_eq!(post_reload(&s).status, 200);
    assert_eq!(s.get("/").status, 404);
}

#[test]
fn sighup_reloads_under_load_fail_no_request() {
    let g = spawn_gatehouse("");
    let conf = g.dir.path().join("gatehouse.toml");
    let base = std::fs::read_to_string(&conf).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicUsize::new(0));
    let addr = g.addr;
    let load: Vec<_> = (0..4)
        .map(|_| {
            let (stop, failures) = (stop.clone(), failures.clone());
            std::thread::spawn(move || {
                let mut c = Conn::open(addr);
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    let r = c.request("GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
                    if (r.status, r.text().as_str()) != (200, "hello, world\n") {
                        failures.fetch_add(1, Ordering::SeqCst);
                    }
                    n += 1;
                }
                n
            })
        })
        .collect();
    for i in 0..6 {
        std::thread::sleep(Duration::from_millis(150));
        // Each reload changes the routes (a cache-control header on and off).
        let extra = if i % 2 == 0 {
            "[[routes]]\n[routes.static]\ncache_control = \"max-age=60\"\n"
        } else {
            ""
        };
        std::fs::write(&conf, format!("{base}{extra}")).unwrap();
        unsafe { libc::kill(g.child.id() as i32, libc::SIGHUP) };
    }
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::SeqCst);
    let total: usize = load.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(total > 100, "only {total} requests");
    assert_eq!(failures.load(Ordering::SeqCst), 0, "of {total}");
    let log = std::fs::read_to_string(g.dir.path().join("stderr.log")).unwrap();
    assert!(!log.contains("refused"), "{log}");
    // And the reloads took: the last one set a Cache-Control.
    std::fs::write(
        &conf,
        format!("{base}[[routes]]\n[routes.static]\ncache_control = \"max-age=60\"\n"),
    )
    .unwrap();
    unsafe { libc::kill(g.child.id() as i32, libc::SIGHUP) };
    std::thread::sleep(Duration::from_millis(500));
    let r = send(g.addr, "GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.header("cache-control"), Some("max-age=60"));
}
