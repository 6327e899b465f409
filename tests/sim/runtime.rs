//! The simulator's runtime for the node's own executor (`ringraft::node::executor`): each
//! running node is one `Executor::run` future over a `SimStorage` (its `Disk`, which loses what
//! was not flushed when the node crashes), a `SimTransport` (into the cluster's network) and a
//! `SimClock` (the cluster's simulated time). The cluster polls a node's future after every
//! event that concerns it, with a no-op waker: every future here is ready or not by looking at
//! shared state, so a poll decides the same way on every replay of a seed.
//!
//! What the executor does to the world is recorded in `NodeIo` and collected by the cluster
//! after each poll: I/O to schedule (an election-state write and each flush take a simulated
//! disk delay), the earliest timer, messages to route, and observations for the checkers.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_channel::oneshot;
use futures_lite::Stream;
use ringraft::node::call::{Answer, Call};
use ringraft::node::executor::{Clock, Executor, Fatal, Probe, Storage, Transport, Unavailable};
use ringraft::node::handle::{ExecutorInput, SnapshotPart};
use ringraft::raft::{
    ElectionState, Endpoint, LogOp, OffsetAndEpoch, Raft, Request, RequestId, Response, Time, Token,
};
use ringraft::records::builder::BatchBuilder;
use ringraft::records::control::{control_batch, ControlRecord};

use super::cluster::Disk;

/// A disk operation that takes simulated time.
#[derive(Debug, Clone)]
pub enum IoKind {
    Election(ElectionState),
    /// A flush of the first `batches` batches of the log.
    Flush {
        batches: usize,
    },
}

/// What the executor asked of the world since the cluster last looked.
#[derive(Debug)]
pub enum Outgoing {
    Request {
        id: RequestId,
        to: i32,
        address: Option<Endpoint>,
        request: Request,
    },
    Response {
        token: Token,
        response: Response,
        data: Vec<Bytes>,
    },
}

/// For the checkers: a log operation applied, with what it cut and what had been delivered.
#[derive(Debug)]
pub struct Applied {
    pub op: LogOp,
    pub truncated: Vec<(i64, i64, i32, Bytes)>,
    pub floor: i64,
}

/// State shared by one incarnation's storage, transport and clock, and the cluster.
#[derive(Default)]
pub struct NodeIo {
    /// The node's clock (the cluster's time plus its offset).
    pub now_ms: Cell<u64>,
    next_io: Cell<u64>,
    /// I/O started and not yet handed to the cluster to schedule.
    pub started: RefCell<Vec<(u64, IoKind)>>,
    done: RefCell<BTreeMap<u64, i64>>,
    /// The earliest time a pending sleep wants to wake.
    pub timer: Cell<Option<u64>>,
    pub outbox: RefCell<Vec<Outgoing>>,
    pub applied: RefCell<Vec<Applied>>,
    inputs: RefCell<VecDeque<ExecutorInput>>,
    /// Requests handed to the executor and not answered yet, by the cluster's token.
    answers: RefCell<Vec<(Token, oneshot::Receiver<Answer>)>>,
    /// Flushes started and not completed.
    pub flushes_in_flight: Cell<usize>,
    /// Publications for the node's fetch shard, not yet handed to the cluster.
    pub publications: RefCell<Vec<ringraft::fetch::Publication>>,
}

impl NodeIo {
    fn start(&self, kind: IoKind) -> u64 {
        let id = self.next_io.get();
        self.next_io.set(id + 1);
        if matches!(kind, IoKind::Flush { .. }) {
            self.flushes_in_flight.set(self.flushes_in_flight.get() + 1);
        }
        self.started.borrow_mut().push((id, kind));
        id
    }

    /// The cluster completed I/O `id`; `value` is what its future resolves with.
    pub fn complete(&self, id: u64, value: i64, flush: bool) {
        if flush {
            self.flushes_in_flight
                .set(self.flushes_in_flight.get().saturating_sub(1));
        }
        self.done.borrow_mut().insert(id, value);
    }

    pub fn push_input(&self, input: ExecutorInput) {
        self.inputs.borrow_mut().push_back(input);
    }

    /// Hands `request` to the executor through its one door for requests, as the node's wire
    /// edge does; the answer is collected under `token` (`take_answers`).
    pub fn push_request(&self, token: Token, request: Request) {
        let (reply, answer) = oneshot::channel();
        self.answers.borrow_mut().push((token, answer));
        self.push_input(ExecutorInput::Request {
            call: Call::Raft(request),
            reply,
        });
    }

