//! The `Raft` struct: its configuration, inputs, the `Ready` of effects, the epoch states and
//! the transitions between them, timers, and the per-destination request manager. The RPC
//! handlers live beside it (`election.rs`, `replication.rs`); they change state only through
//! the `become_*` functions here, so every durable transition passes one place.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;

use super::log_view::{LogInfo, LogView};
use super::message::{Outbound, Request, RequestId, Response, Token};
use super::types::Endpoint;
use super::types::{ElectionState, LeaderAndEpoch, OffsetAndEpoch, Prng, ReplicaKey, Time};
use crate::constants::{COMPLAINT_INTERVAL_MS, EPOCH_MAX, EPOCH_STEP_MAX};
use crate::membership::{VoterHistory, VoterSet};
use crate::records::control::{ControlRecord, LeaderChangeMessage};

/// Kafka's hard-coded long-poll wait for raft fetches (docs/raft.md §4).
pub const FETCH_MAX_WAIT_MS: i32 = 500;
/// The longest a leader parks a Fetch, whatever its MaxWaitMs asks: Kafka's followers ask
/// `FETCH_MAX_WAIT_MS`; a ringraft group's ask two fifths of the fetch timeout
/// (`RaftConfig::fetch_max_wait_ms`); a request asking hours is cut to this.
pub const FETCH_PARK_MAX_MS: i32 = 5_000;
/// Kafka's maximum batch and fetch size for the metadata log (docs/raft.md §4).
pub const FETCH_MAX_BYTES: i32 = 8 * 1024 * 1024;

/// Timers and identity (docs/raft.md §4). Defaults are Kafka's.
#[derive(Debug, Clone)]
pub struct RaftConfig {
    pub local: ReplicaKey,
    pub cluster_id: String,
    pub election_timeout_ms: u64,
    pub fetch_timeout_ms: u64,
    pub election_backoff_max_ms: u64,
    pub request_timeout_ms: u64,
    pub retry_backoff_ms: u64,
    pub fetch_max_bytes: i32,
    /// The MaxWaitMs of this replica's Fetches: Kafka's 500 ms for group 0. A group's
    /// followers ask two fifths of the fetch timeout (`node::groups::group_fetch_max_wait_ms`):
    /// an idle group costs fewer long-poll round trips, and an answer still comes well within
    /// the fetch timeout and before the leader's BeginQuorumEpoch period.
    pub fetch_max_wait_ms: i32,
    /// The first of `controller.listener.names`: the listener voters are reached on.
    pub listener_name: Option<String>,
    /// This node's advertised controller listeners (what UpdateRaftVoter and the epoch-start
    /// Voters record announce). Empty: keep whatever the voter set says.
    pub local_endpoints: Vec<Endpoint>,
    /// `controller.quorum.bootstrap.servers`: where a replica outside the voter set looks for
    /// the leader. Destination ids −2, −3, … name them.
    pub bootstrap: Vec<Endpoint>,
    /// `controller.quorum.auto.join.enable` (docs/membership.md §8).
    pub auto_join: bool,
    /// `ringraft.leadership=witness`: vote and replicate, but leave leading to the other
    /// voters (`witness`).
    pub witness: bool,
    /// The voters come from `controller.quorum.voters` (a static quorum): until kraft.version
    /// 1, no replica outside them can lead.
    pub static_voters: bool,
    /// Seeds the core's PRNG (election jitter).
    pub seed: u64,
    /// Deliberate bugs, for proving the simulator's checkers can fail. Only in test builds
    /// (the `mutations` feature): a production build has no switch to read.
    #[cfg(feature = "mutations")]
    #[doc(hidden)]
    pub mutations: Mutations,
}

impl RaftConfig {
    pub fn new(local: ReplicaKey, cluster_id: String, seed: u64) -> Self {
        RaftConfig {
            local,
            cluster_id,
            election_timeout_ms: 1000,
            fetch_timeout_ms: 2000,
            election_backoff_max_ms: 1000,
            request_timeout_ms: 2000,
            retry_backoff_ms: 20,
            fetch_max_bytes: FETCH_MAX_BYTES,
            fetch_max_wait_ms: FETCH_MAX_WAIT_MS,
            listener_name: None,
            local_endpoints: Vec::new(),
            bootstrap: Vec::new(),
            auto_join: false,
            witness: false,
            static_voters: false,
            seed,
            #[cfg(feature = "mutations")]
            mutations: Mutations::default(),
        }
    }

    /// Whether the mutation `pick` chooses is on (tests only: the `mutations` feature).
    #[cfg(feature = "mutations")]
    #[inline(always)]
    pub fn mutated(&self, pick: impl Fn(&Mutations) -> bool) -> bool {
        pick(&self.mutations)
    }

    /// A constant `false` without the `mutations` feature: no switch is read in production.
    #[cfg(not(feature = "mutations"))]
    #[inline(always)]
    pub fn mutated(&self, _pick: impl Fn(&Mutations) -> bool) -> bool {
        false
    }
}

/// Broken behaviours the simulator must catch (issue: "prove the checkers can fail").
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mutations {
    /// Grant standard votes without making them durable.
    pub vote_not_persisted: bool,
    /// Count the leader's own log end offset twice in the high-watermark sort.
    pub leader_counted_twice: bool,
    /// Take the high watermark from the single most advanced voter.
    pub high_watermark_from_minority: bool,
    /// KAFKA-16530: accept a lower computed high watermark after a voter change.
    pub high_watermark_may_decrease: bool,
    /// KAFKA-16531: a leader outside its voter set still counts itself for check-quorum.
    pub removed_leader_counts_itself: bool,
    /// The single-server change bug: start a voter change before the high watermark is known
    /// (before the leader's epoch is committed and earlier leaders are fenced).
    pub voter_change_before_high_watermark: bool,
    /// Install downloaded snapshots without checking them (the corrupt-snapshot bug).
    pub snapshot_unchecked: bool,
    /// For the runtime's executor (`node::executor`): send every message before the election
    /// state and the log it depends on are durable.
    pub send_before_persist: bool,
    /// For the executor's reply path (`node::executor`, `node::route`): a Fetch answer reports
    /// the log end, appended but not yet known to be on a majority, as the high watermark.
    pub reply_unpersisted_high_watermark: bool,
    /// For the simulator's fetch shards (`crate::fetch`): answer from a stale publication
    /// without checking the log's generation, across a truncation.
    pub stale_fetch_view: bool,
    /// A witness that never campaigns, even when no other voter can win (`witness`).
    pub witness_never_campaigns: bool,
    /// A witness leader that never hands over.
    pub witness_never_hands_over: bool,
}

/// What can be fed into `step`.
#[derive(Debug, Clone)]
pub enum Input {
    /// Nothing arrived; timers may have expired.
    Tick,
    Request {
        token: Token,
        request: Request,
    },
    Response {
        id: RequestId,
        response: Response,
    },
    Failure {
        id: RequestId,
        failure: super::message::Failure,
    },
    /// Graceful shutdown: a leader resigns and tells the voters (docs/raft.md §14).
    Shutdown,
    /// The state machine gives up leadership of `epoch` (`resign(epoch)`).
    Resign {
        epoch: i32,
    },
    /// The runtime wrote snapshot `id` (`size` bytes) at an id `snapshot_id_for` gave.
    SnapshotCreated {
        id: OffsetAndEpoch,
        size: u64,
    },
    /// Drop the log below snapshot offset `offset` (docs/raft.md §11.5).
    DeleteBefore {
        offset: i64,
    },
    /// A fetch shard answered a valid Fetch (`serve::Progress`).
    FetchProgress(super::serve::Progress),
    /// A snapshot shard served a FetchSnapshot chunk to `replica` in `leader_epoch`.
    SnapshotServed {
        replica: ReplicaKey,
        leader_epoch: i32,
    },
}

