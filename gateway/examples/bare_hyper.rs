//! hyper's floor: hyper alone answering every request with the same `Bytes` (a file read
//! once at start), on one current-thread runtime per core, as gatehouse's per-core mode does.
//! `cargo run --release --example bare_hyper -- 127.0.0.1:18080 [FILE [CONTENT-ENCODING]]`
//! (without a file, 1 KiB of `x`). `FLOOR=1 bench/run.sh` benches it as `hyper-floor` in
//! static-1k and text-gzip: how far gatehouse's own work is from what hyper costs; and in
//! rules-1k, with the fields that route's rules add (`BARE_HYPER_HEADERS`, a `Name: value`
//! a line, each value shared, the request ID a fixed one), what writing them costs hyper.

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;

fn main() {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:18080".into())
        .parse()
        .expect("an address such as 127.0.0.1:18080");
    let body = match std::env::args().nth(2) {
        Some(path) => Bytes::from(std::fs::read(&path).expect("a readable file")),
        None => Bytes::from(vec![b'x'; 1024]),
    };
    let encoding = std::env::args()
        .nth(3)
        .map(|e| http::HeaderValue::from_str(&e).expect("a content-encoding"));
    let extra: Vec<(http::HeaderName, http::HeaderValue)> = std::env::var("BARE_HYPER_HEADERS")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| {
            (
                http::HeaderName::from_bytes(n.trim().as_bytes()).expect("a field name"),
                http::HeaderValue::from_str(v.trim()).expect("a field value"),
            )
        })
        .collect();
    let extra = std::sync::Arc::new(extra);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let listeners = gatehouse::server::listener::bind_group(addr, cores, false)
        .expect("bind")
        .0;
    let threads: Vec<_> = listeners
        .into_iter()
        .map(|l| {
            let (body, encoding, extra) = (body.clone(), encoding.clone(), extra.clone());
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(async move {
                    let l = tokio::net::TcpListener::from_std(l).expect("listener");
                    loop {
                        let Ok((s, _)) = l.accept().await else {
                            continue;
                        };
                        let _ = s.set_nodelay(true);
                        let (body, encoding, extra) =
                            (body.clone(), encoding.clone(), extra.clone());
                        tokio::spawn(async move {
                            let svc = service_fn(move |_req: Request<hyper::body::Incoming>| {
                                let mut res = Response::new(Full::new(body.clone()));
                                if let Some(e) = &encoding {
                                    res.headers_mut()
                                        .insert(http::header::CONTENT_ENCODING, e.clone());
                                }
                                for (n, v) in extra.iter() {
                                    res.headers_mut().insert(n.clone(), v.clone());
                                }
                                async move { Ok::<_, Infallible>(res) }
                            });
                            let _ = http1::Builder::new()
                                .serve_connection(TokioIo::new(s), svc)
                                .await;
                        });
                    }
                })
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}
