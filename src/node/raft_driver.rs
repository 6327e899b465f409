//! The raft shard's driver: it owns the `Raft` core and the `MetadataLog`, feeds the core what
//! arrives (requests from any shard's connections, peer responses, application appends, timer
//! ticks) and executes every `Ready` in the order its contract states — quorum-state durable,
//! log operations, early (leader Fetch) responses, log fsync, the other messages, then
//! `persisted`, then delivery to listeners. One task, one core: nothing here runs elsewhere.
//!
//! Other shards reach the driver through a `RaftHandle` (a cross-thread channel); outbound
//! requests go through one `PeerConnection` task per voter on this shard.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_channel::{mpsc, oneshot};
use futures_lite::{future, StreamExt};
use tracing::{debug, error, info, warn, Instrument};

use super::stop::StopSignal;
use super::unix_millis;
use crate::log::{MetadataLog, QuorumStateData};
use crate::net::dispatch::RaftCall;
use crate::net::dispatch::ServerState;
use crate::net::peer::PeerConnection;
use crate::net::raft_rpc;
use crate::protocol::describe_cluster as dc;
use crate::protocol::describe_quorum as dq;
use crate::protocol::request::encode_response_frame;
use crate::protocol::{apis, ErrorCode, RequestBody, Writer, METADATA_TOPIC_NAME};
use crate::raft::message::{Records, SnapshotBytes};
use crate::raft::{
    ElectionState, Failure, Input, LeaderAndEpoch, LogInfo, LogOp, OffsetAndEpoch, Outbound, Raft,
    RaftConfig, Ready, ReplicaKey, Request, RequestId, Response, Token,
};
use crate::records::builder::BatchBuilder;
use crate::records::control::ControlRecord;

/// How long a graceful stop waits for the resignation to be acknowledged (raft.md §14).
const SHUTDOWN_GRACE: Duration = Duration::from_millis(1500);

/// What the application hears about (Kafka's `RaftClient.Listener`). Runs on the raft shard.
pub trait RaftListener: Send {
    /// Committed batches, in order, each a whole v2 batch (control batches included).
    fn handle_commit(&mut self, batches: &[Bytes]);
    /// The log was replaced by snapshot `id` (a follower that fell behind the log start).
    fn handle_load_snapshot(&mut self, id: OffsetAndEpoch);
    fn handle_leader_change(&mut self, leader: LeaderAndEpoch);
}

/// Why an application request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    #[error("not the leader (epoch {epoch}, leader {leader:?})")]
    NotLeader { epoch: i32, leader: Option<i32> },
    #[error("leadership was lost before offset {0} committed; it may or may not commit")]
    LeadershipLost(i64),
    #[error("invalid records: {0}")]
    Invalid(String),
    #[error("the raft driver has stopped")]
    Stopped,
}

pub enum DriverInput {
    Call {
        call: RaftCall,
        reply: oneshot::Sender<Option<Vec<u8>>>,
    },
    Peer {
        id: RequestId,
        result: Result<Response, Failure>,
    },
    Append {
        batch: Vec<u8>,
        reply: oneshot::Sender<Result<i64, ClientError>>,
    },
    Listen(Box<dyn RaftListener>),
    Snapshot {
        offset: i64,
        values: Vec<Vec<u8>>,
        delete_log_before: bool,
        reply: oneshot::Sender<Result<OffsetAndEpoch, ClientError>>,
    },
}

/// A cheap, `Send` handle to the raft shard's driver, for any shard and the application.
#[derive(Clone)]
pub struct RaftHandle {
    tx: mpsc::UnboundedSender<DriverInput>,
}

impl RaftHandle {
    pub fn channel() -> (RaftHandle, mpsc::UnboundedReceiver<DriverInput>) {
        let (tx, rx) = mpsc::unbounded();
        (RaftHandle { tx }, rx)
    }

    /// Answers a Raft RPC; `None` means close the connection (the node is stopping).
    pub async fn call(&self, call: RaftCall) -> Option<Vec<u8>> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .unbounded_send(DriverInput::Call { call, reply })
            .ok()?;
        answer.await.ok().flatten()
    }

    /// Appends one batch holding `values` as leader. Resolves with the batch's last offset
    /// once it is committed, or with an error when this node is not (or stops being) leader.
    pub async fn append(&self, values: &[&[u8]], timestamp_ms: i64) -> Result<i64, ClientError> {
        if values.is_empty() {
            return Err(ClientError::Invalid("no records".into()));
        }
        let mut builder = BatchBuilder::new(0, 0, timestamp_ms, false);
        for value in values {
            builder.append(None, Some(value));
        }
        let (reply, answer) = oneshot::channel();
        let batch = builder.finish();
        self.tx
            .unbounded_send(DriverInput::Append { batch, reply })
            .map_err(|_| ClientError::Stopped)?;
        answer.await.map_err(|_| ClientError::Stopped)?
    }

    /// Writes a snapshot holding `values` that covers the log below `offset` (a committed
    /// batch boundary), as a state machine does (Kafka's `createSnapshot`). Resolves with the
    /// snapshot id once the file is durable. `delete_log_before` then drops the log below it
    /// (raft.md §11.5), so replicas that fall behind catch up through FetchSnapshot.
    pub async fn create_snapshot(
        &self,
        offset: i64,
        values: Vec<Vec<u8>>,
        delete_log_before: bool,
    ) -> Result<OffsetAndEpoch, ClientError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .unbounded_send(DriverInput::Snapshot {
                offset,
                values,
                delete_log_before,
                reply,
            })
            .map_err(|_| ClientError::Stopped)?;
        answer.await.map_err(|_| ClientError::Stopped)?
    }

    pub fn register_listener(&self, listener: Box<dyn RaftListener>) -> Result<(), ClientError> {
        self.tx
            .unbounded_send(DriverInput::Listen(listener))
            .map_err(|_| ClientError::Stopped)
    }
}

