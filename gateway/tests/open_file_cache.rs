//! The open-file cache seen from outside: edits are served at once in strict mode, trusted
//! for `valid` otherwise; not-found answers are revalidated; large files stream and survive
//! truncation.
use crate::common;
use common::*;
use std::io::Write;
use std::time::Duration;

#[test]
fn strict_mode_serves_an_edit_in_place_at_once() {
    let s = TestServer::site("");
    let first = s.get("/hello.txt");
    assert_eq!(first.body, b"hello, world\n");
    // Same length, so only the content and mtime change: an in-place edit.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(s.root.join("hello.txt"))
        .unwrap();
    f.write_all(b"HELLO, WORLD\n").unwrap();
    drop(f);
    let second = s.get("/hello.txt");
    assert_eq!(second.body, b"HELLO, WORLD\n");
    assert_ne!(first.header("etag"), second.header("etag"));
    // A replacement by rename (new inode) too.
    std::fs::write(s.root.join("tmp.txt"), "renamed in\n").unwrap();
    std::fs::rename(s.root.join("tmp.txt"), s.root.join("hello.txt")).unwrap();
    assert_eq!(s.get("/hello.txt").body, b"renamed in\n");
    // And a deletion.
    std::fs::remove_file(s.root.join("hello.txt")).unwrap();
    assert_eq!(s.get("/hello.txt").status, 404);
}

#[test]
fn not_found_is_cached_but_revalidated_in_strict_mode() {
    let s = TestServer::site("");
    assert_eq!(s.get("/later.txt").status, 404);
    assert_eq!(s.get("/later.txt").status, 404);
    std::fs::write(s.root.join("later.txt"), "now here\n").unwrap();
    assert_eq!(s.get("/later.txt").body, b"now here\n");
    // An index file appearing in a directory that had none.
    assert_eq!(s.get("/empty/").status, 404);
    std::fs::write(s.root.join("empty/index.html"), "fresh index\n").unwrap();
    assert_eq!(s.get("/empty/").body, b"fresh index\n");
}

#[test]
fn relaxed_mode_trusts_an_entry_for_valid() {
    let s = TestServer::site(
        "[[routes]]\n[routes.static.open_file_cache]\nstrict = false\nvalid = \"400ms\"\n",
    );
    assert_eq!(s.get("/hello.txt").body, b"hello, world\n");
    std::fs::write(s.root.join("hello.txt"), "changed!\n").unwrap();
    assert_eq!(
        s.get("/hello.txt").body,
        b"hello, world\n",
        "trusted within valid"
    );
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        s.get("/hello.txt").body,
        b"changed!\n",
        "revalidated after valid"
    );
}

/// `inactive`: a deleted file nobody asks for again is closed (its disk space given back)
/// without a request, as with nginx's `open_file_cache inactive=`.
#[test]
fn an_inactive_entry_closes_its_deleted_file() {
    let s = TestServer::site("[[routes]]\n[routes.static.open_file_cache]\ninactive = \"600ms\"\n");
    let path = s.root.join("gone.txt");
    std::fs::write(&path, "soon deleted\n").unwrap();
    let deleted = format!("{} (deleted)", path.display());
    let held = || {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|t| *t == path || t.to_string_lossy() == deleted)
            .count()
    };
    assert_eq!(s.get("/gone.txt").body, b"soon deleted\n");
    std::fs::remove_file(&path).unwrap();
    assert_eq!(held(), 1, "strict mode keeps the file open");
    let t = std::time::Instant::now();
    while held() > 0 {
        assert!(t.elapsed() < Duration::from_secs(3), "still open after 3 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "closed too early"
    );
    assert_eq!(s.get("/gone.txt").status, 404);
}

#[test]
fn cache_can_be_switched_off() {
    let s = TestServer::site("[[routes]]\n[routes.static.open_file_cache]\nenabled = false\n");
    assert_eq!(s.get("/hello.txt").body, b"hello, world\n");
    std::fs::write(s.root.join("hello.txt"), "x\n").unwrap();
    assert_eq!(s.get("/hello.txt").body, b"x\n");
    assert_eq!(s.get("/docs").status, 301);
}

#[test]
fn files_over_the_inline_limit_stream_intact() {
    let s = TestServer::site("[[routes]]\n[routes.static.open_file_cache]\ninline_max = 1024\n");
    let data: Vec<u8> = (0..1_500_000u32).map(|i| (i * 7 % 256) as u8).collect();
    std::fs::write(s.root.join("big.bin"), &data).unwrap();
    for _ in 0..3 {
        let r = s.get("/big.bin");
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-length"), Some("1500000"));
        assert!(r.body == data);
    }
    // Small files above the limit still work, and on one keep-alive connection.
    let mut c = Conn::open(s.addr);
    for _ in 0..3 {
        let r = c.request("GET /digits.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(r.body.len(), 200);
        let r = c.request("GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(r.body.len(), data.len());
    }
}

#[test]
fn a_file_truncated_while_being_sent_does_not_crash_the_server() {
    let s = TestServer::site("");
    let path = s.root.join("shrinking.bin");
    std::fs::write(&path, vec![b'z'; 8 * 1024 * 1024]).unwrap();
    let mut c = Conn::open(s.addr);
    c.send(b"GET /shrinking.bin HTTP/1.1\r\nHost: t\r\n\r\n");
    // Read only a little, then truncate under the server's feet.
    std::thread::sleep(Duration::from_millis(100));
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(1000)
        .unwrap();
    let r = c.read_response(false);
    if let Some(r) = r {
        assert!(r.body.len() < 8 * 1024 * 1024, "the response was cut short");
    }
    // The server goes on, and now serves the new, short file.
    assert_eq!(s.get("/hello.txt").status, 200);
    assert_eq!(s.get("/shrinking.bin").body.len(), 1000);
}

#[test]
fn a_file_deleted_while_being_sent_is_served_whole() {
    let s = TestServer::site("");
    let path = s.root.join("doomed.bin");
    let data = vec![b'q'; 4 * 1024 * 1024];
    std::fs::write(&path, &data).unwrap();
    let mut c = Conn::open(s.addr);
    c.send(b"GET /doomed.bin HTTP/1.1\r\nHost: t\r\n\r\n");
    std::thread::sleep(Duration::from_millis(50));
    std::fs::remove_file(&path).unwrap();
    // The open descriptor keeps the bytes readable until the response ends.
    let r = c.read_response(false).unwrap();
    assert_eq!(r.body.len(), data.len());
    assert_eq!(s.get("/doomed.bin").status, 404);
}

#[test]
fn a_preferred_index_file_appearing_is_served_at_once() {
    let s =
        TestServer::site("[[routes]]\n[routes.static]\nindex = [\"index.html\", \"index.htm\"]\n");
    std::fs::write(s.root.join("empty/index.htm"), "second choice\n").unwrap();
    assert_eq!(s.get("/empty/").body, b"second choice\n");
    std::fs::write(s.root.join("empty/index.html"), "first choice\n").unwrap();
    assert_eq!(s.get("/empty/").body, b"first choice\n");
}
