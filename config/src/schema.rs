use serde::{Deserialize, Deserializer, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The whole configuration. Every table refuses unknown keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Static root for routes that don't name their own, and for the implicit route used
    /// when no `[[routes]]` are configured.
    pub root: PathBuf,
    /// Addresses of the public HTTP listeners: one string or a list. A host name is
    /// resolved, and every address it has is listened on (as nginx does).
    #[serde(deserialize_with = "listen_addrs")]
    pub listen: Vec<SocketAddr>,
    /// Address of the admin listener (`/healthz`, `/readyz`, `/metrics`, `POST /reload`).
    /// A host name is resolved; its first IPv4 address is used, else its first.
    #[serde(deserialize_with = "listen_addr")]
    pub admin_listen: SocketAddr,
    /// Connections open at once on the admin listener; one more is closed on accept, so
    /// that it can never take the public listeners' file descriptors. Read at start only.
    pub admin_max_connections: usize,
    /// The bearer token `POST /reload` requires (RFC 6750 §2.1 syntax, at least 16
    /// characters). Without one, `/reload` is open on a loopback `admin_listen` and
    /// refused on any other. Never shown by `gatehouse check`. Read at start only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_token: Option<Secret>,
    /// A file holding `admin_token` (a trailing newline is ignored), instead of the value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_token_file: Option<PathBuf>,
    /// The token of `admin_token` or `admin_token_file`, filled in by loading.
    #[serde(skip)]
    pub admin_token_resolved: Option<Secret>,
    pub runtime: RuntimeMode,
    /// Worker threads (shared) or runtimes (per-core); 0 means one per core.
    pub workers: usize,
    /// Per-core: a new connection goes to the runtime numbered after the CPU that handled
    /// its SYN, not to one picked by a hash of its addresses.
    pub steer_by_cpu: bool,
    pub timeouts: Timeouts,
    pub limits: Limits,
    /// Log filter for gatehouse's own diagnostics, in `tracing` syntax (`info`, `debug`).
    pub log_level: String,
    /// Every public listener (plain and TLS) takes the PROXY protocol (v1 or v2) from the
    /// peers in `proxy_protocol_from`: the client it names is the client everywhere.
    pub proxy_protocol: bool,
    /// The load balancers that send the PROXY header; a connection from anyone else is
    /// closed. Required with `proxy_protocol`.
    pub proxy_protocol_from: Vec<String>,
    /// Serve HTTP/2 with prior knowledge (h2c) on the plain listeners, beside HTTP/1.1.
    pub h2c: bool,
    /// HTTPS listeners and their certificates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsConfig>,
    /// Certificates obtained and renewed from an ACME CA (Let's Encrypt and others).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acme: Option<AcmeConfig>,
    /// Prometheus metrics at the admin listener's `/metrics`.
    pub metrics: MetricsConfig,
    /// `[access_log]`: the log of the requests no route answers, those the listener's
    /// checks refuse and those that match no route, which nginx's server-level log has.
    /// Routes log with their own `[routes.access_log]`; naming the same file shares it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_log: Option<AccessLogConfig>,
    pub routes: Vec<Route>,
}

/// A secret string: read and written like any string, but never printed by `Debug`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Secret {
        Secret(s.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// `[metrics]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Off: no request is measured and `/metrics` answers 404. Read at start only.
    pub enabled: bool,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig { enabled: true }
    }
}

impl Config {
    /// How many workers run: `workers`, or with 0, one per core. Runtimes in `per-core`
    /// mode, worker threads in `shared` mode.
    pub fn worker_count(&self) -> usize {
        if self.workers == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            self.workers
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            root: PathBuf::from("public"),
            listen: vec![SocketAddr::from(([127, 0, 0, 1], 8080))],
            admin_listen: SocketAddr::from(([127, 0, 0, 1], 9090)),
            admin_max_connections: 64,
            admin_token: None,
            admin_token_file: None,
            admin_token_resolved: None,
            runtime: RuntimeMode::default(),
            workers: 0,
            steer_by_cpu: true,
            timeouts: Timeouts::default(),
            limits: Limits::default(),
            log_level: "info".into(),
            h2c: false,
            proxy_protocol: false,
            proxy_protocol_from: Vec::new(),
            tls: None,
            acme: None,
            metrics: MetricsConfig::default(),
            access_log: None,
            routes: Vec::new(),
        }
    }
}

