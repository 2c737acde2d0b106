//! Routes requests to the configured routes' Services.
//!
//! Selection follows nginx: the host picks a group of routes first (exact name, then the
//! longest matching `*.suffix`, then the routes with no host), then the longest path prefix
//! within the group, on whole segments. The prefix is stripped before the route's Service
//! sees the path.
//!
//! [`GatewayRouter`] is a tower `Service` (so it can be mounted in an axum app, say with
//! `Router::fallback_service`); the server drives it through a per-connection hyper Service.
//! It is not an `axum::Router` inside: measured on `static-1k`, axum's routing and the
//! boxing of bodies and futures it needs cost about 1.7 µs per request (8% of the whole),
//! and the table below does the same selection with no allocation. Each route's Service is
//! its tower layer stack over the Service it mounts.

mod stack;

pub use stack::RouteBody;
use stack::{
    Boxed, Decided, Endpoint, GuardLayer, InnerFuture, ObserveFuture, ObserveLayer, RouteProxy,
    RouteService, Stack,
};

use crate::body::{GateBody, ObservedBody};
use crate::http_util::{plain, strip_port};
use crate::proxy::{ConnInfo, Proxy};
use crate::static_files::StaticFiles;
use arc_swap::ArcSwap;
use gatehouse_config::{
    AccessLogConfig, Coding, CompressionConfig, Config, LogFormat, Route, StaticConfig,
};
use gatehouse_layers::access_log::{AccessLog, Destination, Format, LogWriter, Record, Rotation};
use gatehouse_layers::auth::{
    Auth, AuthLayer, BasicAuth, ForwardAuth, ForwardOptions, JwksOptions, JwtAuth, JwtOptions,
};
use gatehouse_layers::cidr::{client_ip, CidrSet};
use gatehouse_layers::cors::CorsLayer;
use gatehouse_layers::error_pages::ErrorPagesLayer;
use gatehouse_layers::headers::HeadersLayer;
use gatehouse_layers::ip_filter::{IpFilterLayer, IpRules};
use gatehouse_layers::metrics::RouteMetrics;
use gatehouse_layers::open_file_cache::{CacheOptions, FileCache, Resolver};
use gatehouse_layers::path::{loose, loose_trimmed};
use gatehouse_layers::precompress::{
    DefaultPredicate, Encoding, Levels, PrecompressLayer, Predicate,
};
use gatehouse_layers::rate_limit::{RateLimitLayer, RateLimiter};
use gatehouse_layers::redirect::RedirectLayer;
use gatehouse_layers::request_id::RequestIdLayer;
use gatehouse_layers::rewrite::RewriteLayer;
use http::uri::PathAndQuery;
use http::{HeaderValue, Request, Response, StatusCode, Uri};
use pin_project_lite::pin_project;
use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_layer::Layer;
use tower_service::Service;

/// A program's own Service as a route's: its request and response bodies boxed. Only the
/// routes that mount one pay for the boxes.
pub type MountedService = tower::util::BoxCloneSyncService<
    Request<axum::body::Body>,
    Response<axum::body::Body>,
    Infallible,
>;

/// The Services a program mounts by name: a route with `mount = "name"` serves the one of
/// that name (after its prefix is stripped, and behind its access log, IP rules, rate
/// limit, auth and metrics). See [`build_with`].
///
/// ```
/// use axum::routing::get;
/// let app = axum::Router::new().route("/", get(|| async { "hello" }));
/// let mounts = gatehouse::router::Mounts::new().mount("app", app);
/// # let _ = mounts;
/// ```
#[derive(Clone, Default)]
pub struct Mounts {
    by_name: HashMap<String, MountedService>,
}

impl Mounts {
    pub fn new() -> Self {
        Mounts::default()
    }

    /// Mounts `svc` as `name`: an `axum::Router`, or any tower Service that never fails.
    pub fn mount<S, B>(mut self, name: impl Into<String>, svc: S) -> Self
    where
        S: Service<Request<axum::body::Body>, Response = Response<B>, Error = Infallible>
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
        B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
        B::Error: Into<crate::http_util::BoxError>,
    {
        use tower::ServiceExt;
        let svc = svc.map_response(|res: Response<B>| res.map(axum::body::Body::new));
        self.by_name
            .insert(name.into(), tower::util::BoxCloneSyncService::new(svc));
        self
    }
}

/// What the routing decision reads of a route: where it is mounted and how the path goes
/// on to its Service.
#[derive(Clone)]
pub(crate) struct PathRule {
    /// `""` for the root route, else `/segment[/segment…]` without a trailing slash.
    prefix: Box<str>,
    /// The prefix is taken off the path before the Service sees it (always for static
    /// files; for a proxy when `strip_prefix` is set).
    strip: bool,
    /// A proxy's `strict_paths`: `;` and double encoding are refused.
    strict_paths: bool,
    /// A proxy: its upstream gets the target as received, and reads it in its own way.
    proxied: bool,
    /// The prefix as a lenient reader compares it: decoded, in lower case.
    loose: Box<str>,
}

impl PathRule {
    /// The rule of a route configured at `path` (validated: starts with `/`).
    pub(crate) fn new(path: &str, strip: bool, strict_paths: bool, proxied: bool) -> PathRule {
        let prefix: Box<str> = if path == "/" {
            "".into()
        } else {
            path.trim_end_matches('/').into()
        };
        let loose = gatehouse_layers::path::loose(&prefix).into();
        PathRule {
            prefix,
            strip,
            strict_paths,
            proxied,
            loose,
        }
    }

    /// Whether `path` is under the prefix, on whole segments.
    fn matches(&self, path: &str) -> bool {
        path.starts_with(&*self.prefix)
            && matches!(path.as_bytes().get(self.prefix.len()), None | Some(b'/'))
    }
}

/// A route as the routing decision sees it: the table's entries, and the bare rules of
/// the fuzz targets.
pub(crate) trait Ruled {
    fn rule(&self) -> &PathRule;
}

impl Ruled for PathRule {
    fn rule(&self) -> &PathRule {
        self
    }
}

#[derive(Clone)]
struct RouteEntry {
    rule: PathRule,
    /// The route's place in the configuration: with the table's generation, what a
    /// connection's cached stack is known by.
    id: usize,
    stack: Stack,
    /// Some layer reads the client from the request's extensions (IP rules, rate limit,
    /// auth): it is given a `ClientAddr`.
    client: bool,
}

/// One route's handles, made once per route name for the life of the process: a reload
/// keeps counting into the same series, and requests reach them through a plain
/// reference (no reference count bounced between cores).
fn route_metrics(name: &str) -> &'static RouteMetrics {
    static MADE: std::sync::OnceLock<std::sync::Mutex<HashMap<String, &'static RouteMetrics>>> =
        std::sync::OnceLock::new();
    let made = MADE.get_or_init(Default::default);
    let mut made = made.lock().unwrap_or_else(|e| e.into_inner());
    made.entry(name.to_string())
        .or_insert_with(|| Box::leak(Box::new(RouteMetrics::new(name))))
}

/// The label of requests no route took (a bad path, no route for it, a redirect to
/// HTTPS, an ACME challenge).
pub(crate) const UNROUTED: &str = "(none)";

/// A route's caches, for the metrics.
#[derive(Clone)]
pub(crate) struct RouteCaches {
    pub(crate) route: String,
    pub(crate) files: Option<gatehouse_layers::open_file_cache::FileCache>,
    pub(crate) variants: Option<gatehouse_layers::precompress::VariantCache>,
    /// The response cache's store (`[routes.cache]`).
    pub(crate) responses: Option<gatehouse_layers::cache::ResponseStore>,
    /// What the store was made for, so that a reload keeps it for the same route and
    /// settings (nginx keeps its cache zones across a reload).
    pub(crate) made_for: Option<StoreFor>,
}

/// What a response store was made for: its route, but for what changes only who may ask
/// (IP rules, rate limits, redirects), how an answer is dressed above the cache (CORS,
/// compression, error pages, request IDs, the log), or how stored answers are used (the
/// stale windows, the lock, `Cache-Status`). A store is kept across a reload only where
/// these are equal. Anything else changed (the upstreams, the fields sent to them, auth,
/// the key, the bounds) could have the store serve what the new route would not have
/// fetched, stored or keyed apart.
#[derive(Clone, PartialEq)]
pub(crate) struct StoreFor(Route);

