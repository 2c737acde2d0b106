use crate::error::describe_source;
use crate::{Config, ConfigError, ConfigErrors, Route};
use figment::Figment;
use std::collections::HashSet;
use std::path::Path;

struct Collector<'a> {
    fig: &'a Figment,
    errors: Vec<ConfigError>,
}

impl Collector<'_> {
    fn err(&mut self, key: impl Into<String>, reason: impl Into<String>) {
        let key = key.into();
        let source = describe_source(None, self.fig, &key);
        self.errors.push(ConfigError {
            key,
            source,
            reason: reason.into(),
        });
    }
}

/// Fills in derived values (route names, inherited roots) and checks everything that
/// serde can't: every problem is collected, not just the first.
pub(crate) fn normalise_and_validate(
    config: &mut Config,
    fig: &Figment,
) -> Result<(), ConfigErrors> {
    let mut c = Collector {
        fig,
        errors: Vec::new(),
    };

    if config.listen.is_empty() {
        c.err("listen", "at least one address is needed");
    }
    if config.limits.max_header_bytes < 8192 {
        c.err(
            "limits.max_header_bytes",
            "must be at least 8192 (hyper's smallest read buffer)",
        );
    }
    if config.limits.max_uri_bytes < 256 {
        c.err("limits.max_uri_bytes", "must be at least 256");
    }
    if config.limits.max_headers == 0 {
        c.err("limits.max_headers", "must be at least 1");
    }
    check_h2_send_buffer(&mut c, &config.limits);
    if let Some(log) = &config.access_log {
        check_access_log(&mut c, "access_log", log);
    }
    for (key, d) in [
        ("timeouts.header_read", config.timeouts.header_read),
        ("timeouts.keep_alive", config.timeouts.keep_alive),
    ] {
        if d.is_zero() {
            c.err(key, "must be longer than zero");
        }
    }
    if config.workers > 1024 {
        c.err("workers", "more than 1024 workers is surely a mistake");
    }

    if config.proxy_protocol && config.proxy_protocol_from.is_empty() {
        c.err(
            "proxy_protocol_from",
            "name the load balancers (CIDRs) that send the PROXY header: with \
             proxy_protocol on, anyone else could claim any address",
        );
    }
    check_cidrs(&mut c, "proxy_protocol_from", &config.proxy_protocol_from);
    check_tls(&mut c, config);
    check_admin(&mut c, config);

    let implicit = config.routes.is_empty();
    if implicit {
        config.routes.push(Route::static_route(None));
    }

    let mut names = HashSet::new();
    let mut matches = HashSet::new();
    let root = config.root.clone();
    let mut disk_paths: Vec<(String, std::path::PathBuf)> = Vec::new();
    for (i, route) in config.routes.iter_mut().enumerate() {
        let k = format!("routes.{i}");
        let name = route
            .name
            .get_or_insert_with(|| format!("route{i}"))
            .clone();
        if name.is_empty()
            || !name
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || "-_.".contains(ch))
        {
            c.err(format!("{k}.name"), "use letters, digits, '-', '_' or '.'");
        }
        if !names.insert(name.clone()) {
            c.err(
                format!("{k}.name"),
                format!("another route is already named {name:?}"),
            );
        }

        if !route.path.starts_with('/') {
            c.err(format!("{k}.path"), "must start with '/'");
        } else if route.path.split('/').any(|s| s == "." || s == "..") || route.path.contains("//")
        {
            c.err(
                format!("{k}.path"),
                "must not contain '.', '..' or empty segments",
            );
        }
        if route.path.len() > 1 && route.path.ends_with('/') {
            route.path.pop();
        }

        for (j, host) in route.hosts.iter_mut().enumerate() {
            *host = host.to_ascii_lowercase();
            if let Err(why) = check_host(host) {
                c.err(format!("{k}.hosts.{j}"), why);
            }
            if !matches.insert((host.clone(), route.path.clone())) {
                c.err(
                    format!("{k}.hosts.{j}"),
                    format!(
                        "another route already matches host {host:?} and path {:?}",
                        route.path
                    ),
                );
            }
        }
        if route.hosts.is_empty() && !matches.insert((String::new(), route.path.clone())) {
            c.err(
                format!("{k}.path"),
                format!(
                    "another route already matches any host with path {:?}",
                    route.path
                ),
            );
        }

        if let Some(log) = &route.access_log {
            check_access_log(&mut c, &format!("{k}.access_log"), log);
        }

        if let Some(a) = &route.auth {
            let set = [a.htpasswd.is_some(), a.jwt.is_some(), a.forward.is_some()];
            if set.iter().filter(|b| **b).count() != 1 {
                c.err(
                    format!("{k}.auth"),
                    "set one of htpasswd (Basic), [routes.auth.jwt] (Bearer) or \
                     [routes.auth.forward]",
                );
            }
            if let Some(f) = a.htpasswd.as_ref().filter(|f| !f.is_file()) {
                c.err(
                    format!("{k}.auth.htpasswd"),
                    format!("{} is not a file", f.display()),
                );
            }
            if !a.users.is_empty() && a.htpasswd.is_none() {
                c.err(format!("{k}.auth.users"), "only applies with htpasswd");
            }
            if let Some(j) = &a.jwt {
                check_jwt(&mut c, &format!("{k}.auth.jwt"), j);
            }
            if let Some(f) = &a.forward {
                let kf = format!("{k}.auth.forward");
                check_cidrs(&mut c, &format!("{kf}.trusted_proxies"), &f.trusted_proxies);
                if !is_http_url(&f.url) {
                    c.err(
                        format!("{kf}.url"),
                        format!("{:?} is not an http:// or https:// URL with a host", f.url),
                    );
                }
                for (name, list) in [
                    ("request_headers", &f.request_headers),
                    ("response_headers", &f.response_headers),
                ] {
                    for (j, h) in list.iter().enumerate() {
                        if http::HeaderName::try_from(h.as_str()).is_err() {
                            c.err(
                                format!("{kf}.{name}.{j}"),
                                format!("{h:?} is not a header name"),
                            );
                        }
                    }
                }
                if f.timeout.is_zero() {
                    c.err(format!("{kf}.timeout"), "must be more than zero");
                }
            }
            if a.realm.bytes().any(|b| b < 0x20 || b == 0x7f) {
                c.err(
                    format!("{k}.auth.realm"),
                    "must not contain control characters",
                );
            }
        }
        if let Some(r) = &route.rate_limit {
            if !(r.requests_per_second.is_finite() && r.requests_per_second > 0.0) {
                c.err(
                    format!("{k}.rate_limit.requests_per_second"),
                    "must be more than zero",
                );
            }
            if r.burst == 0 {
                c.err(format!("{k}.rate_limit.burst"), "must be at least 1");
            }
            check_cidrs(
                &mut c,
                &format!("{k}.rate_limit.trusted_proxies"),
                &r.trusted_proxies,
            );
        }
        if let Some(a) = &route.access {
            for (name, list) in [
                ("allow", &a.allow),
                ("deny", &a.deny),
                ("trusted_proxies", &a.trusted_proxies),
            ] {
                check_cidrs(&mut c, &format!("{k}.access.{name}"), list);
            }
        }

        check_rules(&mut c, &k, route);
        if let Some(cache) = &route.cache {
            check_cache(&mut c, &k, cache, route.proxy.is_some());
            if let Some(dir) = &cache.disk_path {
                if let Some(other) = disk_paths.iter().find(|(_, d)| d == dir) {
                    c.err(
                        format!("{k}.cache.disk_path"),
                        format!("{} is {}.cache.disk_path already: each route's disk tier needs its own directory", dir.display(), other.0),
                    );
                }
                disk_paths.push((k.clone(), dir.clone()));
            }
        }

        if let Some(name) = &route.mount {
            if route.static_files.is_some() || route.proxy.is_some() {
                c.err(
                    format!("{k}.mount"),
                    "a route mounts one service: [routes.static], [routes.proxy] or mount, not two",
                );
            }
            if name.is_empty() {
                c.err(format!("{k}.mount"), "must name the Service mounted");
            }
            check_compression(&mut c, &k, &route.compression);
            continue;
        }
        if let Some(px) = &route.proxy {
            if route.static_files.is_some() {
                c.err(
                    k.clone(),
                    "a route mounts one service: [routes.static] or [routes.proxy], not both",
                );
            }
            check_proxy(&mut c, &k, px);
            check_compression(&mut c, &k, &route.compression);
            continue;
        }
        let Some(st) = route.static_files.as_mut() else {
            if !route.redirects_all() {
                c.err(
                    k,
                    "the route mounts no service: add a [routes.static] or [routes.proxy] table \
                     (or a [[routes.redirects]] for every path)",
                );
            }
            continue;
        };
        let (root_key, dir) = match &st.root {
            Some(r) => (format!("{k}.static.root"), r.clone()),
            None => ("root".to_string(), root.clone()),
        };
        if !dir.is_dir() {
            c.err(root_key, format!("{} is not a directory", dir.display()));
        }
        st.root = Some(dir);
        for (j, idx) in st.index.iter().enumerate() {
            if idx.is_empty() || idx.contains('/') || idx.starts_with('.') {
                c.err(format!("{k}.static.index.{j}"), "must be a plain file name");
            }
        }
        if let Some(page) = &st.not_found_page {
            if Path::new(page).is_absolute() || page.split('/').any(|s| s == "..") {
                c.err(
                    format!("{k}.static.not_found_page"),
                    "must be a path relative to the root, without '..'",
                );
            }
        }
        for (j, t) in st.try_files.iter().enumerate() {
            if let Err(e) = gatehouse_layers::template::Template::parse_path(t) {
                c.err(format!("{k}.static.try_files.{j}"), e.to_string());
            }
        }
        if let Some(cc) = &st.cache_control {
            if cc.bytes().any(|b| b < 0x20 || b == 0x7f) {
                c.err(
                    format!("{k}.static.cache_control"),
                    "must not contain control characters",
                );
            }
        }
        let ofc = &st.open_file_cache;
        if ofc.max_entries == 0 {
            c.err(
                format!("{k}.static.open_file_cache.max_entries"),
                "must be at least 1",
            );
        }
        if ofc.inline_max > ofc.max_bytes {
            c.err(
                format!("{k}.static.open_file_cache.inline_max"),
                "must not exceed max_bytes",
            );
        }
        if !ofc.strict && ofc.valid.is_zero() {
            c.err(
                format!("{k}.static.open_file_cache.valid"),
                "must be longer than zero when strict = false",
            );
        }
        check_compression(&mut c, &k, &route.compression);
    }

    if c.errors.is_empty() {
        Ok(())
    } else {
        Err(ConfigErrors(c.errors))
    }
}

