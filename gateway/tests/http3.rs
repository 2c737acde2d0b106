//! HTTP/3 on the HTTPS listeners (`tls.http3`), asked by a real client: aioquic, through
//! `tests/fixtures/h3_client.py`. Static files with ranges and conditionals, the reverse
//! proxy with an upload, auth and IP rules, 100 streams on one connection, the access log,
//! and `Alt-Svc` on the TCP side.
use crate::common;
use common::pki::Ca;
use common::*;
use std::io::Write;
use std::path::Path;

const APR1: &str = "$apr1$abcdefgh$M2T3erDstkD7SsE2QQnfH0"; // "s3cret"

struct H3 {
    ca_file: String,
    dir: tempfile::TempDir,
}

impl H3 {
    fn new() -> H3 {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new("gatehouse http3 test CA");
        let leaf = ca.leaf(&["localhost"], "L");
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p.display().to_string()
        };
        let ca_file = write("ca.pem", &ca.pem);
        write("l.crt", &leaf.cert_pem);
        write("l.key", &leaf.key_pem);
        H3 { ca_file, dir }
    }

    /// `[tls]` with HTTP/3 on one ephemeral port.
    fn tls(&self) -> String {
        self.tls_on("127.0.0.1:0", "http3 = true\n")
    }

    /// `[tls]` on `listen`, with `http3` lines as given.
    fn tls_on(&self, listen: &str, http3: &str) -> String {
        let d = self.dir.path();
        format!(
            "[timeouts]\ndrain = \"200ms\"\n[tls]\nlisten = {listen:?}\n{http3}\
             [[tls.certs]]\ncert = {:?}\nkey = {:?}\n",
            d.join("l.crt").display().to_string(),
            d.join("l.key").display().to_string()
        )
    }
}

#[derive(Debug)]
struct Got {
    status: u16,
    headers: Vec<(String, String)>,
    len: u64,
    sha256: String,
    body: String,
    error: Option<String>,
}

impl Got {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One request for [`ask`]: method, path, headers, and a file to send as the body.
struct Req<'a>(&'a str, &'a str, &'a [(&'a str, &'a str)], Option<&'a Path>);

fn get(path: &str) -> Req<'_> {
    Req("GET", path, &[], None)
}

/// Runs `tests/fixtures/<script>` with `args` and `job` on its stdin; its stdout, once it
/// has succeeded.
fn python_job(script: &str, args: &[&str], job: &serde_json::Value) -> Vec<u8> {
    let mut child = std::process::Command::new("python3")
        .arg(fixtures().join(script))
        .args(args)
        // h3_early.py imports h3_client.py from beside it.
        .current_dir(fixtures())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(job.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Sends `reqs` at once, each on its own stream of one QUIC connection to `port`.
fn ask(h: &H3, port: u16, reqs: &[Req]) -> Vec<Got> {
    ask_with(h, port, reqs, serde_json::json!({}))
}

/// [`ask`], with more of the job for `h3_client.py` in `extra`.
fn ask_with(h: &H3, port: u16, reqs: &[Req], extra: serde_json::Value) -> Vec<Got> {
    let requests: Vec<serde_json::Value> = reqs
        .iter()
        .map(|Req(m, p, hs, file)| {
            serde_json::json!({
                "method": m,
                "path": p,
                "headers": hs.iter().map(|(k, v)| [k, v]).collect::<Vec<_>>(),
                "body_file": file.map(|f| f.display().to_string()),
            })
        })
        .collect();
    ask_json(h, port, requests, extra)
}

/// [`ask_with`], each request as `h3_client.py` reads it.
fn ask_json(
    h: &H3,
    port: u16,
    requests: Vec<serde_json::Value>,
    extra: serde_json::Value,
) -> Vec<Got> {
    let asked = requests.len();
    let mut job = serde_json::json!({
        "port": port,
        "ca": h.ca_file,
        "server_name": "localhost",
        "authority": format!("localhost:{port}"),
        "requests": requests,
    });
    if let (Some(job), Some(extra)) = (job.as_object_mut(), extra.as_object()) {
        job.extend(extra.clone());
    }
    let text = String::from_utf8(python_job("h3_client.py", &["60"], &job)).unwrap();
    let got: Vec<Got> = text
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            Got {
                status: v["status"].as_u64().unwrap_or(0) as u16,
                headers: v["headers"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|p| {
                                (
                                    p[0].as_str().unwrap().to_string(),
                                    p[1].as_str().unwrap().to_string(),
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
                len: v["len"].as_u64().unwrap_or(0),
                sha256: v["sha256"].as_str().unwrap_or("").to_string(),
                body: v["body"].as_str().unwrap_or("").to_string(),
                error: v["error"].as_str().map(str::to_string),
            }
        })
        .collect();
    assert_eq!(got.len(), asked, "{text}");
    got
}

fn sha256_of(p: &Path) -> String {
    let out = std::process::Command::new("sha256sum")
        .arg(p)
        .output()
        .expect("sha256sum");
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

/// A file of `len` bytes that no compression shortens much.
fn noise(p: &Path, len: usize) {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let bytes: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(p, bytes).unwrap();
}

fn port(s: &TestServer) -> u16 {
    s.handle().https_addrs()[0].port()
}

#[test]
fn static_files_ranges_conditionals_and_a_large_file() {
    let h = H3::new();
    let log = h.dir.path().join("access.log");
    let s = TestServer::site(&format!(
        "{}[[routes]]\n[routes.static]\n[routes.access_log]\npath = {:?}\n\
         template = \"$server_protocol $request_method $request_uri $status $body_bytes_sent\"\n",
        h.tls(),
        log.display().to_string()
    ));
    let big = s.root.join("big.bin");
    noise(&big, 10 * 1024 * 1024);
    let p = port(&s);
    let first = ask(&h, p, &[get("/hello.txt")]);
    let etag = first[0].header("etag").expect("etag").to_string();
    let got = ask(
        &h,
        p,
        &[
            get("/hello.txt"),
            Req("HEAD", "/hello.txt", &[], None),
            Req("GET", "/digits.txt", &[("range", "bytes=10-19")], None),
            Req("GET", "/hello.txt", &[("if-none-match", &etag)], None),
            get("/big.bin"),
            get("/missing"),
        ],
    );
    let want = std::fs::read_to_string(s.root.join("hello.txt")).unwrap();
    assert_eq!((got[0].status, got[0].body.as_str()), (200, want.as_str()));
    assert_eq!(got[1].status, 200);
    assert_eq!(got[1].len, 0, "HEAD has no body");
    assert_eq!(
        got[1].header("content-length"),
        Some(want.len().to_string().as_str())
    );
    let digits = std::fs::read_to_string(s.root.join("digits.txt")).unwrap();
    assert_eq!(got[2].status, 206);
    assert_eq!(got[2].body, digits[10..20]);
    assert_eq!(
        got[2].header("content-range"),
        Some(format!("bytes 10-19/{}", digits.len()).as_str())
    );
    assert_eq!((got[3].status, got[3].len), (304, 0));
    assert_eq!(got[4].status, 200);
    assert_eq!(got[4].len, 10 * 1024 * 1024);
    assert_eq!(got[4].sha256, sha256_of(&big));
    assert_eq!(got[5].status, 404);
    // HTTP/3 responses don't advertise HTTP/3 again; none carries a connection field.
    for g in &got {
        assert_eq!(g.header("alt-svc"), None);
        assert_eq!(g.header("connection"), None);
    }
    drop(s);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("HTTP/3.0 GET /hello.txt 200 13\n"), "{text}");
    assert!(
        text.contains("HTTP/3.0 GET /big.bin 200 10485760\n"),
        "{text}"
    );
    assert!(text.contains("HTTP/3.0 GET /digits.txt 206 10\n"), "{text}");
}

/// The `Alt-Svc` of a TCP response from `addr`.
fn alt_svc(h: &H3, addr: std::net::SocketAddr) -> Option<String> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let ca = std::fs::read_to_string(&h.ca_file).unwrap();
        let cfg = common::tls::client_config(&ca, &[b"http/1.1"], None);
        let stream = common::tls::connect(addr, "localhost", &cfg).await.unwrap();
        let mut c = common::tls::H1::new(stream).await;
        let got = c.get("localhost", "/hello.txt").await.unwrap();
        assert_eq!(got.status, 200);
        got.headers
            .get("alt-svc")
            .map(|v| v.to_str().unwrap().to_string())
    })
}