/// `[tls]`: the HTTPS listeners.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// Addresses of the HTTPS listeners: one string or a list. A host name is resolved,
    /// and every address it has is listened on.
    #[serde(deserialize_with = "listen_addrs")]
    pub listen: Vec<SocketAddr>,
    /// PEM certificate files, chosen by SNI. The first is the default, for clients that
    /// send no name or a name no certificate covers.
    pub certs: Vec<CertConfig>,
    /// Offer HTTP/2 by ALPN (beside HTTP/1.1).
    pub http2: bool,
    /// A PEM file of CA certificates: clients must present a certificate it signed (mTLS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_ca: Option<PathBuf>,
    /// With `client_ca`: let clients without a certificate in (those with one must still
    /// present a valid one).
    pub client_auth_optional: bool,
    /// The plain listeners answer every request with a 308 to https, except ACME HTTP-01
    /// challenges.
    pub redirect_http: bool,
    /// `Strict-Transport-Security` value sent on HTTPS responses, such as
    /// `max-age=63072000; includeSubDomains`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hsts: Option<String>,
    /// How often the certificate files are checked for changes.
    #[serde(with = "humantime_serde")]
    pub watch_interval: Duration,
    /// Time allowed for a TLS handshake.
    #[serde(with = "humantime_serde")]
    pub handshake_timeout: Duration,
    /// HTTP/3 over QUIC on the UDP side of each `listen` address, advertised by `Alt-Svc`
    /// on the TCP responses. Unset: on, unless `proxy_protocol` is (see
    /// [`TlsConfig::http3_on`]); a UDP port that cannot be bound is then skipped with a
    /// warning instead of stopping the start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http3: Option<bool>,
    /// HTTP/3: requests (bidirectional streams) one connection may have open at once.
    pub http3_max_streams: u32,
    /// HTTP/3: above this many handshakes in progress, a new client must first prove its
    /// address with a Retry round trip (RFC 9000 §8.1.2). 0: always.
    pub http3_retry_above: usize,
    /// HTTP/3: accept 0-RTT (RFC 9001 §4.6), for clients whose address a token has
    /// validated. Early GET, HEAD, OPTIONS and TRACE requests are served with
    /// `Early-Data: 1`; any other method gets 425 (RFC 8470). Each ticket is good once.
    pub http3_early_data: bool,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            listen: vec![SocketAddr::from(([127, 0, 0, 1], 8443))],
            certs: Vec::new(),
            http2: true,
            client_ca: None,
            client_auth_optional: false,
            redirect_http: false,
            hsts: None,
            watch_interval: Duration::from_secs(5),
            handshake_timeout: Duration::from_secs(10),
            http3: None,
            http3_max_streams: 100,
            http3_retry_above: 64,
            http3_early_data: false,
        }
    }
}

impl TlsConfig {
    /// Whether HTTP/3 is served. By default it is, as in Caddy, except behind a PROXY
    /// protocol load balancer: TCP then takes only the balancer's connections, and QUIC
    /// would take anyone's, around it.
    pub fn http3_on(&self, proxy_protocol: bool) -> bool {
        self.http3.unwrap_or(!proxy_protocol)
    }
}

/// `[[tls.certs]]`: one certificate chain and its private key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertConfig {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Names it is chosen for (exact or `*.example.com`); by default the certificate's own
    /// DNS names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
}

/// `[acme]`: certificates from an ACME CA (RFC 8555).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AcmeConfig {
    /// The CA's directory URL. Let's Encrypt production by default.
    pub directory: String,
    /// Contact URLs for the account, such as `mailto:ops@example.com`.
    pub contact: Vec<String>,
    /// Where the account key and the certificates are kept (private keys mode 0600).
    pub state_dir: PathBuf,
    /// How domains are proven: `http-01` (on a plain listener, port 80 for a public CA) or
    /// `tls-alpn-01` (on an HTTPS listener, port 443).
    pub challenge: Challenge,
    /// More CA certificates (PEM) to trust for the directory's own HTTPS, for a private or
    /// test CA such as Pebble.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub directory_ca: Option<PathBuf>,
    /// External Account Binding key id and base64url HMAC key, for CAs that require them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eab_kid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eab_hmac_key: Option<String>,
    /// One certificate per entry, covering its domain list.
    pub certificates: Vec<AcmeCertConfig>,
    /// Renew when less than this is left before expiry. By default a third of the
    /// certificate's lifetime, and at least 30 days for certificates of 90 days or more.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub renew_before: Option<Duration>,
    /// First wait after a failed attempt; it doubles (with jitter) up to `retry_max`.
    #[serde(with = "humantime_serde")]
    pub retry_min: Duration,
    #[serde(with = "humantime_serde")]
    pub retry_max: Duration,
}

