//! The semantic fuzzer (issue: hardening, item 1). Random bytes mostly die in the decoder
//! (`hostile_frames.rs`); these frames are well formed and reach the Raft core. They are
//! built from the request schemas (every Raft and membership request, at every version ringraft
//! serves), with the right cluster id and voter ids, and with extreme field values: epochs at
//! 0, −1, i32::MIN, the current epoch and just below it, EPOCH_MAX and i32::MAX; offsets at the
//! i64 extremes; unknown, negative and huge replica ids; odd directory ids, byte limits and
//! endpoints. They go to a live quorum of three nodes embedded in this process while a writer
//! appends through the leader.
//!
//! A Fetch in a voter's name is rationed the same way (`fetching_replica`).
//!
//! Some frames make any correct Raft quorum hold an election: any epoch above the quorum's
//! that a replica may take (a vote, or a leader that does not lead), and the current leader's
//! EndQuorumEpoch (a follower cannot tell it from a real resignation; only an authenticated
//! connection could). They are sent at most once every 15 s, so that commits have room
//! between them. Nothing a frame does may stop or panic a node, and the quorum must commit in
//! every 10-second window and after the fuzzing stops.
//!
//! `cargo test --test semantic_fuzz` sends 100,000 frames; `RINGRAFT_FUZZ_FRAMES=10000000
//! cargo test --release --test semantic_fuzz -- --ignored` runs the long mode.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_lite::future::block_on;
use ringraft::net::raft_rpc;
use ringraft::protocol::api_versions;
use ringraft::protocol::group::GroupKey;
use ringraft::protocol::header::{decode_response_header, RequestHeader};
use ringraft::protocol::request::encode_request_frame;
use ringraft::protocol::request::{
    decode_request, encode_response_frame, encode_response_frame_parts, Decoded, RequestBody,
};
use ringraft::protocol::ErrorCode;
use ringraft::protocol::{apis, Reader};
use ringraft::raft::message::{
    AddVoterRequest, ApiVersionsProbe, BeginQuorumEpochRequest, EndQuorumEpochRequest,
    EpochResponse, FetchRequest, FetchResponse, FetchSnapshotRequest, FetchSnapshotResponse,
    Records, RemoveVoterRequest, SnapshotBytes, UpdateVoterRequest, UpdateVoterResponse,
    VoteRequest, VoteResponse, VoterChangeResponse,
};
use ringraft::raft::types::Prng;
use ringraft::raft::Response;
use ringraft::raft::{Endpoint, OffsetAndEpoch, ReplicaKey, Request};
use ringraft::{ClientError, Node, RaftHandle, RunningNode};

const CLUSTER_ID: &str = "c2VtYW50aWMtZnV6emVyAA";
const EPOCH_MAX: i32 = ringraft::constants::EPOCH_MAX;
const EPOCH_STEP_MAX: i32 = ringraft::constants::EPOCH_STEP_MAX;
/// How often a frame that makes a correct quorum hold an election may go.
const DISRUPTION_EVERY: Duration = Duration::from_secs(15);
/// The quorum must commit in every window this long while the fuzzer runs. A frame naming a
/// leader that does not lead costs a fetch timeout and an election (up to about 5 s).
const COMMIT_WINDOW: Duration = Duration::from_secs(10);

/// What the fuzzer knows of the quorum, kept fresh by the writer.
struct Shared {
    epoch: AtomicI32,
    leader: AtomicI32,
    log_end: AtomicU64,
    /// When the last epoch-changing frame went out.
    disruptive_at: Mutex<Instant>,
    /// Every election-causing frame sent, and every epoch the writer saw: for a failure.
    log: Mutex<Vec<(Instant, String)>>,
    stop: AtomicBool,
}

impl Shared {
    /// What the fuzzer knows before the writer has seen a leader.
    fn new() -> Shared {
        Shared {
            epoch: AtomicI32::new(1),
            leader: AtomicI32::new(-1),
            log_end: AtomicU64::new(0),
            disruptive_at: Mutex::new(Instant::now()),
            log: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        }
    }
}

struct Fuzzer {
    rng: Prng,
    shared: Arc<Shared>,
}