#[test]
fn on_by_default_and_advertised_on_tcp() {
    let h = H3::new();
    // No `http3` line: the default.
    let s = TestServer::site(&h.tls_on("127.0.0.1:0", ""));
    let addr = s.handle().https_addrs()[0];
    assert_eq!(
        alt_svc(&h, addr),
        Some(format!("h3=\":{}\"; ma=86400", addr.port()))
    );
    // And that port answers HTTP/3.
    assert_eq!(ask(&h, addr.port(), &[get("/hello.txt")])[0].status, 200);
}

/// A TCP port free on 127.0.0.1 whose UDP twin `held` holds.
fn udp_port_taken() -> (u16, std::net::UdpSocket) {
    for _ in 0..50 {
        let held = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = held.local_addr().unwrap().port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return (port, held);
        }
    }
    panic!("no port free on TCP with its UDP twin held");
}

#[test]
fn a_taken_udp_port_is_skipped_by_default_and_an_error_when_asked_for() {
    let h = H3::new();
    let (port, _held) = udp_port_taken();
    let listen = format!("127.0.0.1:{port}");
    // By default: HTTPS is served there, without advertising HTTP/3.
    let s = TestServer::site(&h.tls_on(&listen, ""));
    assert_eq!(s.handle().https_addrs()[0].port(), port);
    assert_eq!(alt_svc(&h, s.handle().https_addrs()[0]), None);
    drop(s);
    // Asked for: the start fails, naming the UDP side and its address.
    let root = tempfile::tempdir().unwrap();
    let config = load_config(format!(
        "root = {:?}\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n{}",
        root.path().display().to_string(),
        h.tls_on(&listen, "http3 = true\n")
    ))
    .unwrap();
    let router = gatehouse::router::build(&config).unwrap();
    let e = match gatehouse::start(&config, router) {
        Ok(_) => panic!("started without its UDP port"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("http3 (udp)") && e.contains(&listen), "{e}");
}

#[test]
fn off_by_default_behind_the_proxy_protocol() {
    let h = H3::new();
    let pp = "proxy_protocol = true\nproxy_protocol_from = [\"127.0.0.1\"]\n";
    let s = TestServer::site(&format!("{pp}{}", h.tls_on("127.0.0.1:0", "")));
    let port = s.handle().https_addrs()[0].port();
    // Nothing holds the UDP twin.
    assert!(std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok());
    drop(s);
    // Early data needs HTTP/3, which is off here unless asked for.
    let e = load_config(format!(
        "{pp}{}",
        h.tls_on("127.0.0.1:0", "http3_early_data = true\n")
    ))
    .unwrap_err();
    assert!(
        e.contains("tls.http3_early_data") && e.contains("proxy_protocol"),
        "{e}"
    );
    // Asked for, it is served.
    let s = TestServer::site(&format!(
        "{pp}{}",
        h.tls_on("127.0.0.1:0", "http3 = true\n")
    ));
    let port = s.handle().https_addrs()[0].port();
    assert_eq!(ask(&h, port, &[get("/hello.txt")])[0].status, 200);
}

#[test]
fn a_hundred_streams_on_one_connection() {
    let h = H3::new();
    let s = TestServer::site(&h.tls());
    let paths: Vec<String> = (0..100)
        .map(|i| ["/hello.txt", "/app.js", "/style.css", "/data.json"][i % 4].to_string())
        .collect();
    let reqs: Vec<Req> = paths.iter().map(|p| get(p)).collect();
    let got = ask(&h, port(&s), &reqs);
    for (g, p) in got.iter().zip(&paths) {
        let want = std::fs::read_to_string(s.root.join(&p[1..])).unwrap();
        assert_eq!((g.status, g.body.as_str()), (200, want.as_str()), "{p}");
    }
}

/// A client that opens more streams than `http3_max_streams` allows has its connection
/// closed with STREAM_LIMIT_ERROR (RFC 9000 §4.6), and the server goes on serving others.
#[test]
fn streams_past_the_limit_close_the_connection() {
    let h = H3::new();
    let s = TestServer::site(
        &h.tls()
            .replace("http3 = true\n", "http3 = true\nhttp3_max_streams = 10\n"),
    );
    let p = port(&s);
    let reqs: Vec<Req> = (0..40).map(|_| get("/hello.txt")).collect();
    let got = ask_with(
        &h,
        p,
        &reqs,
        serde_json::json!({"exceed_stream_limit": true}),
    );
    let closed = got
        .iter()
        .filter(|g| {
            g.error
                .as_deref()
                .is_some_and(|e| e.starts_with("connection closed 4 "))
        })
        .count();
    // Past stream 10, nothing can have been answered.
    assert!(
        closed >= 30,
        "{:?}",
        got.iter().map(|g| (g.status, &g.error)).collect::<Vec<_>>()
    );
    assert_eq!(ask(&h, p, &[get("/hello.txt")])[0].status, 200);
}

/// A backend that answers with what it received: the body, and how it was framed.
fn echo_backend() -> std::net::SocketAddr {
    use axum::http::HeaderMap;
    let app =
        axum::Router::new().fallback(|headers: HeaderMap, body: axum::body::Bytes| async move {
            let seen = |n: &str| {
                headers
                    .get(n)
                    .map_or("-".to_string(), |v| v.to_str().unwrap_or("?").to_string())
            };
            (
                [
                    ("x-seen-te", seen("transfer-encoding")),
                    ("x-seen-cl", seen("content-length")),
                    ("x-seen-via", seen("via")),
                    ("x-seen-xff", seen("x-forwarded-for")),
                ],
                body,
            )
        });
    serve_axum(
        loopback(),
        app.layer(axum::extract::DefaultBodyLimit::disable()),
    )
}

#[test]
fn the_proxy_forwards_uploads_and_bodiless_requests_as_they_came() {
    let h = H3::new();
    let up = echo_backend();
    let s = TestServer::site(&format!(
        "{}[[routes]]\npath = \"/api\"\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n",
        h.tls()
    ));
    let upload = h.dir.path().join("upload.bin");
    noise(&upload, 10 * 1024 * 1024);
    let small = h.dir.path().join("small.txt");
    std::fs::write(&small, "hello").unwrap();
    let got = ask(
        &h,
        port(&s),
        &[
            get("/api/x"),
            Req("POST", "/api/up", &[], Some(&upload)),
            Req(
                "POST",
                "/api/small",
                &[("content-length", "5")],
                Some(&small),
            ),
            Req("DELETE", "/api/item", &[], None),
        ],
    );
    // A GET ends with its HEADERS: forwarded without a body or its framing.
    assert_eq!(got[0].status, 200);
    assert_eq!(got[0].header("x-seen-te"), Some("-"));
    assert_eq!(got[0].header("x-seen-cl"), Some("-"));
    assert_eq!(got[0].header("x-seen-via"), Some("3 gatehouse"));
    assert_eq!(got[0].header("x-seen-xff"), Some("127.0.0.1"));
    assert_eq!(got[1].status, 200);
    assert_eq!(got[1].len, 10 * 1024 * 1024);
    assert_eq!(got[1].sha256, sha256_of(&upload));
    assert_eq!(got[2].status, 200);
    assert_eq!(got[2].body, "hello");
    assert_eq!(got[2].header("x-seen-cl"), Some("5"));
    // So does any request ended with its HEADERS, as END_STREAM does over HTTP/2.
    assert_eq!(got[3].status, 200);
    assert_eq!(got[3].header("x-seen-te"), Some("-"));
}

/// Field strings as a real encoder (aioquic's ls-qpack) Huffman codes them, through
/// gatehouse's QPACK decoder to an upstream that answers with what it got: 200 random
/// paths and values, over all of the code's lengths (5 to 30 bits).
/// A number below `n` at each call (xorshift), from a seed it prints for a rerun.
fn random() -> impl FnMut(u64) -> u64 {
    let mut seed: u64 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("seed {seed}");
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    }
}