fn check_cache(c: &mut Collector, k: &str, cache: &crate::CacheConfig, proxied: bool) {
    let kc = format!("{k}.cache");
    if !proxied {
        c.err(
            kc.clone(),
            "a response cache is for [routes.proxy] routes (static files have the open-file \
             cache, mounted Services their own)",
        );
    }
    if cache.max_bytes == 0 {
        c.err(format!("{kc}.max_bytes"), "must be more than zero");
    }
    if cache.max_entries == 0 {
        c.err(format!("{kc}.max_entries"), "must be at least 1");
    }
    if cache.max_object_bytes == 0 || cache.max_object_bytes > cache.max_bytes {
        c.err(
            format!("{kc}.max_object_bytes"),
            "must be more than zero and at most max_bytes",
        );
    }
    for (j, h) in cache.key_headers.iter().enumerate() {
        if http::HeaderName::try_from(h.as_str()).is_err() {
            c.err(
                format!("{kc}.key_headers.{j}"),
                format!("{h:?} is not a header name"),
            );
        }
    }
    for (j, name) in cache.key_cookies.iter().enumerate() {
        // RFC 6265 §4.1.1: a cookie name is a token.
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if name.is_empty() || !name.bytes().all(token) {
            c.err(
                format!("{kc}.key_cookies.{j}"),
                format!("{name:?} is not a cookie name"),
            );
        }
    }
    if cache.disk_path.is_some() && cache.disk_max_bytes == 0 {
        c.err(format!("{kc}.disk_max_bytes"), "must be more than zero");
    }
    if cache.lock && cache.lock_timeout.is_zero() {
        c.err(
            format!("{kc}.lock_timeout"),
            "must be more than zero while lock is on",
        );
    }
}