/// Everything the driver needs that the node computes before the shards start.
#[derive(Clone)]
pub struct RaftSetup {
    pub config: RaftConfig,
    /// `controller.quorum.voters` (empty for a dynamic quorum).
    pub static_voters: crate::membership::VoterSet,
}

/// An outbound connection task and the endpoint it was started for.
struct Peer {
    endpoint: crate::raft::Endpoint,
    tx: mpsc::UnboundedSender<(RequestId, Request)>,
}

struct PendingCall {
    reply: oneshot::Sender<Option<Vec<u8>>>,
    call: RaftCall,
}

pub struct Driver {
    raft: Raft,
    log: MetadataLog,
    dir: PathBuf,
    epoch_start: Instant,
    peers: BTreeMap<i32, Peer>,
    to_self: mpsc::UnboundedSender<DriverInput>,
    /// What the acceptor shards answer ApiVersions with (kraft.version follows the log).
    server_state: ServerState,
    calls: HashMap<Token, PendingCall>,
    next_token: Token,
    commits: BTreeMap<i64, Vec<oneshot::Sender<Result<i64, ClientError>>>>,
    listeners: Vec<Box<dyn RaftListener>>,
    cluster_id: String,
    delivered: i64,
    download: Option<Download>,
    /// The snapshot being served to followers (FetchSnapshot), checked once when opened.
    serving: Option<crate::log::snapshot::SnapshotReader>,
}

impl Driver {
    /// Builds the core over the recovered log, the stored election state and the voter set
    /// history found on disk (bootstrap checkpoint, latest snapshot, log control records).
    pub fn new(
        setup: RaftSetup,
        log: MetadataLog,
        stored: &QuorumStateData,
        handle: &RaftHandle,
        server_state: ServerState,
    ) -> Result<Driver, String> {
        let dir = log.dir().to_path_buf();
        let snapshots: Vec<(OffsetAndEpoch, u64)> = crate::log::snapshot::list(&dir)
            .unwrap_or_default()
            .into_iter()
            .filter(|id| id.end_offset > 0)
            .filter_map(|id| {
                let path = crate::log::layout::snapshot_file(&dir, id.end_offset, id.epoch);
                let size = std::fs::metadata(path).ok()?.len();
                Some((OffsetAndEpoch::new(id.end_offset, id.epoch), size))
            })
            .collect();
        let info = LogInfo {
            start_offset: log.start_offset(),
            end_offset: log.end_offset(),
            epochs: log.epochs().entries().to_vec(),
            snapshots: snapshots.clone(),
        };
        let latest = snapshots.iter().map(|(id, _)| *id).max();
        let records = membership_on_disk(&log, &dir, latest)?;
        let membership =
            crate::membership::VoterHistory::from_records(setup.static_voters, &records)
                .map_err(|e| format!("the voter set on disk is invalid: {e}"))?;
        info!(
            kraft_version = membership.kraft_version(),
            voters = %membership
                .latest()
                .voters()
                .iter()
                .map(|v| v.key.to_string())
                .collect::<Vec<_>>()
                .join(","),
            "voter set"
        );
        let stored = election_state(stored);
        let epoch_start = Instant::now();
        let raft = Raft::new(
            setup.config.clone(),
            membership,
            stored,
            &info,
            crate::raft::Time::new(0, unix_millis()),
        );
        let driver = Driver {
            cluster_id: setup.config.cluster_id.clone(),
            raft,
            delivered: log.start_offset(),
            log,
            dir,
            epoch_start,
            peers: BTreeMap::new(),
            to_self: handle.tx.clone(),
            server_state,
            calls: HashMap::new(),
            next_token: 1,
            commits: BTreeMap::new(),
            listeners: Vec::new(),
            download: None,
            serving: None,
        };
        driver.publish_features();
        Ok(driver)
    }

    /// Tells the acceptor shards the kraft.version level in force.
    fn publish_features(&self) {
        self.server_state
            .set_features(crate::protocol::api_versions::FeatureState {
                kraft_version_level: self.raft.kraft_version(),
                finalized_features_epoch: self.raft.high_watermark().unwrap_or(-1),
            });
    }

    fn now_ms(&self) -> u64 {
        self.epoch_start.elapsed().as_millis() as u64
    }

    /// Runs until `stop` fires and the resignation (if leader) is acknowledged or timed out.
    /// Returns the log so the shard can close it.
    pub async fn run(
        mut self,
        mut inputs: mpsc::UnboundedReceiver<DriverInput>,
        stop: StopSignal,
    ) -> (Result<(), String>, MetadataLog) {
        let result = self.run_loop(&mut inputs, &stop).await;
        if let Err(e) = &result {
            error!(error = %e, "raft stopped");
        }
        // Unanswered requests and appends fail: their connections close.
        self.calls.clear();
        for (offset, waiters) in std::mem::take(&mut self.commits) {
            for w in waiters {
                let _ = w.send(Err(ClientError::LeadershipLost(offset)));
            }
        }
        (result, self.log)
    }