#[test]
fn qpack_strings_arrive_as_the_client_encoded_them() {
    let h = H3::new();
    let app = axum::Router::new().fallback(|req: axum::extract::Request| async move {
        let mut seen = req.uri().to_string().into_bytes();
        seen.push(b'\n');
        if let Some(v) = req.headers().get("x-probe") {
            seen.extend_from_slice(v.as_bytes());
        }
        seen
    });
    let up = serve_axum(loopback(), app);
    let s = TestServer::site(&format!(
        "{}[[routes]]\npath = \"/api\"\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n",
        h.tls()
    ));
    let mut rnd = random();
    // Visible ASCII and, as UTF-8, U+0080 to U+00FF: bytes whose codes are the longest.
    let mut text = |len: u64, from: &[char]| -> String {
        (0..len)
            .map(|_| from[rnd(from.len() as u64) as usize])
            .collect()
    };
    let value_chars: Vec<char> = ('!'..='~').chain('\u{80}'..='\u{ff}').collect();
    let query_chars: Vec<char> = ('a'..='z')
        .chain('A'..='Z')
        .chain('0'..='9')
        .chain("-._~!$&'()*+,;=:@/?".chars())
        .collect();
    for _ in 0..2 {
        let cases: Vec<(String, String)> = (0..100)
            .map(|i| {
                let path = format!("/api/{i}?{}", text(i % 70, &query_chars));
                let value = format!(
                    "{} {}",
                    text(1 + i % 40, &value_chars),
                    text(1 + i % 9, &value_chars)
                );
                (path, value)
            })
            .collect();
        let headers: Vec<[(&str, &str); 1]> = cases
            .iter()
            .map(|(_, v)| [("x-probe", v.as_str())])
            .collect();
        let reqs: Vec<Req> = cases
            .iter()
            .zip(&headers)
            .map(|((p, _), hs)| Req("GET", p, hs, None))
            .collect();
        let got = ask(&h, port(&s), &reqs);
        for (g, (path, value)) in got.iter().zip(&cases) {
            let mut want = path.clone().into_bytes();
            want.push(b'\n');
            want.extend_from_slice(value.as_bytes());
            let body: Vec<u8> = g.body.chars().map(|c| c as u8).collect();
            assert_eq!(g.status, 200, "{path} {value:?} {:?}", g.error);
            assert_eq!(body, want, "{path} {value:?}");
        }
    }
}

/// The response side of the test above: fields an upstream sends, of names in QPACK's
/// static table (RFC 9204 Appendix A) with its values and others, repeated names, empty
/// values and names of no table, reach an aioquic client as they were sent.
#[test]
fn qpack_response_fields_arrive_as_the_upstream_sent_them() {
    let mut rnd = random();
    // Name and value pairs in the static table, names in it, and names in none.
    let pairs = [
        ("cache-control", "no-cache"),
        ("access-control-allow-origin", "*"),
        ("x-frame-options", "deny"),
        ("x-content-type-options", "nosniff"),
        ("strict-transport-security", "max-age=31536000"),
        ("etag", ""),
        ("set-cookie", ""),
    ];
    let names = [
        "etag",
        "link",
        "location",
        "set-cookie",
        "cache-control",
        "content-disposition",
        "last-modified",
        "access-control-allow-origin",
        "x-frame-options",
    ];
    let value_chars: Vec<char> = ('!'..='~').chain(['é', '€', '\u{ff}']).collect();
    let mut fields: Vec<Vec<(String, String)>> = Vec::new();
    for _ in 0..60 {
        let mut these = Vec::new();
        for _ in 0..rnd(12) {
            let mut value: String = (0..rnd(60))
                .map(|_| value_chars[rnd(value_chars.len() as u64) as usize])
                .collect();
            let name = match rnd(3) {
                0 => {
                    let (n, v) = pairs[rnd(pairs.len() as u64) as usize];
                    value = v.to_string();
                    n.to_string()
                }
                1 => names[rnd(names.len() as u64) as usize].to_string(),
                _ => format!(
                    "x-{}",
                    (0..1 + rnd(20))
                        .map(|_| (b'a' + rnd(26) as u8) as char)
                        .collect::<String>()
                ),
            };
            these.push((name, value));
        }
        fields.push(these);
    }
    let sent = std::sync::Arc::new(fields.clone());
    let app = axum::Router::new().route(
        "/api/{i}",
        axum::routing::get(move |axum::extract::Path(i): axum::extract::Path<usize>| {
            let sent = sent.clone();
            async move {
                let mut res = axum::response::Response::new(axum::body::Body::empty());
                for (n, v) in &sent[i] {
                    res.headers_mut().append(
                        http::HeaderName::from_bytes(n.as_bytes()).unwrap(),
                        http::HeaderValue::from_bytes(v.as_bytes()).unwrap(),
                    );
                }
                res
            }
        }),
    );
    let up = serve_axum(loopback(), app);
    let h = H3::new();
    let s = TestServer::site(&format!(
        "{}[[routes]]\npath = \"/api\"\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n",
        h.tls()
    ));
    let paths: Vec<String> = (0..fields.len()).map(|i| format!("/api/{i}")).collect();
    let reqs: Vec<Req> = paths.iter().map(|p| get(p)).collect();
    let got = ask(&h, port(&s), &reqs);
    let ours = |n: &str| {
        n.starts_with("x-") && n != "x-request-id"
            || names.contains(&n)
            || pairs.iter().any(|(p, _)| *p == n)
    };
    for ((g, want), path) in got.iter().zip(&fields).zip(&paths) {
        assert_eq!(g.status, 200, "{path} {:?}", g.error);
        let arrived: Vec<(String, String)> =
            g.headers.iter().filter(|(n, _)| ours(n)).cloned().collect();
        // Grouped by name, as any HTTP library holds them: each name's values in order.
        let mut map = http::HeaderMap::new();
        for (n, v) in want {
            map.append(
                http::HeaderName::from_bytes(n.as_bytes()).unwrap(),
                http::HeaderValue::from_bytes(v.as_bytes()).unwrap(),
            );
        }
        let want: Vec<(String, String)> = map
            .iter()
            .map(|(n, v)| {
                (
                    n.to_string(),
                    String::from_utf8(v.as_bytes().to_vec()).unwrap(),
                )
            })
            .collect();
        assert_eq!(arrived, want, "{path}");
    }
}

