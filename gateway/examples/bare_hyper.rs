//! hyper's floor: hyper alone answering every request with the same `Bytes` (a file read
//! once at start), on one current-thread runtime per core, as gatehouse's per-core mode does.
//! `cargo run --release --example bare_hyper -- 127.0.0.1:18080 [FILE [CONTENT-ENCODING]]`
//! (without a file, 1 KiB of `x`). `FLOOR=1 bench/run.sh` benches it as `hyper-floor` in
//! static-1k and text-gzip: how far gatehouse's own work is from what hyper costs.

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
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let listeners = gatehouse::server::listener::bind_group(addr, cores, false)
        .expect("bind")
        .0;
    let threads: Vec<_> = listeners
        .into_iter()
        .map(|l| {
            let (body, encoding) = (body.clone(), encoding.clone());
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
                        let (body, encoding) = (body.clone(), encoding.clone());
                        tokio::spawn(async move {
                            let svc = service_fn(move |_req: Request<hyper::body::Incoming>| {
                                let mut res = Response::new(Full::new(body.clone()));
                                if let Some(e) = &encoding {
                                    res.headers_mut()
                                        .insert(http::header::CONTENT_ENCODING, e.clone());
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