    async fn run_loop(
        &mut self,
        inputs: &mut mpsc::UnboundedReceiver<DriverInput>,
        stop: &StopSignal,
    ) -> Result<(), String> {
        enum Event {
            Input(Option<DriverInput>),
            Tick,
            Stop,
        }
        let mut stopping: Option<Instant> = None;
        loop {
            while let Some(ready) = self.raft.ready() {
                self.execute(ready).await?;
                self.publish_features();
            }
            if let Some(since) = stopping {
                if self.raft.shutdown_complete() || since.elapsed() >= SHUTDOWN_GRACE {
                    return Ok(());
                }
            }
            let wait = self.raft.deadline_ms().saturating_sub(self.now_ms());
            let wait = Duration::from_millis(wait.min(if stopping.is_some() { 20 } else { 1000 }));
            let event = future::or(async { Event::Input(inputs.next().await) }, async {
                if stopping.is_none() {
                    future::or(
                        async {
                            glommio::timer::sleep(wait).await;
                            Event::Tick
                        },
                        async {
                            stop.wait().await;
                            Event::Stop
                        },
                    )
                    .await
                } else {
                    glommio::timer::sleep(wait).await;
                    Event::Tick
                }
            })
            .await;
            match event {
                Event::Input(Some(input)) => {
                    self.handle(input)?;
                    // Everything already queued joins the same Ready: one fsync for all the
                    // appends and fetches that arrived during the last one (group commit).
                    while let Ok(input) = inputs.try_recv() {
                        self.handle(input)?;
                    }
                }
                Event::Input(None) => return Ok(()),
                Event::Tick => self.step(Input::Tick)?,
                Event::Stop => {
                    info!(state = self.raft.state_name(), "raft shutting down");
                    stopping = Some(Instant::now());
                    self.step(Input::Shutdown)?;
                }
            }
        }
    }

    fn step(&mut self, input: Input) -> Result<(), String> {
        let now = crate::raft::Time::new(self.now_ms(), unix_millis());
        self.raft.step(now, input);
        Ok(())
    }

    fn handle(&mut self, input: DriverInput) -> Result<(), String> {
        match input {
            DriverInput::Call { call, reply } => {
                let admin = match &call.body {
                    RequestBody::DescribeQuorum(r) => Some(self.describe_quorum(&call, r)),
                    RequestBody::DescribeCluster(r) => Some(self.describe_cluster(&call, r)),
                    RequestBody::UpdateFeatures(r) => Some(self.update_features(&call, r)),
                    _ => None,
                };
                if let Some(frame) = admin {
                    let _ = reply.send(Some(frame));
                    return Ok(());
                }
                let Some(request) = raft_rpc::request_from_wire(&call.body) else {
                    let frame = error_frame(&call, ErrorCode::INVALID_REQUEST);
                    let _ = reply.send(Some(frame));
                    return Ok(());
                };
                let token = self.next_token;
                self.next_token += 1;
                self.calls.insert(token, PendingCall { reply, call });
                self.step(Input::Request { token, request })
            }
            DriverInput::Peer { id, result } => match result {
                Ok(response) => self.step(Input::Response { id, response }),
                Err(failure) => self.step(Input::Failure { id, failure }),
            },
            DriverInput::Append { batch, reply } => {
                match self.raft.append(batch) {
                    Ok((_, last)) => self.commits.entry(last).or_default().push(reply),
                    Err(crate::raft::AppendError::NotLeader { epoch, leader }) => {
                        let _ = reply.send(Err(ClientError::NotLeader { epoch, leader }));
                    }
                    Err(e) => {
                        let _ = reply.send(Err(ClientError::Invalid(e.to_string())));
                    }
                }
                Ok(())
            }
            DriverInput::Snapshot {
                offset,
                values,
                delete_log_before,
                reply,
            } => {
                let result = self.write_snapshot(offset, &values);
                if let Ok((id, size)) = result {
                    self.step(Input::SnapshotCreated { id, size })?;
                    if delete_log_before {
                        self.step(Input::DeleteBefore { offset: id.offset })?;
                    }
                }
                let _ = reply.send(result.map(|(id, _)| id));
                Ok(())
            }
            DriverInput::Listen(mut listener) => {
                listener.handle_leader_change(LeaderAndEpoch {
                    leader_id: self.raft.leader_id(),
                    epoch: self.raft.epoch(),
                });
                self.listeners.push(listener);
                Ok(())
            }
        }
    }

    /// Unix milliseconds of a core time (the core counts from this driver's start).
    fn wall_ms(&self, core_ms: Option<u64>) -> i64 {
        let Some(t) = core_ms else { return -1 };
        unix_millis() - self.now_ms().saturating_sub(t) as i64
    }

