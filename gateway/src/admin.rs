//! The admin listener: `/healthz` (the process is up), `/readyz` (it takes traffic; 503
//! while draining), `/metrics`, and `POST /reload` (re-read the configuration and swap the
//! routes).
//!
//! It has the public listeners' head limits and header timeout, and a connection cap of
//! its own (`admin_max_connections`), so that it can't be used to exhaust the process's
//! file descriptors. `POST /reload` is refused to browsers' cross-origin requests, and
//! takes the bearer token `admin_token` when one is set; without one, it is open only when
//! the admin listener is on a loopback address.

use crate::body::GateBody;
use axum::routing::get;
use axum::Router;
use gatehouse_config::Config;
use http::header::{AUTHORIZATION, ORIGIN, WWW_AUTHENTICATE};
use http::{HeaderMap, HeaderValue, StatusCode};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Who may `POST /reload`.
#[derive(Debug)]
enum ReloadAuth {
    /// Requests with `Authorization: Bearer <this>`.
    Token(Box<[u8]>),
    /// Anyone who can connect: a loopback admin listener without a token.
    Open,
    /// No one: no token, and the listener is reachable from other hosts.
    Refused,
}

/// The admin listener's settings, made once at start.
pub(crate) struct Settings {
    http1: http1::Builder,
    max_connections: usize,
    reload: Arc<ReloadAuth>,
}

impl Settings {
    /// `addr`: the address the admin listener is bound to.
    pub(crate) fn new(config: &Config, addr: SocketAddr) -> Settings {
        let mut b = http1::Builder::new();
        // The public listeners' head limits; their header timeout, here hyper's own (a
        // timer per request is no cost on this listener): it runs from the moment the
        // connection waits for a head, so an idle connection is closed after it too.
        b.timer(TokioTimer::new())
            .header_read_timeout(config.timeouts.header_read)
            .max_buf_size(config.limits.max_header_bytes.max(8192))
            .max_header_size(config.limits.max_header_bytes)
            .max_headers(config.limits.max_headers);
        let reload = match &config.admin_token_resolved {
            Some(t) => ReloadAuth::Token(t.expose().as_bytes().into()),
            None if addr.ip().to_canonical().is_loopback() => ReloadAuth::Open,
            None => {
                tracing::warn!(
                    "admin listener {addr} is not on a loopback address and admin_token is \
                     not set: POST /reload is refused (SIGHUP still reloads)"
                );
                ReloadAuth::Refused
            }
        };
        Settings {
            http1: b,
            max_connections: config.admin_max_connections.max(1),
            reload: Arc::new(reload),
        }
    }
}

/// Logs at most one line per 10 s for each of the listener's refusals.
struct Throttled(AtomicU64);

impl Throttled {
    const fn new() -> Self {
        Throttled(AtomicU64::new(u64::MAX))
    }

    fn due(&self) -> bool {
        let now = gatehouse_layers::clock::coarse_ms() / 10_000;
        self.0.swap(now, Ordering::Relaxed) != now
    }
}

static RELOAD_REFUSAL_LOGGED: Throttled = Throttled::new();
static CAP_LOGGED: Throttled = Throttled::new();

/// Why a `POST /reload` is refused, if it is.
fn reload_refusal(
    auth: &ReloadAuth,
    headers: &HeaderMap,
) -> Option<http::Response<crate::body::GateBody>> {
    refusal(auth, headers, "reload")
}

/// Why a `POST` to the admin listener that changes something (`what`: "reload",
/// "purge") is refused, if it is: the same rules for each.
fn refusal(
    auth: &ReloadAuth,
    headers: &HeaderMap,
    what: &str,
) -> Option<http::Response<crate::body::GateBody>> {
    // A browser sends `Origin` with every cross-origin request and with every POST (RFC
    // 6454 §7, Fetch): no legitimate caller of this endpoint is a web page. A page that
    // rebinds its own name to this address still sends its own origin.
    let fetch_site = headers
        .get("sec-fetch-site")
        .map(|v| v.as_bytes() == b"same-origin" || v.as_bytes() == b"none");
    if headers.contains_key(ORIGIN) || fetch_site == Some(false) {
        if RELOAD_REFUSAL_LOGGED.due() {
            tracing::warn!("admin: {what} from a web page (Origin or Sec-Fetch-Site) refused");
        }
        return Some(plain(
            StatusCode::FORBIDDEN,
            format!("cross-origin requests may not {what}\n"),
        ));
    }
    match auth {
        ReloadAuth::Open => None,
        ReloadAuth::Refused if what == "reload" => Some(plain(
            StatusCode::FORBIDDEN,
            "reload over the network needs admin_token (or send SIGHUP)\n",
        )),
        ReloadAuth::Refused => Some(plain(
            StatusCode::FORBIDDEN,
            format!("{what} over the network needs admin_token\n"),
        )),
        ReloadAuth::Token(want) => {
            if bearer(headers).is_some_and(|got| same_token(got, want)) {
                return None;
            }
            if RELOAD_REFUSAL_LOGGED.due() {
                tracing::warn!("admin: {what} without the right admin_token refused");
            }
            let mut res = plain(StatusCode::UNAUTHORIZED, "a bearer token is needed\n");
            // RFC 6750 §3.
            res.headers_mut().insert(
                WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"gatehouse admin\""),
            );
            Some(res)
        }
    }
}

