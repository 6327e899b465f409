//! The controller listener on one acceptor shard: accept connections (one socket per listener
//! for the whole process, each acceptor shard accepting on its own descriptor of it), then per
//! connection read
//! frames, answer each in order, and close on anything Kafka would close on. Shutdown stops
//! accepting at once; open connections finish the request they are on, then close.

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use futures_lite::{future, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use glommio::sync::Gate;
use tracing::{debug, info, warn, Instrument};

use super::dispatch::{handle_frame, Action, RaftService, ServerState};
use super::frame::{read_frame, FrameBuffer, FrameError, RequestMemory};
use super::stop::StopSignal;

/// Settings every connection needs.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    pub request_max_bytes: usize,
    /// `connections.max.idle.ms`; `None` keeps idle connections forever. It also bounds how
    /// long one frame may take to arrive: a peer that dribbles a frame is closed.
    pub idle_timeout: Option<Duration>,
    /// `queued.max.request.bytes`, shared by every connection of the node.
    pub memory: RequestMemory,
}

/// Binds and listens on `addr` once for the whole process, without SO_REUSEPORT: a second
/// process cannot take a port this one holds (Kafka's "Address already in use"). Each acceptor
/// shard accepts on its own descriptor of the same socket (`for_shard`).
pub fn bind(name: &str, addr: SocketAddr) -> Result<std::net::TcpListener, String> {
    let listener = std::net::TcpListener::bind(addr).map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::AddrInUse => "Address already in use".to_string(),
            _ => e.to_string(),
        };
        format!("Socket server failed to bind to {addr} (listener {name}): {why}.")
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("listener {name} on {addr}: {e}"))?;
    Ok(listener)
}

/// This shard's descriptor of a listener `bind` made.
pub fn for_shard(listener: &std::net::TcpListener) -> Result<TcpListener, String> {
    let own = listener.try_clone().map_err(|e| e.to_string())?;
    Ok(crate::sys::glommio_listener(own))
}

/// Accepts until `stop` fires, then waits up to `drain` for open connections to finish.
pub async fn serve<R: RaftService>(
    listener: TcpListener,
    state: Rc<ServerState>,
    raft: Option<R>,
    limits: ConnectionLimits,
    stop: StopSignal,
    drain: Duration,
) {
    let local = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    info!(addr = %local, "listening");
    let gate = Gate::new();
    loop {
        let accepted = future::or(async { Some(listener.accept().await) }, async {
            stop.wait().await;
            None
        })
        .await;
        let stream = match accepted {
            None => break,
            Some(Ok(stream)) => stream,
            Some(Err(e)) => {
                // EMFILE and friends: back off instead of spinning, keep serving.
                warn!(error = %e, "accept failed");
                glommio::timer::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let peer = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "?".into());
        let (state, stop, raft) = (state.clone(), stop.clone(), raft.clone());
        let limits = limits.clone();
        let span = tracing::debug_span!("conn", peer = %peer);
        let spawned = gate.spawn(
            async move { serve_connection(stream, &state, raft.as_ref(), &limits, &stop).await }
                .instrument(span),
        );
        match spawned {
            Ok(task) => {
                task.detach();
            }
            Err(e) => warn!(error = %e, "cannot start a connection task"),
        }
    }
    info!(addr = %local, "stopped accepting; draining connections");
    drop(listener);
    let drained = future::or(async { gate.close().await.is_ok() }, async {
        glommio::timer::sleep(drain).await;
        false
    })
    .await;
    if !drained {
        warn!(
            "connections still open after {} ms; closing them",
            drain.as_millis()
        );
    }
}

async fn serve_connection<R: RaftService>(
    stream: TcpStream,
    state: &ServerState,
    raft: Option<&R>,
    limits: &ConnectionLimits,
    stop: &StopSignal,
) {
    if let Err(e) = stream.set_read_timeout(limits.idle_timeout) {
        debug!(error = %e, "cannot set the idle timeout");
    }
    let _ = stream.set_nodelay(true);
    let mut stream = stream.buffered();
    let mut frame = FrameBuffer::new(limits.memory.clone());
    loop {
        let read = future::or(
            async {
                let reading = read_frame(&mut stream, limits.request_max_bytes, &mut frame);
                Some(within(limits.idle_timeout, reading).await)
            },
            async {
                stop.wait().await;
                None
            },
        )
        .await;
        match read {
            None | Some(Ok(false)) => break,
            Some(Err(FrameError::Io(e))) if e.kind() == std::io::ErrorKind::TimedOut => {
                debug!("closing idle connection");
                break;
            }
            Some(Err(e)) => {
                debug!(error = %e, "closing connection");
                break;
            }
            Some(Ok(true)) => {}
        }
        let action = match handle_frame(frame.bytes(), state) {
            Action::Raft(call) => match raft {
                Some(raft) => match raft.call(call).await {
                    Some(bytes) => Action::Respond(bytes),
                    None => {
                        debug!("raft is stopping; closing connection");
                        break;
                    }
                },
                None => {
                    debug!(
                        api = call.key.name(),
                        "no raft on this node; closing connection"
                    );
                    break;
                }
            },
            other => other,
        };
        match action {
            Action::Raft(_) => unreachable!("answered above"),
            Action::Respond(bytes) => {
                if let Err(e) = write_response(&mut stream, &bytes).await {
                    debug!(error = %e, "write failed; closing connection");
                    break;
                }
            }
            Action::Close(reason) => {
                debug!(%reason, "closing connection without a response");
                break;
            }
        }
        // A connection that once sent a huge frame should not keep its buffer.
        frame.shrink_past(4 * crate::constants::FRAME_READ_STEP_BYTES);
        if stop.is_stopped() {
            break;
        }
    }
}

/// `future`, or a TimedOut error once `limit` has passed (no limit: just `future`).
async fn within(
    limit: Option<Duration>,
    future: impl std::future::Future<Output = Result<bool, FrameError>>,
) -> Result<bool, FrameError> {
    let Some(limit) = limit else {
        return future.await;
    };
    future::or(future, async {
        glommio::timer::sleep(limit).await;
        let why = "no whole frame within connections.max.idle.ms";
        Err(FrameError::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            why,
        )))
    })
    .await
}

async fn write_response<W: futures_lite::AsyncWrite + Unpin>(
    stream: &mut W,
    bytes: &[u8],
) -> std::io::Result<()> {
    stream.write_all(bytes).await?;
    stream.flush().await
}
