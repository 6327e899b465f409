//! From a request frame (the bytes after the int32 size) to a typed request, and from a
//! response body to a response frame. Decoding follows Kafka's order (docs/wire.md §3.1, §6):
//! key and version first; an unknown key or an unserved version is an error the caller answers
//! by closing the connection — except a too-new ApiVersions, which gets the v0 fallback.

use std::fmt;

use super::api_versions::ApiVersionsRequest;
use super::apis::{self, ApiKey, ApiSpec};
use super::begin_quorum_epoch::BeginQuorumEpochRequest;
use super::codec::{DecodeError, Reader, Writer};
use super::end_quorum_epoch::EndQuorumEpochRequest;
use super::fetch::FetchRequest;
use super::fetch_snapshot::FetchSnapshotRequest;
use super::header::{encode_response_header, RequestHeader};
use super::vote::VoteRequest;

/// A request body of a served API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestBody {
    ApiVersions(ApiVersionsRequest),
    Vote(super::vote::VoteRequest),
    BeginQuorumEpoch(super::begin_quorum_epoch::BeginQuorumEpochRequest),
    EndQuorumEpoch(super::end_quorum_epoch::EndQuorumEpochRequest),
    Fetch(super::fetch::FetchRequest),
    FetchSnapshot(super::fetch_snapshot::FetchSnapshotRequest),
    DescribeQuorum(super::describe_quorum::DescribeQuorumRequest),
    DescribeCluster(super::describe_cluster::DescribeClusterRequest),
    AddRaftVoter(super::add_raft_voter::AddRaftVoterRequest),
    RemoveRaftVoter(super::remove_raft_voter::RemoveRaftVoterRequest),
    UpdateRaftVoter(super::update_raft_voter::UpdateRaftVoterRequest),
    UpdateFeatures(super::update_features::UpdateFeaturesRequest),
    /// Served unadvertised, for `ringraft log append` (`protocol::produce`).
    Produce(super::produce::ProduceRequest),
    /// Served unadvertised, for `ringraft quorum transfer-leader` (`protocol::transfer_leader`).
    TransferLeader(super::transfer_leader::TransferLeaderRequest),
    /// A request only Kafka's active controller serves (`controller_only`); its body is not
    /// parsed, because the answer is NOT_CONTROLLER whatever it holds.
    ControllerOnly,
}

/// A decoded request frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A served API at a served version, fully parsed.
    Request {
        header: RequestHeader,
        spec: &'static ApiSpec,
        body: RequestBody,
    },
    /// ApiVersions at a version above ours. The body is not parsed (it may be a format we do
    /// not know); the answer is the v0 UNSUPPORTED_VERSION fallback.
    ApiVersionsTooNew { header: RequestHeader },
}

/// Why a frame is refused. Every case closes the connection, as Kafka does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestError {
    /// Fewer bytes than api key + api version.
    TooShort { len: usize },
    /// An API key this node does not serve.
    UnknownApi { key: i16, version: i16 },
    /// A served API at a version outside the advertised range.
    UnsupportedVersion { key: i16, version: i16 },
    /// The header or body does not parse.
    Malformed {
        key: i16,
        version: i16,
        error: DecodeError,
    },
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::TooShort { len } => write!(f, "request of {len} bytes has no header"),
            RequestError::UnknownApi { key, version } => {
                write!(
                    f,
                    "api key {key} ({}) v{version} is not served",
                    ApiKey(*key).name()
                )
            }
            RequestError::UnsupportedVersion { key, version } => {
                write!(
                    f,
                    "{} v{version} is outside the served versions",
                    ApiKey(*key).name()
                )
            }
            RequestError::Malformed {
                key,
                version,
                error,
            } => {
                write!(f, "malformed {} v{version}: {error}", ApiKey(*key).name())
            }
        }
    }
}

impl std::error::Error for RequestError {}

