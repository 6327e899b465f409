//! The simulated cluster: every node runs the node's own executor (`runtime.rs`) over a
//! `SimLog` disk, a network that drops, delays, reorders, duplicates and partitions, and one
//! event queue ordered by (time, sequence) so a seed replays exactly. An election-state write
//! and each flush take a simulated disk delay; the executor decides what waits for them. A
//! crash drops the node's executor and loses the unflushed data and everything not yet sent —
//! the window KAFKA-10533 lived in.
//!
//! A *dynamic* cluster (KIP-853) gives every node a directory id (from its id and how often
//! its directory was wiped), a CONTROLLER listener `node<i>:<port>` and the bootstrap servers
//! `bootstrap<i>` (one per node, always routable). Nodes formatted with the initial voters hold
//! the bootstrap checkpoint (`format --initial-controllers`); the others start as observers
//! (`--no-initial-controllers`). Requests travel to the address `Raft::address_of` names, so a
//! stale port is refused like a real connection would be, and the runtime answers the leader's
//! ApiVersions probe itself. An operator outside the cluster sends AddRaftVoter,
//! RemoveRaftVoter and UpdateRaftVoter straight to a node (`operator_request`).

use std::cell::{Ref, RefCell};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::rc::Rc;

use bytes::Bytes;
use ringraft::membership::history::{
    membership_records_in, snapshot_header_records, voters_record, BOOTSTRAP_OFFSET,
};
use ringraft::membership::{MembershipRecord, Voter, VoterHistory, VoterSet};
use ringraft::node::handle::{ExecutorInput, SnapshotPart};
use ringraft::protocol::errors::ErrorCode;
use ringraft::raft::message::{ApiVersionsProbe, SnapshotBytes};
use ringraft::raft::types::Prng;
use ringraft::raft::{
    ElectionState, Endpoint, LogInfo, LogOp, Mutations, OffsetAndEpoch, Raft, RaftConfig,
    ReplicaKey, Request, Response, Time,
};
use ringraft::records::builder::BatchBuilder;
use ringraft::records::control::{control_batch, ControlRecord};
use uuid::Uuid;

use super::invariants::Checker;
use super::runtime::{IoKind, Outgoing, Running};

/// One log on one simulated disk: whole batches, and how far they are durable.
#[derive(Debug, Clone, Default)]
pub struct SimLog {
    pub start: i64,
    pub batches: Vec<(i64, i64, i32, Bytes)>, // base, next, epoch, bytes
    pub flushed_batches: usize,
    pub snapshots: BTreeMap<OffsetAndEpoch, Bytes>,
    pub partial_snapshot: Option<(OffsetAndEpoch, Vec<u8>)>,
}

impl SimLog {
    pub fn end(&self) -> i64 {
        self.batches.last().map_or(self.start, |b| b.1)
    }

    pub fn durable_end(&self) -> i64 {
        if self.flushed_batches == 0 {
            self.start
        } else {
            self.batches[self.flushed_batches - 1].1
        }
    }

    pub fn info(&self) -> LogInfo {
        let mut epochs: Vec<(i32, i64)> = Vec::new();
        for (base, _, epoch, _) in &self.batches {
            if epochs.last().is_none_or(|(e, _)| e != epoch) {
                epochs.push((*epoch, *base));
            }
        }
        LogInfo {
            start_offset: self.start,
            end_offset: self.end(),
            epochs,
            snapshots: self
                .snapshots
                .iter()
                .map(|(id, b)| (*id, b.len() as u64))
                .collect(),
        }
    }

    /// Whole batches from the one containing `offset`, up to `max_bytes` (at least one).
    pub fn read(&self, offset: i64, max_bytes: usize) -> Vec<Bytes> {
        let (mut out, mut total) = (Vec::new(), 0);
        for (_, next, _, bytes) in &self.batches {
            if *next <= offset {
                continue;
            }
            if !out.is_empty() && total + bytes.len() > max_bytes {
                break;
            }
            total += bytes.len();
            out.push(bytes.clone());
        }
        out
    }

    /// Applies one log operation; returns the batches it truncated.
    pub fn apply(&mut self, op: &LogOp) -> Vec<(i64, i64, i32, Bytes)> {
        match op {
            LogOp::Truncate(offset) => {
                let keep = self.batches.iter().take_while(|b| b.0 < *offset).count();
                assert!(
                    self.batches
                        .get(keep.wrapping_sub(1))
                        .is_none_or(|b| b.1 <= *offset),
                    "truncation inside a batch at {offset}"
                );
                self.flushed_batches = self.flushed_batches.min(keep);
                self.batches.split_off(keep)
            }
            LogOp::Append(batches) => {
                for (info, bytes) in batches.iter() {
                    // KAFKA-12331: every append starts at the log end.
                    assert_eq!(info.base_offset, self.end(), "append not at the log end");
                    self.batches
                        .push((info.base_offset, info.next_offset(), info.epoch, bytes));
                }
                Vec::new()
            }
            LogOp::SnapshotChunk {
                id,
                position,
                bytes,
            } => {
                let part = self.partial_snapshot.get_or_insert((*id, Vec::new()));
                if part.0 != *id || part.1.len() as u64 != *position {
                    *part = (*id, Vec::new());
                    assert_eq!(*position, 0, "snapshot chunk out of order");
                }
                part.1.extend_from_slice(bytes);
                Vec::new()
            }
            LogOp::SnapshotAbandon { id } => {
                assert!(
                    self.partial_snapshot.as_ref().is_none_or(|(p, _)| p == id),
                    "abandoning a download that is not the one in progress"
                );
                self.partial_snapshot = None;
                Vec::new()
            }
            LogOp::SnapshotComplete { id } => {
                let (pid, data) = self
                    .partial_snapshot
                    .take()
                    .expect("a download in progress");
                assert_eq!(pid, *id);
                self.snapshots.insert(*id, Bytes::from(data));
                self.snapshots.retain(|s, _| s.offset >= id.offset);
                self.start = id.offset;
                self.flushed_batches = 0;
                std::mem::take(&mut self.batches)
            }
            LogOp::SnapshotAdopted { id } => {
                let (pid, data) = self
                    .partial_snapshot
                    .take()
                    .expect("an adoption in progress");
                assert_eq!(pid, *id);
                // It must end on a batch of this log, in that batch's epoch: the leader's
                // snapshot of a prefix this replica holds.
                let before = self.batches.iter().find(|b| b.1 == id.offset);
                assert!(
                    before.is_some_and(|b| b.2 == id.epoch),
                    "adopted snapshot {id:?} does not end on a batch of this log in its epoch"
                );
                self.snapshots.insert(*id, Bytes::from(data));
                Vec::new()
            }
            LogOp::DeleteBefore(offset) => {
                let drop = self.batches.iter().take_while(|b| b.1 <= *offset).count();
                self.batches.drain(..drop);
                self.flushed_batches = self.flushed_batches.saturating_sub(drop);
                self.start = *offset;
                self.snapshots.retain(|s, _| s.offset >= *offset);
                Vec::new()
            }
        }
    }