    /// DescribeQuorum v0–2 (raft.md §12): the leader's view, or NOT_LEADER_OR_FOLLOWER.
    fn describe_quorum(&self, call: &RaftCall, r: &dq::DescribeQuorumRequest) -> Vec<u8> {
        let ours = matches!(&r.topics[..], [t] if t.topic_name == METADATA_TOPIC_NAME
            && matches!(&t.partitions[..], [p] if p.partition_index == 0));
        let mut partition = dq::PartitionData {
            partition_index: 0,
            error_code: ErrorCode::NONE,
            error_message: None,
            leader_id: self.raft.leader_id().unwrap_or(-1),
            leader_epoch: self.raft.epoch(),
            high_watermark: -1,
            current_voters: vec![],
            observers: vec![],
        };
        let mut nodes = vec![];
        match self.raft.describe_quorum() {
            _ if !ours => {
                partition.error_code = ErrorCode::UNKNOWN_TOPIC_OR_PARTITION;
                partition.error_message = Some("only __cluster_metadata-0 exists".into());
            }
            None => {
                partition.error_code = ErrorCode::NOT_LEADER_OR_FOLLOWER;
                partition.error_message = Some("this controller is not the leader".into());
            }
            Some(d) => {
                let row = |v: &crate::raft::ReplicaDescription| dq::ReplicaState {
                    replica_id: v.key.id,
                    replica_directory_id: v.key.wire_directory_id(),
                    log_end_offset: v.log_end_offset,
                    last_fetch_timestamp: self.wall_ms(v.last_fetch_ms),
                    last_caught_up_timestamp: self.wall_ms(v.last_caught_up_ms),
                };
                partition.high_watermark = d.high_watermark;
                partition.current_voters = d.voters.iter().map(row).collect();
                partition.observers = d.observers.iter().map(row).collect();
                nodes = self
                    .raft
                    .voters()
                    .voters()
                    .iter()
                    .map(|v| dq::Node {
                        node_id: v.key.id,
                        listeners: v
                            .endpoints
                            .iter()
                            .map(|e| dq::Listener {
                                name: e.name.clone(),
                                host: e.host.clone(),
                                port: e.port,
                            })
                            .collect(),
                    })
                    .collect();
            }
        }
        let response = dq::DescribeQuorumResponse {
            error_code: ErrorCode::NONE,
            error_message: None,
            topics: vec![dq::TopicData {
                topic_name: METADATA_TOPIC_NAME.into(),
                partitions: vec![partition],
            }],
            nodes,
        };
        encode_response_frame(call.correlation_id, call.response_header_version, |w| {
            response.encode(w, call.version)
        })
    }

    /// DescribeCluster v0–2 on a controller (KIP-919, wire.md §8.8): only EndpointType
    /// CONTROLLER; the voters are the nodes and the raft leader the controller.
    fn describe_cluster(&self, call: &RaftCall, r: &dc::DescribeClusterRequest) -> Vec<u8> {
        let mut response = dc::DescribeClusterResponse {
            endpoint_type: dc::ENDPOINT_TYPE_CONTROLLER,
            cluster_id: self.cluster_id.clone(),
            ..Default::default()
        };
        let error = match (call.version, r.endpoint_type) {
            (0, _) => Some(ErrorCode::INVALID_REQUEST),
            (_, dc::ENDPOINT_TYPE_CONTROLLER) => None,
            (_, dc::ENDPOINT_TYPE_BROKER) => Some(ErrorCode::MISMATCHED_ENDPOINT_TYPE),
            _ => Some(ErrorCode::UNSUPPORTED_ENDPOINT_TYPE),
        };
        if let Some(error) = error {
            response.error_code = error;
            response.error_message = Some(format!(
                "a controller answers DescribeCluster for endpoint type {} (controllers) only",
                dc::ENDPOINT_TYPE_CONTROLLER
            ));
        } else {
            response.brokers = self
                .raft
                .voters()
                .voters()
                .iter()
                .filter_map(|v| {
                    let e = v.endpoints.first()?;
                    Some(dc::DescribeClusterBroker {
                        broker_id: v.key.id,
                        host: e.host.clone(),
                        port: i32::from(e.port),
                        rack: None,
                        is_fenced: false,
                    })
                })
                .collect();
            let leader = self.raft.leader_id().unwrap_or(-1);
            response.controller_id = if response.brokers.iter().any(|b| b.broker_id == leader) {
                leader
            } else {
                -1
            };
        }
        encode_response_frame(call.correlation_id, call.response_header_version, |w| {
            response.encode(w, call.version)
        })
    }

    /// UpdateFeatures from `kafka-features --bootstrap-controller … upgrade`: only
    /// `kraft.version` is a feature here, and only upgrades are allowed (membership.md §10).
    fn update_features(
        &mut self,
        call: &RaftCall,
        r: &crate::protocol::update_features::UpdateFeaturesRequest,
    ) -> Vec<u8> {
        use crate::protocol::api_versions::KRAFT_VERSION_FEATURE;
        use crate::protocol::update_features::{self as uf, UpdatableFeatureResult};
        let version = call.version;
        let mut response = uf::UpdateFeaturesResponse {
            error_message: None,
            ..Default::default()
        };
        if !self.raft.is_leader() {
            response.error_code = ErrorCode::NOT_CONTROLLER;
            response.error_message = Some("this controller is not the active one".into());
        } else {
            for update in &r.feature_updates {
                let outcome = if update.feature != KRAFT_VERSION_FEATURE {
                    Err((
                        ErrorCode::INVALID_UPDATE_VERSION,
                        format!("ringraft has no feature {}", update.feature),
                    ))
                } else if update.upgrade_type(version) != uf::UPGRADE_TYPE_UPGRADE
                    && update.max_version_level < self.raft.kraft_version()
                {
                    Err((
                        ErrorCode::INVALID_UPDATE_VERSION,
                        "kraft.version cannot be downgraded".into(),
                    ))
                } else {
                    self.raft
                        .upgrade_kraft_version(update.max_version_level, r.validate_only)
                };
                let (error_code, error_message) = match outcome {
                    Ok(()) => (ErrorCode::NONE, None),
                    Err((code, message)) => (code, Some(message)),
                };
                if error_code != ErrorCode::NONE && version >= 2 {
                    response.error_code = error_code;
                    response.error_message = error_message.clone();
                }
                response.results.push(UpdatableFeatureResult {
                    feature: update.feature.clone(),
                    error_code,
                    error_message,
                });
            }
        }
        encode_response_frame(call.correlation_id, call.response_header_version, |w| {
            response.encode(w, version)
        })
    }

