//! `controller.quorum.append.linger.ms`, honoured as Kafka's leader honours it
//! (`BatchAccumulator`): the first append of a run starts the linger, every append that
//! arrives before it ends waits with it, and then they all go to the core in one turn, so they
//! share one flush, one publication and one round of follower fetches. The run goes at once
//! when it holds a full batch's worth of bytes (`BATCH_MAX_BYTES`, Kafka's 8 MiB). A node that
//! does not lead appends nothing, so it refuses at once instead of lingering first.
//!
//! Kafka's leader also merges the lingering records into one record batch; here each append
//! stays its own batch (the application built it, and its CRC covers it). What the linger
//! saves is the per-commit work of the write path and of replication, which is where the cost
//! is (issue: efficiency).

use super::*;
use crate::constants::BATCH_MAX_BYTES;

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
    arrived: (u64, std::time::Instant),
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
        let arrived = (self.clock.now().mono_ms, std::time::Instant::now());
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
        for a in std::mem::take(&mut self.linger.waiting) {
            self.append_now(a.batch, a.check, a.reply, a.arrived);
        }
    }

    fn append_now(
        &mut self,
        batch: Vec<u8>,
        check: AppendCheck,
        reply: AppendReply,
        arrived: (u64, std::time::Instant),
    ) {
        if let Err(e) = self.check_append(check) {
            let _ = reply.send(Err(e));
            return;
        }
        let appended = self.raft.borrow_mut().append(batch);
        match appended {
            Ok((first, last)) => {
                self.commits.entry(last).or_default().push(reply);
                self.commit_started.entry(last).or_insert(arrived);
                let records = (last - first + 1) as f64;
                let mut appended = self.stats.appended_records.borrow_mut();
                appended.record(arrived.0, records);
            }
            Err(crate::raft::AppendError::NotLeader { epoch, leader }) => {
                let _ = reply.send(Err(ClientError::NotLeader { epoch, leader }));
            }
            Err(e) => {
                let _ = reply.send(Err(ClientError::Invalid(e.to_string())));
            }
        }
    }
}
