//! The encoders: whole bodies at once for the cache, and a stream for responses that can't
//! be cached.

use super::negotiate::Encoding;
use bytes::Bytes;
use std::io::{self, Write};

/// Compression levels per coding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Levels {
    /// 1–9 (default 6, as nginx's `gzip_comp_level` is commonly set).
    pub gzip: u32,
    /// 0–11 (default 5: most of brotli's gain at a fraction of 11's time).
    pub br: u32,
    /// 1–22 (default 3, zstd's own default).
    pub zstd: i32,
}

impl Default for Levels {
    fn default() -> Self {
        Levels {
            gzip: 6,
            br: 5,
            zstd: 3,
        }
    }
}

impl Levels {
    /// Clamped into each coding's range, so that any value is usable.
    pub(crate) fn clamped(self) -> Levels {
        Levels {
            gzip: self.gzip.clamp(1, 9),
            br: self.br.min(11),
            zstd: self.zstd.clamp(1, 22),
        }
    }
}

/// Encodes a whole body. Runs on the blocking pool.
pub(crate) fn encode(enc: Encoding, levels: Levels, data: &[u8]) -> io::Result<Bytes> {
    let out = Vec::with_capacity(data.len() / 3 + 64);
    let out = match enc {
        Encoding::Gzip => {
            let mut e = flate2::write::GzEncoder::new(out, flate2::Compression::new(levels.gzip));
            e.write_all(data)?;
            e.finish()?
        }
        Encoding::Br => {
            let mut out = out;
            let params = brotli::enc::BrotliEncoderParams {
                quality: levels.br as i32,
                lgwin: 22,
                size_hint: data.len(),
                ..Default::default()
            };
            brotli::BrotliCompress(&mut &data[..], &mut out, &params)?;
            out
        }
        Encoding::Zstd => zstd::bulk::compress(data, levels.zstd)?,
    };
    Ok(Bytes::from(out))
}

/// A body encoded as it streams, for responses without a strong validator.
pub(crate) mod stream {
    use super::{Encoding, Levels};
    use async_compression::tokio::bufread::{BrotliEncoder, GzipEncoder, ZstdEncoder};
    use async_compression::Level;
    use bytes::Bytes;
    use futures_util::{Stream, TryStreamExt};
    use http_body::{Body, Frame};
    use http_body_util::{BodyExt, StreamBody};
    use std::io;
    use std::pin::Pin;
    use tokio::io::AsyncRead;
    use tokio_util::io::{ReaderStream, StreamReader};

    pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
    pub(crate) type EncodedBody = http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>;

    pub(crate) fn encode<B>(enc: Encoding, levels: Levels, body: B) -> EncodedBody
    where
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<BoxError>,
    {
        let chunks = body
            .into_data_stream()
            .map_ok(|mut d| {
                use bytes::Buf;
                d.copy_to_bytes(d.remaining())
            })
            .map_err(|e| io::Error::other(e.into()));
        let reader = StreamReader::new(chunks);
        let encoder: Pin<Box<dyn AsyncRead + Send>> = match enc {
            Encoding::Gzip => Box::pin(GzipEncoder::with_quality(
                reader,
                Level::Precise(levels.gzip as i32),
            )),
            Encoding::Br => Box::pin(BrotliEncoder::with_quality(
                reader,
                Level::Precise(levels.br as i32),
            )),
            Encoding::Zstd => Box::pin(ZstdEncoder::with_quality(
                reader,
                Level::Precise(levels.zstd),
            )),
        };
        let frames: Pin<Box<dyn Stream<Item = Result<Frame<Bytes>, BoxError>> + Send>> = Box::pin(
            ReaderStream::new(encoder)
                .map_ok(Frame::data)
                .map_err(BoxError::from),
        );
        StreamBody::new(frames).boxed_unsync()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    pub(crate) fn decode(enc: Encoding, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match enc {
            Encoding::Gzip => {
                flate2::read::GzDecoder::new(data)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Encoding::Br => {
                brotli::Decompressor::new(data, 4096)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Encoding::Zstd => out = zstd::stream::decode_all(data).unwrap(),
        }
        out
    }

    #[test]
    fn every_coding_round_trips() {
        let text: Vec<u8> = (0..5000)
            .flat_map(|i| format!("line {i} of some text\n").into_bytes())
            .collect();
        for enc in [Encoding::Br, Encoding::Zstd, Encoding::Gzip] {
            let out = encode(enc, Levels::default(), &text).unwrap();
            assert!(out.len() < text.len() / 3, "{enc:?}: {}", out.len());
            assert_eq!(decode(enc, &out), text, "{enc:?}");
        }
    }
}