/// Decodes one request frame. Never panics and allocates nothing larger than the frame.
pub fn decode_request(frame: &[u8]) -> Result<Decoded, RequestError> {
    let (key, version) = RequestHeader::peek_key_version(frame)
        .ok_or(RequestError::TooShort { len: frame.len() })?;
    let spec = apis::served(ApiKey(key)).ok_or(RequestError::UnknownApi { key, version })?;
    let malformed = |error| RequestError::Malformed {
        key,
        version,
        error,
    };
    let too_new_api_versions = spec.key == ApiKey::API_VERSIONS && version > spec.max_version;
    if !spec.serves(version) && !too_new_api_versions {
        return Err(RequestError::UnsupportedVersion { key, version });
    }
    let mut r = Reader::new(frame);
    let header =
        RequestHeader::decode(&mut r, spec.request_header_version(version)).map_err(malformed)?;
    if too_new_api_versions {
        return Ok(Decoded::ApiVersionsTooNew { header });
    }
    // Trailing bytes after the body are ignored, as Kafka's parser ignores them.
    // Nothing is shared with the frame: a Produce's records are copied once, bounded by the
    // frame's own size.
    let none = bytes::Bytes::new();
    let body = match spec.key {
        ApiKey::API_VERSIONS => RequestBody::ApiVersions(
            ApiVersionsRequest::decode(&mut r, version).map_err(malformed)?,
        ),
        ApiKey::VOTE => {
            RequestBody::Vote(VoteRequest::decode(&mut r, version, &none).map_err(malformed)?)
        }
        ApiKey::BEGIN_QUORUM_EPOCH => RequestBody::BeginQuorumEpoch(
            BeginQuorumEpochRequest::decode(&mut r, version, &none).map_err(malformed)?,
        ),
        ApiKey::END_QUORUM_EPOCH => RequestBody::EndQuorumEpoch(
            EndQuorumEpochRequest::decode(&mut r, version, &none).map_err(malformed)?,
        ),
        ApiKey::FETCH => {
            RequestBody::Fetch(FetchRequest::decode(&mut r, version, &none).map_err(malformed)?)
        }
        ApiKey::FETCH_SNAPSHOT => RequestBody::FetchSnapshot(
            FetchSnapshotRequest::decode(&mut r, version, &none).map_err(malformed)?,
        ),
        ApiKey::DESCRIBE_QUORUM => RequestBody::DescribeQuorum(
            super::describe_quorum::DescribeQuorumRequest::decode(&mut r, version, &none)
                .map_err(malformed)?,
        ),
        ApiKey::DESCRIBE_CLUSTER => RequestBody::DescribeCluster(
            super::describe_cluster::DescribeClusterRequest::decode(&mut r, version, &none)
                .map_err(malformed)?,
        ),
        ApiKey::ADD_RAFT_VOTER => RequestBody::AddRaftVoter(
            super::add_raft_voter::AddRaftVoterRequest::decode(&mut r, version, &none)
                .map_err(malformed)?,
        ),
        ApiKey::REMOVE_RAFT_VOTER => RequestBody::RemoveRaftVoter(
            super::remove_raft_voter::RemoveRaftVoterRequest::decode(&mut r, version, &none)
                .map_err(malformed)?,
        ),
        ApiKey::UPDATE_RAFT_VOTER => RequestBody::UpdateRaftVoter(
            super::update_raft_voter::UpdateRaftVoterRequest::decode(&mut r, version, &none)
                .map_err(malformed)?,
        ),
        ApiKey::UPDATE_FEATURES => RequestBody::UpdateFeatures(
            super::update_features::UpdateFeaturesRequest::decode(&mut r, version, &none)
                .map_err(malformed)?,
        ),
        ApiKey::PRODUCE => RequestBody::Produce(
            super::produce::ProduceRequest::decode(&mut r, version, &none).map_err(malformed)?,
        ),
        ApiKey::RINGRAFT_TRANSFER_LEADER => RequestBody::TransferLeader(
            super::transfer_leader::TransferLeaderRequest::decode(&mut r, version, &none)
                .map_err(malformed)?,
        ),
        key if super::controller_only::is_controller_only(key) => RequestBody::ControllerOnly,
        other => unreachable!("{} is in the served table without a decoder", other.name()),
    };
    Ok(Decoded::Request { header, spec, body })
}