/// A change to the local log, executed by the runtime in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogOp {
    /// Drop everything from `offset` on.
    Truncate(i64),
    /// Whole batches, checked once where they entered (`ValidBatches`), whose offsets and
    /// epochs are final; they start at the log end.
    Append(crate::records::ValidBatches),
    /// Part of a snapshot download: `bytes` at `position` of snapshot `id`'s `.part` file.
    SnapshotChunk {
        id: OffsetAndEpoch,
        position: u64,
        bytes: Bytes,
    },
    /// The download of `id` is complete and checked: fsync, rename, and replace the log with
    /// it (empty, starting at `id.offset`).
    SnapshotComplete { id: OffsetAndEpoch },
    /// The download of `id` failed its check: delete the partial file, never install it.
    SnapshotAbandon { id: OffsetAndEpoch },
    /// The download of `id` is complete and checked, and adopted beside the log (`adopt`):
    /// fsync and rename it; the log stays as it is.
    SnapshotAdopted { id: OffsetAndEpoch },
    /// Delete log segments wholly below `offset` and snapshots older than the one there.
    DeleteBefore(i64),
}

/// Everything the runtime must do after a step, in this order:
/// 1. persist `election_state` (write, fsync, rename) if present;
/// 2. execute `log_ops` in order;
/// 3. send `early_messages` (leader Fetch responses: their records need not be durable);
/// 4. make the log durable (`must_sync`);
/// 5. only then send `messages`;
/// 6. call `Raft::persisted(id)`;
/// 7. deliver committed batches below `high_watermark`, `load_snapshot` and `leader_change`.
///
/// Sending a vote or a Fetch (whose offset the leader counts) before steps 1–4 are durable
/// breaks Raft safety.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ready {
    pub id: u64,
    pub election_state: Option<ElectionState>,
    pub log_ops: Vec<LogOp>,
    pub must_sync: bool,
    pub early_messages: Vec<Outbound>,
    pub messages: Vec<Outbound>,
    pub high_watermark: Option<i64>,
    pub leader_change: Option<LeaderAndEpoch>,
    pub load_snapshot: Option<OffsetAndEpoch>,
}

/// Why a leader append was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AppendError {
    #[error("not the leader (epoch {epoch}, leader {leader:?})")]
    NotLeader { epoch: i32, leader: Option<i32> },
    #[error("invalid batch: {0}")]
    InvalidBatch(String),
}

/// Why a snapshot cannot be written at an offset (docs/raft.md §11.3).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotIdError {
    #[error("offset {offset} is above the high watermark {high_watermark}")]
    AboveHighWatermark { offset: i64, high_watermark: i64 },
    #[error("offset {offset} is not past the log start {log_start}")]
    NotPastLogStart { offset: i64, log_start: i64 },
    #[error("no epoch covers offset {0}")]
    NoEpoch(i64),
    #[error("snapshot {}-{} exists", .0.offset, .0.epoch)]
    Exists(OffsetAndEpoch),
}

/// One state per epoch (docs/raft.md §3). The epoch itself lives in `Raft::epoch`.
#[derive(Debug)]
pub(super) enum Role {
    Unattached(Unattached),
    Prospective(Election),
    Candidate(Election),
    Leader(Box<LeaderState>),
    Follower(FollowerState),
    Resigned(ResignedState),
}

#[derive(Debug)]
pub(super) struct Unattached {
    pub leader_id: Option<i32>,
    pub voted: Option<ReplicaKey>,
    pub election_deadline: u64,
}

/// Prospective (pre-vote) and Candidate (standard vote) share this shape.
#[derive(Debug)]
pub(super) struct Election {
    /// Prospective only: the last leader known in this epoch and the vote granted in it.
    pub leader_id: Option<i32>,
    pub voted: Option<ReplicaKey>,
    pub granted: BTreeSet<i32>,
    pub rejected: BTreeSet<i32>,
    /// Prospective only: voters that refused a pre-vote and will be asked again.
    pub refusals: BTreeSet<i32>,
    /// Prospective only: this replica granted a pre-vote to a voter with a lower id while
    /// campaigning itself, so the two may both win theirs (docs/raft.md §5.5).
    pub rival_below: bool,
    /// Prospective only: a won pre-vote, held back for the lower rival until then.
    pub candidacy_at: Option<u64>,
    pub election_deadline: u64,
}

#[derive(Debug)]
pub(super) struct FollowerState {
    pub leader_id: i32,
    pub voted: Option<ReplicaKey>,
    pub fetch_deadline: u64,
    /// A successful Fetch from this leader in this epoch (pre-votes are refused after it).
    pub has_fetched: bool,
    /// The leader sent EndQuorumEpoch: it is leaving, so its later Fetch answers (already on
    /// the wire, or from a fetch path that has not yet learned it resigned) no longer push the
    /// election back or make us refuse pre-votes.
    pub leader_resigned: bool,
    pub download: Option<Download>,
    /// When this follower next considers UpdateRaftVoter or auto-join (docs/membership.md §6, §8).
    /// Like Kafka 4.1+, one fetch timeout after the follower state begins, and one fetch
    /// timeout after each look.
    pub membership_due: u64,
}

#[derive(Debug, Clone)]
pub(super) struct Download {
    pub id: OffsetAndEpoch,
    pub written: u64,
    /// Every chunk is checked as it arrives (CRCs, offsets, header, footer): a corrupt
    /// snapshot is abandoned, never installed.
    pub check: crate::records::snapshot::SnapshotCheck,
}

#[derive(Debug, Default, Clone)]
pub(super) struct ReplicaProgress {
    pub directory_id: Option<uuid::Uuid>,
    pub end_offset: Option<i64>,
    pub last_fetch_ms: Option<u64>,
    pub last_caught_up_ms: Option<u64>,
    /// The leader's log end when this replica last fetched (for `last_caught_up_ms`).
    pub leader_end_at_last_fetch: Option<i64>,
    /// What its fetches say for the read fences (`fence`).
    pub fence: super::fence::FenceAck,
}

/// One replica as the leader sees it (DescribeQuorum, docs/raft.md §12). Times are the core's
/// milliseconds (the `now_ms` it is stepped with).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaDescription {
    pub key: ReplicaKey,
    /// −1 while unknown.
    pub log_end_offset: i64,
    pub last_fetch_ms: Option<u64>,
    pub last_caught_up_ms: Option<u64>,
}

/// The quorum as its leader describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumDescription {
    pub leader_id: i32,
    pub epoch: i32,
    /// −1 while unknown.
    pub high_watermark: i64,
    pub voters: Vec<ReplicaDescription>,
    pub observers: Vec<ReplicaDescription>,
}

/// Observers that have not fetched for this long are forgotten (Kafka's 5 minutes).
pub const OBSERVER_SESSION_MS: u64 = 300_000;

#[derive(Debug)]
pub(super) struct Parked {
    pub token: Token,
    pub request: super::message::FetchRequest,
    pub deadline: u64,
    /// The high watermark when it was parked: a higher one wakes it (KAFKA-13959).
    pub high_watermark: Option<i64>,
    /// The read-fence round when it was parked: a voter's is woken by a new one (`fence`).
    pub read_round: u64,
    /// When it was parked (`liveness` puts off its expiry only so long).
    pub parked_at: u64,
}

#[derive(Debug)]
pub(super) struct LeaderState {
    pub epoch_start_offset: i64,
    pub high_watermark: Option<i64>,
    pub replicas: BTreeMap<i32, ReplicaProgress>,
    pub check_quorum_deadline: u64,
    pub fetched_voters: BTreeSet<i32>,
    pub begin_deadline: u64,
    pub begin_acked: BTreeSet<i32>,
    pub parked: Vec<Parked>,
    /// The voter change in progress (one at a time, docs/membership.md §4–§5).
    pub pending: Option<super::membership::PendingChange>,
}