/// The credentials of `Authorization: Bearer <token>` (RFC 6750 §2.1; the scheme is
/// case-insensitive, RFC 9110 §11.1).
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let v = headers.get(AUTHORIZATION)?.as_bytes();
    let (scheme, rest) = v.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"bearer") || rest.first() != Some(&b' ') {
        return None;
    }
    Some(rest.trim_ascii())
}

/// Compares every byte of the expected token whatever arrived, so that the time taken
/// tells nothing of how much of a guess was right.
fn same_token(got: &[u8], want: &[u8]) -> bool {
    let mut diff = got.len() ^ want.len();
    for (i, w) in want.iter().enumerate() {
        diff |= usize::from(got.get(i).copied().unwrap_or(0) ^ w);
    }
    std::hint::black_box(diff) == 0
}

/// Re-reads the configuration and swaps the routes. `Ok` lists the settings that changed
/// but are read at start only (they wait for a restart); `Err` names what is wrong (the
/// old configuration stays).
pub type Reloader = Arc<dyn Fn() -> Result<Vec<String>, String> + Send + Sync>;

/// What the admin listener reads of the server it belongs to: a narrow view, so that this
/// module needs nothing of `server` (which sits above it).
pub(crate) trait ServerView: Send + Sync + 'static {
    /// What `POST /reload` runs, once set.
    fn reloader(&self) -> Option<Reloader>;
    /// `/metrics`, when metrics are on.
    fn exporter(&self) -> Option<&crate::metrics::Exporter>;
    /// The routes' caches (for `POST /cache/purge`); none for a server without the
    /// gateway's router.
    fn caches(&self) -> Vec<crate::router::RouteCaches>;
    /// Draining: `/readyz` answers 503.
    fn is_draining(&self) -> bool;
    /// Resolves once every public connection has closed, or the drain timeout has passed.
    fn drained(&self) -> impl Future<Output = ()> + Send + '_;
}

/// `POST /cache/purge?url=<absolute URL>[&prefix=1][&route=<name>]`: removes the stored
/// responses for that URL (every variant, whatever extra key fields), or with `prefix`
/// every one whose URL starts with it, from each route's cache or the named route's.
fn purge(caches: &[crate::router::RouteCaches], query: Option<&str>) -> http::Response<GateBody> {
    let mut url = None;
    let mut raw_url = None;
    let mut prefix = false;
    let mut route = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, raw) = pair.split_once('=').unwrap_or((pair, ""));
        let v = percent_encoding::percent_decode_str(&raw.replace('+', " "))
            .decode_utf8_lossy()
            .into_owned();
        match k {
            "url" => {
                url = Some(v);
                raw_url = Some(raw.to_string());
            }
            "prefix" => prefix = matches!(v.as_str(), "1" | "true" | "yes"),
            "route" => route = Some(v),
            _ => {
                return plain(
                    StatusCode::BAD_REQUEST,
                    format!("unknown parameter {k:?}: url, prefix and route are known\n"),
                )
            }
        }
    }
    let Some(url) = url.filter(|u| u.contains("://")) else {
        return plain(
            StatusCode::BAD_REQUEST,
            "url= must name an absolute URL, such as http://example.com/path\n",
        );
    };
    // Keys hold the scheme and host lower-cased (RFC 9110 §4.2.3), and the target as it
    // was sent, escapes and all. So the URL is tried as given in the query too: with
    // `url=http://h/a%20b`, the decoded value (`/a b`) is in no key (found in review:
    // such a purge answered "0" and left the entry).
    let key_of = |url: &str| match url.split_once("://") {
        Some((scheme, rest)) => {
            let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            format!(
                "GET {}://{}{path}",
                scheme.to_ascii_lowercase(),
                host.to_ascii_lowercase()
            )
        }
        None => format!("GET {url}"),
    };
    let mut keys = vec![key_of(&url)];
    if let Some(raw) = raw_url.filter(|r| r.contains("://")) {
        let raw = key_of(&raw);
        if raw != keys[0] {
            keys.push(raw);
        }
    }
    let mut removed = 0;
    let mut routes = 0;
    for c in caches {
        let Some(store) = &c.responses else { continue };
        if route.as_deref().is_some_and(|r| r != c.route) {
            continue;
        }
        routes += 1;
        for key in &keys {
            removed += if prefix {
                store.purge_prefix(key)
            } else {
                store.purge(key) + store.purge_prefix(&format!("{key}\n"))
            };
        }
    }
    if routes == 0 {
        return plain(
            StatusCode::NOT_FOUND,
            match route {
                Some(r) => format!("no route named {r:?} has a cache\n"),
                None => "no route has a cache\n".to_string(),
            },
        );
    }
    plain(StatusCode::OK, format!("purged {removed}\n"))
}