impl StoreFor {
    fn of(route: &Route) -> Option<StoreFor> {
        route.cache.as_ref().filter(|c| c.enabled)?;
        if route.proxy.is_none() || route.mount.is_some() {
            return None;
        }
        let mut r = route.clone();
        r.access_log = None;
        r.access = None;
        r.rate_limit = None;
        r.request_id = None;
        r.cors = None;
        r.compression = Default::default();
        r.error_pages.clear();
        r.redirects.clear();
        if let Some(c) = r.cache.as_mut() {
            let d = gatehouse_config::CacheConfig::default();
            c.cache_status_header = d.cache_status_header;
            c.lock = d.lock;
            c.lock_timeout = d.lock_timeout;
            c.stale_while_revalidate = d.stale_while_revalidate;
            c.stale_if_error = d.stale_if_error;
            c.ignore_request_cache_control = d.ignore_request_cache_control;
        }
        Some(StoreFor(r))
    }
}

fn route_auth(i: usize, a: &gatehouse_config::AuthConfig) -> io::Result<Auth> {
    let err = |key: &str, e: &dyn std::fmt::Display| {
        io::Error::other(format!("routes.{i}.auth.{key}: {e}"))
    };
    if let Some(j) = &a.jwt {
        let o = JwtOptions {
            algorithms: j.algorithms.clone(),
            issuers: j.issuers.clone(),
            audiences: j.audiences.clone(),
            leeway: j.leeway,
            forward_claims: j
                .forward_claims
                .iter()
                .map(|(c, h)| (c.clone(), h.clone()))
                .collect(),
            require: j
                .require
                .iter()
                .map(|(c, v)| (c.clone(), v.clone()))
                .collect(),
            realm: a.realm.clone(),
        };
        let jwt = match (&j.key_file, &j.jwks_url) {
            (Some(f), _) => JwtAuth::from_key_file(f, &o),
            (None, Some(url)) => JwtAuth::from_jwks_url(
                url,
                &o,
                JwksOptions {
                    refresh: j.jwks_refresh,
                    refresh_min: j.jwks_refresh_min,
                    timeout: j.jwks_timeout,
                },
            ),
            (None, None) => return Err(err("jwt", &"set key_file or jwks_url")),
        };
        return jwt.map(Auth::Jwt).map_err(|e| err("jwt", &e));
    }
    if let Some(f) = &a.forward {
        let o = ForwardOptions {
            request_headers: f.request_headers.clone(),
            response_headers: f.response_headers.clone(),
            timeout: f.timeout,
            trusted_proxies: f
                .trusted_proxies
                .iter()
                .filter_map(|c| gatehouse_config::parse_cidr(c))
                .collect(),
        };
        return ForwardAuth::new(&f.url, &o)
            .map(Auth::Forward)
            .map_err(|e| err("forward", &e));
    }
    let file = a.htpasswd.clone().unwrap_or_default();
    BasicAuth::open(&file, &a.realm, a.cache_ttl)
        .map(|b| Auth::Basic(b.allow_users(a.users.iter().cloned())))
        .map_err(|e| err("htpasswd", &e))
}

/// A route's client IP rules, as the `ip_filter` layer reads them.
fn ip_rules(a: &gatehouse_config::AccessConfig) -> IpRules {
    let nets = |l: &[String]| {
        l.iter()
            .filter_map(|c| gatehouse_config::parse_cidr(c))
            .collect::<Vec<_>>()
    };
    IpRules::new(nets(&a.allow), nets(&a.deny), nets(&a.trusted_proxies))
}

#[derive(Clone, Default)]
struct Group {
    /// Longest prefix first.
    routes: Vec<RouteEntry>,
    /// Some prefix reads otherwise loosely (upper case, an escape, a segment's trailing dot):
    /// then even the longest route's path, or a plain path, is read loosely.
    loose_prefixes: bool,
}

struct Table {
    exact: HashMap<Box<str>, Group>,
    /// `.example.com` for `*.example.com`, longest first.
    wildcard: Vec<(Box<str>, Group)>,
    any: Group,
    by_host: bool,
    /// Each proxy once (a route is in as many groups as it has hosts), for background work.
    proxies: Vec<Proxy>,
    caches: Vec<RouteCaches>,
    /// `[access_log]`: where requests no route answers are logged.
    unrouted_log: Option<AccessLog>,
    /// Unique to this table in the process.
    generation: u64,
}

/// The gateway's router, built from the configuration. Clones share one table, which a
/// reload swaps atomically: a request routes on the table current when it arrives and
/// finishes on it.
///
/// A route's Service is a tower stack, called through `&mut`: each clone of the router
/// (each connection takes one) keeps its own copy of the last route it called, so that a
/// request doesn't clone a stack, whose reference counts every core would write.
pub struct GatewayRouter {
    table: Arc<ArcSwap<Table>>,
    /// Where requests no route took are counted; `None` with metrics off.
    unrouted: Option<&'static RouteMetrics>,
    /// One writer per log destination, shared by the routes (and the tables) that name it.
    logs: Arc<std::sync::Mutex<HashMap<Destination, LogWriter>>>,
    /// What routes with `mount` serve, kept for reloads.
    mounts: Arc<Mounts>,
    /// This clone's copy of the stack it called last. A mutex because the server's Service
    /// is shared by a connection's HTTP/2 streams and HTTP/3 requests. HTTP/2's are called
    /// from the connection's task; an HTTP/3 request that waited for its body's end calls
    /// from its own task, on another thread in `runtime = "shared"`. `try_lock` never
    /// waits: when it fails (contended, or poisoned by a panic), the call clones the stack.
    last: std::sync::Mutex<Option<Cached>>,
}

/// A route's stack as a router clone keeps it: known by its table and its place there.
struct Cached {
    table: u64,
    route: usize,
    stack: Stack,
}

impl Clone for GatewayRouter {
    fn clone(&self) -> Self {
        GatewayRouter {
            table: self.table.clone(),
            unrouted: self.unrouted,
            logs: self.logs.clone(),
            mounts: self.mounts.clone(),
            last: std::sync::Mutex::new(None),
        }
    }
}

/// The router for `config`. Fails if a static root can't be opened, or a route mounts a
/// Service by name (that takes [`build_with`]).
pub fn build(config: &Config) -> io::Result<GatewayRouter> {
    build_with(config, Mounts::new())
}

/// The router for `config`, whose `mount` routes serve the Services in `mounts`. Fails if
/// a static root can't be opened, or a route names a Service `mounts` doesn't have.
pub fn build_with(config: &Config, mounts: Mounts) -> io::Result<GatewayRouter> {
    let logs = Arc::new(std::sync::Mutex::new(HashMap::new()));
    Ok(GatewayRouter {
        table: Arc::new(ArcSwap::from_pointee(build_table(
            config,
            &logs,
            config.metrics.enabled,
            &mounts,
            &[],
        )?)),
        unrouted: config.metrics.enabled.then(|| route_metrics(UNROUTED)),
        logs,
        mounts: Arc::new(mounts),
        last: std::sync::Mutex::new(None),
    })
}

type Logs = std::sync::Mutex<HashMap<Destination, LogWriter>>;

/// The access log configured at `at` (`routes.0.access_log`), with the writer of its
/// destination (opened once, and shared).
fn access_log(at: &str, cfg: &AccessLogConfig, logs: &Logs) -> io::Result<AccessLog> {
    let key = |f: &str| format!("{at}.{f}");
    let format = match &cfg.template {
        Some(t) => Format::template(t)
            .map_err(|e| io::Error::other(format!("{}: {e}", key("template"))))?,
        None => match cfg.format {
            LogFormat::Combined => Format::Combined,
            LogFormat::Common => Format::Common,
            LogFormat::Json => Format::Json,
        },
    };
    let dest = if cfg.path == "stdout" {
        Destination::Stdout
    } else {
        Destination::File(cfg.path.clone().into())
    };
    let mut logs = logs
        .lock()
        .map_err(|_| io::Error::other("access log registry poisoned"))?;
    let writer = match logs.get(&dest) {
        Some(w) => w.clone(),
        None => {
            let rotation = (cfg.max_size > 0).then_some(Rotation {
                max_bytes: cfg.max_size,
                keep: cfg.keep,
            });
            let w = LogWriter::open(dest.clone(), rotation, cfg.max_pending).map_err(|e| {
                io::Error::new(e.kind(), format!("{}: {}: {e}", key("path"), cfg.path))
            })?;
            logs.insert(dest, w.clone());
            w
        }
    };
    Ok(AccessLog::new(writer, format))
}

