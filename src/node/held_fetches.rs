//! The leader's side of Fetch sessions (`net::fetch_session`): per connection, the fetches of
//! the session's groups that their executors have not answered yet.
//!
//! A session request hands each fetch it carries to its group's executor (on whichever shard
//! is the group's home) and keeps where the answer will come. The request is answered as soon
//! as one group answered, with every answer there by then; or at its MaxWaitMs; or when the
//! connection's next request arrived (`cut_short`), so that a busy group's next fetch is never
//! stuck behind a session answer that waits for idle groups. Fetches not answered yet stay
//! held for a later answer of the session; a new fetch for the same partition replaces the
//! held one, whose answer is dropped.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use futures_channel::oneshot;
use futures_util::stream::{FuturesUnordered, Stream};

use super::call::{Answer, Call};
use super::groups::GroupTable;
use crate::net::fetch_session::{self, At};
use crate::net::frame_out::{Chunk, LocalFrame};
use crate::protocol::errors::ErrorCode;
use crate::protocol::fetch;
use crate::protocol::group::WireTopic;
use crate::protocol::request::encode_response_frame_parts;
use crate::raft::message::{FetchResponse, Records};
use crate::raft::{Request, Response};

use super::route::ReplyTo;

/// How long a session request for fetches that want their answer at once may wait for one.
const SESSION_WAIT_MIN_MS: i32 = 100;

/// Every connection's held fetches, on the shard that serves the connections.
#[derive(Default)]
pub struct HeldFetches {
    by_connection: RefCell<HashMap<u64, Rc<Held>>>,
}

/// A held fetch's answer to come: its partition, which of its fetches it answers, the answer
/// (`None`: the group's executor stopped).
type Coming = Pin<Box<dyn Future<Output = (At, u64, Option<Answer>)>>>;

/// One connection's session.
#[derive(Default)]
struct Held {
    /// Polled only when one of them was woken: a session holds hundreds of fetches.
    waiting: RefCell<FuturesUnordered<Coming>>,
    /// Each partition's current fetch, numbered; an answer to an older one is dropped.
    current: RefCell<HashMap<At, u64>>,
    numbered: Cell<u64>,
    /// Answers in, not sent yet.
    answered: RefCell<Vec<(At, Option<Answer>)>>,
    /// The connection's next request arrived: answer now.
    cut: Cell<bool>,
    /// The parked request's task, for `cut_short`.
    waker: RefCell<Option<Waker>>,
}

impl Held {
    /// Keeps `answer` as where `at`'s fetch is answered, instead of any fetch held for it.
    fn hold(&self, at: At, answer: oneshot::Receiver<Answer>) {
        let number = self.numbered.get();
        self.numbered.set(number + 1);
        self.current.borrow_mut().insert(at, number);
        let coming = async move { (at, number, answer.await.ok()) };
        self.waiting.borrow_mut().push(Box::pin(coming));
    }

    /// Moves every answer that came into `answered`; true when there is any, or the wait was
    /// cut short.
    fn collect(&self, cx: &mut Context<'_>) -> bool {
        let mut answered = self.answered.borrow_mut();
        let mut current = self.current.borrow_mut();
        let mut waiting = self.waiting.borrow_mut();
        while let Poll::Ready(Some((at, number, got))) = Pin::new(&mut *waiting).poll_next(cx) {
            if current.get(&at) == Some(&number) {
                current.remove(&at);
                tracing::trace!(partition = at.1, number, some = got.is_some(), "answered");
                answered.push((at, got));
            } else {
                tracing::trace!(partition = at.1, number, current = ?current.get(&at), "stale");
            }
        }
        !answered.is_empty() || self.cut.get()
    }
}