    /// The first `batches` batches (those a flush started with) are durable.
    fn flush(&mut self, batches: usize) {
        self.flushed_batches = self.flushed_batches.max(batches.min(self.batches.len()));
    }

    /// A crash: what was not flushed is gone (and a half-downloaded snapshot with it).
    fn crash(&mut self) {
        self.batches.truncate(self.flushed_batches);
        self.partial_snapshot = None;
    }
}

/// What a node keeps across crashes.
#[derive(Debug, Clone, Default)]
pub struct Disk {
    pub election: Option<ElectionState>,
    pub log: SimLog,
    /// The bootstrap checkpoint `format --initial-controllers` writes (a snapshot header batch:
    /// KRaftVersion(1) + Voters); `None` for `--no-initial-controllers` and wiped directories.
    pub bootstrap: Option<Bytes>,
}

impl Disk {
    /// The voter history a runtime rebuilds at startup (docs/membership.md §2): the bootstrap
    /// checkpoint at offset −1, the latest snapshot's header at its end − 1, then every
    /// membership record in the log past the snapshot.
    pub fn voter_history(&self) -> Result<VoterHistory, ringraft::membership::MembershipError> {
        let mut records = Vec::new();
        if let Some(checkpoint) = &self.bootstrap {
            for record in snapshot_header_records(checkpoint)? {
                records.push(MembershipRecord {
                    offset: BOOTSTRAP_OFFSET,
                    record,
                });
            }
        }
        let snapshot = self.log.snapshots.iter().next_back();
        let from = snapshot.map_or(0, |(id, _)| id.offset);
        if let Some((id, bytes)) = snapshot {
            for record in snapshot_header_records(bytes)? {
                let offset = id.offset - 1;
                records.push(MembershipRecord { offset, record });
            }
        }
        for (base, _, _, bytes) in &self.log.batches {
            if *base >= from {
                records.extend(membership_records_in(bytes)?);
            }
        }
        VoterHistory::from_records(VoterSet::new(Vec::new())?, &records)
    }
}

/// The listener raft uses in dynamic clusters (`controller.listener.names`).
pub const LISTENER: &str = "CONTROLLER";
/// The requester id of the operator's requests (kafka-metadata-quorum, not a node).
pub const OPERATOR: i32 = i32::MIN;

/// The requester of a Fetch that came in a Fetch session (`groups.rs`): its answer goes to the
/// session layer, not over this cluster's network.
pub const SESSION: i32 = i32::MIN + 1;

/// What a group's cluster hands the session layer (`groups.rs`) when its Fetches travel in
/// sessions.
#[derive(Debug)]
pub enum SessionOut {
    /// A follower's executor sent a Fetch.
    Fetch {
        from: i32,
        to: i32,
        incarnation: u64,
        id: u64,
        fetch: ringraft::raft::message::FetchRequest,
    },
    /// A leader's executor (or fetch shard) answered a Fetch a session carried.
    Answer {
        token: u64,
        response: Response,
        data: Vec<Bytes>,
    },
}
/// The first CONTROLLER port; a node's port moves up when its endpoint is changed.
pub const BASE_PORT: u16 = 9093;

/// Node `id`'s advertised controller listener.
pub fn endpoint(id: i32, port: u16) -> Endpoint {
    Endpoint {
        name: LISTENER.into(),
        host: format!("node{id}"),
        port,
    }
}

/// The bootstrap server entry for node `id`: another name for the same machine, routable even
/// when the advertised one is not (KAFKA-20514).
pub fn bootstrap_endpoint(id: i32) -> Endpoint {
    Endpoint {
        name: LISTENER.into(),
        host: format!("bootstrap{id}"),
        port: BASE_PORT,
    }
}

/// The directory id of node `id` after `generation` wipes: never nil.
pub fn directory_id(id: i32, generation: u64) -> Uuid {
    Uuid::from_u128(((id as u128 + 1) << 64) | (generation as u128 + 1))
}

/// The checkpoint `format --initial-controllers` writes for `voters`.
pub fn bootstrap_checkpoint(voters: &VoterSet) -> Bytes {
    let records = [
        ControlRecord::SnapshotHeader {
            last_contained_log_timestamp: 0,
        },
        ControlRecord::KRaftVersion { kraft_version: 1 },
        ControlRecord::Voters(voters_record(voters)),
    ];
    Bytes::from(control_batch(0, 0, 0, &records))
}

pub struct Node {
    pub id: i32,
    /// What survives a crash (shared with the running executor's storage).
    pub disk: Rc<RefCell<Disk>>,
    /// The running executor, or `None` while the node is down.
    pub exec: Option<Running>,
    pub incarnation: u64,
    pub clock_offset_ms: u64,
    pub mutations: Mutations,
    /// When the node's next timer event is scheduled.
    timer_at: Option<u64>,
    /// Dynamic clusters: how often this node's directory was wiped (its directory id).
    pub generation: u64,
    /// Dynamic clusters: the port its CONTROLLER listener is bound to.
    pub port: u16,
}

impl Node {
    /// The core, while the node runs.
    pub fn raft(&self) -> Option<Ref<'_, Raft>> {
        self.exec.as_ref().map(|e| e.raft.borrow())
    }

    pub fn is_running(&self) -> bool {
        self.exec.is_some()
    }

    /// The committed bound the executor has delivered to the application: what the state
    /// machine has seen. The core's own may run ahead of it while a flush is in flight.
    pub fn delivered_high_watermark(&self) -> Option<i64> {
        let e = self.exec.as_ref()?;
        let hwm = e.probe.delivered_high_watermark.get();
        (hwm >= 0).then_some(hwm)
    }

    /// Whether a flush is in flight (written, not yet durable).
    pub fn flush_in_flight(&self) -> bool {
        self.exec
            .as_ref()
            .is_some_and(|e| e.io.flushes_in_flight.get() > 0)
    }
}

#[derive(Debug, Clone)]
pub enum Event {
    Deliver {
        to: i32,
        msg: Wire,
    },
    /// The node's earliest timer.
    Timer {
        node: i32,
        incarnation: u64,
    },
    /// A disk operation of the node completes.
    IoDone {
        node: i32,
        incarnation: u64,
        io: u64,
        kind: IoKind,
    },
    ClientAppend,
    /// A publication reaches the node's fetch shard (`fetch.rs`).
    Publish {
        node: i32,
        incarnation: u64,
        publication: Box<ringraft::fetch::Publication>,
    },
    /// A Fetch parked on the node's fetch shard reaches its deadline.
    FetchDeadline {
        node: i32,
        incarnation: u64,
        ticket: u64,
    },
    /// Every node with committed data snapshots it, and sometimes drops the log below.
    Snapshot,
    Fault(Fault),
    /// The operator's next voter change (`operator.rs`).
    Operator,
}