impl Fuzzer {
    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.rng.below(from.len() as u64) as usize]
    }

    fn cluster_id(&mut self) -> Option<String> {
        match self.rng.below(40) {
            0 => None,
            1 => Some("AAAAAAAAAAAAAAAAAAAAAA".into()),
            2 => Some(String::new()),
            _ => Some(CLUSTER_ID.into()),
        }
    }

    /// Whether an election-causing frame may go now (at most one every `DISRUPTION_EVERY`).
    fn may_disrupt(&mut self) -> bool {
        let mut at = self.shared.disruptive_at.lock().unwrap();
        let due = at.elapsed() > DISRUPTION_EVERY;
        if due {
            *at = Instant::now();
            let what = format!(
                "a frame that causes an election (epoch was {})",
                self.shared.epoch.load(Ordering::Relaxed)
            );
            self.shared.log.lock().unwrap().push((Instant::now(), what));
        }
        due
    }

    /// An epoch: extreme, stale or current; one ahead only when `may_disrupt`.
    fn epoch(&mut self) -> i32 {
        let current = self.shared.epoch.load(Ordering::Relaxed);
        if self.rng.below(50) == 0 && self.may_disrupt() {
            return current.saturating_add(1);
        }
        let extremes = [
            0,
            -1,
            1,
            i32::MIN,
            current,
            current.saturating_sub(1),
            EPOCH_MAX,
            EPOCH_MAX.saturating_add(1),
            EPOCH_MAX.saturating_add(EPOCH_STEP_MAX + 1),
            i32::MAX - 1,
            i32::MAX,
        ];
        let epoch = if self.rng.below(10) == 0 {
            self.rng.next_u64() as i32
        } else {
            self.pick(&extremes)
        };
        // Any epoch a replica would take from a peer above its own is an election: rationed.
        let in_reach = epoch <= EPOCH_MAX.max(current).saturating_add(EPOCH_STEP_MAX);
        if epoch > current && in_reach && !self.may_disrupt() {
            return current.saturating_sub(1);
        }
        epoch
    }

    fn offset(&mut self) -> i64 {
        let end = self.shared.log_end.load(Ordering::Relaxed) as i64;
        let values = [
            0,
            -1,
            1,
            i64::MIN,
            i64::MAX,
            i64::MAX - 1,
            end,
            end - 1,
            end + 1,
            end.saturating_mul(2),
        ];
        if self.rng.below(10) == 0 {
            self.rng.next_u64() as i64
        } else {
            self.pick(&values)
        }
    }

    fn replica_id(&mut self) -> i32 {
        self.pick(&[1, 2, 3, 1, 2, 3, 0, -1, -2, 4, 1000, i32::MAX, i32::MIN])
    }

    fn key(&mut self) -> ReplicaKey {
        let id = self.replica_id();
        let dir = match self.rng.below(4) {
            0 => Some(uuid::Uuid::from_u128(u128::from(self.rng.next_u64()))),
            1 => Some(uuid::Uuid::nil()),
            _ => None,
        };
        ReplicaKey::new(id, dir)
    }

    /// A Fetch in a voter's name sets that voter's progress on the leader, and nothing binds a
    /// replica id to a connection (in Kafka either; only mTLS can). In volume, forged ones
    /// hold the high watermark back for good, or move it past what a majority holds. So a
    /// voter's name is rationed like an election, and the rest go out as observers'.
    fn fetching_replica(&mut self) -> ReplicaKey {
        let key = self.key();
        if (1..=3).contains(&key.id) && !self.may_disrupt() {
            return ReplicaKey::new(1000 + key.id, key.directory_id);
        }
        key
    }

    fn int(&mut self) -> i32 {
        self.pick(&[0, -1, 1, 500, 8 << 20, i32::MAX, i32::MIN])
    }

    fn endpoints(&mut self) -> Vec<Endpoint> {
        (0..self.rng.below(3))
            .map(|_| Endpoint {
                name: self.pick(&["CONTROLLER", "", "PLAINTEXT"]).into(),
                host: self.pick(&["127.0.0.1", "", "::1", "no.such.host"]).into(),
                port: self.pick(&[0u16, 1, 9093, u16::MAX]),
            })
            .collect()
    }

    fn request(&mut self) -> Request {
        // RINGRAFT_FUZZ_KINDS=0,3 limits the kinds drawn (for narrowing a failure down).
        let kinds: Vec<u64> = std::env::var("RINGRAFT_FUZZ_KINDS")
            .map(|v| {
                v.split(',')
                    .map(|k| k.parse().expect("kind numbers"))
                    .collect()
            })
            .unwrap_or_else(|_| (0..8).collect());
        let kind = kinds[self.rng.below(kinds.len() as u64) as usize];
        match kind {
            0 => {
                let epoch = self.epoch();
                Request::Vote(VoteRequest {
                    cluster_id: self.cluster_id(),
                    voter: self.key(),
                    replica_epoch: epoch,
                    candidate: self.key(),
                    last_offset_epoch: if self.rng.below(2) == 0 {
                        epoch.saturating_sub(1)
                    } else {
                        self.epoch()
                    },
                    last_offset: self.offset(),
                    pre_vote: self.rng.below(2) == 0,
                })
            }
            1 => Request::BeginQuorumEpoch(BeginQuorumEpochRequest {
                cluster_id: self.cluster_id(),
                voter: self.key(),
                leader_id: self.replica_id(),
                leader_epoch: self.epoch(),
                leader_endpoints: self.endpoints(),
            }),
            2 => {
                let (leader_id, mut leader_epoch) = (self.replica_id(), self.epoch());
                // The current leader resigning, as far as a follower can tell: it holds an
                // election, so it is rationed like an epoch ahead.
                let current = self.shared.epoch.load(Ordering::Relaxed);
                let real = self.shared.leader.load(Ordering::Relaxed);
                if leader_id == real && leader_epoch == current && !self.may_disrupt() {
                    leader_epoch = current - 1;
                }
                Request::EndQuorumEpoch(EndQuorumEpochRequest {
                    cluster_id: self.cluster_id(),
                    leader_id,
                    leader_epoch,
                    preferred_candidates: (0..self.rng.below(4)).map(|_| self.key()).collect(),
                    leader_endpoints: self.endpoints(),
                })
            }
            3 | 4 => Request::Fetch(FetchRequest {
                cluster_id: self.cluster_id(),
                replica: self.fetching_replica(),
                max_wait_ms: self.pick(&[0, -1, 1, 500, i32::MAX]),
                fetch_offset: self.offset(),
                last_fetched_epoch: self.epoch(),
                current_leader_epoch: self.epoch(),
                max_bytes: self.int(),
                high_watermark: None,
            }),
            5 => Request::FetchSnapshot(FetchSnapshotRequest {
                cluster_id: self.cluster_id(),
                replica: self.key(),
                current_leader_epoch: self.epoch(),
                snapshot_id: OffsetAndEpoch::new(self.offset(), self.epoch()),
                position: self.offset(),
                max_bytes: self.int(),
            }),
            6 => match self.rng.below(2) {
                0 => Request::AddVoter(AddVoterRequest {
                    cluster_id: self.cluster_id(),
                    timeout_ms: self.int(),
                    voter: self.key(),
                    listeners: self.endpoints(),
                    ack_when_committed: self.rng.below(2) == 0,
                }),
                _ => Request::RemoveVoter(RemoveVoterRequest {
                    cluster_id: self.cluster_id(),
                    voter: self.key(),
                }),
            },
            _ => Request::UpdateVoter(UpdateVoterRequest {
                cluster_id: self.cluster_id(),
                current_leader_epoch: self.epoch(),
                voter: self.key(),
                listeners: self.endpoints(),
                kraft_min: self.pick(&[0i16, 1, -1, i16::MAX, i16::MIN]),
                kraft_max: self.pick(&[0i16, 1, -1, i16::MAX, i16::MIN]),
            }),
        }
    }
}

