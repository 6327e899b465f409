//! The node's fetch shards in the simulator (`ringraft::fetch`): each running node has one,
//! fed by its executor's publications (`SimPublisher`, the simulator's `NodePublisher`) after a
//! random lag, answering Fetch with the node's own rules (`FetchView`, `Parking`,
//! `raft::serve`) and reading batches from the node's disk as they are *now*, which is what
//! makes a stale view dangerous. Before it answers it checks the log's `Generation`, as the
//! node's fetch shard does; the `stale_fetch_view` mutation skips that check.
//!
//! Its own invariant, `ServedWhatItsViewHeld`: every batch a fetch shard serves is the batch
//! its publications said the log held at that offset — what that leader had, not what a
//! truncation put there since.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use ringraft::fetch::{
    CachedBatch, FetchView, Generation, Parking, Publication, ReaderReset, Ticket,
};
use ringraft::node::executor::Publish;
use ringraft::raft::message::{FetchRequest, Records};
use ringraft::raft::serve::{self, FetchDecision, Progress};
use ringraft::raft::{LogOp, Raft, ReplicaKey, Response};

use super::cluster::Disk;
use super::runtime::NodeIo;

/// The executor's publisher in the simulator: the same rules as the node's (a reset after
/// every rewrite, the generation bumped before it), with the node's whole log as the cache.
pub struct SimPublisher {
    pub io: Rc<NodeIo>,
    pub disk: Rc<std::cell::RefCell<Disk>>,
    pub generation: Generation,
    published_end: i64,
    reset: bool,
}

impl SimPublisher {
    pub fn new(io: Rc<NodeIo>, disk: Rc<std::cell::RefCell<Disk>>, generation: Generation) -> Self {
        SimPublisher {
            io,
            disk,
            generation,
            published_end: 0,
            reset: true,
        }
    }
}

fn cached(batches: &[(i64, i64, i32, Bytes)], from: i64) -> Vec<CachedBatch> {
    batches
        .iter()
        .filter(|b| b.0 >= from)
        .map(|(base, next, _, bytes)| CachedBatch {
            base_offset: *base,
            last_offset: next - 1,
            bytes: bytes.clone(),
            segment: 0,
            position: 0,
        })
        .collect()
}

impl Publish for SimPublisher {
    fn before_op(&mut self, op: &LogOp) {
        match op {
            LogOp::Truncate(_) | LogOp::SnapshotComplete { .. } => {
                self.generation.bump();
                self.reset = true;
            }
            LogOp::DeleteBefore(_) => self.reset = true,
            _ => {}
        }
    }

    fn changed(&mut self, raft: &Raft) {
        let disk = self.disk.borrow();
        let log = &disk.log;
        let (appended, reader) = if self.reset {
            let reset = ReaderReset {
                segments: Vec::new(),
                cache: cached(&log.batches, log.start),
            };
            (Vec::new(), Some(reset))
        } else {
            (cached(&log.batches, self.published_end), None)
        };
        self.reset = false;
        self.published_end = log.end();
        let voters: Vec<ReplicaKey> = raft.voters().voters().iter().map(|v| v.key).collect();
        self.io.publications.borrow_mut().push(Publication {
            generation: self.generation.get(),
            facts: raft.facts(),
            log: raft.log_view().clone(),
            voters: Arc::new(voters),
            appended,
            reader,
        });
    }
}

/// An answer the fetch shard sends: to `token`, `response` with `data`.
pub struct Answer {
    pub token: u64,
    pub response: Response,
    pub data: Vec<Bytes>,
}

/// What a fetch shard did: answers to send, progress for the core, fetches it parked (ticket
/// and deadline, for the cluster's timer).
#[derive(Default)]
pub struct Outcome {
    pub answers: Vec<Answer>,
    pub progress: Vec<Progress>,
    pub parked: Vec<(Ticket, u64)>,
    /// Answers dropped because the log was rewritten under the view (rebuilt later).
    pub retries: u64,
}

impl Outcome {
    fn merge(&mut self, other: Outcome) {
        self.answers.extend(other.answers);
        self.progress.extend(other.progress);
        self.parked.extend(other.parked);
        self.retries += other.retries;
    }
}

/// One node's fetch shard.
pub struct SimFetchShard {
    pub generation: Generation,
    view: Option<FetchView>,
    parking: Parking,
    /// Parked tickets and the token their answer goes to.
    parked: HashMap<Ticket, u64>,
    /// Requests whose bytes were read across a rewrite: answered again at the next
    /// publication.
    retry: Vec<(u64, FetchRequest, bool)>,
    /// What the publications say the log holds: base offset → batch.
    seen: BTreeMap<i64, Bytes>,
    /// The `stale_fetch_view` mutation: answer without the generation check.
    pub skip_check: bool,
}