#[derive(Debug, Clone)]
pub enum Wire {
    Request {
        from: i32,
        incarnation: u64,
        id: u64,
        request: Request,
        /// The port dialled; `None` when any port reaches the node (static clusters, bootstrap
        /// names).
        port: Option<u16>,
        /// The sender's directory generation: a request from a directory wiped since is never
        /// delivered (a disk is replaced long after the crash that preceded it).
        generation: u64,
    },
    Response {
        token: u64,
        response: Response,
    },
    Failure {
        id: u64,
        incarnation: u64,
    },
}

#[derive(Debug, Clone)]
pub enum Fault {
    Crash(i32),
    Restart(i32),
    /// Block traffic from .0 to .1.
    Block(i32, i32),
    Isolate(i32),
    HealAll,
    ClockJump(i32, u64),
    Shutdown(i32),
    WipeAndRestart(i32),
    /// Restart the node with its CONTROLLER listener on a new port (dynamic clusters).
    ChangePort(i32),
}

/// What the requester reads: the answer encoded as the node's connections encode it
/// (`route::encode`, at the highest version ringraft speaks, the bytes it names in the hole),
/// then decoded as the node's peer connections decode it (`raft_rpc::decode_response`).
/// ApiVersions is the runtime's own answer, not the executor's: it is passed as it is.
fn over_the_wire(
    request: &Request,
    response: Response,
    data: Vec<Bytes>,
) -> Result<Response, String> {
    use ringraft::net::raft_rpc;
    use ringraft::protocol::apis;
    if matches!(response, Response::ApiVersions(_)) {
        return Ok(response);
    }
    let key = raft_rpc::api_key(request);
    let version = raft_rpc::our_versions(key).1;
    let spec = apis::served(key).ok_or_else(|| format!("{key:?} is not served"))?;
    let to = ringraft::node::route::ReplyTo {
        key,
        version,
        correlation_id: 7,
        response_header_version: spec.response_header_version(version),
    };
    let frame = Bytes::from(ringraft::node::route::encode(&to, &response, data).to_vec());
    // The size prefix, then what the node's peer connections read: header, then body.
    let size = i32::from_be_bytes(frame[..4].try_into().expect("4 bytes")) as usize;
    if size != frame.len() - 4 {
        return Err(format!(
            "size prefix {size}, frame of {} bytes",
            frame.len() - 4
        ));
    }
    let (correlation_id, body) =
        ringraft::net::peer::strip_response_header(&frame.slice(4..), to.response_header_version)
            .map_err(|e| format!("response header: {e}"))?;
    if correlation_id != to.correlation_id {
        return Err(format!("correlation id {correlation_id}"));
    }
    raft_rpc::decode_response(
        ringraft::protocol::group::GroupKey::metadata(),
        key,
        version,
        &body,
    )
    .map_err(|e| e.to_string())
}

/// Where a request goes (`Cluster::route`).
enum Route {
    /// Node and the port dialled (`None`: any).
    To(i32, Option<u16>),
    /// No address, or nothing listens there: the connection is refused.
    Refused,
    /// The address is not routable: the request vanishes and times out.
    Nowhere,
}

pub struct NetConfig {
    pub drop_per_mille: u64,
    pub duplicate_per_mille: u64,
    pub delay_min_ms: u64,
    pub delay_max_ms: u64,
    pub disk_delay_ms: u64,
    /// Snapshot chunks with one byte flipped on the way (a bad disk or link at the sender).
    pub corrupt_per_mille: u64,
}

pub struct Cluster {
    pub seed: u64,
    pub now: u64,
    pub nodes: Vec<Node>,
    pub voters: VoterSet,
    pub net: NetConfig,
    pub blocked: std::collections::BTreeSet<(i32, i32)>,
    pub rng: Prng,
    queue: BinaryHeap<Reverse<(u64, u64, usize)>>,
    events: HashMap<usize, Event>,
    seq: u64,
    next_event: usize,
    /// token → (requester, its incarnation, its request id, the request)
    tokens: HashMap<u64, (i32, u64, u64, Request)>,
    next_token: u64,
    pub checker: Checker,
    pub appended_values: u64,
    pub append_interval_ms: u64,
    /// 0: no snapshots.
    pub snapshot_interval_ms: u64,
    pub events_run: u64,
    pub snapshot_downloads: u64,
    /// Snapshot chunks corrupted on the way, and downloads abandoned for failing their check.
    pub corrupted_chunks: u64,
    pub abandoned_downloads: u64,
    /// Snapshots witnesses adopted from leaders (`raft::adopt`).
    pub adopted_snapshots: u64,
    pub truncations: u64,
    /// Timer wake-ups per node (KAFKA-17751: an idle replica must not spin).
    pub ticks: Vec<u64>,
    /// `RINGRAFT_SIM_TRACE=1`: print every delivered message (for replaying a seed).
    pub trace: bool,
    /// KIP-853 mode: directory ids, listeners, bootstrap servers, routing by address.
    pub dynamic: bool,
    /// `controller.quorum.auto.join.enable` on every node (dynamic clusters).
    pub auto_join: bool,
    /// Per node, the nodes its bootstrap servers name (default: every node).
    pub bootstrap_ids: BTreeMap<i32, Vec<i32>>,
    /// (node, host) pairs whose connections go nowhere: the host is not routable from there.
    pub unroutable: std::collections::BTreeSet<(i32, String)>,
    /// The operator's requests by token (where sent, what) and the answers received.
    pub operator_requests: BTreeMap<u64, (i32, Request)>,
    pub operator_answers: BTreeMap<u64, Response>,
    /// The operator's own randomness, apart from the network's.
    pub op_rng: Prng,
    /// The operator also acts the instant a new leader appears, before its epoch commits (as
    /// `kafka-metadata-quorum` may: it does not know): a correct leader refuses.
    pub hasty_operator: bool,
    /// The newest leader epoch the hasty operator has acted on.
    hasty_seen_epoch: i32,
    /// Restarts whose on-disk voter set differed from the leader's at the time.
    pub stale_restarts: u64,
    pub port_changes: u64,
    pub wipes: u64,
    /// Fetch shards: every node answers Fetch on one, whose publications arrive up to this
    /// much after the raft shard made them (`None`: the core answers Fetch).
    pub fetch_lag_ms: Option<u64>,
    /// Every node's `controller.quorum.append.linger.ms`.
    pub append_linger_ms: u64,
    /// Nodes that run as witnesses (`ringraft.leadership=witness`).
    pub witnesses: std::collections::BTreeSet<i32>,
    /// A node whose fetch shard lags by its own amount instead.
    pub fetch_lag_of: BTreeMap<i32, u64>,
    /// Per node, when its latest publication is due (publications arrive in order).
    publication_due: Vec<u64>,
    /// Fetches fetch shards answered, and answers rebuilt after a rewrite.
    pub fetch_shard_answers: u64,
    pub fetch_shard_retries: u64,
    /// Multi-group runs (`groups.rs`): Fetches and their answers leave through `session_out`
    /// instead of this cluster's network.
    pub sessions: bool,
    pub session_out: Vec<SessionOut>,
    /// Multi-group runs: every record appended carries this key (its group).
    pub record_key: Option<Vec<u8>>,
}

