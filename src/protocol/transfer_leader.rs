//! TransferLeader (ringraft's own key 10000, version 0, flexible; docs/wire.md §8.11): asks a
//! ringraft leader to hand its leadership to a named voter (`raft::transfer`). Kafka has no
//! such API, so ringraft serves it unadvertised, as it serves Produce: no Kafka client finds it
//! by negotiation, and `ringraft quorum transfer-leader` sends it to the active controller.
//!
//! Request: `ToId int32`, `TimeoutMs int32` (how long the caller waits; the leader gives up
//! on its own after an election timeout), tagged fields. Response: `ThrottleTimeMs int32`,
//! `ErrorCode int16`, `ErrorMessage compact nullable string`, `ResignedAtOffset int64` (−1
//! unless it resigned), tagged fields. Errors are Kafka's codes: NOT_LEADER_OR_FOLLOWER,
//! INVALID_REQUEST (not another voter; a transfer in progress), REQUEST_TIMED_OUT (the target
//! did not catch up).

use std::ops::RangeInclusive;

use bytes::Bytes;

use super::codec::{DecodeResult, Reader, Writer};
use super::errors::ErrorCode;
use super::kraft::unsupported_version;

/// The versions these codecs read and write.
pub const VERSIONS: RangeInclusive<i16> = 0..=0;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TransferLeaderRequest {
    pub to_id: i32,
    pub timeout_ms: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferLeaderResponse {
    pub throttle_time_ms: i32,
    pub error: ErrorCode,
    pub error_message: Option<String>,
    pub resigned_at_offset: i64,
}

impl TransferLeaderRequest {
    pub fn decode(r: &mut Reader<'_>, version: i16, _frame: &Bytes) -> DecodeResult<Self> {
        if !VERSIONS.contains(&version) {
            return Err(unsupported_version());
        }
        let out = TransferLeaderRequest {
            to_id: r.i32("ToId")?,
            timeout_ms: r.i32("TimeoutMs")?,
        };
        r.skip_tagged_fields()?;
        Ok(out)
    }

    pub fn encode(&self, w: &mut Writer, version: i16) {
        assert!(VERSIONS.contains(&version), "TransferLeader v{version}");
        w.i32(self.to_id);
        w.i32(self.timeout_ms);
        w.no_tagged_fields();
    }
}

impl TransferLeaderResponse {
    pub fn decode(r: &mut Reader<'_>, version: i16) -> DecodeResult<Self> {
        if !VERSIONS.contains(&version) {
            return Err(unsupported_version());
        }
        let out = TransferLeaderResponse {
            throttle_time_ms: r.i32("ThrottleTimeMs")?,
            error: ErrorCode(r.i16("ErrorCode")?),
            error_message: r.nullable_string("ErrorMessage", true)?.map(str::to_owned),
            resigned_at_offset: r.i64("ResignedAtOffset")?,
        };
        r.skip_tagged_fields()?;
        Ok(out)
    }

    pub fn encode(&self, w: &mut Writer, version: i16) {
        assert!(VERSIONS.contains(&version), "TransferLeader v{version}");
        w.i32(self.throttle_time_ms);
        w.i16(self.error.0);
        w.nullable_string(self.error_message.as_deref(), true);
        w.i64(self.resigned_at_offset);
        w.no_tagged_fields();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_round_trip_and_short_bodies_are_refused() {
        let request = TransferLeaderRequest {
            to_id: 3,
            timeout_ms: 5000,
        };
        let mut w = Writer::with_capacity(16);
        request.encode(&mut w, 0);
        let bytes = Bytes::from(w.into_vec());
        let back = TransferLeaderRequest::decode(&mut Reader::new(&bytes), 0, &bytes).unwrap();
        assert_eq!(back, request);
        let short = bytes.slice(..5);
        assert!(TransferLeaderRequest::decode(&mut Reader::new(&short), 0, &short).is_err());
        assert!(TransferLeaderRequest::decode(&mut Reader::new(&bytes), 1, &bytes).is_err());
        let response = TransferLeaderResponse {
            throttle_time_ms: 0,
            error: ErrorCode::REQUEST_TIMED_OUT,
            error_message: Some("voter 3 did not catch up".into()),
            resigned_at_offset: -1,
        };
        let mut w = Writer::with_capacity(64);
        response.encode(&mut w, 0);
        let bytes = w.into_vec();
        let back = TransferLeaderResponse::decode(&mut Reader::new(&bytes), 0).unwrap();
        assert_eq!(back, response);
    }
}
