//! ≥ 100,000 random and mutated frames through the server's own path (`net::frame::read_frame`
//! then `net::dispatch::handle_frame`): nothing panics, and nothing allocates more than the
//! frame holds. A counting allocator measures every allocation made on the test's thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use ringraft::net::dispatch::{handle_frame, Action, ServerState};
use ringraft::net::frame::{read_frame, FrameBuffer, RequestMemory};
use ringraft::protocol::decode_request;

mod common;
use common::Rng;

struct Counting;

thread_local! {
    static TRACKING: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
    static TOTAL: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // try_with: the allocator runs during thread teardown too.
    let _ = TRACKING.try_with(|t| {
        if t.get() {
            LARGEST.with(|l| l.set(l.get().max(size)));
            TOTAL.with(|s| s.set(s.get() + size));
        }
    });
}

// SAFETY: forwards to the system allocator unchanged; only records sizes.
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
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns (its result, largest single allocation, total bytes allocated).
fn measured<T>(f: impl FnOnce() -> T) -> (T, usize, usize) {
    LARGEST.with(|l| l.set(0));
    TOTAL.with(|s| s.set(0));
    TRACKING.with(|t| t.set(true));
    let out = f();
    TRACKING.with(|t| t.set(false));
    (out, LARGEST.with(Cell::get), TOTAL.with(Cell::get))
}

/// The shared seeded generator, with the index helper this test uses.
fn below(rng: &mut Rng, n: usize) -> usize {
    rng.below(n as u64) as usize
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Valid and nearly valid request frames (without the size prefix) to mutate.
fn seeds() -> Vec<Vec<u8>> {
    let mut seeds = vec![
        // ApiVersions v4 from Kafka's admin client (docs/wire.md §6).
        hex(
            "0012000400000001000d61646d696e636c69656e742d3100126170616368652d6b61666b612d\
             6a61766106342e302e3000",
        ),
        hex("0012000000000009ffff"),         // v0, null client id
        hex("001200050000000700000000"),     // too new
        hex("00340000000000010000"),         // the 10-byte Vote that aborts kafka-protocol
        hex("003402000000000100007fffffff"), // Vote with a hostile count
        hex("0001000d00000003ffff00"),       // Fetch v13 header only
    ];
    seeds.extend(kraft_seeds());
    seeds.extend(produce_seeds());
    for dir in ["tests/golden"] {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.flatten() {
                if entry.path().extension().is_some_and(|e| e == "bin") {
                    let bytes = std::fs::read(entry.path()).unwrap();
                    seeds.push(bytes[4..].to_vec()); // goldens keep their size prefix
                }
            }
        }
    }
    seeds
}

/// Produce (served unadvertised for `ringraft log append`) at every served version, carrying a
/// real batch, an empty one and a batch for another topic.
fn produce_seeds() -> Vec<Vec<u8>> {
    use ringraft::protocol::header::RequestHeader;
    use ringraft::protocol::produce::{ProducePartition, ProduceRequest, ProduceTopic};
    use ringraft::protocol::request::encode_request_frame;
    use ringraft::protocol::{apis, ApiKey};
    let mut builder = ringraft::BatchBuilder::new(0, 0, 1_700_000_000_000, false);
    builder.append(None, Some(b"hello"));
    builder.append(None, Some(b"world"));
    let batch = bytes::Bytes::from(builder.finish());
    let spec = apis::served(ApiKey::PRODUCE).unwrap();
    let mut out = Vec::new();
    for (topic, index, records) in [
        ("__cluster_metadata", 0, Some(batch.clone())),
        ("__cluster_metadata", 0, None),
        ("other", 3, Some(batch)),
    ] {
        let request = ProduceRequest {
            transactional_id: None,
            acks: -1,
            timeout_ms: 30_000,
            topics: vec![ProduceTopic {
                name: topic.into(),
                partitions: vec![ProducePartition { index, records }],
            }],
        };
        for version in spec.min_version..=spec.max_version {
            let header = RequestHeader {
                api_key: ApiKey::PRODUCE.0,
                api_version: version,
                correlation_id: 12,
                client_id: Some("ringraft-log".into()),
            };
            let frame = encode_request_frame(&header, spec, |w| request.encode(w, version));
            assert!(decode_request(&frame[4..]).is_ok(), "Produce v{version}");
            out.push(frame[4..].to_vec());
        }
    }
    out
}