pub const CLUSTER_ID: &str = "sim-cluster-id-AAAAAAAA";

impl Cluster {
    pub fn new(seed: u64, size: usize, net: NetConfig) -> Cluster {
        let voters = VoterSet::new(
            (0..size as i32)
                .map(|id| Voter::new(ReplicaKey::new(id, None), vec![]))
                .collect(),
        )
        .unwrap();
        let nodes = (0..size as i32)
            .map(|id| Node {
                id,
                disk: Rc::new(RefCell::new(Disk::default())),
                exec: None,
                incarnation: 0,
                clock_offset_ms: 0,
                mutations: Mutations::default(),
                timer_at: None,
                generation: 0,
                port: 0,
            })
            .collect();
        Cluster {
            seed,
            now: 0,
            nodes,
            voters,
            net,
            blocked: Default::default(),
            rng: Prng::new(seed ^ 0x5eed),
            queue: BinaryHeap::new(),
            events: HashMap::new(),
            seq: 0,
            next_event: 0,
            tokens: HashMap::new(),
            next_token: 1,
            checker: Checker::new(size),
            appended_values: 0,
            append_interval_ms: 20,
            snapshot_interval_ms: 0,
            events_run: 0,
            snapshot_downloads: 0,
            corrupted_chunks: 0,
            abandoned_downloads: 0,
            adopted_snapshots: 0,
            truncations: 0,
            ticks: vec![0; size],
            trace: std::env::var_os("RINGRAFT_SIM_TRACE").is_some(),
            dynamic: false,
            auto_join: false,
            bootstrap_ids: BTreeMap::new(),
            unroutable: Default::default(),
            operator_requests: BTreeMap::new(),
            operator_answers: BTreeMap::new(),
            op_rng: Prng::new(seed ^ 0x0e7a_7042),
            hasty_operator: false,
            hasty_seen_epoch: 0,
            stale_restarts: 0,
            port_changes: 0,
            wipes: 0,
            fetch_lag_ms: None,
            append_linger_ms: 0,
            fetch_lag_of: BTreeMap::new(),
            witnesses: Default::default(),
            publication_due: vec![0; size],
            fetch_shard_answers: 0,
            fetch_shard_retries: 0,
            sessions: false,
            session_out: Vec::new(),
            record_key: None,
        }
    }

    /// A KIP-853 cluster: nodes `0..voters` formatted with the initial voters (bootstrap
    /// checkpoint), nodes `voters..voters + spares` formatted without (observers).
    pub fn new_dynamic(seed: u64, voters: usize, spares: usize, net: NetConfig) -> Cluster {
        let mut c = Cluster::new(seed, voters + spares, net);
        c.dynamic = true;
        for node in &mut c.nodes {
            node.port = BASE_PORT;
        }
        c.voters = VoterSet::new(
            (0..voters as i32)
                .map(|id| Voter::new(c.key_of(id), vec![endpoint(id, BASE_PORT)]))
                .collect(),
        )
        .unwrap();
        let checkpoint = bootstrap_checkpoint(&c.voters);
        for node in &mut c.nodes[..voters] {
            node.disk.borrow_mut().bootstrap = Some(checkpoint.clone());
        }
        c
    }

    /// Node `id`'s replica key as it runs now (no directory id in static clusters).
    pub fn key_of(&self, id: i32) -> ReplicaKey {
        let node = &self.nodes[id as usize];
        let directory = self.dynamic.then(|| directory_id(id, node.generation));
        ReplicaKey::new(id, directory)
    }

    /// Whether `key` is the replica node `key.id` runs (or will run on restart) now.
    pub fn is_current(&self, key: &ReplicaKey) -> bool {
        (key.id as usize) < self.nodes.len() && self.key_of(key.id) == *key
    }

    pub fn schedule(&mut self, at: u64, event: Event) {
        let key = self.next_event;
        self.next_event += 1;
        self.seq += 1;
        self.events.insert(key, event);
        self.queue.push(Reverse((at, self.seq, key)));
    }

    pub fn start_all(&mut self) -> Result<(), String> {
        for id in 0..self.nodes.len() as i32 {
            self.start(id)?;
        }
        self.schedule(self.now + self.append_interval_ms, Event::ClientAppend);
        if self.snapshot_interval_ms > 0 {
            self.schedule(self.now + self.snapshot_interval_ms, Event::Snapshot);
        }
        Ok(())
    }

    fn node_now(&self, id: i32) -> u64 {
        self.now + self.nodes[id as usize].clock_offset_ms
    }

    pub fn start(&mut self, id: i32) -> Result<(), String> {
        let now = self.node_now(id);
        let seed = self
            .seed
            .wrapping_mul(31)
            .wrapping_add(id as u64 * 1000 + self.nodes[id as usize].incarnation);
        let key = self.key_of(id);
        let mut config = RaftConfig::new(key, CLUSTER_ID.into(), seed);
        let history = if self.dynamic {
            self.configure_dynamic(id, &mut config);
            let history = self.nodes[id as usize].disk.borrow().voter_history();
            let history = history.map_err(|e| format!("node {id} cannot start: {e}"))?;
            let leader_set = self.leader().and_then(|(l, _)| {
                let raft = self.nodes[l as usize].raft()?;
                Some(raft.voters().clone())
            });
            if leader_set.is_some_and(|set| set != *history.latest()) {
                self.stale_restarts += 1;
            }
            history
        } else {
            VoterHistory::new(self.voters.clone())
        };
        let node = &mut self.nodes[id as usize];
        assert!(node.exec.is_none());
        node.incarnation += 1;
        config.mutations = node.mutations;
        config.witness = self.witnesses.contains(&id);
        config.static_voters = !self.dynamic;
        let (election, info) = {
            let disk = node.disk.borrow();
            (disk.election.clone(), disk.log.info())
        };
        let witness = config.witness;
        let mut raft = Raft::new(config, history, election, &info, Time::simulated(now));
        // A witness writes no snapshots of its own here: it adopts the leader's.
        raft.set_adopting(witness);
        let fetch_shard = self.fetch_lag_ms.map(|_| node.mutations.stale_fetch_view);
        let linger = self.append_linger_ms;
        node.exec = Some(Running::new(
            raft,
            node.disk.clone(),
            now,
            fetch_shard,
            linger,
        ));
        node.timer_at = None;
        self.checker.node_restarted(id);
        self.poll(id)
    }