#[test]
fn a_body_that_disagrees_with_its_length_never_reaches_the_upstream() {
    let h = H3::new();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = hits.clone();
    let app = axum::Router::new().fallback(move |body: axum::body::Bytes| {
        let seen = seen.clone();
        async move {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            body
        }
    });
    let up = serve_axum(loopback(), app);
    let s = TestServer::site(&format!(
        "{}[[routes]]\npath = \"/api\"\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n",
        h.tls()
    ));
    let body = h.dir.path().join("ten.txt");
    std::fs::write(&body, "0123456789").unwrap();
    let got = ask(
        &h,
        port(&s),
        &[
            Req("POST", "/api/long", &[("content-length", "5")], Some(&body)),
            Req(
                "POST",
                "/api/short",
                &[("content-length", "20")],
                Some(&body),
            ),
            Req(
                "POST",
                "/api/two",
                &[("content-length", "10"), ("content-length", "11")],
                Some(&body),
            ),
        ],
    );
    for g in &got {
        assert!(
            g.error.is_some() || g.status >= 400,
            "a mismatched body was answered: {g:?}"
        );
    }
    assert_eq!(got[2].status, 400);
    // A whole request that reached the backend would have been counted.
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[test]
fn auth_and_ip_rules_hold_over_http3() {
    let h = H3::new();
    let users = h.dir.path().join("users");
    std::fs::write(&users, format!("ann:{APR1}\n")).unwrap();
    // The catch-all route serves `staff/x.txt` too: a spelling that reached it unchecked
    // would get the file.
    let staff = h.dir.path().join("site/staff");
    std::fs::create_dir_all(&staff).unwrap();
    std::fs::write(staff.join("x.txt"), "staff only").unwrap();
    copy_dir(&fixtures().join("site"), &h.dir.path().join("site"));
    let s = TestServer::start(
        &h.dir.path().join("site"),
        &format!(
            "{}[[routes]]\npath = \"/closed\"\n[routes.static]\n[routes.access]\ndeny = [\"127.0.0.0/8\"]\n\
             [[routes]]\npath = \"/staff\"\n[routes.static]\nroot = {:?}\n[routes.auth]\nhtpasswd = {:?}\n\
             [[routes]]\n[routes.static]\n",
            h.tls(),
            staff.display().to_string(),
            users.display().to_string()
        ),
    );
    use base64::Engine;
    let good = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("ann:s3cret")
    );
    let got = ask(
        &h,
        port(&s),
        &[
            get("/closed/hello.txt"),
            get("/staff/x.txt"),
            get("/Staff/../staff/x.txt"),
            get("/%73taff/x.txt"),
            Req("GET", "/staff/x.txt", &[("authorization", &good)], None),
        ],
    );
    assert_eq!(got[0].status, 403);
    assert_eq!(got[1].status, 401);
    assert!(got[1].header("www-authenticate").is_some());
    for g in &got[2..4] {
        assert_ne!(g.body, "staff only", "{g:?}");
    }
    assert_eq!((got[4].status, got[4].body.as_str()), (200, "staff only"));
}

#[test]
fn bad_http3_settings_name_their_key() {
    let e = load_config(
        "[tls]\nhttp3 = true\nhttp3_max_streams = 0\n[[tls.certs]]\ncert = \"a\"\nkey = \"b\"\n"
            .into(),
    )
    .unwrap_err();
    assert!(e.contains("tls.http3_max_streams"), "{e}");
    let certs = "[[tls.certs]]\ncert = \"a\"\nkey = \"b\"\n";
    let e = load_config(format!(
        "[tls]\nhttp3 = false\nhttp3_early_data = true\n{certs}"
    ))
    .unwrap_err();
    assert!(
        e.contains("tls.http3_early_data") && e.contains("tls.http3 = false"),
        "{e}"
    );
    let e = load_config(format!(
        "[tls]\nhttp3 = true\nhttp3_early_data = true\nclient_ca = \"ca.pem\"\n{certs}"
    ))
    .unwrap_err();
    assert!(
        e.contains("tls.http3_early_data") && e.contains("mTLS"),
        "{e}"
    );
}

/// What an upstream saw: each request's method, path and `Early-Data` field.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, String, String)>>>;

fn recording_backend() -> (std::net::SocketAddr, Seen) {
    let seen = Seen::default();
    let log = seen.clone();
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
        let log = log.clone();
        async move {
            let early = req
                .headers()
                .get("early-data")
                .map_or("-".into(), |v| v.to_str().unwrap_or("?").to_string());
            let mut log = log.lock().unwrap();
            log.push((
                req.method().to_string(),
                req.uri().path().to_string(),
                early,
            ));
            "ok"
        }
    });
    (serve_axum(loopback(), app), seen)
}

/// The outcome of `fixtures/h3_early.py`: the requests' results, and each one's seconds
/// from the second connection's start to its response.
struct Early {
    got: Vec<(u16, f64)>,
    accepted: bool,
    /// One more request on the same connection, once its handshake was done.
    later: u16,
}

/// Resumes a session with 0-RTT (and with the server's NEW_TOKEN token if `token`),
/// sends `reqs` in early data while the client's Finished is held for `hold` seconds, then
/// replays that connection's first flight from another port.
/// `on`: whether the server has `http3_early_data`, which the ticket and the tokens show.
fn early(h: &H3, port: u16, on: bool, token: bool, hold: f64, reqs: &[(&str, &str)]) -> Early {
    // A replay reaches a new connection only once the first has drained (three PTOs,
    // which the held Finished lengthens): replayed each second for 8 s, when it matters.
    let replays = if on && token { 8 } else { 0 };
    let job = serde_json::json!({
        "port": port,
        "ca": h.ca_file,
        "authority": format!("localhost:{port}"),
        "warm": "/api/warm",
        "token": token,
        "hold": hold,
        "replays": replays,
        "requests": reqs.iter().map(|(m, p)| serde_json::json!({"method": m, "path": p})).collect::<Vec<_>>(),
    });
    let v: serde_json::Value =
        serde_json::from_slice(&python_job("h3_early.py", &[], &job)).unwrap();
    assert_eq!(v["ticket_early_data"], on, "0-RTT in the ticket: {v}");
    assert_eq!(v["got_token"], on, "NEW_TOKEN tokens: {v}");
    assert!(
        replays == 0 || v["replayed"].as_u64().unwrap() >= replays,
        "{v}"
    );
    Early {
        got: v["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["status"].as_u64().unwrap_or(0) as u16,
                    r["after"].as_f64().unwrap(),
                )
            })
            .collect(),
        accepted: v["early_data_accepted"].as_bool().unwrap(),
        later: v["later"].as_u64().unwrap_or(0) as u16,
    }
}

/// `[tls]` with `http3_early_data = on`, and `/api` proxied to `up`.
fn early_config(h: &H3, on: bool, up: std::net::SocketAddr) -> String {
    format!(
        "{}[[routes]]\npath = \"/api\"\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n",
        h.tls().replace(
            "http3 = true\n",
            &format!("http3 = true\nhttp3_early_data = {on}\n")
        )
    )
}