/// Builds a whole response frame: int32 size, response header, then the body `encode` writes.
pub fn encode_response_frame(
    correlation_id: i32,
    response_header_version: i16,
    encode: impl FnOnce(&mut Writer),
) -> Vec<u8> {
    let mut w = Writer::with_capacity(256);
    w.i32(0); // size, patched by finish_frame
    encode_response_header(&mut w, correlation_id, response_header_version);
    encode(&mut w);
    finish_frame(w)
}

/// A response frame whose large byte fields are holes (`Writer::hole`): `bytes` is everything
/// encoded (its int32 size counts the holes too), and each hole's bytes go at its position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameParts {
    pub bytes: Vec<u8>,
    /// (position in `bytes`, length), in order.
    pub holes: Vec<(usize, usize)>,
}

/// `encode_response_frame` for a body with holes.
pub fn encode_response_frame_parts(
    correlation_id: i32,
    response_header_version: i16,
    encode: impl FnOnce(&mut Writer),
) -> FrameParts {
    let mut w = Writer::with_capacity(256);
    w.i32(0); // size, patched below
    encode_response_header(&mut w, correlation_id, response_header_version);
    encode(&mut w);
    let (mut bytes, holes) = w.into_parts();
    let total = bytes.len() - 4 + holes.iter().map(|(_, len)| len).sum::<usize>();
    let size = i32::try_from(total).expect("frame larger than 2 GiB");
    bytes[..4].copy_from_slice(&size.to_be_bytes());
    FrameParts { bytes, holes }
}

/// Builds a whole request frame (used by ringraft's own clients and by tests).
pub fn encode_request_frame(
    header: &RequestHeader,
    spec: &ApiSpec,
    encode: impl FnOnce(&mut Writer),
) -> Vec<u8> {
    let mut w = Writer::with_capacity(128);
    w.i32(0); // size, patched by finish_frame
    header.encode(&mut w, spec.request_header_version(header.api_version));
    encode(&mut w);
    finish_frame(w)
}

