//! Ranges on a cold cache, against nginx's `proxy_cache` in front of the same origin (a
//! gatehouse static route, which answers ranges itself): every range of a set, on files of
//! several sizes, each on its own cold key, then again from the cache. Status,
//! `Content-Range` and body must match nginx's; where the two may differ, the difference is
//! written next to the case. nginx is Debian's (`scripts/test.sh` installs it).
use crate::common;
use common::*;

fn nginx(origin: std::net::SocketAddr) -> Nginx {
    nginx_on(free_port(), |d, port| {
        format!(
            r#"user root;
worker_processes 1;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d};
  uwsgi_temp_path {d}; scgi_temp_path {d};
  proxy_cache_path {d}/cache keys_zone=c:1m;
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://{origin};
      proxy_http_version 1.1;
      proxy_cache c;
      add_header X-Cache $upstream_cache_status;
    }}
  }}
}}
"#
        )
    })
}

fn get(addr: std::net::SocketAddr, target: &str, range: &str) -> Resp {
    if range.is_empty() {
        get_with(addr, target, &[])
    } else {
        get_with(addr, target, &[("Range", range)])
    }
}

fn get_with(addr: std::net::SocketAddr, target: &str, fields: &[(&str, &str)]) -> Resp {
    let fields: String = fields
        .iter()
        .map(|(n, v)| format!("{n}: {v}\r\n"))
        .collect();
    send(
        addr,
        &format!("GET {target} HTTP/1.1\r\nHost: cache.test\r\n{fields}Connection: close\r\n\r\n"),
    )
}

/// Origin, nginx in front of it and gatehouse in front of it, over files of `sizes`.
fn three(site: &std::path::Path, sizes: &[usize]) -> (TestServer, Nginx, TestServer) {
    for n in sizes {
        let body: Vec<u8> = (0..*n).map(|i| b'a' + (i % 26) as u8).collect();
        std::fs::write(site.join(format!("f{n}.bin")), body).unwrap();
    }
    let origin = TestServer::start(
        site,
        "[[routes]]\n[routes.static]\n[[routes.headers.response]]\n\
         set = { \"Cache-Control\" = \"max-age=600\" }\n",
    );
    let ngx = nginx(origin.addr);
    let gh = TestServer::start(
        site,
        &format!(
            "[[routes]]\n[routes.proxy]\nupstreams = [\"http://{}\"]\n[routes.cache]\n\
             cache_status_header = true\n",
            origin.addr
        ),
    );
    (origin, ngx, gh)
}

#[test]
fn ranges_on_a_cold_cache_are_answered_as_nginx_answers_them() {
    let site = tempfile::tempdir().unwrap();
    let sizes = [1usize, 100, 10_000, 200_000];
    let (_origin, ngx, gh) = three(site.path(), &sizes);
    // (range, whether gatehouse stores the whole on the first request as nginx does)
    let ranges = [
        ("bytes=0-0", true),
        ("bytes=5-9", true),
        ("bytes=50-", true),
        ("bytes=0-99999999", true),
        ("bytes=150000-", true),
        ("bytes=199999-199999", true),
        ("BYTES=2-3", true),
        // Past the end of some: 416, the whole stored.
        ("bytes=200000-", true),
        // From the end: gatehouse passes it on (the object may be any size), and the
        // origin's 206 is not stored; nginx asks for the whole.
        ("bytes=-3", false),
        ("bytes=-99999999", false),
    ];
    let mut case = 0;
    for n in sizes {
        for (range, stores) in ranges {
            case += 1;
            let target = format!("/f{n}.bin?case={case}");
            let what = format!("{range} of {n} bytes");
            let (a, b) = (get(ngx.addr, &target, range), get(gh.addr, &target, range));
            assert_eq!(a.status, b.status, "{what}: status");
            assert_eq!(
                a.header("content-range"),
                b.header("content-range"),
                "{what}: Content-Range"
            );
            // nginx's 416 carries an HTML page; gatehouse's is empty.
            if a.status != 416 {
                assert_eq!(a.body, b.body, "{what}: body");
            }
            // Again: from the cache, the same answer.
            let (a2, b2) = (get(ngx.addr, &target, range), get(gh.addr, &target, range));
            // nginx stores nothing behind a 416 (it stops reading the origin), where
            // gatehouse reads the whole into the store.
            let nginx_hit = a2.header("x-cache") == Some("HIT");
            assert_eq!(nginx_hit, a.status != 416, "{what}: nginx");
            let hit = b2.header("cache-status") == Some("gatehouse; hit");
            assert_eq!(hit, stores, "{what}: {:?}", b2.header("cache-status"));
            assert_eq!(a2.status, b2.status, "{what}: again");
            if a2.status != 416 {
                assert_eq!(a2.body, b2.body, "{what}: again");
            }
            // The whole, as stored.
            let (a3, b3) = (get(ngx.addr, &target, ""), get(gh.addr, &target, ""));
            assert_eq!((a3.status, a3.body.len()), (200, n), "{what}: nginx whole");
            assert_eq!(
                (b3.status, &b3.body),
                (a3.status, &a3.body),
                "{what}: whole"
            );
        }
    }
}