/// With `http3_early_data`, a client with a ticket and a token has its GET served before
/// its handshake is done, marked `Early-Data: 1` upstream (RFC 8470 §5.1); its POST gets
/// 425 and never reaches the upstream. The connection goes on serving once its handshake is
/// done. The same first flight replayed from another port is not served again: its ticket
/// (RFC 8446 §8.1) and its token were each good once. Either refuses it alone: the test
/// failed only with a reusable ticket and a token log that accepts reuse, both at once.
#[test]
fn early_data_serves_safe_methods_once_and_refuses_the_rest() {
    let h = H3::new();
    let (up, seen) = recording_backend();
    // The binary, for its metrics recorder.
    let p = free_port();
    let conf = early_config(&h, true, up).replace("127.0.0.1:0", &format!("127.0.0.1:{p}"));
    let g = spawn_gatehouse(&conf);
    let hold = 0.4;
    let e = early(
        &h,
        p,
        true,
        true,
        hold,
        &[("GET", "/api/e"), ("POST", "/api/p")],
    );
    assert!(e.accepted, "0-RTT not accepted");
    assert_eq!(e.got[0].0, 200);
    assert!(
        e.got[0].1 < hold,
        "GET waited for the handshake: {:?}",
        e.got
    );
    assert_eq!(e.got[1].0, 425);
    assert_eq!(e.later, 200, "the connection did not outlive its handshake");
    let seen = seen.lock().unwrap().clone();
    let to = |p: &str| {
        seen.iter()
            .filter(|r| r.1 == p)
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        to("/api/e"),
        [("GET".into(), "/api/e".into(), "1".into())],
        "{seen:?}"
    );
    assert!(to("/api/p").is_empty(), "{seen:?}");
    let m = send(g.admin, "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n").text();
    for (outcome, n) in [("served", 1), ("too_early", 1)] {
        let line = format!("gatehouse_quic_early_requests_total{{outcome=\"{outcome}\"}} {n}");
        assert!(m.contains(&line), "no {line:?} in\n{m}");
    }
    // The warm-up, the early GET, the refused POST and the later GET: by their protocol.
    let line = "gatehouse_http_requests_by_protocol_total{protocol=\"HTTP/3\"} 4";
    assert!(m.contains(line), "no {line:?} in\n{m}");
}

/// 0-RTT data from an address no token has validated waits for the handshake: a forged
/// source address must not have a request served (nor meet an IP rule) before the client
/// has proved it. So does all of it when `http3_early_data` is off (the default).
#[test]
fn early_data_waits_for_the_handshake_without_a_token_or_when_off() {
    let h = H3::new();
    let hold = 0.6;
    for (on, token) in [(true, false), (false, true)] {
        let (up, seen) = recording_backend();
        let s = TestServer::site(&early_config(&h, on, up));
        let e = early(
            &h,
            port(&s),
            on,
            token,
            hold,
            &[("GET", "/api/e"), ("POST", "/api/p")],
        );
        assert_eq!(e.accepted, on, "on {on}");
        assert_eq!(e.later, 200, "on {on}");
        for (status, after) in &e.got {
            assert_eq!(*status, 200, "on {on}: {:?}", e.got);
            assert!(*after >= hold * 0.9, "on {on}: served early: {:?}", e.got);
        }
        let seen = seen.lock().unwrap().clone();
        let api: Vec<_> = seen.iter().filter(|r| r.1 != "/api/warm").collect();
        assert_eq!(api.len(), 2, "on {on}: {seen:?}");
        assert!(api.iter().all(|r| r.2 == "-"), "on {on}: {seen:?}");
    }
}

/// With 0-RTT on, a client that answered a Retry (its address validated, so its
/// connection is read before the handshake ends) keeps its connection after it, and every
/// request is served. The handshake's end once read as a failure and closed it.
#[test]
fn early_data_on_keeps_connections_that_answered_a_retry() {
    let h = H3::new();
    let s = TestServer::site(&h.tls().replace(
        "http3 = true\n",
        "http3 = true\nhttp3_early_data = true\nhttp3_retry_above = 0\n",
    ));
    let reqs: Vec<Req> = (0..20).map(|_| get("/hello.txt")).collect();
    for round in 0..3 {
        let got = ask(&h, port(&s), &reqs);
        let ok = got.iter().filter(|g| g.status == 200).count();
        assert_eq!(
            ok,
            20,
            "round {round}: {:?}",
            got.iter().map(|g| (g.status, &g.error)).collect::<Vec<_>>()
        );
    }
    // A connection validated by a Retry may use 0-RTT, but a request sent after its
    // handshake (this client has no ticket) is not early data: an unsafe method gets the
    // route's own answer (405 for a file), never 425 (RFC 8470 §5.2). The client's
    // Finished and its first requests often arrive in one batch of datagrams.
    for round in 0..10 {
        let reqs = [
            Req("DELETE", "/hello.txt", &[], None),
            Req("POST", "/hello.txt", &[], None),
        ];
        let statuses: Vec<u16> = ask(&h, port(&s), &reqs).iter().map(|g| g.status).collect();
        assert_eq!(statuses, [405, 405], "round {round}");
    }
}

/// RFC 9114 §4.2.1: a client's `cookie` fields are joined with "; " into one before the
/// request goes to an HTTP/1.1 upstream.
#[test]
fn split_cookies_reach_an_http1_upstream_as_one_field() {
    let h = H3::new();
    let app = axum::Router::new().fallback(|req: axum::extract::Request| async move {
        let lines: Vec<String> = req
            .headers()
            .get_all("cookie")
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        lines.join("\n")
    });
    let up = serve_axum(loopback(), app);
    let s = TestServer::site(&format!(
        "{}[[routes]]\npath = \"/api\"\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n",
        h.tls()
    ));
    let split: &[(&str, &str)] = &[
        ("cookie", "a=1"),
        ("cookie", "b=2; c=3"),
        ("cookie", ""),
        ("cookie", "d=4"),
    ];
    let one: &[(&str, &str)] = &[("cookie", "a=1")];
    let got = ask(
        &h,
        port(&s),
        &[
            Req("GET", "/api/x", split, None),
            Req("POST", "/api/y", split, None),
            Req("GET", "/api/z", one, None),
        ],
    );
    assert_eq!(
        (got[0].status, got[0].body.as_str()),
        (200, "a=1; b=2; c=3; d=4")
    );
    assert_eq!(
        (got[1].status, got[1].body.as_str()),
        (200, "a=1; b=2; c=3; d=4")
    );
    assert_eq!((got[2].status, got[2].body.as_str()), (200, "a=1"));
}

