//! The raft shard's side of fetch serving (`crate::fetch`): after every change it publishes
//! the core's facts, its picture of the log, the voters and the batches appended since the
//! last publication to every serving shard — applied directly on its own shard, posted to the
//! others (`fetch::mailbox`: a post wakes a serving shard only while something there waits for
//! it). The raft shard never waits on a fetch shard: a bounded queue would either stall
//! commits behind a slow fetch shard or drop a publication, and a fetch shard applies what
//! was posted before it answers anything from its view.
//!
//! Before a truncation or a snapshot install it bumps the log's `Generation`, and the next
//! publication carries a reader reset (the segment files and the batch cache anew). A prefix
//! deletion resets the reader too, without a bump: it removes offsets below the log start,
//! which no answer reads again once the view moves the start.

use std::rc::Rc;
use std::sync::Arc;

use super::executor::Publish;
use crate::fetch::mailbox::{Post, Poster};
use crate::fetch::shard::Serving;
use crate::fetch::{Generation, Publication};
use crate::log::MetadataLog;
use crate::raft::{LogOp, Raft, ReplicaKey};

/// Where publications go.
pub enum Target {
    /// A serving role on the raft shard itself.
    Local(Rc<Serving>),
    /// Another shard.
    Remote(Poster<Publication>),
}

/// What decides whether anything changed since the last publication (cheap to compare).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    epoch: i32,
    leader_id: Option<i32>,
    is_leader: bool,
    high_watermark: Option<i64>,
    start: i64,
    end: i64,
    flushed: i64,
    latest_snapshot: Option<crate::raft::OffsetAndEpoch>,
    voters: usize,
    kraft_version: i16,
    state: &'static str,
    /// A new read-fence round wakes the voters' parked fetches (`raft::fence`).
    read_round: u64,
}

fn key(raft: &Raft) -> Key {
    let log = raft.log_view();
    Key {
        epoch: raft.epoch(),
        leader_id: raft.leader_id(),
        is_leader: raft.is_leader(),
        high_watermark: raft.high_watermark(),
        start: log.start_offset(),
        end: log.end_offset(),
        flushed: log.flushed_offset(),
        latest_snapshot: log.latest_snapshot(),
        voters: raft.voters().len(),
        kraft_version: raft.kraft_version(),
        state: raft.state_name(),
        read_round: raft.read_round(),
    }
}

/// How a serving shard on another thread must hear of a publication (`fetch::mailbox`). A
/// reset, or a snapshot to open before a follower asks for it, cannot wait for the shard's
/// next look. A change of the durable end alone answers no parked fetch
/// (`serve::parked_ready` reads the log's end, the high watermark, the epoch and the
/// deadline; a voter's also the read round), so it waits: on a leader, that is one wake of
/// its fetch shard per commit saved.
fn post_for(reset: bool, last: Option<&Key>, now: &Key) -> Post {
    let Some(last) = last else {
        return Post::Urgent;
    };
    if reset || last.latest_snapshot != now.latest_snapshot {
        return Post::Urgent;
    }
    let durable_end_only = Key {
        flushed: now.flushed,
        ..last.clone()
    } == *now;
    if durable_end_only {
        Post::Quiet
    } else {
        Post::Prompt
    }
}

pub struct NodePublisher {
    log: Rc<MetadataLog>,
    generation: Generation,
    targets: Vec<Target>,
    last: Option<Key>,
    /// The log end the published batches reach.
    published_end: i64,
    reset: bool,
}

impl NodePublisher {
    pub fn new(log: Rc<MetadataLog>, generation: Generation, targets: Vec<Target>) -> Self {
        NodePublisher {
            log,
            generation,
            targets,
            last: None,
            published_end: 0,
            reset: true,
        }
    }
}

impl Publish for NodePublisher {
    fn before_op(&mut self, op: &LogOp) {
        match op {
            LogOp::Truncate(_) | LogOp::SnapshotComplete { .. } => {
                self.generation.bump();
                self.reset = true;
            }
            LogOp::DeleteBefore(_) => self.reset = true,
            LogOp::Append(_)
            | LogOp::SnapshotChunk { .. }
            | LogOp::SnapshotAbandon { .. }
            | LogOp::SnapshotAdopted { .. } => {}
        }
    }

    fn changed(&mut self, raft: &Raft) {
        if self.targets.is_empty() {
            return;
        }
        let now = key(raft);
        let end = self.log.end_offset();
        if !self.reset && self.last.as_ref() == Some(&now) && end == self.published_end {
            return;
        }
        let (appended, reader) = if self.reset {
            (Vec::new(), Some(self.log.reader_reset()))
        } else {
            (self.log.cached_from(self.published_end), None)
        };
        let how = post_for(reader.is_some(), self.last.as_ref(), &now);
        let voters: Vec<ReplicaKey> = raft.voters().voters().iter().map(|v| v.key).collect();
        let publication = Publication {
            generation: self.generation.get(),
            facts: raft.facts(),
            log: raft.log_view().clone(),
            voters: Arc::new(voters),
            appended,
            reader,
        };
        self.reset = false;
        self.last = Some(now);
        self.published_end = end;
        for target in &self.targets {
            match target {
                Target::Local(serving) => serving.publish(publication.clone()),
                Target::Remote(poster) => poster.post(publication.clone(), how),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::OffsetAndEpoch;

    fn key() -> Key {
        Key {
            epoch: 3,
            leader_id: Some(1),
            is_leader: true,
            high_watermark: Some(10),
            start: 0,
            end: 12,
            flushed: 11,
            latest_snapshot: None,
            voters: 3,
            kraft_version: 1,
            state: "leader",
            read_round: 0,
        }
    }

    #[test]
    fn only_a_durable_end_move_is_posted_quietly() {
        let last = key();
        assert_eq!(post_for(false, None, &last), Post::Urgent, "the first");
        assert_eq!(post_for(true, Some(&last), &last), Post::Urgent, "a reset");
        let snapshot = Key {
            latest_snapshot: Some(OffsetAndEpoch::new(10, 3)),
            ..key()
        };
        assert_eq!(post_for(false, Some(&last), &snapshot), Post::Urgent);
        let flushed = Key {
            flushed: 12,
            ..key()
        };
        assert_eq!(post_for(false, Some(&last), &flushed), Post::Quiet);
        // Anything a parked fetch waits for is prompt, with or without the durable end.
        let changes = [
            Key { end: 13, ..key() },
            Key {
                high_watermark: Some(11),
                flushed: 12,
                ..key()
            },
            Key { epoch: 4, ..key() },
            Key {
                leader_id: None,
                ..key()
            },
            Key {
                read_round: 1,
                ..key()
            },
        ];
        for now in &changes {
            assert_eq!(post_for(false, Some(&last), now), Post::Prompt, "{now:?}");
        }
    }
}