/// A client revalidating its own copy on a cold key: neither cache passes its conditions
/// on (a 304 could not be stored); both store the whole and answer the conditions from it.
/// The origin is a gatehouse static route, which would answer them itself with a 304.
#[test]
fn conditions_on_a_cold_cache_are_answered_as_nginx_answers_them() {
    let site = tempfile::tempdir().unwrap();
    let (origin, ngx, gh) = three(site.path(), &[10_000]);
    let file = get(origin.addr, "/f10000.bin", "");
    let etag = file.header("etag").expect("an ETag").to_string();
    let lm = file
        .header("last-modified")
        .expect("a Last-Modified")
        .to_string();
    let modified = httpdate::parse_http_date(&lm).unwrap();
    let day = std::time::Duration::from_secs(86_400);
    let earlier = httpdate::fmt_http_date(modified - day);
    let later = httpdate::fmt_http_date(modified + day);
    let weak = format!("W/{etag}");
    let two = format!("\"other\", {etag}");
    let none: &[(&str, &str)] = &[];
    let cases: Vec<Vec<(&str, &str)>> = vec![
        vec![("If-None-Match", &etag)],
        vec![("If-None-Match", &weak)],
        vec![("If-None-Match", &two)],
        vec![("If-None-Match", "*")],
        vec![("If-None-Match", "\"other\"")],
        vec![("If-Modified-Since", &lm)],
        vec![("If-Modified-Since", &earlier)],
        vec![("If-None-Match", "\"other\""), ("If-Modified-Since", &lm)],
        vec![("If-None-Match", &etag), ("Range", "bytes=5-9")],
        vec![("If-None-Match", "\"other\""), ("Range", "bytes=5-9")],
    ];
    for (i, fields) in cases.iter().enumerate() {
        let target = format!("/f10000.bin?k={i}");
        let what = format!("{fields:?}");
        let (a, b) = (
            get_with(ngx.addr, &target, fields),
            get_with(gh.addr, &target, fields),
        );
        assert_eq!(a.status, b.status, "{what}: status");
        assert_eq!(a.body, b.body, "{what}: body");
        assert_eq!(a.header("etag"), b.header("etag"), "{what}: ETag");
        assert_eq!(
            a.header("content-range"),
            b.header("content-range"),
            "{what}: Content-Range"
        );
        // Both stored the whole.
        let (a2, b2) = (
            get_with(ngx.addr, &target, none),
            get_with(gh.addr, &target, none),
        );
        assert_eq!(a2.header("x-cache"), Some("HIT"), "{what}: nginx");
        assert_eq!(b2.header("cache-status"), Some("gatehouse; hit"), "{what}");
        assert_eq!(
            (a2.status, a2.body.len()),
            (200, 10_000),
            "{what}: nginx whole"
        );
        assert_eq!(b2.body, a2.body, "{what}: whole");
    }
    // A date after Last-Modified: gatehouse answers 304 as RFC 9110 §13.1.3 says
    // (modified no later than the date); nginx's default `if_modified_since exact` wants the
    // date to be Last-Modified's own, and sends the whole.
    let target = "/f10000.bin?k=later";
    let fields = [("If-Modified-Since", later.as_str())];
    let (a, b) = (
        get_with(ngx.addr, target, &fields),
        get_with(gh.addr, target, &fields),
    );
    assert_eq!((a.status, b.status), (200, 304));
}