/// RFC 9114 §4.3.1 and §4.4: pseudo-header fields repeated, after a regular field, of a
/// response, or missing, are malformed: the stream is refused with H3_MESSAGE_ERROR, as
/// h2 refuses them over HTTP/2. `:protocol` (extended CONNECT, RFC 9220), never enabled
/// by gatehouse's SETTINGS, gets 400 from the listener's checks.
#[test]
fn malformed_pseudo_header_fields_are_refused() {
    let h = H3::new();
    let s = TestServer::site(&h.tls());
    let p = port(&s);
    let a = format!("localhost:{p}");
    let raw = |fields: &[(&str, &str)]| {
        let fields: Vec<[&str; 2]> = fields.iter().map(|(n, v)| [*n, *v]).collect();
        serde_json::json!({"method": "GET", "path": "/", "raw_headers": fields})
    };
    let base = [
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", a.as_str()),
        (":path", "/hello.txt"),
    ];
    let with = |extra: &[(&str, &str)], at: usize| {
        let mut f = base.to_vec();
        for (i, e) in extra.iter().enumerate() {
            f.insert(at + i, *e);
        }
        raw(&f)
    };
    let cases = vec![
        ("as sent", raw(&base), 200),
        ("two :path", with(&[(":path", "/secret")], 4), 0),
        ("two :method", with(&[(":method", "DELETE")], 1), 0),
        (
            "pseudo after a field",
            raw(&[base[0], base[1], base[2], ("x-a", "1"), base[3]]),
            0,
        ),
        ("no :scheme", raw(&[base[0], base[2], base[3]]), 0),
        ("no :path", raw(&[base[0], base[1], base[2]]), 0),
        (
            "empty :path",
            raw(&[base[0], base[1], base[2], (":path", "")]),
            0,
        ),
        (":status in a request", with(&[(":status", "200")], 4), 0),
        (
            ":protocol without CONNECT",
            with(&[(":protocol", "websocket")], 4),
            0,
        ),
        (
            "CONNECT",
            raw(&[(":method", "CONNECT"), (":authority", &a)]),
            405,
        ),
        (
            "CONNECT with :path",
            raw(&[(":method", "CONNECT"), (":authority", &a), (":path", "/x")]),
            0,
        ),
        (
            "extended CONNECT",
            raw(&[
                (":method", "CONNECT"),
                (":protocol", "connect-udp"),
                (":scheme", "https"),
                (":authority", &a),
                (":path", "/hello.txt"),
            ]),
            400,
        ),
    ];
    let reqs = cases.iter().map(|(_, r, _)| r.clone()).collect();
    let got = ask_json(&h, p, reqs, serde_json::json!({}));
    for ((what, _, want), g) in cases.iter().zip(&got) {
        assert_eq!(g.status, *want, "{what}: {g:?}");
        if *want == 0 {
            // H3_MESSAGE_ERROR, 0x10e.
            assert_eq!(g.error.as_deref(), Some("reset 270"), "{what}");
        }
    }
}

/// A GET whose stream stays open after its HEADERS is answered 408 once `header_read` has
/// passed, counted under no route as any refused request is, not reset unanswered.
#[test]
fn a_get_whose_stream_stays_open_gets_408() {
    let h = H3::new();
    let tls = h.tls().replace(
        "drain = \"200ms\"\n",
        "drain = \"200ms\"\nheader_read = \"1s\"\n",
    );
    let p = free_port();
    let tls = tls.replace("127.0.0.1:0", &format!("127.0.0.1:{p}"));
    let g = spawn_gatehouse_in(&fixtures().join("site"), &tls);
    let t0 = std::time::Instant::now();
    let open = serde_json::json!({"method": "GET", "path": "/hello.txt", "keep_open": true});
    let got = ask_json(&h, p, vec![open], serde_json::json!({}));
    assert_eq!(got[0].status, 408, "{:?}", got[0]);
    assert!(
        t0.elapsed() >= std::time::Duration::from_secs(1),
        "{:?}",
        t0.elapsed()
    );
    // Found in review: one DATA frame, then the stream kept open. h3 hands out the
    // buffered DATA with a read from quinn left pending; the route serves the file
    // without reading the body.
    let data = g.dir.path().join("data.bin");
    std::fs::write(&data, b"abc").unwrap();
    let with_data = serde_json::json!({"method": "GET", "path": "/hello.txt",
        "keep_open": true, "body_file": data});
    let got = ask_json(
        &h,
        p,
        vec![with_data.clone(), with_data],
        serde_json::json!({}),
    );
    assert_eq!((got[0].status, got[1].status), (200, 200), "{got:?}");
    // h3-quinn's stop_sending unwrapped the stream a pending read held: a panic per stream.
    let log = std::fs::read_to_string(g.dir.path().join("stderr.log")).unwrap_or_default();
    assert!(!log.contains("panicked"), "{log}");
    let m = send(g.admin, "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n").text();
    let line = "gatehouse_http_requests_total{route=\"(none)\",method=\"GET\",status=\"408\"} 1";
    assert!(m.contains(line), "no {line:?} in\n{m}");
}

/// RFC 9114 §4.2: connection-specific fields make a request malformed: 400. Taken on,
/// `Connection: early-data` would have the proxy strip the `Early-Data` marker. Refused
/// by the listener's checks, each is counted as any refused request is: under no route,
/// and by its protocol.
#[test]
fn connection_specific_request_fields_get_400() {
    let h = H3::new();
    let p = free_port();
    let tls = h.tls().replace("127.0.0.1:0", &format!("127.0.0.1:{p}"));
    let g = spawn_gatehouse_in(&fixtures().join("site"), &tls);
    let got = ask(
        &h,
        p,
        &[
            Req("GET", "/hello.txt", &[("connection", "early-data")], None),
            Req("GET", "/hello.txt", &[("keep-alive", "5")], None),
            Req(
                "GET",
                "/hello.txt",
                &[("transfer-encoding", "chunked")],
                None,
            ),
            Req("GET", "/hello.txt", &[("upgrade", "websocket")], None),
            Req("GET", "/hello.txt", &[("te", "gzip")], None),
            Req("GET", "/hello.txt", &[("te", "trailers")], None),
        ],
    );
    let statuses: Vec<u16> = got.iter().map(|g| g.status).collect();
    assert_eq!(statuses, [400, 400, 400, 400, 400, 200]);
    let m = send(g.admin, "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n").text();
    for line in [
        "gatehouse_http_requests_total{route=\"(none)\",method=\"GET\",status=\"400\"} 5",
        "gatehouse_http_requests_by_protocol_total{protocol=\"HTTP/3\"} 6",
    ] {
        assert!(m.contains(line), "no {line:?} in\n{m}");
    }
}

/// RFC 9114 §4.1.1: a request body the server does not read (a malformed request, a
/// method the route refuses) is stopped with H3_NO_ERROR once the response is decided,
/// and the response is complete.
#[test]
fn an_unread_request_body_is_stopped_with_no_error() {
    let h = H3::new();
    let s = TestServer::site(&h.tls());
    for (args, status) in [(&["malformed"][..], 400), (&[][..], 405)] {
        let p = port(&s).to_string();
        let mut all = vec![p.as_str(), "/hello.txt"];
        all.extend_from_slice(args);
        let out = python_job("h3_stop.py", &all, &serde_json::json!({}));
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["status"].as_u64(), Some(status), "{v}");
        assert_eq!(v["ended"], true, "{v}");
        assert_eq!(v["stop_sending"].as_u64(), Some(0x100), "{v}");
    }
}

/// The SPKI SHA-256 of a PEM certificate, base64, as Chromium's
/// `--ignore-certificate-errors-spki-list` takes it.
fn spki_hash(cert: &Path) -> String {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl x509 -in '{}' -pubkey -noout | openssl pkey -pubin -outform der \
             | openssl dgst -sha256 -binary | base64",
            cert.display()
        ))
        .output()
        .expect("openssl");
    assert!(out.status.success(), "openssl failed");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Headless Chromium, forced onto QUIC for the server's origin, loads a page with a
