//! Produce on the controller listener (docs/wire.md §8.10): how `ringraft log append` writes
//! records. A pure check of the request (`check`), the answer built from the outcome
//! (`answer`), and `serve`, which runs on the connection's shard: it hands the one checked
//! batch to the raft shard (`RaftHandle::append_batch`) and waits for its commit there, so the
//! executor never waits for anything.
//!
//! Refused unless `ringraft.log.append.enable` is set: beside Kafka's controllers the log holds
//! Kafka's metadata records, and a raw record there would stop them replaying it.

use bytes::Bytes;

use super::handle::{AppendCheck, ClientError, RaftHandle};
use super::route::ReplyTo;
use crate::constants::BATCH_MAX_BYTES;
use crate::net::frame_out::LocalFrame;
use crate::protocol::group::GroupKey;
use crate::protocol::produce::{
    ProduceNodeEndpoint, ProducePartitionResponse, ProduceRequest, ProduceResponse,
    ProduceTopicResponse,
};
use crate::protocol::request::encode_response_frame;
use crate::protocol::ErrorCode;
use crate::records::batch::{Batch, ATTR_COMPRESSION_MASK, ATTR_TRANSACTIONAL};

/// Why the batch for `__cluster_metadata-0` is not appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: ErrorCode,
    pub message: String,
}

impl Refusal {
    fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Refusal {
            code,
            message: message.into(),
        }
    }
}

/// A batch that passed `check`: its bytes, and its last offset delta (to turn the last offset
/// the commit reports into the base offset Produce answers with).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    pub batch: Vec<u8>,
    pub last_offset_delta: i64,
}

/// The one batch to append, or why `__cluster_metadata-0` refuses it. Other partitions are
/// answered UNKNOWN_TOPIC_OR_PARTITION by `answer` whatever this says.
pub fn check(request: &ProduceRequest, enabled: bool) -> Result<Checked, Refusal> {
    check_for(GroupKey::metadata(), request, enabled)
}

/// `check` for the group `target` (a hosted group other than group 0 always takes records:
/// no Kafka controller replays its log).
pub fn check_for(
    target: &GroupKey,
    request: &ProduceRequest,
    enabled: bool,
) -> Result<Checked, Refusal> {
    let is_target =
        |topic: &str, partition: i32| topic == target.topic() && partition == target.partition();
    if !enabled && target.is_metadata() {
        return Err(Refusal::new(
            ErrorCode::POLICY_VIOLATION,
            "this controller takes no records: set ringraft.log.append.enable=true (never \
             beside Kafka controllers: they could not replay them)",
        ));
    }
    let mut targets = request
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t, p)))
        .filter(|(t, p)| is_target(&t.name, p.index));
    let Some((_, partition)) = targets.next() else {
        return Err(Refusal::new(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, ""));
    };
    let entries: usize = request.topics.iter().map(|t| t.partitions.len()).sum();
    if targets.next().is_some() || entries != 1 {
        return Err(Refusal::new(
            ErrorCode::INVALID_REQUEST,
            format!("a Produce must name {target} once and nothing else"),
        ));
    }
    if request.transactional_id.is_some() {
        return Err(Refusal::new(
            ErrorCode::INVALID_REQUEST,
            "transactional produce is not served",
        ));
    }
    if request.acks != -1 {
        return Err(Refusal::new(
            ErrorCode::INVALID_REQUIRED_ACKS,
            format!(
                "acks must be -1 (committed by a majority), not {}",
                request.acks
            ),
        ));
    }
    check_batch(partition.records.as_ref())
}

fn check_batch(records: Option<&Bytes>) -> Result<Checked, Refusal> {
    let records = records
        .filter(|r| !r.is_empty())
        .ok_or_else(|| Refusal::new(ErrorCode::INVALID_REQUEST, "no records"))?;
    if records.len() > BATCH_MAX_BYTES {
        return Err(Refusal::new(
            ErrorCode::MESSAGE_TOO_LARGE,
            format!("{} bytes; at most {BATCH_MAX_BYTES}", records.len()),
        ));
    }
    let invalid = |why: String| Refusal::new(ErrorCode::INVALID_RECORD, why);
    let (batch, rest) = Batch::parse(records)
        .map_err(|e| Refusal::new(ErrorCode::CORRUPT_MESSAGE, e.to_string()))?;
    if !rest.is_empty() {
        return Err(invalid("exactly one record batch per Produce".into()));
    }
    let header = batch.header();
    let attributes = header.attributes.get();
    if batch.is_control() {
        return Err(invalid("control batches are written by raft only".into()));
    }
    if attributes & ATTR_TRANSACTIONAL != 0 || header.producer_id.get() != -1 {
        return Err(invalid(
            "transactional or idempotent batches are not taken".into(),
        ));
    }
    if attributes & ATTR_COMPRESSION_MASK != 0 {
        return Err(invalid("compressed batches are not taken".into()));
    }
    let count = header.records_count.get();
    let delta = header.last_offset_delta.get();
    if count < 1 || i64::from(count) != i64::from(delta) + 1 {
        return Err(invalid(format!(
            "{count} records with last offset delta {delta}"
        )));
    }
    let iter = batch.records().map_err(|e| invalid(e.to_string()))?;
    for (i, record) in iter.enumerate() {
        let record = record.map_err(|e| invalid(e.to_string()))?;
        if record.offset_delta != i as i32 {
            return Err(invalid("offset deltas must be 0, 1, 2, …".into()));
        }
    }
    Ok(Checked {
        batch: records.to_vec(),
        last_offset_delta: i64::from(delta),
    })
}

