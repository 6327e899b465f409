//! Kafka error codes that ringraft sends or understands (docs/wire.md §10). Unknown codes from
//! peers are kept as numbers: Kafka treats them as UNKNOWN_SERVER_ERROR.

/// A Kafka error code. The constants are the codes ringraft uses; any other value can arrive
/// from a peer and is carried through unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub i16);

impl ErrorCode {
    pub const UNKNOWN_SERVER_ERROR: ErrorCode = ErrorCode(-1);
    pub const NONE: ErrorCode = ErrorCode(0);
    /// Produce: a batch whose CRC or framing is wrong.
    pub const CORRUPT_MESSAGE: ErrorCode = ErrorCode(2);
    pub const UNKNOWN_TOPIC_OR_PARTITION: ErrorCode = ErrorCode(3);
    pub const NOT_LEADER_OR_FOLLOWER: ErrorCode = ErrorCode(6);
    pub const REQUEST_TIMED_OUT: ErrorCode = ErrorCode(7);
    pub const BROKER_NOT_AVAILABLE: ErrorCode = ErrorCode(8);
    /// Produce: a batch above `constants::BATCH_MAX_BYTES`.
    pub const MESSAGE_TOO_LARGE: ErrorCode = ErrorCode(10);
    /// Produce with acks other than −1.
    pub const INVALID_REQUIRED_ACKS: ErrorCode = ErrorCode(21);
    pub const UNSUPPORTED_VERSION: ErrorCode = ErrorCode(35);
    /// UpdateFeatures on a controller that is not the active one (docs/wire.md §8.9).
    pub const NOT_CONTROLLER: ErrorCode = ErrorCode(41);
    pub const INVALID_REQUEST: ErrorCode = ErrorCode(42);
    /// Produce while `ringraft.log.append.enable` is false.
    pub const POLICY_VIOLATION: ErrorCode = ErrorCode(44);
    pub const FENCED_LEADER_EPOCH: ErrorCode = ErrorCode(74);
    pub const UNKNOWN_LEADER_EPOCH: ErrorCode = ErrorCode(75);
    /// Produce: a batch ringraft does not take (control, transactional, idempotent,
    /// compressed, records that do not parse).
    pub const INVALID_RECORD: ErrorCode = ErrorCode(87);
    pub const INCONSISTENT_VOTER_SET: ErrorCode = ErrorCode(94);
    /// UpdateFeatures: a level the feature cannot move to (docs/membership.md §10).
    pub const INVALID_UPDATE_VERSION: ErrorCode = ErrorCode(95);
    /// UpdateFeatures: the update failed on the server for another reason.
    pub const FEATURE_UPDATE_FAILED: ErrorCode = ErrorCode(96);
    pub const SNAPSHOT_NOT_FOUND: ErrorCode = ErrorCode(98);
    pub const POSITION_OUT_OF_RANGE: ErrorCode = ErrorCode(99);
    pub const INCONSISTENT_CLUSTER_ID: ErrorCode = ErrorCode(104);
    pub const MISMATCHED_ENDPOINT_TYPE: ErrorCode = ErrorCode(114);
    pub const UNSUPPORTED_ENDPOINT_TYPE: ErrorCode = ErrorCode(115);
    pub const INVALID_VOTER_KEY: ErrorCode = ErrorCode(125);
    /// AddRaftVoter for an id that is already a voter (docs/membership.md §4 step 5).
    pub const DUPLICATE_VOTER: ErrorCode = ErrorCode(126);
    /// Remove/UpdateRaftVoter for a key that is not a voter (docs/membership.md §5 step 5, §6 step 7).
    pub const VOTER_NOT_FOUND: ErrorCode = ErrorCode(127);
    /// ApiVersions v5 from a Kafka broker that is not the cluster or node the client named
    /// (KIP-1242). ringraft never sends it (a Kafka controller does not); its clients name it.
    pub const REBOOTSTRAP_REQUIRED: ErrorCode = ErrorCode(129);

    pub fn name(self) -> &'static str {
        match self.0 {
            -1 => "UNKNOWN_SERVER_ERROR",
            0 => "NONE",
            2 => "CORRUPT_MESSAGE",
            3 => "UNKNOWN_TOPIC_OR_PARTITION",
            6 => "NOT_LEADER_OR_FOLLOWER",
            7 => "REQUEST_TIMED_OUT",
            8 => "BROKER_NOT_AVAILABLE",
            10 => "MESSAGE_TOO_LARGE",
            21 => "INVALID_REQUIRED_ACKS",
            35 => "UNSUPPORTED_VERSION",
            41 => "NOT_CONTROLLER",
            42 => "INVALID_REQUEST",
            44 => "POLICY_VIOLATION",
            74 => "FENCED_LEADER_EPOCH",
            75 => "UNKNOWN_LEADER_EPOCH",
            87 => "INVALID_RECORD",
            94 => "INCONSISTENT_VOTER_SET",
            95 => "INVALID_UPDATE_VERSION",
            96 => "FEATURE_UPDATE_FAILED",
            98 => "SNAPSHOT_NOT_FOUND",
            99 => "POSITION_OUT_OF_RANGE",
            104 => "INCONSISTENT_CLUSTER_ID",
            114 => "MISMATCHED_ENDPOINT_TYPE",
            115 => "UNSUPPORTED_ENDPOINT_TYPE",
            125 => "INVALID_VOTER_KEY",
            126 => "DUPLICATE_VOTER",
            127 => "VOTER_NOT_FOUND",
            129 => "REBOOTSTRAP_REQUIRED",
            _ => "UNKNOWN",
        }
    }
}
