//! The executor: the one loop that runs the Raft core's effects, for the node and for the
//! simulator (`tests/sim` drives this same code over its in-memory disk and network). It feeds
//! the core what arrives — requests, peer answers, application appends, ticks — and executes
//! every `Ready` in the order its contract states (`raft::Ready`):
//!
//! 1. the election state is made durable (`Storage::persist_election`, awaited here);
//! 2. the log operations are applied (appends are queued in memory; the rest are durable);
//! 3. the early messages (a leader's Fetch answers) are sent at once;
//! 4. a flush is *started* when the Ready appended (`Storage::flush`), and the Ready waits;
//! 5. only once that flush (and every earlier one) is durable are its other messages sent,
//!    `Raft::persisted` called, and committed data, snapshot loads and leader changes
//!    delivered to the application.
//!
//! While a flush is in flight the loop keeps taking inputs: a leader answers its followers'
//! fetches and queues new appends (they share the next flush); only the messages that depend
//! on the flush wait for it. Readys are released strictly in order, so a message never
//! overtakes the durability of anything produced before it.
//!
//! A storage error is `Fatal`: the loop ends with it and the node stops (docs/design.md §3 rule 4).

mod deliver;
mod linger;
mod policy;
mod ready;
mod snapshot;
mod status;

pub use policy::SnapshotPolicy;
use snapshot::{SnapshotFailure, SnapshotInFlight};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use bytes::Bytes;
use futures_channel::oneshot;
use futures_lite::{future, Stream, StreamExt};
use tracing::{error, info, warn};

use super::call::{Answer, Call};
use super::handle::{AppendCheck, ClientError, ExecutorInput};
use super::machine::{CommittedBatch, QuorumStatus, StateMachine};
use crate::net::dispatch::ServerState;
use crate::node::metrics::{GroupGauges, LoopMetrics, RaftStats};
use crate::protocol::ErrorCode;
use crate::raft::message::{Records, SnapshotBytes};
use crate::raft::{
    ElectionState, Endpoint, Input, LeaderAndEpoch, LogOp, OffsetAndEpoch, Outbound, Raft, Ready,
    Request, RequestId, Response, Time, Token,
};
use crate::records::control::ControlRecord;

/// Requests whose round trip is being timed, at most (answers always come, as a failure at
/// worst; this only bounds a leak if one did not).
const SENT_TRACKED_MAX: usize = 10_000;

/// How much of a snapshot is read at a time while loading it into the state machine.
const SNAPSHOT_LOAD_CHUNK_BYTES: usize = 1 << 20;

/// How long a graceful stop waits for the resignation to be acknowledged (docs/raft.md §14).
pub const SHUTDOWN_GRACE_MS: u64 = 1500;

pub use super::errors::{Fatal, FatalCause, StorageOp, Unavailable};

/// What the executor needs of durable storage. The node's implementation is the metadata log
/// on the glommio ring (`node::raft_storage`); the simulator's is an in-memory disk that
/// loses what was not flushed when it crashes. Single-threaded: no future needs `Send`.
#[allow(async_fn_in_trait)]
pub trait Storage {
    /// Makes `state` durable (`quorum-state`).
    async fn persist_election(&self, state: &ElectionState) -> Result<(), Fatal>;
    /// Executes one log operation. Appends are queued in memory (durable once a flush covers
    /// them); truncations, snapshot installs and prefix deletions are durable on return.
    /// Nothing below `floor` (what the application was given as committed) is truncated.
    async fn apply(&self, op: &LogOp, floor: i64) -> Result<(), Fatal>;
    /// Starts a flush of everything appended so far and returns a future of its end. The flush
    /// makes progress on its own — the future need not be polled for it to — and resolves with
    /// the offset below which everything is durable.
    fn flush(&self) -> Pin<Box<dyn Future<Output = Result<i64, Fatal>>>>;
    /// The log end offset (appended, not necessarily durable).
    fn end_offset(&self) -> i64;
    /// Every offset below this is durable.
    fn flushed_offset(&self) -> i64;
    /// Whole batches from the one containing `offset`, up to `max_bytes` (at least one).
    async fn read(&self, offset: i64, max_bytes: usize) -> Result<Vec<Bytes>, Fatal>;
    /// Up to `max_bytes` of snapshot `id` from `position`; `Ok(None)` past its end.
    async fn read_snapshot(
        &self,
        id: OffsetAndEpoch,
        position: u64,
        max_bytes: usize,
    ) -> Result<Option<Bytes>, Unavailable>;
    /// Writes snapshot `id` durably: `header` (the voter set as of its end), then one record
    /// per value of the batches `parts` streams, as they arrive. Resolves, once durable, with
    /// its size and whether to drop the log below it; `None` when the application dropped
    /// its writer before finishing (nothing is left behind).
    async fn write_snapshot(
        &self,
        id: OffsetAndEpoch,
        header: Vec<ControlRecord>,
        parts: futures_channel::mpsc::Receiver<super::handle::SnapshotPart>,
        timestamp_ms: i64,
    ) -> Result<Option<(u64, bool)>, Fatal>;
    /// The bytes the log's segments hold (what retention weighs beside the snapshots).
    fn log_bytes(&self) -> u64;
    /// The LastContainedLogTimestamp in snapshot `id`'s header (retention's age); `None` when
    /// it cannot be read.
    async fn snapshot_timestamp(&self, id: OffsetAndEpoch) -> Option<i64>;
}

