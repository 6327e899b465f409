//! A fetch shard's picture of the raft shard (`FetchView`) and its parked long-polls
//! (`Parking`). Pure: the node's fetch shards and the simulator's use these same types.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::publication::Publication;
use crate::raft::log_view::LogView;
use crate::raft::message::FetchRequest;
use crate::raft::serve::{self, Facts, FetchOutcome};
use crate::raft::ReplicaKey;

/// The latest publication a fetch shard has applied.
#[derive(Debug, Clone)]
pub struct FetchView {
    pub generation: u64,
    pub facts: Facts,
    pub log: LogView,
    pub voters: Arc<Vec<ReplicaKey>>,
}

impl FetchView {
    pub fn new(p: &Publication) -> Self {
        FetchView {
            generation: p.generation,
            facts: p.facts.clone(),
            log: p.log.clone(),
            voters: p.voters.clone(),
        }
    }

    /// Takes the newer publication's state (each publication carries all of it).
    pub fn apply(&mut self, p: &Publication) {
        self.generation = p.generation;
        self.facts.clone_from(&p.facts);
        self.log.clone_from(&p.log);
        self.voters = p.voters.clone();
    }

    /// Is `replica` a voter (its own incarnation: same id, and same directory id when both
    /// are known)? Voters' fetches are served before observers'.
    pub fn is_voter(&self, replica: ReplicaKey) -> bool {
        self.voters.iter().any(|v| {
            v.id == replica.id
                && (v.directory_id.is_none()
                    || replica.directory_id.is_none()
                    || v.directory_id == replica.directory_id)
        })
    }

    pub fn decide(&self, r: &FetchRequest, now_ms: u64) -> FetchOutcome {
        serve::fetch(&self.facts, &self.log, r, now_ms)
    }
}

pub type Ticket = u64;

#[derive(Debug)]
struct ParkedFetch {
    request: FetchRequest,
    high_watermark: Option<i64>,
    deadline_ms: u64,
    voter: bool,
    /// The read-fence round it was parked in: a voter's is woken by a new one (`raft::fence`).
    read_round: u64,
}

impl ParkedFetch {
    /// Whether `view` (at `now_ms`) has an answer for it (`serve::parked_ready`).
    fn ready(&self, view: &FetchView, now_ms: u64) -> bool {
        let fence = self.voter && view.facts.read_round > self.read_round;
        fence
            || serve::parked_ready(
                &view.facts,
                &view.log,
                &self.request,
                self.high_watermark,
                self.deadline_ms,
                now_ms,
            )
    }
}

/// Long-polls waiting for records, a higher high watermark, a new epoch or their deadline.
/// Voters' and observers' are kept apart: a publication checks the voters' at once, while
/// observers' may be checked only at the shard's ticks (`fetch::pacing`).
#[derive(Debug, Default)]
pub struct Parking {
    next: Ticket,
    voters: BTreeMap<Ticket, ParkedFetch>,
    observers: BTreeMap<Ticket, ParkedFetch>,
}

impl Parking {
    /// Parks `request`; a high watermark above `view`'s, or above `baseline` (what the core
    /// computed with this Fetch counted), wakes it.
    pub fn park(
        &mut self,
        request: FetchRequest,
        view: &FetchView,
        deadline_ms: u64,
        baseline: Option<i64>,
    ) -> Ticket {
        let ticket = self.next;
        self.next += 1;
        let voter = view.is_voter(request.replica);
        let parked = if voter {
            &mut self.voters
        } else {
            &mut self.observers
        };
        parked.insert(
            ticket,
            ParkedFetch {
                request,
                high_watermark: view.facts.high_watermark.max(baseline),
                deadline_ms,
                voter,
                read_round: view.facts.read_round,
            },
        );
        ticket
    }

    /// Does `view` already answer parked `ticket`?
    pub fn ready_now(&self, ticket: Ticket, view: &FetchView, now_ms: u64) -> bool {
        self.voters
            .get(&ticket)
            .or_else(|| self.observers.get(&ticket))
            .is_some_and(|p| p.ready(view, now_ms))
    }

    /// Removes and returns the parked fetches `view` (at `now_ms`) has an answer for, voters'
    /// first.
    pub fn ready(&mut self, view: &FetchView, now_ms: u64) -> Vec<(Ticket, FetchRequest)> {
        let mut out = take_ready(&mut self.voters, |p| p.ready(view, now_ms));
        out.extend(take_ready(&mut self.observers, |p| p.ready(view, now_ms)));
        out
    }

    /// `ready`, for observers' fetches whose replica id `pick` takes only.
    pub fn ready_observers(
        &mut self,
        view: &FetchView,
        now_ms: u64,
        pick: impl Fn(i32) -> bool,
    ) -> Vec<(Ticket, FetchRequest)> {
        take_ready(&mut self.observers, |p| {
            pick(p.request.replica.id) && p.ready(view, now_ms)
        })
    }

