//! Vote, BeginQuorumEpoch and EndQuorumEpoch for many groups in one request, between ringraft
//! nodes (`node::rpc_batches` sends them, `node::route` serves them).
//!
//! The three RPCs carry `Topics[].Partitions[]` on the wire, as Fetch does; Kafka's raft client
//! sends and takes exactly one partition, so a batch never goes to a Kafka peer (group 0's
//! requests are never batched). A batch's parts share the request's top-level fields (cluster
//! id, the receiver's voter id, the leader's endpoints): parts that differ there go in
//! requests of their own (`BatchKey`). Its answer holds one partition per part; a part whose
//! group answered with a top-level error (say, a group the receiver does not host) carries that
//! error as its partition's, since the other parts' answers are good, and names no leader; the
//! sender lifts it back to the top (`REQUEST_LEVEL`), so that each group's core hears what a
//! lone request would have heard (and backs off, or logs a foreign cluster, as it would).

use bytes::Bytes;

use super::raft_rpc;
use crate::protocol::apis::ApiKey;
use crate::protocol::begin_quorum_epoch as bqe;
use crate::protocol::codec::{Reader, Writer};
use crate::protocol::end_quorum_epoch as eqe;
use crate::protocol::errors::ErrorCode;
use crate::protocol::group::GroupKey;
use crate::protocol::kraft::NodeEndpoint;
use crate::protocol::vote;
use crate::protocol::RequestBody;
use crate::raft::{Endpoint, Request, Response};

/// The most partitions one batch names. The sender splits larger batches; the receiver refuses
/// a request naming more (INVALID_REQUEST), so that a hostile frame cannot make it hold
/// millions of parts at once. A shard's groups rarely send more than a few dozen in a turn.
pub const MAX_PARTS: usize = 1024;

/// Errors that answer a request as a whole: in a batch's answer a partition carrying one with
/// epoch −1 is its part's top-level answer (`combine`), lifted back by `decode`.
/// REQUEST_TIMED_OUT is a part whose group did not answer in time (`PART_DEADLINE`).
pub const REQUEST_LEVEL: [ErrorCode; 4] = [
    ErrorCode::INVALID_REQUEST,
    ErrorCode::INCONSISTENT_CLUSTER_ID,
    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode::REQUEST_TIMED_OUT,
];

/// How long the receiver waits for one part's group before answering that part
/// REQUEST_TIMED_OUT: half of Kafka's default request timeout, so that one slow group (a
/// flush stuck, a group still opening) costs its own part and not the answers of the
/// others, which the sender would otherwise give up on together.
pub const PART_DEADLINE: std::time::Duration = std::time::Duration::from_millis(1_000);

/// The most bytes of top-level fields (cluster id, leader endpoints) a batch may name: each
/// part gets its own copy when split, so a frame of 1,024 parts with long endpoint lists
/// must not multiply into gigabytes. Real ones are under 200 bytes.
const MAX_TOP_LEVEL_BYTES: usize = 4096;

/// What requests must share to travel in one: the API and the top-level fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchKey {
    pub api: ApiKey,
    cluster_id: Option<String>,
    voter_id: i32,
    leader_endpoints: Vec<Endpoint>,
}

/// The batch a request may join; `None` for the RPCs that are never batched.
pub fn batch_key(request: &Request) -> Option<BatchKey> {
    let (api, cluster_id, voter_id, leader_endpoints) = match request {
        Request::Vote(r) => (ApiKey::VOTE, &r.cluster_id, r.voter.id, &[][..]),
        Request::BeginQuorumEpoch(r) => (
            ApiKey::BEGIN_QUORUM_EPOCH,
            &r.cluster_id,
            r.voter.id,
            &r.leader_endpoints[..],
        ),
        Request::EndQuorumEpoch(r) => (
            ApiKey::END_QUORUM_EPOCH,
            &r.cluster_id,
            -1,
            &r.leader_endpoints[..],
        ),
        _ => return None,
    };
    Some(BatchKey {
        api,
        cluster_id: cluster_id.clone(),
        voter_id,
        leader_endpoints: leader_endpoints.to_vec(),
    })
}

