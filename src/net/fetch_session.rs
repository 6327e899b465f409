//! The wire form of a Fetch session between two ringraft nodes (issue 25; docs/groups.md,
//! "Coalesced sessions"): one long-polling Fetch on one connection carries the fetches of many
//! groups, from one raft shard of a follower node to one leader node.
//!
//! It is Kafka's Fetch with several partitions (`Topics[].Partitions[]`) and a SessionEpoch of
//! 0 or more. Kafka's raft client sends one partition and leaves SessionEpoch at the schema's
//! −1, so a Kafka peer never opens a session; ringraft opens them only for groups other than
//! `__cluster_metadata-0`, which only ringraft nodes host.
//!
//! A session is not KIP-227's incremental fetch. There, a partition left out of a request is
//! one whose position did not change; here it is one whose fetch the leader still holds:
//! - a request carries the fetches that are new since the last one; one with none (a poll)
//!   gives the leader a request to answer the held fetches in;
//! - the leader holds each partition's fetch until its group answers it, and answers the
//!   session as soon as one group has, at the request's MaxWaitMs, or when the next request
//!   arrives; the fetches still unanswered stay held for a later answer;
//! - a new fetch for a partition replaces the one held;
//! - each partition's answer is its group's answer, whole. Its error is in the partition's
//!   ErrorCode even when the group answered at the top level; `answers` moves the errors that
//!   only exist at the top level (INCONSISTENT_CLUSTER_ID, INVALID_REQUEST) back there.

use std::collections::HashMap;

use uuid::Uuid;

use super::raft_rpc;
use crate::protocol::errors::ErrorCode;
use crate::protocol::fetch;
use crate::protocol::group::{GroupKey, WirePartition, WireTopic};
use crate::raft::message::{self as m, FetchResponse};

/// A partition as a session names it: topic id and index.
pub type At = (Uuid, i32);

/// Whether a Fetch is a session's (SessionEpoch 0 or more).
pub fn is_session(r: &fetch::FetchRequest) -> bool {
    r.session_epoch >= 0
}

/// The errors a single-partition Fetch answer gives only at the top level.
fn top_level_only(error: ErrorCode) -> bool {
    error == ErrorCode::INCONSISTENT_CLUSTER_ID || error == ErrorCode::INVALID_REQUEST
}

/// Session request number `epoch` carrying `parts` (none: a poll), waiting at most
/// `max_wait_ms`. The top-level fields (cluster id, replica, MaxBytes) are `template`'s, a
/// fetch of this follower node.
pub fn request(
    template: &m::FetchRequest,
    max_wait_ms: i32,
    epoch: i32,
    parts: &[(GroupKey, m::FetchRequest)],
    version: i16,
) -> fetch::FetchRequest {
    let mut out = raft_rpc::fetch_request(GroupKey::metadata(), template, version);
    out.max_wait_ms = max_wait_ms;
    out.session_epoch = epoch.max(0);
    out.topics.clear();
    let mut topic_at: HashMap<Uuid, usize> = HashMap::new();
    for (group, fetch) in parts {
        let one = raft_rpc::fetch_request(group, fetch, version);
        let Some(partition) = one
            .topics
            .into_iter()
            .next()
            .and_then(|t| t.partitions.into_iter().next())
        else {
            continue;
        };
        let at = *topic_at.entry(group.topic_id()).or_insert_with(|| {
            out.topics.push(fetch::FetchTopic {
                topic_id: group.topic_id(),
                partitions: Vec::new(),
            });
            out.topics.len() - 1
        });
        out.topics[at].partitions.push(partition);
    }
    out
}

/// The fetches a session request carries, each with the partition it names, in the core's
/// form. The request's MaxWaitMs is the session's; each fetch's own is not on the wire, so
/// each gets the session's.
pub fn fetches(r: &fetch::FetchRequest) -> Vec<(WirePartition, m::FetchRequest)> {
    r.topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| {
                let at = WirePartition {
                    topic: WireTopic::Id(t.topic_id),
                    partition: p.partition,
                };
                (at, raft_rpc::core_fetch_request(r, p))
            })
        })
        .collect()
}