#[derive(Debug)]
pub(super) struct ResignedState {
    pub election_deadline: u64,
    pub preferred: Vec<ReplicaKey>,
    pub unacked: BTreeSet<i32>,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct InFlight {
    pub id: RequestId,
    pub deadline: u64,
    pub epoch: i32,
    /// The log as it was when the request was sent (log end, last fetched epoch): a Fetch
    /// answer speaks of that log, and is stale once it changed.
    pub log: OffsetAndEpoch,
    /// A long-polling Fetch: a session may vouch for it past its deadline (`liveness`).
    pub long_poll: bool,
}

/// The Raft core for one replica. See `mod.rs` for the transition table and the contract.
#[derive(Debug)]
pub struct Raft {
    pub(super) config: RaftConfig,
    pub(super) membership: VoterHistory,
    /// The last leader a message named with its endpoints (BeginQuorumEpoch's LeaderEndpoints,
    /// a response's NodeEndpoints): (leader, epoch, endpoints). In its epoch it is where the
    /// leader listens, even if the voter set still has an older listener (docs/raft.md §6.3 step 3).
    pub(super) learned_leader: Option<(i32, i32, Vec<Endpoint>)>,
    /// Next bootstrap server an observer without a leader asks.
    pub(super) next_bootstrap: usize,
    /// The epoch in which this voter's UpdateRaftVoter was accepted (or refused for good).
    pub(super) updated_in_epoch: Option<i32>,
    pub(super) epoch: i32,
    pub(super) role: Role,
    pub(super) log: LogView,
    /// The committed bound this replica knows (followers: from the leader; never decreases).
    pub(super) high_watermark: Option<i64>,
    pub(super) rng: Prng,
    pub(super) now_ms: u64,
    /// Wall-clock Unix milliseconds of the latest step: the CreateTime of records written.
    pub(super) unix_ms: i64,
    /// When each kind of refused peer claim was last logged (`refuse_claim`).
    pub(super) complaints: BTreeMap<&'static str, u64>,
    /// Peer claims refused since start: contradictions and out-of-range values.
    pub(super) refused_claims: u64,
    pub(super) next_request_id: RequestId,
    pub(super) inflight: BTreeMap<i32, InFlight>,
    pub(super) backoff_until: BTreeMap<i32, u64>,
    pub(super) shutting_down: bool,
    // Effects not yet handed out.
    pub(super) pending_election: Option<ElectionState>,
    pub(super) log_ops: Vec<LogOp>,
    pub(super) early: Vec<Outbound>,
    pub(super) outbox: Vec<Outbound>,
    pub(super) leader_change: Option<LeaderAndEpoch>,
    pub(super) load_snapshot: Option<OffsetAndEpoch>,
    pub(super) reported_high_watermark: i64,
    pub(super) next_ready_id: u64,
    pub(super) unpersisted: VecDeque<(u64, i64)>,
    pub(super) last_leader: LeaderAndEpoch,
    pub(super) fences: super::fence::Fences,
    pub(super) witness: super::witness::WitnessState,
    /// A leadership transfer in progress, and the outcomes not yet taken (`transfer`).
    pub(super) transfer: Option<super::transfer::Transfer>,
    pub(super) transfer_outcomes: Vec<(u64, super::transfer::TransferOutcome)>,
    /// Taking the leader's snapshots when this node writes none (`adopt`).
    pub(super) adoption: super::adopt::Adoption,
    /// The shard's bound on campaigns at once (`campaigns`), and this replica's place in it
    /// while Prospective or Candidate.
    pub(super) campaign_gate: Option<super::campaigns::CampaignGate>,
    pub(super) campaign_lease: Option<super::campaigns::CampaignLease>,
    /// The Fetch sessions this core may rest on (`liveness`), and when the leader we follow
    /// last answered our Fetch itself (a rest on the session ends a while after).
    pub(super) liveness: Option<super::liveness::SessionLiveness>,
    pub(super) leader_answered_ms: u64,
}

impl Raft {
    /// A core over a recovered log and the election state read from `quorum-state` (`None`
    /// when the file does not exist). Startup follows docs/raft.md §3's table.
    pub fn new(
        config: RaftConfig,
        membership: impl Into<VoterHistory>,
        stored: Option<ElectionState>,
        log: &LogInfo,
        now: Time,
    ) -> Raft {
        let log = LogView::new(log);
        let rng = Prng::new(config.seed);
        let mut raft = Raft {
            config,
            membership: membership.into(),
            learned_leader: None,
            next_bootstrap: 0,
            updated_in_epoch: None,
            epoch: 0,
            role: Role::Unattached(Unattached {
                leader_id: None,
                voted: None,
                election_deadline: 0,
            }),
            log,
            high_watermark: None,
            rng,
            now_ms: now.mono_ms,
            unix_ms: now.unix_ms,
            complaints: BTreeMap::new(),
            refused_claims: 0,
            next_request_id: 1,
            inflight: BTreeMap::new(),
            backoff_until: BTreeMap::new(),
            shutting_down: false,
            pending_election: None,
            log_ops: Vec::new(),
            early: Vec::new(),
            outbox: Vec::new(),
            leader_change: None,
            load_snapshot: None,
            reported_high_watermark: -1,
            next_ready_id: 1,
            unpersisted: VecDeque::new(),
            last_leader: LeaderAndEpoch {
                leader_id: None,
                epoch: 0,
            },
            fences: Default::default(),
            witness: super::witness::WitnessState {
                leader_heard_ms: now.mono_ms,
                ..Default::default()
            },
            transfer: None,
            transfer_outcomes: Vec::new(),
            adoption: Default::default(),
            campaign_gate: None,
            campaign_lease: None,
            liveness: None,
            leader_answered_ms: now.mono_ms,
        };
        raft.initialize(stored.unwrap_or(ElectionState::unattached(0)));
        raft
    }

    fn initialize(&mut self, stored: ElectionState) {
        let now = self.now_ms;
        let local = self.config.local;
        let log_epoch = self.log.last_fetched_epoch();
        self.epoch = stored.epoch;
        let deadline = self.random_election_deadline(now);
        if stored.epoch < log_epoch {
            self.epoch = log_epoch;
            self.set_role(Role::Unattached(Unattached {
                leader_id: None,
                voted: None,
                election_deadline: deadline,
            }));
            self.persist_election_state();
        } else if stored.leader_id == Some(local.id) {
            // Never lead or vote again in the epoch we led: our unflushed suffix may be gone.
            let preferred = self.preferred_successors();
            let unacked = preferred.iter().map(|k| k.id).collect();
            self.set_role(Role::Resigned(ResignedState {
                election_deadline: deadline,
                preferred,
                unacked,
            }));
        } else if stored.voted_key.is_some_and(|k| k.matches(&local)) && self.may_campaign() {
            self.set_role(Role::Candidate(Election {
                leader_id: None,
                voted: Some(local),
                granted: self.own_vote(),
                rejected: BTreeSet::new(),
                refusals: BTreeSet::new(),
                rival_below: false,
                candidacy_at: None,
                election_deadline: deadline,
            }));
        } else if let Some(leader) = stored.leader_id.filter(|l| self.can_follow(*l)) {
            let fetch_deadline = self.random_fetch_deadline(now);
            self.set_role(Role::Follower(FollowerState {
                leader_id: leader,
                voted: stored.voted_key,
                fetch_deadline,
                has_fetched: false,
                leader_resigned: false,
                download: None,
                membership_due: now + self.config.fetch_timeout_ms,
            }));
        } else {
            self.set_role(Role::Unattached(Unattached {
                leader_id: stored.leader_id,
                voted: stored.voted_key,
                election_deadline: deadline,
            }));
        }
        if self.voters().is_only_voter(&local) && !matches!(self.role, Role::Leader(_)) {
            self.become_candidate();
        }
        self.poll();
    }

    // ---- Public surface -------------------------------------------------------------------

