//! What a proxy says of the upstream that answered, for the layers above it.

use std::time::Duration;

/// Which upstream answered a proxied request and how long it took to answer (from the
/// request sent to the response head), put in the response's extensions by a proxy.
#[derive(Clone, Debug)]
pub struct UpstreamInfo {
    pub addr: http::uri::Authority,
    pub time: Duration,
}
