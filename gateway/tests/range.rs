//! RFC 9110 §14 byte ranges: single, suffix, open, multipart, 416 and malformed, from
//! memory and from a large streamed file.
use crate::common;
use common::*;

fn digits() -> Vec<u8> {
    (0..200).map(|i| b'0' + (i % 10) as u8).collect()
}

#[test]
fn single_ranges() {
    let s = TestServer::site("");
    let d = digits();
    for (spec, start, end) in [
        ("0-9", 0, 10),
        ("10-", 10, 200),
        ("-5", 195, 200),
        ("190-500", 190, 200),
        ("7-7", 7, 8),
    ] {
        let r = s.get_with("/digits.txt", &format!("Range: bytes={spec}\r\n"));
        assert_eq!(r.status, 206, "{spec}");
        assert_eq!(r.body, &d[start..end], "{spec}");
        assert_eq!(
            r.header("content-range"),
            Some(format!("bytes {}-{}/200", start, end - 1).as_str()),
            "{spec}"
        );
        assert_eq!(
            r.header("content-length"),
            Some((end - start).to_string().as_str())
        );
        assert!(r.header("etag").is_some());
    }
}

#[test]
fn unsatisfiable_gets_416_with_the_length() {
    let s = TestServer::site("");
    for spec in ["200-", "500-600", "-0"] {
        let r = s.get_with("/digits.txt", &format!("Range: bytes={spec}\r\n"));
        assert_eq!(r.status, 416, "{spec}");
        assert_eq!(r.header("content-range"), Some("bytes */200"));
    }
}

#[test]
fn malformed_ranges_are_ignored() {
    let s = TestServer::site("");
    for spec in [
        "bytes=5-1",
        "bytes=x-y",
        "lines=0-1",
        "bytes",
        "bytes=0-1,,x",
    ] {
        let r = s.get_with("/digits.txt", &format!("Range: {spec}\r\n"));
        assert_eq!(r.status, 200, "{spec}");
        assert_eq!(r.body.len(), 200);
    }
    // HEAD ignores Range (it is defined for GET only).
    let r = send(
        s.addr,
        "HEAD /digits.txt HTTP/1.1\r\nHost: t\r\nRange: bytes=0-1\r\n\r\n",
    );
    assert_eq!(r.status, 200);
}

fn parse_multipart(r: &Resp) -> Vec<(String, Vec<u8>)> {
    let ct = r.header("content-type").unwrap();
    let boundary = ct.split("boundary=").nth(1).unwrap();
    let delim = format!("\r\n--{boundary}");
    let body = &r.body;
    let mut parts = Vec::new();
    let mut rest: &[u8] = body;
    let find = |h: &[u8], n: &[u8]| h.windows(n.len()).position(|w| w == n);
    assert!(
        rest.starts_with(delim.as_bytes()),
        "body starts with a boundary"
    );
    loop {
        rest = &rest[delim.len()..];
        if rest.starts_with(b"--") {
            break;
        }
        let head_end = find(rest, b"\r\n\r\n").unwrap();
        let head = String::from_utf8_lossy(&rest[..head_end]).to_string();
        let cr = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Range: "))
            .unwrap()
            .to_string();
        rest = &rest[head_end + 4..];
        let next = find(rest, delim.as_bytes()).unwrap();
        parts.push((cr, rest[..next].to_vec()));
        rest = &rest[next..];
    }
    parts
}

#[test]
fn several_ranges_are_multipart_byteranges() {
    let s = TestServer::site("");
    let r = s.get_with("/digits.txt", "Range: bytes=50-54, 0-2\r\n");
    assert_eq!(r.status, 206);
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("multipart/byteranges; boundary="));
    assert_eq!(
        r.header("content-length")
            .unwrap()
            .parse::<usize>()
            .unwrap(),
        r.body.len()
    );
    let parts = parse_multipart(&r);
    assert_eq!(
        parts,
        vec![
            ("bytes 0-2/200".to_string(), b"012".to_vec()),
            ("bytes 50-54/200".to_string(), b"01234".to_vec()),
        ]
    );
    // Overlapping ranges are merged into one.
    let r = s.get_with("/digits.txt", "Range: bytes=0-10, 5-12\r\n");
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-range"), Some("bytes 0-12/200"));
}

#[test]
fn ranges_of_a_large_streamed_file() {
    let s = TestServer::site("");
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(s.root.join("big.bin"), &big).unwrap();
    let r = s.get("/big.bin");
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), big.len());
    assert!(r.body == big);
    let r = s.get_with("/big.bin", "Range: bytes=1000000-1300000\r\n");
    assert_eq!(r.status, 206);
    assert!(r.body == big[1_000_000..=1_300_000]);
    let r = s.get_with("/big.bin", "Range: bytes=10-19, 2999990-\r\n");
    let parts = parse_multipart(&r);
    assert_eq!(parts[0].1, &big[10..20]);
    assert_eq!(parts[1].1, &big[2_999_990..]);
    assert_eq!(parts[1].0, "bytes 2999990-2999999/3000000");
}