/// `metrics`: whether requests are measured, as decided at start (a reload can't change it).
/// `previous`: the caches of the table being replaced, whose response stores the same
/// routes keep.
fn build_table(
    config: &Config,
    logs: &Logs,
    metrics: bool,
    mounts: &Mounts,
    previous: &[RouteCaches],
) -> io::Result<Table> {
    let mut exact: HashMap<Box<str>, Group> = HashMap::new();
    let mut wildcard: HashMap<Box<str>, Group> = HashMap::new();
    let mut any = Group::default();
    let mut proxies = Vec::new();
    let mut caches = Vec::new();
    for (i, route) in config.routes.iter().enumerate() {
        let log = match &route.access_log {
            Some(cfg) => Some(access_log(&format!("routes.{i}.access_log"), cfg, logs)?),
            None => None,
        };
        let made_for = StoreFor::of(route);
        let kept = made_for.as_ref().and_then(|m| {
            previous
                .iter()
                .find(|p| p.made_for.as_ref() == Some(m))
                .and_then(|p| p.responses.clone())
        });
        let svc = route_service(i, route, crate::rt::workers(config), mounts, kept)?;
        match &svc {
            RouteService::Proxy(p) => proxies.push(p.0.clone()),
            RouteService::ProxyCompressed(p) => proxies.push(p.get_ref().0.clone()),
            RouteService::Cached(c) => proxies.push(c.get_ref().0.clone()),
            RouteService::CachedCompressed(c) => proxies.push(c.get_ref().get_ref().0.clone()),
            _ => {}
        }
        let (files, variants) = match &svc {
            RouteService::Static(f) => (f.file_cache().cloned(), None),
            RouteService::Compressed(c) => (
                c.get_ref().file_cache().cloned(),
                Some(c.variant_cache().clone()),
            ),
            RouteService::Proxy(_) | RouteService::Mounted(_) => (None, None),
            RouteService::ProxyCompressed(c) => (None, Some(c.variant_cache().clone())),
            RouteService::CachedCompressed(c) => (None, Some(c.variant_cache().clone())),
            RouteService::Cached(_) => (None, None),
        };
        let responses = match &svc {
            RouteService::Cached(c) => Some(c.store().clone()),
            RouteService::CachedCompressed(c) => Some(c.get_ref().store().clone()),
            _ => None,
        };
        caches.push(RouteCaches {
            route: route.name().to_string(),
            files,
            variants,
            made_for: made_for.filter(|_| responses.is_some()),
            responses,
        });
        let proxied = matches!(
            svc,
            RouteService::Proxy(_)
                | RouteService::ProxyCompressed(_)
                | RouteService::Cached(_)
                | RouteService::CachedCompressed(_)
        );
        let mounted = matches!(svc, RouteService::Mounted(_));
        // Whose responses may say what a cache did: the route's own, or a mounted app's.
        let may_cache = mounted
            || matches!(
                svc,
                RouteService::Cached(_) | RouteService::CachedCompressed(_)
            );
        let rule = PathRule::new(
            &route.path,
            route.proxy.as_ref().is_none_or(|p| p.strip_prefix),
            route.proxy.as_ref().is_none_or(|p| p.strict_paths),
            proxied,
        );
        let strip = if rule.strip { rule.prefix.len() } else { 0 };
        let endpoint = Endpoint {
            svc,
            strip,
            // A mounted app gets its bare prefix as `/`, as axum's `nest_service` gives it.
            slash: strip > 0 && !proxied && !mounted,
        };
        let ip = route
            .access
            .as_ref()
            .map(|a| IpFilterLayer::from_rules(ip_rules(a)));
        let rate = route.rate_limit.as_ref().map(|r| {
            let trusted = CidrSet::new(
                r.trusted_proxies
                    .iter()
                    .filter_map(|c| gatehouse_config::parse_cidr(c)),
            );
            let limiter = RateLimiter::new(r.requests_per_second, r.burst);
            RateLimitLayer::with_key(limiter, move |parts: &http::request::Parts| {
                let peer = gatehouse_layers::client::client_addr_in(&parts.extensions)?;
                Some(client_ip(peer.ip(), &parts.headers, &trusted))
            })
        });
        let auth = match &route.auth {
            Some(a) => Some(AuthLayer::new(route_auth(i, a)?)),
            None => None,
        };
        let nested: Vec<&str> = config
            .routes
            .iter()
            .map(|r| r.path.trim_end_matches('/'))
            .filter(|p| {
                let own = route.path.trim_end_matches('/');
                p.len() > own.len() && p.starts_with(own) && p.as_bytes()[own.len()] == b'/'
            })
            .collect();
        let mut rules = RuleLayers::new(i, route, &config.root, &nested)?;
        // The request's ID extension only where something reads it: a template or an app.
        let reads_id = mounted || rules.reads_request_id();
        rules.request_id = rules.request_id.map(|l| l.request_extension(reads_id));
        // The layers that read the client from the request's extensions get them.
        let client_checks = ip.is_some() || rate.is_some() || auth.is_some();
        let client = client_checks || rules.reads_client();
        use tower::util::Either;
        let inner = if rules.any() && rules.response_only() && !client_checks {
            Either::Left(Either::Right(Boxed(Either::Right(
                tower::ServiceBuilder::new()
                    .option_layer(rules.request_id)
                    .option_layer(rules.response)
                    .option_layer(rules.pages)
                    .option_layer(rules.cors)
                    .service(endpoint),
            ))))
        } else if rules.any() {
            Either::Left(Either::Right(Boxed(Either::Left(
                tower::ServiceBuilder::new()
                    .option_layer(rules.request_id)
                    .option_layer(rules.response)
                    .option_layer(rules.pages)
                    .option_layer(rules.cors)
                    .option_layer(ip)
                    .option_layer(rate)
                    .layer(GuardLayer)
                    .option_layer(rules.redirect)
                    .option_layer(rules.rewrite)
                    .option_layer(auth)
                    .option_layer(rules.request)
                    .service(endpoint),
            ))))
        } else if client {
            Either::Left(Either::Left(
                tower::ServiceBuilder::new()
                    .option_layer(ip)
                    .option_layer(rate)
                    .layer(GuardLayer)
                    .option_layer(auth)
                    .service(endpoint),
            ))
        } else {
            Either::Right(endpoint)
        };
        let stack = ObserveLayer {
            cache_status: may_cache && log.as_ref().is_some_and(AccessLog::shows_cache_status),
            log,
            metrics: metrics.then(|| route_metrics(route.name())),
        }
        .layer(inner);
        let entry = RouteEntry {
            rule,
            id: i,
            stack,
            client,
        };
        if route.hosts.is_empty() {
            any.routes.push(entry.clone());
        }
        for host in &route.hosts {
            let host = host.to_ascii_lowercase();
            let group = match host.strip_prefix('*') {
                Some(suffix) => wildcard.entry(suffix.into()).or_default(),
                None => exact.entry(host.into()).or_default(),
            };
            group.routes.push(entry.clone());
        }
    }
    let sort = |g: &mut Group| g.loose_prefixes = order(&mut g.routes);
    sort(&mut any);
    exact.values_mut().for_each(sort);
    let mut wildcard: Vec<(Box<str>, Group)> = wildcard.into_iter().collect();
    wildcard.iter_mut().for_each(|(_, g)| sort(g));
    wildcard.sort_by_key(|(s, _)| std::cmp::Reverse(s.len()));
    let by_host = !exact.is_empty() || !wildcard.is_empty();
    let unrouted_log = match &config.access_log {
        Some(cfg) => Some(access_log("access_log", cfg, logs)?),
        None => None,
    };
    static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    Ok(Table {
        unrouted_log,
        exact,
        wildcard,
        any,
        by_host,
        proxies,
        caches,
        generation: GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
    })
}

