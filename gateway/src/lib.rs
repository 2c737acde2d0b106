//! gatehouse: a web gateway that serves static files (and, later, proxies) with less CPU
//! per request than nginx. The binary is a thin shell over this library:
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
