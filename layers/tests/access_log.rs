//! The access-log layer: formats against golden lines, the writer's batching, counting and
//! reopening, and lines for aborted responses.
#![cfg(feature = "access-log")]

use axum::{body::Body, routing::get, Router};
use bytes::Bytes;
use gatehouse_layers::access_log::*;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use std::net::SocketAddr;
use std::path::Path;
use tower::ServiceExt;

fn record() -> Record {
    let req = Request::get("/a/b?q=%22x%22&y=1")
        .header("host", "example.com")
        .header("referer", "http://ref.example/")
        .header("user-agent", "curl/8 \"quoted\"")
        .header("authorization", "Basic c2VjcmV0OnNlY3JldA==")
        .header("cookie", "session=SECRETCOOKIE")
        .header("x-request-id", "req-42")
        .body(())
        .unwrap();
    let mut r = Record::start(&req, Some("192.0.2.7:5555".parse().unwrap()));
    r.status = 200;
    r.bytes = 1024;
    r
}

fn line(f: &Format, r: &Record) -> String {
    let mut out = Vec::new();
    f.write(r, &mut out);
    String::from_utf8(out).unwrap()
}

/// The line with its `[time]` replaced, for comparing with a golden line.
fn untimed(l: &str) -> String {
    let (a, rest) = l.split_once('[').unwrap();
    let (_, b) = rest.split_once(']').unwrap();
    format!("{a}[TIME]{b}")
}

#[test]
fn combined_and_common_match_nginx() {
    let r = record();
    assert_eq!(
        untimed(&line(&Format::Combined, &r)),
        "192.0.2.7 - - [TIME] \"GET /a/b?q=%22x%22&y=1 HTTP/1.1\" 200 1024 \"http://ref.example/\" \"curl/8 \\x22quoted\\x22\"\n"
    );
    assert_eq!(
        untimed(&line(&Format::Common, &r)),
        "192.0.2.7 - - [TIME] \"GET /a/b?q=%22x%22&y=1 HTTP/1.1\" 200 1024\n"
    );
    // The time is nginx's $time_local: 10/Oct/2000:13:55:36 +0000.
    let l = line(&Format::Combined, &r);
    let t = l.split_once('[').unwrap().1.split_once(']').unwrap().0;
    assert_eq!(t.len(), 26, "{t}");
    assert!(
        t.ends_with(" +0000") && &t[2..3] == "/" && &t[6..7] == "/",
        "{t}"
    );
}

#[test]
fn json_lines_parse_and_carry_every_field() {
    let mut r = record();
    r.upstream = Some(UpstreamInfo {
        addr: "10.0.0.1:8080".parse().unwrap(),
        time: std::time::Duration::from_micros(1500),
    });
    let l = line(&Format::Json, &r);
    assert!(l.ends_with('\n'));
    let v: serde_json::Value = serde_json::from_str(&l).unwrap();
    assert_eq!(v["remote_addr"], "192.0.2.7");
    assert_eq!(v["method"], "GET");
    assert_eq!(v["uri"], "/a/b?q=%22x%22&y=1");
    assert_eq!(v["protocol"], "HTTP/1.1");
    assert_eq!(v["host"], "example.com");
    assert_eq!(v["status"], 200);
    assert_eq!(v["bytes_sent"], 1024);
    assert!(v["duration_us"].is_u64());
    assert_eq!(v["user_agent"], "curl/8 \"quoted\"");
    assert_eq!(v["referer"], "http://ref.example/");
    assert_eq!(v["request_id"], "req-42");
    assert_eq!(v["upstream_addr"], "10.0.0.1:8080");
    assert_eq!(v["upstream_time_us"], 1500);
    let time = v["time"].as_str().unwrap();
    // RFC 3339 with milliseconds: 2026-11-30T08:12:13.123Z
    assert_eq!(time.len(), 24, "{time}");
    assert!(time.ends_with('Z') && &time[19..20] == ".", "{time}");
}

#[test]
fn templates_name_fields_and_refuse_unknown_ones() {
    let f = Format::template(
        "$remote_addr $request_method ${request_uri} -> $status/$body_bytes_sent id=$request_id",
    )
    .unwrap();
    assert_eq!(
        line(&f, &record()),
        "192.0.2.7 GET /a/b?q=%22x%22&y=1 -> 200/1024 id=req-42\n"
    );
    let e = Format::template("$remote_addr $http_authorization").unwrap_err();
    assert_eq!(e, FormatError::UnknownField("http_authorization".into()));
    let shown = e.to_string();
    assert!(shown.contains("remote_addr"), "{shown}");
    assert_eq!(
        Format::template("${status").unwrap_err(),
        FormatError::Unclosed
    );
}