impl HeldFetches {
    /// Answers session request `r` on `connection`: its fetches handed to their groups, then
    /// the answers that came within its MaxWaitMs (at least one, unless none came).
    pub async fn serve(
        &self,
        groups: &GroupTable,
        connection: u64,
        to: &ReplyTo,
        r: &fetch::FetchRequest,
    ) -> LocalFrame {
        let held = self
            .by_connection
            .borrow_mut()
            .entry(connection)
            .or_default()
            .clone();
        held.cut.set(false);
        for (at, request) in fetch_session::fetches(r) {
            let WireTopic::Id(topic_id) = at.topic else {
                continue;
            };
            let key = (topic_id, at.partition);
            let offset = request.fetch_offset;
            let answer = groups
                .find(&at)
                .and_then(|hosted| hosted.raft.submit(Call::Raft(Request::Fetch(request))));
            tracing::trace!(
                connection,
                partition = at.partition,
                offset,
                submitted = answer.is_some(),
                "carried"
            );
            match answer {
                Some(answer) => held.hold(key, answer),
                // Not hosted here (or stopped): said at once, as a lone Fetch would hear it.
                None => held.answered.borrow_mut().push((key, None)),
            }
        }
        // Each fetch is answered by its group within the MaxWaitMs it carries; the session
        // request waits twice that for one, so that it is not answered empty just before,
        // and at least a moment for fetches answered at once (MaxWaitMs 0: adoption's probes).
        let wait = r
            .max_wait_ms
            .saturating_mul(2)
            .clamp(SESSION_WAIT_MIN_MS, crate::raft::FETCH_PARK_MAX_MS);
        let answered = std::future::poll_fn(|cx| {
            *held.waker.borrow_mut() = Some(cx.waker().clone());
            if held.collect(cx) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        });
        futures_lite::future::or(answered, async {
            glommio::timer::sleep(Duration::from_millis(wait as u64)).await;
        })
        .await;
        held.waker.borrow_mut().take();
        held.collect(&mut Context::from_waker(Waker::noop()));
        let answers = std::mem::take(&mut *held.answered.borrow_mut());
        encode(to, answers)
    }

    /// The next request on `connection` arrived: its parked request is answered now.
    pub fn cut_short(&self, connection: u64) {
        if let Some(held) = self.by_connection.borrow().get(&connection) {
            held.cut.set(true);
            if let Some(waker) = held.waker.borrow_mut().take() {
                waker.wake();
            }
        }
    }

    /// `connection` closed: its held fetches are dropped (their groups' answers go nowhere).
    pub fn closed(&self, connection: u64) {
        self.by_connection.borrow_mut().remove(&connection);
    }
}

/// What a partition this node does not serve (or whose executor stopped) hears.
fn unknown_partition() -> FetchResponse {
    FetchResponse {
        error: ErrorCode::NONE,
        partition_error: ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
        high_watermark: -1,
        log_start_offset: -1,
        diverging_epoch: None,
        leader_id: -1,
        leader_epoch: -1,
        snapshot_id: None,
        records: Records::None,
        leader_endpoints: Vec::new(),
    }
}