fn check_compression(c: &mut Collector, k: &str, comp: &crate::CompressionConfig) {
    let kc = format!("{k}.compression");
    for (key, ok, range) in [
        ("gzip_level", (1..=9).contains(&comp.gzip_level), "1 to 9"),
        ("br_level", comp.br_level <= 11, "0 to 11"),
        ("zstd_level", (1..=22).contains(&comp.zstd_level), "1 to 22"),
    ] {
        if !ok {
            c.err(format!("{kc}.{key}"), format!("must be {range}"));
        }
    }
    let mut seen = HashSet::new();
    if comp.encodings.iter().any(|e| !seen.insert(*e)) {
        c.err(format!("{kc}.encodings"), "lists a coding twice");
    }
    if comp.cache_max_bytes < comp.max_size {
        c.err(
            format!("{kc}.cache_max_bytes"),
            "must be at least max_size: a variant larger than the cache is never kept, so it would be compressed again on every request",
        );
    }
    if comp.min_size > comp.max_size {
        c.err(format!("{kc}.min_size"), "must not exceed max_size");
    }
    for (j, t) in comp.types.iter().enumerate() {
        let ok = t.split_once('/').is_some_and(|(a, b)| {
            !a.is_empty()
                && !b.is_empty()
                && t.bytes()
                    .all(|c| c.is_ascii_graphic() && c != b';' && c != b',')
        });
        if !ok {
            c.err(
                format!("{kc}.types.{j}"),
                format!(
                    "{t:?} is not a media type pattern (type/subtype, type/* or type/*+suffix)"
                ),
            );
        }
    }
}