    /// Moves the core's clock to `now` without running its timers: for the calls that do not
    /// take the time (`append`, `persisted`, `transfer_leadership`, `read_fence`, …), whose
    /// deadlines are counted from the core's last known time. A runtime that wakes a core
    /// rarely calls this first, or those deadlines start in the past.
    pub fn advance_clock(&mut self, now: Time) {
        self.now_ms = self.now_ms.max(now.mono_ms);
        self.unix_ms = now.unix_ms;
    }

    /// Feeds one input at time `now` (a monotonic clock that goes backwards is treated as
    /// standing still). Nothing a peer sends can make this fail: claims that contradict what
    /// this replica knows are refused and logged (`refuse_claim`).
    pub fn step(&mut self, now: Time, input: Input) {
        self.now_ms = self.now_ms.max(now.mono_ms);
        self.unix_ms = now.unix_ms;
        match input {
            Input::Tick => {}
            Input::Request { token, request } => self.handle_request(token, request),
            Input::Response { id, response } => self.handle_response(id, response),
            Input::Failure { id, failure } => self.handle_failure(id, failure),
            Input::Shutdown => self.begin_shutdown(),
            Input::Resign { epoch } => {
                if epoch == self.epoch && matches!(self.role, Role::Leader(_)) {
                    self.become_resigned();
                }
            }
            Input::SnapshotCreated { id, size } => self.log.snapshot_added(id, size),
            Input::DeleteBefore { offset } => self.delete_before(offset),
            Input::FetchProgress(progress) => self.handle_fetch_progress(progress),
            Input::SnapshotServed {
                replica,
                leader_epoch,
            } => self.handle_snapshot_served(replica, leader_epoch),
        }
        self.poll();
    }

    /// The effects accumulated since the last call, or `None` when there are none.
    pub fn ready(&mut self) -> Option<Ready> {
        if self.pending_election.is_some() {
            // A new election state must be durable before anything is sent.
            let early = std::mem::take(&mut self.early);
            self.outbox.splice(0..0, early);
        }
        let hwm = self
            .high_watermark
            .filter(|h| *h > self.reported_high_watermark);
        let nothing = self.pending_election.is_none()
            && self.log_ops.is_empty()
            && self.early.is_empty()
            && self.outbox.is_empty()
            && hwm.is_none()
            && self.leader_change.is_none()
            && self.load_snapshot.is_none();
        if nothing {
            return None;
        }
        let id = self.next_ready_id;
        self.next_ready_id += 1;
        if let Some(h) = hwm {
            self.reported_high_watermark = h;
        }
        let must_sync = !self.log_ops.is_empty();
        if must_sync {
            self.unpersisted.push_back((id, self.log.end_offset()));
        }
        Some(Ready {
            id,
            election_state: self.pending_election.take(),
            log_ops: std::mem::take(&mut self.log_ops),
            must_sync,
            early_messages: std::mem::take(&mut self.early),
            messages: std::mem::take(&mut self.outbox),
            high_watermark: hwm,
            leader_change: self.leader_change.take(),
            load_snapshot: self.load_snapshot.take(),
        })
    }

    /// The runtime made `Ready` `id` durable (its log operations are fsynced).
    pub fn persisted(&mut self, id: u64) {
        while let Some(&(ready, end)) = self.unpersisted.front() {
            if ready > id {
                break;
            }
            self.unpersisted.pop_front();
            self.log.flushed_to(end);
        }
        if matches!(self.role, Role::Leader(_)) {
            self.update_leader_high_watermark();
            self.poll();
        }
    }

    /// When the core next needs a `Tick`, in the caller's milliseconds.
    pub fn deadline_ms(&self) -> u64 {
        let mut next = match &self.role {
            Role::Unattached(s) => s.election_deadline,
            Role::Prospective(s) | Role::Candidate(s) => s
                .candidacy_at
                .map_or(s.election_deadline, |c| c.min(s.election_deadline)),
            Role::Follower(s) => s.fetch_deadline,
            Role::Resigned(s) => s.election_deadline,
            Role::Leader(s) => {
                let parked = s.parked.iter().map(|p| p.deadline).min();
                let change = s.pending.as_ref().map_or(u64::MAX, |p| p.deadline);
                let timers = s.check_quorum_deadline.min(s.begin_deadline).min(change);
                parked.map_or(timers, |p| p.min(timers))
            }
        };
        for f in self.inflight.values() {
            next = next.min(f.deadline);
        }
        if let Some(t) = &self.transfer {
            next = next.min(t.deadline_ms);
        }
        for until in self.backoff_until.values() {
            if *until > self.now_ms {
                next = next.min(*until);
            }
        }
        next.max(self.now_ms)
    }

    /// Appends `batches` (whole v2 batches, offsets to be assigned) as leader. Returns the
    /// first and last offsets; they are committed once `high_watermark` passes the last.
    /// A witness leads only to hand over (`witness`): it takes no writes, so that the voter
    /// catching up can reach its log end, and answers as if there were no leader yet.
    pub fn append(&mut self, batches: Vec<u8>) -> Result<(i64, i64), AppendError> {
        let paused = self.config.witness || self.transfer.is_some();
        if !matches!(self.role, Role::Leader(_)) || self.shutting_down || paused {
            let leader = self.leader_id().filter(|_| !paused);
            return Err(AppendError::NotLeader {
                epoch: self.epoch,
                leader,
            });
        }
        let first = self.log.end_offset();
        // Parsed and checked here, once: everything downstream trusts `ValidBatches`.
        let batches = crate::records::ValidBatches::assign(batches, first, self.epoch)
            .map_err(|e| AppendError::InvalidBatch(e.to_string()))?;
        if batches.batches().iter().any(|b| b.control) {
            // Control records change raft's own state; only raft writes them.
            return Err(AppendError::InvalidBatch("a control batch".into()));
        }
        let next = batches.next_offset();
        self.log.appended(first, next, self.epoch);
        self.log_ops.push(LogOp::Append(batches));
        self.complete_parked_fetches();
        Ok((first, next - 1))
    }

    /// The id of a snapshot ending at `offset` (exclusive), if one may be written there
    /// (docs/raft.md §11.3; the runtime checks that `offset` is a batch boundary).
    pub fn snapshot_id_for(&self, offset: i64) -> Result<OffsetAndEpoch, SnapshotIdError> {
        let high_watermark = self.high_watermark().unwrap_or(0);
        if offset > high_watermark {
            return Err(SnapshotIdError::AboveHighWatermark {
                offset,
                high_watermark,
            });
        }
        let log_start = self.log.start_offset();
        if offset <= log_start {
            return Err(SnapshotIdError::NotPastLogStart { offset, log_start });
        }
        let epoch = self
            .log
            .epoch_ending_at(offset)
            .ok_or(SnapshotIdError::NoEpoch(offset))?;
        let id = OffsetAndEpoch::new(offset, epoch);
        if self.log.snapshot_size(id).is_some() {
            return Err(SnapshotIdError::Exists(id));
        }
        Ok(id)
    }

    pub fn epoch(&self) -> i32 {
        self.epoch
    }

    /// The time of the last input (monotonic ms, as stepped).
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// Peer claims refused since start (contradictions and out-of-range values).
    pub fn refused_claims(&self) -> u64 {
        self.refused_claims
    }

    /// Counts a peer's claim this replica refused and logs it, at most once per
    /// `COMPLAINT_INTERVAL_MS` for each `kind`: a flood of forged frames must not flood the log.
    pub(super) fn refuse_claim(&mut self, kind: &'static str, detail: impl FnOnce() -> String) {
        self.refused_claims += 1;
        if self.complaint_due(kind) {
            tracing::error!(
                claim = kind,
                refused = self.refused_claims,
                "refused a peer's claim: {}",
                detail()
            );
        }
    }

    /// Logs why this replica cannot work with a peer (a cluster id or voter set that differs),
    /// rate-limited like `refuse_claim`: a node that sits isolated must say why.
    pub(super) fn complain_isolated(
        &mut self,
        kind: &'static str,
        detail: impl FnOnce() -> String,
    ) {
        if self.complaint_due(kind) {
            tracing::error!("isolated from a peer: {}", detail());
        }
    }

