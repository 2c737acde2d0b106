use gatehouse_config::{Coding, Loader, RuntimeMode};

fn load(toml: &str) -> Result<gatehouse_config::Config, gatehouse_config::ConfigErrors> {
    let root = std::env::temp_dir().display().to_string();
    Loader::new()
        .no_default_file()
        .no_env()
        .toml_str(format!("root = {root:?}\n{toml}"))
        .load()
}

#[test]
fn defaults_give_one_static_route_over_root() {
    let c = load("").unwrap();
    assert_eq!(c.routes.len(), 1);
    assert_eq!(c.routes[0].name(), "route0");
    assert_eq!(c.routes[0].path, "/");
    assert_eq!(c.runtime, RuntimeMode::PerCore);
    let st = c.routes[0].static_files.as_ref().unwrap();
    assert_eq!(st.root.as_deref(), Some(std::env::temp_dir().as_path()));
    assert!(st.open_file_cache.strict && st.hide_dotfiles);
}

#[test]
fn listen_takes_one_address_or_a_list() {
    assert_eq!(load("listen = \"127.0.0.1:1\"").unwrap().listen.len(), 1);
    assert_eq!(
        load("listen = [\"127.0.0.1:1\", \"[::1]:2\"]")
            .unwrap()
            .listen
            .len(),
        2
    );
    let e = load("listen = \"localhost\"").unwrap_err().to_string();
    assert!(e.contains("listen") && e.contains("localhost"), "{e}");
}

#[test]
fn cli_overrides_beat_the_file() {
    let root = std::env::temp_dir().display().to_string();
    let c = Loader::new()
        .no_default_file()
        .no_env()
        .toml_str(format!("root = {root:?}\nlisten = \"127.0.0.1:1\"\n"))
        .cli("listen", "127.0.0.1:2")
        .load()
        .unwrap();
    assert_eq!(c.listen[0].port(), 2);
}