/// stylesheet and a script: the page and each resource report `h3` as their protocol.
#[test]
fn chromium_loads_a_page_and_its_resources_over_http3() {
    let h = H3::new();
    let s = TestServer::site(&h.tls());
    std::fs::write(
        s.root.join("h3.html"),
        r#"<html><head><link rel="stylesheet" href="/style.css"><script src="/app.js"></script>
</head><body>waiting<script>
window.addEventListener("load", () => {
  const nav = performance.getEntriesByType("navigation")[0];
  const rs = performance.getEntriesByType("resource")
    .map(r => new URL(r.name).pathname + "=" + r.nextHopProtocol).sort();
  document.body.textContent = "page=" + (nav && nav.nextHopProtocol) + "|" + rs.join("|");
});
</script></body></html>"#,
    )
    .unwrap();
    let p = port(&s);
    let extra = [
        "--enable-quic".to_string(),
        format!("--origin-to-force-quic-on=localhost:{p}"),
        // Chromium asks ::1 first, where the test server does not listen.
        "--host-resolver-rules=MAP localhost 127.0.0.1".to_string(),
        format!(
            "--ignore-certificate-errors-spki-list={}",
            spki_hash(&h.dir.path().join("l.crt"))
        ),
    ];
    let (dom, stderr) = chromium_dom(&extra, &format!("https://localhost:{p}/h3.html"));
    assert!(
        dom.contains("page=h3|/app.js=h3|/style.css=h3"),
        "the page said: {dom}\nchromium: {stderr}"
    );
}

