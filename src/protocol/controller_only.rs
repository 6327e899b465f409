//! The RPCs only Kafka's *active controller* serves: ControllerRegistration (70),
//! BrokerRegistration (62), BrokerHeartbeat (63), AlterPartition (56), AllocateProducerIds
//! (67), AssignReplicasToDirs (73) and Envelope (58). A Kafka controller and its brokers send
//! them to the Raft leader, because the active controller is the leader.
//!
//! ringraft stores and replicates the metadata log but runs no controller, so it answers every
//! one of them as a Kafka controller that is not active does: NOT_CONTROLLER, the rest of the
//! response at its defaults. Kafka's senders then drop the connection, look up the leader
//! again and retry, so they find a Kafka controller as soon as one leads (docs/raft.md §15).
//! The body is not parsed: whatever it holds, the answer is the same.
//!
//! Versions are those Kafka 4.1 and 4.4 send (4.4 added BrokerHeartbeat v2, whose response
//! has the fields of v1). Every version of these APIs is flexible.

use super::apis::ApiKey;
use super::codec::Writer;
use super::errors::ErrorCode;

/// What a Kafka controller that is not active says (Kafka's `NotControllerException`).
pub const NOT_CONTROLLER_MESSAGE: &str = "this node is not the active controller";

/// Encodes the body of the NOT_CONTROLLER answer to a request of `key` (any served version;
/// all of them are flexible and have the same response fields). Returns false for a key that
/// is not controller-only.
pub fn encode_not_controller(key: ApiKey, w: &mut Writer) -> bool {
    encode_error(key, ErrorCode::NOT_CONTROLLER, w)
}

/// The answer to a request of `key` with only a top-level `error` (NOT_CONTROLLER, or what a
/// request the node cannot take gets). False for a key that is not controller-only.
pub fn encode_error(key: ApiKey, error: ErrorCode, w: &mut Writer) -> bool {
    match key {
        ApiKey::CONTROLLER_REGISTRATION => {
            w.i32(0); // ThrottleTimeMs
            w.i16(error.0);
            let message = (error == ErrorCode::NOT_CONTROLLER).then_some(NOT_CONTROLLER_MESSAGE);
            w.nullable_string(message, true);
        }
        ApiKey::BROKER_REGISTRATION => {
            w.i32(0);
            w.i16(error.0);
            w.i64(-1); // BrokerEpoch
        }
        ApiKey::BROKER_HEARTBEAT => {
            w.i32(0);
            w.i16(error.0);
            w.bool(false); // IsCaughtUp
            w.bool(true); // IsFenced
            w.bool(false); // ShouldShutDown
        }
        ApiKey::ALTER_PARTITION | ApiKey::ASSIGN_REPLICAS_TO_DIRS => {
            w.i32(0);
            w.i16(error.0);
            w.array_len(0, true); // Topics / Directories
        }
        ApiKey::ALLOCATE_PRODUCER_IDS => {
            w.i32(0);
            w.i16(error.0);
            w.i64(-1); // ProducerIdStart
            w.i32(0); // ProducerIdLen
        }
        ApiKey::ENVELOPE => {
            w.nullable_bytes_field(None, true); // ResponseData
            w.i16(error.0);
        }
        _ => return false,
    }
    w.no_tagged_fields();
    true
}

/// The controller-only APIs, as `apis::SERVED` lists them.
pub const CONTROLLER_ONLY: [ApiKey; 7] = [
    ApiKey::ALTER_PARTITION,
    ApiKey::ENVELOPE,
    ApiKey::BROKER_REGISTRATION,
    ApiKey::BROKER_HEARTBEAT,
    ApiKey::ALLOCATE_PRODUCER_IDS,
    ApiKey::CONTROLLER_REGISTRATION,
    ApiKey::ASSIGN_REPLICAS_TO_DIRS,
];

/// Whether `key` is one of the controller-only APIs.
pub fn is_controller_only(key: ApiKey) -> bool {
    CONTROLLER_ONLY.contains(&key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::codec::Reader;

    #[test]
    fn every_answer_carries_not_controller_after_its_leading_fields() {
        for key in crate::protocol::apis::SERVED.iter().map(|s| s.key) {
            let mut w = Writer::with_capacity(64);
            assert_eq!(
                encode_not_controller(key, &mut w),
                is_controller_only(key),
                "{key:?}"
            );
            if !is_controller_only(key) {
                continue;
            }
            let bytes = w.into_parts().0;
            let mut r = Reader::new(&bytes);
            if key != ApiKey::ENVELOPE {
                assert_eq!(r.i32("ThrottleTimeMs").unwrap(), 0);
            } else {
                assert_eq!(r.nullable_bytes_field("ResponseData", true).unwrap(), None);
            }
            assert_eq!(
                r.i16("ErrorCode").unwrap(),
                ErrorCode::NOT_CONTROLLER.0,
                "{key:?}"
            );
        }
        assert!(is_controller_only(ApiKey::CONTROLLER_REGISTRATION));
        assert!(!is_controller_only(ApiKey::FETCH));
    }
}
