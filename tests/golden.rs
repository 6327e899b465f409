//! ApiVersions requests captured from real clients (tests/golden/README.md) decode with
//! ringraft's decoders, and the node's answer to each is what that client needs.

use ringraft::net::dispatch::{handle_frame, Action, ServerState};
use ringraft::protocol::api_versions::ApiVersionsResponse;
use ringraft::protocol::header::decode_response_header;
use ringraft::protocol::{decode_request, Decoded, ErrorCode, Reader, RequestBody};

fn golden(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/golden/{name}", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let size = i32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
    assert_eq!(size, bytes.len() - 4, "{name}: size prefix");
    bytes[4..].to_vec()
}

/// Decodes a served request and checks header and body fields.
fn check_request(name: &str, version: i16, client_id: &str, software: (&str, &str)) {
    let frame = golden(name);
    let Decoded::Request { header, body, .. } = decode_request(&frame).unwrap() else {
        panic!("{name}: not a served request");
    };
    assert_eq!(
        (header.api_key, header.api_version),
        (18, version),
        "{name}"
    );
    assert_eq!(header.client_id.as_deref(), Some(client_id), "{name}");
    let RequestBody::ApiVersions(request) = body else {
        panic!("{name}: not ApiVersions");
    };
    assert_eq!(request.client_software_name, software.0, "{name}");
    assert_eq!(request.client_software_version, software.1, "{name}");
    assert!(request.has_valid_client_software(), "{name}");
    let Action::Respond(answer) = handle_frame(&frame, &ServerState::default()) else {
        panic!("{name}: not answered");
    };
    let mut r = Reader::new(&answer[4..]);
    assert_eq!(
        decode_response_header(&mut r, 0).unwrap(),
        header.correlation_id
    );
    let response = ApiVersionsResponse::decode(&mut r, version).unwrap();
    assert_eq!(response.error_code, ErrorCode::NONE, "{name}");
    assert_eq!(r.remaining(), 0, "{name}: trailing bytes in our answer");
}

#[test]
fn java_4_1_admin_client() {
    check_request(
        "java-4.1.2-api-versions.bin",
        4,
        "adminclient-1",
        ("apache-kafka-java", "4.1.2"),
    );
}

#[test]
fn kafka_python_3_0() {
    check_request(
        "kafka-python-api-versions.bin",
        4,
        "kafka-python-3.0.12",
        ("kafka-python", "3.0.12"),
    );
}

#[test]
fn kcat_librdkafka_2_0() {
    check_request(
        "kcat-api-versions.bin",
        3,
        "rdkafka",
        ("librdkafka", "2.0.2"),
    );
}

/// Kafka 4.4's admin client starts at ApiVersions v5 (KIP-1242) with a null ClusterId and
/// NodeId −1 while bootstrapping: served, and answered as a Kafka 4.4 controller answers it.
#[test]
fn java_4_4_admin_client_sends_v5_and_is_served() {
    check_request(
        "java-4.4.0-api-versions.bin",
        5,
        "adminclient-1",
        ("apache-kafka-java", "4.4.0"),
    );
    let frame = golden("java-4.4.0-api-versions.bin");
    let Decoded::Request {
        body: RequestBody::ApiVersions(request),
        ..
    } = decode_request(&frame).unwrap()
    else {
        panic!("not ApiVersions");
    };
    assert_eq!((request.cluster_id, request.node_id), (None, -1));
}

/// A Kafka 4.4.0 controller's answers to ApiVersions v3 and v4 (static quorum, formatted at
/// 4.4-IV2; tests/golden/README.md) against ringraft's answer with
/// the same finalized levels: every byte is the same once ringraft's answer carries Kafka's
/// API list (the served APIs differ by design) and Kafka's order of finalized features (which
/// varies between Kafka runs).
#[test]
fn features_are_a_kafka_4_4_controllers_to_the_byte() {
    use ringraft::cli::format::{DEFAULT_FEATURE_LEVELS, RELEASE_VERSION};
    use ringraft::protocol::api_versions::{answer, ApiVersionsRequest, FeatureState};
    use ringraft::protocol::{apis, Writer};
    let mut features = FeatureState::default();
    assert!(features.apply_feature_level("metadata.version", RELEASE_VERSION.1));
    for (name, level) in DEFAULT_FEATURE_LEVELS {
        assert!(features.apply_feature_level(name, level), "{name}");
    }
    for version in [3, 4] {
        let name = format!("kafka-4.4.0-controller-api-versions-v{version}-response.bin");
        let frame = golden(&name);
        let mut r = Reader::new(&frame);
        assert_eq!(decode_response_header(&mut r, 0).unwrap(), 7);
        let body = &frame[4..];
        let kafka = ApiVersionsResponse::decode(&mut Reader::new(body), version).unwrap();
        // The offset of the controller's last applied record: whatever it was at capture.
        features.finalized_features_epoch = kafka.finalized_features_epoch;
        let request = ApiVersionsRequest {
            client_software_name: "apache-kafka-java".into(),
            client_software_version: "4.4.0".into(),
            ..Default::default()
        };
        let mut ours = answer(&request, version, apis::SERVED, features);
        assert_eq!(ours.supported_features, kafka.supported_features, "{name}");
        let mut finalized = ours.finalized_features.clone();
        let mut theirs = kafka.finalized_features.clone();
        finalized.sort_by(|a, b| a.name.cmp(&b.name));
        theirs.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(finalized, theirs, "{name}: finalized features");
        ours.api_keys = kafka.api_keys.clone();
        ours.finalized_features = kafka.finalized_features.clone();
        let mut w = Writer::new();
        ours.encode(&mut w, version);
        assert_eq!(w.into_vec(), body, "{name}");
    }
}
