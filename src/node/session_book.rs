//! The follower's bookkeeping of one Fetch session, without I/O: which fetches wait to be sent,
//! which the leader node holds and since which request, and where each partition's answer
//! goes. `node::fetch_sessions` runs it over a peer connection; the simulator runs it over its
//! own network (`tests/sim/groups.rs`), so both route answers with the same code.
//!
//! Requests are numbered from 0 in the order they are sent, and answered in that order (one
//! connection). A partition's answer counts only in the answer to the request that carried its
//! current fetch or a later one: an answer to an earlier request is for a fetch since replaced.

use std::collections::{HashMap, HashSet, VecDeque};
use std::rc::Rc;
use std::time::Instant;

use super::fetch_sessions::SessionView;
use crate::net::fetch_session::{self, At};
use crate::protocol::fetch;
use crate::protocol::group::GroupKey;
use crate::raft::message::{FetchRequest, FetchResponse};

/// An answer after which its follower fetches again at once, with something to report:
/// records, a divergence to truncate to, a snapshot to fetch.
fn carries_something(answer: &FetchResponse) -> bool {
    !matches!(answer.records, crate::raft::message::Records::None)
        || answer.diverging_epoch.is_some()
        || answer.snapshot_id.is_some()
}

/// A fetch the leader node holds: where its answer goes, and which request carried it.
struct Held<R> {
    reply: R,
    request: u64,
    /// A replica's fetch, whose records its group appends (not adoption's anonymous probe,
    /// which reads the log's first batch and appends nothing).
    replicating: bool,
}

/// A fetch to send: its group, the fetch, and where its answer goes.
type Queued<R> = (GroupKey, FetchRequest, R);

/// One session's fetches, each with its answer address `R`.
pub struct SessionBook<R> {
    queued: Vec<Queued<R>>,
    held: HashMap<At, Held<R>>,
    /// `held` as the groups' cores see it, and when the session last had an answer.
    view: Rc<SessionView>,
    /// The numbers of the requests sent and not answered yet, oldest first.
    in_flight: VecDeque<u64>,
    /// Requests numbered so far (the next one's number).
    sent: u64,
    /// A fetch of this node, for the top-level fields of a poll.
    template: Option<FetchRequest>,
    /// Partitions whose replica's last answer carried records, a divergence or a snapshot.
    busy: HashSet<At>,
    /// Of those, the ones whose next fetch has not been queued since that answer: their group
    /// is appending what came, and sends its next fetch when that is durable (`awaiting`).
    awaited: HashSet<At>,
    /// Tests only (the `mutations` feature): an answer with records goes to another partition's
    /// held fetch, the bug a coalesced answer invites.
    #[cfg(feature = "mutations")]
    pub misroute: bool,
}

impl<R> SessionBook<R> {
    pub fn new(view: Rc<SessionView>) -> Self {
        SessionBook {
            queued: Vec::new(),
            held: HashMap::new(),
            view,
            in_flight: VecDeque::new(),
            sent: 0,
            template: None,
            busy: HashSet::new(),
            awaited: HashSet::new(),
            #[cfg(feature = "mutations")]
            misroute: false,
        }
    }

    /// `fetch` of `group` goes in the next request; its answer goes to `reply`.
    pub fn queue(&mut self, group: GroupKey, fetch: FetchRequest, reply: R) {
        // Polls take a long poll's top-level fields when there has been one.
        let long_poll = fetch.max_wait_ms > 0 && fetch.replica.id >= 0;
        if long_poll || self.template.is_none() {
            self.template = Some(fetch.clone());
        }
        self.awaited.remove(&(group.topic_id(), group.partition()));
        self.queued.push((group, fetch, reply));
    }

    /// Whether the next request had better wait a little: nothing is in flight, and a group
    /// whose last answer carried records has not sent its next fetch yet (it sends it once
    /// it has appended them durably). Sent now, a poll would be in flight when that fetch
    /// comes, the fetch would overtake it, and the leader would answer the poll early: two
    /// requests and two answers for each of a busy group's appends where one does. The caller
    /// waits a bounded time (`fetch_sessions::POLL_GRACE`), then `stop_awaiting`.
    pub fn awaiting(&self) -> bool {
        self.in_flight.is_empty() && !self.awaited.is_empty()
    }

    /// The wait for the awaited fetches is over: what is due goes now, and those fetches
    /// overtake the request in flight when they come.
    pub fn stop_awaiting(&mut self) {
        self.awaited.clear();
    }

    pub fn has_queued(&self) -> bool {
        !self.queued.is_empty()
    }

