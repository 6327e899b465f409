//! Turning a peer's endpoint into a socket address without blocking the shard: an address is
//! parsed, a host name is looked up (`getaddrinfo` may read files and wait on DNS) on a
//! short-lived thread of its own while the shard awaits the answer.

use std::net::SocketAddr;

use tracing::warn;

use crate::logsafe::{RateLimit, Untrusted};
use crate::types::Endpoint;

/// Resolves a peer's endpoint. An address needs no lookup; a host name is looked up on a
/// short-lived thread, so the raft shard never blocks on the resolver.
pub async fn resolve(endpoint: &Endpoint) -> Option<SocketAddr> {
    if let Ok(ip) = endpoint.host.parse::<std::net::IpAddr>() {
        return Some(SocketAddr::new(ip, endpoint.port));
    }
    let (host, port) = (endpoint.host.clone(), endpoint.port);
    let (tx, rx) = futures_channel::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("ringraft-resolve".into())
        .spawn(move || {
            use std::net::ToSocketAddrs;
            let _ = tx.send(
                (host.as_str(), port)
                    .to_socket_addrs()
                    .map(|mut a| a.next()),
            );
        });
    if let Err(e) = spawned {
        warn!(host = %Untrusted(&endpoint.host), error = %e, "cannot start a resolver thread");
        return None;
    }
    match rx.await {
        Ok(Ok(addr)) => addr,
        Ok(Err(e)) => {
            thread_local! {
                static SAID: RateLimit = const { RateLimit::repeated_warning() };
            }
            // Every reconnect of a peer whose name does not resolve asks again.
            if let Some(unsaid) = SAID.with(|said| said.due(std::time::Instant::now())) {
                warn!(host = %Untrusted(&endpoint.host), port = endpoint.port, error = %e,
                    unsaid, "cannot resolve a peer");
            }
            None
        }
        Err(_) => None,
    }
}