/// The response to `request`: `__cluster_metadata-0` gets `outcome`, every other partition
/// UNKNOWN_TOPIC_OR_PARTITION (or the refusal itself when the node takes no records).
pub fn answer(
    request: &ProduceRequest,
    outcome: &ProducePartitionResponse,
    endpoints: Vec<ProduceNodeEndpoint>,
) -> ProduceResponse {
    answer_for(GroupKey::metadata(), request, outcome, endpoints)
}

/// `answer` for a Produce to the group `target`.
pub fn answer_for(
    target: &GroupKey,
    request: &ProduceRequest,
    outcome: &ProducePartitionResponse,
    endpoints: Vec<ProduceNodeEndpoint>,
) -> ProduceResponse {
    let disabled = outcome.error_code == ErrorCode::POLICY_VIOLATION;
    let is_target =
        |topic: &str, partition: i32| topic == target.topic() && partition == target.partition();
    let topics = request
        .topics
        .iter()
        .map(|t| ProduceTopicResponse {
            name: t.name.clone(),
            partitions: t
                .partitions
                .iter()
                .map(|p| {
                    if disabled || is_target(&t.name, p.index) {
                        return ProducePartitionResponse {
                            index: p.index,
                            ..outcome.clone()
                        };
                    }
                    ProducePartitionResponse {
                        index: p.index,
                        error_code: ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                        error_message: Some("this node hosts no such group".into()),
                        ..Default::default()
                    }
                })
                .collect(),
        })
        .collect();
    ProduceResponse {
        topics,
        throttle_time_ms: 0,
        node_endpoints: endpoints,
    }
}

/// What `__cluster_metadata-0` answers after the append's outcome is known.
pub fn outcome(
    result: Result<i64, ClientError>,
    last_offset_delta: i64,
) -> ProducePartitionResponse {
    let refused = |code: ErrorCode, message: String| ProducePartitionResponse {
        error_code: code,
        error_message: Some(message),
        ..Default::default()
    };
    match result {
        Ok(last) => ProducePartitionResponse {
            base_offset: last - last_offset_delta,
            ..Default::default()
        },
        Err(ClientError::NotLeader { epoch, leader }) => ProducePartitionResponse {
            current_leader: (leader.unwrap_or(-1), epoch),
            ..refused(
                ErrorCode::NOT_LEADER_OR_FOLLOWER,
                "not the leader; nothing was written".into(),
            )
        },
        // Appended, then the leadership (or the node) went: the batch may or may not commit.
        Err(e @ (ClientError::LeadershipLost { .. } | ClientError::Stopped)) => refused(
            ErrorCode::REQUEST_TIMED_OUT,
            format!("outcome unknown: {e}"),
        ),
        Err(e) => refused(ErrorCode::INVALID_RECORD, e.to_string()),
    }
}

/// Answers a Produce on the connection's shard: checks it, appends through the raft shard and
/// waits there for the commit. `serving`: this shard's view of the leader, for the hint a
/// NOT_LEADER_OR_FOLLOWER answer carries.
pub async fn serve(
    (target, raft): (&GroupKey, &RaftHandle),
    leader_endpoint: &dyn Fn(i32) -> Option<crate::raft::Endpoint>,
    enabled: bool,
    to: &ReplyTo,
    request: &ProduceRequest,
) -> LocalFrame {
    let partition = match check_for(target, request, enabled) {
        Err(refusal) => ProducePartitionResponse {
            error_code: refusal.code,
            error_message: Some(refusal.message).filter(|m| !m.is_empty()),
            ..Default::default()
        },
        Ok(checked) => {
            let result = raft
                .append_batch(checked.batch, AppendCheck::default())
                .await;
            outcome(result, checked.last_offset_delta)
        }
    };
    let mut endpoints = Vec::new();
    let leader = partition.current_leader.0;
    if partition.error_code == ErrorCode::NOT_LEADER_OR_FOLLOWER && leader >= 0 {
        endpoints.extend(leader_endpoint(leader).map(|e| ProduceNodeEndpoint {
            node_id: leader,
            host: e.host,
            port: i32::from(e.port),
            rack: None,
        }));
    }
    let response = answer_for(target, request, &partition, endpoints);
    let frame = encode_response_frame(to.correlation_id, to.response_header_version, |w| {
        response.encode(w, to.version)
    });
    crate::net::frame_out::SharedFrame::whole(frame).into_local()
}

