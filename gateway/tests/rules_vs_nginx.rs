//! The same rules in nginx and in gatehouse, the same requests to both: response header
//! rules, redirects (exact, prefix, regex with captures), try_files and an error page.
//! Status, `Location`, the fields the rules name, and the body must match; where the two
//! may differ, the difference is written next to the request. nginx is Debian's
//! (`scripts/test.sh` installs it).
use crate::common;
use common::*;
use std::os::unix::fs::PermissionsExt;

/// A site readable by nginx's workers (who may run as `nobody`).
fn site() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    copy_dir(&fixtures().join("site"), &root);
    let app = root.join("app");
    std::fs::create_dir_all(app.join("sub")).unwrap();
    std::fs::write(app.join("index.html"), "<p>the app</p>\n").unwrap();
    std::fs::write(app.join("page.html"), "<p>a page</p>\n").unwrap();
    std::fs::write(app.join("sub/index.html"), "<p>sub index</p>\n").unwrap();
    std::fs::write(app.join("data.txt"), "data\n").unwrap();
    let mut stack = vec![dir.path().to_path_buf()];
    while let Some(p) = stack.pop() {
        let dir = p.is_dir();
        let mode = if dir { 0o755 } else { 0o644 };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        if dir {
            stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        }
    }
    dir
}

fn nginx(root: &std::path::Path) -> Nginx {
    let root = root.display();
    nginx_on(free_port(), |d, port| {
        format!(
            r#"worker_processes 1;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d};
  uwsgi_temp_path {d}; scgi_temp_path {d};
  types {{ text/html html; text/plain txt; }}
  default_type application/octet-stream;
  absolute_redirect off;
  server_tokens off;
  server {{
    listen 127.0.0.1:{port};
    root {root};
    add_header X-Frame-Options DENY always;
    add_header X-Content-Type-Options nosniff always;
    error_page 404 /404.html;
    location = /old.html {{ return 301 /hello.txt; }}
    location ~ ^/docs-v1(/.*)?$ {{ return 308 /docs$1; }}
    location ~ "^/blog/(\d{{4}})/(\w+)$" {{ return 302 https://blog.example.com/$1/$2$is_args$args; }}
    location /app/ {{ try_files $uri $uri.html $uri/ /app/index.html; }}
  }}
}}
"#
        )
    })
}

fn gatehouse(root: &std::path::Path) -> TestServer {
    let app = root.join("app");
    TestServer::start(
        root,
        &format!(
            r#"
[[routes]]
path = "/"
error_pages = {{ "404" = "/404.html" }}
[routes.static]
[[routes.headers.response]]
set = {{ "X-Frame-Options" = "DENY", "X-Content-Type-Options" = "nosniff" }}
[[routes.redirects]]
exact = "/old.html"
to = "/hello.txt"
[[routes.redirects]]
prefix = "/docs-v1"
to = "/docs$1"
status = 308
[[routes.redirects]]
regex = '^/blog/(\d{{4}})/(\w+)$'
to = "https://blog.example.com/$1/$2$is_args$args"
status = 302

[[routes]]
path = "/app"
error_pages = {{ "404" = "/404.html" }}
[routes.static]
root = {app:?}
try_files = ["$path", "$path.html", "$path/", "/index.html"]
[[routes.headers.response]]
set = {{ "X-Frame-Options" = "DENY", "X-Content-Type-Options" = "nosniff" }}
"#
        ),
    )
}

#[test]
fn status_location_named_fields_and_body_match_nginx() {
    let dir = site();
    let root = dir.path().join("site");
    // The app route's error page lives in its own root.
    std::fs::copy(root.join("404.html"), root.join("app/404.html")).unwrap();
    let n = nginx(&root);
    let g = gatehouse(&root);
    let mut compared = 0;
    for target in [
        "/hello.txt",
        "/index.html",
        "/nope.txt",
        "/old.html",
        "/old.html?x=1",
        "/docs-v1",
        "/docs-v1/a/b.html",
        "/docs-v10",
        "/blog/2024/hello",
        "/blog/2024/hello?utm=1",
        "/blog/24/hello",
        "/app/",
        "/app/page",
        "/app/page.html",
        "/app/data.txt",
        "/app/sub/",
        // A directory named without its slash, found by `$uri/`: both redirect to it.
        "/app/sub",
        "/app/deep/link/42",
        "/app/deep/link/42?tab=2",
        "/app/.hidden",
    ] {
        let a = send(
            n.addr,
            &format!("GET {target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"),
        );
        let b = send(
            g.addr,
            &format!("GET {target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"),
        );
        assert_eq!(a.status, b.status, "{target}: status");
        // gatehouse writes a directory's redirect relative to the request (`sub/` for
        // `/app/sub`: a route's service sees its path without the prefix); nginx writes
        // the path. Both resolve to the same URL (RFC 3986 §5.2), which is compared.
        let resolved = |r: &Resp| r.header("location").map(|l| resolve(target, l));
        assert_eq!(resolved(&a), resolved(&b), "{target}: Location");
        for field in ["x-frame-options", "x-content-type-options"] {
            assert_eq!(a.header(field), b.header(field), "{target}: {field}");
        }
        // Bodies of files and pages; a redirect's body is each server's own (nginx writes
        // an HTML note, gatehouse none), as is the 404 page nginx serves for a hidden file.
        if a.status == 200 || a.status == 404 {
            assert_eq!(a.text(), b.text(), "{target}: body");
            let ty = |r: &Resp| {
                r.header("content-type")
                    .map(|t| t.split(';').next().unwrap_or("").to_string())
            };
            assert_eq!(ty(&a), ty(&b), "{target}: Content-Type");
        }
        compared += 1;
    }
    assert_eq!(compared, 20);
}

/// `location` resolved against the request's path (RFC 3986 §5.2.2, for the relative
/// references these servers write: a path, or a segment).
fn resolve(target: &str, location: &str) -> String {
    if location.starts_with('/') || location.contains("://") {
        return location.to_string();
    }
    let path = target.split('?').next().unwrap_or("/");
    let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
    format!("{dir}{location}")
}