/// Appends `parts` of `more` to `into`'s, merging topics of the same name.
fn merge_topics<T, P>(
    into: &mut Vec<T>,
    more: Vec<T>,
    name: impl Fn(&T) -> &str,
    parts: impl Fn(&mut T) -> &mut Vec<P>,
) {
    for mut topic in more {
        match into.iter_mut().find(|t| name(t) == name(&topic)) {
            Some(existing) => {
                let moved = std::mem::take(parts(&mut topic));
                parts(existing).extend(moved);
            }
            None => into.push(topic),
        }
    }
}

/// Encodes `parts` (one `BatchKey`, at most one part per group) as one request at `version`.
pub fn encode(parts: &[(GroupKey, Request)], version: i16, w: &mut Writer) {
    let Some((_, first)) = parts.first() else {
        return;
    };
    // The first part's request, the others' topics merged into it (the three wire types
    // share their field names, not a trait).
    macro_rules! merged {
        ($variant:ident, $wire:path) => {{
            let mut wholes = parts.iter().filter_map(|(group, part)| match part {
                Request::$variant(r) => Some($wire(group, r)),
                _ => None,
            });
            if let Some(mut whole) = wholes.next() {
                for one in wholes {
                    let topics = &mut whole.topics;
                    merge_topics(topics, one.topics, |t| &t.topic_name, |t| &mut t.partitions);
                }
                whole.encode(w, version);
            }
        }};
    }
    match first {
        Request::Vote(_) => merged!(Vote, raft_rpc::vote_request),
        Request::BeginQuorumEpoch(_) => {
            merged!(BeginQuorumEpoch, raft_rpc::begin_quorum_epoch_request)
        }
        Request::EndQuorumEpoch(_) => merged!(EndQuorumEpoch, raft_rpc::end_quorum_epoch_request),
        _ => debug_assert!(false, "only Vote and the epoch RPCs are batched"),
    }
}

/// Each group's answer in a batch's answer `body` to `api` at `version`, in `groups`' order. A
/// group missing from it gets what a lone request's answer without its partition gets.
pub fn decode(
    api: ApiKey,
    version: i16,
    body: &Bytes,
    groups: &[GroupKey],
) -> Result<Vec<Response>, crate::protocol::AnswerError> {
    let mut r = Reader::new(body);
    let err = |source| crate::protocol::AnswerError::Body {
        key: api,
        version,
        source,
    };
    let answers = match api {
        ApiKey::VOTE => {
            let v = vote::VoteResponse::decode(&mut r, version, body).map_err(err)?;
            groups
                .iter()
                .map(|g| {
                    let p = find(g, &v.topics, |t| &t.topic_name, |t| &t.partitions);
                    Response::Vote(raft_rpc::core_vote_response(&v, p))
                })
                .collect()
        }
        ApiKey::BEGIN_QUORUM_EPOCH | ApiKey::END_QUORUM_EPOCH => {
            let (error, topics, nodes) = if api == ApiKey::BEGIN_QUORUM_EPOCH {
                let b =
                    bqe::BeginQuorumEpochResponse::decode(&mut r, version, body).map_err(err)?;
                (b.error_code, b.topics, b.node_endpoints)
            } else {
                let e = eqe::EndQuorumEpochResponse::decode(&mut r, version, body).map_err(err)?;
                (e.error_code, e.topics, e.node_endpoints)
            };
            groups
                .iter()
                .map(|g| {
                    let p = find(g, &topics, |t| &t.topic_name, |t| &t.partitions);
                    let answer = raft_rpc::core_epoch_part(error, p, &nodes);
                    if api == ApiKey::BEGIN_QUORUM_EPOCH {
                        Response::BeginQuorumEpoch(answer)
                    } else {
                        Response::EndQuorumEpoch(answer)
                    }
                })
                .collect()
        }
        _ => Vec::new(),
    };
    Ok(answers.into_iter().map(lift).collect())
}

