//! The listeners a node serves on, resolved and bound once at start so that a port another
//! process holds fails the start at once, and the other checks start makes on the
//! configuration beyond parsing it. `storage format` runs the same checks (binding, then
//! releasing at once) so that it refuses what start would refuse.

use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::Arc;

use tracing::info;

use super::NodeError;
use crate::config::ServerConfig;
use crate::net::server;

/// The bound controller listeners (in `controller.listener.names` order) and the admin one.
pub(crate) struct Bound {
    pub controller: Vec<(SocketAddr, Arc<TcpListener>)>,
    pub admin: Option<Arc<TcpListener>>,
}

/// Every check start makes on the configuration that parsing it does not: each listener can
/// be bound (bound here, then released at once) and the TLS material loads.
pub fn check_config(config: &ServerConfig) -> Result<(), NodeError> {
    drop(bind(config)?);
    tls(config)?;
    Ok(())
}

/// Binds `listeners` (the controller ones) and `ringraft.admin.listener`. Errors name the key.
pub(crate) fn bind(config: &ServerConfig) -> Result<Bound, NodeError> {
    let refused = |key: &str, why: server::BindError| {
        NodeError::Refused(format!("{key}: {why} Stop what holds it or change {key}."))
    };
    let mut controller = Vec::new();
    for (name, addr) in resolve_listeners(config)? {
        let listener = server::bind(&name, addr).map_err(|why| refused("listeners", why))?;
        controller.push((addr, Arc::new(listener)));
    }
    let admin = match &config.admin_listener {
        None => None,
        Some(hp) => {
            let key = "ringraft.admin.listener";
            let addr = (hp.host.as_str(), hp.port)
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.next())
                .ok_or_else(|| {
                    NodeError::Refused(format!("{key}: cannot resolve {}:{}", hp.host, hp.port))
                })?;
            let listener = server::bind(key, addr).map_err(|why| refused(key, why))?;
            info!(%addr, "admin listener (/metrics, /livez, /readyz)");
            Some(Arc::new(listener))
        }
    };
    Ok(Bound { controller, admin })
}

fn resolve_listeners(config: &ServerConfig) -> Result<Vec<(String, SocketAddr)>, NodeError> {
    let mut out = Vec::new();
    for listener in config.controller_listeners() {
        let host = if listener.host.is_empty() {
            "0.0.0.0"
        } else {
            listener.host.as_str()
        };
        let addr = (host, listener.port)
            .to_socket_addrs()
            .map_err(|e| NodeError::Refused(format!("listeners: cannot resolve {listener}: {e}")))?
            .next()
            .ok_or_else(|| {
                NodeError::Refused(format!("listeners: {listener} resolves to no address"))
            })?;
        out.push((listener.name.clone(), addr));
    }
    Ok(out)
}

/// The controller listener's TLS, when its security protocol is SSL.
pub(crate) fn tls(config: &ServerConfig) -> Result<Option<crate::net::tls::Tls>, NodeError> {
    let Some(tls) = &config.tls else {
        return Ok(None);
    };
    crate::net::tls::Tls::new(tls)
        .map(Some)
        .map_err(|e| NodeError::Refused(format!("TLS on the controller listener: {e}")))
}