    /// Writes the snapshot file (blocking file I/O on this shard: snapshots are rare and the
    /// streaming writer is synchronous today) and returns its id and size.
    fn write_snapshot(
        &self,
        offset: i64,
        values: &[Vec<u8>],
    ) -> Result<(OffsetAndEpoch, u64), ClientError> {
        let id = self
            .raft
            .snapshot_id_for(offset)
            .map_err(ClientError::Invalid)?;
        let boundary = offset == self.log.end_offset()
            || self
                .log
                .read(offset, 1)
                .ok()
                .and_then(|b| b.into_iter().next())
                .is_some_and(|b| {
                    crate::records::batch::Batch::parse(&b)
                        .is_ok_and(|(batch, _)| batch.base_offset() == offset)
                });
        if !boundary {
            return Err(ClientError::Invalid(format!(
                "{offset} is not a batch boundary"
            )));
        }
        let sid = crate::log::snapshot::SnapshotId {
            end_offset: id.offset,
            epoch: id.epoch,
        };
        let now = unix_millis();
        let io = |e: std::io::Error| ClientError::Invalid(format!("snapshot write failed: {e}"));
        let mut level = 0;
        let mut voters = None;
        for record in self.raft.membership().snapshot_records(id.offset) {
            match record {
                ControlRecord::KRaftVersion { kraft_version } => level = kraft_version,
                ControlRecord::Voters(v) => voters = Some(v),
                _ => {}
            }
        }
        let mut writer = crate::log::snapshot::SnapshotWriter::create(
            &self.dir,
            sid,
            now,
            level,
            voters.as_ref(),
        )
        .map_err(io)?;
        for chunk in values.chunks(1000) {
            let refs: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
            writer.append(&refs, now).map_err(io)?;
        }
        let path = writer.finish(now).map_err(io)?;
        let size = std::fs::metadata(path).map_err(io)?.len();
        Ok((id, size))
    }

    /// Executes one `Ready` in its contract's order (see `raft::Ready`).
    async fn execute(&mut self, ready: Ready) -> Result<(), String> {
        if let Some(state) = &ready.election_state {
            quorum_state_data(state)
                .write_async(&self.dir)
                .await
                .map_err(|e| format!("cannot write quorum-state: {e}"))?;
            debug!(epoch = state.epoch, leader = ?state.leader_id, voted = ?state.voted_key, "quorum-state written");
        }
        for op in &ready.log_ops {
            self.apply(op).await?;
        }
        for message in ready.early_messages {
            self.send(message);
        }
        if ready.must_sync {
            let end = self.log.end_offset();
            self.log
                .flush(end)
                .await
                .map_err(|e| format!("metadata log flush failed: {e}"))?;
        }
        for message in ready.messages {
            self.send(message);
        }
        self.raft.persisted(ready.id);
        if let Some(leader) = ready.leader_change {
            info!(epoch = leader.epoch, leader = ?leader.leader_id, state = self.raft.state_name(), "leader changed");
            if leader.leader_id != Some(self.raft.local().id) {
                for (offset, waiters) in std::mem::take(&mut self.commits) {
                    for w in waiters {
                        let _ = w.send(Err(ClientError::LeadershipLost(offset)));
                    }
                }
            }
            for l in &mut self.listeners {
                l.handle_leader_change(leader);
            }
        }
        if let Some(id) = ready.load_snapshot {
            self.delivered = id.offset;
            for l in &mut self.listeners {
                l.handle_load_snapshot(id);
            }
        }
        if let Some(hwm) = ready.high_watermark {
            self.deliver(hwm)?;
        }
        Ok(())
    }

    async fn apply(&mut self, op: &LogOp) -> Result<(), String> {
        match op {
            LogOp::Truncate(offset) => {
                // What listeners were given is committed: the log refuses to cut below it.
                let floor = self.delivered;
                self.log
                    .truncate_to(*offset, floor)
                    .await
                    .map_err(|e| format!("truncating the log to {offset} failed: {e}"))
            }
            LogOp::Append(bytes) => self
                .log
                .append_as_follower(bytes.clone())
                .map(|_| ())
                .map_err(|e| format!("append failed: {e}")),
            LogOp::DeleteBefore(offset) => self
                .log
                .delete_before(*offset)
                .await
                .map_err(|e| format!("deleting the log below {offset} failed: {e}")),
            LogOp::SnapshotChunk {
                id,
                position,
                bytes,
            } => {
                let current = self
                    .download
                    .as_ref()
                    .is_some_and(|d| d.id == *id && d.written == *position);
                if !current {
                    if *position != 0 {
                        return Err(format!(
                            "snapshot {}-{} chunk at {position} without its start",
                            id.offset, id.epoch
                        ));
                    }
                    if let Some(old) = self.download.take() {
                        old.abandon().await;
                    }
                    self.download = Some(Download::start(&self.dir, *id).await?);
                }
                let download = self.download.as_mut().expect("started above");
                download.append(bytes).await
            }
            LogOp::SnapshotAbandon { id } => {
                if let Some(download) = self.download.take() {
                    warn!(
                        offset = id.offset,
                        epoch = id.epoch,
                        "discarding a snapshot download"
                    );
                    download.abandon().await;
                }
                Ok(())
            }
            LogOp::SnapshotComplete { id } => {
                let download = self.download.take().filter(|d| d.id == *id);
                let Some(download) = download else {
                    return Err(format!(
                        "snapshot {}-{} completed without its bytes",
                        id.offset, id.epoch
                    ));
                };
                let bytes = download.finish().await?;
                self.log
                    .reset_to(id.offset)
                    .await
                    .map_err(|e| format!("replacing the log with snapshot {}: {e}", id.offset))?;
                info!(
                    offset = id.offset,
                    epoch = id.epoch,
                    bytes,
                    "loaded a snapshot from the leader"
                );
                Ok(())
            }
        }
    }

