//! A shard running the `fetch` and/or `snapshot` roles: it applies the raft shard's
//! publications, answers Fetch and FetchSnapshot from them with the core's rules
//! (`raft::serve`), parks long-polls itself, and sends the replicas' progress back to the
//! raft shard (voters' at once, observers' gathered every `OBSERVER_PROGRESS_MS`).

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_channel::oneshot;
use futures_lite::future;
use tracing::{error, warn};

use super::mailbox::Mailbox;
use super::pacing::Pacing;
use super::publication::{Generation, Publication};
use super::reader::{self, LogReader};
use super::view::{FetchView, Parking, Ticket};
use crate::constants::COMPLAINT_INTERVAL_MS;
use crate::log::snapshot_io::SnapshotFile;
use crate::logsafe::{RateLimit, ReplicaShown, Untrusted, UntrustedOr};
use crate::net::frame_out::Chunk;
use crate::net::stop::StopSignal;
use crate::protocol::ErrorCode;
use crate::raft::message::{FetchRequest, FetchSnapshotRequest, Records, Response, SnapshotBytes};
use crate::raft::serve::{self, FetchDecision, Progress};
use crate::raft::ReplicaKey;

/// How often observers' progress goes to the raft shard (voters' goes at once).
pub const OBSERVER_PROGRESS_MS: u64 = 50;

/// What a serving shard tells the raft shard.
#[derive(Debug)]
pub enum Report {
    /// Observers' positions from valid Fetches.
    Progress(Vec<Progress>),
    /// A voter's position; the answer is the high watermark once the core has counted it.
    VoterProgress(Progress, oneshot::Sender<Option<i64>>),
    /// A FetchSnapshot chunk was served to `replica` in `leader_epoch` (check-quorum counts it).
    SnapshotServed {
        replica: ReplicaKey,
        leader_epoch: i32,
    },
}

/// Where reports go (the node sends them to the raft shard's executor).
pub type ReportSink = Rc<dyn Fn(Report)>;

/// Wakes every waiter at each publication.
#[derive(Default)]
struct Published {
    count: Cell<u64>,
    wakers: RefCell<Vec<std::task::Waker>>,
}

impl Published {
    fn happened(&self) {
        self.count.set(self.count.get() + 1);
        for w in self.wakers.borrow_mut().drain(..) {
            w.wake();
        }
    }

    /// Whether a task waits in `next` (or did, and has not been woken since).
    fn waiting(&self) -> bool {
        !self.wakers.borrow().is_empty()
    }

    async fn next(&self) {
        let seen = self.count.get();
        std::future::poll_fn(|cx| {
            if self.count.get() != seen {
                return std::task::Poll::Ready(());
            }
            self.wakers.borrow_mut().push(cx.waker().clone());
            std::task::Poll::Pending
        })
        .await
    }
}

/// Chunks of a snapshot download read ahead of the follower. One was not enough to keep the
/// disk busy: each 8 MiB read waited for the answer before it to be sent and the next asked.
/// Three were worse than two on this machine's virtual disk, which completes the reads in
/// flight together: three took longer to come back, and the disk then idled while they were
/// sent (a 256 MiB download at 0.76-0.95x the disk's read with three, 0.99-1.09x with two, in
/// alternating runs).
const SNAPSHOT_READ_AHEAD: usize = 2;

type ChunkRead = Result<
    Option<crate::log::snapshot_io::UncheckedChunk>,
    crate::log::snapshot_io::SnapshotFileError,
>;

struct SnapshotAhead {
    id: crate::raft::OffsetAndEpoch,
    position: u64,
    max_bytes: usize,
    read: glommio::task::JoinHandle<ChunkRead>,
}

