//! What went wrong with an attempt, decided once, where it happened: after pingora-error,
//! a kind (which says whose fault it was and what the client is answered) and whether the
//! request may go to another upstream.

use super::pool::SendError;
use super::request::{Blame, Refused};
use http::StatusCode;

/// What failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// No connection could be made: nothing of the request went out. 502.
    ConnectFailed,
    /// gatehouse itself could not open the connection: out of file descriptors, memory or
    /// local ports. 502, not held against the upstream (which was never reached); nothing
    /// went out, so another may be tried.
    NoLocalResources,
    /// Refused, reset, or a bad response head, once connected. 502.
    UpstreamFailed,
    /// No response head within the response timeout, for a request sent in full. 504.
    ResponseTimeout,
    /// No response head in time while the body was still going out and the upstream not
    /// reading it: the request never arrived whole. 504, not held against the upstream.
    UnsentTimeout,
    /// The client's body passed `max_body_bytes`. 413.
    BodyTooLarge,
    /// The client's body could not be read (it went away mid-upload). 400.
    ClientBodyFailed,
    /// The attempt failed while the client's body was stalled: most likely the upstream
    /// gave up on the upload. 502, not held against the upstream.
    ClientStalled,
    /// The client's body stalled past the response timeout. 408 (RFC 9110 §15.5.9).
    ClientTimeout,
}

/// An attempt's failure: its kind, what caused it, and whether another upstream may be
/// tried (within the route's `retries`).
#[derive(Debug)]
pub struct ProxyError {
    kind: ErrorKind,
    source: Option<SendError>,
    retry: bool,
}

impl ProxyError {
    /// A failed exchange, by how far the request's body had got (`blame`). hyper's and the
    /// body limit's errors are told apart here, once.
    pub(super) fn of(e: SendError, blame: Blame) -> ProxyError {
        let kind = if blame == Blame::BodyTooLarge || too_large(&e) {
            ErrorKind::BodyTooLarge
        } else if blame == Blame::ClientBody || client_body_failed(&e) {
            ErrorKind::ClientBodyFailed
        } else if blame == Blame::Client {
            ErrorKind::ClientStalled
        } else if e.is_connect() && local_shortage(&e) {
            ErrorKind::NoLocalResources
        } else if e.is_connect() {
            ErrorKind::ConnectFailed
        } else {
            ErrorKind::UpstreamFailed
        };
        ProxyError {
            kind,
            // Only a connection never made left nothing sent, so only that may be tried
            // again elsewhere.
            retry: matches!(kind, ErrorKind::ConnectFailed | ErrorKind::NoLocalResources),
            source: Some(e),
        }
    }

    /// No response head in time.
    pub(super) fn timed_out(blame: Blame) -> ProxyError {
        let kind = match blame {
            Blame::Upstream => ErrorKind::ResponseTimeout,
            Blame::Unsent => ErrorKind::UnsentTimeout,
            Blame::Client => ErrorKind::ClientTimeout,
            Blame::BodyTooLarge => ErrorKind::BodyTooLarge,
            Blame::ClientBody => ErrorKind::ClientBodyFailed,
        };
        ProxyError {
            kind,
            source: None,
            retry: false,
        }
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Whether another upstream may be tried.
    pub fn retry(&self) -> bool {
        self.retry
    }

    /// Whether it counts against the upstream (its failures metric, passive health): only
    /// what the upstream itself did, never a client's slow or broken upload.
    pub fn upstreams_fault(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::ConnectFailed | ErrorKind::UpstreamFailed | ErrorKind::ResponseTimeout
        )
    }

    /// What the client is answered.
    pub(super) fn answer(&self) -> Refused {
        let (status, text) = match self.kind {
            ErrorKind::ConnectFailed
            | ErrorKind::NoLocalResources
            | ErrorKind::UpstreamFailed
            | ErrorKind::ClientStalled => (StatusCode::BAD_GATEWAY, "bad gateway\n"),
            ErrorKind::ResponseTimeout | ErrorKind::UnsentTimeout => {
                (StatusCode::GATEWAY_TIMEOUT, "gateway timeout\n")
            }
            ErrorKind::BodyTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "request body too large\n"),
            ErrorKind::ClientBodyFailed => (
                StatusCode::BAD_REQUEST,
                "the request body could not be read\n",
            ),
            ErrorKind::ClientTimeout => (StatusCode::REQUEST_TIMEOUT, "request timeout\n"),
        };
        Refused(status, text)
    }
}

impl std::fmt::Display for ProxyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.kind {
            ErrorKind::ConnectFailed => "could not connect",
            ErrorKind::NoLocalResources => "could not open a connection here",
            ErrorKind::UpstreamFailed => "upstream request failed",
            ErrorKind::ResponseTimeout => "no response in time",
            ErrorKind::UnsentTimeout => "no response in time, the request body still unsent",
            ErrorKind::BodyTooLarge => "request body too large",
            ErrorKind::ClientBodyFailed => "the request body could not be read",
            ErrorKind::ClientStalled => "failed while the client's body stalled",
            ErrorKind::ClientTimeout => "the client's body stalled",
        };
        match &self.source {
            Some(e) => write!(f, "{what}: {e}"),
            None => f.write_str(what),
        }
    }
}

