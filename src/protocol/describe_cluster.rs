//! DescribeCluster (key 60), versions 0–2, flexible in every version (docs/wire.md §8.8; KIP-700,
//! KIP-919 adds `EndpointType` in v1, KIP-1073 adds `IncludeFencedBrokers` and the brokers'
//! `IsFenced` in v2).
//!
//! Owns the request and response types and their checked decoders and encoders; no state, no
//! I/O. Field names and defaults follow Kafka 4.1's schemas. `encode` writes only the fields the
//! version has: fields it lacks are dropped. None of the v1/v2 fields is ignorable in Kafka (it
//! refuses to write a non-default value at a version without the field), so a sender picks the
//! version first (`DescribeClusterRequest::min_version`).

use std::ops::RangeInclusive;

use bytes::Bytes;

use super::codec::{DecodeResult, Reader, Writer};
use super::errors::ErrorCode;
use super::kraft::unsupported_version;

/// The versions these codecs read and write. Every one is flexible.
pub const VERSIONS: RangeInclusive<i16> = 0..=2;

/// `EndpointType` values (KIP-919).
pub const ENDPOINT_TYPE_UNKNOWN: i8 = 0;
pub const ENDPOINT_TYPE_BROKER: i8 = 1;
pub const ENDPOINT_TYPE_CONTROLLER: i8 = 2;

/// `ClusterAuthorizedOperations` when they were not asked for (Java's `Integer.MIN_VALUE`).
pub const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeClusterRequest {
    pub include_cluster_authorized_operations: bool,
    /// v1+, not ignorable: `ENDPOINT_TYPE_BROKER` (1) by default.
    pub endpoint_type: i8,
    /// v2+, not ignorable.
    pub include_fenced_brokers: bool,
}

impl Default for DescribeClusterRequest {
    fn default() -> Self {
        DescribeClusterRequest {
            include_cluster_authorized_operations: false,
            endpoint_type: ENDPOINT_TYPE_BROKER,
            include_fenced_brokers: false,
        }
    }
}

impl DescribeClusterRequest {
    pub fn decode(r: &mut Reader<'_>, version: i16, _frame: &Bytes) -> DecodeResult<Self> {
        if !VERSIONS.contains(&version) {
            return Err(unsupported_version());
        }
        let mut out = DescribeClusterRequest {
            include_cluster_authorized_operations: r.bool("IncludeClusterAuthorizedOperations")?,
            ..Default::default()
        };
        if version >= 1 {
            out.endpoint_type = r.i8("EndpointType")?;
        }
        if version >= 2 {
            out.include_fenced_brokers = r.bool("IncludeFencedBrokers")?;
        }
        r.skip_tagged_fields()?;
        Ok(out)
    }

    pub fn encode(&self, w: &mut Writer, version: i16) {
        assert!(
            VERSIONS.contains(&version),
            "DescribeCluster v{version} is not supported"
        );
        w.bool(self.include_cluster_authorized_operations);
        if version >= 1 {
            w.i8(self.endpoint_type);
        }
        if version >= 2 {
            w.bool(self.include_fenced_brokers);
        }
        w.no_tagged_fields();
    }