    /// Delivers committed batches below `hwm` and resolves the appends they contain.
    fn deliver(&mut self, hwm: i64) -> Result<(), String> {
        let resolved: Vec<i64> = self.commits.range(..hwm).map(|(o, _)| *o).collect();
        for offset in resolved {
            for w in self.commits.remove(&offset).unwrap_or_default() {
                let _ = w.send(Ok(offset));
            }
        }
        if self.listeners.is_empty() {
            self.delivered = hwm;
            return Ok(());
        }
        while self.delivered < hwm {
            let batches = self
                .log
                .read(self.delivered, 1 << 20)
                .map_err(|e| format!("reading committed data at {}: {e}", self.delivered))?;
            let mut committed = Vec::new();
            for chunk in batches {
                let mut rest: &[u8] = &chunk;
                while !rest.is_empty() {
                    let (batch, after) = crate::records::batch::Batch::parse(rest)
                        .map_err(|e| format!("committed batch at {}: {e}", self.delivered))?;
                    if batch.base_offset() >= hwm {
                        break;
                    }
                    let at = chunk.len() - rest.len();
                    committed.push(chunk.slice(at..at + batch.len()));
                    self.delivered = batch.next_offset();
                    rest = after;
                }
            }
            if committed.is_empty() {
                break;
            }
            for l in &mut self.listeners {
                l.handle_commit(&committed);
            }
        }
        Ok(())
    }

    fn send(&mut self, message: Outbound) {
        match message {
            Outbound::Request { id, to, request } => {
                let sent = self
                    .peer(to)
                    .is_some_and(|p| p.unbounded_send((id, request)).is_ok());
                if !sent {
                    let failure = Err(Failure::Disconnected);
                    let _ = self.to_self.unbounded_send(DriverInput::Peer {
                        id,
                        result: failure,
                    });
                }
            }
            Outbound::Response { token, response } => {
                let Some(pending) = self.calls.remove(&token) else {
                    return;
                };
                let mut response = response;
                let data = self.response_data(&mut response);
                let call = &pending.call;
                let frame =
                    encode_response_frame(call.correlation_id, call.response_header_version, |w| {
                        raft_rpc::encode_response(&response, call.version, data, w)
                    });
                let _ = pending.reply.send(Some(frame));
            }
        }
    }

    /// The connection task for destination `to`, started (or restarted when the destination
    /// moved) at the address the core gives for it.
    fn peer(&mut self, to: i32) -> Option<&mpsc::UnboundedSender<(RequestId, Request)>> {
        let endpoint = self.raft.address_of(to)?;
        let current = self.peers.get(&to).is_some_and(|p| p.endpoint == endpoint);
        if !current {
            let addr = resolve(&endpoint)?;
            let (tx, rx) = mpsc::unbounded();
            let config = self.raft.config();
            let timeout = Duration::from_millis(config.request_timeout_ms);
            let client_id = format!("raft-client-{}", config.local.id);
            let task = peer_task(addr, rx, self.to_self.clone(), timeout, client_id);
            let span = tracing::info_span!("peer", id = to, %addr);
            glommio::spawn_local(task.instrument(span)).detach();
            self.peers.insert(to, Peer { endpoint, tx });
        }
        self.peers.get(&to).map(|p| &p.tx)
    }

    /// The records or snapshot bytes a response names, read now (after this `Ready`'s log
    /// operations, so never torn by a later truncation: KAFKA-18723).
    /// A snapshot chunk that fails its check is not sent: the answer becomes SNAPSHOT_NOT_FOUND
    /// (the follower goes back to Fetch) and the corruption is logged with file and byte.
    fn response_data(&mut self, response: &mut Response) -> Option<Bytes> {
        match response {
            Response::Fetch(r) => match r.records {
                Records::Read { offset, max_bytes } => match self.log.read(offset, max_bytes) {
                    Ok(chunks) => Some(concat(chunks)),
                    Err(e) => {
                        warn!(offset, error = %e, "cannot read the log for a fetch");
                        None
                    }
                },
                _ => None,
            },
            Response::FetchSnapshot(r) => match r.bytes {
                SnapshotBytes::Read {
                    id,
                    position,
                    max_bytes,
                } => match self.snapshot_chunk(id, position, max_bytes) {
                    Ok(chunk) => chunk,
                    Err(e) => {
                        error!(error = %e, "not serving a corrupt snapshot");
                        r.partition_error = ErrorCode::SNAPSHOT_NOT_FOUND;
                        r.size = -1;
                        r.bytes = SnapshotBytes::None;
                        None
                    }
                },
                _ => None,
            },
            _ => None,
        }
    }
}