/// Writes the int32 size of everything after the first four bytes into those bytes.
fn finish_frame(w: Writer) -> Vec<u8> {
    let (mut frame, holes) = w.into_parts();
    assert!(
        holes.is_empty(),
        "a frame with holes is built by encode_response_frame_parts"
    );
    assert!(frame.len() >= 4, "a frame starts with its size");
    let size = i32::try_from(frame.len() - 4).expect("frame larger than 2 GiB");
    frame[..4].copy_from_slice(&size.to_be_bytes());
    frame
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_example_admin_client_request_decodes() {
        // docs/wire.md §6: ApiVersions v4 from Kafka 4.0's admin client, frame without size.
        let hex = "0012000400000001000d61646d696e636c69656e742d3100126170616368652d6b61666b612d\
                   6a61766106342e302e3000";
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        let Decoded::Request { header, body, .. } = decode_request(&bytes).unwrap() else {
            panic!("expected a served request");
        };
        assert_eq!(header.client_id.as_deref(), Some("adminclient-1"));
        assert_eq!(header.api_version, 4);
        let RequestBody::ApiVersions(req) = body else {
            panic!("expected ApiVersions, got {body:?}");
        };
        assert_eq!(req.client_software_name, "apache-kafka-java");
        assert_eq!(req.client_software_version, "4.0.0");
    }

    /// The voter-change and UpdateFeatures requests reach their decoders at every served
    /// version, and one version past the range closes the connection.
    #[test]
    fn voter_change_and_feature_requests_decode() {
        use super::super::{add_raft_voter, remove_raft_voter, update_features};
        use super::super::{header::RequestHeader, update_raft_voter};
        let frame = |key: ApiKey, version: i16, body: &dyn Fn(&mut Writer)| {
            let header = RequestHeader {
                api_key: key.0,
                api_version: version,
                correlation_id: 5,
                client_id: Some("adminclient-1".into()),
            };
            // A served spec, or (past the range) a flexible stand-in for the header.
            let spec = apis::served(key).copied().unwrap_or(ApiSpec {
                key,
                min_version: 0,
                max_version: i16::MAX,
                flexible_from: 0,
            });
            encode_request_frame(&header, &spec, body)[4..].to_vec()
        };
        let keys = [
            ApiKey::ADD_RAFT_VOTER,
            ApiKey::REMOVE_RAFT_VOTER,
            ApiKey::UPDATE_RAFT_VOTER,
            ApiKey::UPDATE_FEATURES,
        ];
        for key in keys {
            let spec = apis::served(key).expect("served");
            for version in spec.min_version..=spec.max_version {
                let body = |w: &mut Writer| match key {
                    ApiKey::ADD_RAFT_VOTER => {
                        add_raft_voter::AddRaftVoterRequest::default().encode(w, version)
                    }
                    ApiKey::REMOVE_RAFT_VOTER => {
                        remove_raft_voter::RemoveRaftVoterRequest::default().encode(w, version)
                    }
                    ApiKey::UPDATE_RAFT_VOTER => {
                        update_raft_voter::UpdateRaftVoterRequest::default().encode(w, version)
                    }
                    _ => update_features::UpdateFeaturesRequest::default().encode(w, version),
                };
                let decoded = decode_request(&frame(key, version, &body));
                let Ok(Decoded::Request { body, .. }) = decoded else {
                    panic!("{} v{version}: {decoded:?}", key.name());
                };
                let ok = match key {
                    ApiKey::ADD_RAFT_VOTER => matches!(body, RequestBody::AddRaftVoter(_)),
                    ApiKey::REMOVE_RAFT_VOTER => matches!(body, RequestBody::RemoveRaftVoter(_)),
                    ApiKey::UPDATE_RAFT_VOTER => matches!(body, RequestBody::UpdateRaftVoter(_)),
                    _ => matches!(body, RequestBody::UpdateFeatures(_)),
                };
                assert!(ok, "{} v{version}: {body:?}", key.name());
            }
            let past = spec.max_version + 1;
            assert!(matches!(
                decode_request(&frame(key, past, &|w| w.no_tagged_fields())),
                Err(RequestError::UnsupportedVersion { .. })
            ));
        }
    }

    #[test]
    fn refusals() {
        assert_eq!(
            decode_request(&[0, 18]),
            Err(RequestError::TooShort { len: 2 })
        );
        let unknown = [0, 2, 0, 9, 0, 0, 0, 1, 0, 0];
        assert!(matches!(
            decode_request(&unknown),
            Err(RequestError::UnknownApi { key: 2, .. })
        ));
        // Produce is served (unadvertised) at 9–12 only.
        let produce_v8 = [0, 0, 0, 8, 0, 0, 0, 1, 0, 0];
        assert!(matches!(
            decode_request(&produce_v8),
            Err(RequestError::UnsupportedVersion { key: 0, version: 8 })
        ));
        let vote_v3 = [0, 52, 0, 3, 0, 0, 0, 1, 0, 0];
        assert!(matches!(
            decode_request(&vote_v3),
            Err(RequestError::UnsupportedVersion {
                key: 52,
                version: 3
            })
        ));
        let truncated_vote = [0, 52, 0, 2, 0, 0, 0, 1, 0, 0, 0];
        assert!(matches!(
            decode_request(&truncated_vote),
            Err(RequestError::Malformed { key: 52, .. })
        ));
        let negative = [0, 18, 0xff, 0xff, 0, 0, 0, 1, 0, 0];
        assert!(matches!(
            decode_request(&negative),
            Err(RequestError::UnsupportedVersion {
                key: 18,
                version: -1
            })
        ));
        let too_new = [0, 18, 0, 6, 0, 0, 0, 7, 0xff, 0xff, 0];
        assert!(matches!(
            decode_request(&too_new),
            Ok(Decoded::ApiVersionsTooNew { .. })
        ));
    }
}
