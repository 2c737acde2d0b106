use super::{ErrorPages, Page};
use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use std::sync::Arc;
use tower_layer::Layer;

/// Replaces the bodies of error responses with pages. See the [module docs](super).
#[derive(Clone, Debug, Default)]
pub struct ErrorPagesLayer {
    pages: Vec<(StatusCode, Page)>,
    intercept_upstream: bool,
}

impl ErrorPagesLayer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Responses with `status` get `body`, of `content_type`.
    pub fn page(mut self, status: StatusCode, body: Bytes, content_type: HeaderValue) -> Self {
        self.pages.retain(|(s, _)| *s != status);
        self.pages.push((status, Page { body, content_type }));
        self
    }

    /// An upstream's own responses get the pages too (nginx's `proxy_intercept_errors`).
    pub fn intercept_upstream(mut self, on: bool) -> Self {
        self.intercept_upstream = on;
        self
    }
}

impl<S> Layer<S> for ErrorPagesLayer {
    type Service = ErrorPages<S>;

    fn layer(&self, inner: S) -> ErrorPages<S> {
        ErrorPages {
            inner,
            pages: Arc::from(self.pages.as_slice()),
            intercept_upstream: self.intercept_upstream,
        }
    }
}