    /// Whether a complaint of `kind` may be logged now (once per `COMPLAINT_INTERVAL_MS`).
    pub(super) fn complaint_due(&mut self, kind: &'static str) -> bool {
        let now = self.now_ms;
        let due = self
            .complaints
            .get(kind)
            .is_none_or(|last| now >= last.saturating_add(COMPLAINT_INTERVAL_MS));
        if due {
            self.complaints.insert(kind, now);
        }
        due
    }

    /// Whether `epoch`, taken from a peer, is one this replica may adopt (`EPOCH_MAX`).
    pub(super) fn epoch_acceptable(&mut self, epoch: i32, what: &'static str) -> bool {
        if self.epoch_in_reach(epoch) {
            return true;
        }
        let own = self.epoch;
        self.refuse_claim(what, || {
            format!(
                "epoch {epoch} is above the highest epoch accepted ({EPOCH_STEP_MAX} above \
                 {EPOCH_MAX} or above our {own})"
            )
        });
        false
    }

    /// Whether the voter set can never change: `controller.quorum.voters` at kraft.version 0.
    pub(super) fn fixed_voter_set(&self) -> bool {
        self.config.static_voters && self.kraft_version() == 0
    }

    /// `epoch_acceptable` without the complaint: up to `EPOCH_STEP_MAX` above the bound or
    /// above our own epoch, whichever is higher. A replica left behind below the bound must
    /// still follow a quorum that has since elected just above it (the fuzzer left one at
    /// epoch 1 while the other two led at `EPOCH_MAX` + 3, refusing them for good).
    pub(super) fn epoch_in_reach(&self, epoch: i32) -> bool {
        epoch <= EPOCH_MAX.max(self.epoch).saturating_add(EPOCH_STEP_MAX)
    }

    /// DescribeQuorum's content (docs/raft.md §12); `None` unless this replica leads.
    pub fn describe_quorum(&self) -> Option<QuorumDescription> {
        let Role::Leader(s) = &self.role else {
            return None;
        };
        let now = self.now_ms;
        let local = self.config.local;
        let describe = |key: ReplicaKey, p: Option<&ReplicaProgress>| ReplicaDescription {
            key: ReplicaKey::new(key.id, p.and_then(|p| p.directory_id).or(key.directory_id)),
            log_end_offset: p.and_then(|p| p.end_offset).unwrap_or(-1),
            last_fetch_ms: p.and_then(|p| p.last_fetch_ms),
            last_caught_up_ms: p.and_then(|p| p.last_caught_up_ms),
        };
        let voters = self
            .voters()
            .voters()
            .iter()
            .map(|v| {
                if v.key.id == local.id {
                    ReplicaDescription {
                        key: local,
                        log_end_offset: self.log.end_offset(),
                        last_fetch_ms: Some(now),
                        last_caught_up_ms: Some(now),
                    }
                } else {
                    describe(v.key, s.replicas.get(&v.key.id))
                }
            })
            .collect();
        let observers = s
            .replicas
            .iter()
            .filter(|(id, _)| !self.voters().contains_id(**id))
            .filter(|(_, p)| {
                p.last_fetch_ms
                    .is_some_and(|t| t + OBSERVER_SESSION_MS >= now)
            })
            .map(|(id, p)| describe(ReplicaKey::new(*id, None), Some(p)))
            .collect();
        Some(QuorumDescription {
            leader_id: local.id,
            epoch: self.epoch,
            high_watermark: s.high_watermark.unwrap_or(-1),
            voters,
            observers,
        })
    }

    pub fn leader_id(&self) -> Option<i32> {
        match &self.role {
            Role::Leader(_) | Role::Resigned(_) => Some(self.config.local.id),
            Role::Follower(s) => Some(s.leader_id),
            Role::Unattached(s) => s.leader_id,
            Role::Prospective(s) => s.leader_id,
            Role::Candidate(_) => None,
        }
    }

    /// The committed bound: a leader's own once known, else what the leader told us.
    pub fn high_watermark(&self) -> Option<i64> {
        match &self.role {
            Role::Leader(s) => s.high_watermark,
            _ => self.high_watermark,
        }
    }

    pub fn is_leader(&self) -> bool {
        matches!(self.role, Role::Leader(_))
    }

    pub fn state_name(&self) -> &'static str {
        match &self.role {
            Role::Unattached(_) => "Unattached",
            Role::Prospective(_) => "Prospective",
            Role::Candidate(_) => "Candidate",
            Role::Leader(_) => "Leader",
            Role::Follower(_) => "Follower",
            Role::Resigned(_) => "Resigned",
        }
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log.start_offset()
    }

    pub fn log_end_offset(&self) -> i64 {
        self.log.end_offset()
    }

    pub fn flushed_offset(&self) -> i64 {
        self.log.flushed_offset()
    }

    pub fn config(&self) -> &RaftConfig {
        &self.config
    }

    pub fn local(&self) -> ReplicaKey {
        self.config.local
    }

    /// The active voter set (the latest entry, committed or not).
    /// The core's picture of its log (what the fetch shards answer from).
    pub fn log_view(&self) -> &LogView {
        &self.log
    }

    pub fn voters(&self) -> &VoterSet {
        self.membership.latest()
    }

    /// kraft.version as of the log end.
    pub fn kraft_version(&self) -> i16 {
        self.membership.kraft_version()
    }

    pub fn membership(&self) -> &VoterHistory {
        &self.membership
    }

    /// A graceful shutdown may finish: no resignation is still being announced.
    pub fn shutdown_complete(&self) -> bool {
        match &self.role {
            Role::Resigned(s) => s.unacked.is_empty(),
            Role::Leader(_) => !self.shutting_down,
            _ => true,
        }
    }

    // ---- Transitions (docs/raft.md §3) ---------------------------------------------------------

    /// Is this replica in the latest voter set?
    pub fn is_voter(&self) -> bool {
        self.voters().contains_key(&self.config.local)
    }

    /// The id this replica voted for in its epoch, if any (Kafka's current-vote).
    pub fn voted_id(&self) -> Option<i32> {
        self.voted_key().map(|k| k.id)
    }

    /// This replica leads, or follows a leader that answered one of its fetches since it
    /// began following (in this epoch). A follower whose leader went quiet turns Prospective
    /// and back, remembering the leader (KIP-996), without this holding again.
    pub fn in_contact_with_leader(&self) -> bool {
        match &self.role {
            Role::Leader(_) => !self.shutting_down,
            Role::Follower(s) => s.has_fetched && !s.leader_resigned,
            _ => false,
        }
    }

    /// A leader with a voter change appended and not yet committed.
    pub fn voter_change_pending(&self) -> bool {
        matches!(&self.role, Role::Leader(s) if s.pending.is_some())
    }

    /// Whether this replica may stand for election: a voter, or a replica whose own removal is
    /// the latest voter change and not known to be committed. Until that change commits, the
    /// old set still decides, and this replica may hold the only copy of it: with voters
    /// {A, B}, A (leading) removes itself, B lags, A loses leadership; B needs A's vote and A
    /// refuses B's shorter log, so only A can finish the change. It campaigns in the new set
    /// without counting itself (Raft dissertation §4.2.2), and resigns once the change
    /// commits (docs/membership.md §5 step 8). Observers and replicas whose removal committed
    /// never campaign (KAFKA-17067).
    pub(super) fn may_campaign(&self) -> bool {
        if self.is_voter() {
            return true;
        }
        let Some(offset) = self.membership.latest_offset().filter(|o| *o >= 0) else {
            return false;
        };
        let committed = self.high_watermark.is_some_and(|h| h > offset);
        !committed
            && self
                .membership
                .at_offset(offset - 1)
                .contains_key(&self.config.local)
    }

