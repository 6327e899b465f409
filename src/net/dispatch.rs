//! What the node does with one request frame: a pure function from bytes to an action, so the
//! hostile-frame tests and the fuzzer run exactly the code the server runs.

use std::sync::atomic::{AtomicI16, AtomicI64, Ordering};
use std::sync::Arc;

use super::frame_out::LocalFrame;
use crate::protocol::api_versions::{self, FeatureState, FEATURE_COUNT};
use crate::protocol::request::encode_response_frame;
use crate::protocol::{apis, decode_request, ApiKey, Decoded, RequestBody, RequestError};

/// A decoded Raft RPC, for the raft shard to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaftCall {
    pub correlation_id: i32,
    pub key: ApiKey,
    pub version: i16,
    pub response_header_version: i16,
    pub body: RequestBody,
    /// The connection it came on (unique in the process; 0 when not from a connection).
    pub connection: u64,
}

/// Where a connection hands the requests it does not answer itself (every Raft and admin
/// RPC): the node's router (Fetch to the fetch shard, FetchSnapshot to a snapshot shard, the
/// rest to the raft shard), anything in a test. The server knows only this trait.
pub trait Service: 'static {
    /// The answer to `call`; `None` closes the connection (the node stops).
    fn call(&self, call: RaftCall) -> impl std::future::Future<Output = Option<Served>>;

    /// Whether `call` may wait for the connection's next request as well as for its answer
    /// (a Fetch session's request, held until a group answers or the next one arrives): the
    /// connection then reads its next frame while `call` runs, and says so by `cut_short`.
    fn reads_ahead(&self, _call: &RaftCall) -> bool {
        false
    }

    /// The next request on `connection` arrived while its call that `reads_ahead` runs:
    /// answer that call now, with what it has.
    fn cut_short(&self, _connection: u64) {}

    /// `connection` closed: forget what was kept for it.
    fn closed(&self, _connection: u64) {}
}

/// A service's answer to a call.
#[derive(Debug)]
pub struct Served {
    /// The whole response frame.
    pub frame: LocalFrame,
    /// Which kind of peer sent the call, when it tells (a Fetch names its replica): voters'
    /// connections are served ahead of observers'.
    pub class: Option<PeerClass>,
}

/// Who is on the other end of a connection, as far as scheduling goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerClass {
    /// A voter replicating, or a connection that has not said yet.
    Voter,
    /// An observer (a broker) fetching.
    Observer,
}

/// The answer to a frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    /// Send these bytes (a whole response frame, size prefix included).
    Respond(Vec<u8>),
    /// Hand the request to the Raft core; its answer is the response.
    Raft(RaftCall),
    /// Close the connection without answering, as Kafka does (docs/wire.md §6).
    Close(RequestError),
}

/// The node state a response depends on, shared by every acceptor shard: the finalized
/// feature levels (one per `SUPPORTED_FEATURES` entry; set from the bootstrap checkpoint at
/// start, kraft.version by the raft shard as its records are applied) and their epoch.
#[derive(Debug, Clone, Default)]
pub struct ServerState {
    levels: Arc<[AtomicI16; FEATURE_COUNT]>,
    finalized_features_epoch: Arc<AtomicI64>,
}

impl ServerState {
    pub fn new(features: FeatureState) -> Self {
        let state = ServerState::default();
        state.set_features(features);
        state
    }

    pub fn features(&self) -> FeatureState {
        FeatureState {
            levels: std::array::from_fn(|i| self.levels[i].load(Ordering::Relaxed)),
            finalized_features_epoch: self.finalized_features_epoch.load(Ordering::Relaxed),
        }
    }

    pub fn set_features(&self, features: FeatureState) {
        for (slot, level) in self.levels.iter().zip(features.levels) {
            slot.store(level, Ordering::Relaxed);
        }
        self.finalized_features_epoch
            .store(features.finalized_features_epoch, Ordering::Relaxed);
    }

    /// The raft shard's part: kraft.version and the epoch; the other levels stay.
    pub fn set_kraft_version(&self, level: i16, finalized_features_epoch: i64) {
        let mut features = self.features();
        features.set_kraft_version_level(level);
        features.finalized_features_epoch = finalized_features_epoch;
        self.set_features(features);
    }
}

pub fn handle_frame(frame: &[u8], state: &ServerState) -> Action {
    let decoded = match decode_request(frame) {
        Ok(decoded) => decoded,
        Err(error) => return Action::Close(error),
    };
    match decoded {
        Decoded::ApiVersionsTooNew { header } => {
            let body = api_versions::unsupported_version_answer();
            Action::Respond(encode_response_frame(header.correlation_id, 0, |w| {
                body.encode(w, 0)
            }))
        }
        Decoded::Request { header, spec, body } => {
            let version = header.api_version;
            let header_version = spec.response_header_version(version);
            match body {
                RequestBody::ApiVersions(request) => {
                    let response =
                        api_versions::answer(&request, version, apis::SERVED, state.features());
                    Action::Respond(encode_response_frame(
                        header.correlation_id,
                        header_version,
                        |w| response.encode(w, version),
                    ))
                }
                body => Action::Raft(RaftCall {
                    correlation_id: header.correlation_id,
                    key: spec.key,
                    version,
                    response_header_version: header_version,
                    body,
                    connection: 0,
                }),
            }
        }
    }
}
