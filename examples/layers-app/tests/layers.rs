//! Each of gatehouse's layers at work in an app that isn't gatehouse.

use axum::body::Body;
use base64::Engine;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use layers_app::{app, Options, SCRIPT};
use std::io::Read;
use tower::ServiceExt;

async fn get(
    app: &axum::Router,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, http::HeaderMap, Vec<u8>) {
    let mut req = Request::get(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let res = app
        .clone()
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let (parts, body) = res.into_parts();
    let body = body.collect().await.unwrap().to_bytes().to_vec();
    (parts.status, parts.headers, body)
}

fn basic(user: &str, pass: &str) -> String {
    let t = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
    format!("Basic {t}")
}

#[tokio::test]
async fn every_layer_works_in_the_app() {
    let dir = tempfile::tempdir().unwrap();
    let htpasswd = dir.path().join("users");
    std::fs::write(
        &htpasswd,
        format!("admin:{}\n", bcrypt::hash("s3cret", 4).unwrap()),
    )
    .unwrap();
    let log_path = dir.path().join("access.log");
    let a = app(&Options {
        htpasswd,
        access_log: log_path.clone(),
    })
    .unwrap();
    let r = &a.router;

    // The precompressed cache: gzip on request, the same bytes decoded, a variant ETag,
    // the second time from memory (the same bytes again).
    let (status, h, gz) = get(r, "/app.js", &[("accept-encoding", "gzip")]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(h["content-encoding"], "gzip");
    assert_eq!(h["etag"], "\"app-v1-gzip\"");
    assert!(
        gz.len() < SCRIPT.len() / 2,
        "{} of {}",
        gz.len(),
        SCRIPT.len()
    );
    let mut plain = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut plain)
        .unwrap();
    assert_eq!(plain, SCRIPT);
    let (_, _, again) = get(r, "/app.js", &[("accept-encoding", "gzip")]).await;
    assert_eq!(again, gz);
    let (_, h, body) = get(r, "/app.js", &[]).await;
    assert!(h.get("content-encoding").is_none());
    assert_eq!(body, SCRIPT.as_bytes());

    // Auth on /admin only.
    let (status, h, _) = get(r, "/admin", &[]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(h["www-authenticate"]
        .to_str()
        .unwrap()
        .starts_with("Basic realm=\"admin\""));
    let wrong = basic("admin", "nope");
    assert_eq!(
        get(r, "/admin", &[("authorization", &wrong)]).await.0,
        StatusCode::UNAUTHORIZED
    );
    let right = basic("admin", "s3cret");
    let (status, _, body) = get(r, "/admin", &[("authorization", &right)]).await;
    assert_eq!(
        (status, &body[..]),
        (StatusCode::OK, &b"the admin area\n"[..])
    );
    assert_eq!(
        get(r, "/", &[]).await.0,
        StatusCode::OK,
        "the rest needs no credentials"
    );

    // Metrics: eight requests so far, by method and status; /metrics itself not counted.
    let (status, _, text) = get(r, "/metrics", &[]).await;
    assert_eq!(status, StatusCode::OK);
    let text = String::from_utf8(text).unwrap();
    let count = |status: &str| -> f64 {
        let series = format!(
            "gatehouse_http_requests_total{{route=\"app\",method=\"GET\",status=\"{status}\"}} "
        );
        text.lines()
            .find_map(|l| l.strip_prefix(&series)?.parse().ok())
            .unwrap_or_else(|| panic!("{series} missing:\n{text}"))
    };
    assert_eq!(count("200"), 5.0);
    assert_eq!(count("401"), 2.0);

    // The access log: a combined line per request, credentials never in it.
    a.log.close();
    let log = std::fs::read_to_string(&log_path).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 7, "{log}");
    assert!(
        lines[0].contains("\"GET /app.js HTTP/1.1\" 200 "),
        "{}",
        lines[0]
    );
    assert!(
        lines
            .iter()
            .filter(|l| l.contains("/admin HTTP/1.1\" 401 "))
            .count()
            == 2,
        "{log}"
    );
    assert!(
        !log.contains("s3cret") && !log.contains(&right[6..]),
        "a credential in the log"
    );
}
