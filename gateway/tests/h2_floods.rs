//! HTTP/2 floods (issue 9), sent as raw frames over h2c: rapid reset (CVE-2023-44487),
//! SETTINGS and PING floods, and a CONTINUATION flood (CVE-2024-27316 and kin). Each must
//! end with the flooding connection closed or held back by TCP, the server's memory
//! bounded, and another client served all the while.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const ENHANCE_YOUR_CALM: u32 = 0xb;

/// RFC 9113 §4.1: a frame is a 9-byte header (length, type, flags, stream) and a payload.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = Vec::with_capacity(9 + payload.len());
    f.extend_from_slice(&len.to_be_bytes()[1..]);
    f.push(kind);
    f.push(flags);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A GET / header block (RFC 7541): :method GET, :scheme http, :path / from the static
/// table, and :authority as a literal without indexing.
fn get_block() -> Vec<u8> {
    let mut b = vec![0x82, 0x86, 0x84, 0x01, 0x04];
    b.extend_from_slice(b"test");
    b
}

#[derive(Default, Debug)]
struct Seen {
    goaway: Option<u32>,
    frames: u64,
    closed: bool,
}

/// A raw h2c connection whose incoming frames are read (and counted) by a thread of its
/// own, so that the flood can be written without waiting on answers.
struct Raw {
    s: TcpStream,
    seen: Arc<Mutex<Seen>>,
}

impl Raw {
    fn open(addr: SocketAddr, read: bool) -> Raw {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_nodelay(true).expect("nodelay");
        s.set_write_timeout(Some(Duration::from_secs(3)))
            .expect("timeout");
        s.write_all(PREFACE).expect("preface");
        s.write_all(&frame(SETTINGS, 0, 0, &[])).expect("settings");
        let seen = Arc::new(Mutex::new(Seen::default()));
        if read {
            let (mut r, seen) = (s.try_clone().expect("clone"), seen.clone());
            std::thread::spawn(move || {
                let mut head = [0u8; 9];
                let mut payload = vec![0u8; 1 << 24];
                loop {
                    if r.read_exact(&mut head).is_err() {
                        break;
                    }
                    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
                    if r.read_exact(&mut payload[..len]).is_err() {
                        break;
                    }
                    let mut g = seen.lock().expect("lock");
                    g.frames += 1;
                    if head[3] == GOAWAY && len >= 8 {
                        g.goaway = Some(u32::from_be_bytes([
                            payload[4], payload[5], payload[6], payload[7],
                        ]));
                    }
                }
                seen.lock().expect("lock").closed = true;
            });
        }
        Raw { s, seen }
    }

    /// Writes `bytes` `times` times; stops early (returning how many went) once the
    /// server closes the connection or stops reading it.
    fn flood(&mut self, bytes: &[u8], times: usize) -> usize {
        for i in 0..times {
            if self.s.write_all(bytes).is_err() {
                return i;
            }
        }
        times
    }