    /// Whether a request is due. With none in flight: when fetches are queued, or the leader
    /// holds fetches and has no request to answer them in. With one in flight, only for a
    /// fetch that must not wait: the leader holds nothing of its partition, and its last
    /// answer carried records, a divergence or a snapshot (a busy group's next fetch after its
    /// append). The others (a group's rest limit or retry replacing a held fetch, an idle
    /// group's next fetch after an empty answer, a new follower's first fetch, a retry after
    /// an error) wait for the answer in flight, which the leader sends as soon as one of the
    /// session's groups answers, and at the latest at the request's MaxWaitMs. So a session
    /// whose groups write nothing keeps one request in flight.
    pub fn request_due(&self) -> bool {
        if self.in_flight.is_empty() {
            !self.queued.is_empty() || !self.held.is_empty()
        } else {
            self.queued.iter().any(|q| self.may_overtake(q))
        }
    }

    /// A queued fetch that may go while a request is in flight: the leader holds nothing of
    /// its partition, and the partition's last answer carried records (or a divergence or a
    /// snapshot to fetch).
    fn may_overtake(&self, q: &Queued<R>) -> bool {
        let at = (q.0.topic_id(), q.0.partition());
        !self.held.contains_key(&at) && self.busy.contains(&at)
    }

    /// Requests sent and not answered.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Fetches the leader node holds or will hold once their request arrives.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// The request to send now, if one is due (`request_due`), at Fetch `version`: the queued
    /// fetches that may go (all of them with nothing in flight) of the kind queued first (a
    /// request's replica id and MaxWaitMs are its fetches': the groups' long polls, adoption's
    /// anonymous probes answered at once; other kinds wait for the next request), or a poll
    /// when nothing is queued. It is counted as sent: the caller sends it, or fails the
    /// session.
    pub fn next_request(&mut self, version: i16) -> Option<fetch::FetchRequest> {
        if !self.request_due() {
            return None;
        }
        if self.queued.is_empty() {
            let template = self.template.clone()?;
            return Some(self.request(&template, Vec::new(), version));
        }
        let idle = self.in_flight.is_empty();
        let first = self
            .queued
            .iter()
            .find(|q| idle || self.may_overtake(q))
            .expect("due");
        let kind = (first.1.replica.id, first.1.max_wait_ms);
        let queued = std::mem::take(&mut self.queued);
        let (batch, rest): (Vec<Queued<R>>, Vec<Queued<R>>) = queued.into_iter().partition(|q| {
            (q.1.replica.id, q.1.max_wait_ms) == kind && (idle || self.may_overtake(q))
        });
        self.queued = rest;
        let template = batch[0].1.clone();
        Some(self.request(&template, batch, version))
    }

    /// Request number `self.sent` carrying `batch` (none: a poll), with `template`'s top-level
    /// fields; each fetch it carries replaces any held for its partition.
    fn request(
        &mut self,
        template: &FetchRequest,
        batch: Vec<Queued<R>>,
        version: i16,
    ) -> fetch::FetchRequest {
        let number = self.sent;
        self.sent += 1;
        self.in_flight.push_back(number);
        let epoch = i32::try_from(number % (i32::MAX as u64)).unwrap_or(0);
        let mut parts = Vec::with_capacity(batch.len());
        for (group, fetch, reply) in batch {
            let at = (group.topic_id(), group.partition());
            self.held.insert(
                at,
                Held {
                    reply,
                    request: number,
                    replicating: fetch.replica.id >= 0,
                },
            );
            self.view.held.borrow_mut().insert(at, number);
            parts.push((group, fetch));
        }
        // The leader holds each fetch as long as a group's own Fetch would be held
        // (`groups::group_fetch_max_wait_ms`).
        fetch_session::request(template, template.max_wait_ms, epoch, &parts, version)
    }

    /// The answer to the oldest request in flight: each partition's part with the address of
    /// the fetch it answers. Parts for fetches since replaced are dropped. `None` when no
    /// request is in flight: the connection cannot be trusted, and the caller fails it.
    pub fn answered(
        &mut self,
        response: &fetch::FetchResponse,
        now: Instant,
    ) -> Option<Vec<(R, FetchResponse)>> {
        let number = self.in_flight.pop_front()?;
        self.view.answered.set(Some((number, now)));
        let mut out = Vec::new();
        if let Some(error) = fetch_session::error_for_all(response) {
            let mut answered: Vec<At> = self
                .held
                .iter()
                .filter(|(_, h)| h.request <= number)
                .map(|(at, _)| *at)
                .collect();
            answered.sort();
            for at in answered {
                if let Some(held) = self.take(&at) {
                    out.push((held.reply, error.clone()));
                }
            }
            return Some(out);
        }
        for (at, answer) in fetch_session::answers(response) {
            let at = self.misrouted(at, &answer, number);
            // An answer to an earlier request is for a fetch since replaced.
            if self.held.get(&at).is_some_and(|h| h.request <= number) {
                let held = self.take(&at).expect("checked");
                // A probe's answer says nothing of whether its group is busy: it carries the
                // log's first batch every time, and the group appends none of it.
                if held.replicating {
                    if carries_something(&answer) {
                        self.busy.insert(at);
                        self.awaited.insert(at);
                    } else {
                        self.busy.remove(&at);
                        self.awaited.remove(&at);
                    }
                }
                out.push((held.reply, answer));
            } else {
                tracing::trace!(number, partition = at.1, "dropped");
            }
        }
        Some(out)
    }

