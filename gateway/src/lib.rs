//! gatehouse: a web gateway that serves static files and reverse-proxies to backends, with
//! less CPU per request than nginx. The binary is a thin shell over this library:
//! configuration → [`router::build`] → [`server::start`].

pub use router::GatewayRouter;

pub mod admin;
pub mod body;
pub mod metrics;
pub mod proxy;
pub mod router;
pub mod server;
pub mod static_files;
pub mod tls;

pub use server::{start, Handle};

/// The routing decisions as functions of a request's target and `Host` alone, for the fuzz
/// targets in `fuzz/`: the code the server runs, without a server.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::router::fuzzing::{host, route, Outcome, Route};
}