fn route_service(
    i: usize,
    route: &Route,
    slots: usize,
    mounts: &Mounts,
    kept: Option<gatehouse_layers::cache::ResponseStore>,
) -> io::Result<RouteService> {
    if let Some(name) = &route.mount {
        return match mounts.by_name.get(name) {
            Some(svc) => Ok(RouteService::Mounted(svc.clone())),
            None => Err(io::Error::other(format!(
                "routes.{i}.mount: no Service is mounted as {name:?} (a program built on the \
                 gatehouse library mounts them with router::Mounts; the gatehouse binary \
                 mounts none)"
            ))),
        };
    }
    if let Some(px) = &route.proxy {
        let mut proxy = Proxy::with_slots(px, slots)?;
        // For the access log, and for `$upstream_addr` in a header rule.
        // And for error pages, which pass an upstream's own responses on.
        if route.access_log.is_some() || route.headers.is_some() || !route.error_pages.is_empty() {
            proxy = proxy.with_upstream_info();
        }
        if let Some(h) = &route.headers {
            let set: Vec<http::HeaderName> = h
                .request
                .iter()
                .flat_map(|r| r.set.keys())
                .filter_map(|k| http::HeaderName::from_bytes(k.as_bytes()).ok())
                .collect();
            proxy = proxy.keeping_fields(&set);
        }
        let cache = match route.cache.as_ref().filter(|c| c.enabled) {
            Some(c) => {
                let trusts = route
                    .proxy
                    .as_ref()
                    .is_some_and(|p| !p.trusted_proxies.is_empty());
                Some(cache_layer(i, c, route.auth.as_ref(), trusts, kept)?)
            }
            None => None,
        };
        // A HEAD stays a HEAD upstream: never a whole GET to learn a length.
        return Ok(match (compression_layer(&route.compression), cache) {
            (Some(layer), None) => {
                RouteService::ProxyCompressed(layer.head_as_get(false).layer(RouteProxy(proxy)))
            }
            (None, None) => RouteService::Proxy(RouteProxy(proxy)),
            // Compression above the cache: the cache stores what the upstream sent, and
            // a stored response's variants are encoded once by its ETag.
            (Some(layer), Some(cache)) => RouteService::CachedCompressed(
                layer
                    .head_as_get(false)
                    .layer(cache.layer(RouteProxy(proxy))),
            ),
            (None, Some(cache)) => RouteService::Cached(cache.layer(RouteProxy(proxy))),
        });
    }
    match &route.static_files {
        Some(st) => {
            let layer = compression_layer(&route.compression);
            let vary = layer.as_ref().map(|l| l.predicate_ref().clone());
            let files = static_service(st, &route.compression, vary)?;
            Ok(match layer {
                // A static file's bytes depend on the path alone, and its Vary is decided
                // once, when it is opened.
                Some(layer) => RouteService::Compressed(
                    layer.key_by_path(true).vary_from_inner(true).layer(files),
                ),
                None => RouteService::Static(files),
            })
        }
        // A host moved: every path is redirected, and this is never reached.
        None if route.redirects_all() => Ok(RouteService::Mounted(
            tower::util::BoxCloneSyncService::new(tower::service_fn(|_| async {
                let mut res = Response::new(axum::body::Body::empty());
                *res.status_mut() = StatusCode::NOT_FOUND;
                Ok::<_, Infallible>(res)
            })),
        )),
        None => Err(io::Error::other(format!(
            "route {} mounts no service",
            route.name()
        ))),
    }
}

/// An error page: its status, bytes and type, read now from `page` under `root`. Like a
/// request's file it may not leave the root (through `..` or a symlink), and it is held in
/// memory, so it is bounded.
fn error_page(
    root: &std::path::Path,
    status: &str,
    page: &str,
) -> Result<(StatusCode, bytes::Bytes, HeaderValue), String> {
    const MAX: u64 = 1 << 20;
    let status = status
        .parse::<u16>()
        .ok()
        .and_then(|s| StatusCode::from_u16(s).ok())
        .ok_or("not a status")?;
    let rel = gatehouse_layers::path::normalize(page, true)
        .map_err(|_| format!("{page:?} is not a plain path (no dot files)"))?
        .to_absolute();
    let root = root
        .canonicalize()
        .map_err(|e| format!("{}: {e}", root.display()))?;
    let path = root.join(rel.trim_start_matches('/'));
    let real = path
        .canonicalize()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if !real.starts_with(&root) {
        return Err(format!(
            "{} leads out of {}",
            path.display(),
            root.display()
        ));
    }
    let meta = std::fs::metadata(&real).map_err(|e| format!("{}: {e}", real.display()))?;
    if !meta.is_file() || meta.len() > MAX {
        return Err(format!(
            "{} must be a file of at most 1 MiB",
            real.display()
        ));
    }
    let body = std::fs::read(&real).map_err(|e| format!("{}: {e}", real.display()))?;
    let ty = gatehouse_layers::open_file_cache::content_type(&real);
    Ok((status, body.into(), ty))
}

/// The CORS layer for a configuration the check let through (no `*` with credentials,
/// every value valid).
fn cors_layer(c: &gatehouse_config::CorsConfig) -> io::Result<CorsLayer> {
    use gatehouse_layers::cors::Origins;
    let star = |list: &[String]| list.len() == 1 && list[0] == "*";
    fn names(list: &[String]) -> Vec<&str> {
        list.iter().map(String::as_str).collect()
    }
    let origins = if star(&c.allow_origins) {
        Origins::Any
    } else {
        Origins::List(
            c.allow_origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o).ok())
                .collect(),
        )
    };
    let methods: Vec<http::Method> = if star(&c.allow_methods) {
        // tower-http's `Any` answers `*`; a method list the same browsers read.
        vec![http::Method::from_bytes(b"*").unwrap_or(http::Method::GET)]
    } else {
        c.allow_methods
            .iter()
            .filter_map(|m| http::Method::from_bytes(m.as_bytes()).ok())
            .collect()
    };
    let refused = |e: gatehouse_layers::cors::CorsError| io::Error::other(format!("cors: {e}"));
    let mut layer = CorsLayer::new(origins, &methods, c.allow_credentials).map_err(refused)?;
    layer = if star(&c.allow_headers) {
        layer.allow_any_header().map_err(refused)?
    } else {
        layer.allow_headers(&names(&c.allow_headers))
    };
    layer = if star(&c.expose_headers) {
        layer.expose_any().map_err(refused)?
    } else {
        layer.expose_headers(&names(&c.expose_headers))
    };
    Ok(match c.max_age {
        Some(age) => layer.max_age(age),
        None => layer,
    })
}

/// A rule the configuration check let through but the build refused: named as `check`
/// names it.
fn rule_error(i: usize, what: &str, e: gatehouse_config::RuleError) -> io::Error {
    io::Error::other(format!("routes.{i}.{what}.{}: {}", e.key, e.reason))
}

/// The route's layers of header rules, redirects, rewrites and request IDs (see
/// [`stack`]): each `None` when the route has none.
struct RuleLayers {
    request_id: Option<RequestIdLayer>,
    response: Option<HeadersLayer>,
    pages: Option<ErrorPagesLayer>,
    cors: Option<CorsLayer>,
    redirect: Option<RedirectLayer>,
    rewrite: Option<RewriteLayer>,
    request: Option<HeadersLayer>,
}