impl Default for AcmeConfig {
    fn default() -> Self {
        AcmeConfig {
            directory: "https://acme-v02.api.letsencrypt.org/directory".into(),
            contact: Vec::new(),
            state_dir: PathBuf::from("acme"),
            challenge: Challenge::Http01,
            directory_ca: None,
            eab_kid: None,
            eab_hmac_key: None,
            certificates: Vec::new(),
            renew_before: None,
            retry_min: Duration::from_secs(60),
            retry_max: Duration::from_secs(6 * 3600),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Challenge {
    #[default]
    #[serde(rename = "http-01")]
    Http01,
    #[serde(rename = "tls-alpn-01")]
    TlsAlpn01,
}

/// `[[acme.certificates]]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcmeCertConfig {
    pub domains: Vec<String>,
}

/// How the server uses threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RuntimeMode {
    /// One current-thread tokio runtime per core, each with its own `SO_REUSEPORT` listener.
    /// The default: a connection, its requests and its upstream connections stay on one
    /// thread, and in the bench it used less CPU per request than `shared` on nearly every
    /// scenario (proxy-1k by about a fifth).
    #[default]
    PerCore,
    /// One multi-thread tokio runtime with work stealing: better when a few connections carry
    /// most of the load, since one busy connection can't be moved to an idle core per-core.
    Shared,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timeouts {
    /// Time allowed to receive a request's headers, from its first byte.
    #[serde(with = "humantime_serde")]
    pub header_read: Duration,
    /// An idle keep-alive connection is closed after this long with no traffic.
    #[serde(with = "humantime_serde")]
    pub keep_alive: Duration,
    /// On SIGTERM/SIGINT, in-flight requests get this long to finish.
    #[serde(with = "humantime_serde")]
    pub drain: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            header_read: Duration::from_secs(10),
            keep_alive: Duration::from_secs(60),
            drain: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest request head (request line and headers) in bytes; larger gets 431.
    pub max_header_bytes: usize,
    /// Most request headers; more gets 431.
    pub max_headers: usize,
    /// Longest request target (path and query) in bytes; longer gets 414.
    pub max_uri_bytes: usize,
    /// Client connections open at once, over all listeners; one more is closed as soon
    /// as it is accepted (and counted in the log). 0: no limit.
    pub max_connections: usize,
    /// HTTP/2: response bytes one connection may hold read but not yet sent, over all its
    /// streams (what waits on the client's flow-control window, RFC 9113 §5.2). A stream
    /// reads its next chunk (256 KiB of a file) once there is room for it. At least 65536.
    pub h2_send_buffer: usize,
    /// The same over all HTTP/2 connections of the server; at least `h2_send_buffer`.
    pub h2_send_buffer_total: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 16 * 1024,
            max_headers: 100,
            max_uri_bytes: 8 * 1024,
            max_connections: 65_536,
            h2_send_buffer: 1024 * 1024,
            h2_send_buffer_total: 64 * 1024 * 1024,
        }
    }
}

/// A route: matched by host and path prefix, mounting one Service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// Used in logs and as the metrics' `route` label; defaults to `route<N>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Host names this route answers: exact (`example.com`) or a leading wildcard
    /// (`*.example.com`). Empty means any host.
    #[serde(default, deserialize_with = "one_or_many")]
    pub hosts: Vec<String>,
    /// Path prefix, matched on whole segments; it is stripped before the Service sees the
    /// path, so `/assets` with root `dist` maps `/assets/app.js` to `dist/app.js`.
    #[serde(default = "slash")]
    pub path: String,
    /// Serve static files.
    #[serde(default, rename = "static", skip_serializing_if = "Option::is_none")]
    pub static_files: Option<StaticConfig>,
    /// Proxy to upstream servers (instead of `static`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProxyConfig>,
    /// A Service the program mounts under this name (`gatehouse::router::Mounts`), instead
    /// of `static` or `proxy`. The gatehouse binary mounts none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount: Option<String>,
    /// Compression of the route's responses, on by default.
    #[serde(default)]
    pub compression: CompressionConfig,
    /// An access log for the route's requests (off unless configured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_log: Option<AccessLogConfig>,
    /// Client IP allow and deny lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<AccessConfig>,
    /// Authentication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthConfig>,
    /// A request rate per client address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimitConfig>,
    /// Header rules on responses and (proxy routes) requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<HeadersConfig>,
    /// Redirects, tried in order; the first whose match takes the path answers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redirects: Vec<RedirectConfig>,
    /// Internal rewrites of the target, tried in order; the first that matches applies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rewrites: Vec<RewriteConfig>,
    /// An ID for each request: to the upstream, the client and the access log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<RequestIdConfig>,
    /// Cross-origin requests from browsers, with preflights answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cors: Option<CorsConfig>,
    /// A response cache in front of a proxy route (RFC 9111).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheConfig>,
    /// Pages for error statuses (`"404" = "/404.html"`), files under the route's static
    /// root (a proxy route: the top-level `root`), sent with the original status.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub error_pages: std::collections::BTreeMap<String, String>,
}