/// One valid request of every Raft RPC at every served version, as ringraft's peers send them.
fn kraft_seeds() -> Vec<Vec<u8>> {
    use ringraft::net::raft_rpc::{api_key, encode_request};
    use ringraft::protocol::apis;
    use ringraft::protocol::header::RequestHeader;
    use ringraft::protocol::request::encode_request_frame;
    use ringraft::raft::message as m;
    use ringraft::raft::{OffsetAndEpoch, ReplicaKey, Request};
    let key = ReplicaKey::new(2, Some(uuid::Uuid::from_u128(7)));
    let cluster_id = Some("MkU3OEVBNTcwNTJENDM2Qk".to_string());
    let requests = [
        Request::Vote(m::VoteRequest {
            cluster_id: cluster_id.clone(),
            voter: key,
            replica_epoch: 4,
            candidate: key,
            last_offset_epoch: 3,
            last_offset: 100,
            pre_vote: false,
        }),
        Request::BeginQuorumEpoch(m::BeginQuorumEpochRequest {
            cluster_id: cluster_id.clone(),
            voter: key,
            leader_id: 1,
            leader_epoch: 4,
            leader_endpoints: vec![ringraft::raft::Endpoint {
                name: "CONTROLLER".into(),
                host: "localhost".into(),
                port: 9093,
            }],
        }),
        Request::EndQuorumEpoch(m::EndQuorumEpochRequest {
            cluster_id: cluster_id.clone(),
            leader_id: 1,
            leader_epoch: 4,
            preferred_candidates: vec![key, ReplicaKey::new(3, None)],
            leader_endpoints: vec![],
        }),
        Request::Fetch(m::FetchRequest {
            cluster_id: cluster_id.clone(),
            replica: key,
            max_wait_ms: 500,
            fetch_offset: 10,
            last_fetched_epoch: 3,
            current_leader_epoch: 4,
            max_bytes: 1 << 20,
            high_watermark: None,
        }),
        Request::FetchSnapshot(m::FetchSnapshotRequest {
            cluster_id,
            replica: key,
            current_leader_epoch: 4,
            snapshot_id: OffsetAndEpoch::new(10, 3),
            position: 0,
            max_bytes: 1 << 20,
        }),
    ];
    let mut out = Vec::new();
    // The admin APIs the raft shard answers: DescribeQuorum and DescribeCluster, every version.
    for version in 0..=2i16 {
        let header = |key: i16| RequestHeader {
            api_key: key,
            api_version: version,
            correlation_id: 3,
            client_id: Some("adminclient-1".into()),
        };
        let dq = ringraft::protocol::describe_quorum::DescribeQuorumRequest {
            topics: vec![ringraft::protocol::describe_quorum::RequestTopicData {
                topic_name: "__cluster_metadata".into(),
                partitions: vec![Default::default()],
            }],
        };
        let spec = apis::served(ringraft::protocol::ApiKey::DESCRIBE_QUORUM).unwrap();
        out.push(encode_request_frame(&header(55), spec, |w| dq.encode(w, version))[4..].to_vec());
        let dc = ringraft::protocol::describe_cluster::DescribeClusterRequest {
            endpoint_type: 2,
            ..Default::default()
        };
        let spec = apis::served(ringraft::protocol::ApiKey::DESCRIBE_CLUSTER).unwrap();
        out.push(encode_request_frame(&header(60), spec, |w| dc.encode(w, version))[4..].to_vec());
    }
    out.extend(membership_seeds());
    for request in &requests {
        let spec = apis::served(api_key(request)).unwrap();
        for version in spec.min_version..=spec.max_version {
            let header = RequestHeader {
                api_key: spec.key.0,
                api_version: version,
                correlation_id: 9,
                client_id: Some("raft-client-2".into()),
            };
            let frame = encode_request_frame(&header, spec, |w| {
                encode_request(
                    ringraft::protocol::group::GroupKey::metadata(),
                    request,
                    version,
                    w,
                )
            });
            out.push(frame[4..].to_vec());
        }
    }
    out
}