fn check_proxy(c: &mut Collector, k: &str, px: &crate::ProxyConfig) {
    let kp = format!("{k}.proxy");
    if px.max_response_header_bytes < 8192 {
        c.err(
            format!("{kp}.max_response_header_bytes"),
            "must be at least 8192",
        );
    }
    if px.upstreams.is_empty() {
        c.err(format!("{kp}.upstreams"), "at least one upstream is needed");
    }
    for (j, u) in px.upstreams.iter().enumerate() {
        match u.url.parse::<http::Uri>() {
            Ok(uri) => {
                let scheme_ok = matches!(uri.scheme_str(), Some("http") | Some("https"));
                let path_ok = uri.path_and_query().is_none_or(|pq| pq.as_str() == "/");
                if !scheme_ok || uri.host().is_none() {
                    c.err(
                        format!("{kp}.upstreams.{j}"),
                        format!("{:?} is not an http:// or https:// URL with a host", u.url),
                    );
                } else if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
                    c.err(
                        format!("{kp}.upstreams.{j}"),
                        "an upstream URL carries no user or password",
                    );
                } else if !path_ok {
                    c.err(
                        format!("{kp}.upstreams.{j}"),
                        "an upstream URL has no path; use the route's path to map prefixes",
                    );
                }
            }
            Err(e) => c.err(format!("{kp}.upstreams.{j}"), format!("{:?}: {e}", u.url)),
        }
        if u.weight == 0 || u.weight > 1000 {
            c.err(format!("{kp}.upstreams.{j}.weight"), "must be 1 to 1000");
        }
    }
    for (key, f) in [
        ("tls_ca", &px.tls_ca),
        ("tls_client_cert", &px.tls_client_cert),
        ("tls_client_key", &px.tls_client_key),
    ] {
        if let Some(f) = f {
            if !f.is_file() {
                c.err(
                    format!("{kp}.{key}"),
                    format!("{} is not a readable file", f.display()),
                );
            }
        }
    }
    if px.tls_client_cert.is_some() != px.tls_client_key.is_some() {
        c.err(
            format!("{kp}.tls_client_cert"),
            "tls_client_cert and tls_client_key go together",
        );
    }
    for (j, u) in px.upgrades.iter().enumerate() {
        // RFC 9110 §7.8: a protocol name is a token, with an optional `/version`.
        let token = |t: &str| {
            !t.is_empty()
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        };
        let ok = match u.split_once('/') {
            Some((name, version)) => token(name) && token(version),
            None => token(u),
        };
        if !ok {
            c.err(
                format!("{kp}.upgrades.{j}"),
                format!("{u:?} is not a protocol name"),
            );
        } else if u.eq_ignore_ascii_case("h2c") || u.to_ascii_lowercase().starts_with("h2c/") {
            c.err(
                format!("{kp}.upgrades.{j}"),
                "h2c is never relayed: the upgraded bytes would skip the route's checks",
            );
        }
    }
    let h = px.hash_on.as_str();
    let hash_ok = h == "client_ip"
        || h.strip_prefix("header:")
            .is_some_and(|n| http::HeaderName::from_bytes(n.as_bytes()).is_ok())
        || h.strip_prefix("cookie:").is_some_and(|n| !n.is_empty());
    if !hash_ok {
        c.err(
            format!("{kp}.hash_on"),
            "use client_ip, header:<name> or cookie:<name>",
        );
    }
    for (key, d) in [
        ("connect_timeout", px.connect_timeout),
        ("response_timeout", px.response_timeout),
        ("body_idle_timeout", px.body_idle_timeout),
    ] {
        if d.is_zero() {
            c.err(format!("{kp}.{key}"), "must be longer than zero");
        }
    }
    if px.connect_timeout >= px.response_timeout {
        c.err(
            format!("{kp}.connect_timeout"),
            "must be shorter than response_timeout, which includes it",
        );
    }
    check_cidrs(c, &format!("{kp}.trusted_proxies"), &px.trusted_proxies);
    if let Some(hc) = &px.health_check {
        if hc.interval.is_zero() || hc.timeout.is_zero() {
            c.err(
                format!("{kp}.health_check"),
                "interval and timeout must be longer than zero",
            );
        }
        if !hc.path.starts_with('/') {
            c.err(format!("{kp}.health_check.path"), "must start with '/'");
        }
        if !(100..=599).contains(&hc.expect_status) {
            c.err(
                format!("{kp}.health_check.expect_status"),
                "must be an HTTP status",
            );
        }
        if hc.healthy == 0 || hc.unhealthy == 0 {
            c.err(
                format!("{kp}.health_check"),
                "healthy and unhealthy must be at least 1",
            );
        }
    }
}