/// `[routes.cache]`: a shared response cache (RFC 9111, RFC 5861) in front of a proxy
/// route, in memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    /// Off keeps the table but stores nothing.
    pub enabled: bool,
    /// Bytes of stored responses (bodies, fields and a per-entry overhead).
    pub max_bytes: u64,
    /// Stored responses.
    pub max_entries: u64,
    /// Larger responses are passed on unstored.
    pub max_object_bytes: u64,
    /// Request fields whose values go into the key.
    #[serde(deserialize_with = "one_or_many")]
    pub key_headers: Vec<String>,
    /// Cookies whose values go into the key.
    #[serde(deserialize_with = "one_or_many")]
    pub key_cookies: Vec<String>,
    /// Served stale while refreshed, for responses without `stale-while-revalidate`.
    #[serde(with = "humantime_serde")]
    pub stale_while_revalidate: Duration,
    /// Served stale while the upstream fails, for responses without `stale-if-error`.
    #[serde(with = "humantime_serde")]
    pub stale_if_error: Duration,
    /// The longest heuristic freshness (RFC 9111 §4.2.2); 0s turns it off.
    #[serde(with = "humantime_serde")]
    pub heuristic_max: Duration,
    /// Requests for a key being fetched wait for that fetch (nginx's `proxy_cache_lock`).
    pub lock: bool,
    /// How long they wait before going upstream themselves.
    #[serde(with = "humantime_serde")]
    pub lock_timeout: Duration,
    /// Look up and store requests with `Authorization`, keyed by it (else they bypass).
    pub store_authorized: bool,
    /// Store responses that set cookies.
    pub store_set_cookie: bool,
    /// Ignore the request's `Cache-Control`, as CDNs do.
    pub ignore_request_cache_control: bool,
    /// Send `Cache-Status` (RFC 9211).
    pub cache_status_header: bool,
    /// A directory for a disk tier: every stored response is written there too and read
    /// back after a restart. Unset: memory only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_path: Option<std::path::PathBuf>,
    /// Bytes the disk tier may hold.
    pub disk_max_bytes: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            enabled: true,
            max_bytes: 64 << 20,
            max_entries: 100_000,
            max_object_bytes: 8 << 20,
            key_headers: Vec::new(),
            key_cookies: Vec::new(),
            stale_while_revalidate: Duration::ZERO,
            stale_if_error: Duration::ZERO,
            heuristic_max: Duration::from_secs(3600),
            lock: true,
            lock_timeout: Duration::from_secs(5),
            store_authorized: false,
            store_set_cookie: false,
            ignore_request_cache_control: false,
            cache_status_header: false,
            disk_path: None,
            disk_max_bytes: 1 << 30,
        }
    }
}

/// `[routes.cors]`: which origins may read the route's responses from a browser, and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CorsConfig {
    /// Origins (`https://app.example.com`), or `["*"]` for any (not with credentials).
    pub allow_origins: Vec<String>,
    pub allow_methods: Vec<String>,
    /// Request headers a preflight may ask for; `["*"]` for any (not with credentials).
    pub allow_headers: Vec<String>,
    /// Response headers a script may read beyond the safelisted ones.
    pub expose_headers: Vec<String>,
    /// Cookies and `Authorization` may be sent, and the response read.
    pub allow_credentials: bool,
    /// How long a browser may keep a preflight's answer.
    #[serde(with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub max_age: Option<Duration>,
}

impl Default for CorsConfig {
    fn default() -> Self {
        CorsConfig {
            allow_origins: Vec::new(),
            allow_methods: vec!["GET".into(), "HEAD".into(), "POST".into()],
            allow_headers: Vec::new(),
            expose_headers: Vec::new(),
            allow_credentials: false,
            max_age: None,
        }
    }
}

/// `[routes.headers]`: rule sets for responses and requests. Each is one table or a list
/// of them (`[[routes.headers.response]]`), applied in order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HeadersConfig {
    #[serde(
        deserialize_with = "table_or_list",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub response: Vec<HeaderRulesConfig>,
    /// To the upstream: proxy routes only.
    #[serde(
        deserialize_with = "table_or_list",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub request: Vec<HeaderRulesConfig>,
}

/// One rule set: removed first, then set (replacing), then added (appending). Values may
/// use `$host`, `$remote_addr`, `$scheme`, `$request_id` and (responses) `$upstream_addr`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HeaderRulesConfig {
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub set: std::collections::BTreeMap<String, String>,
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub add: std::collections::BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
    /// Responses only: the statuses (`404`) or classes (`2xx`) the set applies to; empty
    /// means every response.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub statuses: Vec<String>,
}

/// `[[routes.redirects]]`: at most one of `exact`, `prefix` and `regex` (none matches
/// every path); `to` is the target, with `$1`…`$9` the captures (a prefix's `$1` is the
/// rest of the path) and `$request_uri`, `$host`, `$scheme`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedirectConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    pub to: String,
    /// 301, 302, 303, 307 or 308.
    #[serde(default = "moved_permanently")]
    pub status: u16,
}

fn moved_permanently() -> u16 {
    301
}

/// `[[routes.rewrites]]`: a match as a redirect's, and the target the route's Service
/// gets instead (a `?` in it replaces the query, else the query is kept).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RewriteConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    pub to: String,
}

/// `[routes.request_id]`: the header the ID goes in, and the peers whose own ID is kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RequestIdConfig {
    pub header: String,
    pub trusted_proxies: Vec<String>,
}

impl Default for RequestIdConfig {
    fn default() -> Self {
        RequestIdConfig {
            header: "X-Request-Id".into(),
            trusted_proxies: Vec::new(),
        }
    }
}

/// `[routes.rate_limit]`: a token bucket per client address (an IPv6 client by its /64).
/// A request over the rate gets 429 with `Retry-After`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RateLimitConfig {
    pub requests_per_second: f64,
    /// Requests a client may make at once before the rate applies.
    pub burst: u32,
    /// Peers (CIDRs) whose `X-Forwarded-For` names the client.
    pub trusted_proxies: Vec<String>,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        RateLimitConfig {
            requests_per_second: 10.0,
            burst: 20,
            trusted_proxies: Vec::new(),
        }
    }
}

