//! `net::peer::PeerConnection` against the real binary and against fake peers (std threads on
//! 127.0.0.1): the ApiVersions handshake and its v0 fallback, version negotiation, and the ways
//! a peer can misbehave (wrong correlation id, hostile frame size, silence, closed port).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use ringraft::constants::FRAME_READ_STEP_BYTES;
use ringraft::net::peer::{PeerConnection, PeerError, PEER_RESPONSE_MAX_BYTES};
use ringraft::protocol::api_versions::{
    unsupported_version_answer, ApiVersionRange, ApiVersionsRequest, ApiVersionsResponse,
};
use ringraft::protocol::header::RequestHeader;
use ringraft::protocol::request::encode_response_frame;
use ringraft::protocol::{ApiKey, ErrorCode, Reader, Writer};

// ---- a counting allocator: the largest allocation made on the test's own thread ----

struct Counting;

thread_local! {
    static TRACKING: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn note(size: usize) {
    // try_with: the allocator runs during thread teardown too.
    let _ = TRACKING.try_with(|t| {
        if t.get() {
            LARGEST.with(|l| l.set(l.get().max(size)));
        }
    });
}

/// Runs `fut` and returns its output and the largest allocation made on this thread meanwhile.
async fn largest_allocation<T>(fut: impl std::future::Future<Output = T>) -> (T, usize) {
    LARGEST.with(|l| l.set(0));
    TRACKING.with(|t| t.set(true));
    let out = fut.await;
    TRACKING.with(|t| t.set(false));
    (out, LARGEST.with(|l| l.get()))
}

// ---- helpers ----

const SHORT: Duration = Duration::from_millis(200);
const LONG: Duration = Duration::from_secs(5);

fn api_versions_body(version: i16) -> Vec<u8> {
    let mut w = Writer::new();
    ApiVersionsRequest {
        client_software_name: "ringraft-test".into(),
        client_software_version: "1".into(),
        ..Default::default()
    }
    .encode(&mut w, version);
    w.into_vec()
}

/// What a fake peer saw of one request: key, version, correlation id, client id.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    key: i16,
    version: i16,
    correlation_id: i32,
    client_id: Option<String>,
}

/// A fake peer: accepts one connection and hands every request frame to `answer` (which may
/// write anything, or nothing). Returns its address and what it saw, request by request.
fn fake_peer(
    mut answer: impl FnMut(usize, &Seen, &mut TcpStream) + Send + 'static,
) -> (SocketAddr, mpsc::Receiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let Ok((mut stream, _)) = listener.accept() else {
            return;
        };
        let mut n = 0;
        // Ends when the client closes (or after read_frame's 10 s read timeout).
        while let Some(frame) = read_frame(&mut stream) {
            let (key, version) = RequestHeader::peek_key_version(&frame).unwrap();
            let header_version = if key == 18 && version < 3 { 1 } else { 2 };
            let header = RequestHeader::decode(&mut Reader::new(&frame), header_version).unwrap();
            let seen = Seen {
                key,
                version,
                correlation_id: header.correlation_id,
                client_id: header.client_id,
            };
            let _ = tx.send(seen.clone());
            answer(n, &seen, &mut stream);
            n += 1;
        }
    });
    (addr, rx)
}

/// The ranges the fake peers advertise.
fn fake_ranges() -> Vec<ApiVersionRange> {
    [(18, 0, 4), (52, 0, 2), (1, 4, 17)]
        .into_iter()
        .map(|(api_key, min_version, max_version)| ApiVersionRange {
            api_key,
            min_version,
            max_version,
        })
        .collect()
}

/// A successful ApiVersions answer at `version` (response header v0, as always for ApiVersions).
fn good_api_versions(stream: &mut TcpStream, seen: &Seen) {
    let response = ApiVersionsResponse {
        api_keys: fake_ranges(),
        ..Default::default()
    };
    let frame = encode_response_frame(seen.correlation_id, 0, |w| response.encode(w, seen.version));
    stream.write_all(&frame).unwrap();
}

