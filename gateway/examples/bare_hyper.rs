//! The floor for `static-1k`: hyper alone answering every request with the same 1 KiB
//! `Bytes`, on one current-thread runtime per core, as gatehouse's per-core mode does.
//! `cargo run --release --example bare_hyper -- 127.0.0.1:18080 [body-bytes]`, then load it like the
//! bench does, to see how far gatehouse's own work is from what hyper costs.

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
    // An optional body size: the gzip of the text-gzip scenario's script is about 6 KB.
    let size: usize = std::env::args()
        .nth(2)
        .map_or(Ok(1024), |s| s.parse())
        .expect("a body size in bytes");
    let body = Bytes::from(vec![b'x'; size]);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let listeners = gatehouse::server::listener::bind_group(addr, cores, false)
        .expect("bind")
        .0;
    let threads: Vec<_> = listeners
        .into_iter()
        .map(|l| {
            let body = body.clone();
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
                        let body = body.clone();
                        tokio::spawn(async move {
                            let svc = service_fn(move |_req: Request<hyper::body::Incoming>| {
                                let body = body.clone();
                                async move { Ok::<_, Infallible>(Response::new(Full::new(body))) }
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
