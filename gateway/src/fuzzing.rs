//! The routing decisions as functions of a request's target and `Host` alone, for the fuzz
//! targets in `fuzz/`: the code the server runs ([`crate::router`]'s decision and the
//! front's canonical request), with no server around it. Above the server in the
//! layering, since it reads both.

use crate::router::{decide, host_key, order, routing_host, strip_prefix, PathRule, Ruled};
use http::{Request, Uri};

/// A route: its configured `path`, its proxy's `strip_prefix` and `strict_paths`, and
/// whether it is a proxy (else static files, which always strip their prefix).
pub struct Route<'a> {
    pub path: &'a str,
    pub strip: bool,
    pub strict: bool,
    pub proxy: bool,
}

/// What becomes of a request target.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Refused with this status.
    Refused(u16),
    /// A static route's prefix alone: redirected to it with a slash.
    Redirect { route: usize },
    /// Route `route` (its place in the list given) takes the request, and its Service
    /// gets the path and query `target`.
    Forward { route: usize, target: String },
}

struct Indexed(PathRule, usize);

impl Ruled for Indexed {
    fn rule(&self) -> &PathRule {
        &self.0
    }
}

/// What routing among `routes` (the configuration's order) makes of the request
/// target `target`, as `dispatch` does it, the route's own rules (access, rate,
/// auth) aside.
pub fn route(routes: &[Route<'_>], target: &str) -> Outcome {
    // hyper answers 400 to a target that doesn't parse.
    let Ok(uri) = target.parse::<Uri>() else {
        return Outcome::Refused(400);
    };
    let mut rules: Vec<Indexed> = routes
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let rule = PathRule::new(r.path, r.strip || !r.proxy, r.strict || !r.proxy, r.proxy);
            Indexed(rule, i)
        })
        .collect();
    let loose_prefixes = order(&mut rules);
    let d = match decide(&rules, loose_prefixes, &uri) {
        Ok(d) => d,
        Err(status) => return Outcome::Refused(status.as_u16()),
    };
    let route = rules[d.index].1;
    if d.refused {
        return Outcome::Refused(400);
    }
    let mut uri = match d.normalized {
        Some(n) if !d.as_received => n,
        _ => uri,
    };
    if d.add_slash {
        return Outcome::Redirect { route };
    }
    if d.strip > 0 {
        strip_prefix(&mut uri, d.strip);
    }
    let target = uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    Outcome::Forward { route, target }
}

/// What the front makes of a request's target and `Host` fields (an HTTP/2 one with
/// `h2`): the host the route table is searched by and the `Host` the upstream gets;
/// or the status that refuses the request.
pub fn host(h2: bool, target: &str, hosts: &[&[u8]]) -> Result<(String, Option<String>), u16> {
    let Ok(uri) = target.parse::<Uri>() else {
        return Err(400);
    };
    let mut req = Request::new(());
    *req.uri_mut() = uri;
    *req.version_mut() = if h2 {
        http::Version::HTTP_2
    } else {
        http::Version::HTTP_11
    };
    for h in hosts {
        // hyper refuses a field value with a control character.
        let Ok(v) = http::HeaderValue::from_bytes(h) else {
            return Err(400);
        };
        req.headers_mut().append(http::header::HOST, v);
    }
    let front = crate::server::front::Front::default();
    if let Some(res) = front.canonicalize(&mut req) {
        return Err(res.status().as_u16());
    }
    let key = host_key(routing_host(&req)).into_owned();
    let sent = req
        .headers()
        .get(http::header::HOST)
        .map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned());
    Ok((key, sent))
}

