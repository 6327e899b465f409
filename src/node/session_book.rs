//! The follower's bookkeeping of one Fetch session, without I/O: which fetches wait to be sent,
//! which the leader node holds and since which request, and where each partition's answer
//! goes. `node::fetch_sessions` runs it over a peer connection; the simulator runs it over its
//! own network (`tests/sim/groups.rs`), so both route answers with the same code.
//!
//! Requests are numbered from 0 in the order they are sent, and answered in that order (one
//! connection). A partition's answer counts only in the answer to the request that carried its
//! current fetch or a later one: an answer to an earlier request is for a fetch since replaced.

use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::time::Instant;

use super::fetch_sessions::SessionView;
use crate::net::fetch_session::{self, At};
use crate::protocol::fetch;
use crate::protocol::group::GroupKey;
use crate::raft::message::{FetchRequest, FetchResponse};

/// A fetch the leader node holds: where its answer goes, and which request carried it.
struct Held<R> {
    reply: R,
    request: u64,
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
        self.queued.push((group, fetch, reply));
    }

    pub fn has_queued(&self) -> bool {
        !self.queued.is_empty()
    }

    /// Whether a request is due: fetches are queued, or the leader holds fetches and has no
    /// request to answer them in.
    pub fn request_due(&self) -> bool {
        !self.queued.is_empty() || (self.in_flight.is_empty() && !self.held.is_empty())
    }

    /// Requests sent and not answered.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Fetches the leader node holds or will hold once their request arrives.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// The requests to send now, in order, at Fetch `version`: the queued fetches, one request
    /// per kind (a request's replica id and MaxWaitMs are its fetches': the groups' long polls,
    /// adoption's anonymous probes answered at once), or a poll when nothing is queued. Each is
    /// counted as sent: the caller sends them all in this order, or fails the session.
    pub fn requests(&mut self, version: i16) -> Vec<fetch::FetchRequest> {
        let queued = std::mem::take(&mut self.queued);
        if queued.is_empty() {
            let Some(template) = self.template.clone() else {
                return Vec::new();
            };
            return vec![self.request(&template, Vec::new(), version)];
        }
        // In the order each kind first came.
        let mut kinds: Vec<(i32, i32)> = Vec::new();
        let mut batches: Vec<Vec<Queued<R>>> = Vec::new();
        for q in queued {
            let kind = (q.1.replica.id, q.1.max_wait_ms);
            match kinds.iter().position(|k| *k == kind) {
                Some(i) => batches[i].push(q),
                None => {
                    kinds.push(kind);
                    batches.push(vec![q]);
                }
            }
        }
        batches
            .into_iter()
            .map(|batch| {
                let template = batch[0].1.clone();
                self.request(&template, batch, version)
            })
            .collect()
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
        self.view.held.borrow_mut().clear();
        self.view.answered.set(None);
        let mut held: Vec<(At, Held<R>)> = self.held.drain().collect();
        held.sort_by_key(|(at, _)| *at);
        let mut out: Vec<R> = held.into_iter().map(|(_, h)| h.reply).collect();
        out.extend(self.fail_queued());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::errors::ErrorCode;
    use crate::raft::message::Records;
    use crate::raft::ReplicaKey;

    fn key(partition: i32) -> GroupKey {
        GroupKey::new("kv", partition).unwrap()
    }

    fn fetch(replica: i32, max_wait_ms: i32) -> FetchRequest {
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
    fn answer(parts: &[(&GroupKey, i64)], top: ErrorCode) -> fetch::FetchResponse {
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
    fn an_answer_counts_only_for_the_fetch_its_request_carried() {
        let (a, b) = (key(0), key(1));
        let mut s = book();
        // Request 0 carries a's first fetch and b's; request 1 a's next fetch (the first was
        // failed and sent again).
        s.queue(a.clone(), fetch(2, 800), 10);
        s.queue(b.clone(), fetch(2, 800), 21);
        assert_eq!(s.requests(17).len(), 1);
        s.queue(a.clone(), fetch(2, 800), 20);
        assert_eq!(s.requests(17).len(), 1);
        assert_eq!((s.in_flight(), s.held()), (2, 2));
        // The answer to request 0 names both: b's counts, a's is for the fetch replaced.
        let got = s
            .answered(
                &answer(&[(&a, 100), (&b, 200)], ErrorCode::NONE),
                Instant::now(),
            )
            .unwrap();
        let got: Vec<(u64, i64)> = got.iter().map(|(r, f)| (*r, f.high_watermark)).collect();
        assert_eq!(got, vec![(21, 200)]);
        assert_eq!(s.held(), 1, "a's second fetch is still held");
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
        s.requests(17);
        s.queue(b.clone(), fetch(2, 800), 2);
        s.requests(17);
        let got = s
            .answered(&answer(&[], ErrorCode::INVALID_REQUEST), Instant::now())
            .unwrap();
        assert_eq!(got.len(), 1, "b's fetch came in the next request");
        assert_eq!(got[0].0, 1);
        assert_eq!(got[0].1.error, ErrorCode::INVALID_REQUEST);
        assert_eq!(s.fail_all(), vec![2]);
    }

    #[test]
    fn one_request_per_kind_and_a_poll_while_fetches_are_held() {
        let mut s = book();
        assert!(
            s.requests(17).is_empty(),
            "no fetch yet: nothing to poll with"
        );
        s.queue(key(0), fetch(2, 800), 1);
        s.queue(key(1), fetch(-1, 0), 2);
        s.queue(key(2), fetch(2, 800), 3);
        let sent = s.requests(17);
        let shape: Vec<(i32, i32, usize)> = sent
            .iter()
            .map(|r| {
                let parts = r.topics.iter().map(|t| t.partitions.len()).sum();
                (r.replica_state.replica_id, r.max_wait_ms, parts)
            })
            .collect();
        assert_eq!(shape, vec![(2, 800, 2), (-1, 0, 1)]);
        assert_eq!(
            sent.iter().map(|r| r.session_epoch).collect::<Vec<_>>(),
            vec![0, 1]
        );
        s.answered(&answer(&[], ErrorCode::NONE), Instant::now());
        s.answered(&answer(&[], ErrorCode::NONE), Instant::now());
        assert!(
            s.request_due(),
            "fetches held and no request to answer them in"
        );
        let poll = s.requests(17);
        assert_eq!(poll.len(), 1);
        assert!(poll[0].topics.is_empty(), "a poll carries nothing");
        assert_eq!(poll[0].max_wait_ms, 800, "it waits as the long polls do");
        assert_eq!(s.fail_all(), vec![1, 2, 3]);
    }
}
