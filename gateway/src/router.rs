//! Builds the axum [`Router`] from the configured routes.
//!
//! Selection follows nginx: the host picks a group of routes first (exact name, then the
//! longest matching `*.suffix`, then the routes with no host), then the longest path prefix
//! within the group. Each route's Service is its layer stack over the Service it mounts.

use crate::static_files::{plain, StaticFiles};
use axum::body::Body;
use axum::Router;
use gatehouse_config::{Config, Route, StaticConfig};
use gatehouse_layers::open_file_cache::{CacheOptions, FileCache, OpenFileCacheLayer, Resolver};
use http::{HeaderValue, Request, Response, StatusCode};
use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::util::BoxCloneSyncService;
use tower::ServiceExt;
use tower_service::Service;

type RouteService = BoxCloneSyncService<Request<Body>, Response<Body>, Infallible>;

/// The router for `config`. Fails if a static root can't be opened.
pub fn build(config: &Config) -> io::Result<Router> {
    let mut exact: HashMap<String, Vec<&Route>> = HashMap::new();
    let mut wildcard: HashMap<String, Vec<&Route>> = HashMap::new();
    let mut any: Vec<&Route> = Vec::new();
    for route in &config.routes {
        if route.hosts.is_empty() {
            any.push(route);
        }
        for host in &route.hosts {
            match host.strip_prefix('*') {
                Some(suffix) => wildcard.entry(suffix.to_string()).or_default().push(route),
                None => exact.entry(host.clone()).or_default().push(route),
            }
        }
    }
    let fallback = group(&any)?;
    if exact.is_empty() && wildcard.is_empty() {
        return Ok(fallback);
    }
    let mut wild: Vec<(String, Router)> = Vec::new();
    for (suffix, routes) in wildcard {
        wild.push((suffix, group(&routes)?));
    }
    wild.sort_by_key(|(s, _)| std::cmp::Reverse(s.len()));
    let mut exact_routers = HashMap::new();
    for (host, routes) in exact {
        exact_routers.insert(host, group(&routes)?);
    }
    let dispatch = HostDispatch {
        inner: Arc::new(Hosts {
            exact: exact_routers,
            wildcard: wild,
            fallback,
        }),
    };
    Ok(Router::new().fallback_service(dispatch))
}

/// One host group: prefixes become nested services, `/` the fallback.
fn group(routes: &[&Route]) -> io::Result<Router> {
    let mut router = Router::new();
    let mut has_root = false;
    for route in routes {
        let svc = route_service(route)?;
        if route.path == "/" {
            router = router.fallback_service(svc);
            has_root = true;
        } else {
            router = router.nest_service(&route.path, svc);
        }
    }
    if !has_root {
        router = router.fallback(|| async { plain(StatusCode::NOT_FOUND, "not found\n") });
    }
    Ok(router)
}

fn route_service(route: &Route) -> io::Result<RouteService> {
    match &route.static_files {
        Some(st) => static_service(st),
        None => Err(io::Error::other(format!(
            "route {} mounts no service",
            route.name()
        ))),
    }
}

fn static_service(st: &StaticConfig) -> io::Result<RouteService> {
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
        .inline_max(st.open_file_cache.inline_max);
    let mut files = StaticFiles::new(resolver.clone());
    if let Some(cc) = &st.cache_control {
        let v = HeaderValue::from_str(cc).map_err(io::Error::other)?;
        files = files.cache_control(v);
    }
    if let Some(page) = &st.not_found_page {
        files = files.not_found_page(page.clone());
    }
    let ofc = &st.open_file_cache;
    if !ofc.enabled {
        return Ok(BoxCloneSyncService::new(files));
    }
    let cache = FileCache::new(
        resolver,
        CacheOptions {
            strict: ofc.strict,
            valid: ofc.valid,
            max_entries: ofc.max_entries,
            max_bytes: ofc.max_bytes,
        },
    );
    let files = files.with_cache(cache.clone());
    Ok(BoxCloneSyncService::new(
        tower::ServiceBuilder::new()
            .layer(OpenFileCacheLayer::new(cache))
            .service(files),
    ))
}

struct Hosts {
    exact: HashMap<String, Router>,
    wildcard: Vec<(String, Router)>,
    fallback: Router,
}

/// Picks a host group's router by the request's host (`Host`, or the authority of an
/// absolute-form or HTTP/2 request), without its port, compared case-insensitively.
#[derive(Clone)]
struct HostDispatch {
    inner: Arc<Hosts>,
}

impl HostDispatch {
    fn pick(&self, req: &Request<Body>) -> Router {
        let host = req
            .uri()
            .host()
            .or_else(|| req.headers().get(http::header::HOST)?.to_str().ok())
            .unwrap_or("");
        let host = strip_port(host).trim_end_matches('.').to_ascii_lowercase();
        if let Some(r) = self.inner.exact.get(&host) {
            return r.clone();
        }
        for (suffix, r) in &self.inner.wildcard {
            if host.len() > suffix.len() && host.ends_with(suffix.as_str()) {
                return r.clone();
            }
        }
        self.inner.fallback.clone()
    }
}

fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        // An IPv6 literal: keep the brackets, drop a port after them.
        return match host.find(']') {
            Some(i) => &host[..=i],
            None => host,
        };
    }
    match host.rfind(':') {
        Some(i) => &host[..i],
        None => host,
    }
}

impl Service<Request<Body>> for HostDispatch {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = tower::util::Oneshot<Router, Request<Body>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        self.pick(&req).oneshot(req)
    }
}

#[cfg(test)]
mod tests {
    use super::strip_port;

    #[test]
    fn ports_are_stripped() {
        assert_eq!(strip_port("example.com:8080"), "example.com");
        assert_eq!(strip_port("example.com"), "example.com");
        assert_eq!(strip_port("[::1]:8080"), "[::1]");
        assert_eq!(strip_port("[::1]"), "[::1]");
    }
}
