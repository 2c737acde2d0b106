//! A response body, read off its connection by the body itself (no second task), and
//! what is left of it read out so the connection can be reused.

use super::*;

/// An upstream response's body, read from the connection by whoever polls it; the
/// connection goes back to its pool at the body's end.
pub(crate) struct Body {
    pub(super) conn: Option<Conn>,
    pub(super) pool: Arc<Pool>,
    pub(super) state: State,
    /// Whether the connection may carry another exchange after this one.
    pub(super) keep: bool,
    pub(super) names_others: bool,
}

impl Body {
    /// The head kept a `Connection` field naming other fields: they are still to go (all
    /// the other hop-by-hop fields were left out as it was parsed).
    pub(crate) fn hop_fields_left(&self) -> bool {
        self.names_others
    }

    pub(super) fn finish(&mut self) {
        self.state = State::Done;
        if let Some(conn) = self.conn.take() {
            // Bytes past the end of the message mean the framing was wrong: not reused.
            if self.keep && conn.buf.is_empty() {
                self.pool.give_back_h1(conn);
            }
        }
    }

    pub(super) fn fail(
        &mut self,
        e: io::Error,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, io::Error>>> {
        self.state = State::Done;
        self.conn = None;
        Poll::Ready(Some(Err(e)))
    }

    /// Reads more into the buffer: `Ok(false)` at the end of the stream.
    pub(super) fn poll_fill(&mut self, cx: &mut Context<'_>, want: u64) -> Poll<io::Result<bool>> {
        let Some(conn) = self.conn.as_mut() else {
            return Poll::Ready(Ok(false));
        };
        let want = (want as usize).clamp(INIT_BUF, READ_CHUNK);
        if conn.buf.capacity() - conn.buf.len() < want / 2 {
            conn.buf.reserve(want);
        }
        let n = ready!(tokio_util::io::poll_read_buf(
            Pin::new(&mut conn.io),
            cx,
            &mut conn.buf
        ))?;
        Poll::Ready(Ok(n > 0))
    }

    /// Dropped before its end: a response the client won't get whole, or one answered
    /// from elsewhere (a compressed variant already cached). When at most `SALVAGE_MAX`
    /// bytes of a `Content-Length` body are left, they are read and discarded, and the
    /// connection goes back to its pool (RFC 9112 §9.3: it is reusable once this message
    /// has been read): at once when they are already here — the common case, a small body
    /// sent with its head — else from a task given `SALVAGE_TIME`. Otherwise, or for a
    /// chunked or close-delimited body, the connection is closed.
    pub(super) fn salvage(&mut self, rest: u64) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        if !self.keep || rest > SALVAGE_MAX {
            return;
        }
        let rest = rest as usize;
        conn.read_now(rest);
        match conn.buf.len() {
            n if n == rest => {
                conn.buf.clear();
                self.pool.give_back_h1(conn);
            }
            // Bytes past the message: the framing was wrong.
            n if n > rest => {}
            _ => {
                let Ok(rt) = tokio::runtime::Handle::try_current() else {
                    return;
                };
                let pool = self.pool.clone();
                rt.spawn(async move {
                    let read = tokio::time::timeout(SALVAGE_TIME, conn.read_to(rest)).await;
                    if matches!(read, Ok(Ok(()))) && conn.buf.len() == rest {
                        conn.buf.clear();
                        pool.give_back_h1(conn);
                    }
                });
            }
        }
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        if let State::Length(rest) = self.state {
            self.salvage(rest);
        }
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, io::Error>>> {
        let this = &mut *self;
        loop {
            let step = match this.conn.as_mut() {
                _ if matches!(this.state, State::Done) => return Poll::Ready(None),
                Some(conn) => decode(&mut this.state, &mut conn.buf),
                None => return this.fail(io::ErrorKind::UnexpectedEof.into()),
            };
            let want = match step {
                Ok(Step::Data(data)) => {
                    if matches!(this.state, State::Length(0)) {
                        this.finish();
                    }
                    return Poll::Ready(Some(Ok(http_body::Frame::data(data))));
                }
                Ok(Step::Again) => continue,
                Ok(Step::End) => {
                    this.finish();
                    return Poll::Ready(None);
                }
                Ok(Step::More(n)) => n,
                Err(e) => return this.fail(e),
            };
            match ready!(this.poll_fill(cx, want)) {
                Ok(true) => {}
                Ok(false) if matches!(this.state, State::Eof) => {
                    this.state = State::Done;
                    this.conn = None;
                    return Poll::Ready(None);
                }
                Ok(false) => {
                    return this.fail(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the upstream closed the connection mid-body",
                    ))
                }
                Err(e) => return this.fail(e),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Done | State::Length(0))
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self.state {
            State::Length(n) => http_body::SizeHint::with_exact(n),
            State::Done => http_body::SizeHint::with_exact(0),
            _ => http_body::SizeHint::default(),
        }
    }
}