    /// The answers the executor has given since the cluster last looked, in the order the
    /// requests came. A request whose reply was dropped (the run ended) is forgotten.
    pub fn take_answers(&self) -> Vec<Outgoing> {
        let mut out = Vec::new();
        self.answers
            .borrow_mut()
            .retain_mut(|(token, answer)| match answer.try_recv() {
                Ok(None) => true,
                Ok(Some(Answer::Raft { response, data })) => {
                    out.push(Outgoing::Response {
                        token: *token,
                        response,
                        data,
                    });
                    false
                }
                Ok(Some(other)) => panic!("an admin answer to a Raft request: {other:?}"),
                Err(_) => false,
            });
        out
    }

    /// A future that resolves once the cluster has completed I/O `id`.
    fn wait(self: &Rc<Self>, id: u64) -> IoWait {
        IoWait {
            io: self.clone(),
            id,
        }
    }
}

struct IoWait {
    io: Rc<NodeIo>,
    id: u64,
}

impl Future for IoWait {
    type Output = i64;
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<i64> {
        match self.io.done.borrow_mut().remove(&self.id) {
            Some(value) => Poll::Ready(value),
            None => Poll::Pending,
        }
    }
}

/// The executor's input stream: what the cluster pushed, in order.
pub struct Inputs(pub Rc<NodeIo>);

impl Stream for Inputs {
    type Item = ExecutorInput;
    fn poll_next(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<ExecutorInput>> {
        match self.0.inputs.borrow_mut().pop_front() {
            Some(input) => Poll::Ready(Some(input)),
            None => Poll::Pending,
        }
    }
}

pub struct SimStorage {
    pub io: Rc<NodeIo>,
    pub disk: Rc<RefCell<Disk>>,
}

impl Storage for SimStorage {
    async fn persist_election(&self, state: &ElectionState) -> Result<(), Fatal> {
        let id = self.io.start(IoKind::Election(state.clone()));
        self.io.wait(id).await;
        Ok(())
    }

    async fn apply(&self, op: &LogOp, floor: i64) -> Result<(), Fatal> {
        let truncated = self.disk.borrow_mut().log.apply(op);
        self.io.applied.borrow_mut().push(Applied {
            op: op.clone(),
            truncated,
            floor,
        });
        Ok(())
    }

    fn flush(&self) -> Pin<Box<dyn Future<Output = Result<i64, Fatal>>>> {
        let batches = self.disk.borrow().log.batches.len();
        let id = self.io.start(IoKind::Flush { batches });
        let wait = self.io.wait(id);
        Box::pin(async move { Ok(wait.await) })
    }

    fn end_offset(&self) -> i64 {
        self.disk.borrow().log.end()
    }

    fn flushed_offset(&self) -> i64 {
        self.disk.borrow().log.durable_end()
    }

    async fn read(&self, offset: i64, max_bytes: usize) -> Result<Vec<Bytes>, Fatal> {
        Ok(self.disk.borrow().log.read(offset, max_bytes))
    }

    async fn read_snapshot(
        &self,
        id: OffsetAndEpoch,
        position: u64,
        max_bytes: usize,
    ) -> Result<Option<Bytes>, Unavailable> {
        let disk = self.disk.borrow();
        let Some(data) = disk.log.snapshots.get(&id) else {
            return Err(Unavailable(format!("no snapshot {id:?}")));
        };
        let start = position as usize;
        if start >= data.len() {
            return Ok(None);
        }
        let end = (start + max_bytes).min(data.len());
        Ok(Some(data.slice(start..end)))
    }

    async fn write_snapshot(
        &self,
        id: OffsetAndEpoch,
        header: Vec<ControlRecord>,
        mut parts: futures_channel::mpsc::Receiver<SnapshotPart>,
        timestamp_ms: i64,
    ) -> Result<Option<(u64, bool)>, Fatal> {
        let mut values = Vec::new();
        // The simulator's applications send every part before the input: all are here.
        let delete_log_before = loop {
            match parts.try_recv() {
                Ok(SnapshotPart::Values(v)) => values.extend(v),
                Ok(SnapshotPart::Finish { delete_log_before }) => break delete_log_before,
                Err(_) => return Ok(None),
            }
        };
        let content = snapshot_bytes(id, &header, &values, timestamp_ms);
        let size = content.len() as u64;
        // Written and synced at once: the simulator's snapshots take no disk time.
        self.disk
            .borrow_mut()
            .log
            .snapshots
            .insert(id, Bytes::from(content));
        Ok(Some((size, delete_log_before)))
    }

    fn log_bytes(&self) -> u64 {
        let disk = self.disk.borrow();
        disk.log.batches.iter().map(|b| b.3.len() as u64).sum()
    }