impl RuleLayers {
    /// `nested`: the prefixes of the routes under this one's, which a rewrite may not
    /// reach (they have rules of their own).
    fn new(
        i: usize,
        route: &Route,
        root: &std::path::Path,
        nested: &[&str],
    ) -> io::Result<RuleLayers> {
        let headers = |list: &[gatehouse_config::HeaderRulesConfig], response: bool| {
            let mut layer = HeadersLayer::new();
            for (j, r) in list.iter().enumerate() {
                let side = if response { "response" } else { "request" };
                let rules = r
                    .rules(response)
                    .map_err(|e| rule_error(i, &format!("headers.{side}.{j}"), e))?;
                layer = if response {
                    layer.response(rules)
                } else {
                    layer.request(rules)
                };
            }
            Ok::<_, io::Error>((!list.is_empty()).then_some(layer))
        };
        let (response, request) = match &route.headers {
            Some(h) => (headers(&h.response, true)?, headers(&h.request, false)?),
            None => (None, None),
        };
        let mut redirect = None;
        for (j, r) in route.redirects.iter().enumerate() {
            let rule = r
                .rule()
                .map_err(|e| rule_error(i, &format!("redirects.{j}"), e))?;
            redirect = Some(redirect.unwrap_or_else(RedirectLayer::new).rule(rule));
        }
        let mut rewrite = None;
        for (j, r) in route.rewrites.iter().enumerate() {
            let rule = r
                .rule()
                .map_err(|e| rule_error(i, &format!("rewrites.{j}"), e))?;
            rewrite = Some(
                rewrite
                    .unwrap_or_else(|| {
                        let l = nested
                            .iter()
                            .fold(RewriteLayer::new().within(&route.path), |l, p| {
                                l.excluding(p)
                            });
                        // As routing reads a proxied target (`loosely_another_route`).
                        if route.proxy.is_some() {
                            l.read_loosely()
                        } else {
                            l
                        }
                    })
                    .rule(rule),
            );
        }
        let request_id = match &route.request_id {
            Some(r) => {
                let header = http::HeaderName::from_bytes(r.header.as_bytes()).map_err(|_| {
                    io::Error::other(format!(
                        "routes.{i}.request_id.header: {:?} is not a header field name",
                        r.header
                    ))
                })?;
                let trusted = CidrSet::new(
                    r.trusted_proxies
                        .iter()
                        .filter_map(|c| gatehouse_config::parse_cidr(c)),
                );
                // Only an access log reads the ID from the response's extensions.
                Some(
                    RequestIdLayer::new()
                        .header(header)
                        .trust(trusted)
                        .response_extension(route.access_log.is_some()),
                )
            }
            None => None,
        };
        let pages = if route.error_pages.is_empty() {
            None
        } else {
            let root = route
                .static_files
                .as_ref()
                .and_then(|s| s.root.as_deref())
                .unwrap_or(root);
            let mut layer = ErrorPagesLayer::new()
                .intercept_upstream(route.proxy.as_ref().is_some_and(|p| p.intercept_errors));
            for (status, page) in &route.error_pages {
                let (status, body, ty) = error_page(root, status, page).map_err(|e| {
                    io::Error::other(format!("routes.{i}.error_pages.{status}: {e}"))
                })?;
                layer = layer.page(status, body, ty);
            }
            Some(layer)
        };
        Ok(RuleLayers {
            request_id,
            response,
            pages,
            cors: route.cors.as_ref().map(cors_layer).transpose()?,
            redirect,
            rewrite,
            request,
        })
    }

    /// Whether a layer reads the client's address or the connection's scheme (a request ID
    /// from trusted proxies, `$remote_addr` or `$scheme` in a template).
    fn reads_client(&self) -> bool {
        self.request_id.as_ref().is_some_and(|l| l.trusts_anyone())
            || self.response.as_ref().is_some_and(|l| l.reads_client())
            || self.request.as_ref().is_some_and(|l| l.reads_client())
            || self.redirect.as_ref().is_some_and(|l| l.reads_client())
            || self.rewrite.as_ref().is_some_and(|l| l.reads_client())
    }

    /// Whether a template reads `$request_id`.
    fn reads_request_id(&self) -> bool {
        self.response.as_ref().is_some_and(|l| l.reads_request_id())
            || self.request.as_ref().is_some_and(|l| l.reads_request_id())
            || self.redirect.as_ref().is_some_and(|l| l.reads_request_id())
            || self.rewrite.as_ref().is_some_and(|l| l.reads_request_id())
    }

    /// Whether the rules only touch responses: no redirect, rewrite or request rule.
    fn response_only(&self) -> bool {
        self.redirect.is_none() && self.rewrite.is_none() && self.request.is_none()
    }

    fn any(&self) -> bool {
        self.request_id.is_some()
            || self.response.is_some()
            || self.pages.is_some()
            || self.cors.is_some()
            || self.redirect.is_some()
            || self.rewrite.is_some()
            || self.request.is_some()
    }
}

/// The route's compression layer, or none when it is off.
/// `auth`: the route's; the fields a forward-auth service's answer sets on the request
/// (a user's name, say) join the key, for the upstream answers by them.
/// `trusts`: the route's proxy keeps a trusted peer's `X-Forwarded-Proto`,
/// `X-Forwarded-Host` and the like, which then join the key: the upstream builds its
/// links and redirects from them, and a load balancer's plain-HTTP `X-Forwarded-Proto:
/// http` must not file a redirect to https under the key its https clients use. An
/// untrusted peer's claims in them are taken off before the cache (`Endpoint`).
/// `kept`: the store a reload keeps from the previous table, made for the same settings.
fn cache_layer(
    i: usize,
    c: &gatehouse_config::CacheConfig,
    auth: Option<&gatehouse_config::AuthConfig>,
    trusts: bool,
    kept: Option<gatehouse_layers::cache::ResponseStore>,
) -> io::Result<gatehouse_layers::cache::CacheLayer> {
    let mut granted = granted_fields(auth);
    if trusts {
        granted.extend(crate::proxy::headers::keyed_when_trusted().map(|n| n.to_string()));
    }
    let layer = gatehouse_layers::cache::CacheLayer::new();
    let layer = match &kept {
        Some(store) => layer.with_store(store.clone()),
        None => layer.limits(c.max_bytes, c.max_entries),
    };
    let layer = layer
        .max_object_bytes(c.max_object_bytes)
        // Validated by `check`: a name that is not one cannot reach here.
        .key_headers(
            c.key_headers
                .iter()
                .chain(&granted)
                .filter_map(|h| http::HeaderName::try_from(h.as_str()).ok()),
        )
        .key_cookies(c.key_cookies.iter().cloned())
        .stale_while_revalidate(c.stale_while_revalidate)
        .stale_if_error(c.stale_if_error)
        .heuristic_max(c.heuristic_max)
        .coalesce(c.lock, c.lock_timeout)
        .store_authorized(c.store_authorized)
        .store_set_cookie(c.store_set_cookie)
        .ignore_request_cache_control(c.ignore_request_cache_control)
        .cache_status_header(c.cache_status_header);
    match &c.disk_path {
        Some(_) if kept.is_some() => Ok(layer),
        Some(dir) => layer.disk(dir, c.disk_max_bytes).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("routes.{i}.cache.disk_path: {}: {e}", dir.display()),
            )
        }),
        None => Ok(layer),
    }
}

/// The request fields a route's forward-auth answer sets, which join its cache's keys.
fn granted_fields(auth: Option<&gatehouse_config::AuthConfig>) -> Vec<String> {
    auth.and_then(|a| a.forward.as_ref())
        .map(|f| f.response_headers.clone())
        .unwrap_or_default()
}

fn compression_layer(c: &CompressionConfig) -> Option<PrecompressLayer> {
    if !c.enabled || c.encodings.is_empty() {
        return None;
    }
    let encodings = c.encodings.iter().map(|e| match e {
        Coding::Br => Encoding::Br,
        Coding::Zstd => Encoding::Zstd,
        Coding::Gzip => Encoding::Gzip,
    });
    Some(
        PrecompressLayer::new()
            .encodings(encodings)
            .levels(Levels {
                gzip: c.gzip_level,
                br: c.br_level,
                zstd: c.zstd_level,
            })
            .max_cache_bytes(c.cache_max_bytes)
            .max_size(c.max_size)
            .predicate(DefaultPredicate::new().min_size(c.min_size).types(&c.types)),
    )
}

fn static_service(
    st: &StaticConfig,
    comp: &CompressionConfig,
    vary: Option<DefaultPredicate>,
) -> io::Result<StaticFiles> {
    let root = st
        .root
        .clone()
        .ok_or_else(|| io::Error::other("static route without a root"))?;
    let resolver = Resolver::new(&root)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", root.display())))?
        .index(st.index.iter().cloned())
        .listing(st.listing)
        .hide_dotfiles(st.hide_dotfiles)
        .follow_symlinks_outside_root(st.follow_symlinks_outside_root)
        .inline_max(st.open_file_cache.inline_max)
        .precompressed(comp.enabled && comp.precompressed);
    let resolver = match vary {
        Some(p) => resolver.vary_encoding(move |ct| p.compressible_type(ct)),
        None => resolver,
    };
    let mut files = StaticFiles::new(resolver.clone());
    if let Some(cc) = &st.cache_control {
        let v = HeaderValue::from_str(cc).map_err(io::Error::other)?;
        files = files.cache_control(v);
    }
    if let Some(page) = &st.not_found_page {
        files = files.not_found_page(page.clone());
    }
    if !st.try_files.is_empty() {
        files = files
            .try_files(&st.try_files)
            .map_err(|e| io::Error::other(format!("static.try_files: {e}")))?;
    }
    let ofc = &st.open_file_cache;
    if !ofc.enabled {
        return Ok(files);
    }
    let cache = FileCache::new(
        resolver,
        CacheOptions {
            strict: ofc.strict,
            valid: ofc.valid,
            max_entries: ofc.max_entries,
            max_bytes: ofc.max_bytes,
            inactive: ofc.inactive,
        },
    );
    // The static Service asks the cache itself rather than through OpenFileCacheLayer:
    // the same cache and the same answers, without a request extension's insert and drop
    // (about 760 instructions of a 13k-instruction hit, measured with callgrind).
    Ok(files.with_cache(cache))
}

