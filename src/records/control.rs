//! KRaft control records (docs/records.md §4): the 4-byte key (version, type) and the values
//! LeaderChangeMessage, SnapshotHeaderRecord, SnapshotFooterRecord, KRaftVersionRecord and
//! VotersRecord, each in the flexible encoding at schema version 0 — what Kafka writes and reads.

use uuid::Uuid;

use super::batch::{Batch, BatchError};
use super::builder::BatchBuilder;
use crate::protocol::codec::{DecodeError, DecodeResult, Reader, Writer};

/// Control record types (the key's second int16).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlType {
    Abort,
    Commit,
    LeaderChange,
    SnapshotHeader,
    SnapshotFooter,
    KRaftVersion,
    KRaftVoters,
    /// Any other type: readers ignore it.
    Unknown(i16),
}

impl ControlType {
    pub fn id(self) -> i16 {
        match self {
            ControlType::Abort => 0,
            ControlType::Commit => 1,
            ControlType::LeaderChange => 2,
            ControlType::SnapshotHeader => 3,
            ControlType::SnapshotFooter => 4,
            ControlType::KRaftVersion => 5,
            ControlType::KRaftVoters => 6,
            ControlType::Unknown(id) => id,
        }
    }

    pub fn from_id(id: i16) -> ControlType {
        match id {
            0 => ControlType::Abort,
            1 => ControlType::Commit,
            2 => ControlType::LeaderChange,
            3 => ControlType::SnapshotHeader,
            4 => ControlType::SnapshotFooter,
            5 => ControlType::KRaftVersion,
            6 => ControlType::KRaftVoters,
            other => ControlType::Unknown(other),
        }
    }

    /// The record key: version 0, then the type.
    pub fn key(self) -> [u8; 4] {
        let id = self.id().to_be_bytes();
        [0, 0, id[0], id[1]]
    }

    /// Reads a control record key. A negative version is corruption.
    pub fn parse_key(key: &[u8]) -> DecodeResult<ControlType> {
        let mut r = Reader::new(key);
        let version = r.i16("ControlRecordKey.Version")?;
        if version < 0 {
            return Err(DecodeError::Invalid {
                field: "ControlRecordKey.Version",
                why: "negative",
            });
        }
        Ok(ControlType::from_id(r.i16("ControlRecordKey.Type")?))
    }
}