/// How the executor reaches peers. Answers come back as `ExecutorInput::Peer` through the
/// input stream. (Requests *to* this node are answered on their `ExecutorInput::Request`'s
/// reply channel, never through the transport.)
pub trait Transport {
    /// Sends request `id` to destination `to`, at `address` (where the core says it listens;
    /// `None` when it knows no address: the transport answers with a failure).
    fn send_request(&mut self, id: RequestId, to: i32, address: Option<Endpoint>, request: Request);
}

/// The time, and timers.
pub trait Clock {
    fn now(&self) -> Time;
    /// Resolves at `mono_ms`, or a little after on a clock that gathers timers on a grid
    /// (`raft_shard::GlommioClock::with_grid`): the Raft core's timeouts.
    fn sleep_until(&self, mono_ms: u64) -> impl Future<Output = ()>;
    /// Resolves at `mono_ms`, on no grid: what an application waits on (an append's linger).
    fn sleep_until_exact(&self, mono_ms: u64) -> impl Future<Output = ()> {
        self.sleep_until(mono_ms)
    }
}

/// Whoever serves fetches beside the executor (the node's fetch shards, the simulator's
/// models; see `crate::fetch`): told before the log's offsets are rewritten, and after every
/// change.
pub trait Publish {
    /// Before `op` runs (a truncation or a snapshot install bumps the generation here).
    fn before_op(&mut self, op: &LogOp);
    /// After a change: the Readys taken so far have run their log operations.
    fn changed(&mut self, raft: &Raft);
}

/// What the executor shows of itself (the simulator's checkers, metrics).
#[derive(Debug, Default)]
pub struct Probe {
    /// The next offset to deliver to the application: everything below it was delivered as
    /// committed, and is never truncated.
    pub delivered: Cell<i64>,
    /// The committed bound as the application last heard it (−1 before any).
    pub delivered_high_watermark: Cell<i64>,
    pub flushes: Cell<u64>,
    /// Readys whose flush completed after others had queued behind them.
    pub pipelined_readys: Cell<u64>,
}

/// A Ready whose messages, `persisted` and delivery wait for a flush (its own or an earlier
/// one's).
struct Waiting {
    id: u64,
    /// The log end its own flush must reach; `None`: it appended nothing.
    flush_to: Option<i64>,
    messages: Vec<Outbound>,
    high_watermark: Option<i64>,
    leader_change: Option<LeaderAndEpoch>,
    load_snapshot: Option<OffsetAndEpoch>,
}

type SnapshotReply = oneshot::Sender<Result<OffsetAndEpoch, ClientError>>;
type SnapshotWrite =
    Pin<Box<dyn Future<Output = Result<(OffsetAndEpoch, u64, bool), SnapshotFailure>>>>;
type FlushInFlight = Pin<Box<dyn Future<Output = Result<i64, Fatal>>>>;

