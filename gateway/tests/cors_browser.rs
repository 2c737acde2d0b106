//! CORS in a real browser: headless Chromium loads a page from one origin whose script
//! sends a preflighted, credentialed `PUT` to a route on another. The route that allows
//! the page's origin lets it through; the one that doesn't is blocked by the browser
//! (the PUT never reaches the upstream). `scripts/test.sh` installs Chromium (Debian's
//! `chromium`); this test fails, not skips, without it.
use crate::common;
use common::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

#[test]
fn a_preflighted_credentialed_put_is_allowed_or_blocked_by_the_browser() {
    let puts = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let seen = puts.clone();
    let up = serve_axum(
        loopback(),
        axum::Router::new().fallback(axum::routing::any(move |req: axum::extract::Request| {
            let seen = seen.clone();
            async move {
                if req.method() == http::Method::PUT {
                    let i = usize::from(req.uri().path().starts_with("/blocked"));
                    seen[i].fetch_add(1, Ordering::SeqCst);
                }
                "stored"
            }
        })),
    );

    // The page's origin: a static route of its own server.
    let page_dir = tempfile::tempdir().unwrap();
    let page_server = TestServer::start(page_dir.path(), "");
    let origin = format!("http://{}", page_server.addr);
    let api = TestServer::site(&format!(
        r#"
[[routes]]
path = "/allowed"
[routes.proxy]
upstreams = ["http://{up}"]
[routes.cors]
allow_origins = ["{origin}"]
allow_methods = ["GET", "PUT"]
allow_headers = ["content-type"]
allow_credentials = true

[[routes]]
path = "/blocked"
[routes.proxy]
upstreams = ["http://{up}"]
[routes.cors]
allow_origins = ["https://someone-else.test"]
allow_methods = ["GET", "PUT"]
allow_headers = ["content-type"]
allow_credentials = true
"#
    ));
    let target = format!("http://{}", api.addr);
    std::fs::write(
        page_dir.path().join("index.html"),
        format!(
            r#"<html><body>waiting<script>
async function put(url) {{
  try {{
    const r = await fetch(url, {{ method: "PUT", credentials: "include",
      headers: {{ "Content-Type": "application/json" }}, body: "{{}}" }});
    return "status " + r.status + " " + (await r.text());
  }} catch (e) {{ return "error " + e.name; }}
}}
(async () => {{
  const a = await put("{target}/allowed/item");
  const b = await put("{target}/blocked/item");
  document.body.textContent = "allowed=" + a + "|blocked=" + b;
}})();
</script></body></html>"#
        ),
    )
    .unwrap();

    let (dom, stderr) = chromium_dom(&[], &format!("{origin}/index.html"));
    assert!(
        dom.contains("allowed=status 200 stored|blocked=error TypeError"),
        "the page said: {dom}\nchromium: {stderr}"
    );
    assert_eq!(
        puts[0].load(Ordering::SeqCst),
        1,
        "the allowed PUT reached the upstream once"
    );
    assert_eq!(
        puts[1].load(Ordering::SeqCst),
        0,
        "the blocked PUT never left the browser"
    );
}
