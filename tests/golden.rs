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

/// Kafka 4.4's client starts at ApiVersions v5, which ringraft does not parse: the answer is
/// the v0-format UNSUPPORTED_VERSION naming ApiVersions 0..4, so the client retries at v4.
#[test]
fn java_4_4_admin_client_sends_v5_and_gets_the_fallback() {
    let frame = golden("java-4.4.0-api-versions.bin");
    let Decoded::ApiVersionsTooNew { header } = decode_request(&frame).unwrap() else {
        panic!("v5 must take the too-new path");
    };
    assert_eq!(
        (header.api_version, header.client_id.as_deref()),
        (5, Some("adminclient-1"))
    );
    let Action::Respond(answer) = handle_frame(&frame, &ServerState::default()) else {
        panic!("not answered");
    };
    let mut expected = vec![0, 0, 0, 16];
    expected.extend(header.correlation_id.to_be_bytes());
    expected.extend([0x00, 0x23, 0, 0, 0, 1, 0x00, 0x12, 0, 0, 0, 4]);
    assert_eq!(answer, expected, "docs/wire.md §6 fallback bytes");
}