pub struct Serving {
    dir: PathBuf,
    view: RefCell<Option<FetchView>>,
    reader: RefCell<LogReader>,
    parking: RefCell<Parking>,
    parked: RefCell<HashMap<Ticket, oneshot::Sender<()>>>,
    /// Observers' answers at most once per interval (`fetch::pacing`).
    pacing: Pacing,
    published: Published,
    /// Publications from a raft shard on another thread, applied when this shard next looks
    /// (`catch_up`) or when a post wakes it (`fetch::mailbox`); `None` on the raft shard.
    mailbox: RefCell<Option<Rc<Mailbox<Publication>>>>,
    generation: Generation,
    report: ReportSink,
    observers: RefCell<HashMap<i32, Progress>>,
    /// Per voter id: the connection and read-fence round of the last Fetch answer sent to it
    /// (`raft::fence`).
    answered: RefCell<HashMap<i32, (u64, u64)>>,
    /// Whether this shard serves FetchSnapshot (the snapshot role): only then is the latest
    /// snapshot opened before anyone asks for it (`open_latest_snapshot`).
    serves_snapshots: bool,
    /// The snapshot being streamed, its structure checked once when opened.
    snapshot: RefCell<Option<Rc<SnapshotFile>>>,
    /// The snapshot `open_latest_snapshot` is opening, if any; `snapshot_opened` wakes those
    /// that wait for it.
    snapshot_opening: Cell<Option<crate::raft::OffsetAndEpoch>>,
    snapshot_opened: Published,
    /// The last snapshot `open_latest_snapshot` tried to open (once per snapshot, so a corrupt
    /// one is not walked again at every publication).
    snapshot_tried: Cell<Option<crate::raft::OffsetAndEpoch>>,
    /// The chunks after the last one served, being read for the FetchSnapshots that follow
    /// (at most `SNAPSHOT_READ_AHEAD` of them, in order).
    snapshot_ahead: RefCell<VecDeque<SnapshotAhead>>,
    started: Instant,
    /// "named another cluster" (a flood of forged frames must not flood the log).
    wrong_cluster_said: RateLimit,
    /// "not serving a corrupt snapshot": every FetchSnapshot of a follower asks again.
    corrupt_snapshot_said: RateLimit,
    /// "cannot read the log for a fetch".
    unreadable_said: RateLimit,
}

