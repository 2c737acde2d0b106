use super::{ResponseFuture, RewriteRule};
use crate::template::Vars;
use bytes::Bytes;
use http::{Request, Response, StatusCode, Uri};
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// The Service of [`RewriteLayer`](super::RewriteLayer).
#[derive(Clone, Debug)]
pub struct Rewrite<S> {
    pub(super) inner: S,
    pub(super) rules: Arc<[RewriteRule]>,
    pub(super) within: Option<Arc<str>>,
    pub(super) excluding: Arc<[Arc<str>]>,
    pub(super) loose: Option<Arc<LooseBounds>>,
}

/// `within` and `excluding` as a lenient backend reads them, made once
/// ([`RewriteLayer::read_loosely`](super::RewriteLayer::read_loosely)).
#[derive(Debug)]
pub(crate) struct LooseBounds {
    pub(crate) within: Option<String>,
    pub(crate) excluding: Vec<String>,
}

/// The rewritten target of `req`: `None` if no rule matches it, `Some(Err)` if the rule
/// that does makes a target that can't be normalised or leaves `within`.
pub(crate) fn rewritten<B>(
    rules: &[RewriteRule],
    within: Option<&str>,
    excluding: &[Arc<str>],
    loose: Option<&LooseBounds>,
    req: &Request<B>,
) -> Option<Result<Uri, ()>> {
    let path = req.uri().path();
    let (rule, caps) = rules
        .iter()
        .find_map(|r| r.matches.captures(path).map(|c| (r, c)))?;
    let mut target = rule.to.render(&Vars::of(req), Some(&caps));
    if !target.contains('?') {
        if let Some(q) = req.uri().query() {
            target.push('?');
            target.push_str(q);
        }
    }
    let uri = Uri::try_from(target).ok().filter(|u| u.scheme().is_none());
    let Some(uri) = uri.and_then(|u| crate::path::normalized_uri(&u)) else {
        return Some(Err(()));
    };
    let under = |p: &str| {
        uri.path()
            .strip_prefix(p)
            .is_some_and(|r| r.is_empty() || r.starts_with('/'))
    };
    if within.is_some_and(|p| !under(p)) || excluding.iter().any(|p| under(p)) {
        return Some(Err(()));
    }
    if loose.is_some_and(|l| !loosely_inside(uri.path(), l)) {
        return Some(Err(()));
    }
    Some(Ok(uri))
}

