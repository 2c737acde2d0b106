use super::{Auth, RequireAuth};
use tower_layer::Layer;

/// Requires every request to pass an [`Auth`] check (Basic, JWT or forward auth).
#[derive(Clone, Debug)]
pub struct AuthLayer {
    auth: Auth,
}

impl AuthLayer {
    pub fn new(auth: impl Into<Auth>) -> Self {
        AuthLayer { auth: auth.into() }
    }
}

impl<S> Layer<S> for AuthLayer {
    type Service = RequireAuth<S>;

    fn layer(&self, inner: S) -> RequireAuth<S> {
        RequireAuth {
            inner,
            auth: self.auth.clone(),
        }
    }
}
