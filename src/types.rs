//! Value types shared by every layer — replica keys, (offset, epoch) pairs, endpoints — and the
//! wall clock. A leaf (it imports only `ids`), so nothing below `node/` needs to
//! import upward to name a replica.

use uuid::Uuid;

/// A replica: node id plus the directory id of its metadata log (KIP-853). Two keys *match* when
/// the ids are equal and either side lacks a directory id or both are equal (docs/raft.md §1).
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

/// Wall-clock milliseconds since the Unix epoch: record timestamps, DescribeQuorum times.
/// Only the runtime reads it; the Raft core is handed it (`raft::Time`).
pub fn unix_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Microseconds since the Unix epoch by the wall clock (0 before it): for comparing times
/// taken in different processes on one machine.
pub fn unix_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// An optional value as a log shows it: the value, or `none` (`leader=1`, `leader=none`,
/// never `leader=Some(1)`).
pub struct OrNone<T>(pub Option<T>);

impl<T: std::fmt::Display> std::fmt::Display for OrNone<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(v) => v.fmt(f),
            None => f.write_str("none"),
        }
    }
}
