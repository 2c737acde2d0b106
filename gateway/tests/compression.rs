//! Compression seen from outside: each coding decodes to the file, negotiation follows
//! RFC 9110 §12.5.3, variants have their own validators, edits make new versions,
//! precompressed siblings are preferred when fresh, and ranges stay identity.
use crate::common;
use common::*;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// About 20 KiB of script: compressible, and over the 1 KiB minimum.
fn script(tag: &str) -> Vec<u8> {
    (0..400)
        .flat_map(|i| format!("export function f{i}() {{ return '{tag} {i}'; }}\n").into_bytes())
        .collect()
}

fn decode(coding: &str, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        "gzip" => {
            flate2::read::GzDecoder::new(data)
                .read_to_end(&mut out)
                .expect("valid gzip");
        }
        "br" => {
            brotli::Decompressor::new(data, 4096)
                .read_to_end(&mut out)
                .expect("valid br");
        }
        "zstd" => out = zstd::stream::decode_all(data).expect("valid zstd"),
        other => panic!("unexpected coding {other}"),
    }
    out
}

fn accept(ae: &str) -> String {
    format!("Accept-Encoding: {ae}\r\n")
}

fn with_script(name: &str, tag: &str) -> (TestServer, Vec<u8>) {
    let s = TestServer::site("");
    let body = script(tag);
    std::fs::write(s.root.join(name), &body).unwrap();
    (s, body)
}

fn varies(r: &Resp) -> bool {
    r.headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("vary") && v.to_ascii_lowercase().contains("accept-encoding")
    })
}

#[test]
fn each_coding_decodes_to_the_original() {
    let (s, body) = with_script("big.js", "v1");
    let plain = s.get("/big.js");
    let etag = plain.header("etag").unwrap().to_string();
    for coding in ["br", "zstd", "gzip"] {
        let r = s.get_with("/big.js", &accept(coding));
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-encoding"), Some(coding));
        assert_eq!(
            r.header("content-length").unwrap(),
            r.body.len().to_string()
        );
        assert!(
            r.body.len() < body.len() / 4,
            "{coding}: {} bytes",
            r.body.len()
        );
        assert_eq!(decode(coding, &r.body), body, "{coding}");
        assert!(varies(&r), "{coding}: Vary");
        // The variant's own strong validator.
        assert_eq!(
            r.header("etag").unwrap(),
            format!("{}-{coding}\"", etag.trim_end_matches('"'))
        );
        // Ranges are for the identity representation only.
        assert_eq!(r.header("accept-ranges"), None);
        assert_eq!(
            r.header("content-type"),
            Some("text/javascript; charset=utf-8")
        );
    }
    // Identity, asked for nothing: the file, with Vary since it could have been encoded.
    assert_eq!(plain.body, body);
    assert_eq!(plain.header("content-encoding"), None);
    assert!(varies(&plain));
}

#[test]
fn negotiation_follows_q_values_and_server_order() {
    let (s, body) = with_script("big.js", "neg");
    let coding = |ae: &str| {
        let r = s.get_with("/big.js", &accept(ae));
        (r.status, r.header("content-encoding").map(str::to_string))
    };
    let enc = |c: &str| (200, Some(c.to_string()));
    // Ties go to the server's order: br, zstd, gzip.
    assert_eq!(coding("gzip, deflate, br, zstd"), enc("br"));
    assert_eq!(coding("gzip, zstd"), enc("zstd"));
    assert_eq!(coding("br;q=0.5, gzip;q=0.8"), enc("gzip"));
    assert_eq!(coding("br;q=0, zstd;q=0, *"), enc("gzip"));
    assert_eq!(coding("*"), enc("br"));
    assert_eq!(coding("identity;q=0, gzip"), enc("gzip"));
    // Identity preferred to the only coding offered.
    assert_eq!(coding("gzip;q=0.3, identity;q=0.9"), (200, None));
    // Unknown codings: identity.
    assert_eq!(coding("compress, deflate, snappy"), (200, None));
    assert_eq!(coding("gzip;q=0"), (200, None));
    // Nothing acceptable and identity refused: 406.
    assert_eq!(coding("identity;q=0").0, 406);
    assert_eq!(coding("*;q=0").0, 406);
    assert_eq!(coding("deflate, identity;q=0").0, 406);
    // The identity bytes are intact after all that.
    assert_eq!(s.get("/big.js").body, body);
}