/// Whether `path` stays inside `within` and out of `excluding` however a lenient backend
/// reads it ([`crate::path::loose`]): `/app/ADMIN/x`, `/app/admin%20/x` and `/app/admin./x`
/// are `/app/admin/x` to some, and would reach that route's resource past its rules.
fn loosely_inside(path: &str, bounds: &LooseBounds) -> bool {
    let read = crate::path::loose(path);
    let trimmed = crate::path::loose_trimmed(&read);
    let under = |p: &str, prefix: &str| {
        p.strip_prefix(prefix)
            .is_some_and(|r| r.is_empty() || r.starts_with('/'))
    };
    std::iter::once(read.as_str())
        .chain(trimmed.as_deref())
        .all(|r| {
            bounds.within.as_deref().is_none_or(|w| under(r, w))
                && !bounds.excluding.iter().any(|e| under(r, e))
        })
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for Rewrite<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    ResB: From<Bytes>,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResB>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        let loose = self.loose.as_deref();
        match rewritten(
            &self.rules,
            self.within.as_deref(),
            &self.excluding,
            loose,
            &req,
        ) {
            None => {}
            Some(Ok(uri)) => {
                // An absolute-form request keeps its scheme and authority.
                let mut parts = uri.into_parts();
                parts.scheme = req.uri().scheme().cloned();
                parts.authority = req.uri().authority().cloned();
                if let Ok(u) = Uri::from_parts(parts) {
                    let original = std::mem::replace(req.uri_mut(), u);
                    req.extensions_mut().insert(super::Rewritten { original });
                }
            }
            Some(Err(())) => {
                let res = crate::text_response(StatusCode::BAD_REQUEST, "bad request\n");
                return ResponseFuture::answer(res.map(ResB::from));
            }
        }
        ResponseFuture::inner(self.inner.call(req))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path_match::PathMatch;

    fn rw(rule: (&str, &str), within: Option<&str>, target: &str) -> Option<Result<String, ()>> {
        let rules = [RewriteRule::new(PathMatch::regex(rule.0).unwrap(), rule.1).unwrap()];
        let req = Request::get(target).body(()).unwrap();
        let excluding: [Arc<str>; 1] = [Arc::from("/app/admin")];
        let loose = LooseBounds {
            within: within.map(crate::path::loose),
            excluding: vec![crate::path::loose("/app/admin")],
        };
        rewritten(&rules, within, &excluding, Some(&loose), &req).map(|r| r.map(|u| u.to_string()))
    }

    #[test]
    fn rewrites_keep_or_replace_the_query_and_stay_inside() {
        assert_eq!(
            rw(("^/a/(.*)$", "/b/$1"), None, "/a/x?q=1"),
            Some(Ok("/b/x?q=1".into()))
        );
        assert_eq!(
            rw(("^/a/(.*)$", "/b?n=$1"), None, "/a/x?q=1"),
            Some(Ok("/b?n=x".into()))
        );
        assert_eq!(rw(("^/a/(.*)$", "/b/$1"), None, "/c"), None);
        // A capture can't climb out: `..` is resolved, and the prefix checked.
        assert_eq!(
            rw(
                ("^/app/x(.*)$", "/app/$1/../../etc"),
                Some("/app"),
                "/app/x.."
            ),
            Some(Err(()))
        );
        assert_eq!(
            rw(("^/(.*)$", "/app/$1"), Some("/app"), "/y"),
            Some(Ok("/app/y".into()))
        );
        assert_eq!(
            rw(("^/(.*)$", "/other/$1"), Some("/app"), "/y"),
            Some(Err(()))
        );
        assert_eq!(
            rw(("^/(.*)$", "http://evil.test/$1"), None, "/y"),
            Some(Err(()))
        );
        assert_eq!(rw(("^/(.*)$", "/a b"), None, "/y"), Some(Err(())));
        // Not into a nested route's space, whose rules it would skip.
        assert_eq!(
            rw(
                ("^/app/v1/(.*)$", "/app/$1"),
                Some("/app"),
                "/app/v1/admin/x"
            ),
            Some(Err(()))
        );
        assert_eq!(
            rw(
                ("^/app/v1/(.*)$", "/app/$1"),
                Some("/app"),
                "/app/v1/administer"
            ),
            Some(Ok("/app/administer".into()))
        );
        // Nor into it as a lenient backend reads it: without case, trimmed, folded.
        for target in [
            "/app/v1/ADMIN/x",
            "/app/v1/Admin/x",
            "/app/v1/admin%20/x",
            "/app/v1/admin./x",
            "/app/v1/adm%C4%B1n/x",
            "/app/v1/admin%1F/x",
            "/app/v1/%20/admin/x",
        ] {
            assert_eq!(
                rw(("^/app/v1/(.*)$", "/app/$1"), Some("/app"), target),
                Some(Err(())),
                "{target}"
            );
        }
        assert_eq!(
            rw(
                ("^/app/v1/(.*)$", "/app/$1"),
                Some("/app"),
                "/app/v1/Administer"
            ),
            Some(Ok("/app/Administer".into()))
        );
        // A `;` decoded by the normalisation stays encoded in the rewritten target.
        assert_eq!(
            rw(("^/a/(.*)$", "/b/$1"), None, "/a/x%3By"),
            Some(Ok("/b/x%3By".into()))
        );
    }
}