/// The body of a Produce (acks=-1, at `CLIENT_VERSION`) carrying one batch of `values` for
/// `group`, stamped now: what `ringraft log append` and `ringraft bench groups` send.
pub fn request_body<'a>(
    group: &GroupKey,
    values: impl IntoIterator<Item = &'a [u8]>,
    timeout: std::time::Duration,
) -> Vec<u8> {
    use crate::protocol::produce::{ProducePartition, ProduceTopic, CLIENT_VERSION};
    let mut builder =
        crate::records::builder::BatchBuilder::new(0, 0, crate::types::unix_millis(), false);
    for v in values {
        builder.append(None, Some(v));
    }
    let request = ProduceRequest {
        transactional_id: None,
        acks: -1,
        timeout_ms: i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX),
        topics: vec![ProduceTopic {
            name: group.topic().into(),
            partitions: vec![ProducePartition {
                index: group.partition(),
                records: Some(Bytes::from(builder.finish())),
            }],
        }],
    };
    let mut w = crate::protocol::Writer::new();
    request.encode(&mut w, CLIENT_VERSION);
    w.into_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::produce::{ProducePartition, ProduceTopic};
    use crate::protocol::METADATA_TOPIC_NAME;
    use crate::records::builder::BatchBuilder;

    fn batch(values: &[&[u8]]) -> Bytes {
        let mut b = BatchBuilder::new(0, 0, 1_700_000_000_000, false);
        for v in values {
            b.append(None, Some(v));
        }
        Bytes::from(b.finish())
    }

    fn request(topic: &str, partition: i32, records: Option<Bytes>) -> ProduceRequest {
        ProduceRequest {
            transactional_id: None,
            acks: -1,
            timeout_ms: 1000,
            topics: vec![ProduceTopic {
                name: topic.into(),
                partitions: vec![ProducePartition {
                    index: partition,
                    records,
                }],
            }],
        }
    }

    fn code(r: &ProduceRequest) -> ErrorCode {
        check(r, true).map_or_else(|e| e.code, |_| ErrorCode::NONE)
    }

    #[test]
    fn takes_one_plain_batch_for_the_metadata_partition() {
        let r = request(METADATA_TOPIC_NAME, 0, Some(batch(&[b"a", b"b", b"c"])));
        let checked = check(&r, true).unwrap();
        assert_eq!(checked.last_offset_delta, 2);
        assert_eq!(outcome(Ok(12), 2).base_offset, 10);
        assert_eq!(
            check(&r, false).unwrap_err().code,
            ErrorCode::POLICY_VIOLATION
        );
    }

    #[test]
    fn refusals() {
        let good = batch(&[b"v"]);
        let other = request("other", 0, Some(good.clone()));
        assert_eq!(code(&other), ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
        let p1 = request(METADATA_TOPIC_NAME, 1, Some(good.clone()));
        assert_eq!(code(&p1), ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
        let answered = answer(&p1, &ProducePartitionResponse::default(), vec![]);
        let p = &answered.topics[0].partitions[0];
        assert_eq!(p.error_code, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);

        let mut acks = request(METADATA_TOPIC_NAME, 0, Some(good.clone()));
        acks.acks = 1;
        assert_eq!(code(&acks), ErrorCode::INVALID_REQUIRED_ACKS);
        let none = request(METADATA_TOPIC_NAME, 0, None);
        assert_eq!(code(&none), ErrorCode::INVALID_REQUEST);

        let mut corrupt = good.to_vec();
        *corrupt.last_mut().unwrap() ^= 1;
        let r = request(METADATA_TOPIC_NAME, 0, Some(corrupt.into()));
        assert_eq!(code(&r), ErrorCode::CORRUPT_MESSAGE);

        let two = [good.to_vec(), good.to_vec()].concat();
        let r = request(METADATA_TOPIC_NAME, 0, Some(two.into()));
        assert_eq!(code(&r), ErrorCode::INVALID_RECORD);

        let control = Bytes::from(BatchBuilder::new(0, 0, 0, true).finish());
        let r = request(METADATA_TOPIC_NAME, 0, Some(control));
        assert_eq!(code(&r), ErrorCode::INVALID_RECORD);

        let mut twice = request(METADATA_TOPIC_NAME, 0, Some(good.clone()));
        twice.topics.push(twice.topics[0].clone());
        assert_eq!(code(&twice), ErrorCode::INVALID_REQUEST);
    }

    #[test]
    fn an_unknown_outcome_is_never_success() {
        let lost = ClientError::LeadershipLost {
            offset: 5,
            epoch: 3,
            leader: None,
        };
        let p = outcome(Err(lost), 0);
        assert_eq!(p.error_code, ErrorCode::REQUEST_TIMED_OUT);
        let not = outcome(
            Err(ClientError::NotLeader {
                epoch: 4,
                leader: Some(2),
            }),
            0,
        );
        assert_eq!(not.error_code, ErrorCode::NOT_LEADER_OR_FOLLOWER);
        assert_eq!(not.current_leader, (2, 4));
    }
}