/// The executor of one replica. See the module doc.
pub struct Executor<S: Storage + 'static, T: Transport, C: Clock> {
    raft: Rc<RefCell<Raft>>,
    storage: Rc<S>,
    transport: T,
    clock: C,
    server_state: ServerState,
    cluster_id: String,
    /// Requests the core has not answered yet, by the token it knows them by.
    replies: HashMap<Token, oneshot::Sender<Answer>>,
    next_token: Token,
    /// The sessions' pulses of the Fetches among them that came in one (`raft::liveness`).
    pulses: Rc<RefCell<HashMap<Token, super::held_fetches::Pulse>>>,
    /// `set_idle_wake_ms`.
    idle_wake_ms: u64,
    /// "not serving a corrupt snapshot" and "cannot read the log for a fetch": every follower
    /// asks again many times a second (`logsafe::RateLimit`; logs only, so the real clock).
    corrupt_snapshot_said: crate::logsafe::RateLimit,
    unreadable_said: crate::logsafe::RateLimit,
    commits: BTreeMap<i64, Vec<oneshot::Sender<Result<i64, ClientError>>>>,
    listeners: Vec<Box<dyn StateMachine>>,
    /// The state machine given before the run hears the latest snapshot first.
    load_at_start: bool,
    /// Read fences and leadership transfers waiting for the core, by id (one numbering).
    fences: HashMap<u64, oneshot::Sender<Result<i64, ClientError>>>,
    transfers: HashMap<u64, oneshot::Sender<Result<i64, ClientError>>>,
    next_fence: u64,
    waiting: VecDeque<Waiting>,
    flush: Option<FlushInFlight>,
    /// The application's snapshot being written, and who asked for it.
    snapshot: Option<SnapshotInFlight>,
    /// When to ask for snapshots and what retention deletes (`policy`).
    policy: policy::PolicyState,
    /// Snapshot header timestamps retention has read, by id.
    snapshot_times: HashMap<OffsetAndEpoch, Option<i64>>,
    /// When a graceful stop was asked (monotonic ms).
    stopping: Option<u64>,
    probe: Rc<Probe>,
    publish: Option<Box<dyn Publish>>,
    /// What the Kafka gauges are computed from (`node::metrics`).
    stats: Rc<RaftStats>,
    metrics: Option<LoopMetrics>,
    /// A group's gauges for `/metrics`, stored once per turn (`metrics::groups`).
    gauges: Option<std::sync::Arc<GroupGauges>>,
    /// When each waiting append arrived, by its last offset (commit latency).
    commit_started: BTreeMap<i64, (u64, std::time::Instant)>,
    /// Appends waiting out `controller.quorum.append.linger.ms` (`linger`).
    linger: linger::Linger,
    /// When the flush in flight started.
    flush_began: Option<std::time::Instant>,
    /// Requests to peers in flight, other than long-polling Fetches (peer round trips).
    sent: HashMap<RequestId, std::time::Instant>,
    /// The group this executor runs (`__cluster_metadata-0` unless told).
    group: crate::protocol::group::GroupKey,
}