/// 900 clients from 900 ports each send a first flight and never answer. Past
/// `http3_retry_above` handshakes in progress, the rest are sent a Retry (no state kept
/// for them), the server's memory stays flat, and a real client still gets through (it
/// answers its Retry). Without the Retries, these 900 handshakes grew the server by 46 MiB.
#[test]
fn a_flood_of_initials_is_answered_with_retries() {
    let h = H3::new();
    let p = free_port();
    let g = spawn_gatehouse(
        &h.tls()
            .replace("127.0.0.1:0", &format!("127.0.0.1:{p}"))
            .replace("http3 = true\n", "http3 = true\nhttp3_retry_above = 8\n"),
    );
    let pid = g.child.id();
    assert_eq!(ask(&h, p, &[get("/hello.txt")])[0].status, 200);
    let before = rss_kib(pid);
    let mut flood = std::process::Command::new("python3")
        .arg(fixtures().join("h3_flood.py"))
        .args([p.to_string(), "900".into(), "3".into()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut peak = before;
    while flood.try_wait().unwrap().is_none() {
        peak = peak.max(rss_kib(pid));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = flood.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "flood: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let (retry, handshake) = (
        v["retry"].as_u64().unwrap(),
        v["handshake"].as_u64().unwrap(),
    );
    assert!(handshake <= 8, "more handshakes than allowed: {v}");
    assert!(retry >= 880, "too few Retries: {v}");
    let grown_mib = peak.saturating_sub(before) / 1024;
    assert!(
        grown_mib < 8,
        "the server grew by {grown_mib} MiB under the flood"
    );
    assert_eq!(ask(&h, p, &[get("/hello.txt")])[0].status, 200);
}

/// A request in flight when the server shuts down is answered in full: the connection gets
/// a GOAWAY and is closed only once its client has the response.
#[test]
fn shutdown_drains_a_request_in_flight() {
    let h = H3::new();
    let app = axum::Router::new().fallback(|| async {
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        vec![b'x'; 256 * 1024]
    });
    let up = serve_axum(loopback(), app);
    let s = TestServer::site(
        &format!(
            "{}[[routes]]\npath = \"/api\"\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n",
            h.tls()
        )
        .replace("drain = \"200ms\"", "drain = \"10s\""),
    );
    let p = port(&s);
    let client = std::thread::spawn(move || {
        let got = ask(&h, p, &[get("/api/slow")]);
        drop(h);
        got
    });
    // Python's start and the handshake take a few hundred ms; the backend answers at 1.5 s.
    std::thread::sleep(std::time::Duration::from_millis(900));
    let clean = s.shutdown();
    let got = client.join().unwrap();
    assert_eq!(
        (got[0].status, got[0].len),
        (200, 256 * 1024),
        "{:?}",
        got[0].error
    );
    assert!(clean, "the drain did not finish in time");
}

/// RFC 9114 §5.2: a GOAWAY names the first stream not processed. Found in review: it
/// named the last one accepted, so a client following the RFC could take the request in
/// flight for unprocessed and send it again elsewhere while it was being answered.
#[test]
fn the_goaway_names_the_first_stream_not_processed() {
    let app = axum::Router::new().fallback(|| async {
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        "slow"
    });
    let up = serve_axum(loopback(), app);
    let h = H3::new();
    let s = TestServer::site(
        &format!(
            "{}[[routes]]\npath = \"/api\"\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n",
            h.tls()
        )
        .replace("drain = \"200ms\"", "drain = \"10s\""),
    );
    let p = port(&s).to_string();
    let client = std::thread::spawn(move || {
        python_job("h3_goaway.py", &[&p, "/api/slow"], &serde_json::json!({}))
    });
    std::thread::sleep(std::time::Duration::from_millis(900));
    let clean = s.shutdown();
    let v: serde_json::Value = serde_json::from_slice(&client.join().unwrap()).unwrap();
    assert_eq!(
        (v["status"].as_u64(), v["length"].as_u64()),
        (Some(200), Some(4)),
        "{v}"
    );
    // Stream 0 was accepted: the next bidirectional stream, 4, is the first not processed.
    assert_eq!(v["goaway"].as_u64(), Some(4), "{v}");
    assert!(clean, "the drain did not finish in time");
}

/// Found in review: h3 kept the client's QPACK encoder and decoder streams and never read
/// them, so every connection could pin a flow-control window of each (1 MiB) for its
/// life. They are read and what they carry dropped: with no dynamic table offered, they
/// hold nothing the server needs (RFC 9204 §4.2, §3.2.3).
#[test]
fn qpack_streams_are_read_not_left_to_fill() {
    let h = H3::new();
    let s = TestServer::site(&h.tls());
    let p = port(&s).to_string();
    let size = 2 * 1024 * 1024;
    let out = python_job(
        "h3_qpack_streams.py",
        &[&p, "/hello.txt", &size.to_string()],
        &serde_json::json!({}),
    );
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["encoder"].as_u64(), Some(size), "{v}");
    assert_eq!(v["decoder"].as_u64(), Some(size), "{v}");
    assert_eq!(v["status"].as_u64(), Some(200), "{v}");
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// Ten clients each ask for a 10 MiB file on 100 streams at once, then read nothing: no
/// flow-control credit, no acknowledgements. What the server holds for them is bounded by
/// each connection's send budget (`limits.h2_send_buffer`, as for HTTP/2) and QUIC's
/// windows, not by streams × file chunks (100 × 256 KiB a connection).
#[test]
fn clients_that_never_read_hold_bounded_memory() {
    let h = H3::new();
    let root = tempfile::tempdir().unwrap();
    noise(&root.path().join("big.bin"), 10 * 1024 * 1024);
    let p = free_port();
    let tls = h
        .tls()
        .replace("127.0.0.1:0", &format!("127.0.0.1:{p}"))
        .replace("[timeouts]\n", "[timeouts]\nkeep_alive = \"30s\"\n");
    let mut g = spawn_gatehouse_in(root.path(), &tls);
    let pid = g.child.id();
    // Warm: one full download, so the baseline has the runtime's and the file's memory.
    assert_eq!(ask(&h, p, &[get("/big.bin")])[0].len, 10 * 1024 * 1024);
    let before = rss_kib(pid);
    let mut starve = std::process::Command::new("python3")
        .arg(fixtures().join("h3_starve.py"))
        .args([
            p.to_string(),
            "10".into(),
            "100".into(),
            "/big.bin".into(),
            "4".into(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(starve.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(
        line.trim(),
        "asked",
        "the clients did not get their requests out"
    );
    let mut peak = 0;
    for _ in 0..30 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        peak = peak.max(rss_kib(pid));
    }
    let _ = starve.wait();
    let grown_mib = peak.saturating_sub(before) / 1024;
    // Per connection: 1 MiB of send budget, 1 MiB of quinn's send window, and bookkeeping.
    assert!(
        grown_mib < 48,
        "the server grew by {grown_mib} MiB for 10 clients that read nothing"
    );
    // And it still serves.
    assert_eq!(ask(&h, p, &[get("/big.bin")])[0].len, 10 * 1024 * 1024);
    let _ = g.child.kill();
}

/// A frame other than DATA is held whole until it has all arrived: one announced as 1 GiB
/// is refused at once, on a request stream and on the control stream, instead of being
/// read into memory for as long as the client sends (vendor/h3/GATEHOUSE.md).
#[test]
fn a_frame_too_long_to_hold_is_refused() {
    let h = H3::new();
    let s = TestServer::site(&h.tls());
    let p = port(&s);
    for kind in ["request", "control"] {
        let out = std::process::Command::new("python3")
            .arg(fixtures().join("h3_bigframe.py"))
            .args([p.to_string(), kind.to_string()])
            .output()
            .expect("python3");
        assert!(
            out.status.success(),
            "{kind}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        // H3_FRAME_ERROR (RFC 9114 §8.1), before the client could send much of it.
        let stopped = v["stopped"].as_str().unwrap_or("");
        assert!(stopped.ends_with("0x106"), "{kind}: not refused: {v}");
        assert!(v["sent"].as_u64().unwrap() < 4 * 1024 * 1024, "{kind}: {v}");
    }
    // The server goes on serving.
    assert_eq!(ask(&h, p, &[get("/hello.txt")])[0].status, 200);
}

/// A Huffman-coded string whose padding is not all ones, or is 8 bits or more, is
/// malformed (RFC 7541 §5.2): the request is refused, not served for a path it does not
/// spell. The same string with proper padding is served.
#[test]
fn huffman_strings_with_bad_padding_are_refused() {
    let h = H3::new();
    let s = TestServer::site(&h.tls());
    let out = python_job(
        "h3_huffman.py",
        &[&port(&s).to_string()],
        &serde_json::json!({}),
    );
    let got: std::collections::HashMap<String, serde_json::Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["case"].as_str().unwrap().to_string(), v["result"].clone())
        })
        .collect();
    assert_eq!(got["ones"], 200, "{got:?}");
    for bad in ["zeros", "long"] {
        // QPACK_DECOMPRESSION_FAILED (RFC 9204 §6), for the connection.
        assert_eq!(got[bad], "connection closed 0x200", "{bad}: {got:?}");
    }
}

/// CPU time (ns) each thread of `pid` has used, by name.
fn thread_cpu(pid: u32) -> std::collections::HashMap<String, u64> {
    let mut by_name = std::collections::HashMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = task.unwrap().path();
        let (Ok(name), Ok(sched)) = (
            std::fs::read_to_string(task.join("comm")),
            std::fs::read_to_string(task.join("schedstat")),
        ) else {
            continue;
        };
        let ns: u64 = sched.split_whitespace().next().unwrap().parse().unwrap();
        *by_name.entry(name.trim().to_string()).or_insert(0) += ns;
    }
    by_name
}

/// With `runtime = "per-core"` (the default) and two runtimes, HTTP/3 connections are
/// served by both, as TCP connections are. A new connection's Initial goes to the socket
/// its destination ID's first byte picks (the client chooses it: here 0, 1, 2, 3), so the
/// second runtime serves two of the four connections, and does about half of the work.
#[test]
fn per_core_runtimes_share_the_connections() {
    let h = H3::new();
    let root = tempfile::tempdir().unwrap();
    noise(&root.path().join("big.bin"), 8 * 1024 * 1024);
    let p = free_port();
    let tls = h.tls().replace("127.0.0.1:0", &format!("127.0.0.1:{p}"));
    let g = spawn_gatehouse_in(root.path(), &format!("workers = 2\n{tls}"));
    let pid = g.child.id();
    let before = thread_cpu(pid);
    for first in 0..4 {
        let out = python_job(
            "h3_migrate.py",
            &[&p.to_string(), "/big.bin", "stay", &first.to_string()],
            &serde_json::json!({}),
        );
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            (v["first"].as_u64(), v["second"].as_u64()),
            (Some(200), Some(200)),
            "{v}"
        );
        assert_eq!(v["lens"], serde_json::json!([8 << 20, 8 << 20]), "{v}");
    }
    let after = thread_cpu(pid);
    let used = |name: &str| after.get(name).unwrap_or(&0) - before.get(name).unwrap_or(&0);
    let (first, second) = (used("gatehouse-0"), used("gatehouse-1"));
    assert!(
        second * 4 >= first + second && first * 4 >= first + second,
        "CPU ns: gatehouse-0 {first}, gatehouse-1 {second}"
    );
}

/// A connection kept up by PINGs alone (which restart QUIC's idle timeout) but asking
/// nothing is closed after `timeouts.keep_alive`, as an idle HTTP/1.1 or HTTP/2 one is: no
/// sooner, and within a tick of it (a quarter of it, here 250 ms; the bound allows for a
/// loaded machine).
#[test]
fn a_connection_without_requests_is_closed_after_keep_alive() {
    let h = H3::new();
    let tls = h
        .tls()
        .replace("[timeouts]\n", "[timeouts]\nkeep_alive = \"1s\"\n");
    let s = TestServer::site(&tls);
    let out = python_job(
        "h3_idle.py",
        &[&port(&s).to_string(), "/hello.txt"],
        &serde_json::json!({}),
    );
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["status"].as_u64(), Some(200), "{v}");
    let after = v["closed_after"].as_f64().unwrap_or(f64::INFINITY);
    assert!((0.95..=2.0).contains(&after), "{v}");
}

/// A client that moves to a new address mid-connection (RFC 9000 §9) keeps its
/// connection, with two runtimes: its packets from the new address carry an ID the
/// server chose, which steers them to the endpoint that holds the connection, wherever
/// the kernel's hash of the new address would have sent them. Four connections, begun on
/// both runtimes (the first byte of the client's initial ID picks).
#[test]
fn a_client_that_moves_keeps_its_connection() {
    let h = H3::new();
    let s = TestServer::site(&format!("workers = 2\n{}", h.tls()));
    for first in 0..4 {
        let out = python_job(
            "h3_migrate.py",
            &[
                &port(&s).to_string(),
                "/hello.txt",
                "move",
                &first.to_string(),
            ],
            &serde_json::json!({}),
        );
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_ne!(v["ports"][0], v["ports"][1], "{v}");
        assert_eq!(
            (v["first"].as_u64(), v["second"].as_u64()),
            (Some(200), Some(200)),
            "{v}"
        );
        assert!(v["closed"].is_null(), "{v}");
    }
}