#[test]
fn route_checks() {
    let e = load(
        "[[routes]]\nname = \"x\"\n[routes.static]\n[[routes]]\nname = \"x\"\n[routes.static]\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("routes.1.name") && e.contains("already named"),
        "{e}"
    );
    let e = load("[[routes]]\nhosts = [\"a.*.com\"]\n[routes.static]\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("routes.0.hosts.0") && e.contains("wildcard"),
        "{e}"
    );
    let e = load("[[routes]]\npath = \"/a/../b\"\n[routes.static]\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("routes.0.path"), "{e}");
    let c = load("[[routes]]\npath = \"/assets/\"\nhosts = \"Example.COM\"\n[routes.static]\n")
        .unwrap();
    assert_eq!(c.routes[0].path, "/assets");
    assert_eq!(c.routes[0].hosts, vec!["example.com"]);
}

#[test]
fn durations_are_human_readable() {
    let c = load("[timeouts]\nkeep_alive = \"1m 30s\"\nheader_read = \"250ms\"\n").unwrap();
    assert_eq!(c.timeouts.keep_alive.as_secs(), 90);
    assert_eq!(c.timeouts.header_read.as_millis(), 250);
    let e = load("[timeouts]\nkeep_alive = \"soon\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("timeouts.keep_alive"), "{e}");
}

#[test]
fn compression_is_on_by_default_and_checked() {
    let c = load("").unwrap();
    let comp = &c.routes[0].compression;
    assert!(comp.enabled && comp.precompressed);
    assert_eq!(comp.encodings, vec![Coding::Br, Coding::Zstd, Coding::Gzip]);
    assert_eq!((comp.gzip_level, comp.br_level, comp.zstd_level), (6, 5, 3));

    let c = load(
        "[[routes]]\n[routes.static]\n[routes.compression]\nencodings = \"gzip\"\ngzip_level = 9\n",
    )
    .unwrap();
    assert_eq!(c.routes[0].compression.encodings, vec![Coding::Gzip]);
    assert_eq!(c.routes[0].compression.gzip_level, 9);

    let e = load(
        "[[routes]]\n[routes.static]\n[routes.compression]\ngzip_level = 10\nbr_level = 12\nzstd_level = 0\nencodings = [\"gzip\", \"gzip\"]\ntypes = [\"javascript\"]\ncache_max_bytes = 1000\n",
    )
    .unwrap_err()
    .to_string();
    for key in [
        "routes.0.compression.gzip_level",
        "routes.0.compression.br_level",
        "routes.0.compression.zstd_level",
        "routes.0.compression.encodings",
        "routes.0.compression.types.0",
        "routes.0.compression.cache_max_bytes",
    ] {
        assert!(e.contains(key), "{key} missing from: {e}");
    }
    let e = load("[[routes]]\n[routes.static]\n[routes.compression]\nencodings = [\"deflate\"]\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("encodings") && e.contains("br, zstd or gzip"),
        "{e}"
    );
    let e = load("[[routes]]\n[routes.static]\n[routes.compression]\nlevel = 3\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("level"), "{e}");
}

#[test]
fn proxy_routes_are_checked_key_by_key() {
    let c = load(
        "[[routes]]\npath = \"/api\"\n[routes.proxy]\nupstreams = [\"http://127.0.0.1:9000\", { url = \"http://b:80\", weight = 3 }]\npolicy = \"hash\"\nhash_on = \"cookie:sid\"\n",
    )
    .unwrap();
    let px = c.routes[0].proxy.as_ref().unwrap();
    assert_eq!(px.upstreams[1].weight, 3);
    assert_eq!(px.policy, gatehouse_config::Policy::Hash);

    let e = load(
        "[[routes]]\n[routes.proxy]\nupstreams = [\"ftp://x\", \"y:443\", { url = \"http://z:1/base\", weight = 0 }]\nhash_on = \"ip\"\ntrusted_proxies = [\"10.0.0.0/33\"]\nconnect_timeout = \"0s\"\n",
    )
    .unwrap_err()
    .to_string();
    for key in [
        "routes.0.proxy.upstreams.0",
        "routes.0.proxy.upstreams.1",
        "routes.0.proxy.upstreams.2",
        "routes.0.proxy.upstreams.2.weight",
        "routes.0.proxy.hash_on",
        "routes.0.proxy.trusted_proxies.0",
        "routes.0.proxy.connect_timeout",
    ] {
        assert!(e.contains(key), "{key} missing from: {e}");
    }
    let e = load("[[routes]]\n[routes.proxy]\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("routes.0.proxy.upstreams"), "{e}");
    let e = load("[[routes]]\n[routes.static]\n[routes.proxy]\nupstreams = [\"http://a:1\"]\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("not both"), "{e}");
    let e = load("[[routes]]\n[routes.proxy]\nupstreams = [\"http://a:1\"]\npolicy = \"random\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("policy"), "{e}");
}

#[test]
fn tls_and_acme_are_checked_key_by_key() {
    let c = load(
        "[tls]\nlisten = \"127.0.0.1:8443\"\nhsts = \"max-age=600\"\n[[tls.certs]]\ncert = \"a.pem\"\nkey = \"a.key\"\nnames = [\"A.example.com\", \"*.example.com\"]\n",
    )
    .unwrap();
    let t = c.tls.as_ref().unwrap();
    assert_eq!(t.certs[0].names, ["a.example.com", "*.example.com"]);
    assert!(t.http2 && !t.redirect_http);

    let e = load("[tls]\nhsts = \"includeSubDomains\"\n[[tls.certs]]\ncert = \"a\"\nkey = \"b\"\nnames = [\"bad name\"]\n")
        .unwrap_err()
        .to_string();
    for key in ["tls.hsts", "tls.certs.0.names.0"] {
        assert!(e.contains(key), "{key} missing from: {e}");
    }
    let e = load("[tls]\n").unwrap_err().to_string();
    assert!(e.contains("tls.certs"), "{e}");

    let e = load(
        "[acme]\ndirectory = \"ftp://ca\"\neab_kid = \"k\"\nretry_min = \"1h\"\nretry_max = \"1m\"\n[[acme.certificates]]\ndomains = [\"*.example.com\"]\n[[acme.certificates]]\ndomains = []\n",
    )
    .unwrap_err()
    .to_string();
    for key in [
        "acme:",
        "acme.directory",
        "acme.eab_kid",
        "acme.retry_min",
        "acme.certificates.0.domains.0",
        "acme.certificates.1.domains",
    ] {
        assert!(e.contains(key), "{key} missing from: {e}");
    }
    // [tls] with only ACME certificates is enough.
    let c = load(
        "[tls]\n[acme]\nchallenge = \"tls-alpn-01\"\n[[acme.certificates]]\ndomains = [\"Example.com\", \"www.example.com\"]\n",
    )
    .unwrap();
    let a = c.acme.unwrap();
    assert_eq!(a.challenge, gatehouse_config::Challenge::TlsAlpn01);
    assert_eq!(a.certificates[0].domains[0], "example.com");
}

#[test]
fn access_logs_are_checked() {
    let dir = std::env::temp_dir().display().to_string();
    let c = load(&format!(
        "[[routes]]\n[routes.static]\n[routes.access_log]\npath = \"{dir}/a.log\"\nformat = \"json\"\nmax_size = 1000000\n"
    ))
    .unwrap();
    let log = c.routes[0].access_log.as_ref().unwrap();
    assert_eq!(log.format, gatehouse_config::LogFormat::Json);
    assert_eq!((log.max_size, log.keep), (1_000_000, 5));
    let e = load("[[routes]]\n[routes.static]\n[routes.access_log]\npath = \"/nonexistent-dir/a.log\"\nmax_pending = 0\nformat = \"apache\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("routes.0.access_log.format"), "{e}");
    let e = load("[[routes]]\n[routes.static]\n[routes.access_log]\npath = \"/nonexistent-dir/a.log\"\nmax_pending = 0\n")
        .unwrap_err()
        .to_string();
    for key in [
        "routes.0.access_log.path",
        "routes.0.access_log.max_pending",
    ] {
        assert!(e.contains(key), "{key} missing from: {e}");
    }
}

#[test]
fn ip_rules_name_the_bad_entry() {
    let e = load("[[routes]]\n[routes.static]\n[routes.access]\nallow = [\"10.0.0.0/8\", \"nonsense\"]\ndeny = [\"1.2.3.4/40\"]\n")
        .unwrap_err()
        .to_string();
    for key in ["routes.0.access.allow.1", "routes.0.access.deny.0"] {
        assert!(e.contains(key), "{key} missing from: {e}");
    }
}

#[test]
fn basic_auth_needs_its_file() {
    let e = load("[[routes]]\n[routes.static]\n[routes.auth]\nhtpasswd = \"/nonexistent/users\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("routes.0.auth.htpasswd"), "{e}");
}

#[test]
fn auth_settings_are_checked_and_named() {
    let cases = [
        (
            "[routes.auth.jwt]\nkey_file = \"/etc/hostname\"\njwks_url = \"https://idp.test/jwks\"\n",
            "routes.0.auth.jwt",
            "one of key_file or jwks_url",
        ),
        (
            "[routes.auth.jwt]\njwks_url = \"ftp://idp.test/jwks\"\n",
            "routes.0.auth.jwt.jwks_url",
            "not an http",
        ),
        (
            "[routes.auth.jwt]\njwks_url = \"https://idp.test/jwks\"\nrequire = { scope = [] }\n",
            "routes.0.auth.jwt.require.scope",
            "at least one",
        ),
        (
            "[routes.auth.forward]\nurl = \"auth-service\"\n",
            "routes.0.auth.forward.url",
            "not an http",
        ),
        (
            "[routes.auth.forward]\nurl = \"http://127.0.0.1:9/\"\nresponse_headers = [\"bad header\"]\n",
            "routes.0.auth.forward.response_headers.0",
            "not a header name",
        ),
        (
            "htpasswd = \"/etc/hostname\"\n[routes.auth.forward]\nurl = \"http://127.0.0.1:9/\"\n",
            "routes.0.auth",
            "set one of",
        ),
        (
            "users = [\"ann\"]\n[routes.auth.forward]\nurl = \"http://127.0.0.1:9/\"\n",
            "routes.0.auth.users",
            "only applies with htpasswd",
        ),
    ];
    for (tables, key, why) in cases {
        let e = load(&format!(
            "[[routes]]\n[routes.static]\n[routes.auth]\n{tables}"
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains(key) && e.contains(why), "{key} / {why} in: {e}");
    }
    load("[[routes]]\n[routes.static]\n[routes.auth.forward]\nurl = \"http://127.0.0.1:9/auth\"\n")
        .unwrap();
}

#[test]
fn rate_limits_and_uri_limits_are_checked() {
    let e = load("[limits]\nmax_uri_bytes = 10\n[[routes]]\n[routes.static]\n[routes.rate_limit]\nrequests_per_second = 0\nburst = 0\ntrusted_proxies = [\"10.0.0.0/33\"]\n")
        .unwrap_err()
        .to_string();
    for key in [
        "limits.max_uri_bytes",
        "routes.0.rate_limit.requests_per_second",
        "routes.0.rate_limit.burst",
        "routes.0.rate_limit.trusted_proxies.0",
    ] {
        assert!(e.contains(key), "{key} missing from: {e}");
    }
}

#[test]
fn an_unknown_key_with_an_empty_name_is_named_quoted() {
    // Found by the `config` fuzz target: the error's key was empty.
    let text = "'' = \"/tmp\"\n[timeouts]\nheader_read = \"12m\"\n";
    let errors = gatehouse_config::Loader::new()
        .no_default_file()
        .no_env()
        .toml_str(text)
        .load()
        .unwrap_err();
    assert_eq!(errors.0[0].key, "\"\"");
    assert!(
        errors.to_string().contains("\"\": unknown field"),
        "{errors}"
    );
}

#[test]
fn the_admin_listener_has_a_connection_cap_and_a_checked_token() {
    let c = load("").unwrap();
    assert_eq!(c.admin_max_connections, 64);
    assert!(c.admin_token_resolved.is_none());
    let e = load("admin_max_connections = 0").unwrap_err().to_string();
    assert!(e.contains("admin_max_connections"), "{e}");

    let c = load("admin_token = \"0123456789abcdef0123\"").unwrap();
    assert_eq!(
        c.admin_token_resolved.as_ref().unwrap().expose(),
        "0123456789abcdef0123"
    );
    // Never printed by Debug (nor by `gatehouse check`: gateway/tests/admin.rs).
    assert!(!format!("{c:?}").contains("0123456789abcdef0123"));

    for (bad, why) in [
        ("short", "16 characters"),
        ("has a space in it 0123456789", "bearer token"),
        ("tok\\u0000en0123456789abcdef", "bearer token"),
        ("====", "bearer token"),
    ] {
        let e = load(&format!("admin_token = \"{bad}\""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("admin_token") && e.contains(why), "{bad}: {e}");
    }

    let dir = std::env::temp_dir().join(format!("gatehouse-admin-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("token");
    std::fs::write(&f, "S3cr3t-t0ken/from+a.file==\n").unwrap();
    let c = load(&format!("admin_token_file = {:?}", f.display().to_string())).unwrap();
    assert_eq!(
        c.admin_token_resolved.unwrap().expose(),
        "S3cr3t-t0ken/from+a.file=="
    );
    let e = load(&format!(
        "admin_token = \"0123456789abcdef0123\"\nadmin_token_file = {:?}",
        f.display().to_string()
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("admin_token_file") && e.contains("not both"),
        "{e}"
    );
    std::fs::write(&f, "\n").unwrap();
    let e = load(&format!("admin_token_file = {:?}", f.display().to_string()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("admin_token_file") && e.contains("bearer token"),
        "{e}"
    );
    let missing = dir.join("missing");
    let e = load(&format!(
        "admin_token_file = {:?}",
        missing.display().to_string()
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("admin_token_file") && e.contains("missing"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
#[allow(clippy::result_large_err)] // figment's own Error, in Jail's signature
fn an_admin_token_can_come_from_the_environment() {
    // What `openssl rand -hex 32` and `-base64 32` make.
    for token in [
        "6f1c0b8e3a2d4f5b9c7e1a0d2b4c6e8f0a1b2c3d4e5f60718293a4b5c6d7e8f9",
        "q2H7+vQ0xk3/9Zr1bT4uYw8sLm5nP6oJcA2eDfGhIjM=",
    ] {
        figment::Jail::expect_with(|jail| {
            jail.set_env("GATEHOUSE_ADMIN_TOKEN", token);
            let root = std::env::temp_dir().display().to_string();
            let c = Loader::new()
                .no_default_file()
                .toml_str(format!("root = {root:?}\n"))
                .load()
                .map_err(|e| e.to_string())?;
            assert_eq!(c.admin_token_resolved.unwrap().expose(), token);
            Ok(())
        });
    }
}

#[test]
fn h2_send_buffers_are_checked() {
    let c = load("").unwrap();
    assert_eq!(c.limits.h2_send_buffer, 1024 * 1024);
    assert_eq!(c.limits.h2_send_buffer_total, 64 * 1024 * 1024);
    let c = load("[limits]\nh2_send_buffer = 65536\nh2_send_buffer_total = 65536\n").unwrap();
    assert_eq!(c.limits.h2_send_buffer, 65536);
    for (tables, key, why) in [
        (
            "h2_send_buffer = 16384",
            "limits.h2_send_buffer",
            "from 65536",
        ),
        (
            "h2_send_buffer = 8589934592",
            "limits.h2_send_buffer",
            "from 65536",
        ),
        (
            "h2_send_buffer = 2097152\nh2_send_buffer_total = 1048576",
            "limits.h2_send_buffer_total",
            "at least limits.h2_send_buffer",
        ),
    ] {
        let e = load(&format!("[limits]\n{tables}\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(key) && e.contains(why), "{key} / {why} in: {e}");
    }
}

#[test]
fn listen_takes_names_and_listens_on_each_of_their_addresses() {
    let want: Vec<std::net::SocketAddr> =
        std::net::ToSocketAddrs::to_socket_addrs("localhost:8080")
            .unwrap()
            .collect();
    assert!(!want.is_empty());
    let c = load("listen = \"localhost:8080\"\nadmin_listen = \"localhost:9191\"").unwrap();
    for a in &want {
        assert!(c.listen.contains(a), "{a} in {:?}", c.listen);
    }
    assert_eq!(c.admin_listen.port(), 9191);
    assert!(c.admin_listen.ip().is_loopback());
    // A name and one of its addresses: each address once.
    let c = load("listen = [\"localhost:8080\", \"127.0.0.1:8080\"]").unwrap();
    let mut all = c.listen.clone();
    all.sort();
    let mut once = all.clone();
    once.dedup();
    assert_eq!(once, all, "{:?}", c.listen);
    assert!(all.contains(&"127.0.0.1:8080".parse().unwrap()));
    for bad in ["no-such-host.invalid:8080", "localhost", "127.0.0.1:99999"] {
        let e = load(&format!("listen = \"{bad}\""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("listen") && e.contains(bad), "{bad}: {e}");
    }
}

/// Found in review: errors that share a key's prefix, a required field taken out, and a
/// quoted key each stayed hidden or named a wrong source.
#[test]
fn every_error_is_reported_once_with_its_file_position() {
    let dir = std::env::temp_dir().join(format!("gatehouse-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("g.toml");
    let root = std::env::temp_dir().display().to_string();
    let load_file = |text: &str| {
        std::fs::write(&file, format!("root = {root:?}\n{text}")).unwrap();
        Loader::new()
            .no_default_file()
            .no_env()
            .file(&file)
            .load()
            .unwrap_err()
            .0
    };
    let f = file.display().to_string();

    // A wrong type in h2_send_buffer_total must not hide h2_send_buffer's range error.
    let e = load_file("[limits]\nh2_send_buffer = 1000\nh2_send_buffer_total = \"64M\"\n");
    let keys: Vec<&str> = e.iter().map(|e| e.key.as_str()).collect();
    assert!(keys.contains(&"limits.h2_send_buffer_total"), "{e:?}");
    assert!(keys.contains(&"limits.h2_send_buffer"), "{e:?}");
    assert!(e.iter().all(|e| e.source.starts_with(&f)), "{e:?}");

    // A required field of the wrong type is one error, not also a missing one.
    let e = load_file("[tls]\n[[tls.certs]]\ncert = 5\nkey = \"k.pem\"\n");
    assert!(
        e.iter()
            .any(|e| e.key == "tls.certs.0.cert" && e.reason.contains("invalid type")),
        "{e:?}"
    );
    assert!(
        !e.iter().any(|e| e.reason.contains("missing field")),
        "{e:?}"
    );

    // Unknown keys, quoted or not, each named with the file's line and column.
    let e = load_file("lisen = 1\n\"a b\" = 2\n");
    for (key, at) in [("lisen", ":2:1"), ("\"a b\"", ":3:1")] {
        assert!(
            e.iter()
                .any(|e| e.key == key && e.source == format!("{f}{at}")),
            "{key} at {at}: {e:?}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