/// The session answer: each partition's answer, its records in a hole of their own.
fn encode(to: &ReplyTo, answers: Vec<(At, Option<Answer>)>) -> LocalFrame {
    let mut parts: Vec<(At, FetchResponse, Vec<Bytes>)> = Vec::with_capacity(answers.len());
    for (at, answer) in answers {
        match answer {
            Some(Answer::Raft {
                response: Response::Fetch(response),
                data,
            }) => parts.push((at, response, data)),
            // A Fetch is answered with a Fetch answer; anything else is a stopped executor's.
            _ => parts.push((at, unknown_partition(), Vec::new())),
        }
    }
    let lengths: Vec<usize> = parts
        .iter()
        .map(|(_, _, data)| data.iter().map(Bytes::len).sum())
        .collect();
    let wire: Vec<(At, &FetchResponse, usize)> = parts
        .iter()
        .zip(&lengths)
        .map(|((at, response, _), len)| (*at, response, *len))
        .collect();
    let response = fetch_session::response(&wire, to.version);
    let frame_parts =
        encode_response_frame_parts(to.correlation_id, to.response_header_version, |w| {
            response.encode(w, to.version)
        });
    let data = parts
        .into_iter()
        .zip(lengths)
        .filter(|(_, len)| *len > 0)
        .flat_map(|((_, _, data), _)| data.into_iter().map(Chunk::Shared))
        .collect();
    LocalFrame {
        parts: frame_parts,
        data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::groups::Hosted;
    use crate::node::handle::{ExecutorInput, RaftHandle};
    use crate::protocol::group::GroupKey;
    use crate::protocol::Reader;
    use crate::raft::message::FetchRequest;
    use crate::raft::ReplicaKey;
    use futures_channel::mpsc;
    use futures_lite::StreamExt;
    use std::sync::Arc;

    fn hosted(key: &GroupKey) -> (Hosted, mpsc::UnboundedReceiver<ExecutorInput>) {
        let (raft, inputs) = RaftHandle::channel();
        let hosted = Hosted {
            key: key.clone(),
            raft,
            home: 0,
            home_cpu: 0,
            preferred: None,
            voters: Arc::default(),
            gauges: Arc::default(),
            declared: true,
        };
        (hosted, inputs)
    }

    fn session_request(groups: &[&GroupKey], offset: i64) -> fetch::FetchRequest {
        let fetch = FetchRequest {
            cluster_id: Some("c".into()),
            replica: ReplicaKey::new(2, None),
            max_wait_ms: 800,
            fetch_offset: offset,
            last_fetched_epoch: 1,
            current_leader_epoch: 1,
            max_bytes: 1 << 20,
            high_watermark: None,
        };
        let parts: Vec<_> = groups
            .iter()
            .map(|g| ((*g).clone(), fetch.clone()))
            .collect();
        fetch_session::request(&fetch, 800, 0, &parts, 17)
    }

    /// The group's executor: the next Fetch it was handed, and where to answer it.
    async fn next_fetch(
        inputs: &mut mpsc::UnboundedReceiver<ExecutorInput>,
    ) -> (FetchRequest, oneshot::Sender<Answer>) {
        match inputs.next().await {
            Some(ExecutorInput::Request {
                call: Call::Raft(Request::Fetch(f)),
                reply,
            }) => (f, reply),
            _ => panic!("not a Fetch"),
        }
    }

    fn answer(high_watermark: i64, records: &'static [u8]) -> Answer {
        Answer::Raft {
            response: Response::Fetch(FetchResponse {
                high_watermark,
                ..unknown_partition_with(ErrorCode::NONE)
            }),
            data: if records.is_empty() {
                vec![]
            } else {
                vec![Bytes::from_static(records)]
            },
        }
    }

    fn unknown_partition_with(partition_error: ErrorCode) -> FetchResponse {
        FetchResponse {
            partition_error,
            ..unknown_partition()
        }
    }

    /// The partitions of a session answer frame: (partition, high watermark, records).
    fn parts_of(frame: &LocalFrame) -> Vec<(i32, i64, Vec<u8>)> {
        let bytes = Bytes::from(frame.to_vec());
        // Size prefix, correlation id, the flexible header's tag buffer.
        let body = bytes.slice(4 + 4 + 1..);
        let f = fetch::FetchResponse::decode(&mut Reader::new(&body), 17, &body).unwrap();
        fetch_session::answers(&f)
            .into_iter()
            .map(|((_, p), a)| {
                let records = match a.records {
                    Records::Bytes(b) => b.to_vec(),
                    _ => Vec::new(),
                };
                (p, a.high_watermark, records)
            })
            .collect()
    }

    const TO: ReplyTo = ReplyTo {
        key: crate::protocol::ApiKey::FETCH,
        version: 17,
        correlation_id: 7,
        response_header_version: 1,
    };

    #[test]
    fn a_session_answers_what_came_and_holds_the_rest() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async {
                let (busy, idle) = (
                    GroupKey::new("kv", 0).unwrap(),
                    GroupKey::new("kv", 1).unwrap(),
                );
                let (busy_hosted, mut busy_in) = hosted(&busy);
                let (idle_hosted, mut idle_in) = hosted(&idle);
                let mut table = GroupTable::default();
                table.insert(busy_hosted);
                table.insert(idle_hosted);
                let held = Rc::new(HeldFetches::default());

                // Both fetches go to their executors; only the busy group answers.
                let first = {
                    let (held, table) = (held.clone(), table.clone());
                    let r = session_request(&[&busy, &idle], 10);
                    glommio::spawn_local(async move { held.serve(&table, 1, &TO, &r).await })
                };
                let (f, busy_reply) = next_fetch(&mut busy_in).await;
                assert_eq!((f.fetch_offset, f.replica.id, f.max_wait_ms), (10, 2, 800));
                let (_, idle_reply) = next_fetch(&mut idle_in).await;
                busy_reply.send(answer(11, b"rec")).ok().unwrap();
                let frame = first.await;
                assert_eq!(parts_of(&frame), vec![(0, 11, b"rec".to_vec())]);

                // The idle group's fetch is still held: it answers in the next request, a
                // poll, without being sent again.
                let poll = {
                    let (held, table) = (held.clone(), table.clone());
                    glommio::spawn_local(async move {
                        held.serve(&table, 1, &TO, &session_request(&[], 0)).await
                    })
                };
                glommio::timer::sleep(Duration::from_millis(20)).await;
                idle_reply.send(answer(5, b"")).ok().unwrap();
                assert_eq!(parts_of(&poll.await), vec![(1, 5, Vec::new())]);

                // A parked request is cut short by the next one: answered empty at once.
                let parked = {
                    let (held, table) = (held.clone(), table.clone());
                    let r = session_request(&[&busy], 11);
                    glommio::spawn_local(async move { held.serve(&table, 1, &TO, &r).await })
                };
                let (_, old_reply) = next_fetch(&mut busy_in).await;
                let cut_at = std::time::Instant::now();
                held.cut_short(1);
                assert!(parts_of(&parked.await).is_empty());
                // Not at the request's wait (1.6 s): woken by the cut.
                assert!(cut_at.elapsed() < Duration::from_millis(800));

                // A new fetch for the same partition replaces the held one: the old answer
                // is dropped, the new one is sent.
                let replaced = {
                    let (held, table) = (held.clone(), table.clone());
                    let r = session_request(&[&busy], 12);
                    glommio::spawn_local(async move { held.serve(&table, 1, &TO, &r).await })
                };
                let (f, new_reply) = next_fetch(&mut busy_in).await;
                assert_eq!(f.fetch_offset, 12);
                old_reply.send(answer(99, b"old")).ok().unwrap();
                glommio::timer::sleep(Duration::from_millis(20)).await;
                new_reply.send(answer(13, b"new")).ok().unwrap();
                assert_eq!(parts_of(&replaced.await), vec![(0, 13, b"new".to_vec())]);

                // A partition not hosted here hears UNKNOWN_TOPIC_OR_PARTITION at once; a
                // closed connection forgets its fetches.
                let other = GroupKey::new("gone", 3).unwrap();
                let frame = held
                    .serve(&table, 1, &TO, &session_request(&[&other], 0))
                    .await;
                let bytes = Bytes::from(frame.to_vec());
                let body = bytes.slice(9..);
                let f = fetch::FetchResponse::decode(&mut Reader::new(&body), 17, &body).unwrap();
                let got = fetch_session::answers(&f);
                assert_eq!(got.len(), 1);
                assert_eq!(
                    got[0].1.partition_error,
                    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
                );
                held.closed(1);
                assert!(held.by_connection.borrow().is_empty());
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