fn localhost(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn assert_names_peer(err: &PeerError, addr: SocketAddr) {
    let text = err.to_string();
    assert!(text.contains(&addr.to_string()), "{text}");
}

fn formatted_node(name: &str) -> (TempDir, Node) {
    let dir = TempDir::new(name);
    let port = free_port();
    let config = write_config(dir.path(), port, "");
    let config = config.to_str().unwrap();
    format_node(config, dir.path());
    let node = Node::start(&["start", "-c", config], dir.path(), port);
    (dir, node)
}

// ---- tests ----

/// KIP-1242: a connection that names its target sends ApiVersions v5 with it; ringraft, like
/// a Kafka 4.4 controller, answers whatever cluster and node are named.
#[test]
fn a_named_target_goes_in_api_versions_v5() {
    use ringraft::net::peer::Target;
    let (_dir, node) = formatted_node("peer-target");
    let addr = localhost(node.port);
    glommio_rt::run(async move {
        for (cluster_id, node_id) in [("AAAAAAAAAAAAAAAAAAAAAA", 9), ("x", 0)] {
            let target = Target {
                cluster_id: cluster_id.into(),
                node_id,
            };
            let conn = PeerConnection::connect_with(addr, "c", LONG, None, Some(&target))
                .await
                .unwrap();
            assert_eq!(conn.api_versions_version(), 5);
            assert_eq!(conn.api_versions().error_code, ErrorCode::NONE);
        }
    });
}

#[test]
fn negotiates_with_a_real_node_and_round_trips_api_versions() {
    let (_dir, node) = formatted_node("peer");
    let addr = localhost(node.port);
    glommio_rt::run(async move {
        let mut conn = PeerConnection::connect(addr, "raft-client-2", LONG)
            .await
            .unwrap();
        assert_eq!(conn.peer_range(ApiKey::API_VERSIONS), Some((0, 5)));
        assert_eq!(conn.api_versions_version(), 5);
        assert_eq!(conn.negotiate(ApiKey::API_VERSIONS, (0, 3)), Some(3));
        assert_eq!(conn.negotiate(ApiKey::API_VERSIONS, (6, 7)), None);
        assert_eq!(conn.peer_range(ApiKey::VOTE), Some((0, 2)));
        assert_eq!(conn.negotiate(ApiKey::VOTE, (0, 1)), Some(1));
        assert_eq!(conn.peer_range(ApiKey::ADD_RAFT_VOTER), Some((0, 1)));
        assert_eq!(conn.negotiate(ApiKey::ADD_RAFT_VOTER, (0, 0)), Some(0));
        assert_eq!(conn.peer_range(ApiKey::METADATA), None, "not served");
        assert_eq!(conn.negotiate(ApiKey::METADATA, (0, 13)), None);
        // v3 (flexible: request header v2) and v1 (request header v1) both round-trip.
        for version in [3, 1] {
            let body = conn
                .request(
                    ApiKey::API_VERSIONS,
                    version,
                    3,
                    &api_versions_body(version),
                    LONG,
                )
                .await
                .unwrap();
            let response = ApiVersionsResponse::decode(&mut Reader::new(&body), version).unwrap();
            assert_eq!(response.error_code, ErrorCode::NONE);
            assert!(response.api_keys.iter().any(|r| r.api_key == 18));
        }
        // A version the peer does not serve fails locally and leaves the connection usable.
        let err = conn
            .request(ApiKey::API_VERSIONS, 6, 3, &[], LONG)
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                PeerError::UnsupportedVersion {
                    theirs: Some((0, 5)),
                    ..
                }
            ),
            "{err}"
        );
        assert_names_peer(&err, addr);
        assert!(conn.is_usable());
        conn.request(ApiKey::API_VERSIONS, 0, 3, &[], LONG)
            .await
            .unwrap();
    });
}