    /// Where `at`'s answer is delivered: `at` itself, unless the `misroute` mutation sends an
    /// answer with records to another partition answered by the same request.
    #[cfg_attr(not(feature = "mutations"), allow(unused_variables))]
    fn misrouted(&self, at: At, answer: &FetchResponse, number: u64) -> At {
        #[cfg(feature = "mutations")]
        if self.misroute && !matches!(answer.records, crate::raft::message::Records::None) {
            let other = self
                .held
                .iter()
                .filter(|(a, h)| **a != at && h.request <= number)
                .map(|(a, _)| *a)
                .min();
            if let Some(other) = other {
                return other;
            }
        }
        at
    }

    fn take(&mut self, at: &At) -> Option<Held<R>> {
        let held = self.held.remove(at)?;
        self.view.held.borrow_mut().remove(at);
        Some(held)
    }

    /// Fetches queued and not sent: they fail (the session cannot connect).
    pub fn fail_queued(&mut self) -> Vec<R> {
        self.queued.drain(..).map(|(_, _, reply)| reply).collect()
    }

    /// The connection is gone: every fetch it held or would carry fails, held ones first.
    pub fn fail_all(&mut self) -> Vec<R> {
        self.in_flight.clear();
        self.awaited.clear();
        self.view.held.borrow_mut().clear();
        self.view.answered.set(None);
        let mut held: Vec<(At, Held<R>)> = self.held.drain().collect();
        held.sort_by_key(|(at, _)| *at);
        let mut out: Vec<R> = held.into_iter().map(|(_, h)| h.reply).collect();
        out.extend(self.fail_queued());
        out
    }
}