/// A part's request-level error, carried as its partition's, back at the top, with no
/// leader named (`REQUEST_LEVEL`). A moved-down error names epoch −1; a group's own
/// partition-level answer (INVALID_REQUEST to a malformed vote) names its epoch and stays.
fn lift(answer: Response) -> Response {
    let (_, partition_error) = answer.errors();
    let epoch = match &answer {
        Response::Vote(r) => r.leader_epoch,
        Response::BeginQuorumEpoch(r) | Response::EndQuorumEpoch(r) => r.leader_epoch,
        _ => 0,
    };
    if epoch >= 0 || !REQUEST_LEVEL.contains(&partition_error) {
        return answer;
    }
    match answer {
        Response::Vote(r) => Response::Vote(crate::raft::message::VoteResponse {
            error: r.partition_error,
            ..lone_error_vote()
        }),
        Response::BeginQuorumEpoch(r) => {
            Response::BeginQuorumEpoch(crate::raft::message::EpochResponse {
                error: r.partition_error,
                ..lone_error_epoch()
            })
        }
        Response::EndQuorumEpoch(r) => {
            Response::EndQuorumEpoch(crate::raft::message::EpochResponse {
                error: r.partition_error,
                ..lone_error_epoch()
            })
        }
        other => other,
    }
}

/// `group`'s partition in an answer's topics.
fn find<'a, T, P: PartitionOf>(
    group: &GroupKey,
    topics: &'a [T],
    name: impl Fn(&T) -> &String,
    parts: impl Fn(&'a T) -> &'a [P],
) -> Option<&'a P> {
    topics
        .iter()
        .filter(|t| name(t) == group.topic())
        .flat_map(parts)
        .find(|p| p.partition_index() == group.partition())
}

trait PartitionOf {
    fn partition_index(&self) -> i32;
}

impl PartitionOf for vote::VoteResponsePartitionData {
    fn partition_index(&self) -> i32 {
        self.partition_index
    }
}

impl PartitionOf for bqe::BeginQuorumEpochResponsePartitionData {
    fn partition_index(&self) -> i32 {
        self.partition_index
    }
}

/// A part of a batch the receiver serves: the partition it names, and the request body naming
/// only that partition.
pub struct Part {
    pub topic: String,
    pub partition: i32,
    pub body: RequestBody,
}

/// The parts of a Vote, BeginQuorumEpoch or EndQuorumEpoch naming more than one partition
/// and at most `MAX_PARTS`; `None` for any other request (a lone request takes the usual
/// path, and its shape checks; so does one naming too many, refused there).
pub fn split(body: &RequestBody) -> Option<Vec<Part>> {
    fn count<T, P>(topics: &[T], parts: impl Fn(&T) -> &[P]) -> usize {
        topics.iter().map(|t| parts(t).len()).sum()
    }
    let endpoints = |e: &[crate::protocol::kraft::LeaderEndpoint]| -> usize {
        e.iter().map(|e| e.name.len() + e.host.len() + 8).sum()
    };
    let id_bytes = |id: &Option<String>| id.as_ref().map_or(0, String::len);
    // How many parts, and the bytes of top-level fields each part copies.
    let (n, top) = match body {
        RequestBody::Vote(r) => (count(&r.topics, |t| &t.partitions), id_bytes(&r.cluster_id)),
        RequestBody::BeginQuorumEpoch(r) => (
            count(&r.topics, |t| &t.partitions),
            id_bytes(&r.cluster_id) + endpoints(&r.leader_endpoints),
        ),
        RequestBody::EndQuorumEpoch(r) => (
            count(&r.topics, |t| &t.partitions),
            id_bytes(&r.cluster_id) + endpoints(&r.leader_endpoints),
        ),
        _ => return None,
    };
    if n <= 1 || n > MAX_PARTS || top > MAX_TOP_LEVEL_BYTES {
        return None;
    }
    // One lone request per partition, with the request's top-level fields (the three wire
    // types share their field names, not a trait).
    macro_rules! lone_parts {
        ($r:expr, $variant:ident) => {{
            let mut top = $r.clone();
            top.topics.clear();
            let mut parts = Vec::with_capacity(n);
            for t in &$r.topics {
                let mut shell = t.clone();
                shell.partitions.clear();
                for p in &t.partitions {
                    let mut topic = shell.clone();
                    topic.partitions.push(p.clone());
                    let mut one = top.clone();
                    one.topics.push(topic);
                    parts.push(Part {
                        topic: t.topic_name.clone(),
                        partition: p.partition_index,
                        body: RequestBody::$variant(one),
                    });
                }
            }
            parts
        }};
    }
    Some(match body {
        RequestBody::Vote(r) => lone_parts!(r, Vote),
        RequestBody::BeginQuorumEpoch(r) => lone_parts!(r, BeginQuorumEpoch),
        RequestBody::EndQuorumEpoch(r) => lone_parts!(r, EndQuorumEpoch),
        _ => return None,
    })
}