impl std::error::Error for ProxyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_ref().map(|e| e as _)
    }
}

/// An error and its sources, outermost first.
fn chain<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e), |err| err.source())
}

/// Whether the connection failed for want of this process's or host's own resources, not
/// the upstream's doing: a client holding every descriptor must not get upstreams ejected.
fn local_shortage(e: &(dyn std::error::Error + 'static)) -> bool {
    chain(e).any(|err| {
        err.downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::raw_os_error)
            .is_some_and(|code| {
                matches!(
                    code,
                    libc::EMFILE
                        | libc::ENFILE
                        | libc::ENOBUFS
                        | libc::ENOMEM
                        | libc::EADDRNOTAVAIL
                )
            })
    })
}

/// An error hyper's client reports as the user's: the request body it was sending failed.
fn client_body_failed(e: &(dyn std::error::Error + 'static)) -> bool {
    chain(e).any(|err| {
        err.downcast_ref::<hyper::Error>()
            .is_some_and(|h| h.is_user())
    })
}

/// Whether `e` is, or comes of, the body limit's error (`max_body_bytes`).
pub(super) fn too_large(e: &(dyn std::error::Error + 'static)) -> bool {
    caused_by::<http_body_util::LengthLimitError>(e)
}

fn caused_by<E: std::error::Error + 'static>(e: &(dyn std::error::Error + 'static)) -> bool {
    chain(e).any(|err| err.is::<E>())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset")
    }

    /// Whose fault, what answer and whether to retry, for each way an attempt ends: only
    /// a connection never made is retried, and only the upstream's own doings count.
    #[test]
    fn each_failure_has_one_kind_answer_and_retry() {
        let cases = [
            (
                ProxyError::of(SendError::Connect(io()), Blame::Upstream),
                ErrorKind::ConnectFailed,
                502,
                true,
                true,
            ),
            (
                ProxyError::of(SendError::Io(io()), Blame::Upstream),
                ErrorKind::UpstreamFailed,
                502,
                true,
                false,
            ),
            (
                ProxyError::of(SendError::Io(io()), Blame::Unsent),
                ErrorKind::UpstreamFailed,
                502,
                true,
                false,
            ),
            // Out of descriptors or local ports: this process's shortage, not the upstream's.
            (
                ProxyError::of(
                    SendError::Connect(std::io::Error::from_raw_os_error(libc::EMFILE)),
                    Blame::Upstream,
                ),
                ErrorKind::NoLocalResources,
                502,
                false,
                true,
            ),
            (
                ProxyError::of(
                    SendError::Connect(std::io::Error::from_raw_os_error(libc::EADDRNOTAVAIL)),
                    Blame::Upstream,
                ),
                ErrorKind::NoLocalResources,
                502,
                false,
                true,
            ),
            // A client stalling its upload makes even a refused connection not the upstream's.
            (
                ProxyError::of(SendError::Connect(io()), Blame::Client),
                ErrorKind::ClientStalled,
                502,
                false,
                false,
            ),
            (
                ProxyError::timed_out(Blame::Upstream),
                ErrorKind::ResponseTimeout,
                504,
                true,
                false,
            ),
            (
                ProxyError::timed_out(Blame::Unsent),
                ErrorKind::UnsentTimeout,
                504,
                false,
                false,
            ),
            (
                ProxyError::timed_out(Blame::Client),
                ErrorKind::ClientTimeout,
                408,
                false,
                false,
            ),
            // The client's body failed and an HTTP/2 upstream's stream was reset for it:
            // the error says only "reset", the body's progress says why.
            (
                ProxyError::of(SendError::Io(io()), Blame::BodyTooLarge),
                ErrorKind::BodyTooLarge,
                413,
                false,
                false,
            ),
            (
                ProxyError::of(SendError::Io(io()), Blame::ClientBody),
                ErrorKind::ClientBodyFailed,
                400,
                false,
                false,
            ),
        ];
        for (e, kind, status, fault, retry) in cases {
            assert_eq!(e.kind(), kind, "{e}");
            assert_eq!(e.answer().0.as_u16(), status, "{e}");
            assert_eq!(e.upstreams_fault(), fault, "{e}");
            assert_eq!(e.retry(), retry, "{e}");
        }
    }

    #[test]
    fn the_cause_is_kept_and_shown() {
        let e = ProxyError::of(SendError::Connect(io()), Blame::Upstream);
        assert_eq!(e.to_string(), "could not connect: connect: reset");
        let source = std::error::Error::source(&e).expect("a source");
        assert!(source.to_string().contains("reset"));
    }
}