fn check_host(host: &str) -> Result<(), String> {
    let bare = host.strip_prefix("*.").unwrap_or(host);
    if bare.is_empty() {
        return Err("empty host name".into());
    }
    if bare.contains('*') {
        return Err(
            "a wildcard is only allowed as the first label, as in \"*.example.com\"".into(),
        );
    }
    let ok = bare.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    });
    if !ok {
        return Err(format!("{host:?} is not a valid host name"));
    }
    Ok(())
}

/// A proxied body is read 64 KiB at a time, and a grant is counted in u32.
fn check_h2_send_buffer(c: &mut Collector, l: &crate::schema::Limits) {
    const MAX: usize = u32::MAX as usize;
    if !(65_536..=MAX).contains(&l.h2_send_buffer) {
        c.err(
            "limits.h2_send_buffer",
            format!("must be from 65536 to {MAX} bytes"),
        );
    } else if l.h2_send_buffer_total < l.h2_send_buffer {
        c.err(
            "limits.h2_send_buffer_total",
            "must be at least limits.h2_send_buffer",
        );
    }
}

fn check_tls(c: &mut Collector, config: &mut Config) {
    let proxy_protocol = config.proxy_protocol;
    if let Some(tls) = &mut config.tls {
        if tls.listen.is_empty() {
            c.err("tls.listen", "at least one address is needed");
        }
        if tls.certs.is_empty() && config.acme.is_none() {
            c.err(
                "tls.certs",
                "at least one certificate is needed (or certificates from [acme])",
            );
        }
        for (i, cert) in tls.certs.iter_mut().enumerate() {
            for (j, name) in cert.names.iter_mut().enumerate() {
                *name = name.to_ascii_lowercase();
                if let Err(why) = check_host(name) {
                    c.err(format!("tls.certs.{i}.names.{j}"), why);
                }
            }
        }
        if let Some(h) = &tls.hsts {
            if !h.trim_start().to_ascii_lowercase().starts_with("max-age=") || http_value_invalid(h)
            {
                c.err(
                    "tls.hsts",
                    "must be a header value starting with max-age= (RFC 6797 \u{a7}6.1)",
                );
            }
        }
        if tls.handshake_timeout.is_zero() {
            c.err("tls.handshake_timeout", "must be longer than zero");
        }
        if tls.watch_interval.is_zero() {
            c.err("tls.watch_interval", "must be longer than zero");
        }
        if !(1..=10_000).contains(&tls.http3_max_streams) {
            c.err("tls.http3_max_streams", "must be from 1 to 10000");
        }
        if tls.http3_early_data && !tls.http3_on(proxy_protocol) {
            c.err(
                "tls.http3_early_data",
                match tls.http3 {
                    Some(false) => "needs HTTP/3, which tls.http3 = false turns off",
                    _ => "needs HTTP/3, which is off by default with proxy_protocol: set tls.http3 = true",
                },
            );
        }
        // quinn: 0.5-RTT data "should not be used to send data for which client
        // authentication is being used"; early data is answered before the client's Finished.
        if tls.http3_early_data && tls.client_ca.is_some() {
            c.err(
                "tls.http3_early_data",
                "not with tls.client_ca (mTLS): early data is answered before the client has finished its handshake",
            );
        }
    }
    let Some(acme) = &mut config.acme else {
        return;
    };
    if config.tls.is_none() {
        c.err(
            "acme",
            "ACME certificates are served on HTTPS listeners: add a [tls] table",
        );
    }
    if !(acme.directory.starts_with("https://") || acme.directory.starts_with("http://")) {
        c.err("acme.directory", "must be an http(s):// URL");
    }
    if acme.certificates.is_empty() {
        c.err("acme.certificates", "at least one certificate is needed");
    }
    let mut seen = HashSet::new();
    for (i, cert) in acme.certificates.iter_mut().enumerate() {
        if cert.domains.is_empty() {
            c.err(
                format!("acme.certificates.{i}.domains"),
                "at least one domain is needed",
            );
        }
        for (j, d) in cert.domains.iter_mut().enumerate() {
            *d = d.to_ascii_lowercase();
            if let Err(why) = check_host(d) {
                c.err(format!("acme.certificates.{i}.domains.{j}"), why);
            } else if d.starts_with('*') && acme.challenge == crate::Challenge::Http01 {
                c.err(
                    format!("acme.certificates.{i}.domains.{j}"),
                    "wildcard names need the dns-01 challenge, which gatehouse does not do",
                );
            }
        }
        if let Some(first) = cert.domains.first() {
            if !seen.insert(first.clone()) {
                c.err(
                    format!("acme.certificates.{i}.domains"),
                    format!("another certificate already starts with {first:?}"),
                );
            }
        }
    }
    if acme.eab_kid.is_some() != acme.eab_hmac_key.is_some() {
        c.err(
            "acme.eab_kid",
            "External Account Binding needs both eab_kid and eab_hmac_key",
        );
    }
    if acme.retry_min.is_zero() || acme.retry_min > acme.retry_max {
        c.err(
            "acme.retry_min",
            "must be longer than zero and no longer than retry_max",
        );
    }
}