/// AddRaftVoter, RemoveRaftVoter, UpdateRaftVoter and UpdateFeatures at every served version,
/// shaped as Kafka's admin client, auto-join and voters send them.
fn membership_seeds() -> Vec<Vec<u8>> {
    use ringraft::protocol::header::RequestHeader;
    use ringraft::protocol::kraft::Listener;
    use ringraft::protocol::request::encode_request_frame;
    use ringraft::protocol::RequestBody;
    use ringraft::protocol::{add_raft_voter as arv, remove_raft_voter as rrv};
    use ringraft::protocol::{apis, update_features as uf, update_raft_voter as urv, ApiKey};
    let cluster_id = Some("MkU3OEVBNTcwNTJENDM2Qk".to_string());
    let dir = uuid::Uuid::from_u128(7);
    let listeners = vec![Listener {
        name: "CONTROLLER".into(),
        host: "localhost".into(),
        port: 9094,
    }];
    let bodies = [
        RequestBody::AddRaftVoter(arv::AddRaftVoterRequest {
            cluster_id: cluster_id.clone(),
            timeout_ms: 30_000,
            voter_id: 4,
            voter_directory_id: dir,
            listeners: listeners.clone(),
            ack_when_committed: false,
            group: None,
        }),
        RequestBody::RemoveRaftVoter(rrv::RemoveRaftVoterRequest {
            cluster_id: cluster_id.clone(),
            voter_id: 3,
            voter_directory_id: dir,
            group: None,
        }),
        RequestBody::UpdateRaftVoter(urv::UpdateRaftVoterRequest {
            cluster_id,
            current_leader_epoch: 5,
            voter_id: 2,
            voter_directory_id: dir,
            listeners,
            kraft_version_feature: urv::KRaftVersionFeature {
                min_supported_version: 0,
                max_supported_version: 1,
            },
            group: None,
        }),
        RequestBody::UpdateFeatures(uf::UpdateFeaturesRequest {
            timeout_ms: 30_000,
            feature_updates: vec![uf::FeatureUpdateKey {
                feature: "kraft.version".into(),
                max_version_level: 1,
                ..Default::default()
            }],
            validate_only: false,
        }),
    ];
    let mut out = Vec::new();
    for body in &bodies {
        let key = match body {
            RequestBody::AddRaftVoter(_) => ApiKey::ADD_RAFT_VOTER,
            RequestBody::RemoveRaftVoter(_) => ApiKey::REMOVE_RAFT_VOTER,
            RequestBody::UpdateRaftVoter(_) => ApiKey::UPDATE_RAFT_VOTER,
            _ => ApiKey::UPDATE_FEATURES,
        };
        let spec = apis::served(key).unwrap();
        for version in spec.min_version..=spec.max_version {
            let header = RequestHeader {
                api_key: key.0,
                api_version: version,
                correlation_id: 11,
                client_id: Some("adminclient-1".into()),
            };
            let frame = encode_request_frame(&header, spec, |w| match body {
                RequestBody::AddRaftVoter(r) => r.encode(w, version),
                RequestBody::RemoveRaftVoter(r) => r.encode(w, version),
                RequestBody::UpdateRaftVoter(r) => r.encode(w, version),
                RequestBody::UpdateFeatures(r) => r.encode(w, version),
                _ => unreachable!("only the four seeded requests"),
            });
            let decoded = decode_request(&frame[4..]);
            assert!(decoded.is_ok(), "{} v{version}: {decoded:?}", key.name());
            out.push(frame[4..].to_vec());
        }
    }
    out
}

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut frame = seed.to_vec();
    for _ in 0..1 + below(rng, 4) {
        match below(rng, 7) {
            0 if !frame.is_empty() => {
                let i = below(rng, frame.len());
                frame[i] ^= 1 << below(rng, 8);
            }
            1 if !frame.is_empty() => {
                // Hostile lengths: 0x7f / 0xff runs where counts and lengths live.
                let i = below(rng, frame.len());
                let fill = [0x7f, 0xff, 0x80, 0x00][below(rng, 4)];
                for b in frame.iter_mut().skip(i).take(1 + below(rng, 4)) {
                    *b = fill;
                }
            }
            2 => frame.truncate(below(rng, frame.len() + 1)),
            3 => frame.extend((0..below(rng, 16)).map(|_| rng.next() as u8)),
            4 if frame.len() >= 4 => {
                // Any api key and version.
                frame[0..2].copy_from_slice(&(rng.next() as i16 % 100).to_be_bytes());
                frame[2..4].copy_from_slice(&(rng.next() as i16 % 20).to_be_bytes());
            }
            5 if !frame.is_empty() => {
                let i = below(rng, frame.len());
                frame.insert(i, rng.next() as u8);
            }
            _ => frame = (0..below(rng, 64)).map(|_| rng.next() as u8).collect(),
        }
    }
    frame
}