/// The tests' fetches and answers, shared with `fetch_sessions`' tests.
#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::errors::ErrorCode;
    use crate::raft::message::Records;
    use crate::raft::ReplicaKey;

    fn key(partition: i32) -> GroupKey {
        GroupKey::new("kv", partition).unwrap()
    }

    /// A fetch of replica `replica` waiting at most `max_wait_ms`.
    pub(crate) fn fetch(replica: i32, max_wait_ms: i32) -> FetchRequest {
        FetchRequest {
            cluster_id: Some("c".into()),
            replica: ReplicaKey::new(replica, None),
            max_wait_ms,
            fetch_offset: 0,
            last_fetched_epoch: 0,
            current_leader_epoch: 1,
            max_bytes: 1 << 20,
            high_watermark: None,
        }
    }

    /// A session answer naming `parts` (group, high watermark), with top-level error `top`.
    pub(crate) fn answer(parts: &[(&GroupKey, i64)], top: ErrorCode) -> fetch::FetchResponse {
        let answers: Vec<FetchResponse> = parts
            .iter()
            .map(|(_, hw)| FetchResponse {
                error: ErrorCode::NONE,
                partition_error: ErrorCode::NONE,
                high_watermark: *hw,
                log_start_offset: 0,
                diverging_epoch: None,
                leader_id: 1,
                leader_epoch: 1,
                snapshot_id: None,
                records: Records::None,
                leader_endpoints: Vec::new(),
            })
            .collect();
        let wire: Vec<(At, &FetchResponse, usize)> = parts
            .iter()
            .zip(&answers)
            .map(|((g, _), a)| ((g.topic_id(), g.partition()), a, 0))
            .collect();
        let mut response = fetch_session::response(&wire, 17);
        response.error_code = top;
        response
    }

    fn book() -> SessionBook<u64> {
        SessionBook::new(Rc::default())
    }

    #[test]
    fn each_part_goes_to_the_fetch_its_partition_holds_now() {
        let (a, b) = (key(0), key(1));
        let mut s = book();
        // Request 0 carries a's first fetch and b's; a's next fetch (the first failed in its
        // group and was sent again) waits for request 0's answer.
        s.queue(a.clone(), fetch(2, 800), 10);
        s.queue(b.clone(), fetch(2, 800), 21);
        assert!(s.next_request(17).is_some());
        s.queue(a.clone(), fetch(2, 800), 20);
        assert!(s.next_request(17).is_none(), "request 0 is in flight");
        let got = s
            .answered(&answer(&[(&b, 200)], ErrorCode::NONE), Instant::now())
            .unwrap();
        let got: Vec<(u64, i64)> = got.iter().map(|(r, f)| (*r, f.high_watermark)).collect();
        assert_eq!(got, vec![(21, 200)]);
        // Request 1 carries a's second fetch, which replaces the first.
        assert!(s.next_request(17).is_some());
        assert_eq!(s.held(), 1);
        let got = s
            .answered(&answer(&[(&a, 101)], ErrorCode::NONE), Instant::now())
            .unwrap();
        let got: Vec<(u64, i64)> = got.iter().map(|(r, f)| (*r, f.high_watermark)).collect();
        assert_eq!(got, vec![(20, 101)]);
        assert_eq!((s.in_flight(), s.held()), (0, 0));
        assert!(!s.request_due(), "nothing held: no poll");
        assert!(
            s.answered(&answer(&[], ErrorCode::NONE), Instant::now())
                .is_none(),
            "an answer with no request in flight"
        );
    }

    #[test]
    fn a_top_level_error_answers_every_fetch_its_request_carried() {
        let (a, b) = (key(0), key(1));
        let mut s = book();
        s.queue(a.clone(), fetch(2, 800), 1);
        s.next_request(17);
        // b's first fetch waits for request 0's answer.
        s.queue(b.clone(), fetch(2, 800), 2);
        assert!(s.next_request(17).is_none());
        let got = s
            .answered(&answer(&[], ErrorCode::INVALID_REQUEST), Instant::now())
            .unwrap();
        assert_eq!(got.len(), 1, "b's fetch was not sent");
        assert_eq!(got[0].0, 1);
        assert_eq!(got[0].1.error, ErrorCode::INVALID_REQUEST);
        assert_eq!(s.fail_all(), vec![2]);
    }

    #[test]
    fn a_fetch_replacing_a_held_one_waits_for_the_answer_and_kinds_go_apart() {
        let mut s = book();
        assert!(
            s.next_request(17).is_none(),
            "no fetch yet: nothing to poll with"
        );
        s.queue(key(0), fetch(2, 800), 1);
        s.queue(key(1), fetch(-1, 0), 2);
        s.queue(key(2), fetch(2, 800), 3);
        let shape = |r: &fetch::FetchRequest| {
            let parts: usize = r.topics.iter().map(|t| t.partitions.len()).sum();
            (
                r.replica_state.replica_id,
                r.max_wait_ms,
                parts,
                r.session_epoch,
            )
        };
        let first = s.next_request(17).expect("due");
        assert_eq!(shape(&first), (2, 800, 2, 0), "the long polls first");
        // A fetch that would replace a held one waits for the answer, as the probe does.
        s.queue(key(0), fetch(2, 800), 4);
        assert!(!s.request_due() && s.next_request(17).is_none());
        s.answered(&answer(&[], ErrorCode::NONE), Instant::now());
        let second = s.next_request(17).expect("due");
        assert_eq!(shape(&second), (-1, 0, 1, 1), "the probe, queued first");
        s.answered(&answer(&[], ErrorCode::NONE), Instant::now());
        let third = s.next_request(17).expect("due");
        assert_eq!(shape(&third), (2, 800, 1, 2));
        s.answered(&answer(&[], ErrorCode::NONE), Instant::now());
        assert!(
            s.request_due(),
            "fetches held and no request to answer them in"
        );
        let poll = s.next_request(17).expect("a poll");
        assert!(poll.topics.is_empty(), "a poll carries nothing");
        assert_eq!(poll.max_wait_ms, 800, "it waits as the long polls do");
        assert!(s.next_request(17).is_none(), "one poll at a time");
        assert_eq!(s.fail_all(), vec![4, 2, 3]);
    }

    #[test]
    fn after_records_a_groups_next_fetch_goes_at_once_and_after_an_empty_answer_it_waits() {
        let (a, b, c) = (key(0), key(1), key(2));
        let mut s = book();
        s.queue(a.clone(), fetch(2, 800), 1);
        s.queue(b.clone(), fetch(2, 800), 2);
        s.next_request(17).expect("request 0");
        // a's answer is empty; b's carries records.
        let mut response = answer(&[(&a, 5), (&b, 5)], ErrorCode::NONE);
        response.responses[0].partitions[1].records = Some(bytes::Bytes::from_static(b"batch"));
        let got = s.answered(&response, Instant::now()).unwrap();
        assert_eq!(got.len(), 2);
        // Request 1 carries c's fetch and stays in flight.
        s.queue(c.clone(), fetch(2, 800), 3);
        s.next_request(17).expect("request 1");
        s.queue(a.clone(), fetch(2, 800), 4);
        assert!(
            !s.request_due(),
            "an idle group's next fetch waits for the answer"
        );
        s.queue(key(3), fetch(2, 800), 6);
        assert!(!s.request_due(), "so does a new follower's first");
        s.queue(b.clone(), fetch(2, 800), 5);
        let busy = s
            .next_request(17)
            .expect("a busy group's next fetch goes at once");
        let parts: Vec<i32> = busy.topics[0]
            .partitions
            .iter()
            .map(|p| p.partition)
            .collect();
        assert_eq!(parts, vec![1]);
        assert_eq!(s.fail_all(), vec![5, 3, 4, 6]);
    }

    #[test]
    fn after_records_the_next_request_awaits_the_busy_groups_fetch_and_carries_it() {
        let (a, b) = (key(0), key(1));
        let mut s = book();
        s.queue(a.clone(), fetch(2, 800), 1);
        s.queue(b.clone(), fetch(2, 800), 2);
        s.next_request(17).expect("request 0");
        assert!(!s.awaiting(), "a request in flight: nothing to await");
        // a's answer carries records, b stays held.
        let mut response = answer(&[(&a, 5)], ErrorCode::NONE);
        response.responses[0].partitions[0].records = Some(bytes::Bytes::from_static(b"batch"));
        assert_eq!(s.answered(&response, Instant::now()).unwrap().len(), 1);
        assert!(s.request_due(), "b is held with no request to answer it in");
        assert!(s.awaiting(), "but a appends what came, then fetches again");
        // a's next fetch comes: one request carries it, no poll before it.
        s.queue(a.clone(), fetch(2, 800), 3);
        assert!(!s.awaiting());
        let next = s.next_request(17).expect("request 1");
        assert_eq!(next.topics[0].partitions[0].partition, 0);
        assert!(s.next_request(17).is_none(), "one request");
        // An empty answer awaits nothing.
        let response = answer(&[(&a, 5)], ErrorCode::NONE);
        assert_eq!(s.answered(&response, Instant::now()).unwrap().len(), 1);
        assert!(!s.awaiting(), "an idle group's next fetch is not awaited");
        // The wait given up: what is due goes, and the awaited fetch overtakes it later.
        s.queue(a.clone(), fetch(2, 800), 4);
        s.next_request(17).expect("request 2");
        let mut response = answer(&[(&a, 6)], ErrorCode::NONE);
        response.responses[0].partitions[0].records = Some(bytes::Bytes::from_static(b"batch"));
        assert_eq!(s.answered(&response, Instant::now()).unwrap().len(), 1);
        assert!(s.awaiting());
        s.stop_awaiting();
        assert!(!s.awaiting());
        s.next_request(17).expect("a poll for b");
        s.queue(a.clone(), fetch(2, 800), 5);
        assert!(s.next_request(17).is_some(), "a's fetch overtakes the poll");
        assert_eq!(
            s.fail_all(),
            vec![5, 2],
            "held ones fail in partition order"
        );
    }

    #[test]
    fn a_probes_answer_with_records_does_not_make_its_group_busy() {
        let (a, b) = (key(0), key(1));
        let mut s = book();
        // a's adoption probe (anonymous, answered at once) in place of its held fetch; the
        // leader answers it with the log's first batch, as it answers every probe.
        s.queue(a.clone(), fetch(-1, 0), 1);
        s.next_request(17).expect("request 0");
        let mut response = answer(&[(&a, 5)], ErrorCode::NONE);
        response.responses[0].partitions[0].records = Some(bytes::Bytes::from_static(b"batch"));
        assert_eq!(s.answered(&response, Instant::now()).unwrap().len(), 1);
        assert!(!s.awaiting(), "nor is its next fetch awaited");
        // Request 1 carries b's long poll and stays in flight; a's next long poll waits for it.
        s.queue(b.clone(), fetch(2, 800), 2);
        s.next_request(17).expect("request 1");
        s.queue(a.clone(), fetch(2, 800), 3);
        assert!(
            !s.request_due(),
            "a group whose probe read a batch is not busy: its next fetch waits"
        );
        assert_eq!(s.fail_all(), vec![2, 3]);
    }
}
