//! Differential tests against `kafka-protocol` 0.18 (generated from Kafka 4.1.0's schemas):
//! for every message and version ringraft encodes or decodes, bytes written by one side are
//! read back identically by the other, over generated messages.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages as kp;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use proptest::prelude::*;
use ringraft::protocol::api_versions::{
    ApiVersionRange, ApiVersionsRequest, ApiVersionsResponse, FinalizedFeature, SupportedFeature,
};
use ringraft::protocol::header::RequestHeader;
use ringraft::protocol::{ErrorCode, Reader, Writer};

fn ours_request_bytes(req: &ApiVersionsRequest, version: i16) -> Vec<u8> {
    let mut w = Writer::new();
    req.encode(&mut w, version);
    w.into_vec()
}

fn kp_bytes<T: Encodable>(msg: &T, version: i16) -> Vec<u8> {
    let mut buf = BytesMut::new();
    msg.encode(&mut buf, version)
        .expect("kafka-protocol encodes");
    buf.to_vec()
}

fn kp_decode<T: Decodable>(bytes: &[u8], version: i16) -> T {
    let mut buf = Bytes::copy_from_slice(bytes);
    let out = T::decode(&mut buf, version).expect("kafka-protocol decodes our bytes");
    assert!(buf.is_empty(), "kafka-protocol left {} bytes", buf.len());
    out
}

fn request() -> impl Strategy<Value = ApiVersionsRequest> {
    ("\\PC{0,24}", "\\PC{0,24}").prop_map(|(name, version)| ApiVersionsRequest {
        client_software_name: name,
        client_software_version: version,
        ..Default::default()
    })
}

fn response(flexible: bool) -> impl Strategy<Value = ApiVersionsResponse> {
    let key = (any::<i16>(), any::<i16>(), any::<i16>()).prop_map(
        |(api_key, min_version, max_version)| ApiVersionRange {
            api_key,
            min_version,
            max_version,
        },
    );
    let supported = ("[a-z.]{1,20}", any::<i16>(), any::<i16>()).prop_map(|(name, min, max)| {
        SupportedFeature {
            name,
            min_version: min,
            max_version: max,
        }
    });
    let finalized = ("[a-z.]{1,20}", any::<i16>(), any::<i16>()).prop_map(|(name, max, min)| {
        FinalizedFeature {
            name,
            max_version_level: max,
            min_version_level: min,
        }
    });
    let tags = if flexible { 8 } else { 0 };
    (
        any::<i16>(),
        prop::collection::vec(key, 0..40),
        any::<i32>(),
        prop::collection::vec(supported, 0..=tags),
        prop_oneof![Just(-1i64), any::<i64>()],
        prop::collection::vec(finalized, 0..=tags),
        any::<bool>(),
    )
        .prop_map(
            move |(error, keys, throttle, supported, epoch, finalized, zk)| ApiVersionsResponse {
                error_code: ErrorCode(error),
                api_keys: keys,
                throttle_time_ms: throttle,
                supported_features: supported,
                finalized_features_epoch: if flexible { epoch } else { -1 },
                finalized_features: finalized,
                zk_migration_ready: flexible && zk,
            },
        )
}

fn to_kp_response(r: &ApiVersionsResponse) -> kp::ApiVersionsResponse {
    kp::ApiVersionsResponse::default()
        .with_error_code(r.error_code.0)
        .with_api_keys(
            r.api_keys
                .iter()
                .map(|k| {
                    kp::api_versions_response::ApiVersion::default()
                        .with_api_key(k.api_key)
                        .with_min_version(k.min_version)
                        .with_max_version(k.max_version)
                })
                .collect(),
        )
        .with_throttle_time_ms(r.throttle_time_ms)
        .with_supported_features(
            r.supported_features
                .iter()
                .map(|f| {
                    kp::api_versions_response::SupportedFeatureKey::default()
                        .with_name(StrBytes::from_string(f.name.clone()))
                        .with_min_version(f.min_version)
                        .with_max_version(f.max_version)
                })
                .collect(),
        )
        .with_finalized_features_epoch(r.finalized_features_epoch)
        .with_finalized_features(
            r.finalized_features
                .iter()
                .map(|f| {
                    kp::api_versions_response::FinalizedFeatureKey::default()
                        .with_name(StrBytes::from_string(f.name.clone()))
                        .with_max_version_level(f.max_version_level)
                        .with_min_version_level(f.min_version_level)
                })
                .collect(),
        )
        .with_zk_migration_ready(r.zk_migration_ready)
}