    /// Listener, advertised endpoint, bootstrap servers and auto-join of a dynamic node.
    fn configure_dynamic(&self, id: i32, config: &mut RaftConfig) {
        let node = &self.nodes[id as usize];
        config.listener_name = Some(LISTENER.into());
        config.local_endpoints = vec![endpoint(id, node.port)];
        config.bootstrap = match self.bootstrap_ids.get(&id) {
            Some(ids) => ids.iter().map(|b| bootstrap_endpoint(*b)).collect(),
            None => (0..self.nodes.len() as i32)
                .map(bootstrap_endpoint)
                .collect(),
        };
        config.auto_join = self.auto_join;
    }

    pub fn crash(&mut self, id: i32) {
        let node = &mut self.nodes[id as usize];
        if node.exec.take().is_none() {
            return;
        }
        node.timer_at = None;
        node.disk.borrow_mut().log.crash();
        node.incarnation += 1;
    }

    /// Runs events until `until` (simulated ms), checking every invariant after each.
    pub fn run_until(&mut self, until: u64) -> Result<(), String> {
        while let Some(Reverse((at, _, key))) = self.queue.peek().copied() {
            if at > until {
                break;
            }
            self.queue.pop();
            self.now = self.now.max(at);
            let event = self.events.remove(&key).unwrap();
            self.run_event(event)?;
            self.events_run += 1;
            if self.hasty_operator {
                if let Some((_, epoch)) = self.leader().filter(|(_, e)| *e > self.hasty_seen_epoch)
                {
                    self.hasty_seen_epoch = epoch;
                    self.schedule(self.now + 1, Event::Operator);
                }
            }
            let static_voters = (!self.dynamic).then_some(&self.voters);
            self.checker.check(self.now, &self.nodes, static_voters)?;
        }
        self.now = self.now.max(until);
        Ok(())
    }

    /// Like `run_while`, but tests `cond` after every single event: for scenarios that must act
    /// in the instant something happens (a leader elected, before it sends anything).
    pub fn run_events_while<F: FnMut(&Cluster) -> bool>(
        &mut self,
        limit: u64,
        mut cond: F,
    ) -> Result<bool, String> {
        let deadline = self.now + limit;
        while cond(self) {
            let Some(Reverse((at, _, _))) = self.queue.peek().copied() else {
                return Ok(false);
            };
            if at > deadline {
                self.now = deadline;
                return Ok(false);
            }
            self.run_until(at)?;
        }
        Ok(true)
    }

    pub fn run_while<F: FnMut(&Cluster) -> bool>(
        &mut self,
        limit: u64,
        mut cond: F,
    ) -> Result<bool, String> {
        let deadline = self.now + limit;
        while self.now < deadline {
            if !cond(self) {
                return Ok(true);
            }
            let step = (self.now + 10).min(deadline);
            self.run_until(step)?;
        }
        Ok(!cond(self))
    }

    fn run_event(&mut self, event: Event) -> Result<(), String> {
        match event {
            Event::Deliver { to, msg } => self.deliver(to, msg),
            Event::Timer { node, incarnation } => {
                let n = &mut self.nodes[node as usize];
                if n.incarnation == incarnation && n.timer_at == Some(self.now) {
                    n.timer_at = None;
                    self.ticks[node as usize] += 1;
                    self.poll(node)?;
                }
                Ok(())
            }
            Event::IoDone {
                node,
                incarnation,
                io,
                kind,
            } => {
                if self.nodes[node as usize].incarnation == incarnation {
                    self.io_done(node, io, kind)?;
                }
                Ok(())
            }
            Event::ClientAppend => {
                self.client_append()?;
                let next = self.now + 1 + self.rng.below(self.append_interval_ms * 2);
                self.schedule(next, Event::ClientAppend);
                Ok(())
            }
            Event::Snapshot => {
                self.take_snapshots()?;
                let next = self.now
                    + self.snapshot_interval_ms / 2
                    + self.rng.below(self.snapshot_interval_ms);
                self.schedule(next, Event::Snapshot);
                Ok(())
            }
            Event::Fault(f) => self.fault(f),
            Event::Operator => super::operator::act(self),
            Event::Publish {
                node,
                incarnation,
                publication,
            } => self.fetch_shard(node, incarnation, |shard, disk, now| {
                shard.publish(&publication, disk, now)
            }),
            Event::FetchDeadline {
                node,
                incarnation,
                ticket,
            } => self.fetch_shard(node, incarnation, |shard, disk, now| {
                shard.expire(ticket, disk, now)
            }),
        }
    }

    /// Runs `act` on node `id`'s fetch shard (if this incarnation still runs), then sends its
    /// answers, hands the core the progress and schedules the deadlines of what it parked.
    fn fetch_shard(
        &mut self,
        id: i32,
        incarnation: u64,
        act: impl FnOnce(
            &mut super::fetch::SimFetchShard,
            &Disk,
            u64,
        ) -> Result<super::fetch::Outcome, String>,
    ) -> Result<(), String> {
        let now = self.node_now(id);
        let node = &mut self.nodes[id as usize];
        if node.incarnation != incarnation {
            return Ok(());
        }
        let Some(shard) = node.exec.as_mut().and_then(|e| e.fetch.as_mut()) else {
            return Ok(());
        };
        let disk = node.disk.clone();
        let outcome = act(shard, &disk.borrow(), now)?;
        self.fetch_shard_answers += outcome.answers.len() as u64;
        self.fetch_shard_retries += outcome.retries;
        let offset = self.nodes[id as usize].clock_offset_ms;
        for (ticket, deadline) in outcome.parked {
            let at = deadline.saturating_sub(offset).max(self.now + 1);
            let event = Event::FetchDeadline {
                node: id,
                incarnation,
                ticket,
            };
            self.schedule(at, event);
        }
        for a in outcome.answers {
            let answer = Outgoing::Response {
                token: a.token,
                response: a.response,
                data: a.data,
            };
            self.send(id, answer)?;
        }
        if !outcome.progress.is_empty() {
            let input = ExecutorInput::FetchProgress {
                progress: outcome.progress,
                reply: None,
            };
            self.input(id, input)?;
        }
        Ok(())
    }

    /// Every running node snapshots now and, with `delete_log`, drops its log below.
    pub fn snapshot_now(&mut self, delete_log: bool) -> Result<(), String> {
        self.snapshot_nodes(Some(delete_log))
    }

    fn take_snapshots(&mut self) -> Result<(), String> {
        self.snapshot_nodes(None)
    }

