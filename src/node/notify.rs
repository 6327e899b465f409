//! systemd's readiness protocol (`sd_notify`), for units with `Type=notify`: `READY=1` once
//! the listeners are bound and the log is open and recovered, `STOPPING=1` when a stop
//! begins, and `WATCHDOG=1` every half `WatchdogSec` while the raft shard's loop runs.
//!
//! Outside systemd (`NOTIFY_SOCKET` unset) every call does nothing. A datagram to a local
//! socket never blocks for long; each is sent once, and a failure is logged, not fatal.

use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tracing::warn;

/// Sends `state` (e.g. "READY=1") to the service manager, if there is one.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let sent = UnixDatagram::unbound().and_then(|socket| {
        let bytes = path.as_encoded_bytes();
        if let Some(name) = bytes.strip_prefix(b"@") {
            // An abstract socket (systemd's usual choice).
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            socket.send_to_addr(state.as_bytes(), &addr)
        } else {
            socket.send_to(state.as_bytes(), &path)
        }
    });
    if let Err(e) = sent {
        warn!(state, error = %e, "cannot notify the service manager");
    }
}

/// Half the watchdog interval systemd asked for (`WATCHDOG_USEC`), if it asked.
pub fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

/// Pings the watchdog from a thread of its own every `interval`, while `beat` moves (the raft
/// shard bumps it as its loop runs): a stuck shard stops the pings and systemd restarts the
/// unit. Ends when `beat` is dropped everywhere else.
pub fn spawn_watchdog(interval: Duration, beat: Arc<AtomicU64>) {
    let spawned = std::thread::Builder::new()
        .name("ringraft-watchdog".into())
        .spawn(move || {
            // The first ping follows the first beat, which follows READY=1.
            let mut seen = 0;
            while Arc::strong_count(&beat) > 1 {
                let now = beat.load(Ordering::Relaxed);
                if now != seen {
                    notify("WATCHDOG=1");
                    seen = now;
                }
                std::thread::sleep(interval);
            }
        });
    if let Err(e) = spawned {
        warn!(error = %e, "cannot start the watchdog thread");
    }
}