#[test]
fn a_variants_etag_gives_304_and_only_for_that_variant() {
    let (s, _) = with_script("big.js", "etag");
    let gz = s.get_with("/big.js", &accept("gzip"));
    let tag = gz.header("etag").unwrap().to_string();
    assert!(tag.ends_with("-gzip\""));
    let r = s.get_with(
        "/big.js",
        &format!("Accept-Encoding: gzip\r\nIf-None-Match: {tag}\r\n"),
    );
    assert_eq!(r.status, 304);
    assert_eq!(r.header("etag"), Some(tag.as_str()));
    assert!(varies(&r));
    assert!(r.body.is_empty());
    // Weak comparison, in a list.
    let r = s.get_with(
        "/big.js",
        &format!("Accept-Encoding: gzip\r\nIf-None-Match: \"x\", W/{tag}\r\n"),
    );
    assert_eq!(r.status, 304);
    // The gzip tag doesn't validate the br variant.
    let r = s.get_with(
        "/big.js",
        &format!("Accept-Encoding: br\r\nIf-None-Match: {tag}\r\n"),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), Some("br"));
    // The identity tag still validates identity.
    let id = s.get("/big.js").header("etag").unwrap().to_string();
    let r = s.get_with("/big.js", &format!("If-None-Match: {id}\r\n"));
    assert_eq!(r.status, 304);
    assert_eq!(r.header("etag"), Some(id.as_str()));
    // A 304 varies exactly when its 200 does.
    assert!(varies(&r));
    std::fs::write(s.root.join("pic.png"), script("png")).unwrap();
    let png = s.get_with("/pic.png", &accept("gzip"));
    assert!(!varies(&png));
    let tag = png.header("etag").unwrap();
    let r = s.get_with(
        "/pic.png",
        &format!("Accept-Encoding: gzip\r\nIf-None-Match: {tag}\r\n"),
    );
    assert_eq!(r.status, 304);
    assert!(!varies(&r));
}

#[test]
fn an_edit_in_place_is_a_new_version_and_old_bytes_are_never_served() {
    let (s, v1) = with_script("big.js", "one");
    let a = s.get_with("/big.js", &accept("gzip"));
    assert_eq!(decode("gzip", &a.body), v1);
    for round in 0..3 {
        // Same length, new content: an edit in place.
        let v2 = script(&format!("tw{round}"));
        assert_eq!(v2.len(), v1.len());
        std::fs::write(s.root.join("big.js"), &v2).unwrap();
        for coding in ["gzip", "br", "zstd"] {
            let b = s.get_with("/big.js", &accept(coding));
            assert_eq!(decode(coding, &b.body), v2, "round {round} {coding}");
            assert_ne!(b.header("etag"), a.header("etag"));
        }
    }
}

#[test]
fn range_requests_get_identity_206() {
    let (s, body) = with_script("big.js", "range");
    // Warm the gzip variant first, so a cached variant can't leak into the 206.
    assert_eq!(s.get_with("/big.js", &accept("gzip")).status, 200);
    let r = s.get_with(
        "/big.js",
        "Accept-Encoding: gzip\r\nRange: bytes=10-109\r\n",
    );
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.body, &body[10..110]);
    assert_eq!(
        r.header("content-range").unwrap(),
        format!("bytes 10-109/{}", body.len())
    );
    assert!(varies(&r));
}