#[test]
fn no_secret_in_any_line() {
    let r = record();
    let f = Format::template("$request $http_user_agent $http_referer $host").unwrap();
    for fmt in [Format::Combined, Format::Common, Format::Json, f] {
        let l = line(&fmt, &r);
        assert!(
            !l.contains("c2VjcmV0") && !l.contains("SECRETCOOKIE"),
            "{l}"
        );
    }
}

/// A record copies what it shows: holding the request's own values would keep hyper's
/// read buffer shared while the line is pending, and cost a new buffer per request.
#[test]
fn a_record_holds_no_part_of_the_request() {
    let ua = Bytes::from(b"agent/1".to_vec());
    let target = Bytes::from(b"/a?b=c".to_vec());
    let req = Request::get(http::Uri::from_maybe_shared(target.clone()).unwrap())
        .header(
            "user-agent",
            http::HeaderValue::from_maybe_shared(ua.clone()).unwrap(),
        )
        .header("referer", "http://first.example/")
        .header("referer", "http://second.example/")
        .body(())
        .unwrap();
    assert!(
        !ua.is_unique() && !target.is_unique(),
        "the request shares the values"
    );
    let r = Record::start(&req, None);
    drop(req);
    assert!(ua.is_unique(), "the record kept the User-Agent's bytes");
    assert!(target.is_unique(), "the record kept the target's bytes");
    assert_eq!(r.user_agent(), Some(b"agent/1".as_slice()));
    assert_eq!(r.target(), b"/a?b=c");
    // The first of a repeated field, as HeaderMap::get gives.
    assert_eq!(r.referer(), Some(b"http://first.example/".as_slice()));
    assert_eq!(r.host(), None);
    assert_eq!(r.request_id(), None);
}

/// A rewritten request is logged with the target it came with.
#[test]
fn a_record_can_take_the_target_the_request_came_with() {
    let req = Request::get("/rewritten")
        .header("host", "h.example")
        .body(())
        .unwrap();
    let came: http::Uri = "http://a.example/original?x=1".parse().unwrap();
    let r = Record::start_with_uri(&req, &came, None);
    assert_eq!(r.target(), b"/original?x=1");
    assert_eq!(r.host(), Some(b"a.example".as_slice()));
    let r = Record::start(&req, None);
    assert_eq!(r.target(), b"/rewritten");
    assert_eq!(r.host(), Some(b"h.example".as_slice()));
}

