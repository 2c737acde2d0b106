//! Idle keep-alive connections let go of hyper's buffers once many are open
//! (`server::park`): they cost a fraction of the memory, and every one of them still
//! answers its next request, whole, as if nothing had happened.

use crate::common;

use common::*;
use std::time::{Duration, Instant};

/// More than the 512 open connections above which idle ones park.
const BATCH: usize = 600;

fn status_field(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{key} in /proc/{pid}/status"))
}

/// The server's CPU time so far (user + system), in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after_name = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = after_name.split(' ').collect();
    f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime")
}

fn open_batch(s: &Spawned, n: usize) -> Vec<Conn> {
    (0..n)
        .map(|_| {
            let mut c = Conn::open(s.addr);
            let r = c.request("GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
            assert_eq!(r.status, 200);
            assert_eq!(r.text(), "hello\n");
            c
        })
        .collect()
}

#[test]
fn idle_connections_park_and_come_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("a.txt"), "hello\n").expect("write");
    let big: Vec<u8> = (0..4 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.path().join("big.bin"), &big).expect("write");
    // A 0.5 s watchdog tick: connections idle before the count passed the threshold park
    // on the next one.
    let s = spawn_gatehouse_in(
        dir.path(),
        "workers = 1\n[timeouts]\nheader_read = \"2s\"\nkeep_alive = \"60s\"\n",
    );
    let pid = s.child.id();

    // Past the threshold, then a second batch: what each of its connections costs, once
    // its request is answered, is what an idle connection holds. hyper's two buffers
    // alone would be 16 KiB each.
    let mut first = open_batch(&s, BATCH);
    std::thread::sleep(Duration::from_millis(1200));
    let before = status_field(pid, "VmRSS:");
    let mut second = open_batch(&s, BATCH);
    std::thread::sleep(Duration::from_millis(1200));
    let after = status_field(pid, "VmRSS:");
    let per_conn = (after.saturating_sub(before)) * 1024 / BATCH as u64;
    eprintln!("an idle connection: {per_conn} bytes");
    assert!(
        per_conn < 6 * 1024,
        "an idle connection costs {per_conn} bytes ({before} → {after} KiB for {BATCH})"
    );

    // Every parked connection answers again, from both batches.
    for (i, c) in first.iter_mut().chain(second.iter_mut()).enumerate() {
        let r = c.request("GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(
            (r.status, r.text()),
            (200, "hello\n".into()),
            "connection {i}"
        );
    }

    // A large file after parking: whole, through sendfile on the new hyper.
    let r = first[0].request("GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.status, 200);
    assert!(r.body == big, "the 4 MiB file came back whole");

    // Two pipelined requests on a parked connection: both answered, in order.
    first[1]
        .send(b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /nothing HTTP/1.1\r\nHost: t\r\n\r\n");
    let one = first[1].read_response(false).expect("first response");
    let two = first[1].read_response(false).expect("second response");
    assert_eq!((one.status, two.status), (200, 404));

    // A head split across a watchdog tick on a parked connection: the new hyper holds it
    // (let go before its first whole head, it would only end keep-alive), without
    // spinning, and the connection stays alive for the next request.
    let ticks = cpu_ticks(pid);
    first[2].send(b"GET /a.txt HTTP/1.1\r\nHo");
    std::thread::sleep(Duration::from_millis(1100));
    let spent = cpu_ticks(pid) - ticks;
    assert!(
        spent < 30,
        "{spent} ticks of CPU over 1.1 s holding a partial head"
    );
    first[2].send(b"st: t\r\n\r\n");
    let r = first[2]
        .read_response(false)
        .expect("the completed head's response");
    assert_eq!((r.status, r.text()), (200, "hello\n".into()));
    assert_eq!(r.header("connection"), None, "keep-alive ended");
    let r = first[2].request("GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.status, 200, "the connection lives on");

    // A whole request and part of the next in one write: hyper answers the first and is
    // let go holding the second's first bytes, which the next hyper reads first.
    first[5].send(b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /a.txt HTTP/1.1\r\nHo");
    let r = first[5].read_response(false).expect("the first response");
    assert_eq!(r.status, 200);
    std::thread::sleep(Duration::from_millis(1100));
    first[5].send(b"st: t\r\n\r\n");
    let r = first[5].read_response(false).expect("the second response");
    assert_eq!((r.status, r.text()), (200, "hello\n".into()));
    assert_eq!(r.header("connection"), None, "keep-alive ended");

    // A response sent before its request's body was read (405 for a POST): a tick later
    // the body arrives with another request behind it. Parked there, the body would be
    // read as a head; the answer must be the request's, or a closed connection.
    let r = first[6].request("POST /a.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 12\r\n\r\n");
    assert_eq!(r.status, 405);
    std::thread::sleep(Duration::from_millis(1100));
    first[6].send(b"GET /x HTTP/1GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    if let Some(r) = first[6].read_response(false) {
        assert_eq!(
            (r.status, r.text()),
            (200, "hello\n".into()),
            "the body was read as a request"
        );
    }

    // A request that asked for an upgrade and got a plain answer: hyper would hand the
    // socket to that upgrade if let go, so this connection stays with hyper and answers.
    let r = first[4].request(
        "GET /a.txt HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    std::thread::sleep(Duration::from_millis(1100));
    let r = first[4].request("GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!((r.status, r.text()), (200, "hello\n".into()));

    // header_read still holds for a head started on a parked connection.
    first[3].send(b"GET /a.txt HTTP/1.1\r\n");
    let started = Instant::now();
    assert!(
        first[3].closed_within(Duration::from_secs(6)),
        "a head left unfinished was never timed out"
    );
    assert!(started.elapsed() >= Duration::from_millis(1500));
}

/// keep_alive closes a parked connection as it closed an idle one.
#[test]
fn parked_connections_are_closed_at_keep_alive() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("a.txt"), "hello\n").expect("write");
    let s = spawn_gatehouse_in(
        dir.path(),
        "workers = 1\n[timeouts]\nheader_read = \"2s\"\nkeep_alive = \"2s\"\n",
    );
    let mut conns = open_batch(&s, BATCH);
    let started = Instant::now();
    let last = conns.last_mut().expect("a connection");
    assert!(
        last.closed_within(Duration::from_secs(6)),
        "a parked connection outlived keep_alive"
    );
    assert!(started.elapsed() >= Duration::from_millis(1500));
    assert!(conns[0].closed_within(Duration::from_secs(2)));
}

/// Many clients connecting together, each sending its request at once: a parked
/// connection is woken with nothing to read (readiness can be stale), and must not take
/// a hyper then, which it could only let go after its first request. Every connection
/// is answered, and all of them are left parked.
#[test]
fn a_burst_of_new_connections_stays_parked() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("a.txt"), "hello\n").expect("write");
    let s = spawn_gatehouse_in(
        dir.path(),
        "workers = 1\n[timeouts]\nheader_read = \"10s\"\nkeep_alive = \"60s\"\n",
    );
    let pid = s.child.id();
    let rss = || {
        std::thread::sleep(Duration::from_millis(1200));
        status_field(pid, "VmRSS:")
    };
    // Past the threshold first: the connections counted below all start parked.
    let mut conns: Vec<Conn> = (0..BATCH).map(|_| Conn::open(s.addr)).collect();
    let before = rss();
    conns.extend((0..2 * BATCH).map(|_| Conn::open(s.addr)));
    let opened = rss();
    let per_conn = (opened.saturating_sub(before)) * 1024 / (2 * BATCH) as u64;
    eprintln!("a new connection, before its request: {per_conn} bytes");
    assert!(
        per_conn < 3 * 1024,
        "a new connection costs {per_conn} bytes ({before} → {opened} KiB for {})",
        2 * BATCH
    );
    // Then every one asks at once, and again: answered, and parked again after.
    for round in 0..2 {
        for c in conns.iter_mut() {
            c.send(b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        }
        for (i, c) in conns.iter_mut().enumerate() {
            let r = c.read_response(false).expect("a response");
            assert_eq!(
                (r.status, r.text()),
                (200, "hello\n".into()),
                "connection {i}"
            );
        }
        let after = rss();
        eprintln!("after burst {round}: {after} KiB");
        assert!(
            after < opened + 3 * 1024,
            "{} connections grew by {} KiB answering one request each",
            conns.len(),
            after.saturating_sub(opened)
        );
    }
    // A parked connection whose client closes is closed at once, not at keep_alive.
    let last = conns.last_mut().expect("a connection");
    last.stream
        .shutdown(std::net::Shutdown::Write)
        .expect("shutdown");
    let started = Instant::now();
    assert!(
        last.closed_within(Duration::from_secs(5)),
        "a parked connection outlived its client's close"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}