fn router<S: ServerView>(shared: Arc<S>, auth: Arc<ReloadAuth>) -> Router {
    let for_reload = shared.clone();
    // One purge on the pool at a time: on a hung disk, the others wait here, each holding
    // an admin connection (bounded) rather than a thread.
    let purging = Arc::new(tokio::sync::Semaphore::new(1));
    let for_purge = (shared.clone(), auth.clone(), purging);
    Router::new()
        .route(
            "/cache/purge",
            axum::routing::post(move |headers: HeaderMap, uri: http::Uri| {
                let (shared, auth, purging) = for_purge.clone();
                async move {
                    if let Some(refused) = refusal(&auth, &headers, "purge") {
                        return refused;
                    }
                    // On the blocking pool: a purge unlinks files before it answers, and
                    // on a hung disk that waits, which here would stop every admin
                    // connection (`/healthz`, `/metrics`) with it. The permit goes with
                    // the purge, which runs on if its client leaves.
                    let Ok(permit) = purging.acquire_owned().await else {
                        return plain(StatusCode::SERVICE_UNAVAILABLE, "purges are closed\n");
                    };
                    let caches = shared.caches();
                    let query = uri.query().map(str::to_owned);
                    tokio::task::spawn_blocking(move || {
                        let _permit = permit;
                        purge(&caches, query.as_deref())
                    })
                    .await
                    .unwrap_or_else(|_| {
                        plain(StatusCode::INTERNAL_SERVER_ERROR, "the purge failed\n")
                    })
                }
            }),
        )
        .route(
            "/reload",
            axum::routing::post(move |headers: HeaderMap| {
                let shared = for_reload.clone();
                let auth = auth.clone();
                async move {
                    if let Some(refused) = reload_refusal(&auth, &headers) {
                        return refused;
                    }
                    let f = shared.reloader();
                    let Some(f) = f else {
                        return plain(StatusCode::NOT_IMPLEMENTED, "reload is not set up\n");
                    };
                    // Reading files and opening roots: off the event loop.
                    match tokio::task::spawn_blocking(move || f()).await {
                        Ok(Ok(waiting)) if waiting.is_empty() => {
                            plain(StatusCode::OK, "reloaded\n")
                        }
                        Ok(Ok(waiting)) => plain(
                            StatusCode::OK,
                            format!(
                                "reloaded; changed but applied only after a restart: {}\n",
                                waiting.join(", ")
                            ),
                        ),
                        Ok(Err(e)) => plain(
                            StatusCode::BAD_REQUEST,
                            format!("configuration refused; the old one stays in force:\n{e}\n"),
                        ),
                        Err(_) => plain(StatusCode::INTERNAL_SERVER_ERROR, "reload failed\n"),
                    }
                }
            }),
        )
        .route("/healthz", get(|| async { plain(StatusCode::OK, "ok\n") }))
        .route(
            "/metrics",
            get({
                let shared = shared.clone();
                move || {
                    let shared = shared.clone();
                    async move {
                        let Some(e) = shared.exporter() else {
                            return plain(StatusCode::NOT_FOUND, "metrics are off\n");
                        };
                        let mut res = plain(StatusCode::OK, e.render());
                        res.headers_mut().insert(
                            http::header::CONTENT_TYPE,
                            http::HeaderValue::from_static(
                                "text/plain; version=0.0.4; charset=utf-8",
                            ),
                        );
                        res
                    }
                }
            }),
        )
        .route(
            "/readyz",
            get(move || {
                let draining = shared.is_draining();
                async move {
                    if draining {
                        plain(StatusCode::SERVICE_UNAVAILABLE, "draining\n")
                    } else {
                        plain(StatusCode::OK, "ready\n")
                    }
                }
            }),
        )
}