impl Ruled for RouteEntry {
    fn rule(&self) -> &PathRule {
        &self.rule
    }
}

/// Sorts a group's routes longest prefix first (stably: routes of one length keep the
/// configuration's order); whether some prefix reads otherwise loosely (see
/// [`loosely_another_route`]).
pub(crate) fn order<R: Ruled>(routes: &mut [R]) -> bool {
    routes.sort_by_key(|r| std::cmp::Reverse(r.rule().prefix.len()));
    routes.iter().any(|r| {
        let rule = r.rule();
        rule.loose != rule.prefix || loose_trimmed(&rule.loose).is_some()
    })
}

/// The first (so the longest) prefix of `routes` that `path` is under.
fn select<R: Ruled>(routes: &[R], path: &str) -> Option<usize> {
    routes.iter().position(|r| {
        let rule = r.rule();
        rule.prefix.is_empty() || rule.matches(path)
    })
}

/// What routing makes of a request target, before the chosen route's own rules (access,
/// rate, auth) run.
pub(crate) struct Decision {
    /// The route, by its place in the group.
    pub(crate) index: usize,
    /// The normalised target the route was chosen by, when the one received is not in
    /// normal form.
    pub(crate) normalized: Option<Uri>,
    /// To be refused with 400 once the route's access and rate rules have run: a proxied
    /// target the upstream may read as another route's path (see [`ambiguous`] and
    /// [`loosely_another_route`]), or one it can't be sent as received.
    pub(crate) refused: bool,
    /// The route's Service gets the target as received rather than normalised: a proxy,
    /// as from nginx's `proxy_pass` without a URI (`%2F` stays `%2F`).
    pub(crate) as_received: bool,
    /// A static route's prefix alone: redirected to it with a slash.
    pub(crate) add_slash: bool,
    /// How many bytes of the path, the route's prefix, the Service doesn't see.
    pub(crate) strip: usize,
}

/// The routing decision for a request target in a group of routes (`loose_prefixes` as
/// [`order`] tells): the route, and what to make of the target for it; or the status that
/// refuses the target before any route.
///
/// Routes are chosen on the normalised path (decoded once, dot segments resolved, empty
/// segments dropped), the one the static files resolve too: no spelling of a path
/// (`//admin`, `/./admin`, `/x/../admin`, `/%61dmin`, `/admin%2Fx`) can reach a route's
/// resource through another route. What an upstream is sent must choose the same route
/// however the upstream reads it, or the request is refused.
///
/// A path in normal form (most are) allocates nothing here.
pub(crate) fn decide<R: Ruled>(
    routes: &[R],
    loose_prefixes: bool,
    uri: &Uri,
) -> Result<Decision, StatusCode> {
    // An absolute-form target with an empty path (`http://a.test?q`, which `Uri::path`
    // reads as `/`) goes on as `/?q` (RFC 9112 §3.2.1), never as `?q`.
    let empty_path = uri
        .path_and_query()
        .is_some_and(|pq| pq.as_str().starts_with('?'));
    let normalized = if is_clean(uri.path()) && !empty_path {
        None
    } else {
        Some(gatehouse_layers::path::normalized_uri(uri).ok_or(StatusCode::BAD_REQUEST)?)
    };
    let path = normalized.as_ref().unwrap_or(uri).path();
    let index = select(routes, path).ok_or(StatusCode::NOT_FOUND)?;
    let rule = routes[index].rule();
    let mut d = Decision {
        index,
        refused: false,
        as_received: false,
        add_slash: false,
        strip: 0,
        normalized: None,
    };
    if rule.proxied {
        let raw = uri.path();
        d.refused = ambiguous(raw, rule.strict_paths)
            || loosely_another_route(routes, loose_prefixes, index, path);
        if normalized.is_some() && !empty_path {
            // Sent as received, its prefix must be spelled plainly for the route to strip
            // it, and it may not climb out with dot segments (`/api/../admin` would match
            // /api here and be resolved by the upstream outside it), as the static files
            // refuse to climb out of their root. A path in normal form has neither.
            d.refused |= has_dot_segment(raw) || (rule.strip && !rule.matches(raw));
            d.as_received = true;
        }
    }
    if !rule.prefix.is_empty() && rule.strip {
        // The prefix alone names a static route's root directory: redirect to it with a
        // slash, as for any directory, so that relative links in its index resolve.
        d.add_slash = !rule.proxied && path.len() == rule.prefix.len();
        d.strip = rule.prefix.len();
    }
    d.normalized = normalized;
    Ok(d)
}

/// The host a request is routed by: the authority of an absolute-form or HTTP/2 request,
/// else Host (the front has made them one, [`crate::server::front::Front::canonicalize`]).
pub(crate) fn routing_host<B>(req: &Request<B>) -> &str {
    req.uri()
        .host()
        .or_else(|| req.headers().get(http::header::HOST)?.to_str().ok())
        .unwrap_or("")
}

/// A host as the table knows it: without port or trailing dot, lower-case. Allocates only
/// for an upper-case name.
pub(crate) fn host_key(host: &str) -> std::borrow::Cow<'_, str> {
    let host = strip_port(host);
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.bytes().any(|b| b.is_ascii_uppercase()) {
        host.to_ascii_lowercase().into()
    } else {
        host.into()
    }
}

impl Table {
    fn group(&self, host: &str) -> &Group {
        let host = host_key(host);
        let host = &*host;
        if let Some(g) = self.exact.get(host) {
            return g;
        }
        for (suffix, g) in &self.wildcard {
            if host.len() > suffix.len() && host.ends_with(&**suffix) {
                return g;
            }
        }
        &self.any
    }
}

impl GatewayRouter {
    /// Swaps in the routes of `config` (already validated). Requests in flight finish on
    /// the old routes; the old proxies' health checks stop; the new ones start on the
    /// current runtime. A route keeps its cached responses unless it changed in what
    /// decides them: its hosts, path and upstreams, the fields sent to them, its auth, and its
    /// cache's key, bounds and disk tier. Fails, changing nothing, if the new routes can't be
    /// built.
    pub fn reload(&self, config: &Config) -> io::Result<()> {
        let table = build_table(
            config,
            &self.logs,
            self.unrouted.is_some(),
            &self.mounts,
            &self.table.load().caches,
        )?;
        for p in &table.proxies {
            p.spawn_health_checks();
        }
        let old = self.table.swap(Arc::new(table));
        for p in &old.proxies {
            p.retire();
        }
        Ok(())
    }