/// One frame of `request` at a version the node serves, picked at random.
fn frame(request: &Request, rng: &mut Prng, correlation_id: i32) -> (Vec<u8>, &'static str) {
    let key = raft_rpc::api_key(request);
    let (min, max) = raft_rpc::our_versions(key);
    let version = min + rng.below((max - min + 1) as u64) as i16;
    let spec = apis::served(key).unwrap();
    let header = RequestHeader {
        api_key: key.0,
        api_version: version,
        correlation_id,
        client_id: Some("semantic-fuzzer".into()),
    };
    let frame = encode_request_frame(&header, spec, |w| {
        raft_rpc::encode_request(GroupKey::metadata(), request, version, w)
    });
    (frame, key.name())
}

/// The answer to one frame: its correlation id checked, its error codes decoded.
fn exchange(stream: &mut TcpStream, bytes: &[u8], correlation_id: i32) -> Option<Bytes> {
    stream.write_all(bytes).ok()?;
    let body = Bytes::from(common::read_frame(stream)?);
    let mut r = Reader::new(&body);
    let key = i16::from_be_bytes([bytes[4], bytes[5]]);
    let version = i16::from_be_bytes([bytes[6], bytes[7]]);
    let spec = apis::served(ringraft::protocol::ApiKey(key))?;
    let got = decode_response_header(&mut r, spec.response_header_version(version)).ok()?;
    assert_eq!(got, correlation_id, "answers come back in order");
    Some(body.slice(r.position()..))
}