pub(crate) async fn serve<S: ServerView>(
    listener: TcpListener,
    shared: Arc<S>,
    mut shutdown: watch::Receiver<bool>,
    settings: Settings,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("admin listener: {e}");
            return;
        }
    };
    let app = router(shared.clone(), settings.reload.clone());
    if shared.exporter().is_some() {
        let shared = shared.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tick.tick().await;
                if let Some(e) = shared.exporter() {
                    e.upkeep();
                }
            }
        });
    }
    let accepter = Accepter {
        open: Arc::new(AtomicUsize::new(0)),
        settings,
        app,
        refused: metrics::counter!("gatehouse_connections_refused_total", "listener" => "admin"),
    };
    loop {
        tokio::select! {
            accepted = listener.accept() => accepter.accepted(accepted, true).await,
            // Keep answering /readyz (503) while the public listeners drain; stop once
            // every public connection is gone.
            _ = shutdown.changed() => {
                let drained = shared.drained();
                tokio::pin!(drained);
                loop {
                    tokio::select! {
                        accepted = listener.accept() => accepter.accepted(accepted, false).await,
                        _ = &mut drained => return,
                    }
                }
            }
        }
    }
}

struct Accepter {
    /// Admin connections open now.
    open: Arc<AtomicUsize>,
    settings: Settings,
    app: Router,
    refused: metrics::Counter,
}

/// One admin connection's place under the cap, given back when it closes.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Accepter {
    async fn accepted(
        &self,
        accepted: std::io::Result<(tokio::net::TcpStream, SocketAddr)>,
        keep_alive: bool,
    ) {
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // EMFILE and friends: back off rather than spin.
                tracing::warn!("admin accept: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
                return;
            }
        };
        // One runtime thread runs this loop and every admin connection: no race between
        // the check and the increment.
        if self.open.load(Ordering::Relaxed) >= self.settings.max_connections {
            // Closed at once: a descriptor held for the length of an accept, not longer.
            drop(stream);
            self.refused.increment(1);
            if CAP_LOGGED.due() {
                tracing::warn!(
                    "admin_max_connections ({}) reached: closing new admin connections",
                    self.settings.max_connections
                );
            }
            return;
        }
        self.open.fetch_add(1, Ordering::Relaxed);
        let slot = Slot(self.open.clone());
        let _ = stream.set_nodelay(true);
        let svc = TowerToHyperService::new(self.app.clone());
        let mut http1 = self.settings.http1.clone();
        http1.keep_alive(keep_alive);
        tokio::spawn(async move {
            let _ = http1.serve_connection(TokioIo::new(stream), svc).await;
            drop(slot);
        });
    }
}

/// A short text answer in the gateway's body type (the admin routes return it to axum).
fn plain(status: StatusCode, text: impl Into<bytes::Bytes>) -> http::Response<GateBody> {
    crate::http_util::plain(status, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn tokens_compare_whole() {
        let want = b"0123456789abcdef";
        assert!(same_token(b"0123456789abcdef", want));
        for got in [
            &b""[..],
            b"0123456789abcde",
            b"0123456789abcdef0",
            b"0123456789abcdeF",
            b"1123456789abcdef",
        ] {
            assert!(!same_token(got, want), "{got:?}");
        }
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive_and_nothing_else_passes() {
        let t = |v: &str| bearer(&with(&[("authorization", v)])).map(<[u8]>::to_vec);
        assert_eq!(t("Bearer abc"), Some(b"abc".to_vec()));
        assert_eq!(t("bEARER   abc "), Some(b"abc".to_vec()));
        assert_eq!(t("Basic abc"), None);
        assert_eq!(t("Bearerabc"), None);
        assert_eq!(t("Bearer"), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }

    #[test]
    fn a_browser_request_is_refused_whatever_else_it_carries() {
        let auth = ReloadAuth::Token(b"0123456789abcdef".to_vec().into());
        let status = |h: &[(&str, &str)]| reload_refusal(&auth, &with(h)).map(|r| r.status());
        let good = ("authorization", "Bearer 0123456789abcdef");
        assert_eq!(status(&[good]), None);
        assert_eq!(status(&[good, ("sec-fetch-site", "same-origin")]), None);
        assert_eq!(status(&[good, ("sec-fetch-site", "none")]), None);
        for bad in [
            ("origin", "http://127.0.0.1:9090"),
            ("origin", "null"),
            ("sec-fetch-site", "cross-site"),
            ("sec-fetch-site", "same-site"),
        ] {
            assert_eq!(status(&[good, bad]), Some(StatusCode::FORBIDDEN), "{bad:?}");
        }
        assert_eq!(status(&[]), Some(StatusCode::UNAUTHORIZED));
        let open = ReloadAuth::Open;
        assert!(reload_refusal(&open, &HeaderMap::new()).is_none());
        let origin = with(&[("origin", "https://evil.example")]);
        assert_eq!(
            reload_refusal(&open, &origin).map(|r| r.status()),
            Some(StatusCode::FORBIDDEN)
        );
        assert_eq!(
            reload_refusal(&ReloadAuth::Refused, &HeaderMap::new()).map(|r| r.status()),
            Some(StatusCode::FORBIDDEN)
        );
    }
}