    /// The fetch timeout, give or take 5%. Kafka's timer has none; without jitter the
    /// followers of a dead leader, answered by the same long-poll, all turn Prospective in the
    /// same millisecond and split the vote (seen in the 3-process failover test). The jitter
    /// is centred on the configured timeout: after a leader dies, the follower that times out
    /// second usually wins (the first asks while the other still follows and is refused), so
    /// a timer that only ever ran late would make ringraft win nearly every election against
    /// Kafka voters (docs/raft.md §15).
    pub(super) fn random_fetch_deadline(&mut self, now: u64) -> u64 {
        let t = self.config.fetch_timeout_ms;
        now + t - t / 20 + self.rng.below(t / 10 + 1)
    }

    pub(super) fn random_election_deadline(&mut self, now: u64) -> u64 {
        let t = self.config.election_timeout_ms;
        now + t + self.rng.below(t)
    }

    fn set_role(&mut self, role: Role) {
        if let Role::Leader(old) = &mut self.role {
            // Parked fetches cannot outlive leadership (docs/raft.md §7.2 step 8).
            let parked = std::mem::take(&mut old.parked);
            let pending = old.pending.take();
            self.role = role;
            for p in parked {
                let response = self.fetch_error(super::message::FetchRequest::clone(&p.request));
                self.respond(p.token, Response::Fetch(response));
            }
            if let Some(change) = pending {
                self.finish_change(
                    change,
                    crate::protocol::errors::ErrorCode::NOT_LEADER_OR_FOLLOWER,
                    "the leader lost leadership before the change committed",
                );
            }
        } else {
            self.role = role;
        }
        if !matches!(self.role, Role::Prospective(_) | Role::Candidate(_)) {
            self.campaign_lease = None;
        }
        // Requests of an earlier state are forgotten, except Fetches to bootstrap servers in
        // this same epoch: when one of them is the leader we now follow, its answer is as good
        // as the leader's own (KAFKA-20514), and it may be the only one that can reach us.
        let epoch = self.epoch;
        self.inflight.retain(|to, f| *to <= -2 && f.epoch == epoch);
        self.abandon_adoption();
        // Backoffs too, as Kafka resets its connections on every transition: a new leader
        // whose last Fetch to the old one failed must still send it BeginQuorumEpoch now,
        // not one period later (a transferred leadership left the old leader leaderless 1 s).
        self.backoff_until.clear();
        self.note_leader();
    }

    fn note_leader(&mut self) {
        let now = LeaderAndEpoch {
            leader_id: match &self.role {
                Role::Leader(_) => Some(self.config.local.id),
                Role::Follower(s) => Some(s.leader_id),
                _ => None,
            },
            epoch: self.epoch,
        };
        if now != self.last_leader {
            self.last_leader = now;
            self.leader_change = Some(now);
        }
    }

    pub(super) fn persist_election_state(&mut self) {
        let (leader_id, voted_key) = match &self.role {
            Role::Unattached(s) => (s.leader_id, s.voted),
            Role::Prospective(s) => (s.leader_id, s.voted),
            Role::Candidate(_) => (None, Some(self.config.local)),
            Role::Leader(_) => (Some(self.config.local.id), None),
            Role::Follower(s) => (Some(s.leader_id), s.voted),
            Role::Resigned(_) => return,
        };
        self.pending_election = Some(ElectionState {
            epoch: self.epoch,
            leader_id,
            voted_key,
        });
    }

    pub(super) fn become_unattached(&mut self, epoch: i32, leader_id: Option<i32>) {
        assert!(epoch >= self.epoch, "epochs never decrease");
        let voted = if epoch == self.epoch {
            self.voted_key()
        } else {
            None
        };
        self.epoch = epoch;
        let election_deadline = self.random_election_deadline(self.now_ms);
        self.set_role(Role::Unattached(Unattached {
            leader_id,
            voted,
            election_deadline,
        }));
        self.persist_election_state();
    }

    /// Unattached(epoch) with a granted standard vote, durable before the response.
    pub(super) fn record_vote(&mut self, candidate: ReplicaKey) {
        let election_deadline = self.random_election_deadline(self.now_ms);
        match &mut self.role {
            Role::Prospective(s) => s.voted = Some(candidate),
            _ => {
                let leader_id = self.leader_id();
                self.set_role(Role::Unattached(Unattached {
                    leader_id,
                    voted: Some(candidate),
                    election_deadline,
                }));
            }
        }
        if !self.config.mutated(|m| m.vote_not_persisted) {
            self.persist_election_state();
        }
    }

    pub(super) fn become_follower(&mut self, epoch: i32, leader_id: i32) {
        assert!(epoch >= self.epoch, "epochs never decrease");
        assert_ne!(leader_id, self.config.local.id, "following ourselves");
        let voted = if epoch == self.epoch {
            self.voted_key()
        } else {
            None
        };
        self.epoch = epoch;
        self.note_leader_heard();
        let fetch_deadline = self.random_fetch_deadline(self.now_ms);
        self.set_role(Role::Follower(FollowerState {
            leader_id,
            voted,
            fetch_deadline,
            has_fetched: false,
            leader_resigned: false,
            download: None,
            membership_due: self.now_ms + self.config.fetch_timeout_ms,
        }));
        self.persist_election_state();
    }

    pub(super) fn become_prospective(&mut self) {
        debug_assert!(self.may_campaign());
        let (leader_id, voted) = (self.leader_id(), self.voted_key());
        let election_deadline = self.random_election_deadline(self.now_ms);
        let granted = self.own_vote();
        let won = granted.len() >= self.voters().majority();
        self.set_role(Role::Prospective(Election {
            leader_id,
            voted,
            granted,
            rejected: BTreeSet::new(),
            refusals: BTreeSet::new(),
            rival_below: false,
            candidacy_at: None,
            election_deadline,
        }));
        if won {
            self.become_candidate();
        }
    }

    pub(super) fn become_candidate(&mut self) {
        debug_assert!(self.may_campaign());
        if self.epoch == i32::MAX {
            // Only forged frames and 2^24 elections after them get a quorum here
            // (`EPOCH_MAX`); never overflow.
            let epoch = self.epoch;
            self.refuse_claim("epoch exhausted", || {
                format!("cannot campaign: epoch {epoch} is the highest allowed")
            });
            return;
        }
        self.epoch += 1;
        let election_deadline = self.random_election_deadline(self.now_ms);
        let granted = self.own_vote();
        let won = granted.len() >= self.voters().majority();
        self.set_role(Role::Candidate(Election {
            leader_id: None,
            voted: Some(self.config.local),
            granted,
            rejected: BTreeSet::new(),
            refusals: BTreeSet::new(),
            rival_below: false,
            candidacy_at: None,
            election_deadline,
        }));
        self.persist_election_state();
        if won {
            self.become_leader();
        }
    }

    /// A campaign starts with our own vote only if we are in the voter set we campaign in.
    fn own_vote(&self) -> BTreeSet<i32> {
        if self.is_voter() {
            BTreeSet::from([self.config.local.id])
        } else {
            BTreeSet::new()
        }
    }

    pub(super) fn become_leader(&mut self) {
        let granting_voters = match &self.role {
            Role::Candidate(s) => s.granted.iter().copied().collect(),
            _ => vec![self.config.local.id],
        };
        let now = self.now_ms;
        let epoch_start_offset = self.log.end_offset();
        let replicas = self
            .voters()
            .voters()
            .iter()
            .filter(|v| v.key.id != self.config.local.id)
            .map(|v| {
                let progress = ReplicaProgress {
                    directory_id: v.key.directory_id,
                    ..ReplicaProgress::default()
                };
                (v.key.id, progress)
            })
            .collect();
        self.set_role(Role::Leader(Box::new(LeaderState {
            epoch_start_offset,
            high_watermark: None,
            replicas,
            check_quorum_deadline: now + self.check_quorum_timeout_ms(),
            fetched_voters: BTreeSet::new(),
            begin_deadline: now,
            begin_acked: BTreeSet::new(),
            parked: Vec::new(),
            pending: None,
        })));
        self.persist_election_state();
        let change = ControlRecord::LeaderChange(LeaderChangeMessage {
            leader_id: self.config.local.id,
            voters: self.voters().ids().collect(),
            granting_voters,
        });
        let mut records = vec![change];
        records.extend(self.epoch_start_membership_records());
        self.append_control(records);
        self.update_leader_high_watermark();
    }

