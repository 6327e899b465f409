//! `quorum-state` (docs/storage.md §9): the epoch, leader and vote that must survive a crash.
//! One line of JSON, replaced atomically (temp, fsync, rename, fsync dir): when `write` returns
//! Ok the new state is durable, which is what lets a vote be sent (docs/design.md §3 rule 1).

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use uuid::Uuid;

use super::durable;
use super::FileFormatError;
use crate::ids::{parse_kafka_uuid, uuid_to_kafka_string};

/// The persisted election state. `data_version` 0 (kraft.version 0) has no voted directory id;
/// 1 has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumStateData {
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub voted_id: i32,
    pub voted_directory_id: Uuid,
    pub data_version: i16,
    /// Static voter ids, written in v0 for downgrade compatibility (never read for decisions).
    pub current_voters: Option<Vec<i32>>,
}

impl Default for QuorumStateData {
    /// A missing file: epoch 0, no leader, no vote.
    fn default() -> Self {
        QuorumStateData {
            leader_id: -1,
            leader_epoch: 0,
            voted_id: -1,
            voted_directory_id: Uuid::nil(),
            data_version: 0,
            current_voters: None,
        }
    }
}

#[derive(Debug)]
pub enum QuorumStateError {
    Io(PathBuf, io::Error),
    Invalid(PathBuf, FileFormatError),
    /// The file parses but holds something the log beside it contradicts (see
    /// [`QuorumStateData::check_against_log`]).
    Rewound {
        path: PathBuf,
        /// The file's epoch; `None` when the file is missing.
        file_epoch: Option<i32>,
        /// The largest epoch of the log's batches and snapshots.
        log_epoch: i32,
    },
}

impl fmt::Display for QuorumStateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuorumStateError::Io(p, e) => write!(f, "{}: {e}", p.display()),
            QuorumStateError::Invalid(p, why) => write!(f, "{}: {why}", p.display()),
            QuorumStateError::Rewound {
                path,
                file_epoch: None,
                log_epoch,
            } => write!(
                f,
                "{} is missing, but the metadata log beside it holds epoch {log_epoch}: this \
                 node may have voted in that epoch or a later one. {REPAIR}",
                path.display()
            ),
            QuorumStateError::Rewound {
                path,
                file_epoch: Some(epoch),
                log_epoch,
            } => write!(
                f,
                "{} says epoch {epoch}, but the metadata log beside it holds epoch \
                 {log_epoch}: the file was rewound or replaced. {REPAIR}",
                path.display()
            ),
        }
    }
}

impl std::error::Error for QuorumStateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            QuorumStateError::Io(_, e) => Some(e),
            QuorumStateError::Invalid(_, e) => Some(e),
            QuorumStateError::Rewound { .. } => None,
        }
    }
}

const REPAIR: &str = "If the file was lost and you accept that this node forgets any vote it \
                      cast, repair it explicitly: ringraft storage repair-quorum-state -c \
                      <server.properties> --epoch <the quorum's current epoch> \
                      (docs/operations.md: \"Repairing quorum-state\")";

impl QuorumStateData {
    /// The JSON line Kafka writes for this data version.
    pub fn to_json(&self) -> String {
        let value = match self.data_version {
            0 => json!({
                "clusterId": "",
                "leaderId": self.leader_id,
                "leaderEpoch": self.leader_epoch,
                "votedId": self.voted_id,
                "appliedOffset": 0,
                "currentVoters": self.current_voters.as_ref().map(|ids| {
                    ids.iter().map(|id| json!({"voterId": id})).collect::<Vec<_>>()
                }),
                "data_version": 0,
            }),
            _ => json!({
                "leaderId": self.leader_id,
                "leaderEpoch": self.leader_epoch,
                "votedId": self.voted_id,
                "votedDirectoryId": uuid_to_kafka_string(&self.voted_directory_id),
                "data_version": 1,
            }),
        };
        value.to_string()
    }