/// Encodes one answer to a batch of `api` from its parts' answers, in the parts' order. A part
/// answered with a top-level error (or not at all: `None`) carries it as its partition's error.
pub fn combine(api: ApiKey, version: i16, answers: &[(&Part, Option<Response>)], w: &mut Writer) {
    // A top-level error every part shares (a wrong cluster id) is the request's: said at the
    // top, as a lone request hears it. Not INVALID_REQUEST, which at the top says "no
    // batches here" (`node::rpc_batches`).
    let top = |a: &Option<Response>| a.as_ref().map(|r| r.errors().0);
    let shared = answers.first().and_then(|(_, a)| top(a)).filter(|e| {
        *e != ErrorCode::NONE
            && *e != ErrorCode::INVALID_REQUEST
            && answers.iter().all(|(_, a)| top(a) == Some(*e))
    });
    if let Some(error) = shared {
        raft_rpc::encode_top_level_error(api, version, error, w);
        return;
    }
    let mut nodes: Vec<NodeEndpoint> = Vec::new();
    let mut add_nodes = |more: Vec<NodeEndpoint>| {
        for n in more {
            if !nodes.contains(&n) {
                nodes.push(n);
            }
        }
    };
    if api == ApiKey::VOTE {
        let mut topics: Vec<vote::VoteResponseTopicData> = Vec::new();
        for (part, answer) in answers {
            let at = (part.topic.as_str(), part.partition);
            let r = match answer {
                Some(Response::Vote(r)) => r.clone(),
                _ => lone_error_vote(),
            };
            let mut one = raft_rpc::vote_response(at, &r);
            if one.topics.is_empty() {
                one = raft_rpc::vote_response(at, &as_partition_error_vote(r));
            }
            add_nodes(one.node_endpoints);
            merge_topics(
                &mut topics,
                one.topics,
                |t| &t.topic_name,
                |t| &mut t.partitions,
            );
        }
        let whole = vote::VoteResponse {
            error_code: ErrorCode::NONE,
            topics,
            node_endpoints: nodes,
        };
        whole.encode(w, version);
        return;
    }
    let mut topics: Vec<bqe::BeginQuorumEpochResponseTopicData> = Vec::new();
    for (part, answer) in answers {
        let at = (part.topic.as_str(), part.partition);
        let r = match answer {
            Some(Response::BeginQuorumEpoch(r) | Response::EndQuorumEpoch(r)) => r.clone(),
            _ => lone_error_epoch(),
        };
        let mut one = raft_rpc::epoch_response(at, &r);
        if one.topics.is_empty() {
            one = raft_rpc::epoch_response(at, &as_partition_error_epoch(r));
        }
        add_nodes(one.node_endpoints);
        merge_topics(
            &mut topics,
            one.topics,
            |t| &t.topic_name,
            |t| &mut t.partitions,
        );
    }
    if api == ApiKey::BEGIN_QUORUM_EPOCH {
        bqe::BeginQuorumEpochResponse {
            error_code: ErrorCode::NONE,
            topics,
            node_endpoints: nodes,
        }
        .encode(w, version);
    } else {
        eqe::EndQuorumEpochResponse {
            error_code: ErrorCode::NONE,
            topics,
            node_endpoints: nodes,
        }
        .encode(w, version);
    }
}