/// A decoded KRaft control record value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlRecord {
    LeaderChange(LeaderChangeMessage),
    SnapshotHeader {
        last_contained_log_timestamp: i64,
    },
    SnapshotFooter,
    KRaftVersion {
        kraft_version: i16,
    },
    Voters(VotersRecord),
    /// ABORT/COMMIT markers and unknown types, kept by type only.
    Other(ControlType),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderChangeMessage {
    pub leader_id: i32,
    pub voters: Vec<i32>,
    pub granting_voters: Vec<i32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub name: String,
    pub host: String,
    pub port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Voter {
    pub voter_id: i32,
    pub directory_id: Uuid,
    pub endpoints: Vec<Endpoint>,
    pub min_supported_kraft_version: i16,
    pub max_supported_kraft_version: i16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VotersRecord {
    pub voters: Vec<Voter>,
}

impl ControlRecord {
    pub fn control_type(&self) -> ControlType {
        match self {
            ControlRecord::LeaderChange(_) => ControlType::LeaderChange,
            ControlRecord::SnapshotHeader { .. } => ControlType::SnapshotHeader,
            ControlRecord::SnapshotFooter => ControlType::SnapshotFooter,
            ControlRecord::KRaftVersion { .. } => ControlType::KRaftVersion,
            ControlRecord::Voters(_) => ControlType::KRaftVoters,
            ControlRecord::Other(t) => *t,
        }
    }

    /// The value bytes, schema version 0, flexible encoding.
    pub fn encode_value(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.i16(0); // Version
        match self {
            ControlRecord::LeaderChange(m) => {
                w.i32(m.leader_id);
                for ids in [&m.voters, &m.granting_voters] {
                    w.array_len(ids.len(), true);
                    for id in ids {
                        w.i32(*id); // v0: no VoterDirectoryId
                        w.no_tagged_fields();
                    }
                }
            }
            ControlRecord::SnapshotHeader {
                last_contained_log_timestamp,
            } => w.i64(*last_contained_log_timestamp),
            ControlRecord::SnapshotFooter | ControlRecord::Other(_) => {}
            ControlRecord::KRaftVersion { kraft_version } => w.i16(*kraft_version),
            ControlRecord::Voters(record) => encode_voters(&mut w, record),
        }
        w.no_tagged_fields();
        w.into_vec()
    }

    /// Decodes a control record from its key and value. Values are read as schema version 0
    /// whatever their Version field says, as Kafka does.
    pub fn decode(key: &[u8], value: &[u8]) -> DecodeResult<ControlRecord> {
        let control_type = ControlType::parse_key(key)?;
        let mut r = Reader::new(value);
        let record = match control_type {
            ControlType::LeaderChange => {
                r.i16("LeaderChange.Version")?;
                let leader_id = r.i32("LeaderId")?;
                let voters = decode_voter_ids(&mut r, "Voters")?;
                let granting_voters = decode_voter_ids(&mut r, "GrantingVoters")?;
                ControlRecord::LeaderChange(LeaderChangeMessage {
                    leader_id,
                    voters,
                    granting_voters,
                })
            }
            ControlType::SnapshotHeader => {
                r.i16("SnapshotHeader.Version")?;
                let last_contained_log_timestamp = r.i64("LastContainedLogTimestamp")?;
                ControlRecord::SnapshotHeader {
                    last_contained_log_timestamp,
                }
            }
            ControlType::SnapshotFooter => {
                r.i16("SnapshotFooter.Version")?;
                ControlRecord::SnapshotFooter
            }
            ControlType::KRaftVersion => {
                r.i16("KRaftVersion.Version")?;
                ControlRecord::KRaftVersion {
                    kraft_version: r.i16("KRaftVersion")?,
                }
            }
            ControlType::KRaftVoters => {
                r.i16("Voters.Version")?;
                ControlRecord::Voters(decode_voters(&mut r)?)
            }
            other => return Ok(ControlRecord::Other(other)),
        };
        r.skip_tagged_fields()?;
        Ok(record)
    }
}

fn decode_voter_ids(r: &mut Reader<'_>, field: &'static str) -> DecodeResult<Vec<i32>> {
    let count = r.array_len(field, true, 5)?;
    let mut ids = Vec::with_capacity(count);
    for _ in 0..count {
        ids.push(r.i32("VoterId")?);
        r.skip_tagged_fields()?;
    }
    Ok(ids)
}

fn encode_voters(w: &mut Writer, record: &VotersRecord) {
    w.array_len(record.voters.len(), true);
    for voter in &record.voters {
        w.i32(voter.voter_id);
        w.uuid(&voter.directory_id);
        w.array_len(voter.endpoints.len(), true);
        for endpoint in &voter.endpoints {
            w.string(&endpoint.name, true);
            w.string(&endpoint.host, true);
            w.u16(endpoint.port);
            w.no_tagged_fields();
        }
        w.i16(voter.min_supported_kraft_version);
        w.i16(voter.max_supported_kraft_version);
        w.no_tagged_fields(); // KRaftVersionFeature
        w.no_tagged_fields(); // Voter
    }
}

fn decode_voters(r: &mut Reader<'_>) -> DecodeResult<VotersRecord> {
    // A voter is at least id 4 + uuid 16 + endpoints 1 + feature 5 + tags 1 bytes.
    let count = r.array_len("Voters", true, 27)?;
    let mut voters = Vec::with_capacity(count);
    for _ in 0..count {
        let voter_id = r.i32("VoterId")?;
        let directory_id = r.uuid("VoterDirectoryId")?;
        let endpoint_count = r.array_len("Endpoints", true, 5)?;
        let mut endpoints = Vec::with_capacity(endpoint_count);
        for _ in 0..endpoint_count {
            let name = r.string("Endpoints.Name", true)?.to_owned();
            let host = r.string("Endpoints.Host", true)?.to_owned();
            let port = r.u16("Endpoints.Port")?;
            r.skip_tagged_fields()?;
            endpoints.push(Endpoint { name, host, port });
        }
        let min_supported_kraft_version = r.i16("KRaftVersionFeature.MinSupportedVersion")?;
        let max_supported_kraft_version = r.i16("KRaftVersionFeature.MaxSupportedVersion")?;
        r.skip_tagged_fields()?;
        r.skip_tagged_fields()?;
        voters.push(Voter {
            voter_id,
            directory_id,
            endpoints,
            min_supported_kraft_version,
            max_supported_kraft_version,
        });
    }
    Ok(VotersRecord { voters })
}

/// A control batch holding `records` in order, as KRaft writes them.
pub fn control_batch(
    base_offset: i64,
    partition_leader_epoch: i32,
    timestamp_ms: i64,
    records: &[ControlRecord],
) -> Vec<u8> {
    assert!(!records.is_empty(), "a control batch needs a record");
    let mut builder = BatchBuilder::new(base_offset, partition_leader_epoch, timestamp_ms, true);
    for record in records {
        builder.append(
            Some(&record.control_type().key()),
            Some(&record.encode_value()),
        );
    }
    builder.finish()
}

/// The control records of a control batch, in order.
pub fn decode_control_batch(batch: &Batch<'_>) -> Result<Vec<ControlRecord>, BatchError> {
    if !batch.is_control() {
        return Err(BatchError::BadRecords("not a control batch"));
    }
    let mut out = Vec::new();
    for record in batch.records()? {
        let record = record?;
        let (Some(key), Some(value)) = (record.key, record.value) else {
            return Err(BatchError::BadRecords(
                "control record without key or value",
            ));
        };
        out.push(
            ControlRecord::decode(key, value)
                .map_err(|_| BatchError::BadRecords("control record value does not parse"))?,
        );
    }
    Ok(out)
}