    /// The lowest version that carries every field set here (none is ignorable): 2 when
    /// fenced brokers are asked for, 1 for an endpoint type other than brokers, else 0.
    pub fn min_version(&self) -> i16 {
        if self.include_fenced_brokers {
            2
        } else if self.endpoint_type != ENDPOINT_TYPE_BROKER {
            1
        } else {
            0
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeClusterResponse {
    pub throttle_time_ms: i32,
    /// Top-level error.
    pub error_code: ErrorCode,
    /// Null by default.
    pub error_message: Option<String>,
    /// v1+: the endpoint type described; `ENDPOINT_TYPE_BROKER` (1) by default.
    pub endpoint_type: i8,
    pub cluster_id: String,
    /// −1 by default (no controller known, or not among `brokers`).
    pub controller_id: i32,
    /// The brokers, or for `EndpointType` 2 the controllers.
    pub brokers: Vec<DescribeClusterBroker>,
    /// `AUTHORIZED_OPERATIONS_OMITTED` (`i32::MIN`) by default.
    pub cluster_authorized_operations: i32,
}

impl Default for DescribeClusterResponse {
    fn default() -> Self {
        DescribeClusterResponse {
            throttle_time_ms: 0,
            error_code: ErrorCode::NONE,
            error_message: None,
            endpoint_type: ENDPOINT_TYPE_BROKER,
            cluster_id: String::new(),
            controller_id: -1,
            brokers: Vec::new(),
            cluster_authorized_operations: AUTHORIZED_OPERATIONS_OMITTED,
        }
    }
}

/// Kafka's `DescribeClusterBroker`: one broker (or controller) and where it listens.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeClusterBroker {
    pub broker_id: i32,
    pub host: String,
    /// An `int32` here, unlike DescribeQuorum's `uint16` listener ports.
    pub port: i32,
    /// Null by default.
    pub rack: Option<String>,
    /// v2+, not ignorable.
    pub is_fenced: bool,
}

/// Short name for `DescribeClusterBroker`.
pub type Broker = DescribeClusterBroker;

impl DescribeClusterResponse {
    pub fn decode(r: &mut Reader<'_>, version: i16, _frame: &Bytes) -> DecodeResult<Self> {
        if !VERSIONS.contains(&version) {
            return Err(unsupported_version());
        }
        let mut out = DescribeClusterResponse {
            throttle_time_ms: r.i32("ThrottleTimeMs")?,
            error_code: ErrorCode(r.i16("ErrorCode")?),
            error_message: r.nullable_string("ErrorMessage", true)?.map(str::to_owned),
            ..Default::default()
        };
        if version >= 1 {
            out.endpoint_type = r.i8("EndpointType")?;
        }
        out.cluster_id = r.string("ClusterId", true)?.to_owned();
        out.controller_id = r.i32("ControllerId")?;
        out.brokers = r.array_of("Brokers", true, DescribeClusterBroker::MIN_BYTES, |r| {
            DescribeClusterBroker::decode(r, version)
        })?;
        out.cluster_authorized_operations = r.i32("ClusterAuthorizedOperations")?;
        r.skip_tagged_fields()?;
        Ok(out)
    }

    pub fn encode(&self, w: &mut Writer, version: i16) {
        assert!(
            VERSIONS.contains(&version),
            "DescribeCluster v{version} is not supported"
        );
        w.i32(self.throttle_time_ms);
        w.i16(self.error_code.0);
        w.nullable_string(self.error_message.as_deref(), true);
        if version >= 1 {
            w.i8(self.endpoint_type);
        }
        w.string(&self.cluster_id, true);
        w.i32(self.controller_id);
        w.array_of(&self.brokers, true, |w, b| b.encode(w, version));
        w.i32(self.cluster_authorized_operations);
        w.no_tagged_fields();
    }
}

impl DescribeClusterBroker {
    /// The v0 encoding (the smallest): int32, empty host, int32, null rack, empty tag section.
    const MIN_BYTES: usize = 4 + 1 + 4 + 1 + 1;

    fn decode(r: &mut Reader<'_>, version: i16) -> DecodeResult<Self> {
        let mut out = DescribeClusterBroker {
            broker_id: r.i32("Brokers.BrokerId")?,
            host: r.string("Brokers.Host", true)?.to_owned(),
            port: r.i32("Brokers.Port")?,
            rack: r.nullable_string("Brokers.Rack", true)?.map(str::to_owned),
            is_fenced: false,
        };
        if version >= 2 {
            out.is_fenced = r.bool("Brokers.IsFenced")?;
        }
        r.skip_tagged_fields()?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer, version: i16) {
        w.i32(self.broker_id);
        w.string(&self.host, true);
        w.i32(self.port);
        w.nullable_string(self.rack.as_deref(), true);
        if version >= 2 {
            w.bool(self.is_fenced);
        }
        w.no_tagged_fields();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::codec::DecodeError;

    fn encoded<F: FnOnce(&mut Writer)>(f: F) -> Bytes {
        let mut w = Writer::new();
        f(&mut w);
        Bytes::from(w.into_vec())
    }

    fn response() -> DescribeClusterResponse {
        DescribeClusterResponse {
            endpoint_type: ENDPOINT_TYPE_CONTROLLER,
            cluster_id: "c".into(),
            controller_id: 2,
            brokers: vec![DescribeClusterBroker {
                broker_id: 2,
                host: "h".into(),
                port: 9093,
                rack: None,
                is_fenced: true,
            }],
            ..Default::default()
        }
    }

    #[test]
    fn request_fields_by_version() {
        let req = DescribeClusterRequest {
            include_cluster_authorized_operations: true,
            endpoint_type: ENDPOINT_TYPE_CONTROLLER,
            include_fenced_brokers: true,
        };
        assert_eq!(&encoded(|w| req.encode(w, 0))[..], [1, 0]);
        assert_eq!(&encoded(|w| req.encode(w, 1))[..], [1, 2, 0]);
        assert_eq!(&encoded(|w| req.encode(w, 2))[..], [1, 2, 1, 0]);
        let v0 = Bytes::from_static(&[1, 0]);
        let back = DescribeClusterRequest::decode(&mut Reader::new(&v0), 0, &v0).unwrap();
        assert_eq!(
            back,
            DescribeClusterRequest {
                include_cluster_authorized_operations: true,
                ..Default::default()
            },
            "absent fields read as their defaults: brokers, no fenced brokers"
        );
        assert_eq!(req.min_version(), 2);
        assert_eq!(
            DescribeClusterRequest {
                endpoint_type: ENDPOINT_TYPE_CONTROLLER,
                ..Default::default()
            }
            .min_version(),
            1
        );
        assert_eq!(DescribeClusterRequest::default().min_version(), 0);
    }

    #[test]
    fn v1_endpoint_type_round_trips_and_v0_reads_the_default() {
        let resp = DescribeClusterResponse {
            brokers: vec![DescribeClusterBroker {
                is_fenced: false,
                ..response().brokers[0].clone()
            }],
            ..response()
        };
        let v1 = encoded(|w| resp.encode(w, 1));
        // Throttle, error, null message, EndpointType = 2, ...
        assert_eq!(&v1[..8], [0, 0, 0, 0, 0, 0, 0, 2]);
        let back = DescribeClusterResponse::decode(&mut Reader::new(&v1), 1, &v1).unwrap();
        assert_eq!(back, resp);
        let v0 = encoded(|w| resp.encode(w, 0));
        assert_eq!(v0.len(), v1.len() - 1);
        let back = DescribeClusterResponse::decode(&mut Reader::new(&v0), 0, &v0).unwrap();
        assert_eq!(back.endpoint_type, ENDPOINT_TYPE_BROKER);
        assert_eq!(back.controller_id, 2);
    }

    #[test]
    fn v2_brokers_carry_is_fenced() {
        let resp = response();
        let v2 = encoded(|w| resp.encode(w, 2));
        let v1 = encoded(|w| resp.encode(w, 1));
        assert_eq!(v2.len(), v1.len() + 1);
        // ..Port 9093, null rack, IsFenced, broker tags, ClusterAuthorizedOperations, tags.
        assert_eq!(
            &v2[v2.len() - 12..],
            [0, 0, 0x23, 0x85, 0, 1, 0, 0x80, 0, 0, 0, 0]
        );
        let back = DescribeClusterResponse::decode(&mut Reader::new(&v2), 2, &v2).unwrap();
        assert_eq!(back, resp);
        let back = DescribeClusterResponse::decode(&mut Reader::new(&v1), 1, &v1).unwrap();
        assert!(!back.brokers[0].is_fenced, "dropped below v2");
    }

    #[test]
    fn unknown_tags_are_skipped_and_bad_input_refused() {
        let mut with_tag = vec![0, 2];
        with_tag.extend_from_slice(&[2, 3, 0, 7, 1, 0xaa]);
        let with_tag = Bytes::from(with_tag);
        let back = DescribeClusterRequest::decode(&mut Reader::new(&with_tag), 1, &with_tag);
        assert_eq!(
            back.unwrap(),
            DescribeClusterRequest {
                endpoint_type: ENDPOINT_TYPE_CONTROLLER,
                ..Default::default()
            }
        );
        // A null ClusterId is refused.
        let null_id = Bytes::from_static(&[0, 0, 0, 0, 0, 0, 0, 1, 0]);
        assert!(matches!(
            DescribeClusterResponse::decode(&mut Reader::new(&null_id), 1, &null_id),
            Err(DecodeError::Invalid {
                field: "ClusterId",
                ..
            })
        ));
        let empty = Bytes::new();
        assert!(matches!(
            DescribeClusterRequest::decode(&mut Reader::new(&empty), 3, &empty),
            Err(DecodeError::Invalid {
                field: "version",
                ..
            })
        ));
    }

    #[test]
    fn minimum_sizes_are_exact() {
        let mut w = Writer::new();
        DescribeClusterBroker::default().encode(&mut w, 0);
        assert_eq!(w.len(), DescribeClusterBroker::MIN_BYTES);
        let mut w = Writer::new();
        DescribeClusterBroker::default().encode(&mut w, 2);
        assert_eq!(w.len(), DescribeClusterBroker::MIN_BYTES + 1);
    }
}
