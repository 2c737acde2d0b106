//! HTTP/2 floods (issue 9), sent as raw frames over h2c: rapid reset (CVE-2023-44487),
//! SETTINGS and PING floods, and a CONTINUATION flood (CVE-2024-27316 and kin). Each must
//! end with the flooding connection closed or held back by TCP, the server's memory
//! bounded, and another client served all the while.

use crate::common;

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

// --- Flow control (issue 28): what a client that opens no window can make the server hold.

const DATA: u8 = 0x0;
const WINDOW_UPDATE: u8 = 0x8;
const ACK: u8 = 0x1;

/// A GET of `path` (RFC 7541): :method GET, :scheme http, then :path and :authority as
/// literals without indexing.
fn get_path_block(path: &str) -> Vec<u8> {
    let mut b = vec![0x82, 0x86, 0x04, path.len() as u8];
    b.extend_from_slice(path.as_bytes());
    b.extend_from_slice(&[0x01, 0x04]);
    b.extend_from_slice(b"test");
    b
}

#[derive(Default, Debug)]
struct StreamSeen {
    headers: bool,
    data: u64,
    ended: bool,
    reset: Option<(u32, Instant)>,
}

#[derive(Default, Debug)]
struct Flow {
    streams: std::collections::HashMap<u32, StreamSeen>,
    goaway: Option<u32>,
    closed: bool,
}

/// An h2c client that sets its streams' initial window (RFC 9113 §6.5.2) and keeps what
/// each stream got; with `refill` its reader gives the connection back the window each
/// DATA frame took (§6.9), so that only the streams' own windows hold data back.
struct FlowClient {
    w: Arc<Mutex<TcpStream>>,
    seen: Arc<Mutex<Flow>>,
}

impl FlowClient {
    fn open(addr: SocketAddr, window: u32, refill: bool) -> FlowClient {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_nodelay(true).expect("nodelay");
        let mut settings = vec![0, 4];
        settings.extend_from_slice(&window.to_be_bytes());
        let w = Arc::new(Mutex::new(s.try_clone().expect("clone")));
        {
            let mut w = w.lock().expect("lock");
            w.write_all(PREFACE).expect("preface");
            w.write_all(&frame(SETTINGS, 0, 0, &settings))
                .expect("settings");
        }
        let seen = Arc::new(Mutex::new(Flow::default()));
        let (mut r, seen2, w2) = (s, seen.clone(), w.clone());
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
                let (kind, flags) = (head[3], head[4]);
                let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
                let reply = match kind {
                    SETTINGS if flags & ACK == 0 => Some(frame(SETTINGS, ACK, 0, &[])),
                    PING if flags & ACK == 0 => Some(frame(PING, ACK, 0, &payload[..len])),
                    DATA if refill && len > 0 => {
                        Some(frame(WINDOW_UPDATE, 0, 0, &(len as u32).to_be_bytes()))
                    }
                    _ => None,
                };
                if let Some(f) = reply {
                    let _ = w2.lock().expect("lock").write_all(&f);
                }
                let mut g = seen2.lock().expect("lock");
                match kind {
                    GOAWAY if len >= 8 => {
                        g.goaway = Some(u32::from_be_bytes([
                            payload[4], payload[5], payload[6], payload[7],
                        ]))
                    }
                    HEADERS | DATA | RST_STREAM if id != 0 => {
                        let st = g.streams.entry(id).or_default();
                        match kind {
                            HEADERS => st.headers = true,
                            DATA => st.data += len as u64,
                            _ => {
                                let code = u32::from_be_bytes([
                                    payload[0], payload[1], payload[2], payload[3],
                                ]);
                                st.reset = Some((code, Instant::now()));
                            }
                        }
                        if kind != RST_STREAM && flags & END_STREAM != 0 {
                            st.ended = true;
                        }
                    }
                    _ => {}
                }
            }
            seen2.lock().expect("lock").closed = true;
        });
        FlowClient { w, seen }
    }

    fn send(&self, f: &[u8]) {
        let _ = self.w.lock().expect("lock").write_all(f);
    }

    fn get(&self, stream: u32, path: &str) {
        self.send(&frame(
            HEADERS,
            END_STREAM | END_HEADERS,
            stream,
            &get_path_block(path),
        ));
    }

    fn grant(&self, stream: u32, n: u32) {
        self.send(&frame(WINDOW_UPDATE, 0, stream, &n.to_be_bytes()));
    }

    fn with<R>(&self, f: impl FnOnce(&Flow) -> R) -> R {
        f(&self.seen.lock().expect("lock"))
    }
}

