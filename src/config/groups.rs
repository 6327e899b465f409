//! `ringraft.groups`: the Raft groups a node hosts besides `__cluster_metadata-0`
//! (docs/groups.md). The value is a `;`-separated list of `<topic>:<partitions>@<voter ids>`,
//! for example `orders:8@1,2,3;kv:64@2,3,4`: topic `orders` has partitions 0 to 7, each a
//! group whose voters are nodes 1, 2 and 3. A node hosts the groups it is a voter of. Voters
//! are node ids of `controller.quorum.voters`, which gives their addresses.
//!
//! Each group's preferred leader is the first of its voters, as a Kafka partition's is the
//! first of its replicas, and the list is rotated by the partition as Kafka's assignment
//! rotates replicas: with `kv:6@1,2,3`, kv-0 prefers node 1, kv-1 node 2, kv-2 node 3, kv-3
//! node 1, and so on, so that a settled cluster spreads the leaders.

use crate::constants as c;
use crate::protocol::group::{GroupKey, GroupKeyError};

/// One declared topic: its partitions are groups with the same voters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDecl {
    pub topic: String,
    pub partitions: i32,
    pub voters: Vec<i32>,
}

impl GroupDecl {
    /// Its groups, partition 0 first.
    pub fn groups(&self) -> impl Iterator<Item = GroupKey> + '_ {
        (0..self.partitions).filter_map(|p| GroupKey::new(&self.topic, p).ok())
    }

    /// The preferred leader of partition `partition`: its voters rotated by the partition.
    pub fn preferred_leader(&self, partition: i32) -> i32 {
        preferred_leader(&self.voters, partition)
    }
}

/// The preferred leader of partition `partition` of a group with `voters` (not empty): the
/// voters rotated by the partition, as Kafka rotates replicas.
pub fn preferred_leader(voters: &[i32], partition: i32) -> i32 {
    voters[partition.unsigned_abs() as usize % voters.len()]
}

/// Why a `ringraft.groups` value is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupDeclError {
    /// One `<topic>:<partitions>@<voters>` entry is wrong.
    Entry {
        entry: String,
        why: EntryError,
    },
    TopicTwice(String),
    TooMany,
}

/// What is wrong with one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryError {
    Shape,
    Group0(String),
    Name(GroupKeyError),
    PartitionsNotANumber(String),
    PartitionsOutOfRange,
    VoterNotAnId(String),
    VoterNegative(i32),
    VoterTwice(i32),
}

impl std::fmt::Display for GroupDeclError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GroupDeclError::Entry { entry, why } => write!(f, "{entry:?}: {why}"),
            GroupDeclError::TopicTwice(topic) => write!(f, "topic {topic} is declared twice"),
            GroupDeclError::TooMany => write!(
                f,
                "more than {} groups in all; ringraft hosts at most that many per node",
                c::GROUPS_PER_NODE_MAX
            ),
        }
    }
}

impl std::fmt::Display for EntryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EntryError::Shape => {
                f.write_str("expected <topic>:<partitions>@<voter id>,<voter id>,…")
            }
            EntryError::Group0(topic) => write!(
                f,
                "{topic} is group 0, whose voters are controller.quorum.voters"
            ),
            EntryError::Name(e) => write!(f, "{e}"),
            EntryError::PartitionsNotANumber(p) => write!(f, "partitions {p:?} is not a number"),
            EntryError::PartitionsOutOfRange => {
                write!(f, "partitions must be 1 to {}", c::GROUPS_PER_NODE_MAX)
            }
            EntryError::VoterNotAnId(id) => write!(f, "voter {id:?} is not a node id"),
            EntryError::VoterNegative(id) => write!(f, "voter {id} is negative"),
            EntryError::VoterTwice(id) => write!(f, "voter {id} appears twice"),
        }
    }
}

impl std::error::Error for GroupDeclError {}