impl SimFetchShard {
    pub fn new(generation: Generation, skip_check: bool) -> Self {
        SimFetchShard {
            generation,
            view: None,
            parking: Parking::default(),
            parked: HashMap::new(),
            retry: Vec::new(),
            seen: BTreeMap::new(),
            skip_check,
        }
    }

    /// Applies a publication; returns the answers it releases.
    pub fn publish(
        &mut self,
        p: &Publication,
        disk: &Disk,
        now_ms: u64,
    ) -> Result<Outcome, String> {
        if let Some(reset) = &p.reader {
            self.seen = reset
                .cache
                .iter()
                .map(|b| (b.base_offset, b.bytes.clone()))
                .collect();
        }
        for b in &p.appended {
            self.seen.insert(b.base_offset, b.bytes.clone());
        }
        match &mut self.view {
            Some(v) => v.apply(p),
            None => self.view = Some(FetchView::new(p)),
        }
        let mut out = Outcome::default();
        let view = self.view.as_ref().expect("set above");
        for (ticket, request) in self.parking.ready(view, now_ms) {
            if let Some(token) = self.parked.remove(&ticket) {
                out.merge(self.answer(token, request, true, disk, now_ms)?);
            }
        }
        for (token, request, woken) in std::mem::take(&mut self.retry) {
            out.merge(self.answer(token, request, woken, disk, now_ms)?);
        }
        Ok(out)
    }

    /// A Fetch arrived.
    pub fn fetch(
        &mut self,
        token: u64,
        request: FetchRequest,
        disk: &Disk,
        now_ms: u64,
    ) -> Result<Outcome, String> {
        if self.view.is_none() {
            // No publication yet: the node's fetch shard waits for the first one.
            self.retry.push((token, request, false));
            return Ok(Outcome::default());
        }
        self.answer(token, request, false, disk, now_ms)
    }

    /// Parked `ticket`'s deadline passed: it is answered with what the view has now.
    pub fn expire(&mut self, ticket: Ticket, disk: &Disk, now_ms: u64) -> Result<Outcome, String> {
        let (Some(token), Some(request)) =
            (self.parked.remove(&ticket), self.parking.cancel(ticket))
        else {
            return Ok(Outcome::default());
        };
        self.answer(token, request, true, disk, now_ms)
    }

    fn answer(
        &mut self,
        token: u64,
        request: FetchRequest,
        woken: bool,
        disk: &Disk,
        now_ms: u64,
    ) -> Result<Outcome, String> {
        let view = self.view.as_ref().expect("a view");
        let (decision, progress) = if woken {
            let resp = serve::parked_answer(&view.facts, &view.log, &request);
            (FetchDecision::Answer(resp), None)
        } else {
            let out = view.decide(&request, now_ms);
            (out.decision, out.progress)
        };
        let mut resp = match decision {
            FetchDecision::Park { deadline_ms } => {
                let ticket = self.parking.park(request, view, deadline_ms, None);
                self.parked.insert(ticket, token);
                return Ok(Outcome {
                    progress: progress.into_iter().collect(),
                    parked: vec![(ticket, deadline_ms)],
                    ..Outcome::default()
                });
            }
            FetchDecision::Answer(resp) => resp,
        };
        let data = match resp.records {
            Records::Read { offset, max_bytes } => {
                // What the fetch shard's cache would hold: only what was published.
                let end = view.log.end_offset();
                disk.log
                    .read(offset, max_bytes)
                    .into_iter()
                    .filter(|b| {
                        ringraft::records::batch::offsets_of(b).is_some_and(|(base, _)| base < end)
                    })
                    .collect::<Vec<_>>()
            }
            _ => Vec::new(),
        };
        if !self.skip_check && self.generation.get() != view.generation {
            self.retry.push((token, request, woken));
            return Ok(Outcome {
                progress: progress.into_iter().collect(),
                retries: 1,
                ..Outcome::default()
            });
        }
        for batch in &data {
            let (base, _) = ringraft::records::batch::offsets_of(batch)
                .ok_or("the fetch shard served an unreadable batch")?;
            if self.seen.get(&base) != Some(batch) {
                return Err(format!(
                    "ServedWhatItsViewHeld: a fetch shard answering as leader of epoch {} served \
                     a batch at {base} that its publications never described (the log was \
                     rewritten under a stale view; view generation {}, log generation {}, \
                     published batches at {:?})",
                    view.facts.epoch,
                    view.generation,
                    self.generation.get(),
                    self.seen.keys().take(5).collect::<Vec<_>>()
                ));
            }
        }
        if data.is_empty() {
            resp.records = Records::None;
        }
        Ok(Outcome {
            answers: vec![Answer {
                token,
                response: Response::Fetch(resp),
                data,
            }],
            progress: progress.into_iter().collect(),
            parked: Vec::new(),
            retries: 0,
        })
    }
}
