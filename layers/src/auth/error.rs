use std::fmt;
use std::path::PathBuf;

/// Why a check ([`BasicAuth`](super::BasicAuth), [`JwtAuth`](super::JwtAuth),
/// [`ForwardAuth`](super::ForwardAuth)) or an [`Htpasswd`](super::Htpasswd) could not be made.
#[derive(Debug)]
#[non_exhaustive]
pub enum AuthError {
    /// A file could not be read.
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// An htpasswd line is malformed, or its hash of a kind not supported. `path` is `None`
    /// from [`Htpasswd::parse`](super::Htpasswd::parse), which is given text.
    Htpasswd {
        path: Option<PathBuf>,
        line: usize,
        problem: String,
    },
    /// A key in a key file can't be used; `kid` names it in a JWK set.
    Key {
        path: PathBuf,
        kid: Option<String>,
        source: jsonwebtoken::errors::Error,
    },
    /// Not an `http://` or `https://` URL.
    Url { url: String, problem: String },
    /// An algorithm name jsonwebtoken doesn't know.
    UnknownAlgorithm(String),
    /// No algorithm given.
    NoAlgorithm,
    /// Algorithms that need different kinds of key.
    MixedAlgorithms,
    /// Not a valid header name.
    HeaderName(String),
    /// A realm that can't be sent in a `WWW-Authenticate` header.
    Realm(String),
    /// The HTTP client (for JWKS or forward auth) could not be made.
    Client(reqwest::Error),
}

impl fmt::Display for AuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuthError::Read { path, source } => write!(f, "{}: {source}", path.display()),
            AuthError::Htpasswd {
                path,
                line,
                problem,
            } => {
                if let Some(p) = path {
                    write!(f, "{}: ", p.display())?;
                }
                write!(f, "line {line}: {problem}")
            }
            AuthError::Key { path, kid, source } => {
                write!(f, "{}: ", path.display())?;
                if let Some(kid) = kid {
                    write!(f, "key {kid:?}: ")?;
                }
                write!(f, "{source}")
            }
            AuthError::Url { url, problem } => write!(f, "{url:?}: {problem}"),
            AuthError::UnknownAlgorithm(a) => write!(f, "unknown algorithm {a:?}"),
            AuthError::NoAlgorithm => f.write_str("at least one algorithm is needed"),
            AuthError::MixedAlgorithms => {
                f.write_str("the algorithms must all use the same kind of key")
            }
            AuthError::HeaderName(h) => write!(f, "{h:?} is not a header name"),
            AuthError::Realm(r) => write!(f, "realm {r:?} can't be sent in a header"),
            AuthError::Client(e) => write!(f, "HTTP client: {e}"),
        }
    }
}

impl std::error::Error for AuthError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AuthError::Read { source, .. } => Some(source),
            AuthError::Key { source, .. } => Some(source),
            AuthError::Client(e) => Some(e),
            _ => None,
        }
    }
}