#[test]
fn head_answers_with_the_headers_of_get() {
    let (s, _) = with_script("big.js", "head");
    // HEAD first, before the variant exists.
    let h = s.head_with("/big.js", &accept("br"));
    let g = s.get_with("/big.js", &accept("br"));
    assert_eq!(h.status, 200);
    assert!(h.body.is_empty());
    for name in [
        "content-encoding",
        "content-length",
        "etag",
        "vary",
        "content-type",
        "last-modified",
    ] {
        assert_eq!(h.header(name), g.header(name), "{name}");
    }
    assert_eq!(
        g.header("content-length").unwrap(),
        g.body.len().to_string()
    );
}

#[test]
fn small_and_incompressible_files_are_sent_as_they_are() {
    let s = TestServer::site("");
    // Under the 1 KiB minimum.
    let r = s.get_with("/app.js", &accept("gzip"));
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.body, std::fs::read(s.root.join("app.js")).unwrap());
    // An image type, however large.
    std::fs::write(s.root.join("pic.png"), script("png")).unwrap();
    let r = s.get_with("/pic.png", &accept("gzip, br"));
    assert_eq!(r.header("content-encoding"), None);
    assert!(!varies(&r));
}

#[test]
fn compression_can_be_turned_off_per_route_and_tuned() {
    let dir = tempfile::tempdir().unwrap();
    let (plain_dir, tuned_dir) = (dir.path().join("plain"), dir.path().join("tuned"));
    for d in [&plain_dir, &tuned_dir] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("big.js"), script("cfg")).unwrap();
        std::fs::write(d.join("data.bin"), script("bin")).unwrap();
    }
    let toml = format!(
        r#"
[[routes]]
path = "/plain"
static.root = {plain:?}
compression.enabled = false

[[routes]]
path = "/tuned"
static.root = {tuned:?}
[routes.compression]
encodings = ["gzip", "zstd"]
gzip_level = 1
types = ["application/octet-stream"]
"#,
        plain = plain_dir.display().to_string(),
        tuned = tuned_dir.display().to_string()
    );
    let s = TestServer::start(dir.path(), &toml);
    let r = s.get_with("/plain/big.js", &accept("gzip, br"));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), None);
    // The server's order is the route's: gzip before zstd; br not offered.
    let r = s.get_with("/tuned/data.bin", &accept("br, zstd, gzip"));
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(decode("gzip", &r.body), script("bin"));
    // JavaScript is not in this route's list of types.
    let r = s.get_with("/tuned/big.js", &accept("gzip"));
    assert_eq!(r.header("content-encoding"), None);
}

fn set_mtime(path: &Path, t: SystemTime) {
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

#[test]
fn fresh_precompressed_siblings_are_preferred_and_stale_ones_ignored() {
    let s = TestServer::site("");
    let body = script("sib");
    let now = SystemTime::now();
    // Fresh: the sibling holds different (but valid) bytes, so its use shows.
    std::fs::write(s.root.join("fresh.js"), &body).unwrap();
    set_mtime(&s.root.join("fresh.js"), now - Duration::from_secs(60));
    let marked = [body.as_slice(), b"// from the .gz sibling\n"].concat();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(9));
    std::io::Write::write_all(&mut gz, &marked).unwrap();
    std::fs::write(s.root.join("fresh.js.gz"), gz.finish().unwrap()).unwrap();
    let r = s.get_with("/fresh.js", &accept("gzip"));
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(decode("gzip", &r.body), marked);
    // A sibling in another coding than the one negotiated is not used.
    let r = s.get_with("/fresh.js", &accept("br"));
    assert_eq!(decode("br", &r.body), body);

    // Stale: the original was changed after its sibling was made.
    std::fs::write(s.root.join("stale.js"), &body).unwrap();
    std::fs::copy(s.root.join("fresh.js.gz"), s.root.join("stale.js.gz")).unwrap();
    set_mtime(&s.root.join("stale.js.gz"), now - Duration::from_secs(120));
    set_mtime(&s.root.join("stale.js"), now - Duration::from_secs(60));
    let r = s.get_with("/stale.js", &accept("gzip"));
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(
        decode("gzip", &r.body),
        body,
        "a stale sibling must not be served"
    );
}

