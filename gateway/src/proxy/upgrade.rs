//! A protocol upgrade (WebSocket and the like): what may be asked for, and the tunnel once
//! both sides switched.

use super::*;

/// The protocols a client asks to upgrade to that the route allows, if it asks
/// (`Connection: upgrade` and `Upgrade`, RFC 9110 §7.8), over HTTP/1.1. Anything else
/// (`h2c` above all, whose bytes would reach the upstream past the route's checks) is
/// dropped with the rest of the hop-by-hop fields, and the request goes as a plain one.
pub(super) fn requested_upgrade(h: &http::HeaderMap, allowed: &[Box<str>]) -> Option<HeaderValue> {
    let asks = h.get_all(CONNECTION).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        })
    });
    let mut values = h.get_all(UPGRADE).iter();
    match (asks, values.next(), values.next()) {
        (true, Some(v), None) => allowed_protocols(v, allowed),
        _ => None,
    }
}

/// The protocols of an `Upgrade` value that are in `allowed` (by name, or name/version),
/// as one value; `None` when there are none.
pub(super) fn allowed_protocols(v: &HeaderValue, allowed: &[Box<str>]) -> Option<HeaderValue> {
    let v = v.to_str().ok()?;
    let kept: Vec<&str> = v
        .split(',')
        .map(str::trim)
        .filter(|p| {
            let lower = p.to_ascii_lowercase();
            let name = lower.split('/').next().unwrap_or("");
            name != "h2c" && allowed.iter().any(|a| **a == *lower || **a == *name)
        })
        .collect();
    if kept.is_empty() {
        return None;
    }
    HeaderValue::from_str(&kept.join(", ")).ok()
}

/// Relays a 101 and joins the two upgraded connections until either side closes.
pub(super) fn tunnel(
    mut res: Response<UpstreamRes>,
    client_side: hyper::upgrade::OnUpgrade,
) -> Response<ProxyBody> {
    let upstream_side = hyper::upgrade::on(&mut res);
    let proto = res.headers().get(UPGRADE).cloned();
    tokio::spawn(async move {
        match (client_side.await, upstream_side.await) {
            (Ok(c), Ok(u)) => {
                let mut c = hyper_util::rt::TokioIo::new(c);
                let mut u = hyper_util::rt::TokioIo::new(u);
                if let Err(e) = tokio::io::copy_bidirectional(&mut c, &mut u).await {
                    tracing::debug!("tunnel closed: {e}");
                }
            }
            (Err(e), _) | (_, Err(e)) => tracing::debug!("upgrade failed: {e}"),
        }
    });
    let (mut parts, _) = res.into_parts();
    headers::remove_hop_by_hop(&mut parts.headers);
    parts
        .headers
        .insert(CONNECTION, HeaderValue::from_static("upgrade"));
    if let Some(p) = proto {
        parts.headers.insert(UPGRADE, p);
    }
    headers::add_via(&mut parts.headers, parts.version);
    Response::from_parts(parts, ProxyBody::empty())
}