    /// What a state machine does: snapshot at the last committed batch boundary (the node's
    /// executor writes it durably before the core hears of it), then drop the log below it if
    /// `delete_log` says so (`None`: a coin decides).
    fn snapshot_nodes(&mut self, delete_log: Option<bool>) -> Result<(), String> {
        for i in 0..self.nodes.len() {
            let id = i as i32;
            if self.witnesses.contains(&id) {
                // It adopts the others' snapshots instead (`raft::adopt`); now and then it is
                // turned off and on again, as a node does when a state machine registers, so
                // that requests it had in flight are answered after it stopped adopting.
                if let Some(exec) = self.nodes[i].exec.as_ref() {
                    if self.rng.below(4) == 0 {
                        let mut raft = exec.raft.borrow_mut();
                        let adopting = raft.is_adopting();
                        raft.set_adopting(!adopting);
                    }
                }
                continue;
            }
            let node = &self.nodes[i];
            let Some(hwm) = node.raft().and_then(|r| r.high_watermark()) else {
                continue;
            };
            let boundary = node
                .disk
                .borrow()
                .log
                .batches
                .iter()
                .map(|b| b.1)
                .filter(|n| *n <= hwm)
                .last();
            let Some(boundary) = boundary else {
                continue;
            };
            let state = format!("state at {boundary}").repeat(8).into_bytes();
            let delete_log_before = delete_log.unwrap_or_else(|| self.rng.below(2) == 0);
            let (reply, _) = futures_channel::oneshot::channel();
            let (mut parts, receiver) = futures_channel::mpsc::channel(2);
            parts
                .try_send(SnapshotPart::Values(vec![state]))
                .expect("room for the state");
            parts
                .try_send(SnapshotPart::Finish { delete_log_before })
                .expect("room for the end");
            self.input(
                id,
                ExecutorInput::Snapshot {
                    offset: boundary,
                    parts: receiver,
                    reply,
                },
            )?;
        }
        Ok(())
    }

    pub fn fault(&mut self, f: Fault) -> Result<(), String> {
        if self.trace {
            eprintln!("{} ms: FAULT {f:?}", self.now);
        }
        match f {
            Fault::Crash(id) => self.crash(id),
            Fault::Restart(id) => {
                if self.nodes[id as usize].exec.is_none() {
                    self.start(id)?;
                }
            }
            Fault::Block(a, b) => {
                self.blocked.insert((a, b));
            }
            Fault::Isolate(a) => {
                for b in 0..self.nodes.len() as i32 {
                    if a != b {
                        self.blocked.insert((a, b));
                        self.blocked.insert((b, a));
                    }
                }
            }
            Fault::HealAll => self.blocked.clear(),
            Fault::ClockJump(id, ms) => {
                self.nodes[id as usize].clock_offset_ms += ms;
                self.poll(id)?;
            }
            Fault::Shutdown(id) => self.input(id, ExecutorInput::Stop)?,
            Fault::WipeAndRestart(id) => {
                self.crash(id);
                let lost = (
                    self.key_of(id),
                    self.nodes[id as usize].disk.borrow().log.durable_end(),
                );
                self.checker.replica_lost(lost.0, lost.1);
                self.nodes[id as usize].disk = Rc::new(RefCell::new(Disk::default()));
                if self.dynamic {
                    // A re-formatted directory is a new replica (docs/membership.md §1).
                    self.nodes[id as usize].generation += 1;
                }
                self.wipes += 1;
                self.checker.node_wiped(id);
                self.start(id)?;
            }
            Fault::ChangePort(id) => {
                // A node that is down stays down until its restart, on the new port.
                let running = self.nodes[id as usize].exec.is_some();
                self.crash(id);
                self.nodes[id as usize].port += 1;
                self.port_changes += 1;
                if running {
                    self.start(id)?;
                }
            }
        }
        Ok(())
    }

    fn client_append(&mut self) -> Result<(), String> {
        for i in 0..self.nodes.len() {
            let now = self.node_now(i as i32);
            if !self.nodes[i].raft().is_some_and(|r| r.is_leader()) {
                continue;
            }
            self.appended_values += 1;
            let mut builder = BatchBuilder::new(0, 0, now as i64, false);
            let key = self.record_key.as_deref();
            builder.append(key, Some(&self.appended_values.to_be_bytes()));
            let (reply, _) = futures_channel::oneshot::channel();
            let batch = builder.finish();
            self.input(
                i as i32,
                ExecutorInput::Append {
                    batch,
                    check: Default::default(),
                    reply,
                },
            )?;
        }
        Ok(())
    }

    /// A Fetch a session carried from node `from` to node `to` (running): handed to `to`'s
    /// fetch shard or executor as a lone Fetch would be. Returns the token its answer will
    /// carry in `session_out`.
    pub fn session_fetch(
        &mut self,
        from: i32,
        to: i32,
        fetch: ringraft::raft::message::FetchRequest,
    ) -> Result<u64, String> {
        let token = self.next_token;
        self.next_token += 1;
        let request = Request::Fetch(fetch.clone());
        self.tokens.insert(token, (SESSION, 0, 0, request.clone()));
        if self.trace {
            eprintln!(
                "{} ms: to {to} in a session from {from}: {request:?}",
                self.now
            );
        }
        let node = &self.nodes[to as usize];
        if node.exec.as_ref().is_some_and(|e| e.fetch.is_some()) {
            let incarnation = node.incarnation;
            self.fetch_shard(to, incarnation, |shard, disk, now| {
                shard.fetch(token, fetch, disk, now)
            })?;
        } else {
            self.request(to, token, request)?;
        }
        Ok(token)
    }

    /// The session layer's answer to request `id` of node `to`'s incarnation `incarnation`.
    pub fn session_answer(
        &mut self,
        to: i32,
        incarnation: u64,
        id: u64,
        result: Result<Response, ringraft::raft::Failure>,
    ) -> Result<(), String> {
        if self.nodes[to as usize].incarnation != incarnation {
            return Ok(());
        }
        if self.trace {
            eprintln!("{} ms: to {to} from a session: {id} {result:?}", self.now);
        }
        self.input(to, ExecutorInput::Peer { id, result })
    }

    /// Every invariant, now (after the session layer handed nodes something).
    pub fn check_now(&mut self) -> Result<(), String> {
        let static_voters = (!self.dynamic).then_some(&self.voters);
        self.checker.check(self.now, &self.nodes, static_voters)
    }