/// A session answer: each partition's answer and the length of its records (0: none), which
/// the frame sends from a hole of that length.
pub fn response(parts: &[(At, &FetchResponse, usize)], version: i16) -> fetch::FetchResponse {
    let mut out = fetch::FetchResponse::default();
    let mut topic_at: HashMap<Uuid, usize> = HashMap::new();
    for ((topic_id, partition), answer, records) in parts {
        let mut answer = (*answer).clone();
        if answer.error != ErrorCode::NONE {
            answer.partition_error = answer.error;
            answer.error = ErrorCode::NONE;
        }
        let hole = (*records > 0).then_some(*records);
        let one = raft_rpc::fetch_response((*topic_id, *partition), &answer, hole, version);
        for node in one.node_endpoints {
            if !out.node_endpoints.iter().any(|n| n.node_id == node.node_id) {
                out.node_endpoints.push(node);
            }
        }
        let Some(data) = one
            .responses
            .into_iter()
            .next()
            .and_then(|t| t.partitions.into_iter().next())
        else {
            continue;
        };
        let at = *topic_at.entry(*topic_id).or_insert_with(|| {
            out.responses.push(fetch::FetchableTopicResponse {
                topic_id: *topic_id,
                partitions: Vec::new(),
            });
            out.responses.len() - 1
        });
        out.responses[at].partitions.push(data);
    }
    out
}

/// The partitions of a session answer, each in the core's form. An answer with a top-level
/// error (a leader that does not serve sessions says INVALID_REQUEST) names no partition:
/// the caller fails every fetch it held with `error_for_all`.
pub fn answers(f: &fetch::FetchResponse) -> Vec<(At, FetchResponse)> {
    let nodes = raft_rpc::fetch_nodes(f);
    f.responses
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, p)))
        .map(|(topic_id, p)| {
            let top = if f.error_code != ErrorCode::NONE {
                f.error_code
            } else if top_level_only(p.error_code) {
                p.error_code
            } else {
                ErrorCode::NONE
            };
            let mut answer = raft_rpc::core_fetch_partition(top, Some(p), &nodes);
            if top != ErrorCode::NONE {
                answer.partition_error = ErrorCode::NONE;
            }
            ((topic_id, p.partition_index), answer)
        })
        .collect()
}