#[test]
fn not_acceptable_names_the_problem() {
    let (s, _) = with_script("big.js", "406");
    let r = s.get_with("/big.js", &accept("identity;q=0, deflate"));
    assert_eq!(r.status, 406);
    assert!(r.text().contains("no acceptable content coding"));
}

#[test]
fn a_variant_tag_alone_never_falls_back_to_if_modified_since() {
    // A new version in the same modification second (a fast redeploy): the client's
    // If-Modified-Since still matches, but its variant tag is of the old bytes.
    let (s, _) = with_script("big.js", "imsA");
    let t = SystemTime::now() - Duration::from_secs(30);
    set_mtime(&s.root.join("big.js"), t);
    let old = s.get_with("/big.js", &accept("gzip"));
    let old_tag = old.header("etag").unwrap().to_string();
    let lm = old.header("last-modified").unwrap().to_string();
    let v2 = script("imsB");
    std::fs::write(s.root.join("big.js"), &v2).unwrap();
    // The same second (all Last-Modified can say), a different nanosecond (the ETag sees it).
    set_mtime(&s.root.join("big.js"), t + Duration::from_millis(1));
    let r = s.get_with(
        "/big.js",
        &format!(
            "Accept-Encoding: gzip\r\nIf-None-Match: {old_tag}\r\nIf-Modified-Since: {lm}\r\n"
        ),
    );
    assert_eq!(
        r.status, 200,
        "the old variant's tag must not validate the new version"
    );
    assert_eq!(decode("gzip", &r.body), v2);
}

#[test]
fn head_with_a_range_still_answers_like_get_without_one() {
    let (s, _) = with_script("big.js", "headrange");
    let g = s.get_with("/big.js", &accept("gzip"));
    let h = s.head_with("/big.js", "Accept-Encoding: gzip\r\nRange: bytes=0-9\r\n");
    assert_eq!(h.status, 200);
    assert_eq!(h.header("content-range"), None);
    assert_eq!(h.header("content-length"), g.header("content-length"));
}

/// The gateway's own static Service under the layer, as the router mounts it, with the
/// cache in the test's hands to count compressions.
#[test]
fn a_hundred_concurrent_first_requests_for_a_file_compress_it_once() {
    use gatehouse::static_files::StaticFiles;
    use gatehouse_layers::open_file_cache::{CacheOptions, FileCache, Resolver};
    use gatehouse_layers::precompress::{PrecompressLayer, VariantCache};
    use tower::{Layer, ServiceExt};

    let dir = tempfile::tempdir().unwrap();
    let body = script("flight");
    std::fs::write(dir.path().join("big.js"), &body).unwrap();
    let resolver = Resolver::new(dir.path()).unwrap();
    let files = StaticFiles::new(resolver.clone())
        .with_cache(FileCache::new(resolver, CacheOptions::default()));
    let cache = VariantCache::new(1 << 20);
    let svc = PrecompressLayer::new()
        .cache(cache.clone())
        .key_by_path(true)
        .layer(files);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    rt.block_on(async {
        let tasks: Vec<_> = (0..100)
            .map(|_| {
                let svc = svc.clone();
                tokio::spawn(async move {
                    let req = http::Request::get("/big.js")
                        .header("accept-encoding", "gzip")
                        .body(())
                        .unwrap();
                    let res = svc.oneshot(req).await.unwrap();
                    assert_eq!(res.headers()["content-encoding"], "gzip");
                    use http_body_util::BodyExt;
                    res.into_body().collect().await.unwrap().to_bytes()
                })
            })
            .collect();
        for t in tasks {
            assert_eq!(decode("gzip", &t.await.unwrap()), body);
        }
    });
    assert_eq!(
        cache.encodings(),
        1,
        "100 concurrent first requests, one compression"
    );
    assert_eq!(cache.in_flight(), 0);
}