impl<S: Storage + 'static, T: Transport, C: Clock> Executor<S, T, C> {
    /// An executor over `raft`, whose log `storage` holds from `log_start` on.
    pub fn new(
        raft: Raft,
        storage: Rc<S>,
        transport: T,
        clock: C,
        server_state: ServerState,
    ) -> Self {
        let probe = Rc::new(Probe::default());
        probe.delivered.set(raft.log_start_offset());
        probe.delivered_high_watermark.set(-1);
        let cluster_id = raft.config().cluster_id.clone();
        let policy =
            policy::PolicyState::new(SnapshotPolicy::kafka_defaults(), clock.now().mono_ms);
        let executor = Executor {
            raft: Rc::new(RefCell::new(raft)),
            storage,
            transport,
            clock,
            server_state,
            cluster_id,
            corrupt_snapshot_said: crate::logsafe::RateLimit::repeated_warning(),
            unreadable_said: crate::logsafe::RateLimit::repeated_warning(),
            replies: HashMap::new(),
            next_token: 0,
            pulses: Rc::default(),
            idle_wake_ms: 1_000,
            commits: BTreeMap::new(),
            listeners: Vec::new(),
            load_at_start: false,
            fences: HashMap::new(),
            transfers: HashMap::new(),
            next_fence: 1,
            waiting: VecDeque::new(),
            flush: None,
            snapshot: None,
            policy,
            snapshot_times: HashMap::new(),
            stopping: None,
            probe,
            publish: None,
            stats: Rc::new(RaftStats::default()),
            metrics: None,
            gauges: None,
            commit_started: BTreeMap::new(),
            linger: linger::Linger::default(),
            flush_began: None,
            sent: HashMap::new(),
            group: crate::protocol::group::GroupKey::metadata().clone(),
        };
        executor.publish_features();
        executor
    }

    /// The core, to look at between steps (the simulator's checkers). Never borrowed across
    /// an await by the executor.
    pub fn raft(&self) -> Rc<RefCell<Raft>> {
        self.raft.clone()
    }

    /// The pulses of the Fetches the core holds that came in a session, by token.
    pub fn pulses(&self) -> Rc<RefCell<HashMap<Token, super::held_fetches::Pulse>>> {
        self.pulses.clone()
    }

    pub fn probe(&self) -> Rc<Probe> {
        self.probe.clone()
    }

    /// Tells `publish` about every change once the executor runs, starting with the state
    /// after its first Readys ran (the core's picture of the log can be ahead of the storage
    /// until then: a single voter leads, and appends, as it is built).
    pub fn set_publisher(&mut self, publish: Box<dyn Publish>) {
        self.publish = Some(publish);
    }

    /// Runs `group` (DescribeQuorum answers name it).
    pub fn set_group(&mut self, group: crate::protocol::group::GroupKey) {
        self.group = group;
    }

    /// What the executor measures, for `/metrics` and the health checks.
    pub fn stats(&self) -> Rc<RaftStats> {
        self.stats.clone()
    }

    /// Histograms to feed (flush, write, commit and propagation latency).
    pub fn set_metrics(&mut self, metrics: LoopMetrics) {
        self.metrics = Some(metrics);
    }

    /// Gauges to keep up to date (a group other than group 0: `metrics::groups`).
    pub fn set_gauges(&mut self, gauges: std::sync::Arc<GroupGauges>) {
        self.gauges = Some(gauges);
    }

    /// The application's state machine, from the start: the latest snapshot is loaded into
    /// it first, then every committed batch after the snapshot is applied.
    pub fn set_state_machine(&mut self, machine: Box<dyn StateMachine>) {
        self.listeners.push(machine);
        self.load_at_start = true;
        self.policy.machine_added();
    }

    /// The transport, to configure before the run.
    pub fn transport_mut(&mut self) -> &mut T {
        &mut self.transport
    }

    /// The longest the loop sleeps when the core wants nothing sooner (1 s until set): what
    /// runs then is the retention check (`RETENTION_CHECK_MS`) and the turn's bookkeeping.
    pub fn set_idle_wake_ms(&mut self, ms: u64) {
        self.idle_wake_ms = ms.max(1);
    }

    /// `controller.quorum.append.linger.ms` (`linger`); 0 until set.
    pub fn set_append_linger_ms(&mut self, ms: u64) {
        self.linger.ms = ms;
    }

    /// Snapshot and retention by `policy` (Kafka's defaults until set).
    pub fn set_snapshot_policy(&mut self, policy: SnapshotPolicy) {
        self.policy.policy = policy;
    }

    /// Runs until the input stream ends, or a graceful stop (`ExecutorInput::Stop`) finishes:
    /// the resignation acknowledged, or `SHUTDOWN_GRACE_MS` passed. Unanswered calls and
    /// appends fail when it returns.
    pub async fn run(
        mut self,
        mut inputs: impl Stream<Item = ExecutorInput> + Unpin,
    ) -> Result<(), Fatal> {
        let latest = self.raft.borrow().log_view().latest_snapshot();
        let result = match latest.filter(|id| self.load_at_start && id.offset > 0) {
            Some(id) => self.load_snapshot(id).await,
            None => Ok(()),
        };
        let result = match result {
            Ok(()) => self.run_loop(&mut inputs).await,
            Err(e) => Err(e),
        };
        if let Err(e) = &result {
            error!(error = %e, "raft stopped");
        }
        let (epoch, leader) = {
            let raft = self.raft.borrow();
            (raft.epoch(), raft.leader_id())
        };
        for (offset, waiters) in std::mem::take(&mut self.commits) {
            for w in waiters {
                let lost = ClientError::LeadershipLost {
                    offset,
                    epoch,
                    leader,
                };
                let _ = w.send(Err(lost));
            }
        }
        for (_, fence) in self.fences.drain().chain(self.transfers.drain()) {
            let _ = fence.send(Err(ClientError::Stopped));
        }
        result
    }

    async fn run_loop(
        &mut self,
        inputs: &mut (impl Stream<Item = ExecutorInput> + Unpin),
    ) -> Result<(), Fatal> {
        enum Event {
            Input(Option<ExecutorInput>),
            Flushed(Result<i64, Fatal>),
            Snapshot(Result<(OffsetAndEpoch, u64, bool), SnapshotFailure>),
            Tick,
        }
        loop {
            let busy_from = std::time::Instant::now();
            self.release_due_appends(self.clock.now().mono_ms);
            self.drain_readys().await?;
            self.note_turn();
            let now = self.clock.now().mono_ms;
            if let Some(since) = self.stopping {
                let done = self.raft.borrow().shutdown_complete();
                if done || now >= since + SHUTDOWN_GRACE_MS {
                    return Ok(());
                }
            }
            let cap = if self.stopping.is_some() {
                20
            } else {
                self.idle_wake_ms
            };
            let deadline = self.raft.borrow().deadline_ms().min(now + cap);
            // While an append lingers, the loop wakes exactly (a commit waits on it), at the
            // linger's deadline or the core's, whichever is first; a tick of the clock's grid
            // could fall after both.
            let linger = self.linger.deadline().map(|d| d.min(deadline));
            let waited_from = std::time::Instant::now();
            let busy = waited_from - busy_from;
            let (flush, snapshot, clock) = (&mut self.flush, &mut self.snapshot, &self.clock);
            // A finished flush is looked at first: until it is, the Readys waiting for it stay
            // queued and the next flush cannot start, however busy the inputs are.
            let event = future::or(
                async {
                    match flush.as_mut() {
                        Some(f) => Event::Flushed(f.await),
                        None => future::pending().await,
                    }
                },
                future::or(
                    async { Event::Input(inputs.next().await) },
                    future::or(
                        async {
                            match snapshot.as_mut() {
                                Some(s) => Event::Snapshot((&mut s.write).await),
                                None => future::pending().await,
                            }
                        },
                        async {
                            match linger {
                                Some(at) => clock.sleep_until_exact(at).await,
                                None => clock.sleep_until(deadline).await,
                            }
                            Event::Tick
                        },
                    ),
                ),
            )
            .await;
            // The core hears the time before anything this turn calls into it (an idle group
            // sleeps up to `idle_wake_ms`: a transfer's election deadline counted from a time
            // that old would already be due).
            let woke = self.now();
            self.raft.borrow_mut().advance_clock(woke);
            let idle = waited_from.elapsed();
            let turn = (idle + busy).as_secs_f64();
            if turn > 0.0 {
                let ratio = idle.as_secs_f64() / turn;
                self.stats.poll_idle.borrow_mut().record(now, ratio);
            }
            match event {
                Event::Input(Some(input)) => {
                    self.handle(input);
                    // Everything already queued joins the same Readys: the appends and fetches
                    // that arrived during a flush share the next one (group commit).
                    while let Some(Some(input)) = future::poll_once(inputs.next()).await {
                        self.handle(input);
                    }
                }
                Event::Input(None) => return Ok(()),
                Event::Flushed(result) => {
                    self.flush = None;
                    self.stats.flush_started.set(None);
                    if let (Some(m), Some(began)) = (&self.metrics, self.flush_began.take()) {
                        m.flush_seconds.observe(began.elapsed().as_secs_f64());
                    }
                    let flushed = result?;
                    self.probe.flushes.set(self.probe.flushes.get() + 1);
                    self.release(flushed).await?;
                }
                Event::Snapshot(result) => {
                    let done = self.snapshot.take().expect("a snapshot in flight");
                    self.snapshot_written(result, done)?;
                    self.apply_retention(true).await;
                }
                Event::Tick => self.step(Input::Tick),
            }
            self.apply_retention(false).await;
        }
    }

    fn now(&self) -> Time {
        self.clock.now()
    }

    fn step(&mut self, input: Input) {
        let now = self.now();
        self.raft.borrow_mut().step(now, input);
    }

    fn handle(&mut self, input: ExecutorInput) {
        match input {
            ExecutorInput::Request { call, reply } => self.handle_request(call, reply),
            ExecutorInput::HeldFetch {
                request,
                pulse,
                reply,
            } => {
                self.pulses.borrow_mut().insert(self.next_token, pulse);
                self.handle_request(Call::Raft(Request::Fetch(request)), reply);
            }
            ExecutorInput::FetchProgress { progress, reply } => {
                for p in progress {
                    self.step(Input::FetchProgress(p));
                }
                if let Some(reply) = reply {
                    let _ = reply.send(self.raft.borrow().high_watermark());
                }
            }
            ExecutorInput::SnapshotServed {
                replica,
                leader_epoch,
            } => self.step(Input::SnapshotServed {
                replica,
                leader_epoch,
            }),
            ExecutorInput::Peer { id, result } => {
                let sent = self.sent.remove(&id);
                if let (Some(m), Some(sent), Ok(_)) = (&self.metrics, sent, &result) {
                    m.peer_round_trip_seconds
                        .observe(sent.elapsed().as_secs_f64());
                }
                match result {
                    Ok(response) => self.step(Input::Response { id, response }),
                    Err(failure) => self.step(Input::Failure { id, failure }),
                }
            }
            ExecutorInput::Append {
                batch,
                check,
                reply,
            } => self.append(batch, check, reply),
            ExecutorInput::ReadFence { reply } => {
                let id = self.next_fence;
                self.next_fence += 1;
                self.fences.insert(id, reply);
                self.raft.borrow_mut().read_fence(id);
            }
            ExecutorInput::Transfer { to, reply } => {
                let id = self.next_fence;
                self.next_fence += 1;
                self.transfers.insert(id, reply);
                self.raft.borrow_mut().transfer_leadership(id, to);
            }
            ExecutorInput::Describe { reply } => {
                let _ = reply.send(self.quorum_status());
            }
            ExecutorInput::Listen(mut listener) => {
                let raft = self.raft.borrow();
                listener.leader_change(LeaderAndEpoch {
                    leader_id: raft.leader_id(),
                    epoch: raft.epoch(),
                });
                drop(raft);
                self.listeners.push(listener);
                self.policy.machine_added();
                self.raft.borrow_mut().set_adopting(false);
            }
            ExecutorInput::Snapshot {
                offset,
                parts,
                reply,
            } => self.start_snapshot(offset, parts, reply, false),
            ExecutorInput::Stop => {
                if self.stopping.is_none() {
                    info!(
                        state = %self.raft.borrow().state_name(),
                        "raft shutting down"
                    );
                    self.stopping = Some(self.now().mono_ms);
                    self.step(Input::Shutdown);
                }
            }
        }
    }

    /// The one door for requests: admin RPCs are answered at once from the core's state, Raft
    /// RPCs are stepped into the core under a token, and answered when it responds
    /// (`ready::send`).
    fn handle_request(&mut self, call: Call, reply: oneshot::Sender<Answer>) {
        match call {
            Call::Admin(admin) => {
                let now = self.now();
                let mut raft = self.raft.borrow_mut();
                let answer = crate::node::admin::answer(
                    &mut raft,
                    &self.group,
                    &admin,
                    &self.cluster_id,
                    now,
                );
                let _ = reply.send(answer);
            }
            Call::Raft(request) => {
                let token = self.next_token;
                self.next_token += 1;
                self.replies.insert(token, reply);
                self.step(Input::Request { token, request });
            }
        }
    }
}