#[test]
fn retries_api_versions_at_the_version_a_v0_fallback_names() {
    let (addr, seen) = fake_peer(|n, seen, stream| {
        if n == 0 {
            // What a peer that serves ApiVersions 0..2 answers to v5 (docs/wire.md §6).
            let mut fallback = unsupported_version_answer();
            fallback.api_keys[0].max_version = 2;
            let frame = encode_response_frame(seen.correlation_id, 0, |w| fallback.encode(w, 0));
            stream.write_all(&frame).unwrap();
        } else {
            good_api_versions(stream, seen);
        }
    });
    let (range, version) = glommio_rt::run(async move {
        let conn = PeerConnection::connect(addr, "raft-client-1", LONG)
            .await
            .unwrap();
        (
            conn.peer_range(ApiKey::API_VERSIONS),
            conn.api_versions_version(),
        )
    });
    assert_eq!((range, version), (Some((0, 4)), 2));
    let seen: Vec<Seen> = seen.try_iter().collect();
    assert_eq!(
        seen.iter().map(|s| (s.key, s.version)).collect::<Vec<_>>(),
        [(18, 5), (18, 2)]
    );
    assert_ne!(seen[0].correlation_id, seen[1].correlation_id);
    assert_eq!(seen[0].client_id.as_deref(), Some("raft-client-1"));
}

#[test]
fn negotiate_takes_the_lower_max_within_both_ranges() {
    let (addr, _seen) = fake_peer(|_, seen, stream| good_api_versions(stream, seen));
    glommio_rt::run(async move {
        let conn = PeerConnection::connect(addr, "c", LONG).await.unwrap();
        assert_eq!(conn.negotiate(ApiKey::VOTE, (0, 1)), Some(1));
        assert_eq!(conn.negotiate(ApiKey::VOTE, (0, 5)), Some(2));
        assert_eq!(conn.negotiate(ApiKey::VOTE, (3, 5)), None);
        assert_eq!(conn.negotiate(ApiKey::FETCH, (13, 18)), Some(17));
        assert_eq!(conn.negotiate(ApiKey::FETCH, (0, 3)), None);
        assert_eq!(conn.negotiate(ApiKey::FETCH_SNAPSHOT, (0, 1)), None);
    });
}

#[test]
fn a_wrong_correlation_id_is_refused() {
    let (addr, _seen) = fake_peer(|n, seen, stream| {
        if n == 0 {
            good_api_versions(stream, seen);
        } else {
            let frame = encode_response_frame(seen.correlation_id + 1, 1, |w| w.i16(0));
            stream.write_all(&frame).unwrap();
        }
    });
    glommio_rt::run(async move {
        let mut conn = PeerConnection::connect(addr, "c", LONG).await.unwrap();
        let err = conn
            .request(ApiKey::VOTE, 2, 0, &[0], LONG)
            .await
            .unwrap_err();
        assert!(
            matches!(err, PeerError::CorrelationMismatch { expected, got, .. } if got == expected + 1),
            "{err}"
        );
        assert_names_peer(&err, addr);
        assert!(!conn.is_usable());
    });
}

#[test]
fn a_hostile_frame_size_is_refused_without_allocating_it() {
    let (addr, _seen) = fake_peer(|n, seen, stream| match n {
        0 => good_api_versions(stream, seen),
        _ => stream.write_all(&0x7fff_ffffi32.to_be_bytes()).unwrap(),
    });
    glommio_rt::run(async move {
        let mut conn = PeerConnection::connect(addr, "c", LONG).await.unwrap();
        let started = Instant::now();
        let (result, largest) =
            largest_allocation(conn.request(ApiKey::VOTE, 2, 0, &[0], LONG)).await;
        let err = result.unwrap_err();
        assert!(matches!(err, PeerError::Decode { .. }), "{err}");
        assert!(err.to_string().contains("2147483647"), "{err}");
        assert_names_peer(&err, addr);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "refused at once"
        );
        assert!(largest < 1024 * 1024, "allocated {largest} bytes");
    });
}