/// `[routes.auth]`: HTTP Basic from an htpasswd file, Bearer JWTs, or forward auth (one
/// of the three).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// An htpasswd file (bcrypt, SHA-256/512-crypt, apr1 or {SHA} hashes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub htpasswd: Option<PathBuf>,
    /// With `htpasswd`: the users let in (empty: all); any other valid user gets 403.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jwt: Option<JwtConfig>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forward: Option<ForwardAuthConfig>,
    pub realm: String,
    /// A verified user and password are remembered this long.
    #[serde(with = "humantime_serde")]
    pub cache_ttl: Duration,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            htpasswd: None,
            users: Vec::new(),
            jwt: None,
            forward: None,
            realm: "gatehouse".into(),
            cache_ttl: Duration::from_secs(60),
        }
    }
}

/// `[routes.auth.jwt]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JwtConfig {
    /// A JWK set (JSON), a PEM public key, or for HS algorithms the secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// Or a JWK set fetched from this URL: refreshed every `jwks_refresh`, and when a
    /// token names a key it doesn't hold (at most once per `jwks_refresh_min`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jwks_url: Option<String>,
    #[serde(with = "humantime_serde")]
    pub jwks_refresh: Duration,
    #[serde(with = "humantime_serde")]
    pub jwks_refresh_min: Duration,
    /// How long a JWKS fetch may take.
    #[serde(with = "humantime_serde")]
    pub jwks_timeout: Duration,
    /// Accepted algorithms (HS256, RS256, PS256, ES256, EdDSA, ...), all of one key kind.
    pub algorithms: Vec<String>,
    /// Accepted `iss` values (empty: not checked).
    pub issuers: Vec<String>,
    /// Accepted `aud` values (empty: not checked).
    pub audiences: Vec<String>,
    /// Clock leeway for `exp` and `nbf`.
    #[serde(with = "humantime_serde")]
    pub leeway: Duration,
    /// Claims sent on as request headers: `{ sub = "X-User" }`. A client's own header of
    /// that name is removed.
    pub forward_claims: std::collections::BTreeMap<String, String>,
    /// Claims a valid token must carry, else 403: `{ scope = ["admin"] }` lets in a token
    /// whose `scope` (a string, space-separated words, or a list) holds `admin`.
    pub require: std::collections::BTreeMap<String, Vec<String>>,
}

/// `[routes.auth.forward]`: ask an auth service, as nginx `auth_request` and Traefik
/// ForwardAuth do. 2xx lets the request in; 401, 403 and redirects go back to the
/// client; anything else, or no answer within `timeout`, is a 503.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ForwardAuthConfig {
    /// The auth service, `http://` or `https://`.
    pub url: String,
    /// Request headers passed to the auth service.
    pub request_headers: Vec<String>,
    /// Headers of a 2xx answer copied onto the request (a client's own are removed).
    pub response_headers: Vec<String>,
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Peers (CIDRs) whose `X-Forwarded-For` names the client the auth service is told of;
    /// from anyone else, the peer is the client.
    pub trusted_proxies: Vec<String>,
}

impl Default for ForwardAuthConfig {
    fn default() -> Self {
        ForwardAuthConfig {
            url: String::new(),
            request_headers: vec!["authorization".into(), "cookie".into()],
            response_headers: Vec::new(),
            timeout: Duration::from_secs(5),
            trusted_proxies: Vec::new(),
        }
    }
}

impl Default for JwtConfig {
    fn default() -> Self {
        JwtConfig {
            key_file: None,
            jwks_url: None,
            jwks_refresh: Duration::from_secs(900),
            jwks_refresh_min: Duration::from_secs(10),
            jwks_timeout: Duration::from_secs(5),
            algorithms: vec!["RS256".into()],
            issuers: Vec::new(),
            audiences: Vec::new(),
            leeway: Duration::from_secs(30),
            forward_claims: Default::default(),
            require: Default::default(),
        }
    }
}

/// `[routes.access]`: which client addresses may use the route. A client in `deny` gets
/// 403; so does one outside `allow` when `allow` is not empty.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccessConfig {
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    /// Peers (CIDRs) whose `X-Forwarded-For` names the client; from anyone else it is
    /// ignored.
    pub trusted_proxies: Vec<String>,
}

/// `[routes.access_log]`, and `[access_log]` for requests no route answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccessLogConfig {
    /// A file (appended to, created if missing) or `stdout`.
    pub path: String,
    /// `combined` (nginx's), `common` or `json`.
    pub format: LogFormat,
    /// A template of named fields (`$remote_addr "$request" $status`), instead of `format`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// Rotate when the file passes this many bytes (0: never; logrotate and SIGUSR1 work
    /// either way)...
    pub max_size: u64,
    /// ...keeping this many old files (`access.log.1` is the newest).
    pub keep: usize,
    /// Bytes of lines held for the writer before further lines are dropped and counted.
    pub max_pending: usize,
}