fn wait_for(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

const BIG: usize = 32 * 1024 * 1024;

/// `conns` connections opened with a window of 0 (`trickle`: then a byte at a time), each
/// with `streams` GETs of `/big.bin`.
fn flooded(addr: std::net::SocketAddr, conns: u32, streams: u32, trickle: bool) -> Vec<FlowClient> {
    (0..conns)
        .map(|_| {
            let c = FlowClient::open(addr, 0, trickle);
            for i in 0..streams {
                c.get(1 + 2 * i, "/big.bin");
            }
            c
        })
        .collect()
}

/// Streams that have their response head, over all `clients`.
fn answered(clients: &[FlowClient]) -> usize {
    clients
        .iter()
        .map(|c| c.with(|f| f.streams.values().filter(|s| s.headers).count()))
        .sum()
}

/// The fixture site with a 32 MiB file, `big.bin`.
fn site_with_big_file() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("site");
    common::copy_dir(&common::fixtures().join("site"), &root);
    let data: Vec<u8> = (0..BIG).map(|i| (i % 251) as u8).collect();
    std::fs::write(root.join("big.bin"), data).expect("big.bin");
    dir
}

/// SETTINGS_INITIAL_WINDOW_SIZE = 0 and 256 GETs of a large file on each of 3 connections:
/// every response waits for a window that never opens. Each stream used to pin a 256 KiB
/// file chunk (64 MiB a connection, RSS up by ~200 MiB here); now a connection holds at
/// most `limits.h2_send_buffer` (1 MiB) of response bytes, and another client, over
/// HTTP/1.1 and over HTTP/2, is served the whole file all the while.
#[test]
fn zero_windows_pin_no_more_than_the_send_buffer() {
    let dir = site_with_big_file();
    let g = common::spawn_gatehouse_in(&dir.path().join("site"), "h2c = true\n");
    let pid = g.child.id();
    // One request first, so that what every server makes once is already counted.
    others_served(g.addr);
    let rss0 = rss_kib(pid);
    let (conns, streams) = (3, 256);
    let clients = flooded(g.addr, conns, streams, false);
    let all = wait_for(Duration::from_secs(20), || {
        answered(&clients) == (conns * streams) as usize
    });
    std::thread::sleep(Duration::from_millis(500));
    let rss = rss_kib(pid);
    println!(
        "{conns} connections x {streams} streams with a window of 0: {} answered, RSS {rss0} → {rss} KiB",
        answered(&clients)
    );
    assert!(
        all,
        "only {} of the streams were answered",
        answered(&clients)
    );
    assert!(
        rss < rss0 + conns as u64 * 8 * 1024,
        "RSS grew from {rss0} to {rss} KiB"
    );
    others_served(g.addr);
    let c = FlowClient::open(g.addr, (1 << 31) - 1, true);
    c.get(1, "/big.bin");
    let got = wait_for(Duration::from_secs(20), || {
        c.with(|f| f.streams.get(&1).is_some_and(|s| s.ended))
    });
    let data = c.with(|f| f.streams.get(&1).map_or(0, |s| s.data));
    assert!(got && data == BIG as u64, "HTTP/2 download: {data} bytes");
    for c in &clients {
        assert!(!c.with(|f| f.closed), "a waiting connection was closed");
    }
}