    fn group_of<'t, B>(t: &'t Table, req: &Request<B>) -> &'t Group {
        if t.by_host {
            t.group(routing_host(req))
        } else {
            &t.any
        }
    }

    /// Routes `req` from the connection `conn` to its route's stack.
    pub(crate) fn dispatch<B>(&self, mut req: Request<B>, conn: ConnInfo) -> RouterFuture
    where
        B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let table = self.table.load();
        let group = Self::group_of(&table, &req);
        let d = match decide(&group.routes, group.loose_prefixes, req.uri()) {
            Ok(d) => d,
            Err(status) => {
                let res = match status {
                    StatusCode::NOT_FOUND => plain(status, "not found\n"),
                    _ => plain(status, "bad request\n"),
                };
                let started = self.unrouted.map(|m| (m, m.start(req.method())));
                let log = table
                    .unrouted_log
                    .as_ref()
                    .map(|l| (Box::new(Record::start(&req, conn.peer)), l.clone()));
                return RouterFuture {
                    kind: RouterKind::Unrouted {
                        fut: ObserveFuture::new(Ready(Some(res)), log, started),
                    },
                };
            }
        };
        let route = &group.routes[d.index];
        if d.normalized.is_some() || d.refused {
            let original = d
                .normalized
                .map(|uri| std::mem::replace(req.uri_mut(), uri));
            req.extensions_mut().insert(Decided {
                original,
                refused: d.refused,
                as_received: d.as_received,
            });
        }
        if route.client {
            let ext = req.extensions_mut();
            if let Some(peer) = conn.peer {
                ext.insert(gatehouse_layers::client::ClientAddr(peer));
            }
            // Always, and from the connection: forward auth must not take an
            // `https://` target on a plain connection for HTTPS.
            ext.insert(gatehouse_layers::client::Https(conn.https));
        }
        let req = req.map(|b| RouteBody::new(b, conn));
        let fut = match self.last.try_lock() {
            Ok(mut last) => {
                let fresh = last
                    .as_ref()
                    .is_some_and(|c| c.table == table.generation && c.route == route.id);
                if !fresh {
                    *last = None;
                }
                let cached = last.get_or_insert_with(|| Cached {
                    table: table.generation,
                    route: route.id,
                    stack: route.stack.clone(),
                });
                cached.stack.call(req)
            }
            // Rarely (see `last`); a clone of the stack does as well.
            Err(_) => route.stack.clone().call(req),
        };
        RouterFuture {
            kind: RouterKind::Routed { fut },
        }
    }

    /// Starts what the routes run in the background (active health checks), on the
    /// current runtime.
    /// Reopens every access log file (SIGUSR1, after logrotate moved them).
    pub fn reopen_logs(&self) {
        if let Ok(logs) = self.logs.lock() {
            for w in logs.values() {
                w.reopen();
            }
        }
    }

    /// Writes every access log line held and stops the writers: after the drain, so that
    /// every completed request is in its file.
    pub fn close_logs(&self) {
        if let Ok(logs) = self.logs.lock() {
            for w in logs.values() {
                w.close();
            }
        }
    }

    /// Lines dropped by the access logs so far (it should stay at zero).
    pub fn log_lines_dropped(&self) -> u64 {
        self.logs
            .lock()
            .map(|l| l.values().map(|w| w.dropped()).sum())
            .unwrap_or(0)
    }

    /// Access log lines lost because their destination refused them (a full disk, say).
    pub fn log_lines_failed(&self) -> u64 {
        self.logs
            .lock()
            .map(|l| l.values().map(|w| w.failed()).sum())
            .unwrap_or(0)
    }

    /// Where requests are counted before (or without) a route; `None` with metrics off.
    pub(crate) fn unrouted_metrics(&self) -> Option<&'static RouteMetrics> {
        self.unrouted
    }

    /// `[access_log]`, where requests refused before routing are logged, if anywhere.
    pub(crate) fn unrouted_log(&self) -> Option<AccessLog> {
        self.table.load().unrouted_log.clone()
    }

    /// Each route's caches, for the metrics.
    pub(crate) fn caches(&self) -> Vec<RouteCaches> {
        self.table.load().caches.clone()
    }

    /// Each route's response cache (`[routes.cache]`), by route name: to purge from a
    /// program, or read its figures.
    pub fn response_caches(&self) -> Vec<(String, gatehouse_layers::cache::ResponseStore)> {
        self.table
            .load()
            .caches
            .iter()
            .filter_map(|c| Some((c.route.clone(), c.responses.clone()?)))
            .collect()
    }

    /// Each proxy, for the metrics.
    pub(crate) fn proxies(&self) -> Vec<Proxy> {
        self.table.load().proxies.clone()
    }

    pub fn spawn_background(&self) {
        for p in &self.table.load().proxies {
            p.spawn_health_checks();
        }
    }
}

/// Whether a path is already in normal form: no `%` escape, no empty, `.` or `..` segment.
/// Most are, and skip the normalisation.
fn is_clean(path: &str) -> bool {
    let Some(rest) = path.strip_prefix('/') else {
        return false;
    };
    // A backslash too: IIS and other Windows servers read it as `/`, so it goes through the
    // normalisation, which refuses it (found by the `route_forward` fuzz target: `/\x\`).
    if rest.bytes().any(|b| b == b'%' || b == b'\\') {
        return false;
    }
    let mut segs = rest.split('/').peekable();
    while let Some(seg) = segs.next() {
        let last = segs.peek().is_none();
        // An empty segment is a trailing slash only at the end.
        if (seg.is_empty() && !last) || seg == "." || seg == ".." {
            return false;
        }
    }
    true
}

/// Whether a path has a `.` or `..` segment, spelled plainly or percent-encoded
/// (RFC 3986 §5.2.4 would resolve it).
fn has_dot_segment(path: &str) -> bool {
    // Bytes, not `str::split`: this runs on every proxied request, and a plain path costs
    // a compare per byte this way, several times that through the char searcher.
    let mut rest = path.as_bytes();
    loop {
        let end = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
        if is_dot_segment(&rest[..end]) {
            return true;
        }
        match rest.get(end + 1..) {
            Some(tail) => rest = tail,
            None => return false,
        }
    }
}

/// Whether a raw path that is to be forwarded may be read by a backend as another path
/// than the one it was routed by:
/// - an encoded slash or backslash that makes a dot segment once decoded (`..%2f`,
///   `%2f..`): routing resolved it, a backend that decodes `%2F` resolves it elsewhere;
/// - a segment that is a dot segment once trimmed of white space (`..%20`, `%09.`): a
///   backend that trims segments before resolving dots climbs where routing did not;
/// - with `strict`, a `;` (Tomcat and Spring read `/admin;x/` as `/admin/`, and `..;` as
///   `..`) and double encoding (`%2561` is `%61`, then `a`, to a backend that decodes
///   twice).
///
/// Bytes past ASCII are read too: hyper passes them in a target as sent (curl sends a
/// file name so), and `..` followed by a raw no-break space is `..` to a backend that
/// trims Unicode white space (Rust's `str::trim`, Python's `str.strip`).
///
/// A plain path (no `%`, no `;`, ASCII) costs one scan.
pub(crate) fn ambiguous(raw: &str, strict: bool) -> bool {
    let b = raw.as_bytes();
    if !b.iter().any(|&c| c == b'%' || c == b';' || !c.is_ascii()) {
        return false;
    }
    if strict && b.contains(&b';') {
        return true;
    }
    let hex = |c: u8| c.is_ascii_hexdigit();
    if strict
        && b.windows(5)
            .any(|w| w[0] == b'%' && w[1] == b'2' && w[2] == b'5' && hex(w[3]) && hex(w[4]))
    {
        return true;
    }
    let decoded = percent_encoding::percent_decode(b).collect::<Vec<u8>>();
    decoded.split(|&c| c == b'/' || c == b'\\').any(|seg| {
        // Trimmed of white space, as some backends read a segment before resolving dots.
        matches!(
            String::from_utf8_lossy(seg).trim_matches(gatehouse_layers::path::is_loose_space),
            "." | ".."
        )
    })
}

/// Whether `path` (the normalised path that chose route `index` of `routes`), read as a
/// lenient backend may read it, is another route's: with `%`-escapes decoded once more
/// and without case (Windows, IIS, some frameworks); and so, with each segment trimmed of
/// white space and trailing dots and the segments left empty dropped (`/admin%20/`,
/// `/admin./`, `/%20/admin`). The reader's route is the longest prefix under which it
/// reads the path (decoded and in lower case too), the first of equal ones as in routing.
/// Such a spelling of another route's path is refused rather than sent past that route's
/// rules; so is one read outside every route.
fn loosely_another_route<R: Ruled>(
    routes: &[R],
    loose_prefixes: bool,
    index: usize,
    path: &str,
) -> bool {
    if index == 0 && !loose_prefixes {
        // The longest prefix, which every reading keeps: nothing longer can be read.
        return false;
    }
    // Past ASCII, white space and case are Unicode's: `admin` and a no-break space,
    // or the Kelvin sign that lower-cases to `k`.
    let plain = !path
        .as_bytes()
        .iter()
        .any(|&b| b.is_ascii_uppercase() || b == b'%' || b == b'.' || b == b' ' || !b.is_ascii());
    if plain && !loose_prefixes {
        // Read as it is: the route that chose it.
        return false;
    }
    let read_as = |loose: &str| {
        let mut read: Option<(usize, usize)> = None;
        for (j, r) in routes.iter().enumerate() {
            let p = &*r.rule().loose;
            let under =
                loose.starts_with(p) && matches!(loose.as_bytes().get(p.len()), None | Some(b'/'));
            if under && read.is_none_or(|(_, len)| p.len() > len) {
                read = Some((j, p.len()));
            }
        }
        read.map(|(j, _)| j)
    };
    let loose = loose(path);
    if read_as(&loose) != Some(index) {
        return true;
    }
    loose_trimmed(&loose).is_some_and(|t| read_as(&t) != Some(index))
}