fn http_value_invalid(v: &str) -> bool {
    v.bytes().any(|b| b < 0x20 && b != b'\t' || b == 0x7f)
}

/// Each entry of the list at `key` must be an address or a CIDR block.
fn check_cidrs(c: &mut Collector, key: &str, list: &[String]) {
    for (j, cidr) in list.iter().enumerate() {
        if crate::parse_cidr(cidr).is_none() {
            c.err(
                format!("{key}.{j}"),
                format!("{cidr:?} is not an address or CIDR such as 10.0.0.0/8"),
            );
        }
    }
}

fn is_http_url(u: &str) -> bool {
    u.parse::<http::Uri>()
        .is_ok_and(|uri| matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some())
}

fn check_jwt(c: &mut Collector, k: &str, j: &crate::JwtConfig) {
    match (&j.key_file, &j.jwks_url) {
        (Some(f), None) if !f.is_file() => c.err(
            format!("{k}.key_file"),
            format!("{} is not a file", f.display()),
        ),
        (None, Some(u)) if !is_http_url(u) => c.err(
            format!("{k}.jwks_url"),
            format!("{u:?} is not an http:// or https:// URL with a host"),
        ),
        (Some(_), Some(_)) | (None, None) => {
            c.err(k.to_string(), "set one of key_file or jwks_url")
        }
        _ => {}
    }
    if j.jwks_timeout.is_zero() {
        c.err(format!("{k}.jwks_timeout"), "must be more than zero");
    }
    if j.jwks_refresh_min < std::time::Duration::from_millis(100) {
        // Else every token with a made-up kid would send gatehouse to the key server.
        c.err(format!("{k}.jwks_refresh_min"), "must be at least 100ms");
    }
    if j.jwks_refresh < j.jwks_refresh_min {
        c.err(
            format!("{k}.jwks_refresh"),
            "must not be shorter than jwks_refresh_min",
        );
    }
    for (claim, values) in &j.require {
        if values.is_empty() {
            c.err(
                format!("{k}.require.{claim}"),
                "list at least one accepted value",
            );
        }
    }
}