impl Driver {
    /// A chunk of snapshot `id`, from a reader kept open (and checked whole once) while the
    /// snapshot is being served.
    fn snapshot_chunk(
        &mut self,
        id: OffsetAndEpoch,
        position: u64,
        max_bytes: usize,
    ) -> Result<Option<Bytes>, crate::log::snapshot::SnapshotError> {
        use crate::log::snapshot::{SnapshotId, SnapshotReader};
        let sid = SnapshotId {
            end_offset: id.offset,
            epoch: id.epoch,
        };
        if self.serving.as_ref().is_none_or(|r| r.id != sid) {
            self.serving = None;
            self.serving = Some(SnapshotReader::open(&self.dir, sid)?);
        }
        let reader = self.serving.as_ref().expect("opened above");
        let chunk = reader.read_chunk(position, max_bytes);
        if chunk.is_err() {
            self.serving = None;
        }
        chunk
    }
}

/// A snapshot being downloaded (FetchSnapshot), streamed into `<id>.checkpoint.part` on the
/// glommio ring and renamed into place only once complete and durable. A crash leaves a
/// `.part` file that recovery deletes.
struct Download {
    id: OffsetAndEpoch,
    file: glommio::io::BufferedFile,
    part: PathBuf,
    done: PathBuf,
    written: u64,
}

impl Download {
    async fn start(dir: &std::path::Path, id: OffsetAndEpoch) -> Result<Download, String> {
        let done = std::path::absolute(crate::log::layout::snapshot_file(dir, id.offset, id.epoch))
            .map_err(|e| format!("snapshot path: {e}"))?;
        let mut part = done.clone().into_os_string();
        part.push(".part");
        let part = PathBuf::from(part);
        let file = glommio::io::BufferedFile::create(&part)
            .await
            .map_err(|e| format!("cannot create {}: {e}", part.display()))?;
        Ok(Download {
            id,
            file,
            part,
            done,
            written: 0,
        })
    }

    async fn append(&mut self, bytes: &[u8]) -> Result<(), String> {
        let mut at = 0;
        while at < bytes.len() {
            let n = self
                .file
                .write_at(bytes[at..].to_vec(), self.written)
                .await
                .map_err(|e| format!("writing {}: {e}", self.part.display()))?;
            if n == 0 {
                return Err(format!("short write to {}", self.part.display()));
            }
            at += n;
            self.written += n as u64;
        }
        Ok(())
    }

    /// fdatasync, close, rename into place, sync the directory; returns the size.
    async fn finish(self) -> Result<u64, String> {
        let fail = |what: &str, e: glommio::GlommioError<()>| {
            format!("{what} {}: {e}", self.part.display())
        };
        self.file
            .fdatasync()
            .await
            .map_err(|e| fail("syncing", e))?;
        self.file.close().await.map_err(|e| fail("closing", e))?;
        glommio::io::rename(&self.part, &self.done)
            .await
            .map_err(|e| fail("renaming", e))?;
        let dir = self.done.parent().expect("a snapshot in a directory");
        glommio::io::Directory::open(dir)
            .await
            .map_err(|e| fail("opening the directory of", e))?
            .sync()
            .await
            .map_err(|e| fail("syncing the directory of", e))?;
        Ok(self.written)
    }

    /// Drops a download the leader replaced: the partial file goes (a rare unlink).
    async fn abandon(self) {
        let _ = self.file.close().await;
        let _ = std::fs::remove_file(&self.part);
    }
}

fn concat(chunks: Vec<Bytes>) -> Bytes {
    match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.into_iter().next().unwrap_or_default(),
        _ => {
            let mut all = BytesMut::with_capacity(chunks.iter().map(Bytes::len).sum());
            for c in chunks {
                all.extend_from_slice(&c);
            }
            all.freeze()
        }
    }
}

fn error_frame(call: &RaftCall, error: ErrorCode) -> Vec<u8> {
    encode_response_frame(call.correlation_id, call.response_header_version, |w| {
        raft_rpc::encode_top_level_error(call.key, call.version, error, w)
    })
}

fn election_state(data: &QuorumStateData) -> Option<ElectionState> {
    Some(ElectionState {
        epoch: data.leader_epoch,
        leader_id: (data.leader_id >= 0).then_some(data.leader_id),
        voted_key: (data.voted_id >= 0)
            .then(|| ReplicaKey::from_wire(data.voted_id, data.voted_directory_id)),
    })
}

fn quorum_state_data(state: &ElectionState) -> QuorumStateData {
    QuorumStateData {
        leader_id: state.leader_id.unwrap_or(-1),
        leader_epoch: state.epoch,
        voted_id: state.voted_key.map_or(-1, |k| k.id),
        voted_directory_id: state
            .voted_key
            .map_or(uuid::Uuid::nil(), |k| k.wire_directory_id()),
        data_version: 1,
        current_voters: None,
    }
}