const FRAMES: usize = 120_000;
const MAX_REQUEST: usize = 1 << 20;
/// Bytes of decoded request per byte of frame, at most.
const DECODED_WIDTH_MAX: usize = 64;

#[test]
fn hostile_frames_never_panic_or_overallocate() {
    let seed = std::env::var("RINGRAFT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed);
    let mut rng = Rng(seed);
    let seeds = seeds();
    let state = ServerState::default();
    let (mut answered, mut closed, mut raft_calls) = (0usize, 0usize, 0usize);
    let mut produce_calls = 0usize;
    for i in 0..FRAMES {
        let pick = below(&mut rng, seeds.len());
        let frame = mutate(&mut rng, &seeds[pick]);
        let (decoded, largest, total) = measured(|| decode_request(&frame));
        // Decoded structs are wider than their encodings (one array byte can become a 48-byte
        // struct), so the bound is a constant factor of the bytes received — never the
        // lengths the frame claims.
        let bound = DECODED_WIDTH_MAX * frame.len() + 64;
        assert!(
            largest <= bound && total <= bound,
            "frame {i} (seed {seed}): decoding {} bytes allocated {largest} at once, {total} in \
             all: {frame:02x?}",
            frame.len()
        );
        match (decoded.is_ok(), handle_frame(&frame, &state)) {
            (true, Action::Respond(bytes)) => {
                answered += 1;
                assert!(
                    bytes.len() >= 8,
                    "a response has a size and a correlation id"
                );
            }
            (true, Action::Raft(call)) => {
                // The raft shard's first steps on it: shape check, or a top-level error.
                raft_calls += 1;
                if let ringraft::protocol::RequestBody::Produce(r) = &call.body {
                    // The connection shard's check and answer (`node::produce`), both ways.
                    for enabled in [true, false] {
                        let outcome = match ringraft::node::produce::check(r, enabled) {
                            Ok(_) => ringraft::node::produce::outcome(Ok(9), 0),
                            Err(refusal) => ringraft::protocol::produce::ProducePartitionResponse {
                                error_code: refusal.code,
                                ..Default::default()
                            },
                        };
                        let response = ringraft::node::produce::answer(r, &outcome, vec![]);
                        let mut w = ringraft::protocol::Writer::new();
                        response.encode(&mut w, call.version);
                    }
                    produce_calls += 1;
                } else if ringraft::net::raft_rpc::request_for(
                    ringraft::protocol::group::GroupKey::metadata(),
                    &call.body,
                )
                .is_none()
                {
                    let mut w = ringraft::protocol::Writer::new();
                    ringraft::net::raft_rpc::encode_top_level_error(
                        call.key,
                        call.version,
                        ringraft::protocol::ErrorCode::INVALID_REQUEST,
                        &mut w,
                    );
                    assert!(!w.is_empty());
                }
            }
            (false, Action::Close(_)) => closed += 1,
            (ok, action) => panic!("frame {i}: decode ok={ok} but dispatch gave {action:?}"),
        }
    }
    // The mix must exercise both paths, or the test proves little.
    assert!(
        answered > FRAMES / 100,
        "only {answered} frames were answered"
    );
    assert!(closed > FRAMES / 2, "only {closed} frames were refused");
    assert!(
        raft_calls > FRAMES / 100,
        "only {raft_calls} frames reached raft"
    );
    assert!(
        produce_calls > FRAMES / 1000,
        "only {produce_calls} Produce frames decoded"
    );
}

#[test]
fn frame_reader_trusts_no_announced_size() {
    let mut rng = Rng(7);
    for i in 0..20_000 {
        let announced: i32 = match below(&mut rng, 4) {
            0 => rng.next() as i32,
            1 => i32::MAX,
            2 => (MAX_REQUEST + 1) as i32,
            _ => below(&mut rng, MAX_REQUEST + 1) as i32,
        };
        let sent = below(&mut rng, 256);
        let mut stream = announced.to_be_bytes().to_vec();
        stream.extend((0..sent).map(|_| rng.next() as u8));
        let mut input: &[u8] = &stream;
        let memory = RequestMemory::unbounded();
        let mut buf = FrameBuffer::new(memory.clone());
        let (result, largest, _) = measured(|| {
            futures_lite::future::block_on(read_frame(&mut input, MAX_REQUEST, &mut buf))
        });
        let limit =
            (sent + ringraft::constants::FRAME_READ_STEP_BYTES).min(announced.max(0) as usize);
        assert!(
            largest <= limit,
            "case {i}: announced {announced}, sent {sent}, allocated {largest}"
        );
        match result {
            Ok(true) => assert_eq!(buf.bytes().len(), announced as usize, "case {i}"),
            Ok(false) => panic!("case {i}: a stream with a prefix is not a clean end"),
            Err(_) => assert!(
                announced < 0 || announced as usize > sent,
                "case {i}: good frame refused"
            ),
        }
        let large = announced as usize > ringraft::constants::FRAME_READ_STEP_BYTES;
        assert!(
            large || memory.used() == 0,
            "case {i}: a small frame used the budget"
        );
        drop(buf);
        assert_eq!(memory.used(), 0, "case {i}: the budget was not given back");
    }
}

#[test]
fn pipelined_frames_come_out_in_order() {
    let mut stream = Vec::new();
    for correlation in 0..50i32 {
        let mut frame = hex("00120000");
        frame.extend(correlation.to_be_bytes());
        frame.extend([0xff, 0xff]);
        stream.extend((frame.len() as i32).to_be_bytes());
        stream.extend(frame);
    }
    let mut input: &[u8] = &stream;
    let mut buf = FrameBuffer::new(RequestMemory::unbounded());
    for correlation in 0..50i32 {
        assert!(futures_lite::future::block_on(read_frame(&mut input, 1024, &mut buf)).unwrap());
        let Action::Respond(bytes) = handle_frame(buf.bytes(), &ServerState::default()) else {
            panic!("not answered");
        };
        assert_eq!(bytes[4..8], correlation.to_be_bytes());
    }
    assert!(!futures_lite::future::block_on(read_frame(&mut input, 1024, &mut buf)).unwrap());
}