/// The answer each held fetch gets when a session answer has a top-level error.
pub fn error_for_all(f: &fetch::FetchResponse) -> Option<FetchResponse> {
    (f.error_code != ErrorCode::NONE)
        .then(|| raft_rpc::core_fetch_partition(f.error_code, None, &raft_rpc::fetch_nodes(f)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::codec::{Reader, Writer};
    use crate::protocol::request::encode_response_frame_parts;
    use crate::raft::message::Records;
    use crate::raft::{Endpoint, ReplicaKey};
    use bytes::Bytes;

    fn key(topic: &str, partition: i32) -> GroupKey {
        GroupKey::new(topic, partition).unwrap()
    }

    fn fetch_at(offset: i64) -> m::FetchRequest {
        m::FetchRequest {
            cluster_id: Some("c".into()),
            replica: ReplicaKey::new(2, Some(Uuid::from_u128(6))),
            max_wait_ms: 800,
            fetch_offset: offset,
            last_fetched_epoch: 3,
            current_leader_epoch: 4,
            max_bytes: 1 << 20,
            high_watermark: None,
        }
    }

    #[test]
    fn a_session_request_carries_each_fetch_to_its_partition() {
        let parts = vec![
            (key("kv", 0), fetch_at(10)),
            (key("other", 7), fetch_at(20)),
            (key("kv", 3), fetch_at(30)),
        ];
        for version in [13, 15, 17] {
            let r = request(&fetch_at(0), 800, 5, &parts, version);
            let mut w = Writer::new();
            r.encode(&mut w, version);
            let bytes = Bytes::from(w.into_vec());
            let back =
                fetch::FetchRequest::decode(&mut Reader::new(&bytes), version, &bytes).unwrap();
            assert!(is_session(&back));
            assert_eq!(back.session_epoch, 5);
            assert_eq!(back.topics.len(), 2, "one entry per topic");
            let got = fetches(&back);
            assert_eq!(got.len(), 3);
            // Grouped by topic: kv-0, kv-3, then other-7.
            for (at, received) in &got {
                let (_, sent) = parts.iter().find(|(g, _)| g.is(at)).expect("sent");
                assert_eq!(received.fetch_offset, sent.fetch_offset);
                assert_eq!(received.replica.id, 2);
                assert_eq!(received.max_wait_ms, 800);
            }
        }
        // A poll carries nothing and is still a session request.
        let poll = request(&fetch_at(0), 800, 6, &[], 17);
        assert!(is_session(&poll) && fetches(&poll).is_empty());
        // What Kafka's raft client sends is not one.
        let plain = raft_rpc::fetch_request(&key("kv", 0), &fetch_at(0), 17);
        assert!(!is_session(&plain));
    }

    fn answer(error: ErrorCode, partition_error: ErrorCode, leader: i32) -> FetchResponse {
        FetchResponse {
            error,
            partition_error,
            high_watermark: 40,
            log_start_offset: 0,
            diverging_epoch: None,
            leader_id: leader,
            leader_epoch: 4,
            snapshot_id: None,
            records: Records::None,
            leader_endpoints: vec![Endpoint {
                name: "CONTROLLER".into(),
                host: "n".into(),
                port: 9000 + leader as u16,
            }],
        }
    }

    #[test]
    fn a_session_answer_splits_back_to_its_partitions_with_their_records_and_errors() {
        let a = key("kv", 0);
        let b = key("kv", 1);
        let c = key("other", 2);
        let records_a = vec![1u8; 100];
        let records_c = vec![3u8; 7];
        let answers_in = [
            answer(ErrorCode::NONE, ErrorCode::NONE, 1),
            answer(ErrorCode::NONE, ErrorCode::NOT_LEADER_OR_FOLLOWER, 3),
            answer(ErrorCode::INCONSISTENT_CLUSTER_ID, ErrorCode::NONE, 1),
        ];
        let at = |g: &GroupKey| (g.topic_id(), g.partition());
        let parts = [
            (at(&a), &answers_in[0], records_a.len()),
            (at(&b), &answers_in[1], 0),
            (at(&c), &answers_in[2], records_c.len()),
        ];
        let version = 17;
        let wire = response(&parts, version);
        let frame = crate::net::frame_out::Frame {
            parts: encode_response_frame_parts(9, 1, |w| wire.encode(w, version)),
            data: vec![records_a.clone(), records_c.clone()],
        };
        let bytes = Bytes::from(frame.to_vec());
        // Size prefix, then the correlation id and the header's tag buffer.
        let body = bytes.slice(4 + 4 + 1..);
        let back = fetch::FetchResponse::decode(&mut Reader::new(&body), version, &body).unwrap();
        let got = answers(&back);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].0, at(&a));
        assert_eq!(got[0].1.records, Records::Bytes(Bytes::from(records_a)));
        assert_eq!(got[0].1.error, ErrorCode::NONE);
        assert_eq!(got[1].1.partition_error, ErrorCode::NOT_LEADER_OR_FOLLOWER);
        assert_eq!(got[1].1.leader_id, 3);
        assert_eq!(got[1].1.leader_endpoints[0].port, 9003);
        assert_eq!(got[1].1.records, Records::None);
        assert_eq!(got[2].0, at(&c));
        assert_eq!(
            got[2].1.error,
            ErrorCode::INCONSISTENT_CLUSTER_ID,
            "back at the top"
        );
        assert_eq!(got[2].1.partition_error, ErrorCode::NONE);
        assert_eq!(got[2].1.records, Records::Bytes(Bytes::from(records_c)));
        assert!(error_for_all(&back).is_none());
    }

    #[test]
    fn a_top_level_error_fails_every_held_fetch() {
        let wire = fetch::FetchResponse {
            error_code: ErrorCode::INVALID_REQUEST,
            ..Default::default()
        };
        assert!(answers(&wire).is_empty());
        assert_eq!(
            error_for_all(&wire).unwrap().error,
            ErrorCode::INVALID_REQUEST
        );
    }
}