/// One outbound connection to one voter: requests in order, one at a time, each answered
/// with the peer's response or a `Failure` (raft.md §9: disconnects are failures).
async fn peer_task(
    addr: SocketAddr,
    mut requests: mpsc::UnboundedReceiver<(RequestId, Request)>,
    driver: mpsc::UnboundedSender<DriverInput>,
    timeout: Duration,
    client_id: String,
) {
    let mut conn: Option<PeerConnection> = None;
    let mut reconnect_at = Instant::now();
    let mut reconnect_backoff = Duration::from_millis(50);
    while let Some((id, request)) = requests.next().await {
        if matches!(request, Request::ApiVersions) {
            // The leader's probe of a voter being added asks afresh (membership.md §4).
            conn = None;
            reconnect_at = Instant::now();
        }
        if conn.as_ref().is_none_or(|c| !c.is_usable()) {
            conn = None;
            if Instant::now() >= reconnect_at {
                match PeerConnection::connect(addr, &client_id, timeout).await {
                    Ok(c) => {
                        reconnect_backoff = Duration::from_millis(50);
                        conn = Some(c);
                    }
                    Err(e) => {
                        debug!(error = %e, "cannot connect");
                        reconnect_at = Instant::now() + reconnect_backoff;
                        reconnect_backoff = (reconnect_backoff * 2).min(Duration::from_millis(500));
                    }
                }
            }
        }
        let result = match conn.as_mut() {
            None => Err(Failure::Disconnected),
            Some(c) => exchange(c, &request, timeout).await,
        };
        if driver
            .unbounded_send(DriverInput::Peer { id, result })
            .is_err()
        {
            return;
        }
    }
}

async fn exchange(
    conn: &mut PeerConnection,
    request: &Request,
    timeout: Duration,
) -> Result<Response, Failure> {
    if matches!(request, Request::ApiVersions) {
        let answer = conn.api_versions();
        let kraft_version = answer
            .supported_features
            .iter()
            .find(|f| f.name == crate::protocol::api_versions::KRAFT_VERSION_FEATURE)
            .map(|f| (f.min_version, f.max_version));
        return Ok(Response::ApiVersions(
            crate::raft::message::ApiVersionsProbe {
                error: answer.error_code,
                kraft_version,
            },
        ));
    }
    let key = raft_rpc::api_key(request);
    let version = conn
        .negotiate(key, raft_rpc::our_versions(key))
        .filter(|v| *v >= raft_rpc::min_version(request))
        .ok_or(Failure::UnsupportedVersion)?;
    let flexible_from = apis::served(key).map_or(0, |s| s.flexible_from);
    let mut w = Writer::new();
    raft_rpc::encode_request(request, version, &mut w);
    let body = conn
        .request(key, version, flexible_from, &w.into_vec(), timeout)
        .await
        .map_err(|e| {
            debug!(error = %e, "request failed");
            Failure::Disconnected
        })?;
    raft_rpc::decode_response(key, version, &body).map_err(|e| {
        warn!(error = %e, "undecodable response");
        Failure::Disconnected
    })
}

/// Resolves a peer's endpoint (voters are usually configured by address; a name is looked up
/// once per new connection task).
fn resolve(endpoint: &crate::raft::Endpoint) -> Option<SocketAddr> {
    use std::net::ToSocketAddrs;
    match (endpoint.host.as_str(), endpoint.port).to_socket_addrs() {
        Ok(mut addrs) => addrs.next(),
        Err(e) => {
            warn!(host = %endpoint.host, port = endpoint.port, error = %e, "cannot resolve a peer");
            None
        }
    }
}

/// The membership records on disk, in offset order: the bootstrap checkpoint (at −1), the
/// latest snapshot's header (at its end − 1), then every control record in the log.
fn membership_on_disk(
    log: &MetadataLog,
    dir: &std::path::Path,
    latest: Option<OffsetAndEpoch>,
) -> Result<Vec<crate::membership::MembershipRecord>, String> {
    use crate::log::snapshot::{SnapshotId, SnapshotReader};
    use crate::membership::history::membership_records_in;
    use crate::membership::MembershipRecord;
    let header = |id: SnapshotId| -> Result<Vec<ControlRecord>, String> {
        let reader = SnapshotReader::open(dir, id).map_err(|e| format!("snapshot {e}"))?;
        Ok(reader.header().to_vec())
    };
    let mut out = Vec::new();
    match latest {
        Some(id) => {
            let sid = SnapshotId {
                end_offset: id.offset,
                epoch: id.epoch,
            };
            for record in header(sid)? {
                out.push(MembershipRecord {
                    offset: id.offset - 1,
                    record,
                });
            }
        }
        None => {
            let bootstrap = SnapshotId {
                end_offset: 0,
                epoch: 0,
            };
            if crate::log::layout::snapshot_file(dir, 0, 0).exists() {
                for record in header(bootstrap)? {
                    out.push(MembershipRecord {
                        offset: crate::membership::history::BOOTSTRAP_OFFSET,
                        record,
                    });
                }
            }
        }
    }
    // Records below the snapshot are already summed up in its header.
    let floor = latest.map_or(0, |id| id.offset);
    let mut offset = log.start_offset();
    while offset < log.end_offset() {
        let chunks = log
            .read(offset, 8 << 20)
            .map_err(|e| format!("reading the log at {offset} for voter records: {e}"))?;
        let mut next = offset;
        for chunk in chunks {
            out.extend(
                membership_records_in(&chunk)?
                    .into_iter()
                    .filter(|r| r.offset >= floor),
            );
            let mut rest: &[u8] = &chunk;
            while let Ok((batch, after)) = crate::records::batch::Batch::parse(rest) {
                next = batch.next_offset();
                rest = after;
            }
        }
        if next <= offset {
            break;
        }
        offset = next;
    }
    Ok(out)
}
