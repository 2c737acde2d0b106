//! `/metrics`: request counts by route, method and status, the figures read at scrape
//! time, the process's own, the CPU per request agreeing with /proc, and the text format
//! as Prometheus's promtool reads it.
mod common;
use common::*;
use std::collections::HashMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The samples of a scrape, by series as written (`name{labels}`), and the text.
fn scrape(admin: std::net::SocketAddr) -> (String, HashMap<String, f64>) {
    let r = send(admin, "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let text = r.text();
    let samples = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, v) = l.rsplit_once(' ').unwrap();
            (series.to_string(), v.parse::<f64>().unwrap())
        })
        .collect();
    (text, samples)
}

fn get(m: &HashMap<String, f64>, series: &str) -> f64 {
    *m.get(series).unwrap_or_else(|| {
        let mut keys: Vec<_> = m.keys().collect();
        keys.sort();
        panic!("{series} missing from {keys:#?}")
    })
}

/// promtool (Debian's prometheus package) parses and lints the exposition.
fn promtool_check_metrics(text: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus) must be installed");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn upstream() -> std::net::SocketAddr {
    let app = axum::Router::new().fallback(|| async { "from upstream" });
    serve_axum(loopback(), app)
}

#[test]
fn open_file_cache_entries_dropped_for_inactivity_are_counted() {
    let g = spawn_gatehouse(
        "[[routes]]\nname = \"site\"\n[routes.static.open_file_cache]\ninactive = \"300ms\"\n",
    );
    assert_eq!(
        send(g.addr, "GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n").status,
        200
    );
    let series = "gatehouse_open_file_cache_expired_total{route=\"site\"}";
    let deadline = Instant::now() + Duration::from_secs(3);
    let m = loop {
        let (_, m) = scrape(g.admin);
        if m.get(series).is_some_and(|&v| v > 0.0) || Instant::now() > deadline {
            break m;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(get(&m, series), 1.0);
    assert_eq!(
        get(
            &m,
            "gatehouse_open_file_cache_evictions_total{route=\"site\"}"
        ),
        0.0
    );
}

#[test]
fn requests_are_counted_by_route_method_and_status() {
    let up = upstream();
    let g = spawn_gatehouse(&format!(
        "[[routes]]\nname = \"site\"\n[routes.static]\n[[routes]]\nname = \"api\"\npath = \"/api\"\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n"
    ));
    let mut site_bytes = 0;
    for _ in 0..3 {
        let r = send(g.addr, "GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(r.status, 200);
        site_bytes += r.body.len();
    }
    let r = send(g.addr, "HEAD /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.status, 200);
    for _ in 0..2 {
        let r = send(g.addr, "GET /missing HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(r.status, 404);
        site_bytes += r.body.len();
    }
    let r = send(
        g.addr,
        "POST /api/x HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi",
    );
    assert_eq!((r.status, r.text().as_str()), (200, "from upstream"));
    let r = send(g.addr, "GET /%zz HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.status, 400);
    let r = send(g.addr, "BREW /pot HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.status, 405);
    site_bytes += r.body.len();
    // A head hyper could not read (a space in a field name), answered by hyper itself.
    let r = send(g.addr, "GET / HTTP/1.1\r\nHost: t\r\nBad Name: x\r\n\r\n");
    assert_eq!(r.status, 400);

    // The last response's body is counted once hyper has sent it: wait for in-flight 0.
    // The unreadable head is counted as its connection ends, just after hyper's answer.
    let deadline = Instant::now() + Duration::from_secs(5);
    let unread = "gatehouse_http_requests_total{route=\"(none)\",method=\"OTHER\",status=\"400\"}";
    let (text, m) = loop {
        let (text, m) = scrape(g.admin);
        let settled = get(&m, "gatehouse_http_requests_in_flight") == 0.0 && m.contains_key(unread);
        if settled || Instant::now() > deadline {
            break (text, m);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let req = |route: &str, method: &str, status: u16| {
        get(
            &m,
            &format!(
                "gatehouse_http_requests_total{{route=\"{route}\",method=\"{method}\",status=\"{status}\"}}"
            ),
        )
    };
    assert_eq!(req("site", "GET", 200), 3.0);
    assert_eq!(req("site", "HEAD", 200), 1.0);
    assert_eq!(req("site", "GET", 404), 2.0);
    assert_eq!(req("api", "POST", 200), 1.0);
    assert_eq!(
        req("(none)", "GET", 400),
        1.0,
        "a bad path is counted, under no route"
    );
    assert_eq!(
        req("(none)", "OTHER", 400),
        1.0,
        "a head that is not a request is counted, under no route and no method"
    );
    assert_eq!(
        req("site", "OTHER", 405),
        1.0,
        "an unknown method is OTHER, not its name"
    );
    assert!(!text.contains("BREW"), "no raw method as a label");
    assert!(!text.contains("hello.txt"), "no raw path as a label");
    assert_eq!(
        get(
            &m,
            "gatehouse_http_request_duration_seconds_count{route=\"site\"}"
        ),
        7.0
    );
    assert_eq!(
        get(
            &m,
            "gatehouse_http_request_duration_seconds_bucket{route=\"site\",le=\"10\"}"
        ),
        7.0
    );
    assert_eq!(
        get(&m, "gatehouse_http_response_bytes_total{route=\"site\"}"),
        site_bytes as f64
    );
    assert_eq!(get(&m, "gatehouse_http_requests_in_flight"), 0.0);
    // All ten, the refused one and the unreadable head included, by the protocol they came
    // in.
    let by = |p: &str| {
        let series = format!("gatehouse_http_requests_by_protocol_total{{protocol=\"{p}\"}}");
        m.get(&series).copied().unwrap_or(0.0)
    };
    assert_eq!(
        (by("HTTP/1.1"), by("HTTP/2"), by("HTTP/3")),
        (10.0, 0.0, 0.0)
    );
    let upstream = format!("{{upstream=\"{up}\"}}");
    assert_eq!(
        get(&m, &format!("gatehouse_upstream_requests_total{upstream}")),
        1.0
    );
    assert_eq!(
        get(&m, &format!("gatehouse_upstream_healthy{upstream}")),
        1.0
    );
    assert_eq!(
        get(
            &m,
            &format!("gatehouse_upstream_response_seconds_count{upstream}")
        ),
        1.0
    );
    let hits = get(&m, "gatehouse_open_file_cache_hits_total{route=\"site\"}");
    let misses = get(&m, "gatehouse_open_file_cache_misses_total{route=\"site\"}");
    assert!(misses >= 2.0 && hits >= 2.0, "hits {hits}, misses {misses}");
    assert_eq!(get(&m, "gatehouse_access_log_lines_dropped_total"), 0.0);
    assert_eq!(
        get(
            &m,
            &format!(
                "gatehouse_build_info{{version=\"{}\"}}",
                env!("CARGO_PKG_VERSION")
            )
        ),
        1.0
    );
    assert!(get(&m, "process_cpu_seconds_total") > 0.0);
    assert!(get(&m, "process_resident_memory_bytes") > 1e6);
    assert!(get(&m, "process_open_fds") > 3.0);
    assert!(get(&m, "process_start_time_seconds") > 1.7e9);
    promtool_check_metrics(&text);
}

#[test]
fn connections_open_follow_the_clients() {
    let g = spawn_gatehouse("");
    let conns: Vec<_> = (0..3).map(|_| Conn::open(g.addr)).collect();
    let open = |want: f64| {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let (_, m) = scrape(g.admin);
            let n = get(&m, "gatehouse_connections_open{listener=\"http\"}");
            if n == want || Instant::now() > deadline {
                return n;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    assert_eq!(open(3.0), 3.0);
    drop(conns);
    assert_eq!(open(0.0), 0.0);
}

#[test]
fn metrics_off_answers_404() {
    let g = spawn_gatehouse("[metrics]\nenabled = false\n");
    let r = send(g.admin, "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(r.status, 404);
    assert_eq!(
        send(g.addr, "GET / HTTP/1.1\r\nHost: t\r\n\r\n").status,
        200
    );
}

/// utime + stime of a process, in clock ticks, from /proc as bench/run.sh reads it.
fn proc_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of proc(5); `rest` starts at field 3.
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn cpu_per_request_from_metrics_agrees_with_proc() {
    let g = spawn_gatehouse("");
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let requests_total = |m: &HashMap<String, f64>| -> f64 {
        m.iter()
            .filter(|(k, _)| k.starts_with("gatehouse_http_requests_total{"))
            .map(|(_, v)| v)
            .sum()
    };
    let (_, m0) = scrape(g.admin);
    let t0 = proc_ticks(g.child.id());
    let stop = Instant::now() + Duration::from_secs(3);
    let addr = g.addr;
    let clients: Vec<_> = (0..6)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = Conn::open(addr);
                let mut n = 0u64;
                while Instant::now() < stop {
                    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
                    assert_eq!(c.read_response(false).unwrap().status, 200);
                    n += 1;
                }
                n
            })
        })
        .collect();
    let served: u64 = clients.into_iter().map(|c| c.join().unwrap()).sum();
    let t1 = proc_ticks(g.child.id());
    let (_, m1) = scrape(g.admin);
    let by_proc = (t1 - t0) as f64 / hz * 1e6 / served as f64;
    let cpu = get(&m1, "process_cpu_seconds_total") - get(&m0, "process_cpu_seconds_total");
    let counted = requests_total(&m1) - requests_total(&m0);
    assert_eq!(counted, served as f64, "every request counted once");
    let by_metrics = cpu * 1e6 / counted;
    assert!(
        (by_metrics - by_proc).abs() <= 0.10 * by_proc,
        "/metrics says {by_metrics:.2} µs/request, /proc {by_proc:.2} ({served} requests, {} ticks)",
        t1 - t0
    );
}