impl Serving {
    /// `dir`: the partition directory (absolute).
    /// `cache_bytes`: the batch cache's budget (`ringraft.batch.cache.bytes`).
    /// `observer_interval`: `ringraft.fetch.observer.interval.ms` (zero: observers are
    /// answered as soon as voters are).
    /// `serves_snapshots`: the shard has the snapshot role.
    pub fn new(
        dir: PathBuf,
        cache_bytes: usize,
        observer_interval: Duration,
        generation: Generation,
        report: ReportSink,
        serves_snapshots: bool,
    ) -> Rc<Serving> {
        Rc::new(Serving {
            dir,
            view: RefCell::new(None),
            reader: RefCell::new(LogReader::new(cache_bytes)),
            parking: RefCell::new(Parking::default()),
            parked: RefCell::new(HashMap::new()),
            pacing: Pacing::new(observer_interval),
            published: Published::default(),
            mailbox: RefCell::new(None),
            generation,
            report,
            observers: RefCell::new(HashMap::new()),
            answered: RefCell::new(HashMap::new()),
            serves_snapshots,
            snapshot: RefCell::new(None),
            snapshot_opening: Cell::new(None),
            snapshot_opened: Published::default(),
            snapshot_tried: Cell::new(None),
            snapshot_ahead: RefCell::new(VecDeque::new()),
            started: Instant::now(),
            wrong_cluster_said: RateLimit::new(Duration::from_millis(COMPLAINT_INTERVAL_MS)),
            corrupt_snapshot_said: RateLimit::repeated_warning(),
            unreadable_said: RateLimit::repeated_warning(),
        })
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Applies a publication: the reader learns the new batches (or starts over), the view
    /// takes the new state, and the parked fetches it answers are woken, voters' first
    /// (observers' at the next tick when they are paced).
    pub fn publish(&self, p: Publication) {
        {
            let mut reader = self.reader.borrow_mut();
            let flushed = p.log.flushed_offset();
            match &p.reader {
                Some(reset) => reader.reset(reset, flushed),
                None => reader.appended(&p.appended, flushed, &self.dir),
            }
        }
        {
            let mut view = self.view.borrow_mut();
            match view.as_mut() {
                Some(v) => v.apply(&p),
                None => *view = Some(FetchView::new(&p)),
            }
        }
        let paced = self.pacing.enabled();
        self.wake_ready(!paced);
        if paced && self.parking.borrow().observers_parked() {
            self.pacing.publication();
        }
        self.published.happened();
    }

    /// Wakes the parked fetches the view answers: voters', and observers' too if `observers`.
    fn wake_ready(&self, observers: bool) {
        self.wake(|parking, view, now| {
            if observers {
                parking.ready(view, now)
            } else {
                parking.ready_voters(view, now)
            }
        });
    }

    /// Wakes the parked observers' fetches the view answers whose slot `tick` is.
    fn wake_observers_at(&self, tick: u64) {
        self.wake(|parking, view, now| {
            parking.ready_observers(view, now, |replica| self.pacing.is_slot(replica, tick))
        });
    }

    /// Wakes the parked fetches `pick` takes out of parking.
    fn wake(
        &self,
        pick: impl FnOnce(&mut Parking, &FetchView, u64) -> Vec<(Ticket, FetchRequest)>,
    ) {
        let now = self.now_ms();
        let ready = {
            let view = self.view.borrow();
            let Some(view) = view.as_ref() else { return };
            pick(&mut self.parking.borrow_mut(), view, now)
        };
        let mut parked = self.parked.borrow_mut();
        for (ticket, _) in ready {
            if let Some(wake) = parked.remove(&ticket) {
                let _ = wake.send(());
            }
        }
    }

    /// Ticks for paced observers (`fetch::pacing`): at most once per interval, and only when
    /// one waits. Until `stop`; returns at once when observers are not paced.
    pub async fn run_ticks(self: Rc<Self>, stop: StopSignal) {
        if !self.pacing.enabled() {
            return;
        }
        while !stop.is_stopped() {
            future::or(self.pacing.next_tick_due(), stop.wait()).await;
            if stop.is_stopped() {
                break;
            }
            let tick = self.pacing.tick(self.parking.borrow().observers_parked());
            self.wake_observers_at(tick);
        }
    }

    /// Applies publications from the raft shard's thread as posts wake this shard, until the
    /// raft shard's poster goes or `stop`. Posts wake it only while something here waits for
    /// them (`listen_while_waiting`); the rest are applied when it next looks (`catch_up`).
    pub async fn run_publications(self: Rc<Self>, mailbox: Mailbox<Publication>, stop: StopSignal) {
        let mailbox = Rc::new(mailbox);
        *self.mailbox.borrow_mut() = Some(mailbox.clone());
        loop {
            let next = future::or(mailbox.next(), async {
                stop.wait().await;
                None
            })
            .await;
            let Some(posted) = next else { break };
            for p in posted {
                self.publish(p);
            }
            self.open_latest_snapshot();
            self.listen_while_waiting();
        }
    }

    /// Applies what the raft shard has posted and this shard has not applied yet. Every entry
    /// point that answers from the view calls this first.
    fn catch_up(&self) {
        let mailbox = self.mailbox.borrow().clone();
        if let Some(mailbox) = mailbox {
            for p in mailbox.take() {
                self.publish(p);
            }
        }
    }

    /// Before waiting for a publication: posts wake this shard from now on, and what was
    /// posted already is applied (which may end the wait at once).
    fn expect_publications(&self) {
        if let Some(mailbox) = self.mailbox.borrow().as_ref() {
            mailbox.listen(true);
        }
        self.catch_up();
    }

    /// Posts wake this shard while a fetch is parked on it or a task waits for the next
    /// publication, and only then.
    fn listen_while_waiting(&self) {
        let waiting = !self.parked.borrow().is_empty() || self.published.waiting();
        if let Some(mailbox) = self.mailbox.borrow().as_ref() {
            mailbox.listen(waiting);
        }
    }

    /// Sends observers' progress every `OBSERVER_PROGRESS_MS`, until `stop`.
    pub async fn run_progress(self: Rc<Self>, stop: StopSignal) {
        while !stop.is_stopped() {
            let period = Duration::from_millis(OBSERVER_PROGRESS_MS);
            future::or(glommio::timer::sleep(period), stop.wait()).await;
            let batch: Vec<Progress> = self
                .observers
                .borrow_mut()
                .drain()
                .map(|(_, p)| p)
                .collect();
            if !batch.is_empty() {
                (self.report)(Report::Progress(batch));
            }
        }
    }

    /// Sends `p` on. A voter's goes at once, and the answer is the high watermark the core
    /// computed with it: a Fetch parked after it waits for a higher one, as a Kafka leader's
    /// does (the Fetch that moves the high watermark is parked after the move, not woken by
    /// it — otherwise every commit would cost each follower an extra round trip).
    /// The round the previous answer to `replica` on `connection` was sent in (0: none).
    fn answered_round(&self, replica: i32, connection: u64) -> u64 {
        match self.answered.borrow().get(&replica) {
            Some((c, round)) if *c == connection => *round,
            _ => 0,
        }
    }

    fn note_progress(&self, p: Progress, voter: bool) -> Option<oneshot::Receiver<Option<i64>>> {
        if voter {
            let (tx, rx) = oneshot::channel();
            (self.report)(Report::VoterProgress(p, tx));
            Some(rx)
        } else {
            self.observers.borrow_mut().insert(p.replica.id, p);
            None
        }
    }

    fn complain(&self, what: &str, replica: i32, theirs: &Option<String>) {
        if let Some(unsaid) = self.wrong_cluster_said.due(Instant::now()) {
            let ours = self
                .view
                .borrow()
                .as_ref()
                .map(|v| v.facts.cluster_id.clone())
                .unwrap_or_default();
            // The peer's cluster id is theirs to choose: escaped and cut (`logsafe`).
            warn!(replica = %ReplicaShown(replica), theirs = %UntrustedOr(theirs.as_deref()),
                ours = %Untrusted(&ours), unsaid,
                "{what} named another cluster; answered INCONSISTENT_CLUSTER_ID");
        }
    }

    /// Is `replica` a voter, as far as this shard knows?
    pub fn is_voter(&self, replica: ReplicaKey) -> bool {
        self.catch_up();
        self.view
            .borrow()
            .as_ref()
            .is_some_and(|v| v.is_voter(replica))
    }

    /// Where the leader this shard last heard of listens (empty when unknown): the hint a
    /// refused Produce carries (`node::produce`).
    pub fn leader_endpoints(&self) -> Vec<crate::raft::Endpoint> {
        self.catch_up();
        self.view
            .borrow()
            .as_ref()
            .map(|v| v.facts.leader_endpoints.clone())
            .unwrap_or_default()
    }

    async fn view_ready(&self) {
        self.catch_up();
        while self.view.borrow().is_none() {
            self.next_publication().await;
        }
    }

    /// Waits for the next publication, or returns at once when one was posted and not yet
    /// applied (its caller checks again what it waits for).
    async fn next_publication(&self) {
        let seen = self.published.count.get();
        self.expect_publications();
        if self.published.count.get() == seen {
            self.published.next().await;
        }
    }

    /// Answers a Fetch that came on `connection` (see the module doc of `crate::fetch` for the
    /// generation check): the response, and the batches its records are, as read (the wire
    /// edge sends them without copying).
    pub async fn fetch(&self, connection: u64, r: FetchRequest) -> (Response, Vec<Chunk>) {
        self.view_ready().await;
        let observer = !self.is_voter(r.replica);
        // The pacing tick this Fetch went at (an observer's turn, or its wake from parking).
        let mut released = 0;
        if observer {
            released = self.pacing.wait_turn(r.replica.id, r.max_wait_ms).await;
        }
        let mut woken = false;
        loop {
            let (decision, generation, counted, answered) = {
                let view = self.view.borrow();
                let view = view.as_ref().expect("ready");
                // A voter's answer is sent in this round (`raft::fence`).
                let answered = view.is_voter(r.replica).then_some((
                    r.replica.id,
                    connection,
                    view.facts.read_round,
                ));
                if woken {
                    let resp = serve::parked_answer(&view.facts, &view.log, &r);
                    (FetchDecision::Answer(resp), view.generation, None, answered)
                } else {
                    let out = view.decide(&r, self.now_ms());
                    if out.wrong_cluster {
                        self.complain("a Fetch", r.replica.id, &r.cluster_id);
                    }
                    let counted = out.progress.and_then(|p| {
                        let p = Progress {
                            answered_round: self.answered_round(r.replica.id, connection),
                            ..p
                        };
                        self.note_progress(p, view.is_voter(p.replica))
                    });
                    (out.decision, view.generation, counted, answered)
                }
            };
            let mut resp = match decision {
                FetchDecision::Park { deadline_ms } => {
                    // The high watermark with this Fetch counted (none if the core is gone).
                    let baseline = match counted {
                        Some(rx) => rx.await.ok().flatten(),
                        None => None,
                    };
                    let (wake, woke) = oneshot::channel();
                    let ticket = {
                        let view = self.view.borrow();
                        let view = view.as_ref().expect("ready");
                        let now = self.now_ms();
                        let mut parking = self.parking.borrow_mut();
                        let ticket = parking.park(r.clone(), view, deadline_ms, baseline);
                        // Records may have come while the core counted the Fetch.
                        if parking.ready_now(ticket, view, now) {
                            parking.cancel(ticket);
                            drop(parking);
                            woken = true;
                            continue;
                        }
                        ticket
                    };
                    self.parked.borrow_mut().insert(ticket, wake);
                    // What was posted meanwhile may answer it (and wakes it through `wake`).
                    self.expect_publications();
                    let wait = Duration::from_millis(deadline_ms.saturating_sub(self.now_ms()));
                    future::or(
                        async {
                            let _ = woke.await;
                        },
                        glommio::timer::sleep(wait),
                    )
                    .await;
                    self.parking.borrow_mut().cancel(ticket);
                    self.parked.borrow_mut().remove(&ticket);
                    released = self.pacing.ticks();
                    woken = true;
                    continue;
                }
                FetchDecision::Answer(resp) => resp,
            };
            // The most this answer may carry (no records to send: the observer is caught up).
            let limit = match resp.records {
                Records::Read { max_bytes, .. } => max_bytes,
                _ => 0,
            };
            let chunks = self.read_records(&resp.records).await;
            if self.generation.get() != generation {
                // The log was rewritten since this view: the bytes may be the new log's. Wait
                // for the publication that says so and answer again from it.
                while self
                    .view
                    .borrow()
                    .as_ref()
                    .is_some_and(|v| v.generation == generation)
                {
                    self.next_publication().await;
                }
                continue;
            }
            if let Some((replica, connection, round)) = answered {
                self.answered
                    .borrow_mut()
                    .insert(replica, (connection, round));
            }
            if observer {
                // Caught up: the answer is far from full (a catching-up observer's are cut at
                // the limit, give or take a batch).
                let sent: usize = chunks.iter().map(|c| c.as_ref().len()).sum();
                self.pacing
                    .answered(r.replica.id, sent < limit / 2 || limit == 0, released);
            }
            resp.records = Records::None;
            return (Response::Fetch(resp), chunks);
        }
    }

    /// The batches `records` names, as read (none when it names none, or the log cannot be
    /// read: the answer then carries no records and the replica asks again).
    async fn read_records(&self, records: &Records) -> Vec<Chunk> {
        let Records::Read { offset, max_bytes } = *records else {
            return Vec::new();
        };
        match reader::read(&self.reader, offset, max_bytes).await {
            Ok(chunks) => chunks,
            Err(e) => {
                if let Some(unsaid) = self.unreadable_said.due(Instant::now()) {
                    warn!(offset, error = %e, unsaid, "cannot read the log for a fetch");
                }
                Vec::new()
            }
        }
    }

    /// Answers a FetchSnapshot with a chunk of the snapshot file, read through the ring and
    /// checked (a corrupt chunk is not sent: SNAPSHOT_NOT_FOUND, and the reason is logged).
    /// Snapshot files never change once complete, and a deleted one stays readable through
    /// the open file, so no generation check is needed here. The response, and its chunk.
    pub async fn fetch_snapshot(&self, r: FetchSnapshotRequest) -> (Response, Vec<Chunk>) {
        self.view_ready().await;
        let outcome = {
            let view = self.view.borrow();
            let view = view.as_ref().expect("ready");
            serve::fetch_snapshot(&view.facts, &view.log, &r)
        };
        if outcome.wrong_cluster {
            self.complain("a FetchSnapshot", r.replica.id, &r.cluster_id);
        }
        if let Some(replica) = outcome.served {
            (self.report)(Report::SnapshotServed {
                replica,
                leader_epoch: outcome.response.leader_epoch,
            });
        }
        let mut resp = outcome.response;
        let mut chunks = Vec::new();
        if let SnapshotBytes::Read {
            id,
            position,
            max_bytes,
        } = resp.bytes
        {
            match self.snapshot_chunk(id, position, max_bytes).await {
                Ok(Some(chunk)) => chunks.push(Chunk::Read(chunk)),
                Ok(None) => {}
                Err(e) => {
                    if let Some(unsaid) = self.corrupt_snapshot_said.due(Instant::now()) {
                        error!(error = %e, unsaid, "not serving a corrupt snapshot");
                    }
                    resp.partition_error = ErrorCode::SNAPSHOT_NOT_FOUND;
                    resp.size = -1;
                }
            }
        }
        resp.bytes = SnapshotBytes::None;
        (Response::FetchSnapshot(resp), chunks)
    }

    /// Opens the log's latest snapshot, if this shard serves snapshots and has not opened it.
    /// The open walks every batch header (262 serial reads for 256 MiB of 1 MiB batches,
    /// about 8 ms); done here, as the snapshot is published, the first FetchSnapshot of a
    /// follower that needs it does not wait for the walk. A snapshot that cannot be opened is
    /// left for `snapshot_chunk`, which reports why when it is asked for.
    fn open_latest_snapshot(self: &Rc<Self>) {
        if !self.serves_snapshots {
            return;
        }
        let latest = self
            .view
            .borrow()
            .as_ref()
            .and_then(|v| v.log.latest_snapshot());
        let Some(id) = latest else { return };
        let opened = self.snapshot.borrow().as_ref().is_some_and(|s| s.id == id);
        if opened || self.snapshot_tried.get() == Some(id) {
            return;
        }
        self.snapshot_tried.set(Some(id));
        self.snapshot_opening.set(Some(id));
        let serving = self.clone();
        glommio::spawn_local(async move {
            let file = SnapshotFile::open(&serving.dir, id).await;
            if serving.snapshot_opening.get() == Some(id) {
                serving.snapshot_opening.set(None);
            }
            if let Ok(file) = file {
                // Kept unless it is held already, or a newer snapshot came meanwhile.
                let current = serving.snapshot.borrow().as_ref().map(|s| s.id);
                if current == Some(id) || serving.snapshot_tried.get() != Some(id) {
                    file.close().await;
                } else {
                    serving.keep_snapshot(Rc::new(file));
                }
            }
            serving.snapshot_opened.happened();
        })
        .detach();
    }

    /// Makes `file` the snapshot being streamed, closing the one before it once no read
    /// holds it.
    fn keep_snapshot(&self, file: Rc<SnapshotFile>) {
        let old = self.snapshot.borrow_mut().replace(file);
        if let Some(old) = old.and_then(|o| Rc::try_unwrap(o).ok()) {
            glommio::spawn_local(old.close()).detach();
        }
    }

    async fn snapshot_chunk(
        &self,
        id: crate::raft::OffsetAndEpoch,
        position: u64,
        max_bytes: usize,
    ) -> Result<Option<glommio::io::ReadResult>, crate::log::snapshot_io::SnapshotFileError> {
        // Being opened already: wait for that open rather than walk the file twice.
        while self.snapshot_opening.get() == Some(id) {
            self.snapshot_opened.next().await;
        }
        let current = self.snapshot.borrow().clone().filter(|s| s.id == id);
        let file = match current {
            Some(file) => file,
            None => {
                let file = Rc::new(SnapshotFile::open(&self.dir, id).await?);
                self.keep_snapshot(file.clone());
                file
            }
        };
        let ahead = {
            let mut queue = self.snapshot_ahead.borrow_mut();
            // Reads for another snapshot or another place are dropped (they finish unseen).
            while queue
                .front()
                .is_some_and(|a| (a.id, a.position, a.max_bytes) != (id, position, max_bytes))
            {
                queue.pop_front();
            }
            queue.pop_front()
        };
        let read = match ahead {
            Some(a) => match a.read.await {
                Some(read) => read,
                None => file.read_chunk_unchecked(position, max_bytes).await,
            },
            None => file.read_chunk_unchecked(position, max_bytes).await,
        };
        let mut started = false;
        if let Ok(Some(_)) = &read {
            // Downloads are sequential: keep the next chunks being read while this one is
            // checked and sent. Where each ends is known from the batch list, without
            // reading. Started before this chunk's check: a read-ahead whose read finished
            // with this one's (this disk completes the reads in flight together) would
            // otherwise wait for both checks, and the disk with it.
            let mut queue = self.snapshot_ahead.borrow_mut();
            let mut next = queue.back().map_or_else(
                || file.chunk_end(position, max_bytes),
                |a| file.chunk_end(a.position, max_bytes),
            );
            while queue.len() < SNAPSHOT_READ_AHEAD && next < file.size() {
                let reader = file.clone();
                let read = glommio::spawn_local(async move {
                    reader.read_chunk_unchecked(next, max_bytes).await
                })
                .detach();
                queue.push_back(SnapshotAhead {
                    id,
                    position: next,
                    max_bytes,
                    read,
                });
                started = true;
                next = file.chunk_end(next, max_bytes);
            }
        }
        if started {
            // Let the reactor submit the reads before this chunk is checked and sent (as the
            // log's read-ahead does, `reader::SUBMIT_TURN`).
            glommio::timer::sleep(super::reader::SUBMIT_TURN).await;
        }
        let chunk = read.and_then(|read| read.map(|read| file.check(read)).transpose());
        if chunk.is_err() {
            *self.snapshot.borrow_mut() = None;
            self.snapshot_ahead.borrow_mut().clear();
        }
        chunk
    }
}
