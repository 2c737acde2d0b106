use super::encode::stream::{BoxError, EncodedBody};
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::pin::Pin;
use std::task::{Context, Poll};

pin_project! {
    /// The response body of [`Precompress`](super::Precompress): the inner body as it was,
    /// an encoded variant from memory, or an encoding stream.
    #[project = BodyProj]
    pub enum PrecompressBody<B> {
        /// The inner response's body, untouched.
        Identity { #[pin] inner: B },
        /// Bytes in memory (a cached variant); `None` once sent, or for HEAD.
        Full { data: Option<Bytes> },
        /// The inner body encoded as it streams.
        Encoded { #[pin] inner: EncodedBody },
    }
}

impl<B> PrecompressBody<B> {
    pub(crate) fn empty() -> Self {
        PrecompressBody::Full { data: None }
    }

    pub(crate) fn bytes(b: Bytes) -> Self {
        PrecompressBody::Full { data: Some(b) }
    }
}

impl<B> Body for PrecompressBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.project() {
            BodyProj::Identity { inner } => inner.poll_frame(cx).map_err(Into::into),
            BodyProj::Full { data } => Poll::Ready(
                data.take()
                    .filter(|b| !b.is_empty())
                    .map(|b| Ok(Frame::data(b))),
            ),
            BodyProj::Encoded { inner } => inner.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            PrecompressBody::Identity { inner } => inner.is_end_stream(),
            PrecompressBody::Full { data } => data.as_ref().is_none_or(|b| b.is_empty()),
            PrecompressBody::Encoded { inner } => inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            PrecompressBody::Identity { inner } => inner.size_hint(),
            PrecompressBody::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |b| b.len() as u64))
            }
            PrecompressBody::Encoded { inner } => inner.size_hint(),
        }
    }
}