    pub(super) fn become_resigned(&mut self) {
        self.become_resigned_naming(None);
    }

    /// Resigns naming `first` (a leadership transfer's target) as the first preferred
    /// successor, then the others best replicated first.
    pub(super) fn become_resigned_naming(&mut self, first: Option<i32>) {
        let mut preferred = self.preferred_successors();
        if let Some(at) = first.and_then(|id| preferred.iter().position(|k| k.id == id)) {
            let target = preferred.remove(at);
            preferred.insert(0, target);
        }
        let unacked = preferred.iter().map(|k| k.id).collect();
        let election_deadline = self.random_election_deadline(self.now_ms);
        self.set_role(Role::Resigned(ResignedState {
            election_deadline,
            preferred,
            unacked,
        }));
    }

    /// Other voters, best replicated first (docs/raft.md §6.4).
    fn preferred_successors(&self) -> Vec<ReplicaKey> {
        let progress = |id: i32| match &self.role {
            Role::Leader(s) => s.replicas.get(&id).and_then(|r| r.end_offset),
            _ => None,
        };
        let mut others: Vec<_> = self
            .voters()
            .voters()
            .iter()
            .filter(|v| v.key.id != self.config.local.id)
            .map(|v| (progress(v.key.id), v.key))
            .collect();
        others.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        others.into_iter().map(|(_, k)| k).collect()
    }

    pub(super) fn voted_key(&self) -> Option<ReplicaKey> {
        match &self.role {
            Role::Unattached(s) => s.voted,
            Role::Prospective(s) => s.voted,
            Role::Candidate(_) => Some(self.config.local),
            Role::Follower(s) => s.voted,
            Role::Leader(_) | Role::Resigned(_) => None,
        }
    }

    pub(super) fn check_quorum_timeout_ms(&self) -> u64 {
        self.config.fetch_timeout_ms * 3 / 2
    }

    /// docs/raft.md §9 step 4 / §6.3 step 4: follow what a peer says about leader and epoch.
    /// Returns false when the claim contradicts what this replica knows (another leader for
    /// our epoch, an epoch out of range): it is refused and logged, never obeyed, and the
    /// caller answers or ignores the message as refused. Kafka treats some of these as fatal;
    /// a single forged frame must not stop a node.
    pub(super) fn maybe_transition(&mut self, leader: i32, epoch: i32) -> bool {
        let local = self.config.local.id;
        if !self.epoch_acceptable(epoch, "epoch out of range") {
            return false;
        }
        if epoch > self.epoch {
            if leader >= 0 && leader != local && self.can_follow(leader) {
                self.become_follower(epoch, leader);
            } else if leader == local {
                self.resign_as_earlier_replica(epoch);
            } else {
                // A fixed voter set is known in full: a leader outside it is a forgery, and
                // only the epoch is taken from it. (A dynamic set may be stale here, so a
                // leader it lacks may be real.)
                let outside = leader >= 0 && self.fixed_voter_set();
                if outside {
                    self.refuse_claim("leader outside the voter set", || {
                        format!(
                            "a peer names {leader} leader of epoch {epoch}, which is not in the \
                             static voter set; taking the epoch only"
                        )
                    });
                }
                self.become_unattached(epoch, (leader >= 0 && !outside).then_some(leader));
            }
            return true;
        }
        if epoch < self.epoch || leader < 0 {
            return true;
        }
        // A Prospective keeps the leader it followed: hearing of that leader again is no news.
        match self.leader_id() {
            Some(known) if known == leader => {
                let attach = matches!(self.role, Role::Unattached(_));
                if attach && leader != local && self.can_follow(leader) {
                    self.become_follower(epoch, leader);
                }
                true
            }
            Some(known) => {
                self.refuse_claim("two leaders", || {
                    format!(
                        "a peer names {leader} leader of epoch {epoch}, whose leader is {known}"
                    )
                });
                false
            }
            None if leader == local => {
                self.resign_as_earlier_replica(epoch);
                true
            }
            None if self.can_follow(leader) => {
                self.become_follower(epoch, leader);
                true
            }
            None => true,
        }
    }

    /// A peer names this node leader of `epoch`, which it never led as far as its state says.
    /// Either a replica with our node id and an earlier directory (one since re-formatted,
    /// docs/membership.md §1) led it, or our `quorum-state` was lost, or the frame is forged. In
    /// every case this replica must never lead or vote in that epoch, so, as a restarted leader
    /// would be, it is Resigned in it — and says so durably.
    fn resign_as_earlier_replica(&mut self, epoch: i32) {
        self.refuse_claim("named leader", || {
            format!("a peer names this node leader of epoch {epoch}, which it did not lead here; resigning in it")
        });
        assert!(epoch >= self.epoch, "epochs never decrease");
        self.epoch = epoch;
        self.become_resigned();
        self.pending_election = Some(ElectionState {
            epoch,
            leader_id: Some(self.config.local.id),
            voted_key: None,
        });
    }

    fn begin_shutdown(&mut self) {
        self.shutting_down = true;
        if matches!(self.role, Role::Leader(_)) {
            self.become_resigned();
        }
    }

    fn delete_before(&mut self, offset: i64) {
        let allowed = self.log.start_offset() < offset
            && self
                .log
                .latest_snapshot()
                .is_some_and(|s| offset <= s.offset)
            && self.log.has_snapshot_at(offset);
        if allowed && offset <= self.log.end_offset() {
            self.log.start_moved_to(offset);
            self.log_ops.push(LogOp::DeleteBefore(offset));
        }
    }

    // ---- Outbound requests ----------------------------------------------------------------

    pub(super) fn can_send(&self, to: i32) -> bool {
        !self.inflight.contains_key(&to)
            && self
                .backoff_until
                .get(&to)
                .is_none_or(|until| *until <= self.now_ms)
    }

    pub(super) fn send(&mut self, to: i32, request: Request) {
        let id = self.next_request_id;
        self.next_request_id += 1;
        let deadline = self.now_ms + self.config.request_timeout_ms;
        let long_poll = matches!(&request, Request::Fetch(f) if f.max_wait_ms > 0);
        self.inflight.insert(
            to,
            InFlight {
                id,
                deadline,
                epoch: self.epoch,
                log: self.log.last_offset_and_epoch(),
                long_poll,
            },
        );
        self.outbox.push(Outbound::Request { id, to, request });
    }

    pub(super) fn respond(&mut self, token: Token, response: Response) {
        self.outbox.push(Outbound::Response { token, response });
    }

    pub(super) fn backoff(&mut self, to: i32) {
        let until = self.now_ms + self.config.retry_backoff_ms;
        self.backoff_until.insert(to, until);
    }

    /// Removes and returns the destination of in-flight request `id`, if it is current.
    pub(super) fn take_inflight(&mut self, id: RequestId) -> Option<(i32, InFlight)> {
        let (to, f) = self.inflight.iter().find(|(_, f)| f.id == id)?;
        let (to, f) = (*to, *f);
        self.inflight.remove(&to);
        Some((to, f))
    }

    fn handle_failure(&mut self, id: RequestId, failure: super::message::Failure) {
        let Some((to, flight)) = self.take_inflight(id) else {
            return;
        };
        // An adoption request that failed is sent again on adoption's next turn.
        let _ = self.is_adoption_request(id);
        if flight.long_poll {
            self.session_failed(to);
        }
        let prevote = matches!(self.role, Role::Prospective(_)) && flight.epoch == self.epoch;
        if prevote && failure == super::message::Failure::UnsupportedVersion {
            // The peer cannot carry PreVote (no Vote v2): standard Raft (docs/raft.md §5.6).
            self.become_candidate();
            return;
        }
        self.backoff(to);
    }

