//! Stopping: every shard joins the mesh at start; the coordinator (the raft shard) watches the
//! signal flag and tells the others to stop over it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_lite::future;
use glommio::channels::channel_mesh::{Receivers, Senders};
use tracing::info;

use super::{notify, ShardContext, ShardError, ShardMessage, LOG_TARGET};
use crate::constants as c;
use crate::net::stop::StopSignal;

/// Joins the mesh, giving up if the node is told to stop first (a shard failed to start).
pub(super) async fn join_mesh(
    ctx: &ShardContext,
) -> Result<(Senders<ShardMessage>, Receivers<ShardMessage>), ShardError> {
    let flag = ctx.stop_flag.clone();
    let joined = future::or(async { Some(ctx.mesh.clone().join().await) }, async move {
        while !flag.load(Ordering::SeqCst) {
            glommio::timer::sleep(Duration::from_millis(c::SHUTDOWN_POLL_MS)).await;
        }
        None
    })
    .await;
    match joined {
        Some(Ok(pair)) => Ok(pair),
        Some(Err(e)) => Err(ShardError::Mesh(e.into())),
        None => Err(ShardError::StoppedEarly),
    }
}

/// On the coordinator: poll the signal flag, then stop locally and tell every other shard.
pub(super) async fn coordinate_stop(
    flag: Arc<AtomicBool>,
    stop: StopSignal,
    senders: Senders<ShardMessage>,
) {
    while !flag.load(Ordering::SeqCst) {
        glommio::timer::sleep(Duration::from_millis(c::SHUTDOWN_POLL_MS)).await;
    }
    info!(target: LOG_TARGET, "stop requested");
    notify::notify("STOPPING=1");
    stop.trigger();
    for peer in 0..senders.nr_consumers() {
        if peer != senders.peer_id() {
            let _ = senders.send_to(peer, ShardMessage::Shutdown).await;
        }
    }
    senders.close();
}

/// On other shards: stop when the coordinator says so (or its channel closes).
pub(super) async fn follow_stop(
    receivers: Receivers<ShardMessage>,
    coordinator: usize,
    stop: StopSignal,
) {
    // Shutdown is the only message today; a closed channel means the coordinator is gone,
    // which also means stop.
    match receivers.recv_from(coordinator).await {
        Ok(Some(ShardMessage::Shutdown)) | Ok(None) | Err(_) => stop.trigger(),
    }
}