    /// When this cluster's next event is due.
    pub fn next_event_at(&self) -> Option<u64> {
        self.queue.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Hands `request` to node `id`'s executor under `token`.
    fn request(&mut self, id: i32, token: u64, request: Request) -> Result<(), String> {
        let Some(exec) = self.nodes[id as usize].exec.as_ref() else {
            return Ok(());
        };
        exec.io.push_request(token, request);
        self.poll(id)
    }

    /// Hands `input` to node `id`'s executor (dropped while it is down) and runs it.
    pub fn input(&mut self, id: i32, input: ExecutorInput) -> Result<(), String> {
        let Some(exec) = self.nodes[id as usize].exec.as_ref() else {
            return Ok(());
        };
        exec.io.push_input(input);
        self.poll(id)
    }

    /// Runs node `id`'s executor as far as it goes now, then takes what it did: I/O to
    /// schedule, its next timer, messages to route, log operations for the checkers.
    fn poll(&mut self, id: i32) -> Result<(), String> {
        let now = self.node_now(id);
        let node = &mut self.nodes[id as usize];
        let Some(exec) = node.exec.as_mut() else {
            return Ok(());
        };
        exec.io.now_ms.set(now);
        let ended = exec.poll();
        let io = exec.io.clone();
        let floor_of_op = io.applied.take();
        for applied in floor_of_op {
            if let LogOp::SnapshotComplete { id: sid } | LogOp::SnapshotAdopted { id: sid } =
                &applied.op
            {
                self.check_installed_snapshot(id, *sid)?;
            }
            match &applied.op {
                LogOp::SnapshotComplete { .. } => self.snapshot_downloads += 1,
                LogOp::SnapshotAdopted { .. } => self.adopted_snapshots += 1,
                LogOp::SnapshotAbandon { .. } => self.abandoned_downloads += 1,
                LogOp::Truncate(_) => self.truncations += 1,
                _ => {}
            }
            if self.trace {
                let op = match &applied.op {
                    LogOp::Append(b) => format!("Append({} bytes)", b.len()),
                    other => format!("{other:?}"),
                };
                eprintln!(
                    "{} ms: node {id} LOG {op} (delivered {})",
                    self.now, applied.floor
                );
            }
            let hwm = (applied.floor >= 0).then_some(applied.floor);
            self.checker
                .truncated(id, &applied.op, &applied.truncated, hwm);
        }
        let incarnation = self.nodes[id as usize].incarnation;
        for (io_id, kind) in io.started.take() {
            if self.trace {
                eprintln!("{} ms: node {id} IO {kind:?}", self.now);
            }
            let delay = 1 + self.rng.below(self.net.disk_delay_ms.max(1));
            self.schedule(
                self.now + delay,
                Event::IoDone {
                    node: id,
                    incarnation,
                    io: io_id,
                    kind,
                },
            );
        }
        for message in io.outbox.take().into_iter().chain(io.take_answers()) {
            self.send(id, message)?;
        }
        let lag = self
            .fetch_lag_of
            .get(&id)
            .copied()
            .unwrap_or(self.fetch_lag_ms.unwrap_or(0));
        for publication in io.publications.take() {
            // In order, each up to `lag` after it was made.
            let at = (self.now + self.rng.below(lag + 1)).max(self.publication_due[id as usize]);
            self.publication_due[id as usize] = at;
            let event = Event::Publish {
                node: id,
                incarnation,
                publication: Box::new(publication),
            };
            self.schedule(at, event);
        }
        if let Some(wanted) = io.timer.take() {
            let at = wanted
                .saturating_sub(self.nodes[id as usize].clock_offset_ms)
                .max(self.now + 1);
            let node = &mut self.nodes[id as usize];
            if node.timer_at.is_none_or(|t| t <= self.now || t > at) {
                node.timer_at = Some(at);
                self.schedule(
                    at,
                    Event::Timer {
                        node: id,
                        incarnation,
                    },
                );
            }
        }
        match ended {
            None => Ok(()),
            Some(Ok(())) => {
                // A graceful stop: the node closes its log (flushed) and is down.
                let node = &mut self.nodes[id as usize];
                node.exec = None;
                node.timer_at = None;
                node.incarnation += 1;
                let mut disk = node.disk.borrow_mut();
                let all = disk.log.batches.len();
                disk.log.flush(all);
                Ok(())
            }
            Some(Err(fatal)) => Err(format!("node {id} stopped: {fatal}")),
        }
    }

    /// A disk operation of node `id` completes: it is durable now.
    fn io_done(&mut self, id: i32, io: u64, kind: IoKind) -> Result<(), String> {
        let node = &self.nodes[id as usize];
        let Some(exec) = node.exec.as_ref() else {
            return Ok(());
        };
        let exec_io = exec.io.clone();
        match kind {
            IoKind::Election(state) => {
                node.disk.borrow_mut().election = Some(state.clone());
                self.checker.election_persisted(id, &state)?;
                exec_io.complete(io, 0, false);
            }
            IoKind::Flush { batches } => {
                let durable = {
                    let mut disk = node.disk.borrow_mut();
                    disk.log.flush(batches);
                    disk.log.durable_end()
                };
                exec_io.complete(io, durable, true);
            }
        }
        self.poll(id)
    }

    fn net_delay(&mut self) -> u64 {
        let span = self
            .net
            .delay_max_ms
            .saturating_sub(self.net.delay_min_ms)
            .max(1);
        self.net.delay_min_ms + self.rng.below(span)
    }

    /// Where a request from `from` to destination `to` goes: static clusters route by id,
    /// dynamic ones dial the address the sender's core names.
    fn route(&self, from: i32, to: i32, address: Option<Endpoint>) -> Route {
        if !self.dynamic {
            return Route::To(to, None);
        }
        let Some(address) = address else {
            return Route::Refused;
        };
        if self.unroutable.contains(&(from, address.host.clone())) {
            return Route::Nowhere;
        }
        let (name, port) = match address.host.strip_prefix("bootstrap") {
            Some(name) => (name, None),
            None => match address.host.strip_prefix("node") {
                Some(name) => (name, Some(address.port)),
                None => return Route::Refused,
            },
        };
        match name.parse::<i32>() {
            Ok(node) if (0..self.nodes.len() as i32).contains(&node) => Route::To(node, port),
            _ => Route::Refused,
        }
    }

    /// The sender hears, after a network delay, that its connection was refused.
    fn refuse(&mut self, to: i32, id: u64, incarnation: u64) {
        let at = self.now + self.net_delay();
        let failure = Wire::Failure { id, incarnation };
        self.schedule(at, Event::Deliver { to, msg: failure });
    }

    fn send(&mut self, from: i32, msg: Outgoing) -> Result<(), String> {
        let incarnation = self.nodes[from as usize].incarnation;
        let generation = self.nodes[from as usize].generation;
        let (to, wire) = match msg {
            Outgoing::Request {
                id,
                to,
                request: Request::Fetch(fetch),
                ..
            } if self.sessions => {
                let out = SessionOut::Fetch {
                    from,
                    to,
                    incarnation,
                    id,
                    fetch,
                };
                self.session_out.push(out);
                return Ok(());
            }
            Outgoing::Request {
                id,
                to,
                address,
                request,
            } => match self.route(from, to, address) {
                Route::To(node, port) => (
                    node,
                    Wire::Request {
                        from,
                        incarnation,
                        id,
                        request,
                        port,
                        generation,
                    },
                ),
                Route::Refused => {
                    self.refuse(from, id, incarnation);
                    return Ok(());
                }
                Route::Nowhere => return Ok(()),
            },
            Outgoing::Response {
                token,
                response,
                data,
            } => {
                let Some((to, _, _, request)) = self.tokens.get(&token).cloned() else {
                    return Ok(());
                };
                if to == SESSION {
                    // Encoded with the session's other answers by the session layer.
                    self.tokens.remove(&token);
                    self.checker.response_sent(from, &request, &response)?;
                    let out = SessionOut::Answer {
                        token,
                        response,
                        data,
                    };
                    self.session_out.push(out);
                    return Ok(());
                }
                let response = over_the_wire(&request, response, data)
                    .map_err(|e| format!("node {from}'s answer to {request:?}: {e}"))?;
                let response = self.maybe_corrupt(response);
                self.checker.response_sent(from, &request, &response)?;
                if to == OPERATOR {
                    if self.trace {
                        eprintln!("{} ms: OPERATOR answer from {from}: {response:?}", self.now);
                    }
                    self.operator_answers.insert(token, response);
                    return Ok(());
                }
                (to, Wire::Response { token, response })
            }
        };
        if self.blocked.contains(&(from, to)) || self.rng.below(1000) < self.net.drop_per_mille {
            return Ok(());
        }
        let copies = if self.rng.below(1000) < self.net.duplicate_per_mille {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let at = self.now + self.net_delay();
            self.schedule(
                at,
                Event::Deliver {
                    to,
                    msg: wire.clone(),
                },
            );
        }
        Ok(())
    }

    /// NoCorruptSnapshotInstalled: a download replaces the log only when it is whole.
    fn check_installed_snapshot(&self, node: i32, id: OffsetAndEpoch) -> Result<(), String> {
        let disk = self.nodes[node as usize].disk.borrow();
        let Some(data) = disk.log.snapshots.get(&id) else {
            return Err(format!(
                "node {node} completed snapshot {id:?} without its bytes"
            ));
        };
        ringraft::records::snapshot::check_snapshot(data, id.epoch).map_err(|e| {
            format!("NoCorruptSnapshotInstalled: node {node} installed snapshot {id:?}, {e}")
        })?;
        Ok(())
    }

    /// With `corrupt_per_mille`, flips one byte of a snapshot chunk.
    fn maybe_corrupt(&mut self, response: Response) -> Response {
        let Response::FetchSnapshot(mut r) = response else {
            return response;
        };
        if let SnapshotBytes::Bytes(bytes) = &r.bytes {
            if !bytes.is_empty() && self.rng.below(1000) < self.net.corrupt_per_mille {
                let mut bad = bytes.to_vec();
                let at = self.rng.below(bad.len() as u64) as usize;
                bad[at] ^= 1 << self.rng.below(8);
                r.bytes = SnapshotBytes::Bytes(Bytes::from(bad));
                self.corrupted_chunks += 1;
            }
        }
        Response::FetchSnapshot(r)
    }

    fn deliver(&mut self, to: i32, msg: Wire) -> Result<(), String> {
        if self.trace {
            eprintln!("{} ms: to {to}: {msg:?}", self.now);
        }
        match msg {
            Wire::Request {
                from,
                incarnation,
                id,
                request,
                port,
                generation,
            } => {
                if self.nodes[from as usize].generation != generation {
                    return Ok(());
                }
                let node = &self.nodes[to as usize];
                if node.exec.is_none() || port.is_some_and(|p| p != node.port) {
                    // Connection refused: the sender hears of it.
                    self.refuse(from, id, incarnation);
                    return Ok(());
                }
                let token = self.next_token;
                self.next_token += 1;
                self.tokens
                    .insert(token, (from, incarnation, id, request.clone()));
                if request == Request::ApiVersions {
                    // The runtime answers ApiVersions; kraft.version 0..1 is supported.
                    let probe = ApiVersionsProbe {
                        error: ErrorCode::NONE,
                        kraft_version: Some((0, 1)),
                    };
                    let response = Response::ApiVersions(probe);
                    let answer = Outgoing::Response {
                        token,
                        response,
                        data: Vec::new(),
                    };
                    return self.send(to, answer);
                }
                if let Request::Fetch(fetch) = &request {
                    let node = &self.nodes[to as usize];
                    if node.exec.as_ref().is_some_and(|e| e.fetch.is_some()) {
                        let (fetch, incarnation) = (fetch.clone(), node.incarnation);
                        return self.fetch_shard(to, incarnation, |shard, disk, now| {
                            shard.fetch(token, fetch, disk, now)
                        });
                    }
                }
                self.request(to, token, request)
            }
            Wire::Response { token, response } => {
                let Some((requester, incarnation, id, _)) = self.tokens.get(&token).cloned() else {
                    return Ok(());
                };
                if requester != to || self.nodes[to as usize].incarnation != incarnation {
                    return Ok(());
                }
                let result = Ok(response);
                self.input(to, ExecutorInput::Peer { id, result })
            }
            Wire::Failure { id, incarnation } => {
                if self.nodes[to as usize].incarnation != incarnation {
                    return Ok(());
                }
                let result = Err(ringraft::raft::Failure::Disconnected);
                self.input(to, ExecutorInput::Peer { id, result })
            }
        }
    }

    /// Hands `request` to node `to` as the operator (no network); the answer lands in
    /// `operator_answers` under the returned token.
    pub fn operator_request(&mut self, to: i32, request: Request) -> Result<u64, String> {
        if self.trace {
            eprintln!("{} ms: OPERATOR to {to}: {request:?}", self.now);
        }
        let token = self.next_token;
        self.next_token += 1;
        self.tokens.insert(token, (OPERATOR, 0, 0, request.clone()));
        self.operator_requests.insert(token, (to, request.clone()));
        self.request(to, token, request)?;
        Ok(token)
    }

    pub fn leader(&self) -> Option<(i32, i32)> {
        self.nodes
            .iter()
            .filter_map(|n| {
                n.raft()
                    .filter(|r| r.is_leader())
                    .map(|r| (n.id, r.epoch()))
            })
            .max_by_key(|(_, epoch)| *epoch)
    }

    pub fn max_high_watermark(&self) -> i64 {
        self.nodes
            .iter()
            .filter_map(|n| n.raft().and_then(|r| r.high_watermark()))
            .max()
            .unwrap_or(0)
    }

    pub fn running(&self) -> impl Iterator<Item = &Node> {
        self.nodes.iter().filter(|n| n.exec.is_some())
    }
}