/// The leader as a node of `handles` (ids 1..) reports it, if it is one of them.
fn leader(handles: &[RaftHandle]) -> Option<(usize, i32)> {
    handles.iter().find_map(|h| {
        let q = block_on(h.describe_quorum()).ok()?;
        let l = q
            .leader_id
            .filter(|l| (1..=handles.len() as i32).contains(l))?;
        Some(((l - 1) as usize, q.epoch))
    })
}

/// Appends through whoever leads until told to stop; returns the commit times.
fn writer(handles: Vec<RaftHandle>, shared: Arc<Shared>) -> Vec<Instant> {
    let mut commits = Vec::new();
    let mut i = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        let Some((l, epoch)) = leader(&handles) else {
            shared
                .log
                .lock()
                .unwrap()
                .push((Instant::now(), "no leader known".into()));
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        if shared.epoch.swap(epoch, Ordering::Relaxed) != epoch {
            let what = format!("the writer sees leader {} in epoch {epoch}", l + 1);
            shared.log.lock().unwrap().push((Instant::now(), what));
        }
        shared.leader.store(l as i32 + 1, Ordering::Relaxed);
        i += 1;
        let value = format!("w{i}");
        let asked = Instant::now();
        let answer = block_on(handles[l].append(&[value.as_bytes()], 0));
        if asked.elapsed() > Duration::from_secs(2) {
            let what = format!(
                "an append to node {} took {:.1} s: {:?}",
                l + 1,
                asked.elapsed().as_secs_f64(),
                answer.as_ref().map(|_| ())
            );
            shared.log.lock().unwrap().push((asked, what));
        }
        match answer {
            Ok(offset) => {
                shared.log_end.store(offset as u64 + 1, Ordering::Relaxed);
                commits.push(Instant::now());
            }
            Err(ClientError::Stopped) => panic!("node {} stopped", l + 1),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    commits
}

fn fuzz(frames: u64, seed: u64) {
    let _turn = common::one_quorum_at_a_time();
    let (ports, voters) = common::three_voters();
    let dirs: Vec<common::TempDir> = (1..=3)
        .map(|id| common::TempDir::new(&format!("semantic-fuzz-{id}")))
        .collect();
    let nodes: Vec<RunningNode> = (1..=3)
        .map(|id| {
            let i = (id - 1) as usize;
            let config = common::embedded_config(id, ports[i], &voters, dirs[i].path(), "");
            // RUST_LOG=info shows the nodes' elections beside a failure.
            Node::builder(config)
                .format_if_empty(CLUSTER_ID)
                .init_logging(std::env::var_os("RUST_LOG").is_some())
                .start()
                .expect("the node starts")
        })
        .collect();
    let handles: Vec<RaftHandle> = nodes.iter().map(|n| n.handle()).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while leader(&handles).is_none() {
        assert!(Instant::now() < deadline, "no first leader");
        std::thread::sleep(Duration::from_millis(50));
    }
    let shared = Arc::new(Shared::new());
    let writing = {
        let (handles, shared) = (handles.clone(), shared.clone());
        std::thread::spawn(move || writer(handles, shared))
    };
    let started = Instant::now();
    let threads = 6;
    let counts: Vec<_> = (0..threads)
        .map(|t| {
            // The first `frames % threads` threads send one more: `frames` in all, exactly.
            let per_thread = frames / threads + u64::from(t < frames % threads);
            let (shared, ports) = (shared.clone(), ports.clone());
            std::thread::spawn(move || {
                let mut fuzzer = Fuzzer {
                    rng: Prng::new(seed.wrapping_mul(1000).wrapping_add(t)),
                    shared,
                };
                let mut answers: BTreeMap<&'static str, (u64, u64)> = BTreeMap::new();
                let mut stream: Option<TcpStream> = None;
                for n in 0..per_thread {
                    let port = ports[fuzzer.rng.below(3) as usize];
                    let s = match stream.as_mut() {
                        Some(s) if fuzzer.rng.below(64) != 0 => s,
                        _ => {
                            let s =
                                TcpStream::connect(("127.0.0.1", port)).expect("the node accepts");
                            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                            s.set_nodelay(true).unwrap();
                            stream.insert(s)
                        }
                    };
                    let request = fuzzer.request();
                    let correlation = n as i32;
                    let (bytes, name) = frame(&request, &mut fuzzer.rng, correlation);
                    let entry = answers.entry(name).or_default();
                    match exchange(s, &bytes, correlation) {
                        Some(_) => entry.0 += 1,
                        None => {
                            // Closed: the node refused the connection's frame (and says so in
                            // its log). Counted; a stopped node fails the checks below.
                            entry.1 += 1;
                            stream = None;
                        }
                    }
                }
                answers
            })
        })
        .collect();
    let mut answers: BTreeMap<&'static str, (u64, u64)> = BTreeMap::new();
    for t in counts {
        for (name, (ok, closed)) in t.join().expect("a fuzzing thread") {
            let e = answers.entry(name).or_default();
            e.0 += ok;
            e.1 += closed;
        }
    }
    let fuzz_time = started.elapsed();
    // After the fuzzing: the quorum still commits, on every node's word.
    std::thread::sleep(Duration::from_secs(3));
    shared.stop.store(true, Ordering::Relaxed);
    let commits = writing.join().expect("the writer");
    for (i, h) in handles.iter().enumerate() {
        block_on(h.describe_quorum())
            .unwrap_or_else(|e| panic!("node {} no longer answers: {e:?}", i + 1));
    }
    let sent: u64 = answers.values().map(|(ok, closed)| ok + closed).sum();
    let closed: u64 = answers.values().map(|(_, closed)| closed).sum();
    println!(
        "semantic fuzzer: {sent} frames in {:.1} s, {closed} connections closed; per API \
         (answered, closed): {answers:?}; {} commits; epoch {}",
        fuzz_time.as_secs_f64(),
        commits.len(),
        shared.epoch.load(Ordering::Relaxed)
    );
    assert_eq!(sent, frames);
    check_commits(&shared, &commits, started, started + fuzz_time);
    for n in nodes {
        n.stop_and_join().expect("every node stops cleanly");
    }
}

/// The quorum committed in every `COMMIT_WINDOW` between `started` and `end`, and after `end`;
/// a failure shows the elections and slow appends around the empty window.
fn check_commits(shared: &Shared, commits: &[Instant], started: Instant, end: Instant) {
    let mut at = started;
    while at + COMMIT_WINDOW <= end {
        let next = at + COMMIT_WINDOW;
        if !commits.iter().any(|c| *c >= at && *c < next) {
            let events: Vec<String> = shared
                .log
                .lock()
                .unwrap()
                .iter()
                .filter(|(t, _)| *t + COMMIT_WINDOW >= at && *t <= next)
                .map(|(t, what)| format!("{:.1} s: {what}", (*t - started).as_secs_f64()))
                .collect();
            let last = commits
                .iter()
                .rev()
                .find(|c| **c < at)
                .map(|c| (*c - started).as_secs_f64());
            panic!(
                "no commit between {:?} and {:?} into the fuzzing (the last before at {last:?} s); \
                 around it: {events:#?}",
                at - started,
                next - started
            );
        }
        at = next;
    }
    assert!(
        commits.iter().any(|c| *c > end),
        "the quorum did not commit after the fuzzing"
    );
}

#[test]
fn semantic_fuzzer_one_hundred_thousand_frames() {
    fuzz(100_000, 1);
}

#[test]
#[ignore = "long: RINGRAFT_FUZZ_FRAMES frames (default 10,000,000); run with --release"]
fn semantic_fuzzer_long() {
    let frames = std::env::var("RINGRAFT_FUZZ_FRAMES")
        .ok()
        .map(|v| v.parse().expect("RINGRAFT_FUZZ_FRAMES is a number"))
        .unwrap_or(10_000_000);
    let seed = std::env::var("RINGRAFT_FUZZ_SEED")
        .ok()
        .map(|v| v.parse().expect("RINGRAFT_FUZZ_SEED is a number"))
        .unwrap_or(7);
    fuzz(frames, seed);
}

// ---- The other direction: answers ------------------------------------------------------------

/// Every error code a response can carry: Kafka's (−1 to 133 in 4.x), codes no Kafka knows,
/// and the i16 extremes.
fn error_codes() -> Vec<ErrorCode> {
    let mut codes: Vec<ErrorCode> = (-1..=140).map(ErrorCode).collect();
    codes.extend([ErrorCode(i16::MIN), ErrorCode(-2), ErrorCode(i16::MAX)]);
    codes
}

/// Voter 3 of the quorum is this process: it answers every request nodes 1 and 2 send it with
/// a well-formed response of the right API and version whose fields are drawn like the request
/// fuzzer's (extreme and stale epochs, leaders that do not lead, offsets at the i64 extremes,
/// diverging epochs and snapshot ids, records that are valid, foreign or garbage), the top-level
/// and partition error codes cycling through `error_codes()`.
struct FakeVoter {
    fuzzer: Fuzzer,
    codes: Vec<ErrorCode>,
    answered: u64,
    /// Answers given, by API, and the error codes used.
    by_api: BTreeMap<&'static str, u64>,
    codes_used: std::collections::BTreeSet<i16>,
}

impl FakeVoter {
    fn error(&mut self) -> ErrorCode {
        let code = self.codes[(self.answered % self.codes.len() as u64) as usize];
        self.codes_used.insert(code.0);
        code
    }

    /// The top-level error: NONE half the time, so that the partition fields are read.
    fn top_error(&mut self) -> ErrorCode {
        if self.fuzzer.rng.below(2) == 0 {
            ErrorCode::NONE
        } else {
            self.error()
        }
    }

    fn records(&mut self) -> Bytes {
        let base = self.fuzzer.offset().max(0);
        match self.fuzzer.rng.below(4) {
            0 => Bytes::new(),
            1 => {
                let epoch = self.fuzzer.epoch();
                let mut b = ringraft::records::BatchBuilder::new(base, epoch, 0, false);
                b.append(None, Some(b"from a voter that lies"));
                Bytes::from(b.finish())
            }
            2 => {
                let mut b = ringraft::records::BatchBuilder::new(base, 1, 0, false);
                b.append(None, Some(b"flipped"));
                let mut v = b.finish();
                let at = self.fuzzer.rng.below(v.len() as u64) as usize;
                v[at] ^= 0x40;
                Bytes::from(v)
            }
            _ => Bytes::from(vec![0xa5u8; 1 + self.fuzzer.rng.below(200) as usize]),
        }
    }

    fn offset_and_epoch(&mut self) -> Option<OffsetAndEpoch> {
        (self.fuzzer.rng.below(3) == 0)
            .then(|| OffsetAndEpoch::new(self.fuzzer.offset(), self.fuzzer.epoch()))
    }

    /// The answer to `request`, and the record bytes a Fetch answer carries.
    fn answer(&mut self, request: &Request) -> (Response, Option<Bytes>) {
        self.answered += 1;
        *self.by_api.entry(request.name()).or_default() += 1;
        let (error, partition_error) = (self.top_error(), self.error());
        let (leader_id, leader_epoch) = (self.fuzzer.replica_id(), self.fuzzer.epoch());
        let leader_endpoints = self.fuzzer.endpoints();
        let epoch = EpochResponse {
            error,
            partition_error,
            leader_id,
            leader_epoch,
            leader_endpoints: leader_endpoints.clone(),
        };
        match request {
            Request::Vote(_) => {
                let granted = self.fuzzer.rng.below(2) == 0;
                let r = VoteResponse {
                    error,
                    partition_error,
                    leader_id,
                    leader_epoch,
                    vote_granted: granted,
                    leader_endpoints,
                };
                (Response::Vote(r), None)
            }
            Request::BeginQuorumEpoch(_) => (Response::BeginQuorumEpoch(epoch), None),
            Request::EndQuorumEpoch(_) => (Response::EndQuorumEpoch(epoch), None),
            Request::Fetch(_) => {
                let records = self.records();
                let r = FetchResponse {
                    error,
                    partition_error,
                    high_watermark: self.fuzzer.offset(),
                    log_start_offset: self.fuzzer.offset(),
                    diverging_epoch: self.offset_and_epoch(),
                    leader_id,
                    leader_epoch,
                    snapshot_id: self.offset_and_epoch(),
                    records: Records::Read {
                        offset: 0,
                        max_bytes: records.len(),
                    },
                    leader_endpoints,
                };
                (Response::Fetch(r), Some(records))
            }
            Request::FetchSnapshot(_) => {
                let bytes = self.records();
                let r = FetchSnapshotResponse {
                    error,
                    partition_error,
                    snapshot_id: OffsetAndEpoch::new(self.fuzzer.offset(), self.fuzzer.epoch()),
                    leader_id,
                    leader_epoch,
                    size: self.fuzzer.offset(),
                    position: self.fuzzer.offset(),
                    bytes: SnapshotBytes::Read {
                        id: OffsetAndEpoch::new(0, 0),
                        position: 0,
                        max_bytes: bytes.len(),
                    },
                    leader_endpoints,
                };
                (Response::FetchSnapshot(r), Some(bytes))
            }
            Request::AddVoter(_) | Request::RemoveVoter(_) => {
                let r = VoterChangeResponse {
                    error,
                    message: None,
                };
                let r = if matches!(request, Request::AddVoter(_)) {
                    Response::AddVoter(r)
                } else {
                    Response::RemoveVoter(r)
                };
                (r, None)
            }
            Request::UpdateVoter(_) => {
                let r = UpdateVoterResponse {
                    error,
                    leader_id,
                    leader_epoch,
                    leader_endpoints,
                };
                (Response::UpdateVoter(r), None)
            }
            Request::ApiVersions => (
                Response::ApiVersions(ApiVersionsProbe {
                    error,
                    kraft_version: None,
                }),
                None,
            ),
        }
    }

    /// The whole response frame to `frame` (a request body without its size), or `None` to
    /// close the connection. The connection handshake (ApiVersions) gets ringraft's own table,
    /// or one time in eight an error code from the cycle.
    fn respond(&mut self, frame: &[u8]) -> Option<Vec<u8>> {
        let Ok(Decoded::Request { header, spec, body }) = decode_request(frame) else {
            return None;
        };
        if let RequestBody::ApiVersions(request) = &body {
            let version = header.api_version;
            let mut answer =
                api_versions::answer(request, version, apis::SERVED, Default::default());
            if self.fuzzer.rng.below(8) == 0 {
                answer.error_code = self.error();
                *self.by_api.entry("ApiVersions").or_default() += 1;
            }
            let header_version = spec.response_header_version(version);
            return Some(encode_response_frame(
                header.correlation_id,
                header_version,
                |w| answer.encode(w, version),
            ));
        }
        let request = raft_rpc::request_for(GroupKey::metadata(), &body)?;
        let (response, data) = self.answer(&request);
        let version = header.api_version;
        let parts = encode_response_frame_parts(
            header.correlation_id,
            spec.response_header_version(version),
            |w| {
                let data = data.as_ref().map(Bytes::len);
                raft_rpc::encode_response(GroupKey::metadata(), &response, version, data, w)
            },
        );
        let mut out = Vec::with_capacity(parts.bytes.len() + data.as_ref().map_or(0, Bytes::len));
        let mut from = 0;
        for (at, len) in parts.holes {
            out.extend_from_slice(&parts.bytes[from..at]);
            out.extend_from_slice(&data.as_ref().expect("a hole has bytes")[..len]);
            from = at;
        }
        out.extend_from_slice(&parts.bytes[from..]);
        Some(out)
    }
}

/// Serves one connection from a node until it closes or `stop`.
fn serve_fake(mut stream: TcpStream, fake: Arc<Mutex<FakeVoter>>, stop: Arc<AtomicBool>) {
    use std::io::Read;
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let mut size = [0u8; 4];
    while !stop.load(Ordering::Relaxed) {
        match stream.read_exact(&mut size) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => continue,
            Err(_) => return,
        }
        let len = i32::from_be_bytes(size);
        let Ok(len) = usize::try_from(len) else {
            return;
        };
        let mut body = vec![0u8; len];
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        if stream.read_exact(&mut body).is_err() {
            return;
        }
        let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
        let answer = fake.lock().unwrap().respond(&body);
        match answer {
            Some(frame) if stream.write_all(&frame).is_ok() => {}
            _ => return,
        }
    }
}

/// Runs the answer fuzzer for `duration`: nodes 1 and 2 are real, voter 3 is a `FakeVoter`,
/// and a writer appends through whichever real node leads. Every 15 s at most (like every
/// election-causing frame) the fake also tells both nodes that it leads the next epoch, so
/// that they fetch from it and read its answers. The pair must commit in every 10-second
/// window, no node may stop, and every error code must have gone out.
fn answer_fuzz(duration: Duration, seed: u64) {
    let _turn = common::one_quorum_at_a_time();
    let ports: Vec<u16> = (0..2).map(|_| common::free_port()).collect();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let fake_port = listener.local_addr().unwrap().port();
    let voters = format!(
        "1@127.0.0.1:{},2@127.0.0.1:{},3@127.0.0.1:{fake_port}",
        ports[0], ports[1]
    );
    let dirs: Vec<common::TempDir> = (1..=2)
        .map(|id| common::TempDir::new(&format!("answer-fuzz-{id}")))
        .collect();
    let nodes: Vec<RunningNode> = (1..=2)
        .map(|id| {
            let i = (id - 1) as usize;
            let config = common::embedded_config(id, ports[i], &voters, dirs[i].path(), "");
            Node::builder(config)
                .format_if_empty(CLUSTER_ID)
                .init_logging(std::env::var_os("RUST_LOG").is_some())
                .start()
                .expect("the node starts")
        })
        .collect();
    let handles: Vec<RaftHandle> = nodes.iter().map(|n| n.handle()).collect();
    let shared = Arc::new(Shared::new());
    let fake = Arc::new(Mutex::new(FakeVoter {
        fuzzer: Fuzzer {
            rng: Prng::new(seed),
            shared: shared.clone(),
        },
        codes: error_codes(),
        answered: 0,
        by_api: BTreeMap::new(),
        codes_used: Default::default(),
    }));
    let stop = Arc::new(AtomicBool::new(false));
    let serving = {
        let (fake, stop) = (fake.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut connections = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let _ = stream.set_nonblocking(false);
                        let (fake, stop) = (fake.clone(), stop.clone());
                        connections
                            .push(std::thread::spawn(move || serve_fake(stream, fake, stop)));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            for c in connections {
                let _ = c.join();
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while leader(&handles).is_none() {
        assert!(Instant::now() < deadline, "no first leader");
        std::thread::sleep(Duration::from_millis(50));
    }
    let writing = {
        let (handles, shared) = (handles.clone(), shared.clone());
        std::thread::spawn(move || writer(handles, shared))
    };
    let started = Instant::now();
    let mut claims = 0;
    while started.elapsed() < duration {
        std::thread::sleep(Duration::from_millis(100));
        // The fake claims the next epoch, as rarely as any election-causing frame.
        let claim = fake.lock().unwrap().fuzzer.may_disrupt();
        if claim {
            claims += 1;
            let epoch = shared.epoch.load(Ordering::Relaxed).saturating_add(1);
            for (i, port) in ports.iter().enumerate() {
                let begin = Request::BeginQuorumEpoch(BeginQuorumEpochRequest {
                    cluster_id: Some(CLUSTER_ID.into()),
                    voter: ReplicaKey::new(i as i32 + 1, None),
                    leader_id: 3,
                    leader_epoch: epoch,
                    leader_endpoints: vec![],
                });
                let _ = common::quorum::exchange(*port, &begin);
            }
        }
    }
    let end = Instant::now();
    std::thread::sleep(Duration::from_secs(3));
    shared.stop.store(true, Ordering::Relaxed);
    let commits = writing.join().expect("the writer");
    for (i, h) in handles.iter().enumerate() {
        block_on(h.describe_quorum())
            .unwrap_or_else(|e| panic!("node {} no longer answers: {e:?}", i + 1));
    }
    stop.store(true, Ordering::Relaxed);
    serving.join().expect("the fake voter");
    let fake = fake.lock().unwrap();
    println!(
        "answer fuzzer: {} answers in {:.1} s by API {:?}, {} of {} error codes, {claims} \
         leadership claims; {} commits; epoch {}",
        fake.answered,
        (end - started).as_secs_f64(),
        fake.by_api,
        fake.codes_used.len(),
        fake.codes.len(),
        commits.len(),
        shared.epoch.load(Ordering::Relaxed)
    );
    check_commits(&shared, &commits, started, end);
    assert_eq!(
        fake.codes_used.len(),
        fake.codes.len(),
        "every error code went out"
    );
    for api in ["Vote", "BeginQuorumEpoch", "Fetch"] {
        assert!(fake.by_api.contains_key(api), "no {api} was answered");
    }
    drop(fake);
    for n in nodes {
        n.stop_and_join().expect("every node stops cleanly");
    }
}

#[test]
fn answer_fuzzer_every_error_code_from_a_lying_voter() {
    answer_fuzz(Duration::from_secs(40), 11);
}

#[test]
#[ignore = "long: RINGRAFT_FUZZ_ANSWER_SECONDS (default 600); run with --release"]
fn answer_fuzzer_long() {
    let seconds = std::env::var("RINGRAFT_FUZZ_ANSWER_SECONDS")
        .ok()
        .map(|v| v.parse().expect("RINGRAFT_FUZZ_ANSWER_SECONDS is a number"))
        .unwrap_or(600);
    answer_fuzz(Duration::from_secs(seconds), 13);
}