/// The admin listener's keys; the token, from `admin_token` or `admin_token_file`, goes
/// to `admin_token_resolved`.
fn check_admin(c: &mut Collector, config: &mut Config) {
    if config.admin_max_connections == 0 {
        c.err(
            "admin_max_connections",
            "must be at least 1 (the admin listener always has a cap)",
        );
    }
    let (key, token) = match (&config.admin_token, &config.admin_token_file) {
        (Some(_), Some(_)) => {
            c.err(
                "admin_token_file",
                "set admin_token or admin_token_file, not both",
            );
            return;
        }
        (Some(t), None) => ("admin_token", t.expose().to_string()),
        (None, Some(f)) => match std::fs::read_to_string(f) {
            Ok(text) => (
                "admin_token_file",
                text.trim_end_matches(['\n', '\r']).to_string(),
            ),
            Err(e) => {
                c.err("admin_token_file", format!("{}: {e}", f.display()));
                return;
            }
        },
        (None, None) => return,
    };
    if let Err(why) = check_token(&token) {
        c.err(key, why);
        return;
    }
    config.admin_token_resolved = Some(crate::Secret::new(token));
}

/// A bearer token as RFC 6750 §2.1 spells one (`b64token`), long enough not to be guessed.
fn check_token(t: &str) -> Result<(), &'static str> {
    let body = t.trim_end_matches('=');
    if !body
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b))
        || body.is_empty()
    {
        return Err(
            "must be a bearer token: letters, digits and -._~+/, then any '=' \
                    (RFC 6750 \u{a7}2.1), with no spaces",
        );
    }
    if t.len() < 16 {
        return Err("must be at least 16 characters (openssl rand -hex 32 makes a good one)");
    }
    Ok(())
}

/// Header rules, redirects, rewrites and request IDs: each rule is made as the layers
/// will make it, and an error names its key.
fn check_rules(c: &mut Collector, k: &str, route: &Route) {
    if let Some(h) = &route.headers {
        for (side, list, response) in [
            ("response", &h.response, true),
            ("request", &h.request, false),
        ] {
            for (j, r) in list.iter().enumerate() {
                let at = if list.len() > 1 {
                    format!("{k}.headers.{side}.{j}")
                } else {
                    format!("{k}.headers.{side}")
                };
                if let Err(e) = r.rules(response) {
                    c.err(format!("{at}.{}", e.key), e.reason);
                }
            }
        }
        if !h.request.is_empty() && route.proxy.is_none() {
            c.err(
                format!("{k}.headers.request"),
                "request header rules are for what a proxy route sends upstream",
            );
        }
    }
    for (j, r) in route.redirects.iter().enumerate() {
        if let Err(e) = r.rule() {
            c.err(format!("{k}.redirects.{j}.{}", e.key), e.reason);
        }
    }
    for (j, r) in route.rewrites.iter().enumerate() {
        if let Err(e) = r.rule() {
            c.err(format!("{k}.rewrites.{j}.{}", e.key), e.reason);
        }
    }
    for (status, page) in &route.error_pages {
        let key = format!("{k}.error_pages.{status}");
        if !status
            .parse::<u16>()
            .is_ok_and(|s| (400..=599).contains(&s))
        {
            c.err(
                &key,
                format!("{status:?} is not an error status (400 to 599)"),
            );
        }
        if !page.starts_with('/') || page.split('/').any(|s| s == ".." || s == ".") {
            c.err(
                &key,
                format!("{page:?} must be a path under the root: starting with '/', no '..'"),
            );
        }
    }
    if let Some(cors) = &route.cors {
        check_cors(c, &format!("{k}.cors"), cors);
    }
    if let Some(id) = &route.request_id {
        // A field that means something else to the upstream would be overwritten by the ID.
        const TAKEN: &[&str] = &[
            "host",
            "authorization",
            "cookie",
            "content-length",
            "content-type",
            "transfer-encoding",
            "connection",
            "te",
            "upgrade",
            "forwarded",
            "x-forwarded-for",
            "x-forwarded-proto",
            "x-forwarded-host",
            "via",
        ];
        if http::HeaderName::from_bytes(id.header.as_bytes()).is_err() {
            c.err(
                format!("{k}.request_id.header"),
                format!("{:?} is not a header field name", id.header),
            );
        } else if TAKEN.contains(&id.header.to_ascii_lowercase().as_str()) {
            c.err(
                format!("{k}.request_id.header"),
                format!(
                    "{:?} carries something else; name a field of the ID's own",
                    id.header
                ),
            );
        }
        check_cidrs(
            c,
            &format!("{k}.request_id.trusted_proxies"),
            &id.trusted_proxies,
        );
    }
}