/// Two streams on one connection, both GETs of a large file with windows of 0 to start:
/// stream 3 is given 64 KiB of window every 100 ms, stream 1 a byte every 500 ms, which
/// used to keep it open for ever. With a send timeout (`keep_alive`) of 2 s, stream 1 is
/// reset (RST_STREAM) within a few seconds while stream 3 goes on moving, and the
/// connection stays open.
#[test]
fn a_stalled_stream_is_reset_while_the_others_move() {
    let dir = site_with_big_file();
    let g = common::spawn_gatehouse_in(
        &dir.path().join("site"),
        "h2c = true\n[timeouts]\nkeep_alive = \"2s\"\n",
    );
    let c = FlowClient::open(g.addr, 0, true);
    let start = Instant::now();
    c.get(1, "/big.bin");
    c.get(3, "/big.bin");
    let mut moved_after_reset = 0u64;
    let mut at_reset = None;
    let mut tick = 0u32;
    while start.elapsed() < Duration::from_secs(8) {
        std::thread::sleep(Duration::from_millis(100));
        tick += 1;
        c.grant(3, 64 * 1024);
        if tick.is_multiple_of(5) {
            c.grant(1, 1);
        }
        let (reset, data3) = c.with(|f| {
            (
                f.streams.get(&1).and_then(|s| s.reset),
                f.streams.get(&3).map_or(0, |s| s.data),
            )
        });
        match (reset, at_reset) {
            (Some(_), None) => at_reset = Some(data3),
            (Some(_), Some(d)) => moved_after_reset = data3 - d,
            _ => {}
        }
        if moved_after_reset > 512 * 1024 {
            break;
        }
    }
    let flow = c.with(|f| format!("{f:?}"));
    println!("after {:?}: {flow}", start.elapsed());
    let (reset1, reset3, closed, goaway, got1) = c.with(|f| {
        (
            f.streams.get(&1).and_then(|s| s.reset),
            f.streams.get(&3).and_then(|s| s.reset),
            f.closed,
            f.goaway,
            f.streams.get(&1).map_or(0, |s| s.data),
        )
    });
    let (_, when) = reset1.expect("the trickled stream was never reset");
    let after = when - start;
    assert!(
        after >= Duration::from_millis(1900) && after < Duration::from_secs(5),
        "reset after {after:?}"
    );
    assert!(got1 > 0, "the trickled stream got its bytes until then");
    assert_eq!(reset3, None, "the moving stream was reset");
    assert!(
        moved_after_reset > 512 * 1024,
        "the moving stream got {moved_after_reset} bytes after the other's reset"
    );
    assert!(!closed && goaway.is_none(), "{flow}");
}

/// The same for proxied bodies: 2 connections x 256 GETs relayed from an upstream, each
/// stream given a byte of window every 300 ms. Each stream used to pin two of the proxy's
/// 64 KiB upstream reads (one with h2, one with hyper): RSS up ~45 MiB here.
#[test]
fn proxied_bodies_behind_closed_windows_are_bounded() {
    let body = bytes::Bytes::from(vec![7u8; 8 << 20]);
    let app = axum::Router::new()
        .route(
            "/big.bin",
            axum::routing::get(move || {
                let b = body.clone();
                async move { b }
            }),
        )
        .fallback(|| async { "hello" });
    let up = common::serve_axum(common::loopback(), app);
    let g = common::spawn_gatehouse(&format!(
        "h2c = true\n[[routes]]\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n"
    ));
    let pid = g.child.id();
    others_served(g.addr);
    let rss0 = rss_kib(pid);
    let (conns, streams) = (2, 256);
    let clients = flooded(g.addr, conns, streams, true);
    let all = wait_for(Duration::from_secs(20), || {
        answered(&clients) == (conns * streams) as usize
    });
    let mut rss = rss_kib(pid);
    for _ in 0..5 {
        for c in &clients {
            for i in 0..streams {
                c.grant(1 + 2 * i, 1);
            }
        }
        std::thread::sleep(Duration::from_millis(300));
        rss = rss.max(rss_kib(pid));
    }
    let got: u64 = clients
        .iter()
        .map(|c| c.with(|f| f.streams.values().map(|s| s.data).sum::<u64>()))
        .sum();
    println!(
        "{conns} connections x {streams} proxied streams, a byte of window at a time: {} \
         answered, {got} bytes sent, RSS {rss0} → {rss} KiB",
        answered(&clients)
    );
    assert!(
        all,
        "only {} of the streams were answered",
        answered(&clients)
    );
    assert!(got > 0, "no stream moved");
    assert!(
        rss < rss0 + conns as u64 * 8 * 1024,
        "RSS grew from {rss0} to {rss} KiB"
    );
    others_served(g.addr);
}