    // ---- Timers ---------------------------------------------------------------------------

    /// Runs expired timers and sends what the current state wants sent.
    pub(super) fn poll(&mut self) {
        let now = self.now_ms;
        let expired: Vec<i32> = self
            .inflight
            .iter()
            .filter(|(_, f)| f.deadline <= now)
            .map(|(to, _)| *to)
            .collect();
        for to in expired {
            let turn = self.turn_at().is_some_and(|t| t <= now);
            let long_poll = self.inflight[&to].long_poll;
            if long_poll && !turn && self.follower_of(to) && self.leader_vouched(to) {
                // Still held by the leader, whose session answers (`liveness`).
                self.rest_on_session();
                continue;
            }
            self.inflight.remove(&to);
            self.backoff(to);
        }
        self.backoff_until.retain(|_, until| *until > now);
        if matches!(self.role, Role::Leader(_)) {
            self.note_leader_heard();
        }
        match &self.role {
            Role::Unattached(s) if s.election_deadline <= now => {
                if self.may_campaign() && !self.shutting_down && self.start_campaign() {
                    self.become_prospective();
                } else {
                    let deadline = if self.may_campaign() {
                        self.campaign_recheck_deadline()
                    } else {
                        self.random_election_deadline(now)
                    };
                    if let Role::Unattached(s) = &mut self.role {
                        s.election_deadline = deadline;
                    }
                }
            }
            Role::Prospective(s) if s.candidacy_at.is_some_and(|c| c <= now) => {
                self.become_candidate()
            }
            Role::Prospective(s) if s.election_deadline <= now => self.election_lost(),
            Role::Candidate(s) if s.election_deadline <= now => self.become_prospective(),
            Role::Follower(s)
                if s.fetch_deadline <= now
                    && !s.leader_resigned
                    && self.leader_vouched(s.leader_id) =>
            {
                // The leader holds our Fetch and its session answers: as good as an answer.
                self.rest_on_session();
            }
            Role::Follower(s) if s.fetch_deadline <= now => {
                if !self.may_campaign() || self.shutting_down {
                    // An observer lost its leader: look for it through the bootstrap servers.
                    let epoch = self.epoch;
                    self.become_unattached(epoch, None);
                } else if self.start_campaign() {
                    self.become_prospective();
                } else {
                    // A witness keeps fetching from the leader it lost, and now grants
                    // pre-votes: the others may elect whom they like.
                    let deadline = self.campaign_recheck_deadline();
                    if let Role::Follower(s) = &mut self.role {
                        s.has_fetched = false;
                        s.fetch_deadline = deadline;
                    }
                }
            }
            Role::Resigned(s) if s.election_deadline <= now => {
                let epoch = self.epoch.saturating_add(1);
                self.become_unattached(epoch, None);
                if self.may_campaign() && !self.shutting_down && self.start_campaign() {
                    self.become_prospective();
                } else if self.may_campaign() {
                    let deadline = self.campaign_recheck_deadline();
                    if let Role::Unattached(s) = &mut self.role {
                        s.election_deadline = deadline;
                    }
                }
            }
            _ => {}
        }
        self.poll_sends();
        self.poll_fences();
        self.poll_transfer();
    }

    /// A Prospective that lost or timed out (docs/raft.md §3).
    pub(super) fn election_lost(&mut self) {
        let (leader, voted) = match &self.role {
            Role::Prospective(s) => (s.leader_id, s.voted),
            _ => return,
        };
        match leader.filter(|l| self.can_follow(*l)) {
            Some(l) => {
                let epoch = self.epoch;
                self.become_follower(epoch, l);
            }
            None => {
                let election_deadline = self.random_election_deadline(self.now_ms);
                self.set_role(Role::Unattached(Unattached {
                    leader_id: leader,
                    voted,
                    election_deadline,
                }));
            }
        }
    }

    fn poll_sends(&mut self) {
        match &self.role {
            Role::Prospective(_) => {
                self.send_votes();
                self.send_bootstrap_fetch();
            }
            Role::Candidate(_) => self.send_votes(),
            Role::Follower(_) => self.send_fetch(),
            Role::Leader(_) => self.poll_leader(),
            Role::Resigned(_) => self.send_end_quorum_epochs(),
            Role::Unattached(_) => self.send_bootstrap_fetch(),
        }
        self.poll_membership();
    }

    pub(super) fn leader_mut(&mut self) -> Option<&mut LeaderState> {
        match &mut self.role {
            Role::Leader(s) => Some(s),
            _ => None,
        }
    }
}

/// Cores for the unit tests of the core and of what reads it: voters without directory ids or
/// endpoints, cluster id "c", seed 1, an empty log, time 0.
#[cfg(test)]
pub(crate) mod testing {
    use super::{ElectionState, Input, Raft, RaftConfig};
    use crate::membership::{Voter, VoterSet};
    use crate::protocol::ErrorCode;
    use crate::raft::message::{FetchRequest, Outbound, Request, Response, VoteResponse};
    use crate::raft::{LogInfo, ReplicaKey, Time};

    pub fn voters(ids: &[i32]) -> VoterSet {
        let voters = ids
            .iter()
            .map(|v| Voter::new(ReplicaKey::new(*v, None), vec![]))
            .collect();
        VoterSet::new(voters).unwrap()
    }

    pub fn config(id: i32) -> RaftConfig {
        RaftConfig::new(ReplicaKey::new(id, None), "c".into(), 1)
    }

    pub fn start(config: RaftConfig, voter_ids: &[i32], stored: Option<ElectionState>) -> Raft {
        let log = LogInfo::default();
        Raft::new(config, voters(voter_ids), stored, &log, Time::simulated(0))
    }

    /// Replica `id` of `voter_ids`, fresh.
    pub fn core(id: i32, voter_ids: &[i32]) -> Raft {
        start(config(id), voter_ids, None)
    }

    /// Node 1 of three, elected by granting every vote it asks for, with its LeaderChange
    /// batch durable. Returns the core and the time reached.
    pub fn leader_of_three() -> (Raft, u64) {
        let mut raft = core(1, &[1, 2, 3]);
        let mut now = 0;
        while !raft.is_leader() {
            now += 50;
            assert!(now < 60_000, "never elected");
            raft.step(Time::simulated(now), Input::Tick);
            while let Some(ready) = raft.ready() {
                raft.persisted(ready.id);
                for m in ready.early_messages.iter().chain(&ready.messages) {
                    if let Outbound::Request {
                        id,
                        request: Request::Vote(_),
                        ..
                    } = m
                    {
                        let granted = Response::Vote(VoteResponse {
                            error: ErrorCode::NONE,
                            partition_error: ErrorCode::NONE,
                            leader_id: -1,
                            leader_epoch: raft.epoch(),
                            vote_granted: true,
                            leader_endpoints: vec![],
                        });
                        let input = Input::Response {
                            id: *id,
                            response: granted,
                        };
                        raft.step(Time::simulated(now), input);
                    }
                }
            }
        }
        drain(&mut raft);
        (raft, now)
    }

    pub fn drain(raft: &mut Raft) {
        while let Some(ready) = raft.ready() {
            raft.persisted(ready.id);
        }
    }

    /// Voter `id` fetches at the leader's log end (answered at once).
    pub fn fetch(raft: &mut Raft, now: u64, id: i32) {
        let request = Request::Fetch(FetchRequest {
            cluster_id: Some("c".into()),
            replica: ReplicaKey::new(id, None),
            max_wait_ms: 0,
            fetch_offset: raft.log_end_offset(),
            last_fetched_epoch: raft.epoch(),
            current_leader_epoch: raft.epoch(),
            max_bytes: 1 << 20,
            high_watermark: None,
        });
        raft.step(Time::simulated(now), Input::Request { token: 9, request });
        drain(raft);
    }
}