fn check_cors(c: &mut Collector, k: &str, cors: &crate::CorsConfig) {
    let any = |list: &[String]| list.iter().any(|v| v == "*");
    if cors.allow_origins.is_empty() {
        c.err(
            format!("{k}.allow_origins"),
            "name the origins allowed (`https://app.example.com`), or `*` for any",
        );
    }
    for (key, list) in [
        ("allow_origins", &cors.allow_origins),
        ("allow_headers", &cors.allow_headers),
        ("expose_headers", &cors.expose_headers),
    ] {
        if any(list) && list.len() > 1 {
            c.err(format!("{k}.{key}"), "`*` stands alone");
        }
        if any(list) && cors.allow_credentials {
            c.err(
                format!("{k}.{key}"),
                "`*` can't be used with allow_credentials = true (the Fetch standard: a \
                 browser refuses it); list the values",
            );
        }
    }
    for (j, o) in cors.allow_origins.iter().enumerate() {
        let ok = o == "*"
            || ((o.starts_with("https://") || o.starts_with("http://"))
                && !o.ends_with('/')
                && o.parse::<http::Uri>().is_ok_and(|u| {
                    u.host().is_some() && u.path_and_query().is_none_or(|p| p.as_str() == "/")
                }));
        if !ok {
            c.err(
                format!("{k}.allow_origins.{j}"),
                format!("{o:?} is not an origin: a scheme and host (and port), no path, as `https://app.example.com`"),
            );
        }
    }
    for (j, m) in cors.allow_methods.iter().enumerate() {
        if m == "*" {
            if cors.allow_credentials {
                c.err(
                    format!("{k}.allow_methods"),
                    "`*` can't be used with allow_credentials = true; list the methods",
                );
            }
        } else if http::Method::from_bytes(m.as_bytes()).is_err() {
            c.err(
                format!("{k}.allow_methods.{j}"),
                format!("{m:?} is not a method"),
            );
        }
    }
    for (key, list) in [
        ("allow_headers", &cors.allow_headers),
        ("expose_headers", &cors.expose_headers),
    ] {
        for (j, h) in list.iter().enumerate() {
            if h != "*" && http::HeaderName::from_bytes(h.as_bytes()).is_err() {
                c.err(
                    format!("{k}.{key}.{j}"),
                    format!("{h:?} is not a header field name"),
                );
            }
        }
    }
}

fn check_access_log(c: &mut Collector<'_>, k: &str, log: &crate::AccessLogConfig) {
    if log.path.is_empty() {
        c.err(format!("{k}.path"), "a file path, or \"stdout\"");
    } else if log.path != "stdout" {
        let parent = Path::new(&log.path)
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if !parent.is_dir() {
            c.err(
                format!("{k}.path"),
                format!("{} is not a directory", parent.display()),
            );
        }
    }
    if log.max_pending == 0 {
        c.err(format!("{k}.max_pending"), "must be at least 1");
    }
}