/// A part whose group did not answer within `PART_DEADLINE`.
pub fn timed_out(api: ApiKey) -> Response {
    let epoch = crate::raft::message::EpochResponse {
        error: ErrorCode::REQUEST_TIMED_OUT,
        ..lone_error_epoch()
    };
    match api {
        ApiKey::BEGIN_QUORUM_EPOCH => Response::BeginQuorumEpoch(epoch),
        ApiKey::END_QUORUM_EPOCH => Response::EndQuorumEpoch(epoch),
        _ => Response::Vote(crate::raft::message::VoteResponse {
            error: ErrorCode::REQUEST_TIMED_OUT,
            ..lone_error_vote()
        }),
    }
}

/// What a part of the wrong shape, or naming no group here, gets: a lone request's answer.
fn lone_error_vote() -> crate::raft::message::VoteResponse {
    crate::raft::message::VoteResponse {
        error: ErrorCode::INVALID_REQUEST,
        partition_error: ErrorCode::NONE,
        leader_id: -1,
        leader_epoch: -1,
        vote_granted: false,
        leader_endpoints: Vec::new(),
    }
}

fn lone_error_epoch() -> crate::raft::message::EpochResponse {
    crate::raft::message::EpochResponse {
        error: ErrorCode::INVALID_REQUEST,
        partition_error: ErrorCode::NONE,
        leader_id: -1,
        leader_epoch: -1,
        leader_endpoints: Vec::new(),
    }
}

fn as_partition_error_vote(
    r: crate::raft::message::VoteResponse,
) -> crate::raft::message::VoteResponse {
    crate::raft::message::VoteResponse {
        error: ErrorCode::NONE,
        partition_error: r.error,
        ..lone_error_vote()
    }
}

