//! The monitoring files as shipped, with the real programs: a real Prometheus scrapes a
//! loaded gatehouse with the repository's `prometheus.yml` (only the target changed) and
//! must return data for every expression of every dashboard panel and every rule;
//! promtool checks the configuration and rules; docker-compose validates the stack; the
//! dashboard JSON has what Grafana needs.
use crate::common;
use common::pki::Ca;
use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn dashboard() -> Value {
    let p = repo().join("dashboards/grafana/dashboards/gatehouse.json");
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

/// Every panel's expressions, and every template variable's query.
fn panel_exprs(d: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            out.push((
                p["title"].as_str().unwrap().to_string(),
                t["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    out
}

/// What Grafana puts in place of the dashboard's variables when "All" is chosen.
fn substitute(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$instance", ".*")
        .replace("$route", ".*")
}

/// Every rule as (name, expression, is an alert). The rule files keep each `expr` on the
/// line after its `record:` or `alert:` name, as promtool's own examples do.
fn rules() -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    for f in ["rules.yml", "alerts.yml"] {
        let text = std::fs::read_to_string(repo().join("dashboards/prometheus").join(f)).unwrap();
        let mut name: Option<(String, bool)> = None;
        for line in text.lines().map(str::trim) {
            if let Some(n) = line.strip_prefix("- record:") {
                name = Some((n.trim().to_string(), false));
            } else if let Some(n) = line.strip_prefix("- alert:") {
                name = Some((n.trim().to_string(), true));
            } else if let Some(e) = line.strip_prefix("expr:") {
                let (n, alert) = name.take().expect("an expr under a rule name");
                out.push((n, e.trim().to_string(), alert));
            }
        }
        assert!(name.is_none(), "{f}: a rule without its expr");
    }
    assert_eq!(out.len(), 7, "{out:?}");
    out
}

/// An alert's expression without its threshold: what it measures, which must have data
/// even when nothing is wrong.
fn measured(expr: &str) -> String {
    let words: Vec<&str> = expr.split_whitespace().collect();
    match words.as_slice() {
        [head @ .., op, n]
            if ["==", "!=", ">=", "<=", ">", "<"].contains(op) && n.parse::<f64>().is_ok() =>
        {
            head.join(" ")
        }
        _ => expr.to_string(),
    }
}

/// The metric names an expression reads.
fn metric_names(expr: &str) -> BTreeSet<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| w.starts_with("gatehouse_") || w.starts_with("process_"))
        .map(|n| {
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| n.strip_suffix(s))
                .unwrap_or(n)
                .to_string()
        })
        .collect()
}

#[test]
fn the_dashboard_has_what_grafana_needs() {
    let d = dashboard();
    for key in [
        "uid",
        "title",
        "schemaVersion",
        "panels",
        "templating",
        "time",
    ] {
        assert!(!d[key].is_null(), "dashboard lacks {key}");
    }
    let vars: Vec<&str> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(vars, ["instance", "route"]);
    let mut ids = BTreeSet::new();
    for p in d["panels"].as_array().unwrap() {
        let id = p["id"].as_u64().expect("panel id");
        assert!(ids.insert(id), "panel id {id} twice");
        for key in ["type", "title", "datasource", "gridPos", "targets"] {
            assert!(!p[key].is_null(), "panel {id} lacks {key}");
        }
        let g = &p["gridPos"];
        assert!(
            g["x"].as_u64().unwrap() + g["w"].as_u64().unwrap() <= 24,
            "panel {id} overflows"
        );
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "panel {id} has no query");
        let refs: BTreeSet<_> = targets
            .iter()
            .map(|t| t["refId"].as_str().unwrap())
            .collect();
        assert_eq!(refs.len(), targets.len(), "panel {id}: refIds repeat");
    }
    let titles: Vec<String> = d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["title"].as_str().unwrap().to_lowercase())
        .collect();
    for wanted in [
        "requests per second by route and status",
        "latency p50, p95, p99",
        "error rate",
        "cpu µs per request",
        "cpu",
        "memory",
        "open connections",
        "cache hit ratios",
        "upstream health",
        "upstream latency",
        "days until certificate expiry",
        "response cache: requests",
        "response cache: memory",
    ] {
        assert!(
            titles.iter().any(|t| t.starts_with(wanted)),
            "no panel for {wanted:?} in {titles:?}"
        );
    }
    // The provisioning points Grafana at this file and at the compose stack's Prometheus.
    let prov = std::fs::read_to_string(
        repo().join("dashboards/grafana/provisioning/dashboards/gatehouse.yml"),
    )
    .unwrap();
    assert!(prov.contains("/var/lib/grafana/dashboards"));
    let ds = std::fs::read_to_string(
        repo().join("dashboards/grafana/provisioning/datasources/prometheus.yml"),
    )
    .unwrap();
    assert!(ds.contains("uid: prometheus") && ds.contains("http://prometheus:9090"));
}

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (installed by scripts/test.sh)"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