#[cfg(test)]
mod tests {
    fn proxy(path: &str) -> super::Route<'_> {
        super::Route {
            path,
            strip: false,
            strict: true,
            proxy: true,
        }
    }

    /// Found by fuzz/fuzz_targets/route_forward.rs: a backend that trims each segment of
    /// white space before resolving dots reads `/api/x/..%20/admin/y` as `/api/admin/y`.
    #[test]
    fn dot_segments_padded_with_white_space_are_refused() {
        use super::{route, Outcome};
        use crate::router::ambiguous;
        for p in [
            "/api/x/..%20/admin/y",
            "/a/%09..%20/b",
            "/a/.%C2%A0/b",
            "/a/%20%2e%2e",
        ] {
            assert!(ambiguous(p, false), "{p}");
        }
        assert!(!ambiguous("/a/..x%20/b", true));
        assert!(!ambiguous("/a/%20/b", true));
        let routes = [proxy("/api"), proxy("/api/admin")];
        assert_eq!(
            route(&routes, "/api/x/..%20/admin/y"),
            Outcome::Refused(400)
        );
        assert_eq!(
            route(&routes, "/api/x/a%20b/y"),
            Outcome::Forward {
                route: 0,
                target: "/api/x/a%20b/y".into()
            }
        );
    }

    /// Found by fuzz/fuzz_targets/route_forward.rs: with routes `/admin.` and `/admin`,
    /// `/admin./x` chose the longer one and was forwarded, and a backend that trims
    /// trailing dots reads it as `/admin/x`, the shorter one's path. Only longer routes
    /// were compared with the lenient reading.
    #[test]
    fn a_spelling_read_as_a_shorter_routes_path_is_refused() {
        use super::{route, Outcome};
        let routes = [proxy("/admin."), proxy("/admin")];
        assert_eq!(route(&routes, "/admin./x"), Outcome::Refused(400));
        assert_eq!(route(&routes, "/admin%2e/x"), Outcome::Refused(400));
        assert_eq!(
            route(&routes, "/admin/x."),
            Outcome::Forward {
                route: 1,
                target: "/admin/x.".into()
            }
        );
        // Two prefixes one without case: the first configured is the reader's, as routing's.
        let routes = [proxy("/api"), proxy("/API")];
        assert_eq!(route(&routes, "/API/x"), Outcome::Refused(400));
        assert_eq!(
            route(&routes, "/api/X"),
            Outcome::Forward {
                route: 0,
                target: "/api/X".into()
            }
        );
    }

    /// Found by fuzz/fuzz_targets/route_forward.rs, each read by a lenient backend as
    /// another route's path: `/Admin%2E` is `/admin.` without case (only the reading that
    /// also trims was compared, and it reads `/admin`); `/%20/%C2%A0x` is `/x` once its
    /// segments are trimmed and the empty ones dropped.
    #[test]
    fn each_lenient_reading_must_choose_the_route() {
        use super::{route, Outcome};
        let routes = [proxy("/"), proxy("/admin.")];
        assert_eq!(route(&routes, "/Admin%2E"), Outcome::Refused(400));
        assert_eq!(route(&routes, "/Admin%2E/x"), Outcome::Refused(400));
        let routes = [proxy("/"), proxy("/x")];
        assert_eq!(route(&routes, "/%20/%C2%A0x"), Outcome::Refused(400));
        assert_eq!(route(&routes, "/%20%2F%20x/y"), Outcome::Refused(400));
        assert_eq!(
            route(&routes, "/%20/y"),
            Outcome::Forward {
                route: 0,
                target: "/%20/y".into()
            }
        );
    }

    /// Found by fuzz/fuzz_targets/route_forward.rs: `http://a.test?q` has an empty path,
    /// which `Uri::path` reads as `/`; it was forwarded as the request target `?q`.
    #[test]
    fn an_empty_path_is_forwarded_as_a_slash() {
        use super::{route, Outcome};
        let routes = [proxy("/")];
        for (target, sent) in [
            ("http://a.test?/admin", "/?/admin"),
            ("http://a.test", "/"),
            ("http://a.test/?q", "/?q"),
        ] {
            assert_eq!(
                route(&routes, target),
                Outcome::Forward {
                    route: 0,
                    target: sent.into()
                },
                "{target}"
            );
        }
    }
}