fn as_partition_error_epoch(
    r: crate::raft::message::EpochResponse,
) -> crate::raft::message::EpochResponse {
    crate::raft::message::EpochResponse {
        error: ErrorCode::NONE,
        partition_error: r.error,
        ..lone_error_epoch()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::message::{self as m, EpochResponse, VoteResponse};
    use crate::raft::ReplicaKey;

    fn vote(epoch: i32, pre_vote: bool) -> Request {
        Request::Vote(m::VoteRequest {
            cluster_id: Some("c".into()),
            voter: ReplicaKey::new(2, None),
            replica_epoch: epoch,
            candidate: ReplicaKey::new(1, Some(uuid::Uuid::from_u128(7))),
            last_offset_epoch: epoch - 1,
            last_offset: 10 * i64::from(epoch),
            pre_vote,
        })
    }

    fn key(topic: &str, partition: i32) -> GroupKey {
        GroupKey::new(topic, partition).unwrap()
    }

    #[test]
    fn a_batch_splits_back_into_each_groups_own_request() {
        let parts = vec![
            (key("kv", 0), vote(3, true)),
            (key("orders", 4), vote(5, false)),
            (key("kv", 1), vote(4, true)),
        ];
        assert!(parts
            .iter()
            .all(|(_, r)| batch_key(r) == batch_key(&parts[0].1)));
        let mut w = Writer::new();
        encode(&parts, 2, &mut w);
        let bytes = Bytes::from(w.into_vec());
        let body = vote::VoteRequest::decode(&mut Reader::new(&bytes), 2, &bytes).unwrap();
        assert_eq!(body.topics.len(), 2, "kv's partitions share a topic");
        let pieces = split(&RequestBody::Vote(body)).expect("three partitions");
        assert_eq!(pieces.len(), 3);
        for (group, request) in &parts {
            let part = pieces
                .iter()
                .find(|p| p.topic == group.topic() && p.partition == group.partition())
                .unwrap_or_else(|| panic!("{group} is a part"));
            let (at, lone) = raft_rpc::request_from_wire(&part.body).expect("one partition");
            assert!(group.is(&at.expect("names its partition")));
            assert_eq!(&lone, request);
        }
        // Nor is one naming more than MAX_PARTS partitions (refused on the usual path).
        let many: Vec<(GroupKey, Request)> = (0..=MAX_PARTS as i32)
            .map(|p| (key("kv", p), vote(3, true)))
            .collect();
        let mut w = Writer::new();
        encode(&many, 2, &mut w);
        let bytes = Bytes::from(w.into_vec());
        let body = vote::VoteRequest::decode(&mut Reader::new(&bytes), 2, &bytes).unwrap();
        assert!(split(&RequestBody::Vote(body.clone())).is_none());
        let mut fits = body;
        fits.topics[0].partitions.pop();
        assert_eq!(
            split(&RequestBody::Vote(fits)).map(|p| p.len()),
            Some(MAX_PARTS)
        );
        // A lone request is not a batch: it takes the usual path and its shape checks.
        let mut w = Writer::new();
        encode(&parts[..1], 2, &mut w);
        let bytes = Bytes::from(w.into_vec());
        let body = vote::VoteRequest::decode(&mut Reader::new(&bytes), 2, &bytes).unwrap();
        assert!(split(&RequestBody::Vote(body)).is_none());
    }

    #[test]
    fn requests_with_different_top_level_fields_do_not_share_a_batch() {
        let Request::Vote(mut other) = vote(3, true) else {
            unreachable!()
        };
        other.voter = ReplicaKey::new(3, None);
        assert_ne!(batch_key(&vote(3, true)), batch_key(&Request::Vote(other)));
        let bqe = |endpoints: Vec<Endpoint>| {
            Request::BeginQuorumEpoch(m::BeginQuorumEpochRequest {
                cluster_id: Some("c".into()),
                voter: ReplicaKey::new(2, None),
                leader_id: 1,
                leader_epoch: 3,
                leader_endpoints: endpoints,
            })
        };
        let at = |port| Endpoint {
            name: "CONTROLLER".into(),
            host: "127.0.0.1".into(),
            port,
        };
        assert_ne!(batch_key(&bqe(vec![at(1)])), batch_key(&bqe(vec![at(2)])));
        assert_ne!(batch_key(&bqe(vec![])), batch_key(&vote(3, true)));
        assert!(batch_key(&Request::ApiVersions).is_none());
    }

    #[test]
    fn each_group_hears_its_own_answer_from_a_combined_one() {
        let groups = [key("kv", 0), key("kv", 1), key("orders", 0), key("gone", 0)];
        let parts: Vec<Part> = groups[..3]
            .iter()
            .map(|g| Part {
                topic: g.topic().into(),
                partition: g.partition(),
                body: RequestBody::ApiVersions(Default::default()),
            })
            .collect();
        let granted = VoteResponse {
            error: ErrorCode::NONE,
            partition_error: ErrorCode::NONE,
            leader_id: -1,
            leader_epoch: 4,
            vote_granted: true,
            leader_endpoints: vec![],
        };
        // A group's own partition-level refusal (a malformed vote) names its epoch: it stays.
        let malformed = VoteResponse {
            partition_error: ErrorCode::INVALID_REQUEST,
            leader_epoch: 5,
            vote_granted: false,
            ..granted.clone()
        };
        let fenced = VoteResponse {
            partition_error: ErrorCode::FENCED_LEADER_EPOCH,
            leader_id: 3,
            leader_epoch: 6,
            vote_granted: false,
            // NodeEndpoints carry no listener name.
            leader_endpoints: vec![Endpoint {
                name: String::new(),
                host: "h3".into(),
                port: 9093,
            }],
            ..granted.clone()
        };
        let answers = vec![
            (&parts[0], Some(Response::Vote(granted.clone()))),
            (&parts[1], Some(Response::Vote(fenced.clone()))),
            // No group here: what a lone request would have been told, as its partition's.
            (&parts[2], None),
        ];
        let mut w = Writer::new();
        combine(ApiKey::VOTE, 2, &answers, &mut w);
        let body = Bytes::from(w.into_vec());
        let heard = decode(ApiKey::VOTE, 2, &body, &groups).unwrap();
        assert_eq!(heard[0], Response::Vote(granted));
        assert_eq!(heard[1], Response::Vote(fenced));
        let answers = vec![(&parts[0], Some(Response::Vote(malformed.clone())))];
        let mut w = Writer::new();
        combine(ApiKey::VOTE, 2, &answers, &mut w);
        let body = Bytes::from(w.into_vec());
        let heard_alone = decode(ApiKey::VOTE, 2, &body, &groups[..1]).unwrap();
        assert_eq!(heard_alone, vec![Response::Vote(malformed)]);
        // Lifted back to the top, naming no leader: the group's core backs off as from a
        // lone refusal, instead of asking again at once.
        let Response::Vote(unhosted) = &heard[2] else {
            panic!("{:?}", heard[2])
        };
        assert_eq!(
            (
                unhosted.error,
                unhosted.partition_error,
                unhosted.leader_epoch
            ),
            (ErrorCode::INVALID_REQUEST, ErrorCode::NONE, -1)
        );
        // A group the answer leaves out hears what a lone answer without its partition says.
        assert_eq!(heard[3].errors().0, ErrorCode::UNKNOWN_SERVER_ERROR);

        let epoch = |leader_epoch| EpochResponse {
            error: ErrorCode::NONE,
            partition_error: ErrorCode::NONE,
            leader_id: 1,
            leader_epoch,
            leader_endpoints: vec![],
        };
        let answers = vec![
            (&parts[0], Some(Response::BeginQuorumEpoch(epoch(4)))),
            (&parts[1], Some(Response::BeginQuorumEpoch(epoch(9)))),
        ];
        let mut w = Writer::new();
        combine(ApiKey::BEGIN_QUORUM_EPOCH, 1, &answers, &mut w);
        let body = Bytes::from(w.into_vec());
        let heard = decode(ApiKey::BEGIN_QUORUM_EPOCH, 1, &body, &groups[..2]).unwrap();
        assert_eq!(
            heard,
            vec![
                Response::BeginQuorumEpoch(epoch(4)),
                Response::BeginQuorumEpoch(epoch(9))
            ]
        );

        // Every part refused for the request's cluster id: each group hears it at the top, as
        // a lone request does (and logs that the peer is of another cluster).
        let wrong = EpochResponse {
            error: ErrorCode::INCONSISTENT_CLUSTER_ID,
            leader_id: -1,
            leader_epoch: -1,
            ..epoch(0)
        };
        let answers = vec![
            (&parts[0], Some(Response::BeginQuorumEpoch(wrong.clone()))),
            (&parts[1], Some(Response::BeginQuorumEpoch(wrong))),
        ];
        let mut w = Writer::new();
        combine(ApiKey::BEGIN_QUORUM_EPOCH, 1, &answers, &mut w);
        let body = Bytes::from(w.into_vec());
        let heard = decode(ApiKey::BEGIN_QUORUM_EPOCH, 1, &body, &groups[..2]).unwrap();
        assert!(heard
            .iter()
            .all(|r| r.errors() == (ErrorCode::INCONSISTENT_CLUSTER_ID, ErrorCode::NONE)));
    }
}
