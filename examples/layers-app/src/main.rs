//! Serves the example app: `cargo run -p layers-app -- 127.0.0.1:3000 users.htpasswd`.

use layers_app::{app, Options};

#[tokio::main]
async fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:3000".into());
    let htpasswd = args.next().unwrap_or_else(|| "users.htpasswd".into());
    let app = app(&Options {
        htpasswd: htpasswd.into(),
        access_log: "access.log".into(),
    })?;
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    println!("listening on http://{addr}");
    let served = axum::serve(listener, app.router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await;
    app.log.close();
    served.map_err(|e| e.to_string())
}