impl Default for AccessLogConfig {
    fn default() -> Self {
        AccessLogConfig {
            path: "stdout".into(),
            format: LogFormat::Combined,
            template: None,
            max_size: 0,
            keep: 5,
            max_pending: 16 << 20,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Combined,
    Common,
    Json,
}

/// `[routes.proxy]`: a pool of upstream servers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProxyConfig {
    /// `http://host:port` targets: strings, or tables `{ url = "...", weight = 2 }`.
    pub upstreams: Vec<UpstreamConfig>,
    pub policy: Policy,
    /// For `policy = "hash"`: `client_ip`, `header:<name>` or `cookie:<name>`.
    pub hash_on: String,
    /// Send the client's `Host` (true) or the upstream's authority (false).
    pub keep_host: bool,
    /// Remove the route's path prefix before passing the path on (`/api/x` → `/x`), like
    /// nginx's `proxy_pass http://pool/;`; by default the path goes as it came.
    pub strip_prefix: bool,
    /// Largest request body, in bytes; larger gets 413. 0: no limit.
    pub max_body_bytes: u64,
    /// Largest response head an upstream may send, in bytes (at least 8192); a larger
    /// one is a 502.
    pub max_response_header_bytes: usize,
    #[serde(with = "humantime_serde")]
    pub connect_timeout: std::time::Duration,
    /// From the request sent to the response head received.
    #[serde(with = "humantime_serde")]
    pub response_timeout: std::time::Duration,
    /// An upstream's response body that sends nothing for this long is cut off.
    #[serde(with = "humantime_serde")]
    pub body_idle_timeout: std::time::Duration,
    /// Idle pooled connections are closed after this long.
    #[serde(with = "humantime_serde")]
    pub pool_idle_timeout: std::time::Duration,
    pub pool_max_idle: usize,
    /// Other upstreams tried for an idempotent request that could not be sent at all.
    pub retries: u32,
    /// Consecutive failures of the upstream's own (refused, reset, a bad head, no head in
    /// time for a request sent in full; never a client's stalled upload) that eject it,
    /// unless it is the route's last available upstream...
    pub max_fails: u32,
    /// ...for this long.
    #[serde(with = "humantime_serde")]
    pub fail_timeout: std::time::Duration,
    /// Client addresses (CIDRs) whose X-Forwarded-* headers are trusted and kept.
    pub trusted_proxies: Vec<String>,
    /// Also send an RFC 7239 `Forwarded` header.
    pub forwarded: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheckConfig>,
    /// Trust for https upstreams: `webpki` (Mozilla's roots, built in) or `system`.
    pub tls_roots: TlsRoots,
    /// A PEM file of more CA certificates to trust for https upstreams (a private CA).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_ca: Option<PathBuf>,
    /// A PEM certificate chain and its key, shown to upstreams that ask (mutual TLS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_client_cert: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_client_key: Option<PathBuf>,
    /// HTTP/2 only, by prior knowledge for http:// upstreams (h2c, gRPC). https upstreams
    /// negotiate HTTP/2 or HTTP/1.1 by ALPN when this is off.
    pub http2: bool,
    /// Refuse (400) request paths that backends commonly read differently from the
    /// gateway: `;` path parameters (Tomcat reads `/admin;x` as `/admin`) and double
    /// encoding (`%2561` is `%61` to a backend that decodes twice). Turn off only for a
    /// backend that needs them and reads them the one way the route's rules assume.
    /// Encoded slashes beside dot segments and spellings that another route would match
    /// ignoring case are refused either way.
    pub strict_paths: bool,
    /// Protocols a client may upgrade the connection to through this route (RFC 9110
    /// §7.8), compared without case. Any other `Upgrade` is dropped and the request goes
    /// as a plain one. `h2c` is never relayed: its bytes would skip the route's checks.
    pub upgrades: Vec<String>,
    /// The route's `error_pages` replace the upstream's own error responses too (nginx's
    /// `proxy_intercept_errors`); by default only gatehouse's own (502, 504…) get them.
    pub intercept_errors: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TlsRoots {
    #[default]
    Webpki,
    System,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            upstreams: Vec::new(),
            policy: Policy::RoundRobin,
            hash_on: "client_ip".into(),
            keep_host: true,
            strip_prefix: false,
            max_body_bytes: 0,
            max_response_header_bytes: 64 * 1024,
            connect_timeout: std::time::Duration::from_secs(5),
            response_timeout: std::time::Duration::from_secs(60),
            body_idle_timeout: std::time::Duration::from_secs(60),
            pool_idle_timeout: std::time::Duration::from_secs(60),
            pool_max_idle: 64,
            retries: 1,
            max_fails: 3,
            fail_timeout: std::time::Duration::from_secs(10),
            trusted_proxies: Vec::new(),
            forwarded: false,
            health_check: None,
            tls_roots: TlsRoots::Webpki,
            tls_ca: None,
            tls_client_cert: None,
            tls_client_key: None,
            http2: false,
            strict_paths: true,
            upgrades: vec!["websocket".into()],
            intercept_errors: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// Weighted round robin.
    RoundRobin,
    /// The less loaded of two upstreams picked at random (power of two choices).
    LeastRequests,
    /// Consistent hash of `hash_on`.
    Hash,
}

/// One upstream: a URL string, or a table with a weight.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UpstreamConfig {
    pub url: String,
    pub weight: u32,
}

impl<'de> Deserialize<'de> for UpstreamConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            url: String,
            #[serde(default = "one")]
            weight: u32,
        }
        fn one() -> u32 {
            1
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Url(String),
            Table(Table),
        }
        Ok(match Either::deserialize(d)? {
            Either::Url(url) => UpstreamConfig { url, weight: 1 },
            Either::Table(t) => UpstreamConfig {
                url: t.url,
                weight: t.weight,
            },
        })
    }
}