#[test]
fn promtool_accepts_the_configuration_and_the_rules() {
    let dir = repo().join("dashboards/prometheus");
    let out = run(Command::new("promtool")
        .args(["check", "config"])
        .arg(dir.join("prometheus.yml")));
    assert!(out.contains("2 rule files found"), "{out}");
    run(Command::new("promtool")
        .args(["check", "rules"])
        .arg(dir.join("rules.yml"))
        .arg(dir.join("alerts.yml")));
}

#[test]
fn the_compose_file_is_valid() {
    let out = run(Command::new("docker-compose")
        .arg("-f")
        .arg(repo().join("docker-compose.yml"))
        .arg("config"));
    for service in ["gatehouse:", "backend:", "prometheus:", "grafana:"] {
        assert!(out.contains(service), "no {service} service in:\n{out}");
    }
    // The Dockerfile it builds runs gatehouse as a user of its own, not root.
    let df = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    let user = df
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER line");
    assert!(
        !user.starts_with("root") && !user.starts_with('0'),
        "{user}"
    );
    assert!(df.matches("FROM ").count() >= 2, "multi-stage");

    // The admin listener is published on the host's loopback only, and its token comes
    // from the environment, never from the file.
    let block = service_block(&out, "gatehouse");
    let ports: Vec<&str> = block
        .lines()
        .skip_while(|l| *l != "    ports:")
        .skip(1)
        .take_while(|l| !l.starts_with("    ") || l.starts_with("    -") || l.starts_with("     "))
        .collect();
    assert!(ports.iter().any(|l| l.contains("8080")), "{block}");
    // docker-compose 1.x writes a host address in the short form; 2.x as host_ip.
    assert!(
        ports.iter().any(|l| l.contains("127.0.0.1:9090:9090"))
            || ports.iter().any(|l| l.contains("host_ip: 127.0.0.1")),
        "the admin port not on loopback:\n{block}"
    );
    assert!(
        !ports
            .iter()
            .any(|l| l.trim_start_matches([' ', '-']).starts_with("9090:")
                || l.contains("0.0.0.0:9090")),
        "the admin port open to every interface:\n{block}"
    );
    assert!(block.contains("GATEHOUSE_ADMIN_TOKEN: null"), "{block}");
    let out = run(Command::new("docker-compose")
        .env("GATEHOUSE_ADMIN_TOKEN", "from-the-shell-0123456789")
        .arg("-f")
        .arg(repo().join("docker-compose.yml"))
        .arg("config"));
    let block = service_block(&out, "gatehouse");
    assert!(
        block.contains("GATEHOUSE_ADMIN_TOKEN: from-the-shell-0123456789"),
        "{block}"
    );
}

/// The lines of one service in `docker-compose config`'s output.
fn service_block(config: &str, name: &str) -> String {
    let head = format!("  {name}:");
    config
        .lines()
        .skip_while(|l| *l != head)
        .skip(1)
        .take_while(|l| l.starts_with("    ") || l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The compose stack's gatehouse.toml, run as the stack runs it (admin listener on every
/// interface): `POST /reload` is refused without `GATEHOUSE_ADMIN_TOKEN`, and takes it
/// when the environment sets it.
#[test]
fn the_compose_config_keeps_reload_behind_the_token() {
    let shipped = std::fs::read_to_string(repo().join("examples/compose/gatehouse.toml")).unwrap();
    let token = "c0mpose-t0ken-0123456789abcdef";
    for with_token in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (port, admin) = (free_port(), free_port());
        let conf = dir.path().join("gatehouse.toml");
        let local = shipped
            .replace("0.0.0.0:8080", &format!("127.0.0.1:{port}"))
            .replace("0.0.0.0:9090", &format!("0.0.0.0:{admin}"))
            .replace("/srv/site", &fixtures().join("site").display().to_string())
            .replace("http://backend:80", "http://127.0.0.1:9");
        assert_ne!(local, shipped);
        std::fs::write(&conf, local).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gatehouse"));
        cmd.arg("--config").arg(&conf).stderr(Stdio::null());
        if with_token {
            cmd.env("GATEHOUSE_ADMIN_TOKEN", token);
        } else {
            cmd.env_remove("GATEHOUSE_ADMIN_TOKEN");
        }
        let _g = Kill(cmd.spawn().unwrap());
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], admin));
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "gatehouse never started");
            std::thread::sleep(Duration::from_millis(20));
        }
        let reload = |auth: &str| {
            send(
                addr,
                &format!("POST /reload HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n{auth}\r\n"),
            )
            .status
        };
        let bearer = format!("Authorization: Bearer {token}\r\n");
        if with_token {
            assert_eq!(reload(""), 401);
            assert_eq!(reload(&bearer), 200);
        } else {
            assert_eq!(reload(""), 403);
            assert_eq!(reload(&bearer), 403);
        }
        assert_eq!(
            send(addr, "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n").status,
            200
        );
    }
}

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs a PromQL query; the number of series it returned.
fn query(prom: u16, expr: &str) -> Result<usize, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let body = rt.block_on(async {
        reqwest::Client::new()
            .get(format!("http://127.0.0.1:{prom}/api/v1/query"))
            .query(&[("query", expr)])
            .send()
            .await?
            .bytes()
            .await
    });
    let body = body.map_err(|e| e.to_string())?;
    let v: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    if v["status"] != "success" {
        return Err(format!("{v}"));
    }
    Ok(v["data"]["result"].as_array().map_or(0, |r| r.len()))
}

