use super::Page;
use http::header::{
    ACCEPT_RANGES, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, ETAG,
    LAST_MODIFIED, TRANSFER_ENCODING,
};
use http::{Response, StatusCode};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

pin_project! {
    /// The response future of [`ErrorPages`](super::ErrorPages).
    pub struct ResponseFuture<F> {
        #[pin]
        pub(super) inner: F,
        pub(super) pages: Option<Arc<[(StatusCode, Page)]>>,
        pub(super) intercept_upstream: bool,
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: From<bytes::Bytes>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let res = std::task::ready!(this.inner.poll(cx))?;
        let Some(pages) = this.pages.take() else {
            return Poll::Ready(Ok(res));
        };
        let Some((_, page)) = pages.iter().find(|(s, _)| *s == res.status()) else {
            return Poll::Ready(Ok(res));
        };
        if !*this.intercept_upstream
            && res
                .extensions()
                .get::<crate::upstream::UpstreamInfo>()
                .is_some()
        {
            return Poll::Ready(Ok(res));
        }
        // The status and the other fields stay (a 401's WWW-Authenticate, a 429's
        // Retry-After); what described the old body goes with it. The old body is dropped
        // unread.
        let (mut parts, _old) = res.into_parts();
        for h in [
            CONTENT_ENCODING,
            CONTENT_RANGE,
            TRANSFER_ENCODING,
            ETAG,
            LAST_MODIFIED,
            ACCEPT_RANGES,
        ] {
            parts.headers.remove(h);
        }
        parts
            .headers
            .insert(CONTENT_TYPE, page.content_type.clone());
        parts
            .headers
            .insert(CONTENT_LENGTH, http::HeaderValue::from(page.body.len()));
        Poll::Ready(Ok(Response::from_parts(parts, B::from(page.body.clone()))))
    }
}
