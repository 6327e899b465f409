//! The admin HTTP listener (`ringraft.admin.listener`): `/metrics` in Prometheus' format, and
//! etcd-style health checks, `/livez` and `/readyz`. It runs on the raft shard, where the core
//! is, as a few short tasks: a request is read whole (bounded), answered from the core's state
//! without waiting on anything, and the connection closed.
//!
//! `/metrics?group=<topic>-<partition>` (repeatable) adds those groups' gauges to the busiest
//! ones' (`metrics::groups`).
//!
//! Each check answers on its own path too (`/readyz/leader`); `?verbose` lists every check as
//! `[+]name ok` or `[-]name failed: reason`; a failure answers 503.
//!
//! - `/livez`: `ping` (the listener answers) and `raft-loop` (the raft shard's loop went round
//!   in the last `LOOP_STUCK_MS`; it wakes at least once a second).
//! - `/readyz`: `storage` (the log is open and recovered: the listener starts only after
//!   that), `leader` (this node leads, or its leader of the current epoch has answered a
//!   fetch since it began following; a leader remembered across a failed pre-vote does not
//!   count), `member` (a voter, or an
//!   observer that has caught up to the high watermark it knows) and `fsync` (no flush has
//!   been in flight longer than `FSYNC_STUCK_MS`; a failed one stops the node).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::{future, AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use tracing::{debug, Instrument};

use super::metrics::{RaftStats, Readiness, SharedMetrics};
use crate::net::stop::StopSignal;
use crate::raft::Raft;

/// The largest request head read.
const REQUEST_MAX_BYTES: usize = 8 * 1024;
/// How long a client may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// `/livez` fails when the raft loop has not gone round for this long.
pub const LOOP_STUCK_MS: u128 = 5_000;
/// `/readyz` fails while a flush has been in flight this long.
pub const FSYNC_STUCK_MS: u128 = 5_000;

/// What the listener answers from.
pub struct AdminState {
    pub raft: Rc<RefCell<Raft>>,
    pub stats: Rc<RaftStats>,
    pub metrics: SharedMetrics,
    /// The feature levels ApiVersions answers with (KIP-1180's series on `/metrics`).
    pub features: crate::net::dispatch::ServerState,
    /// The groups hosted besides group 0, and how many of the busiest get per-group gauges
    /// (`ringraft.metrics.group.series`).
    pub groups: super::groups::SharedGroups,
    pub group_series: usize,
}

/// Serves `listener` until `stop`.
pub async fn serve(listener: TcpListener, state: Rc<AdminState>, stop: StopSignal) {
    loop {
        let accepted = future::or(async { Some(listener.accept().await) }, async {
            stop.wait().await;
            None
        })
        .await;
        match accepted {
            None => return,
            Some(Ok(stream)) => {
                let state = state.clone();
                glommio::spawn_local(
                    async move {
                        if let Err(e) = connection(stream, &state).await {
                            debug!(error = %e, "admin connection");
                        }
                    }
                    .in_current_span(),
                )
                .detach();
            }
            Some(Err(e)) => {
                debug!(error = %e, "admin accept failed");
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// How reading a request head ended.
enum Head {
    Complete,
    /// Closed, over `REQUEST_MAX_BYTES`, or not in within `READ_TIMEOUT`.
    Incomplete,
    /// The first byte cannot begin an HTTP method: a Kafka client (its frames begin with a
    /// size whose first byte is 0) or TLS dialled the admin port.
    NotHttp,
}

async fn connection(mut stream: TcpStream, state: &AdminState) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let read = async {
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut buf).await?;
            if n == 0 || head.len() + n > REQUEST_MAX_BYTES {
                return Ok(Head::Incomplete);
            }
            head.extend_from_slice(&buf[..n]);
            if !head[0].is_ascii_uppercase() {
                return Ok(Head::NotHttp);
            }
        }
        Ok::<Head, std::io::Error>(Head::Complete)
    };
    let head_read = future::or(read, async {
        glommio::timer::sleep(READ_TIMEOUT).await;
        Ok(Head::Incomplete)
    })
    .await?;
    let response = match head_read {
        Head::Complete => {
            let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
            let line = String::from_utf8_lossy(line);
            let mut parts = line.split_whitespace();
            match (parts.next(), parts.next()) {
                (Some("GET"), Some(target)) => answer(target, state),
                (Some(_), Some(_)) => Answer::text(405, "only GET is served\n"),
                _ => Answer::text(400, "a malformed request line\n"),
            }
        }
        Head::Incomplete => Answer::text(400, "the request head is incomplete or over 8 KiB\n"),
        Head::NotHttp => {
            wrong_door(&stream);
            Answer::text(
                400,
                "This is ringraft's admin listener: HTTP only (/metrics, /livez, /readyz). \
                 Kafka clients connect to the controller listener (listeners=CONTROLLER://…).\n",
            )
        }
    };
    stream.write_all(&response.encode()).await?;
    stream.close().await
}

/// Logs a client that spoke something other than HTTP to the admin listener, at most once
/// per interval.
fn wrong_door(stream: &TcpStream) {
    thread_local! {
        static SAID: crate::logsafe::RateLimit =
            const { crate::logsafe::RateLimit::repeated_warning() };
    }
    if let Some(unsaid) = SAID.with(|said| said.due(Instant::now())) {
        let peer = stream
            .peer_addr()
            .map_or_else(|_| "unknown".to_string(), |a| a.to_string());
        tracing::warn!(%peer, unsaid, "a non-HTTP client on the admin listener (a Kafka client \
            given the admin port?): answered 400, naming the controller listener; closed");
    }
}

/// An HTTP answer.
pub struct Answer {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

impl Answer {
    fn text(status: u16, body: impl Into<String>) -> Answer {
        Answer {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
        }
    }

    fn encode(&self) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            _ => "Service Unavailable",
        };
        let mut out = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n",
            self.status,
            self.content_type,
            self.body.len()
        )
        .into_bytes();
        out.extend_from_slice(self.body.as_bytes());
        out
    }
}