/// `[routes.proxy.health_check]`: active checks, each upstream on its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthCheckConfig {
    #[serde(with = "humantime_serde")]
    pub interval: std::time::Duration,
    pub path: String,
    /// The status a healthy upstream answers.
    pub expect_status: u16,
    #[serde(with = "humantime_serde")]
    pub timeout: std::time::Duration,
    /// Consecutive passes that bring an upstream back.
    pub healthy: u32,
    /// Consecutive failures that take it out.
    pub unhealthy: u32,
}

impl Default for HealthCheckConfig {
    fn default() -> Self {
        HealthCheckConfig {
            interval: std::time::Duration::from_secs(5),
            path: "/".into(),
            expect_status: 200,
            timeout: std::time::Duration::from_secs(2),
            healthy: 2,
            unhealthy: 3,
        }
    }
}

/// A content coding gatehouse can send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Coding {
    Br,
    Zstd,
    Gzip,
}

impl std::str::FromStr for Coding {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "br" => Ok(Coding::Br),
            "zstd" => Ok(Coding::Zstd),
            "gzip" => Ok(Coding::Gzip),
            _ => Err("expected br, zstd or gzip".into()),
        }
    }
}

/// `[routes.compression]`: each version of a response is compressed once and served
/// from memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompressionConfig {
    pub enabled: bool,
    /// Codings offered, in the server's order of preference (which breaks the client's
    /// ties).
    #[serde(deserialize_with = "one_or_many")]
    pub encodings: Vec<Coding>,
    /// 1–9.
    pub gzip_level: u32,
    /// 0–11.
    pub br_level: u32,
    /// 1–22.
    pub zstd_level: i32,
    /// Bytes of compressed variants held in memory for this route.
    pub cache_max_bytes: u64,
    /// Bodies smaller than this are sent as they are.
    pub min_size: u64,
    /// Bodies larger than this are compressed as they stream, not cached.
    pub max_size: u64,
    /// Compressible media types: `type/subtype`, `type/*` or `type/*+suffix`.
    #[serde(deserialize_with = "one_or_many")]
    pub types: Vec<String>,
    /// Static routes: send `file.br`, `file.zst`, `file.gz` from disk when present and not
    /// older than the file.
    pub precompressed: bool,
}

impl Default for CompressionConfig {
    fn default() -> Self {
        CompressionConfig {
            enabled: true,
            encodings: vec![Coding::Br, Coding::Zstd, Coding::Gzip],
            gzip_level: 6,
            br_level: 5,
            zstd_level: 3,
            cache_max_bytes: 64 * 1024 * 1024,
            min_size: 1024,
            max_size: 8 * 1024 * 1024,
            types: [
                "text/*",
                "application/javascript",
                "application/x-javascript",
                "application/ecmascript",
                "application/json",
                "application/*+json",
                "application/xml",
                "application/*+xml",
                "image/svg+xml",
                "application/wasm",
                "font/ttf",
                "font/otf",
                "application/x-font-ttf",
                "application/x-font-otf",
                "application/vnd.ms-fontobject",
            ]
            .map(String::from)
            .to_vec(),
            precompressed: true,
        }
    }
}

fn slash() -> String {
    "/".into()
}

impl Route {
    pub fn static_route(root: Option<PathBuf>) -> Self {
        Route {
            name: None,
            hosts: Vec::new(),
            path: "/".into(),
            static_files: Some(StaticConfig {
                root,
                ..StaticConfig::default()
            }),
            proxy: None,
            mount: None,
            compression: CompressionConfig::default(),
            access_log: None,
            access: None,
            auth: None,
            rate_limit: None,
            headers: None,
            redirects: Vec::new(),
            rewrites: Vec::new(),
            request_id: None,
            cors: None,
            cache: None,
            error_pages: std::collections::BTreeMap::new(),
        }
    }

    /// Whether a redirect answers every path: the route needs no Service (a host moved).
    pub fn redirects_all(&self) -> bool {
        self.redirects
            .iter()
            .any(|r| r.exact.is_none() && r.prefix.is_none() && r.regex.is_none())
    }

