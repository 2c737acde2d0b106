//! gatehouse: a web gateway that serves static files and reverse-proxies to backends, with
//! less CPU per request than nginx. The binary is a thin shell over this library:
//! configuration → [`router::build`] → [`server::start`].

// Unsafe code is FFI only (sockets, sendfile, preadv2, CPU affinity) and one measured
// unchecked header value: each site allows it by name and says why it is sound.
#![deny(unsafe_code, clippy::undocumented_unsafe_blocks)]

pub use router::GatewayRouter;

pub mod admin;
pub mod body;
pub(crate) mod http_util;
pub mod metrics;
pub mod proxy;
pub mod router;
pub mod rt;
pub mod server;
/// The static-file Service, which lives in `gatehouse-layers` so that it can be used alone.
pub use gatehouse_layers::static_files;
pub mod tls;

pub use server::{serve, start, Handle};

#[doc(hidden)]
pub mod fuzzing;