    /// `ready`, for voters' fetches only.
    pub fn ready_voters(&mut self, view: &FetchView, now_ms: u64) -> Vec<(Ticket, FetchRequest)> {
        take_ready(&mut self.voters, |p| p.ready(view, now_ms))
    }

    /// Forgets `ticket` (its deadline passed, or its connection closed); its request if it
    /// was still parked.
    pub fn cancel(&mut self, ticket: Ticket) -> Option<FetchRequest> {
        self.voters
            .remove(&ticket)
            .or_else(|| self.observers.remove(&ticket))
            .map(|p| p.request)
    }

    pub fn len(&self) -> usize {
        self.voters.len() + self.observers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn observers_parked(&self) -> bool {
        !self.observers.is_empty()
    }
}

/// Removes and returns, in ticket order, the fetches of `parked` that `due` picks.
fn take_ready(
    parked: &mut BTreeMap<Ticket, ParkedFetch>,
    due: impl Fn(&ParkedFetch) -> bool,
) -> Vec<(Ticket, FetchRequest)> {
    let due: Vec<Ticket> = parked
        .iter()
        .filter(|(_, p)| due(p))
        .map(|(t, _)| *t)
        .collect();
    due.into_iter()
        .filter_map(|t| parked.remove(&t).map(|p| (t, p.request)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::log_view::LogInfo;

    fn publication(end: i64, hwm: i64, epoch: i32) -> Publication {
        Publication {
            generation: 0,
            facts: Facts {
                cluster_id: "c".into(),
                epoch,
                leader_id: Some(1),
                is_leader: true,
                shutting_down: false,
                high_watermark: Some(hwm),
                leader_endpoints: vec![],
                fetch_max_bytes: 1 << 20,
                read_round: 0,
            },
            log: LogView::new(&LogInfo {
                start_offset: 0,
                end_offset: end,
                epochs: vec![(1, 0)],
                snapshots: vec![],
            }),
            voters: Arc::new(vec![ReplicaKey::new(1, None), ReplicaKey::new(2, None)]),
            appended: vec![],
            reader: None,
        }
    }

    fn tickets(ready: Vec<(Ticket, FetchRequest)>) -> Vec<Ticket> {
        ready.into_iter().map(|(t, _)| t).collect()
    }

    fn fetch(replica: i32, offset: i64) -> FetchRequest {
        FetchRequest {
            cluster_id: None,
            replica: ReplicaKey::new(replica, None),
            max_wait_ms: 500,
            fetch_offset: offset,
            last_fetched_epoch: 1,
            current_leader_epoch: 1,
            max_bytes: 1000,
            high_watermark: None,
        }
    }

    #[test]
    fn parked_fetches_wake_on_records_or_watermark_voters_first() {
        let mut view = FetchView::new(&publication(10, 5, 1));
        let mut parking = Parking::default();
        let observer = parking.park(fetch(7, 10), &view, 600, None);
        let voter = parking.park(fetch(2, 10), &view, 600, None);
        assert!(parking.ready(&view, 100).is_empty());
        view.apply(&publication(10, 6, 1));
        assert_eq!(
            tickets(parking.ready(&view, 100)),
            vec![voter, observer],
            "voters first"
        );
        assert!(parking.is_empty());
        let t = parking.park(fetch(7, 10), &view, 600, None);
        view.apply(&publication(11, 6, 1));
        assert_eq!(
            parking.ready(&view, 100).len(),
            1,
            "a record past the offset"
        );
        let t2 = parking.park(fetch(7, 11), &view, 600, None);
        assert_ne!(t, t2);
        view.apply(&publication(11, 6, 2));
        assert_eq!(parking.ready(&view, 100).len(), 1, "a new epoch");
    }

    #[test]
    fn voters_are_woken_without_touching_parked_observers() {
        let mut view = FetchView::new(&publication(10, 5, 1));
        let mut parking = Parking::default();
        let observer = parking.park(fetch(7, 10), &view, 600, None);
        let voter = parking.park(fetch(2, 10), &view, 600, None);
        view.apply(&publication(11, 6, 1));
        assert_eq!(tickets(parking.ready_voters(&view, 100)), vec![voter]);
        assert!(parking.observers_parked(), "the observer waits for a tick");
        assert_eq!(tickets(parking.ready(&view, 100)), vec![observer]);
        assert!(parking.is_empty() && !parking.observers_parked());
        // Cancelling finds a ticket in either set.
        let t = parking.park(fetch(7, 11), &view, 600, None);
        assert!(parking.cancel(t).is_some());
        assert!(parking.cancel(t).is_none());
    }
}
