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
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use futures_channel::oneshot;

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

/// Every connection's held fetches, on the shard that serves the connections.
#[derive(Default)]
pub struct HeldFetches {
    by_connection: RefCell<HashMap<u64, Rc<Held>>>,
}

/// One connection's session.
#[derive(Default)]
struct Held {
    waiting: RefCell<Vec<(At, oneshot::Receiver<Answer>)>>,
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
        let mut waiting = self.waiting.borrow_mut();
        waiting.retain(|(held, _)| *held != at);
        self.answered.borrow_mut().retain(|(held, _)| *held != at);
        waiting.push((at, answer));
    }

    /// Moves every answer that came into `answered`; true when there is any, or the wait was
    /// cut short.
    fn collect(&self, waker: Option<&Waker>) -> bool {
        let mut answered = self.answered.borrow_mut();
        self.waiting.borrow_mut().retain_mut(|(at, answer)| {
            let got = match waker {
                Some(waker) => {
                    let mut cx = std::task::Context::from_waker(waker);
                    match std::pin::Pin::new(&mut *answer).poll(&mut cx) {
                        Poll::Ready(got) => Some(got.ok()),
                        Poll::Pending => None,
                    }
                }
                None => match answer.try_recv() {
                    Ok(Some(got)) => Some(Some(got)),
                    Ok(None) => None,
                    Err(_) => Some(None),
                },
            };
            match got {
                Some(got) => {
                    answered.push((*at, got));
                    false
                }
                None => true,
            }
        });
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
            let answer = groups
                .find(&at)
                .and_then(|hosted| hosted.raft.submit(Call::Raft(Request::Fetch(request))));
            match answer {
                Some(answer) => held.hold(key, answer),
                // Not hosted here (or stopped): said at once, as a lone Fetch would hear it.
                None => held.answered.borrow_mut().push((key, None)),
            }
        }
        // Each fetch is answered by its group within the MaxWaitMs it carries; the session
        // request waits twice that for one, so that it is not answered empty just before.
        let wait = r
            .max_wait_ms
            .saturating_mul(2)
            .clamp(0, crate::raft::FETCH_PARK_MAX_MS);
        let answered = std::future::poll_fn(|cx| {
            *held.waker.borrow_mut() = Some(cx.waker().clone());
            if held.collect(Some(cx.waker())) {
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
        held.collect(None);
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
