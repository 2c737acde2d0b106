//! RFC 9110 §13 over HTTP: If-Match, If-None-Match, If-Modified-Since, If-Unmodified-Since
//! and If-Range.
use crate::common;
use common::*;
use std::time::{Duration, SystemTime};

fn validators(s: &TestServer) -> (String, String) {
    let r = s.get("/hello.txt");
    (
        r.header("etag").unwrap().to_string(),
        r.header("last-modified").unwrap().to_string(),
    )
}

#[test]
fn if_none_match_gives_304_with_validators() {
    let s = TestServer::site("[[routes]]\n[routes.static]\ncache_control = \"max-age=60\"\n");
    let (etag, lm) = validators(&s);
    for value in [
        etag.clone(),
        format!("\"other\", {etag}"),
        format!("W/{etag}"),
        "*".to_string(),
    ] {
        let r = s.get_with("/hello.txt", &format!("If-None-Match: {value}\r\n"));
        assert_eq!(r.status, 304, "{value}");
        assert!(r.body.is_empty());
        assert_eq!(r.header("etag"), Some(etag.as_str()));
        assert_eq!(r.header("last-modified"), Some(lm.as_str()));
        assert_eq!(r.header("cache-control"), Some("max-age=60"));
    }
    let r = s.get_with("/hello.txt", "If-None-Match: \"nope\", W/\"nope2\"\r\n");
    assert_eq!(r.status, 200);
    // HEAD follows GET.
    let r = send(
        s.addr,
        &format!("HEAD /hello.txt HTTP/1.1\r\nHost: t\r\nIf-None-Match: {etag}\r\n\r\n"),
    );
    assert_eq!(r.status, 304);
}

#[test]
fn if_match_gives_412_unless_strongly_equal() {
    let s = TestServer::site("");
    let (etag, _) = validators(&s);
    assert_eq!(
        s.get_with("/hello.txt", &format!("If-Match: {etag}\r\n"))
            .status,
        200
    );
    assert_eq!(s.get_with("/hello.txt", "If-Match: *\r\n").status, 200);
    let r = s.get_with("/hello.txt", "If-Match: \"nope\"\r\n");
    assert_eq!(r.status, 412);
    assert_eq!(r.header("etag"), Some(etag.as_str()));
    assert_eq!(
        s.get_with("/hello.txt", &format!("If-Match: W/{etag}\r\n"))
            .status,
        412
    );
}

#[test]
fn date_preconditions() {
    let s = TestServer::site("");
    let (_, lm) = validators(&s);
    let later = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(3600));
    let earlier = httpdate::fmt_http_date(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000));
    assert_eq!(
        s.get_with("/hello.txt", &format!("If-Modified-Since: {lm}\r\n"))
            .status,
        304
    );
    assert_eq!(
        s.get_with("/hello.txt", &format!("If-Modified-Since: {later}\r\n"))
            .status,
        304
    );
    assert_eq!(
        s.get_with("/hello.txt", &format!("If-Modified-Since: {earlier}\r\n"))
            .status,
        200
    );
    assert_eq!(
        s.get_with("/hello.txt", "If-Modified-Since: yesterday\r\n")
            .status,
        200
    );
    assert_eq!(
        s.get_with("/hello.txt", &format!("If-Unmodified-Since: {earlier}\r\n"))
            .status,
        412
    );
    assert_eq!(
        s.get_with("/hello.txt", &format!("If-Unmodified-Since: {lm}\r\n"))
            .status,
        200
    );
}

#[test]
fn precedence_of_preconditions() {
    let s = TestServer::site("");
    let (etag, lm) = validators(&s);
    let earlier = httpdate::fmt_http_date(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000));
    // If-None-Match is evaluated instead of If-Modified-Since (§13.2.2 step 3 then 4).
    let r = s.get_with(
        "/hello.txt",
        &format!("If-None-Match: \"other\"\r\nIf-Modified-Since: {lm}\r\n"),
    );
    assert_eq!(r.status, 200);
    // If-Match is evaluated instead of If-Unmodified-Since.
    let r = s.get_with(
        "/hello.txt",
        &format!("If-Match: {etag}\r\nIf-Unmodified-Since: {earlier}\r\n"),
    );
    assert_eq!(r.status, 200);
    // A failed If-Match wins over a matching If-None-Match.
    let r = s.get_with(
        "/hello.txt",
        &format!("If-Match: \"x\"\r\nIf-None-Match: {etag}\r\n"),
    );
    assert_eq!(r.status, 412);
}

#[test]
fn if_range_decides_between_206_and_200() {
    let s = TestServer::site("");
    let r = s.get("/digits.txt");
    let etag = r.header("etag").unwrap().to_string();
    let lm = r.header("last-modified").unwrap().to_string();
    let r = s.get_with(
        "/digits.txt",
        &format!("Range: bytes=0-4\r\nIf-Range: {etag}\r\n"),
    );
    assert_eq!(r.status, 206);
    assert_eq!(r.body, b"01234");
    let r = s.get_with(
        "/digits.txt",
        &format!("Range: bytes=0-4\r\nIf-Range: {lm}\r\n"),
    );
    assert_eq!(r.status, 206);
    let r = s.get_with("/digits.txt", "Range: bytes=0-4\r\nIf-Range: \"stale\"\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), 200);
    let r = s.get_with(
        "/digits.txt",
        &format!("Range: bytes=0-4\r\nIf-Range: W/{etag}\r\n"),
    );
    assert_eq!(r.status, 200, "a weak tag never matches If-Range");
    let r = s.get_with(
        "/digits.txt",
        "Range: bytes=0-4\r\nIf-Range: Thu, 01 Jan 1970 00:00:00 GMT\r\n",
    );
    assert_eq!(r.status, 200);
}