    async fn snapshot_timestamp(&self, id: OffsetAndEpoch) -> Option<i64> {
        let disk = self.disk.borrow();
        ringraft::records::snapshot::header_timestamp(disk.log.snapshots.get(&id)?)
    }
}

/// A whole snapshot file as the node writes one: the header batch (SnapshotHeader and the voter
/// set), a data batch of `values`, the footer.
pub fn snapshot_bytes(
    id: OffsetAndEpoch,
    header: &[ControlRecord],
    values: &[Vec<u8>],
    timestamp_ms: i64,
) -> Vec<u8> {
    let mut records = vec![ControlRecord::SnapshotHeader {
        last_contained_log_timestamp: timestamp_ms,
    }];
    records.extend(header.iter().cloned());
    let mut content = control_batch(0, id.epoch, timestamp_ms, &records);
    let mut next = records.len() as i64;
    if !values.is_empty() {
        let mut state = BatchBuilder::new(next, id.epoch, timestamp_ms, false);
        for value in values {
            state.append(None, Some(value));
        }
        content.extend(state.finish());
        next += values.len() as i64;
    }
    content.extend(control_batch(
        next,
        id.epoch,
        timestamp_ms,
        &[ControlRecord::SnapshotFooter],
    ));
    content
}

pub struct SimTransport {
    pub io: Rc<NodeIo>,
}

impl Transport for SimTransport {
    fn send_request(
        &mut self,
        id: RequestId,
        to: i32,
        address: Option<Endpoint>,
        request: Request,
    ) {
        self.io.outbox.borrow_mut().push(Outgoing::Request {
            id,
            to,
            address,
            request,
        });
    }
}

pub struct SimClock {
    pub io: Rc<NodeIo>,
}

struct Sleep {
    io: Rc<NodeIo>,
    until: u64,
}

impl Future for Sleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.io.now_ms.get() >= self.until {
            return Poll::Ready(());
        }
        let earliest = self
            .io
            .timer
            .get()
            .map_or(self.until, |t| t.min(self.until));
        self.io.timer.set(Some(earliest));
        Poll::Pending
    }
}

impl Clock for SimClock {
    fn now(&self) -> Time {
        Time::simulated(self.io.now_ms.get())
    }

    fn sleep_until(&self, mono_ms: u64) -> impl Future<Output = ()> {
        Sleep {
            io: self.io.clone(),
            until: mono_ms,
        }
    }
}

/// One running incarnation of a node: its executor's future and what the cluster looks at.
pub struct Running {
    task: Pin<Box<dyn Future<Output = Result<(), Fatal>>>>,
    pub raft: Rc<RefCell<Raft>>,
    pub probe: Rc<Probe>,
    pub io: Rc<NodeIo>,
    /// The node's fetch shard, when the cluster models them (`fetch.rs`).
    pub fetch: Option<super::fetch::SimFetchShard>,
}

impl Running {
    /// `fetch_shard`: serve Fetch on a fetch shard (`Some(skip the generation check)`), or in
    /// the core (`None`). `linger_ms`: `controller.quorum.append.linger.ms`.
    pub fn new(
        raft: Raft,
        disk: Rc<RefCell<Disk>>,
        now_ms: u64,
        fetch_shard: Option<bool>,
        linger_ms: u64,
    ) -> Running {
        let io = Rc::new(NodeIo::default());
        io.now_ms.set(now_ms);
        let storage = Rc::new(SimStorage {
            io: io.clone(),
            disk: disk.clone(),
        });
        let transport = SimTransport { io: io.clone() };
        let clock = SimClock { io: io.clone() };
        let mut executor = Executor::new(raft, storage, transport, clock, Default::default());
        executor.set_append_linger_ms(linger_ms);
        let fetch = fetch_shard.map(|skip_check| {
            let generation = ringraft::fetch::Generation::default();
            let publisher = super::fetch::SimPublisher::new(io.clone(), disk, generation.clone());
            executor.set_publisher(Box::new(publisher));
            super::fetch::SimFetchShard::new(generation, skip_check)
        });
        let (raft, probe) = (executor.raft(), executor.probe());
        let task = Box::pin(executor.run(Inputs(io.clone())));
        Running {
            task,
            raft,
            probe,
            io,
            fetch,
        }
    }

    /// Runs the executor as far as it can go now. `Some` when its loop ended (a graceful stop,
    /// or a fatal error).
    pub fn poll(&mut self) -> Option<Result<(), Fatal>> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match self.task.as_mut().poll(&mut cx) {
            Poll::Ready(result) => Some(result),
            Poll::Pending => None,
        }
    }
}
