//! The admin listener: `/healthz` (the process is up), `/readyz` (it takes traffic; 503
//! while draining) and `POST /reload` (re-read the configuration and swap the routes).

use crate::server::Shared;
use crate::static_files::plain;
use axum::routing::get;
use axum::Router;
use http::StatusCode;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use std::net::TcpListener;
use std::sync::Arc;
use tokio::sync::watch;

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    let for_reload = shared.clone();
    Router::new()
        .route(
            "/reload",
            axum::routing::post(move || {
                let shared = for_reload.clone();
                async move {
                    let f = shared.reloader.lock().ok().and_then(|r| r.clone());
                    let Some(f) = f else {
                        return plain(StatusCode::NOT_IMPLEMENTED, "reload is not set up\n");
                    };
                    // Reading files and opening roots: off the event loop.
                    match tokio::task::spawn_blocking(move || f()).await {
                        Ok(Ok(())) => plain(StatusCode::OK, "reloaded\n"),
                        Ok(Err(e)) => plain(
                            StatusCode::BAD_REQUEST,
                            format!("configuration refused; the old one stays in force:\n{e}\n"),
                        ),
                        Err(_) => plain(StatusCode::INTERNAL_SERVER_ERROR, "reload failed\n"),
                    }
                }
            }),
        )
        .route("/healthz", get(|| async { plain(StatusCode::OK, "ok\n") }))
        .route(
            "/metrics",
            get({
                let shared = shared.clone();
                move || {
                    let shared = shared.clone();
                    async move {
                        let Some(e) = shared.exporter.get() else {
                            return plain(StatusCode::NOT_FOUND, "metrics are off\n");
                        };
                        let mut res = plain(StatusCode::OK, e.render());
                        res.headers_mut().insert(
                            http::header::CONTENT_TYPE,
                            http::HeaderValue::from_static(
                                "text/plain; version=0.0.4; charset=utf-8",
                            ),
                        );
                        res
                    }
                }
            }),
        )
        .route(
            "/readyz",
            get(move || {
                let draining = shared.is_draining();
                async move {
                    if draining {
                        plain(StatusCode::SERVICE_UNAVAILABLE, "draining\n")
                    } else {
                        plain(StatusCode::OK, "ready\n")
                    }
                }
            }),
        )
}

pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("admin listener: {e}");
            return;
        }
    };
    let app = router(shared.clone());
    if shared.exporter.get().is_some() {
        let shared = shared.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tick.tick().await;
                if let Some(e) = shared.exporter.get() {
                    e.upkeep();
                }
            }
        });
    }
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    spawn_connection(stream, &app, true);
                }
            }
            // Keep answering /readyz (503) while the public listeners drain; stop once
            // every public connection is gone.
            _ = shutdown.changed() => {
                let drained = shared.drained();
                tokio::pin!(drained);
                loop {
                    tokio::select! {
                        accepted = listener.accept() => {
                            if let Ok((stream, _)) = accepted {
                                spawn_connection(stream, &app, false);
                            }
                        }
                        _ = &mut drained => return,
                    }
                }
            }
        }
    }
}

fn spawn_connection(stream: tokio::net::TcpStream, app: &Router, keep_alive: bool) {
    let _ = stream.set_nodelay(true);
    let svc = TowerToHyperService::new(app.clone());
    tokio::spawn(async move {
        let _ = http1::Builder::new()
            .keep_alive(keep_alive)
            .serve_connection(TokioIo::new(stream), svc)
            .await;
    });
}