/// `.` or `..`, each dot plain or `%2e`/`%2E`; no allocation, as it runs on every
/// proxied request.
fn is_dot_segment(seg: &[u8]) -> bool {
    let mut dots = 0;
    let mut rest = seg;
    while !rest.is_empty() {
        rest = match rest {
            [b'.', tail @ ..] => tail,
            [b'%', b'2', e, tail @ ..] if e.eq_ignore_ascii_case(&b'e') => tail,
            _ => return false,
        };
        dots += 1;
        if dots > 2 {
            return false;
        }
    }
    dots > 0
}

/// Removes the first `n` bytes of the path (a route prefix), keeping the query.
pub(crate) fn strip_prefix(uri: &mut Uri, n: usize) {
    let rest = &uri.path()[n..];
    let mut pq = String::with_capacity(rest.len() + 1 + uri.query().map_or(0, |q| q.len() + 1));
    if !rest.starts_with('/') {
        pq.push('/');
    }
    pq.push_str(rest);
    if let Some(q) = uri.query() {
        pq.push('?');
        pq.push_str(q);
    }
    if let Ok(pq) = PathAndQuery::try_from(pq) {
        let mut parts = uri.clone().into_parts();
        parts.path_and_query = Some(pq);
        if let Ok(new) = Uri::from_parts(parts) {
            *uri = new;
        }
    }
}

/// An answer of the router's own (no route for the request, a target it can't route).
pub struct Ready(Option<Response<GateBody>>);

impl Future for Ready {
    type Output = Result<Response<GateBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(Ok(self.get_mut().0.take().unwrap_or_else(|| {
            plain(StatusCode::INTERNAL_SERVER_ERROR, "polled twice\n")
        })))
    }
}

pin_project! {
    /// The response future of [`GatewayRouter`]: its route's stack's, or the router's own
    /// answer; either watched to the end of its body by the route's access log and metrics
    /// (or the unrouted ones).
    pub struct RouterFuture {
        #[pin]
        kind: RouterKind,
    }
}

pin_project! {
    #[project = RouterKindProj]
    enum RouterKind {
        Routed { #[pin] fut: ObserveFuture<InnerFuture> },
        Unrouted { #[pin] fut: ObserveFuture<Ready> },
    }
}

impl RouterFuture {
    /// The watched response, in parts: gatehouse's own connection takes it apart anyway
    /// (see [`crate::server::Serve`]).
    pub fn poll_parts(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<(http::response::Parts, ObservedBody)> {
        match self.project().kind.project() {
            RouterKindProj::Routed { fut } => fut.poll_parts(cx),
            RouterKindProj::Unrouted { fut } => fut.poll_parts(cx),
        }
    }
}

impl Future for RouterFuture {
    type Output = Result<Response<ObservedBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (parts, body) = std::task::ready!(self.poll_parts(cx));
        Poll::Ready(Ok(Response::from_parts(parts, body)))
    }
}

impl<B> Service<Request<B>> for GatewayRouter
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = Response<ObservedBody>;
    type Error = Infallible;
    type Future = RouterFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    /// Mounted in another app, the connection is read with [`ConnInfo::of`]: insert a
    /// [`ConnInfo`] to say a request came over HTTPS.
    fn call(&mut self, req: Request<B>) -> RouterFuture {
        let conn = ConnInfo::of(&req);
        self.dispatch(req, conn)
    }
}

#[cfg(test)]
mod tests {

    /// The config crate spells the default types out (so that `gatehouse check` shows
    /// them) without depending on the layers crate: the two lists must stay one.
    #[test]
    fn clean_paths_skip_normalisation_and_others_are_normalised() {
        use super::is_clean;
        use gatehouse_layers::path::normalized_uri;
        for p in ["/", "/a", "/a/b.txt", "/dir/", "/a.b/c"] {
            assert!(is_clean(p), "{p}");
        }
        for p in [
            "//a", "/a//b", "/./a", "/a/.", "/a/..", "/x/../a", "/%61", "a", "", "/\\x\\",
        ] {
            assert!(!is_clean(p), "{p}");
        }
        let n = |u: &str| normalized_uri(&u.parse().unwrap()).map(|u| u.to_string());
        assert_eq!(n("//admin/x?q=1").as_deref(), Some("/admin/x?q=1"));
        assert_eq!(n("/x/../admin/").as_deref(), Some("/admin/"));
        assert_eq!(n("/%61dmin%2Fa%20b").as_deref(), Some("/admin/a%20b"));
        assert_eq!(n("/%252e").as_deref(), Some("/%252e"));
        assert_eq!(n("/a%00b"), None);
        assert_eq!(n("/a%zz"), None);
    }

    /// Every request's future holds the largest route future inline: a mounted app's
    /// (a request, a boxed Service) and a cached proxy's are boxed so that they don't make
    /// every route's larger.
    #[test]
    fn a_mounted_route_does_not_grow_the_router_future() {
        let kind = std::mem::size_of::<super::stack::Kind>();
        let largest = std::mem::size_of::<super::stack::CompressedFuture>()
            .max(std::mem::size_of::<super::stack::ProxyCompressedFuture>());
        assert!(
            kind <= largest + 16,
            "Kind is {kind} bytes, its largest route future {largest}"
        );
    }

    #[test]
    fn the_configs_default_types_are_the_layers() {
        let config = gatehouse_config::CompressionConfig::default().types;
        let layer: Vec<String> = gatehouse_layers::precompress::DEFAULT_TYPES
            .iter()
            .map(|t| t.to_string())
            .collect();
        assert_eq!(config, layer);
    }

    #[test]
    fn dot_segments_are_found_however_spelled() {
        use super::has_dot_segment;
        for p in [
            "/api/../x",
            "/api/./x",
            "/a/%2e%2E/b",
            "/a/.%2e",
            "/..",
            "..",
            "x/.",
            "./x",
        ] {
            assert!(has_dot_segment(p), "{p}");
        }
        for p in [
            "/api/x",
            "/a/...",
            "/a/.hidden",
            "/a/b.c",
            "/",
            "",
            "//",
            "/x/",
        ] {
            assert!(!has_dot_segment(p), "{p}");
        }
        // Against the spelled-out definition, over every segment of up to three pieces.
        let pieces = [".", "%2e", "%2E", "%2", "%", "2e", "x", "%2f", ""];
        let spelled = |seg: &str| {
            let dots = seg.to_ascii_lowercase().replace("%2e", ".");
            dots == "." || dots == ".."
        };
        for a in pieces {
            for b in pieces {
                for c in pieces {
                    let seg = format!("{a}{b}{c}");
                    assert_eq!(
                        has_dot_segment(&format!("/x/{seg}/y")),
                        spelled(&seg),
                        "{seg}"
                    );
                }
            }
        }
    }

    #[test]
    fn paths_a_backend_may_read_otherwise_are_found() {
        use super::ambiguous;
        for p in [
            "/api/admin/..%2fx",
            "/api/admin%2f..%2fx",
            "/a/%2e%2e%2fb",
            "/a/x%2F..",
            "/a/..%5cb",
            "/api/..\u{a0}/x",
            "/a/\u{3000}../b",
        ] {
            assert!(ambiguous(p, false), "{p}");
            assert!(ambiguous(p, true), "{p}");
        }
        for p in [
            "/api/admin;x/x",
            "/api/x/..;/admin",
            "/a/%2561dmin",
            "/a%25ff",
        ] {
            assert!(ambiguous(p, true), "{p}");
            assert!(!ambiguous(p, false), "relaxed: {p}");
        }
        for p in [
            "/api/x",
            "/a%20b/c%2Fd",
            "/a/%2e%2ex",
            "/a/b.c",
            "/%25zz",
            "/",
            "/caf\u{e9}/\u{a0}x",
        ] {
            assert!(!ambiguous(p, true), "{p}");
        }
    }
}
