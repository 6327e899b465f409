//! Value types the Raft core speaks in: replica keys, (offset, epoch) pairs, the persisted
//! election state and the core's own seeded PRNG. Nothing here touches I/O.

use uuid::Uuid;

/// A replica: node id plus the directory id of its metadata log (KIP-853). Two keys *match* when
/// the ids are equal and either side lacks a directory id or both are equal (raft.md §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReplicaKey {
    pub id: i32,
    pub directory_id: Option<Uuid>,
}

impl ReplicaKey {
    pub fn new(id: i32, directory_id: Option<Uuid>) -> Self {
        ReplicaKey { id, directory_id }
    }

    /// A key from wire fields: the all-zero uuid means "no directory id".
    pub fn from_wire(id: i32, directory_id: Uuid) -> Self {
        let directory_id = (!directory_id.is_nil()).then_some(directory_id);
        ReplicaKey { id, directory_id }
    }

    pub fn wire_directory_id(&self) -> Uuid {
        self.directory_id.unwrap_or(Uuid::nil())
    }

    pub fn matches(&self, other: &ReplicaKey) -> bool {
        self.id == other.id
            && match (self.directory_id, other.directory_id) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }
}

impl std::fmt::Display for ReplicaKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.directory_id {
            Some(dir) => write!(f, "{}:{}", self.id, crate::ids::uuid_to_kafka_string(&dir)),
            None => write!(f, "{}", self.id),
        }
    }
}

/// An offset paired with the epoch of the batch at (or ending) there: snapshot ids,
/// diverging-epoch answers, `(last fetched epoch, log end offset)` comparisons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OffsetAndEpoch {
    pub offset: i64,
    pub epoch: i32,
}

impl OffsetAndEpoch {
    pub fn new(offset: i64, epoch: i32) -> Self {
        OffsetAndEpoch { offset, epoch }
    }
}

/// One listener of a node: what BeginQuorumEpoch's LeaderEndpoints and NodeEndpoints carry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    pub name: String,
    pub host: String,
    pub port: u16,
}

/// The election state the runtime must make durable (the `quorum-state` file, storage.md §6)
/// before it sends anything produced in the same `Ready`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionState {
    pub epoch: i32,
    pub leader_id: Option<i32>,
    pub voted_key: Option<ReplicaKey>,
}

impl ElectionState {
    pub fn unattached(epoch: i32) -> Self {
        ElectionState {
            epoch,
            leader_id: None,
            voted_key: None,
        }
    }
}

/// Leader and epoch as the core knows them; what the application's listener is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderAndEpoch {
    pub leader_id: Option<i32>,
    pub epoch: i32,
}

/// The two clocks a step is taken at. `mono_ms` (monotonic milliseconds, any origin) drives every
/// timer; `unix_ms` (wall-clock Unix milliseconds) is only written into records as their
/// CreateTime, which Kafka's followers copy into their time index. Both are passed in, never
/// read, so the core stays deterministic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Time {
    pub mono_ms: u64,
    pub unix_ms: i64,
}

impl Time {
    pub fn new(mono_ms: u64, unix_ms: i64) -> Self {
        Time { mono_ms, unix_ms }
    }

    /// A time whose wall clock moves with the monotonic one from a fixed origin
    /// (2026-01-01T00:00:00Z): what tests and the simulator step cores with.
    pub fn simulated(mono_ms: u64) -> Self {
        const ORIGIN_UNIX_MS: i64 = 1_767_225_600_000;
        Time::new(mono_ms, ORIGIN_UNIX_MS.saturating_add(mono_ms as i64))
    }
}

/// SplitMix64: a tiny seeded generator so that election jitter is reproducible in simulation
/// and the core never reaches for thread-local randomness.
#[derive(Debug, Clone)]
pub struct Prng(u64);

impl Prng {
    pub fn new(seed: u64) -> Self {
        Prng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, bound)`; 0 when `bound` is 0.
    pub fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 {
            0
        } else {
            self.next_u64() % bound
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_when_either_directory_id_is_unknown() {
        let a = Uuid::from_u128(1);
        let b = Uuid::from_u128(2);
        assert!(ReplicaKey::new(1, None).matches(&ReplicaKey::new(1, Some(a))));
        assert!(ReplicaKey::new(1, Some(a)).matches(&ReplicaKey::new(1, Some(a))));
        assert!(!ReplicaKey::new(1, Some(a)).matches(&ReplicaKey::new(1, Some(b))));
        assert!(!ReplicaKey::new(1, None).matches(&ReplicaKey::new(2, None)));
        assert_eq!(ReplicaKey::from_wire(3, Uuid::nil()).directory_id, None);
    }

    #[test]
    fn prng_is_reproducible_and_bounded() {
        let (mut x, mut y) = (Prng::new(7), Prng::new(7));
        for _ in 0..100 {
            let v = x.below(10);
            assert_eq!(v, y.below(10));
            assert!(v < 10);
        }
    }
}