/// The answer to `GET target`.
pub fn answer(target: &str, state: &AdminState) -> Answer {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let verbose = query.split('&').any(|q| q == "verbose");
    let path = path.trim_end_matches('/');
    if path == "/metrics" {
        let checks = readyz(state);
        let ready: Vec<Readiness<'_>> = checks
            .iter()
            .map(|c| Readiness {
                check: c.name,
                ready: c.failure.is_none(),
            })
            .collect();
        let asked: Vec<&str> = query
            .split('&')
            .filter_map(|q| q.strip_prefix("group="))
            .collect();
        let readings = state
            .groups
            .snapshot()
            .iter()
            .map(|g| (g.key.to_string(), g.home, g.gauges.read()))
            .collect();
        let shown = super::metrics::shown(readings, state.group_series, &asked);
        state.metrics.set_group_readings(&shown);
        let raft = state.raft.borrow();
        return Answer {
            status: 200,
            content_type: super::metrics::TEXT_FORMAT,
            body: state.metrics.render(
                &raft,
                &state.stats,
                raft.now_ms(),
                &ready,
                &state.features.features(),
            ),
        };
    }
    let rest = path.strip_prefix('/').unwrap_or_default();
    let (kind, only) = match rest.split_once('/') {
        Some((kind, check)) => (kind, Some(check)),
        None => (rest, None),
    };
    let checks = match kind {
        "livez" => livez(state),
        "readyz" => readyz(state),
        _ => return Answer::text(404, "no such path: /metrics, /livez, /readyz\n"),
    };
    let checks: Vec<Check> = match only {
        None => checks,
        Some(name) => {
            let one: Vec<Check> = checks.into_iter().filter(|c| c.name == name).collect();
            if one.is_empty() {
                return Answer::text(404, format!("{kind} has no check {name}\n"));
            }
            one
        }
    };
    health(kind, &checks, verbose)
}

/// One health check's outcome: `None` passed, `Some(reason)` failed.
pub struct Check {
    pub name: &'static str,
    pub failure: Option<String>,
}

fn health(kind: &str, checks: &[Check], verbose: bool) -> Answer {
    let failed = checks.iter().any(|c| c.failure.is_some());
    let mut body = String::new();
    for c in checks {
        match &c.failure {
            None if verbose => body.push_str(&format!("[+]{} ok\n", c.name)),
            None => {}
            Some(reason) => body.push_str(&format!("[-]{} failed: {reason}\n", c.name)),
        }
    }
    if failed {
        body.push_str(&format!("{kind} check failed\n"));
        Answer::text(503, body)
    } else if verbose {
        body.push_str(&format!("{kind} check passed\n"));
        Answer::text(200, body)
    } else {
        Answer::text(200, "ok\n")
    }
}

fn since(t: Option<Instant>) -> Option<u128> {
    t.map(|t| t.elapsed().as_millis())
}

fn livez(state: &AdminState) -> Vec<Check> {
    let loop_age = since(state.stats.last_turn.get());
    let raft_loop = match loop_age {
        Some(ms) if ms > LOOP_STUCK_MS => Some(format!("the raft loop has not run for {ms} ms")),
        None => Some("the raft loop has not started".into()),
        _ => None,
    };
    vec![
        Check {
            name: "ping",
            failure: None,
        },
        Check {
            name: "raft-loop",
            failure: raft_loop,
        },
    ]
}

fn readyz(state: &AdminState) -> Vec<Check> {
    let raft = state.raft.borrow();
    let epoch = raft.epoch();
    let leader = match raft.leader_id() {
        _ if raft.in_contact_with_leader() => None,
        _ if raft.state_name() == "Resigned" => {
            Some(format!("this node resigned as leader of epoch {epoch}"))
        }
        Some(l) => Some(format!(
            "{} in epoch {epoch}: leader {l} has not answered a fetch since",
            raft.state_name().to_lowercase()
        )),
        None => Some(format!("no leader is known for epoch {epoch}")),
    };
    let member = if raft.is_voter() {
        None
    } else {
        match raft.high_watermark() {
            Some(hwm) if raft.log_end_offset() >= hwm => None,
            Some(hwm) => Some(format!(
                "an observer behind the high watermark ({} of {hwm})",
                raft.log_end_offset()
            )),
            None => Some("an observer that knows no high watermark yet".into()),
        }
    };
    let fsync = match since(state.stats.flush_started.get()) {
        Some(ms) if ms > FSYNC_STUCK_MS => Some(format!("a flush has been in flight for {ms} ms")),
        _ => None,
    };
    vec![
        Check {
            name: "storage",
            failure: None,
        },
        Check {
            name: "leader",
            failure: leader,
        },
        Check {
            name: "member",
            failure: member,
        },
        Check {
            name: "fsync",
            failure: fsync,
        },
    ]
}