    /// The route's name; set for every route after loading.
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StaticConfig {
    /// Directory to serve; defaults to the top-level `root`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root: Option<PathBuf>,
    /// Index files tried, in order, for a directory.
    #[serde(deserialize_with = "one_or_many")]
    pub index: Vec<String>,
    /// An HTML listing for directories without an index file.
    pub listing: bool,
    /// `Cache-Control` value sent with every file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<String>,
    /// A file, relative to the root, served with status 404 when nothing matches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_found_page: Option<String>,
    /// When the path names no file: these paths (`$path` is the request's) are tried in
    /// order, and the first that is a file is served with 200.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub try_files: Vec<String>,
    /// Answer 404 for any path with a segment starting with `.`.
    pub hide_dotfiles: bool,
    /// Follow symlinks whose target lies outside the root.
    pub follow_symlinks_outside_root: bool,
    pub open_file_cache: OpenFileCacheConfig,
}

impl Default for StaticConfig {
    fn default() -> Self {
        StaticConfig {
            root: None,
            index: vec!["index.html".into()],
            listing: false,
            cache_control: None,
            not_found_page: None,
            try_files: Vec::new(),
            hide_dotfiles: true,
            follow_symlinks_outside_root: false,
            open_file_cache: OpenFileCacheConfig::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OpenFileCacheConfig {
    pub enabled: bool,
    /// One `fstat` of the open file per request, so an edit, a replacement or a deletion
    /// is served at once, and a `stat` of its path once a second. `false` trusts an
    /// entry for `valid`, like nginx's `open_file_cache_valid`.
    pub strict: bool,
    #[serde(with = "humantime_serde")]
    pub valid: Duration,
    pub max_entries: usize,
    /// Total bytes of file bodies held in memory.
    pub max_bytes: u64,
    /// Files up to this size are kept in memory and sent with their head in one write.
    pub inline_max: u64,
    /// An entry not requested for this long is dropped and its file closed, like the
    /// `inactive` of nginx's `open_file_cache`; `"0s"` keeps entries until evicted.
    #[serde(with = "humantime_serde")]
    pub inactive: Duration,
}

impl Default for OpenFileCacheConfig {
    fn default() -> Self {
        OpenFileCacheConfig {
            enabled: true,
            strict: true,
            valid: Duration::from_secs(1),
            max_entries: 10_000,
            max_bytes: 64 * 1024 * 1024,
            inline_max: 64 * 1024,
            inactive: Duration::from_secs(60),
        }
    }
}

/// `ip:port`, or `name:port` resolved to all the name's addresses (`localhost:8080` is
/// 127.0.0.1 and ::1 where both are configured), as nginx's and Caddy's `listen` do.
fn resolve_listen(s: &str) -> Result<Vec<SocketAddr>, String> {
    if let Ok(a) = s.parse() {
        return Ok(vec![a]);
    }
    match std::net::ToSocketAddrs::to_socket_addrs(s) {
        // Duplicates (one per socket type from getaddrinfo) go in `listen_addrs`.
        Ok(found) => {
            let out: Vec<SocketAddr> = found.collect();
            if out.is_empty() {
                Err(format!("{s:?}: the name has no address"))
            } else {
                Ok(out)
            }
        }
        Err(e) => Err(format!(
            "{s:?} is neither ip:port nor a name:port that resolves ({e})"
        )),
    }
}

fn listen_addrs<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<SocketAddr>, D::Error> {
    let mut out = Vec::new();
    for s in one_or_many::<D, String>(d)? {
        for a in resolve_listen(&s).map_err(serde::de::Error::custom)? {
            if !out.contains(&a) {
                out.push(a);
            }
        }
    }
    Ok(out)
}

fn listen_addr<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    let s = String::deserialize(d)?;
    let found = resolve_listen(&s).map_err(serde::de::Error::custom)?;
    // One address: an IPv4 one where the name has one (`localhost` often resolves to ::1
    // first, where a probe to 127.0.0.1 would find nothing).
    found
        .iter()
        .find(|a| a.is_ipv4())
        .or(found.first())
        .copied()
        .ok_or_else(|| serde::de::Error::custom(format!("{s:?}: the name has no address")))
}

/// Accepts one value or a list of them, each parsed from a string, so that an environment
/// variable or a CLI flag can give a single value and a file a list.
fn one_or_many<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    use serde::de::{Error, SeqAccess, Visitor};
    use std::marker::PhantomData;

    struct V<T>(PhantomData<T>);

    fn parse<T: std::str::FromStr, E: Error>(s: &str) -> Result<T, E>
    where
        T::Err: std::fmt::Display,
    {
        s.parse::<T>().map_err(|e| E::custom(format!("{s:?}: {e}")))
    }

    impl<'de, T: std::str::FromStr> Visitor<'de> for V<T>
    where
        T::Err: std::fmt::Display,
    {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a string or a list of strings")
        }
        fn visit_str<E: Error>(self, s: &str) -> Result<Vec<T>, E> {
            Ok(vec![parse(s)?])
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut out = Vec::new();
            while let Some(s) = seq.next_element::<String>()? {
                out.push(parse(&s)?);
            }
            Ok(out)
        }
    }
    d.deserialize_any(V(PhantomData))
}

/// Accepts one table or a list of them. A visitor rather than an untagged enum, so that
/// a bad key inside is named in the error rather than "did not match any variant".
fn table_or_list<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    use serde::de::{value::MapAccessDeserializer, MapAccess, SeqAccess, Visitor};
    use std::marker::PhantomData;

    struct V<T>(PhantomData<T>);

    impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a table or a list of tables")
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Vec<T>, A::Error> {
            Ok(vec![T::deserialize(MapAccessDeserializer::new(map))?])
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut out = Vec::new();
            while let Some(t) = seq.next_element()? {
                out.push(t);
            }
            Ok(out)
        }
    }
    d.deserialize_any(V(PhantomData))
}