    /// Parses the first line of the file.
    pub fn from_json(text: &str) -> Result<QuorumStateData, FileFormatError> {
        let line = text
            .lines()
            .next()
            .ok_or(FileFormatError::Missing("JSON line"))?;
        let value: Value = serde_json::from_str(line)
            .map_err(|_| FileFormatError::value("the line", line, "not a JSON object"))?;
        let int = |key: &'static str| -> Result<i64, FileFormatError> {
            match value.get(key) {
                None => Err(FileFormatError::Missing(key)),
                Some(v) => v
                    .as_i64()
                    .ok_or_else(|| FileFormatError::value(key, v, "an integer")),
            }
        };
        let i32_of = |key: &'static str| -> Result<i32, FileFormatError> {
            let v = int(key)?;
            i32::try_from(v).map_err(|_| FileFormatError::value(key, v, "a 32-bit integer"))
        };
        let data_version = int("data_version")?;
        if !(0..=1).contains(&data_version) {
            return Err(FileFormatError::value(
                "data_version",
                data_version,
                "0 or 1 (a later Kafka's file?)",
            ));
        }
        let voted_directory_id = match value.get("votedDirectoryId").and_then(Value::as_str) {
            Some(text) => {
                parse_kafka_uuid(text).map_err(FileFormatError::uuid("votedDirectoryId"))?
            }
            None => Uuid::nil(),
        };
        let current_voters = value
            .get("currentVoters")
            .and_then(Value::as_array)
            .map(|voters| {
                voters
                    .iter()
                    .filter_map(|v| v.get("voterId")?.as_i64()?.try_into().ok())
                    .collect()
            });
        Ok(QuorumStateData {
            leader_id: i32_of("leaderId")?,
            leader_epoch: i32_of("leaderEpoch")?,
            voted_id: i32_of("votedId")?,
            voted_directory_id,
            data_version: data_version as i16,
            current_voters,
        })
    }

    /// Reads `<partition dir>/quorum-state`; a missing file is the default state.
    pub fn read(partition_dir: &Path) -> Result<QuorumStateData, QuorumStateError> {
        Ok(Self::read_if_present(partition_dir)?.unwrap_or_default())
    }

    /// Reads `<partition dir>/quorum-state`; `None` when the file does not exist. A negative
    /// epoch is refused like a malformed file. (Any other is one this node may reach: its own
    /// elections go on above `EPOCH_MAX`, up to `i32::MAX`, where it stops campaigning.)
    pub fn read_if_present(partition_dir: &Path) -> Result<Option<Self>, QuorumStateError> {
        let path = partition_dir.join(super::layout::QUORUM_STATE_FILE);
        let state = match fs::read_to_string(&path) {
            Ok(text) => {
                Self::from_json(&text).map_err(|why| QuorumStateError::Invalid(path, why))?
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(QuorumStateError::Io(path, e)),
        };
        if state.leader_epoch < 0 {
            let why = FileFormatError::value("leaderEpoch", state.leader_epoch, "negative");
            let path = partition_dir.join(super::layout::QUORUM_STATE_FILE);
            return Err(QuorumStateError::Invalid(path, why));
        }
        Ok(Some(state))
    }

    /// Refuses an election state that a log says was lost or rewound: `quorum-state` missing
    /// beside a log that has history (`history_epoch` ≥ 0: the largest epoch of its batches and
    /// snapshots), or holding an epoch below it. Either way the vote this node cast may be
    /// gone, and voting again in that epoch could elect two leaders; only an explicit repair
    /// (`ringraft storage repair-quorum-state`) may start such a node. Kafka instead starts
    /// Unattached at the log's epoch with no vote.
    pub fn check_against_log(
        state: Option<&Self>,
        partition_dir: &Path,
        history_epoch: i32,
    ) -> Result<(), QuorumStateError> {
        let rewound = |file_epoch| QuorumStateError::Rewound {
            path: partition_dir.join(super::layout::QUORUM_STATE_FILE),
            file_epoch,
            log_epoch: history_epoch,
        };
        match state {
            None if history_epoch >= 0 => Err(rewound(None)),
            Some(s) if s.leader_epoch < history_epoch => Err(rewound(Some(s.leader_epoch))),
            _ => Ok(()),
        }
    }

    /// Replaces the file durably.
    pub fn write(&self, partition_dir: &Path) -> io::Result<()> {
        let path = partition_dir.join(super::layout::QUORUM_STATE_FILE);
        durable::replace_file(&path, self.to_json().as_bytes())
    }

    /// `write` without blocking the calling glommio executor.
    pub async fn write_async(&self, partition_dir: &Path) -> io::Result<()> {
        let path = partition_dir.join(super::layout::QUORUM_STATE_FILE);
        durable::replace_file_async(&path, self.to_json().as_bytes()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_spec_examples() {
        let v0 = r#"{"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,"appliedOffset":0,"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}"#;
        let state = QuorumStateData::from_json(v0).unwrap();
        assert_eq!(
            (state.leader_id, state.leader_epoch, state.voted_id),
            (1, 2, -1)
        );
        assert_eq!(state.current_voters, Some(vec![1, 2, 3]));
        assert_eq!(state.to_json(), v0, "writes what Kafka writes");
        let v1 = r#"{"leaderId":-1,"leaderEpoch":2,"votedId":1,"votedDirectoryId":"J8aAPcfLQt2bqs1JT_rMgQ","data_version":1}"#;
        let state = QuorumStateData::from_json(v1).unwrap();
        assert_eq!(
            state.voted_directory_id,
            parse_kafka_uuid("J8aAPcfLQt2bqs1JT_rMgQ").unwrap()
        );
        assert_eq!(state.to_json(), v1);
    }

    #[test]
    fn a_lost_or_rewound_state_is_refused_beside_a_log_with_history() {
        let dir = Path::new("/d");
        let at = |epoch| QuorumStateData {
            leader_epoch: epoch,
            ..QuorumStateData::default()
        };
        assert!(
            QuorumStateData::check_against_log(None, dir, -1).is_ok(),
            "a new log"
        );
        let missing = QuorumStateData::check_against_log(None, dir, 3)
            .unwrap_err()
            .to_string();
        assert!(missing.contains("/d/quorum-state is missing"), "{missing}");
        assert!(missing.contains("repair-quorum-state"), "{missing}");
        let rewound = QuorumStateData::check_against_log(Some(&at(1)), dir, 5)
            .unwrap_err()
            .to_string();
        assert!(
            rewound.contains("says epoch 1") && rewound.contains("epoch 5"),
            "{rewound}"
        );
        assert!(QuorumStateData::check_against_log(Some(&at(5)), dir, 5).is_ok());
        assert!(QuorumStateData::check_against_log(Some(&at(6)), dir, 5).is_ok());
    }

    #[test]
    fn refuses_what_it_cannot_trust() {
        assert!(QuorumStateData::from_json("").is_err());
        assert!(QuorumStateData::from_json("{").is_err());
        assert!(QuorumStateData::from_json(r#"{"leaderId":1,"data_version":2}"#).is_err());
        assert!(
            QuorumStateData::from_json(r#"{"leaderEpoch":1,"votedId":1,"data_version":0}"#)
                .is_err()
        );
    }
}
