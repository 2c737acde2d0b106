//! `StaticFiles` used alone: mounted with `nest_service` in a plain axum app, with and
//! without the open-file cache, answering what RFC 9110 asks of a file server.

use axum::Router;
use gatehouse_layers::open_file_cache::{CacheOptions, FileCache, OpenFileCacheLayer, Resolver};
use gatehouse_layers::static_files::StaticFiles;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use tower::ServiceExt;

struct Got {
    status: StatusCode,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

impl Got {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
}

async fn send(app: &Router, method: &str, path: &str, headers: &[(&str, &str)]) -> Got {
    let mut req = Request::builder().method(method).uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let res = app
        .clone()
        .oneshot(req.body(axum::body::Body::empty()).unwrap())
        .await
        .unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let body = res.into_body().collect().await.unwrap().to_bytes().to_vec();
    Got {
        status,
        headers,
        body,
    }
}

/// Bytes no two offsets of which are likely to agree over a stretch, so a wrong offset
/// shows.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

struct Site {
    dir: tempfile::TempDir,
    small: Vec<u8>,
    big: Vec<u8>,
}

const SECRET: &str = "the secret beside the root";

impl Site {
    fn root(&self) -> std::path::PathBuf {
        self.dir.path().join("site")
    }
}

/// Under `site/`: 3 KiB (kept in memory by the cache) and 1 MiB + 7 (streamed from the
/// file in chunks). Beside it, a secret no path may reach, and a symlink to it inside.
fn site() -> Site {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    std::fs::create_dir(&root).unwrap();
    let small = noise(3 * 1024, 7);
    let big = noise((1 << 20) + 7, 11);
    std::fs::write(root.join("small.bin"), &small).unwrap();
    std::fs::write(root.join("big.bin"), &big).unwrap();
    std::fs::create_dir(root.join("docs")).unwrap();
    std::fs::write(root.join("docs/index.html"), "<p>docs</p>").unwrap();
    std::fs::write(root.join("404.html"), "<p>no such page</p>").unwrap();
    std::fs::write(dir.path().join("secret.txt"), SECRET).unwrap();
    std::os::unix::fs::symlink(dir.path().join("secret.txt"), root.join("link.txt")).unwrap();
    Site { dir, small, big }
}

/// The three ways to mount it: with no cache (resolved on the blocking pool), with a cache
/// of its own, and under an `OpenFileCacheLayer`.
fn apps(site: &Site) -> Vec<(&'static str, Router)> {
    let root = site.root();
    let resolver = || Resolver::new(&root).unwrap();
    let bare = StaticFiles::new(resolver()).not_found_page("404.html");
    let cached = StaticFiles::new(resolver())
        .with_cache(FileCache::new(resolver(), CacheOptions::default()))
        .not_found_page("404.html");
    let layered = tower::ServiceBuilder::new()
        .layer(OpenFileCacheLayer::new(FileCache::new(
            resolver(),
            CacheOptions::default(),
        )))
        .service(StaticFiles::new(resolver()).not_found_page("404.html"));
    vec![
        ("bare", Router::new().nest_service("/files", bare)),
        ("cached", Router::new().nest_service("/files", cached)),
        ("layered", Router::new().nest_service("/files", layered)),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_files_with_their_validators_under_a_prefix() {
    let site = site();
    for (name, app) in apps(&site) {
        for (path, want) in [
            ("/files/small.bin", &site.small),
            ("/files/big.bin", &site.big),
        ] {
            let got = send(&app, "GET", path, &[]).await;
            assert_eq!(got.status, 200, "{name} {path}");
            assert_eq!(&got.body, want, "{name} {path}");
            assert_eq!(
                got.header("content-length"),
                Some(want.len().to_string().as_str()),
                "{name} {path}"
            );
            assert_eq!(got.header("accept-ranges"), Some("bytes"), "{name}");
            assert!(
                got.header("etag").is_some_and(|e| e.starts_with('"')),
                "{name}"
            );
            assert!(got.header("last-modified").is_some(), "{name}");

            let head = send(&app, "HEAD", path, &[]).await;
            assert_eq!(head.status, 200, "{name}");
            assert!(head.body.is_empty(), "{name}: HEAD has no body");
            assert_eq!(head.header("content-length"), got.header("content-length"));
            assert_eq!(head.header("etag"), got.header("etag"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_requests_follow_rfc_9110_section_13() {
    let site = site();
    for (name, app) in apps(&site) {
        let first = send(&app, "GET", "/files/small.bin", &[]).await;
        let etag = first.header("etag").unwrap().to_owned();
        let lm = first.header("last-modified").unwrap().to_owned();

        let inm = send(&app, "GET", "/files/small.bin", &[("if-none-match", &etag)]).await;
        assert_eq!(inm.status, 304, "{name}");
        assert!(inm.body.is_empty(), "{name}");
        assert_eq!(inm.header("etag"), Some(etag.as_str()), "{name}");

        // §13.2.2: If-None-Match wins over If-Modified-Since.
        let other = send(
            &app,
            "GET",
            "/files/small.bin",
            &[("if-none-match", "\"other\""), ("if-modified-since", &lm)],
        )
        .await;
        assert_eq!(other.status, 200, "{name}");
        assert_eq!(other.body, site.small, "{name}");

        let ims = send(
            &app,
            "GET",
            "/files/small.bin",
            &[("if-modified-since", &lm)],
        )
        .await;
        assert_eq!(ims.status, 304, "{name}");

        let failed = send(
            &app,
            "GET",
            "/files/small.bin",
            &[("if-match", "\"other\"")],
        )
        .await;
        assert_eq!(failed.status, 412, "{name}");
        let matched = send(&app, "GET", "/files/small.bin", &[("if-match", &etag)]).await;
        assert_eq!(matched.status, 200, "{name}");

        // §13.1.5: If-Range with a stale validator gets the whole file.
        let stale = send(
            &app,
            "GET",
            "/files/small.bin",
            &[("range", "bytes=0-9"), ("if-range", "\"other\"")],
        )
        .await;
        assert_eq!(stale.status, 200, "{name}");
        assert_eq!(stale.body, site.small, "{name}");
        let fresh = send(
            &app,
            "GET",
            "/files/small.bin",
            &[("range", "bytes=0-9"), ("if-range", &etag)],
        )
        .await;
        assert_eq!(fresh.status, 206, "{name}");
        assert_eq!(fresh.body, &site.small[..10], "{name}");
    }
}

/// Ranges chosen at random (a fixed seed, so a failure repeats) over both files: every
/// satisfiable one returns exactly those bytes with a Content-Range that says so, and
/// every unsatisfiable one is 416 with the length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_single_ranges_return_exactly_their_bytes() {
    let site = site();
    let apps = apps(&site);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    for i in 0..300 {
        let (name, app) = &apps[i % apps.len()];
        let (path, file) = if i % 2 == 0 {
            ("/files/small.bin", &site.small)
        } else {
            ("/files/big.bin", &site.big)
        };
        let len = file.len() as u64;
        // Starts and ends past the end as well as inside, and suffix ranges.
        let (spec, want) = match next(3) {
            0 => {
                let a = next(len + 20);
                let b = a + next(len);
                let want = (a < len).then(|| a..(b + 1).min(len));
                (format!("bytes={a}-{b}"), want)
            }
            1 => {
                let a = next(len + 20);
                (format!("bytes={a}-"), (a < len).then_some(a..len))
            }
            _ => {
                let n = next(len + 20);
                let want = (n > 0).then(|| len.saturating_sub(n)..len);
                (format!("bytes=-{n}"), want)
            }
        };
        let got = send(app, "GET", path, &[("range", &spec)]).await;
        match want {
            Some(r) => {
                assert_eq!(got.status, 206, "{name} {path} {spec}");
                assert_eq!(
                    got.body,
                    &file[r.start as usize..r.end as usize],
                    "{name} {path} {spec}"
                );
                assert_eq!(
                    got.header("content-range"),
                    Some(format!("bytes {}-{}/{len}", r.start, r.end - 1).as_str()),
                    "{name} {path} {spec}"
                );
                assert_eq!(
                    got.header("content-length"),
                    Some((r.end - r.start).to_string().as_str())
                );
            }
            None => {
                assert_eq!(got.status, 416, "{name} {path} {spec}");
                assert_eq!(
                    got.header("content-range"),
                    Some(format!("bytes */{len}").as_str()),
                    "{name} {path} {spec}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_ranges_are_one_multipart_byteranges_body() {
    let site = site();
    for (name, app) in apps(&site) {
        let got = send(
            &app,
            "GET",
            "/files/big.bin",
            &[("range", "bytes=0-3,1000000-1000009")],
        )
        .await;
        assert_eq!(got.status, 206, "{name}");
        let ct = got.header("content-type").unwrap();
        let boundary = ct
            .strip_prefix("multipart/byteranges; boundary=")
            .unwrap_or_else(|| panic!("{name}: {ct}"));
        assert_eq!(
            got.header("content-length"),
            Some(got.body.len().to_string().as_str()),
            "{name}: the declared length is the body's"
        );
        // Split on the boundary and check each part's bytes against the file.
        let text = got.body.clone();
        let delim = format!("\r\n--{boundary}");
        let mut parts = Vec::new();
        let mut rest = &text[..];
        while let Some(at) = find(rest, delim.as_bytes()) {
            rest = &rest[at + delim.len()..];
            if rest.starts_with(b"--") {
                break;
            }
            let head_end = find(rest, b"\r\n\r\n").unwrap() + 4;
            let next = find(&rest[head_end..], delim.as_bytes()).unwrap();
            parts.push((
                String::from_utf8_lossy(&rest[..head_end]).into_owned(),
                rest[head_end..head_end + next].to_vec(),
            ));
        }
        assert_eq!(parts.len(), 2, "{name}");
        let len = site.big.len();
        assert!(parts[0]
            .0
            .contains(&format!("Content-Range: bytes 0-3/{len}")));
        assert_eq!(parts[0].1, &site.big[..4], "{name}");
        assert!(parts[1]
            .0
            .contains(&format!("Content-Range: bytes 1000000-1000009/{len}")));
        assert_eq!(parts[1].1, &site.big[1_000_000..1_000_010], "{name}");
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn methods_directories_missing_files_and_escapes() {
    let site = site();
    for (name, app) in apps(&site) {
        let post = send(&app, "POST", "/files/small.bin", &[]).await;
        assert_eq!(post.status, 405, "{name}");
        assert_eq!(post.header("allow"), Some("GET, HEAD"), "{name}");

        let dir = send(&app, "GET", "/files/docs?x=1", &[]).await;
        assert_eq!(dir.status, 301, "{name}");
        assert_eq!(dir.header("location"), Some("docs/?x=1"), "{name}");
        let index = send(&app, "GET", "/files/docs/", &[]).await;
        assert_eq!(index.status, 200, "{name}");
        assert_eq!(index.body, b"<p>docs</p>", "{name}");
        assert_eq!(
            index.header("content-type"),
            Some("text/html; charset=utf-8"),
            "{name}"
        );

        let missing = send(&app, "GET", "/files/nothing-here", &[]).await;
        assert_eq!(missing.status, 404, "{name}");
        assert_eq!(missing.body, b"<p>no such page</p>", "{name}");
        assert_eq!(
            missing.header("etag"),
            None,
            "{name}: a 404 page carries no validators of its own"
        );

        for escape in [
            "/files/../Cargo.toml",
            "/files/%2e%2e/Cargo.toml",
            "/files/docs/../../x",
        ] {
            let got = send(&app, "GET", escape, &[]).await;
            assert!(
                matches!(got.status.as_u16(), 400 | 403 | 404),
                "{name} {escape}: {}",
                got.status
            );
            assert_ne!(got.body, b"[package]", "{name} {escape}");
        }
    }
}

/// An edit is served at once: the cache checks the open descriptor on every hit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_file_is_served_new_with_a_new_validator() {
    let site = site();
    let path = site.root().join("edit.txt");
    std::fs::write(&path, "old contents").unwrap();
    for (name, app) in apps(&site) {
        std::fs::write(&path, "old contents").unwrap();
        let before = send(&app, "GET", "/files/edit.txt", &[]).await;
        assert_eq!(before.body, b"old contents", "{name}");
        std::fs::write(&path, "new contents, longer").unwrap();
        let after = send(&app, "GET", "/files/edit.txt", &[]).await;
        assert_eq!(after.body, b"new contents, longer", "{name}");
        assert_ne!(after.header("etag"), before.header("etag"), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_control_goes_on_2xx_and_304_only() {
    let site = site();
    let files = StaticFiles::new(Resolver::new(site.root()).unwrap())
        .cache_control(http::HeaderValue::from_static("max-age=60"));
    let app = Router::new().nest_service("/files", files);
    let ok = send(&app, "GET", "/files/small.bin", &[]).await;
    assert_eq!(ok.header("cache-control"), Some("max-age=60"));
    let etag = ok.header("etag").unwrap().to_owned();
    let partial = send(&app, "GET", "/files/small.bin", &[("range", "bytes=1-2")]).await;
    assert_eq!(partial.status, 206);
    assert_eq!(partial.header("cache-control"), Some("max-age=60"));
    let not_modified = send(&app, "GET", "/files/small.bin", &[("if-none-match", &etag)]).await;
    assert_eq!(not_modified.status, 304);
    assert_eq!(not_modified.header("cache-control"), Some("max-age=60"));
    // A day of caching on any of these would hide the file once it exists or matches.
    let missing = send(&app, "GET", "/files/nothing", &[]).await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.header("cache-control"), None);
    let failed = send(&app, "GET", "/files/small.bin", &[("if-match", "\"x\"")]).await;
    assert_eq!(failed.status, 412);
    assert_eq!(failed.header("cache-control"), None);
    let unsatisfiable = send(
        &app,
        "GET",
        "/files/small.bin",
        &[("range", "bytes=99999-")],
    )
    .await;
    assert_eq!(unsatisfiable.status, 416);
    assert_eq!(unsatisfiable.header("cache-control"), None);
    assert_eq!(unsatisfiable.header("accept-ranges"), Some("bytes"));
}

/// RFC 9110 §13.1.4: If-Unmodified-Since before the file's time fails; at or after it
/// passes; and it is ignored when If-Match is present (§13.2.2 step 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn if_unmodified_since_is_evaluated_against_the_files_time() {
    let site = site();
    for (name, app) in apps(&site) {
        let first = send(&app, "GET", "/files/small.bin", &[]).await;
        let lm = first.header("last-modified").unwrap().to_owned();
        let etag = first.header("etag").unwrap().to_owned();
        let old = "Mon, 01 Jan 1990 00:00:00 GMT";
        let before = send(
            &app,
            "GET",
            "/files/small.bin",
            &[("if-unmodified-since", old)],
        )
        .await;
        assert_eq!(before.status, 412, "{name}");
        let at = send(
            &app,
            "GET",
            "/files/small.bin",
            &[("if-unmodified-since", &lm)],
        )
        .await;
        assert_eq!(at.status, 200, "{name}");
        let with_match = send(
            &app,
            "GET",
            "/files/small.bin",
            &[("if-unmodified-since", old), ("if-match", &etag)],
        )
        .await;
        assert_eq!(with_match.status, 200, "{name}");
    }
}

/// The Service serves the resolution a layer in front put in the extensions, and with a
/// cache of its own it asks the cache: the three mountings are three paths, not one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_way_of_resolving_is_the_one_used() {
    use gatehouse_layers::open_file_cache::Resolved;
    let site = site();
    let resolver = Resolver::new(site.root()).unwrap();
    let forbid = tower::ServiceBuilder::new()
        .map_request(|mut req: Request<axum::body::Body>| {
            req.extensions_mut().insert(Resolved::Forbidden);
            req
        })
        .service(StaticFiles::new(resolver.clone()));
    let app = Router::new().nest_service("/files", forbid);
    let got = send(&app, "GET", "/files/small.bin", &[]).await;
    assert_eq!(
        got.status, 403,
        "a file that exists, but the layer said forbidden"
    );

    let cache = FileCache::new(resolver.clone(), CacheOptions::default());
    let files = StaticFiles::new(resolver).with_cache(cache.clone());
    let app = Router::new().nest_service("/files", files);
    for _ in 0..3 {
        assert_eq!(
            send(&app, "GET", "/files/small.bin", &[]).await.body,
            site.small
        );
    }
    assert_eq!(cache.loads(), 1, "loaded once");
    assert!(cache.hits() >= 2, "then hit: {}", cache.hits());
}

/// Over a real connection (axum::serve, hyper's HTTP/1.1): the large file arrives whole,
/// byte for byte, in chunks, with no sendfile (this is not gatehouse's server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_file_over_a_real_connection() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let site = site();
    let files = StaticFiles::new(Resolver::new(site.root()).unwrap());
    let app = Router::new().nest_service("/files", files);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(b"GET /files/big.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(20),
        conn.read_to_end(&mut raw),
    )
    .await
    .expect("the response ends")
    .unwrap();
    let head_end = find(&raw, b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(
        head.contains(&format!("content-length: {}", site.big.len())),
        "{head}"
    );
    assert!(raw[head_end..] == site.big[..], "the body is the file");
    server.abort();
}