fn open(path: &Path, rotation: Option<Rotation>) -> LogWriter {
    LogWriter::open(Destination::File(path.to_path_buf()), rotation, 64 << 20).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_concurrent_requests_give_ten_thousand_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("access.log");
    let writer = open(&path, None);
    let app: Router =
        Router::new()
            .route("/x", get(|| async { "hello" }))
            .layer(AccessLogLayer::new(AccessLog::new(
                writer.clone(),
                Format::Combined,
            )));
    let mut tasks = Vec::new();
    for i in 0..10_000 {
        let app = app.clone();
        tasks.push(tokio::spawn(async move {
            let req = Request::get(format!("/x?i={i}"))
                .body(Body::empty())
                .unwrap();
            let res = app.oneshot(req).await.unwrap();
            assert_eq!(res.status(), StatusCode::OK);
            res.into_body().collect().await.unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    writer.close();
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 10_000);
    let mut seen: Vec<usize> = lines
        .iter()
        .map(|l| {
            let i = l.split("?i=").nth(1).unwrap().split(' ').next().unwrap();
            assert!(l.contains("\" 200 5 \""), "{l}");
            i.parse().unwrap()
        })
        .collect();
    seen.sort();
    assert!(seen.iter().copied().eq(0..10_000), "every request once");
    assert_eq!(writer.dropped(), 0);
}

#[tokio::test]
async fn a_response_cut_off_mid_body_is_logged_and_marked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("access.log");
    let writer = open(&path, None);
    let app: Router = Router::new()
        .route(
            "/stream",
            get(|| async {
                let chunks = futures_util::stream::iter(vec![
                    Ok::<_, std::io::Error>(Bytes::from_static(b"first ")),
                    Ok(Bytes::from_static(b"second")),
                ]);
                Body::from_stream(chunks)
            }),
        )
        .layer(AccessLogLayer::new(AccessLog::new(
            writer.clone(),
            Format::Json,
        )));
    let res = app
        .clone()
        .oneshot(Request::get("/stream").body(Body::empty()).unwrap())
        .await
        .unwrap();
    let mut body = res.into_body();
    let first = body.frame().await.unwrap().unwrap();
    assert_eq!(first.into_data().unwrap(), "first ");
    drop(body); // the client went away
    let res = app
        .oneshot(Request::get("/stream").body(Body::empty()).unwrap())
        .await
        .unwrap();
    res.into_body().collect().await.unwrap();
    writer.close();
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["aborted"], true);
    assert_eq!(lines[0]["bytes_sent"], 6);
    assert!(lines[1].get("aborted").is_none());
    assert_eq!(lines[1]["bytes_sent"], 12);
}

/// A line whose formatting panicked halfway never reaches the file, whether the writer
/// or the next request meets the shard it left behind first.
#[test]
fn a_line_cut_short_by_a_panic_is_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let half_a_line = |w: &LogWriter| {
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            w.append(|out| {
                out.extend_from_slice(b"half a li");
                panic!("a formatter bug");
            })
        }));
        assert!(panicked.is_err());
    };
    for next_request_first in [false, true] {
        let path = dir.path().join(format!("p{next_request_first}.log"));
        let w = open(&path, None);
        assert!(w.append(|out| out.extend_from_slice(b"one\n")));
        half_a_line(&w);
        if next_request_first {
            assert!(w.append(|out| out.extend_from_slice(b"two\n")));
        }
        let lines = w.lines();
        w.close();
        let want = if next_request_first {
            "one\ntwo\n"
        } else {
            "one\n"
        };
        assert_eq!(std::fs::read_to_string(&path).unwrap(), want);
        assert_eq!(lines, want.lines().count() as u64);
    }
}

#[test]
fn reopen_follows_a_moved_file_and_rotation_keeps_n() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.log");
    let w = open(&path, None);
    let write = |w: &LogWriter, s: &str| {
        assert!(w.append(|out| out.extend_from_slice(s.as_bytes())));
    };
    write(&w, "one\n");
    std::thread::sleep(std::time::Duration::from_millis(150));
    // logrotate moves the file, then signals.
    std::fs::rename(&path, dir.path().join("a.log.old")).unwrap();
    w.reopen();
    std::thread::sleep(std::time::Duration::from_millis(150));
    write(&w, "two\n");
    w.close();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.log.old")).unwrap(),
        "one\n"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "two\n");

    let path = dir.path().join("r.log");
    let w = open(
        &path,
        Some(Rotation {
            max_bytes: 10,
            keep: 2,
        }),
    );
    for i in 0..4 {
        write(&w, &format!("line-{i}-0123456789\n"));
        std::thread::sleep(std::time::Duration::from_millis(120));
    }
    w.close();
    let read = |n: &str| std::fs::read_to_string(dir.path().join(n)).unwrap_or_default();
    assert_eq!(read("r.log.1"), "line-3-0123456789\n");
    assert_eq!(read("r.log.2"), "line-2-0123456789\n");
    assert!(!dir.path().join("r.log.3").exists(), "only two kept");
}

#[test]
fn a_writer_that_falls_behind_counts_what_it_drops() {
    let dir = tempfile::tempdir().unwrap();
    let w = LogWriter::open(Destination::File(dir.path().join("d.log")), None, 16).unwrap();
    let mut kept = 0;
    for _ in 0..100 {
        if w.append(|out| out.extend_from_slice(b"0123456789\n")) {
            kept += 1;
        }
    }
    assert!(kept < 100);
    assert_eq!(w.dropped(), 100 - kept);
    w.close();
    let n = std::fs::read_to_string(dir.path().join("d.log"))
        .unwrap()
        .lines()
        .count();
    assert_eq!(n as u64, kept);
    // After close, lines are counted as dropped, never silently lost.
    let before = w.dropped();
    assert!(!w.append(|out| out.extend_from_slice(b"late\n")));
    assert_eq!(w.dropped(), before + 1);
}

#[allow(dead_code)]
fn client_addr_type_exists(a: SocketAddr) -> ClientAddr {
    ClientAddr(a)
}