    fn wait_closed(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.seen.lock().expect("lock").closed {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime")
}

/// Another client, over HTTP/1.1, must still get its answer promptly.
fn others_served(addr: SocketAddr) {
    let t = Instant::now();
    let r = common::send(
        addr,
        "GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
}

fn server() -> common::Spawned {
    common::spawn_gatehouse("h2c = true\n")
}

#[test]
fn rapid_reset_is_answered_with_goaway() {
    let g = server();
    let pid = g.child.id();
    let (rss0, cpu0) = (rss_kib(pid), cpu_ticks(pid));
    let mut c = Raw::open(g.addr, true);
    let block = get_block();
    // HEADERS then RST_STREAM(CANCEL) for each new stream, as fast as it will go.
    let mut pair = Vec::new();
    let n = 100_000u32;
    let mut sent = 0;
    for i in 0..n {
        let id = 1 + 2 * i;
        pair.clear();
        pair.extend(frame(HEADERS, END_STREAM | END_HEADERS, id, &block));
        pair.extend(frame(RST_STREAM, 0, id, &8u32.to_be_bytes()));
        if c.flood(&pair, 1) == 0 {
            break;
        }
        sent += 1;
    }
    let closed = c.wait_closed(Duration::from_secs(5));
    let seen = c.seen.lock().expect("lock");
    let cpu = cpu_ticks(pid) - cpu0;
    let rss = rss_kib(pid);
    println!(
        "rapid reset: {sent} of {n} HEADERS+RST_STREAM pairs written before the server closed \
         the connection (GOAWAY {:?}); server CPU {} ms, RSS {} → {} KiB",
        seen.goaway,
        cpu * 10,
        rss0,
        rss
    );
    assert!(closed, "the flooding connection is still open: {seen:?}");
    assert_eq!(seen.goaway, Some(ENHANCE_YOUR_CALM), "{seen:?}");
    assert!(sent < n as usize, "the whole flood was taken");
    assert!(rss < rss0 + 32 * 1024, "RSS grew from {rss0} to {rss} KiB");
    others_served(g.addr);
}

/// Offers 2,000,000 copies of `one` on a connection that never reads what the server owes
/// back for them: h2 must stop reading until its answer is written, so that TCP holds the
/// client back, with the server's memory bounded and another client served.
fn held_back(what: &str, one: Vec<u8>) {
    let g = server();
    let pid = g.child.id();
    let rss0 = rss_kib(pid);
    let mut c = Raw::open(g.addr, false);
    let burst: Vec<u8> = one.iter().copied().cycle().take(one.len() * 1000).collect();
    let n = 2000;
    let sent = c.flood(&burst, n) * 1000;
    let rss = rss_kib(pid);
    println!(
        "{what} flood: {sent} of {} accepted before TCP held the client back; RSS {rss0} → {rss} KiB",
        n * 1000
    );
    assert!(
        sent < n * 1000,
        "the server took every {what} without answering"
    );
    assert!(rss < rss0 + 32 * 1024, "RSS grew from {rss0} to {rss} KiB");
    others_served(g.addr);
}

#[test]
fn ping_flood_is_held_back_and_memory_stays_bounded() {
    held_back("PING", frame(PING, 0, 0, &[7; 8]));
}

#[test]
fn settings_flood_is_held_back_and_memory_stays_bounded() {
    // SETTINGS_MAX_CONCURRENT_STREAMS = 100, each one owing a SETTINGS ACK.
    held_back("SETTINGS", frame(SETTINGS, 0, 0, &[0, 3, 0, 0, 0, 100]));
}

#[test]
fn continuation_flood_is_cut_off_at_the_header_limit() {
    let g = server();
    let pid = g.child.id();
    let rss0 = rss_kib(pid);
    let mut c = Raw::open(g.addr, true);
    // A HEADERS frame without END_HEADERS, then CONTINUATION frames that never end the
    // block, each carrying 16 KiB of literal headers.
    let mut first = get_block();
    first.extend_from_slice(&[0x00, 0x01, b'a', 0x01, b'b']);
    c.flood(&frame(HEADERS, END_STREAM, 1, &first), 1);
    let mut chunk = Vec::new();
    while chunk.len() < 16_000 {
        // Literal without indexing, new name "x", value of 100 bytes.
        chunk.extend_from_slice(&[0x00, 0x01, b'x', 100]);
        chunk.extend_from_slice(&[b'v'; 100]);
    }
    let cont = frame(CONTINUATION, 0, 1, &chunk);
    let n = 4000; // 64 MB of header block
    let sent = c.flood(&cont, n);
    let closed = c.wait_closed(Duration::from_secs(5));
    let seen = c.seen.lock().expect("lock");
    let rss = rss_kib(pid);
    println!(
        "CONTINUATION flood: {sent} of {n} 16 KB CONTINUATION frames written before the server \
         closed the connection (GOAWAY {:?}); RSS {rss0} → {rss} KiB",
        seen.goaway
    );
    assert!(closed, "the flooding connection is still open: {seen:?}");
    assert!(sent < n, "the whole flood was taken");
    assert!(rss < rss0 + 32 * 1024, "RSS grew from {rss0} to {rss} KiB");
    others_served(g.addr);
}
