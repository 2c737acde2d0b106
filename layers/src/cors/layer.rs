use super::{AllowHeaders, Cors, CorsError, Origins, Policy};
use http::{HeaderValue, Method};
use std::sync::Arc;
use std::time::Duration;
use tower_layer::Layer;

/// CORS for the Service below. See the [module docs](super).
#[derive(Clone, Debug)]
pub struct CorsLayer {
    policy: Arc<Policy>,
}

fn joined(items: impl Iterator<Item = String>) -> Option<HeaderValue> {
    let text = items.collect::<Vec<_>>().join(",");
    (!text.is_empty())
        .then(|| HeaderValue::from_str(&text).ok())
        .flatten()
}

impl CorsLayer {
    /// `origins` may make requests with `methods`; with `credentials`, cookies and
    /// `Authorization` too (not with [`Origins::Any`]).
    pub fn new(origins: Origins, methods: &[Method], credentials: bool) -> Result<Self, CorsError> {
        if credentials && matches!(origins, Origins::Any) {
            return Err(CorsError("any origin (`*`) can't be allowed credentials"));
        }
        Ok(CorsLayer {
            policy: Arc::new(Policy {
                origins,
                methods: joined(methods.iter().map(|m| m.to_string()))
                    .unwrap_or_else(|| HeaderValue::from_static("")),
                headers: AllowHeaders::List(None),
                expose: None,
                credentials,
                max_age: None,
            }),
        })
    }

    fn edit(mut self, f: impl FnOnce(&mut Policy)) -> Self {
        if let Some(p) = Arc::get_mut(&mut self.policy) {
            f(p);
        }
        self
    }

    /// Request headers a preflight may ask for.
    pub fn allow_headers(self, names: &[&str]) -> Self {
        let v = joined(names.iter().map(|n| n.to_ascii_lowercase()));
        self.edit(|p| p.headers = AllowHeaders::List(v))
    }

    /// Any request header a preflight asks for (not with credentials).
    pub fn allow_any_header(self) -> Result<Self, CorsError> {
        if self.policy.credentials {
            return Err(CorsError(
                "any header (`*`) can't be allowed with credentials",
            ));
        }
        Ok(self.edit(|p| p.headers = AllowHeaders::Any))
    }

    /// Response headers a script may read beyond the safelisted ones.
    pub fn expose_headers(self, names: &[&str]) -> Self {
        let v = joined(names.iter().map(|n| n.to_ascii_lowercase()));
        self.edit(|p| p.expose = v)
    }

    /// Every response header readable (`*`; not with credentials).
    pub fn expose_any(self) -> Result<Self, CorsError> {
        if self.policy.credentials {
            return Err(CorsError(
                "exposing any header (`*`) can't go with credentials",
            ));
        }
        Ok(self.edit(|p| p.expose = Some(HeaderValue::from_static("*"))))
    }

    /// How long a browser may keep a preflight's answer.
    pub fn max_age(self, age: Duration) -> Self {
        self.edit(|p| p.max_age = Some(HeaderValue::from(age.as_secs())))
    }
}

impl<S> Layer<S> for CorsLayer {
    type Service = Cors<S>;

    fn layer(&self, inner: S) -> Cors<S> {
        Cors {
            inner,
            policy: self.policy.clone(),
        }
    }
}