/// Parses the key's value; `Err` says what is wrong with which entry.
pub fn parse(value: &str) -> Result<Vec<GroupDecl>, GroupDeclError> {
    let mut decls: Vec<GroupDecl> = Vec::new();
    let mut total = 0usize;
    for entry in value.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let decl = parse_entry(entry).map_err(|why| GroupDeclError::Entry {
            entry: entry.to_string(),
            why,
        })?;
        if decls.iter().any(|d| d.topic == decl.topic) {
            return Err(GroupDeclError::TopicTwice(decl.topic));
        }
        total += decl.partitions as usize;
        if total > c::GROUPS_PER_NODE_MAX {
            return Err(GroupDeclError::TooMany);
        }
        decls.push(decl);
    }
    Ok(decls)
}

fn parse_entry(entry: &str) -> Result<GroupDecl, EntryError> {
    let (topic, rest) = entry.split_once(':').ok_or(EntryError::Shape)?;
    let (partitions, voters) = rest.split_once('@').ok_or(EntryError::Shape)?;
    let topic = topic.trim();
    if topic == crate::protocol::METADATA_TOPIC_NAME {
        return Err(EntryError::Group0(topic.to_string()));
    }
    GroupKey::new(topic, 0).map_err(EntryError::Name)?;
    let partitions: i32 = partitions
        .trim()
        .parse()
        .map_err(|_| EntryError::PartitionsNotANumber(partitions.trim().to_string()))?;
    if !(1..=c::GROUPS_PER_NODE_MAX as i32).contains(&partitions) {
        return Err(EntryError::PartitionsOutOfRange);
    }
    let mut ids = Vec::new();
    for id in voters.split(',').map(str::trim) {
        let id: i32 = id
            .parse()
            .map_err(|_| EntryError::VoterNotAnId(id.to_string()))?;
        if id < 0 {
            return Err(EntryError::VoterNegative(id));
        }
        if ids.contains(&id) {
            return Err(EntryError::VoterTwice(id));
        }
        ids.push(id);
    }
    Ok(GroupDecl {
        topic: topic.to_string(),
        partitions,
        voters: ids,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_parse_into_groups() {
        let decls = parse(" orders:2@1,2,3 ; kv:1@3 ;").unwrap();
        assert_eq!(
            decls,
            [
                GroupDecl {
                    topic: "orders".into(),
                    partitions: 2,
                    voters: vec![1, 2, 3]
                },
                GroupDecl {
                    topic: "kv".into(),
                    partitions: 1,
                    voters: vec![3]
                }
            ]
        );
        let names: Vec<String> = decls[0].groups().map(|g| g.to_string()).collect();
        assert_eq!(names, ["orders-0", "orders-1"]);
        let preferred: Vec<i32> = (0..5).map(|p| decls[0].preferred_leader(p)).collect();
        assert_eq!(preferred, [1, 2, 3, 1, 2]);
        assert_eq!(decls[1].preferred_leader(7), 3);
        assert_eq!(parse("").unwrap(), []);
    }

    #[test]
    fn bad_declarations_say_why() {
        for (value, says) in [
            ("orders", "expected <topic>"),
            ("orders:2", "expected <topic>"),
            ("orders:x@1", "not a number"),
            ("orders:0@1", "partitions must be 1 to"),
            ("orders:99999@1", "partitions must be 1 to"),
            ("orders:1@", "not a node id"),
            ("orders:1@1,1", "appears twice"),
            ("orders:1@-2", "negative"),
            ("a/b:1@1", "only ASCII letters"),
            ("__cluster_metadata:1@1", "is group 0"),
            ("__consumer_offsets:1@1", "internal topics"),
            ("o:1@1;o:2@1", "declared twice"),
            ("a:4000@1;b:97@1", "more than 4096 groups"),
        ] {
            let err = parse(value).unwrap_err().to_string();
            assert!(err.contains(says), "{value}: {err}");
        }
    }
}