#[test]
fn an_announced_but_unsent_frame_costs_one_read_step() {
    let (addr, _seen) = fake_peer(|n, seen, stream| match n {
        0 => good_api_versions(stream, seen),
        _ => {
            let size = PEER_RESPONSE_MAX_BYTES as i32;
            stream.write_all(&size.to_be_bytes()).unwrap();
            stream.write_all(&[0; 10]).unwrap();
        }
    });
    glommio_rt::run(async move {
        let mut conn = PeerConnection::connect(addr, "c", LONG).await.unwrap();
        let (result, largest) =
            largest_allocation(conn.request(ApiKey::VOTE, 2, 0, &[0], SHORT)).await;
        assert!(matches!(result, Err(PeerError::Timeout { .. })));
        // At most one read step: none at all here, since the answer is read into the buffer
        // the connection's handshake answer was read into (`FrameBuffer::lend`).
        assert!(
            largest <= FRAME_READ_STEP_BYTES,
            "allocated {largest} bytes"
        );
    });
}

#[test]
fn silence_times_out_and_breaks_the_connection() {
    let (addr, _seen) = fake_peer(|n, seen, stream| {
        if n == 0 {
            good_api_versions(stream, seen);
        }
    });
    glommio_rt::run(async move {
        let mut conn = PeerConnection::connect(addr, "c", LONG).await.unwrap();
        let started = Instant::now();
        let err = conn
            .request(ApiKey::VOTE, 2, 0, &[0], SHORT)
            .await
            .unwrap_err();
        let elapsed = started.elapsed();
        assert!(matches!(err, PeerError::Timeout { .. }), "{err}");
        assert_names_peer(&err, addr);
        assert!(
            elapsed >= SHORT && elapsed < Duration::from_secs(1),
            "{elapsed:?}"
        );
        // A late answer would be read as the next request's: the connection is done.
        assert!(!conn.is_usable());
        let err = conn
            .request(ApiKey::VOTE, 2, 0, &[0], SHORT)
            .await
            .unwrap_err();
        assert!(matches!(err, PeerError::Closed { .. }), "{err}");
    });
}

#[test]
fn a_silent_handshake_times_out_within_the_connect_timeout() {
    let (addr, _seen) = fake_peer(|_, _, _| {});
    let (err, elapsed) = glommio_rt::run(async move {
        let started = Instant::now();
        let err = PeerConnection::connect(addr, "c", SHORT).await.unwrap_err();
        (err, started.elapsed())
    });
    assert!(matches!(err, PeerError::Timeout { .. }), "{err}");
    assert!(elapsed < Duration::from_secs(1), "{elapsed:?}");
}

#[test]
fn a_peer_that_closes_mid_answer_is_reported_closed() {
    let (addr, _seen) = fake_peer(|n, seen, stream| match n {
        0 => good_api_versions(stream, seen),
        _ => {
            stream.write_all(&[0, 0, 0, 20, 0, 0]).unwrap();
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    });
    glommio_rt::run(async move {
        let mut conn = PeerConnection::connect(addr, "c", LONG).await.unwrap();
        let err = conn
            .request(ApiKey::VOTE, 2, 0, &[0], LONG)
            .await
            .unwrap_err();
        assert!(matches!(err, PeerError::Closed { .. }), "{err}");
    });
}

#[test]
fn a_closed_port_is_a_connect_error() {
    let addr = localhost(free_port());
    let err =
        glommio_rt::run(async move { PeerConnection::connect(addr, "c", LONG).await.unwrap_err() });
    assert!(matches!(err, PeerError::Connect { .. }), "{err}");
    assert_names_peer(&err, addr);
}