#[test]
fn every_panel_and_rule_has_data_in_a_real_prometheus() {
    // gatehouse with everything the dashboard shows: a compressed static route, a proxy
    // with an upstream, a TLS listener with a certificate, an access log.
    let up = serve_axum(
        loopback(),
        axum::Router::new().fallback(|| async { "upstream" }),
    );
    // Behind the response cache: fresh for a second, so both hits and misses come.
    let cached_up = serve_axum(
        loopback(),
        axum::Router::new().fallback(|| async { ([("cache-control", "max-age=1")], "cached") }),
    );
    let ca = Ca::new("dash");
    let leaf = ca.leaf(&["localhost"], "localhost");
    let certs = tempfile::tempdir().unwrap();
    let (cert, key) = (certs.path().join("c.pem"), certs.path().join("k.pem"));
    std::fs::write(&cert, &leaf.cert_pem).unwrap();
    std::fs::write(&key, &leaf.key_pem).unwrap();
    let tls_port = free_port();
    let g = spawn_gatehouse(&format!(
        "[tls]\nlisten = \"127.0.0.1:{tls_port}\"\n[[tls.certs]]\ncert = {:?}\nkey = {:?}\n[[routes]]\nname = \"site\"\n[routes.static]\n[routes.access_log]\npath = {:?}\n[[routes]]\nname = \"api\"\npath = \"/api\"\n[routes.proxy]\nupstreams = [\"http://{up}\"]\n[[routes]]\nname = \"cached\"\npath = \"/cached\"\n[routes.proxy]\nupstreams = [\"http://{cached_up}\"]\n[routes.cache]\n",
        cert.display().to_string(),
        key.display().to_string(),
        certs.path().join("access.log").display().to_string(),
    ));

    // Steady traffic on every route until the test ends.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (addr, flag) = (g.addr, stop.clone());
    let load = std::thread::spawn(move || {
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            let mut c = Conn::open(addr);
            for raw in [
                "GET /index.html HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n",
                "GET /app.js HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n",
                "GET /missing HTTP/1.1\r\nHost: t\r\n\r\n",
                "GET /api/x HTTP/1.1\r\nHost: t\r\n\r\n",
                "GET /cached/x HTTP/1.1\r\nHost: t\r\n\r\n",
            ] {
                c.send(raw.as_bytes());
                let _ = c.read_response(false);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });

    // The repository's Prometheus files, with only the target changed.
    let pdir = tempfile::tempdir().unwrap();
    for f in ["prometheus.yml", "rules.yml", "alerts.yml"] {
        let text = std::fs::read_to_string(repo().join("dashboards/prometheus").join(f)).unwrap();
        let text = text.replace("gatehouse:9090", &g.admin.to_string());
        std::fs::write(pdir.path().join(f), text).unwrap();
    }
    let prom_port = free_port();
    let _prom = Kill(
        Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                pdir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                pdir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(pdir.path().join("prometheus.log")).unwrap())
            .spawn()
            .expect("prometheus (Debian package) must be installed"),
    );

    // Wait for two scrapes' worth of rates and the recording rule.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let ready = query(prom_port, "gatehouse:cpu_us_per_request:rate1m").unwrap_or(0) > 0
            && query(
                prom_port,
                "histogram_quantile(0.99, sum by (upstream, le) (rate(gatehouse_upstream_response_seconds_bucket[1m])))",
            )
            .unwrap_or(0)
                > 0;
        if ready {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus had no data in 90 s:\n{}",
            std::fs::read_to_string(pdir.path().join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    let exported = {
        let r = send(g.admin, "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n");
        r.text()
    };
    let mut failures = Vec::new();
    let mut checked = 0;
    let d = dashboard();
    let mut exprs: Vec<(String, String)> = panel_exprs(&d);
    for v in d["templating"]["list"].as_array().unwrap() {
        // label_values(metric{...}, label) reads the metric; ask for the series.
        let q = v["query"]["query"].as_str().unwrap();
        let inner = q
            .trim_start_matches("label_values(")
            .rsplit_once(',')
            .unwrap()
            .0
            .to_string();
        exprs.push((format!("variable {}", v["name"]), inner));
    }
    for (name, expr, alert) in rules() {
        let e = if alert { measured(&expr) } else { expr };
        exprs.push((format!("rule {name}"), e));
    }
    for (what, expr) in &exprs {
        for m in metric_names(expr) {
            let rule_made = m.starts_with("gatehouse:");
            if !rule_made && !exported.contains(&format!("\n{m}")) && !exported.starts_with(&m) {
                failures.push(format!("{what}: names {m}, which gatehouse doesn't export"));
            }
        }
        let e = substitute(expr);
        match query(prom_port, &e) {
            Ok(0) => failures.push(format!("{what}: no data for {e}")),
            Ok(_) => checked += 1,
            Err(err) => failures.push(format!("{what}: {e}: {err}")),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = load.join();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(checked >= 25, "only {checked} expressions checked");
}