/// What survives an encode at `version`: fields absent at that version read back as defaults.
fn at_version(r: &ApiVersionsResponse, version: i16) -> ApiVersionsResponse {
    let mut out = r.clone();
    if version < 1 {
        out.throttle_time_ms = 0;
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn api_versions_request_both_ways(req in request(), version in 0i16..=4) {
        let ours = ours_request_bytes(&req, version);
        let theirs: kp::ApiVersionsRequest = kp_decode(&ours, version);
        let expected = if version >= 3 { req.clone() } else { ApiVersionsRequest::default() };
        prop_assert_eq!(theirs.client_software_name.as_str(), expected.client_software_name.as_str());
        prop_assert_eq!(
            theirs.client_software_version.as_str(),
            expected.client_software_version.as_str()
        );
        let kp_req = kp::ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_string(expected.client_software_name.clone()))
            .with_client_software_version(StrBytes::from_string(
                expected.client_software_version.clone(),
            ));
        let kp_encoded = kp_bytes(&kp_req, version);
        prop_assert_eq!(&kp_encoded, &ours, "byte-identical encodings");
        let mut r = Reader::new(&kp_encoded);
        prop_assert_eq!(ApiVersionsRequest::decode(&mut r, version).unwrap(), expected);
        prop_assert_eq!(r.remaining(), 0);
    }

    /// kafka-protocol 0.18 has no v5: its v4 bytes with ClusterId (compact nullable string)
    /// and NodeId (int32) spliced in before the tagged fields are v5 (ApiVersionsRequest.json).
    #[test]
    fn api_versions_request_v5_is_v4_with_cluster_and_node(
        req in request(),
        cluster in prop::option::of("[A-Za-z0-9_-]{0,22}"),
        node in any::<i32>(),
    ) {
        let kp_req = kp::ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_string(req.client_software_name.clone()))
            .with_client_software_version(StrBytes::from_string(
                req.client_software_version.clone(),
            ));
        let v4 = kp_bytes(&kp_req, 4);
        let mut w = Writer::new();
        w.nullable_string(cluster.as_deref(), true);
        w.i32(node);
        let mut expected = v4[..v4.len() - 1].to_vec();
        expected.extend(w.into_vec());
        expected.push(0);
        let ours = ApiVersionsRequest { cluster_id: cluster, node_id: node, ..req };
        prop_assert_eq!(&ours_request_bytes(&ours, 5), &expected);
        let back = ApiVersionsRequest::decode(&mut Reader::new(&expected), 5).unwrap();
        prop_assert_eq!(back, ours);
    }

    #[test]
    fn api_versions_response_classic(resp in response(false), version in 0i16..=2) {
        check_response(&resp, version)?;
    }

    #[test]
    fn api_versions_response_flexible(resp in response(true), version in 3i16..=4) {
        check_response(&resp, version)?;
    }

    #[test]
    fn request_header_both_ways(
        key in any::<i16>(),
        version in any::<i16>(),
        correlation in any::<i32>(),
        client in prop::option::of("\\PC{0,30}"),
        header_version in 1i16..=2,
    ) {
        let ours = RequestHeader { api_key: key, api_version: version, correlation_id: correlation,
                                   client_id: client.clone() };
        let mut w = Writer::new();
        ours.encode(&mut w, header_version);
        let bytes = w.into_vec();
        let theirs: kp::RequestHeader = kp_decode(&bytes, header_version);
        prop_assert_eq!(theirs.request_api_key, key);
        prop_assert_eq!(theirs.request_api_version, version);
        prop_assert_eq!(theirs.correlation_id, correlation);
        prop_assert_eq!(theirs.client_id.as_ref().map(|s| s.to_string()), client.clone());
        let kp_encoded = kp_bytes(&theirs, header_version);
        prop_assert_eq!(&kp_encoded, &bytes);
        let back = RequestHeader::decode(&mut Reader::new(&kp_encoded), header_version).unwrap();
        prop_assert_eq!(back, ours);
    }
}

fn check_response(resp: &ApiVersionsResponse, version: i16) -> Result<(), TestCaseError> {
    let mut w = Writer::new();
    resp.encode(&mut w, version);
    let ours = w.into_vec();
    let kp_resp = to_kp_response(&at_version(resp, version));
    let decoded: kp::ApiVersionsResponse = kp_decode(&ours, version);
    prop_assert_eq!(&decoded, &kp_resp);
    let kp_encoded = kp_bytes(&kp_resp, version);
    prop_assert_eq!(&kp_encoded, &ours, "byte-identical encodings");
    let mut r = Reader::new(&kp_encoded);
    prop_assert_eq!(
        ApiVersionsResponse::decode(&mut r, version).unwrap(),
        at_version(resp, version)
    );
    prop_assert_eq!(r.remaining(), 0);
    Ok(())
}

/// The node's real answers, at every version, parse in kafka-protocol.
#[test]
fn node_answers_parse_in_the_oracle() {
    use ringraft::net::dispatch::{handle_frame, Action, ServerState};
    for version in 0i16..=5 {
        let header = RequestHeader {
            api_key: 18,
            api_version: version,
            correlation_id: 41,
            client_id: Some("oracle".into()),
        };
        let spec = ringraft::protocol::apis::api_versions_spec();
        let req = ApiVersionsRequest {
            client_software_name: "oracle".into(),
            client_software_version: "1.0".into(),
            ..Default::default()
        };
        let frame = ringraft::protocol::request::encode_request_frame(&header, spec, |w| {
            req.encode(w, version)
        });
        let Action::Respond(bytes) = handle_frame(&frame[4..], &ServerState::default()) else {
            panic!("v{version} was not answered");
        };
        let mut buf = Bytes::copy_from_slice(&bytes[4..]);
        let header = kp::ResponseHeader::decode(&mut buf, 0).unwrap();
        assert_eq!(header.correlation_id, 41);
        // kafka-protocol 0.18 stops at v4; the v5 answer body is v4's (ApiVersionsResponse.json
        // adds no field in v5).
        let resp = kp::ApiVersionsResponse::decode(&mut buf, version.min(4)).unwrap();
        assert!(buf.is_empty());
        assert_eq!(resp.error_code, 0);
        assert!(resp
            .api_keys
            .iter()
            .any(|k| k.api_key == 18 && k.max_version == 5));
        let kraft = resp
            .supported_features
            .iter()
            .any(|f| f.name.as_str() == "kraft.version");
        assert_eq!(kraft, version >= 4, "kraft.version only in v4+ answers");
    }
}
