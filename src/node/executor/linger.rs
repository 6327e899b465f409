//! `controller.quorum.append.linger.ms`, honoured as Kafka's leader honours it
//! (`BatchAccumulator`): the first append of a run starts the linger, every append that
//! arrives before it ends waits with it, and then they all go to the core in one turn, so they
//! share one flush, one publication and one round of follower fetches. The run goes at once
//! when it holds a full batch's worth of bytes (`BATCH_MAX_BYTES`, Kafka's 8 MiB). A node that
//! does not lead appends nothing, so it refuses at once instead of lingering first.
//!
//! Released, the run is gathered into one record batch (`records::merge`), as Kafka's leader
//! gathers it: one header, one CRC and one place in every fetch answer and follower check
//! instead of one per append. Each append still learns the offset of its own last record. An
//! append whose batches cannot be merged (compressed, transactional, with a producer id) goes
//! to the log as it is, between the merged runs before and after it. A run stops at
//! `BATCH_MAX_BYTES`, so no merged batch is larger than a batch may be.

use std::time::Instant;

use super::*;
use crate::constants::BATCH_MAX_BYTES;
use crate::records::merge::{Merger, Refused};

type AppendReply = oneshot::Sender<Result<i64, ClientError>>;

/// Appends waiting out the linger.
#[derive(Default)]
pub(super) struct Linger {
    /// The configured linger (0: appends go to the core as they arrive).
    pub(super) ms: u64,
    waiting: Vec<Lingering>,
    /// When the run goes to the core (monotonic ms); `None` while nothing waits.
    until: Option<u64>,
    bytes: usize,
}

struct Lingering {
    batch: Vec<u8>,
    check: AppendCheck,
    reply: AppendReply,
    /// When it arrived (commit latency counts the linger).
    arrived: (u64, Instant),
}

impl Linger {
    /// When the lingering appends are due, if any wait.
    pub(super) fn deadline(&self) -> Option<u64> {
        self.until
    }
}

impl<S: Storage + 'static, T: Transport, C: Clock> Executor<S, T, C> {
    /// An application's append: to the core now, or after the linger.
    pub(super) fn append(&mut self, batch: Vec<u8>, check: AppendCheck, reply: AppendReply) {
        let arrived = (self.clock.now().mono_ms, Instant::now());
        if self.linger.ms == 0 || !self.raft.borrow().is_leader() {
            self.append_now(batch, check, reply, arrived);
            return;
        }
        let linger = &mut self.linger;
        linger.until.get_or_insert(arrived.0 + linger.ms);
        linger.bytes += batch.len();
        linger.waiting.push(Lingering {
            batch,
            check,
            reply,
            arrived,
        });
        if linger.bytes >= BATCH_MAX_BYTES {
            self.release_lingering();
        }
    }

    /// Hands the lingering appends to the core once their linger is over.
    pub(super) fn release_due_appends(&mut self, now_ms: u64) {
        if self.linger.until.is_some_and(|until| until <= now_ms) {
            self.release_lingering();
        }
    }

    fn release_lingering(&mut self) {
        self.linger.until = None;
        self.linger.bytes = 0;
        let waiting = std::mem::take(&mut self.linger.waiting);
        let mut run = Run::default();
        // Where the next append will start: its `AppendCheck` is checked against it.
        let mut end = self.raft.borrow().log_end_offset();
        for a in waiting {
            if let Err(e) = self.check_append_at(a.check, end) {
                let _ = a.reply.send(Err(e));
                continue;
            }
            let mut added = run.merger.add(&a.batch, BATCH_MAX_BYTES);
            if added == Err(Refused::Full) {
                self.append_run(std::mem::take(&mut run));
                added = run.merger.add(&a.batch, BATCH_MAX_BYTES);
            }
            match added {
                Ok(offsets) => {
                    end += offsets;
                    run.members.push(Member {
                        batch: a.batch,
                        reply: a.reply,
                        arrived: a.arrived,
                        offsets,
                    });
                }
                Err(_) => {
                    self.append_run(std::mem::take(&mut run));
                    self.append_checked(a.batch, a.reply, a.arrived);
                    end = self.raft.borrow().log_end_offset();
                }
            }
        }
        self.append_run(run);
    }

    /// Appends a merged run as one batch; a run of one append goes as it came.
    fn append_run(&mut self, run: Run) {
        let Run {
            merger,
            mut members,
        } = run;
        if members.len() <= 1 {
            if let Some(m) = members.pop() {
                self.append_checked(m.batch, m.reply, m.arrived);
            }
            return;
        }
        let Some(merged) = merger.finish() else {
            // Not reached (a run holds at most `BATCH_MAX_BYTES` and some records); if it
            // were, each append goes as it came.
            for m in members {
                self.append_checked(m.batch, m.reply, m.arrived);
            }
            return;
        };
        let appended = self.raft.borrow_mut().append(merged);
        match appended {
            Ok((first, _)) => {
                let mut next = first;
                for m in members {
                    next += m.offsets;
                    self.appended(next - m.offsets, next - 1, m.reply, m.arrived);
                }
            }
            Err(e) => {
                let e = append_error(e);
                for m in members {
                    let _ = m.reply.send(Err(e.clone()));
                }
            }
        }
    }

    fn append_now(
        &mut self,
        batch: Vec<u8>,
        check: AppendCheck,
        reply: AppendReply,
        arrived: (u64, Instant),
    ) {
        match self.check_append(check) {
            Ok(()) => self.append_checked(batch, reply, arrived),
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
    }

    /// Appends one application's batches as they came (their checks passed).
    fn append_checked(&mut self, batch: Vec<u8>, reply: AppendReply, arrived: (u64, Instant)) {
        let appended = self.raft.borrow_mut().append(batch);
        match appended {
            Ok((first, last)) => self.appended(first, last, reply, arrived),
            Err(e) => {
                let _ = reply.send(Err(append_error(e)));
            }
        }
    }

    /// An append took offsets `first..=last`: `reply` is answered once they commit.
    fn appended(&mut self, first: i64, last: i64, reply: AppendReply, arrived: (u64, Instant)) {
        self.commits.entry(last).or_default().push(reply);
        self.commit_started.entry(last).or_insert(arrived);
        let records = (last - first + 1) as f64;
        let mut appended = self.stats.appended_records.borrow_mut();
        appended.record(arrived.0, records);
    }
}

/// What the application is told when the core refuses an append.
fn append_error(e: crate::raft::AppendError) -> ClientError {
    match e {
        crate::raft::AppendError::NotLeader { epoch, leader } => {
            ClientError::NotLeader { epoch, leader }
        }
        e => ClientError::Invalid(e.to_string()),
    }
}

/// Lingering appends gathered into one batch (`release_lingering`).
#[derive(Default)]
struct Run {
    merger: Merger,
    members: Vec<Member>,
}

/// An append of a `Run`: its own batches (appended as they are when it is alone), and how
/// many offsets it takes.
struct Member {
    batch: Vec<u8>,
    reply: AppendReply,
    arrived: (u64, Instant),
    offsets: i64,
}
