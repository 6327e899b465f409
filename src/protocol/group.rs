//! A Raft group's identity: one KRaft partition, `<topic>-<partition>` (docs/groups.md).
//!
//! Every KRaft RPC names its partition: Vote, BeginQuorumEpoch, EndQuorumEpoch, FetchSnapshot
//! and DescribeQuorum by topic name, Fetch (v13+) by topic id. `__cluster_metadata-0` is group
//! 0, with Kafka's fixed topic id. Any other group's topic id is the name-based UUID (version
//! 5) of its topic name in ringraft's namespace, so that every node derives the same id with
//! nothing exchanged; it never collides with Kafka's reserved ids (zero and one), whose version
//! bits are not 5.

use std::fmt;
use std::sync::{Arc, LazyLock};

use uuid::Uuid;

use super::kraft::{METADATA_TOPIC_ID, METADATA_TOPIC_NAME};

/// The namespace of groups' topic ids (a v4 UUID chosen once for ringraft; never change it:
/// the ids of existing groups are derived from it).
const GROUP_TOPIC_NAMESPACE: Uuid = Uuid::from_u128(0x6d1f_4a0e_93c2_4b7e_a5d8_0f3b_2c91_e647);

/// Kafka's bound on a topic name (`Topic.MAX_NAME_LENGTH`).
pub const MAX_TOPIC_NAME_BYTES: usize = 249;

/// One Raft group: a topic, its id and a partition index.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct GroupKey {
    topic: Arc<str>,
    topic_id: Uuid,
    partition: i32,
}

/// A name or partition that cannot be a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupKeyError {
    EmptyTopic,
    TopicTooLong(usize),
    /// Kafka's legal characters are ASCII letters, digits, '.', '_' and '-'.
    IllegalCharacter(char),
    /// "." and ".." are not topic names (they are directory names).
    DotName,
    /// Names starting with "__" belong to Kafka's internal topics; only `__cluster_metadata`
    /// (partition 0) is a group.
    Internal,
    NegativePartition(i32),
}

impl fmt::Display for GroupKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GroupKeyError::EmptyTopic => f.write_str("the topic name is empty"),
            GroupKeyError::TopicTooLong(n) => write!(
                f,
                "the topic name has {n} bytes; Kafka allows at most {MAX_TOPIC_NAME_BYTES}"
            ),
            GroupKeyError::IllegalCharacter(c) => write!(
                f,
                "the topic name holds {c:?}; only ASCII letters, digits, '.', '_' and '-' are legal"
            ),
            GroupKeyError::DotName => f.write_str("\".\" and \"..\" are not topic names"),
            GroupKeyError::Internal => write!(
                f,
                "names starting with \"__\" are Kafka's internal topics; the only one that is a \
                 group is {METADATA_TOPIC_NAME} partition 0"
            ),
            GroupKeyError::NegativePartition(p) => write!(f, "partition {p} is negative"),
        }
    }
}

impl std::error::Error for GroupKeyError {}

static METADATA: LazyLock<GroupKey> = LazyLock::new(|| GroupKey {
    topic: Arc::from(METADATA_TOPIC_NAME),
    topic_id: METADATA_TOPIC_ID,
    partition: 0,
});

impl GroupKey {
    /// `__cluster_metadata-0`, the group Kafka's controllers run.
    pub fn metadata() -> &'static GroupKey {
        &METADATA
    }

    /// The group of `topic` partition `partition`, its name checked as Kafka checks a topic's.
    pub fn new(topic: &str, partition: i32) -> Result<GroupKey, GroupKeyError> {
        if topic == METADATA_TOPIC_NAME && partition == 0 {
            return Ok(GroupKey::metadata().clone());
        }
        check_topic_name(topic)?;
        if partition < 0 {
            return Err(GroupKeyError::NegativePartition(partition));
        }
        Ok(GroupKey {
            topic: Arc::from(topic),
            topic_id: group_topic_id(topic),
            partition,
        })
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn topic_id(&self) -> Uuid {
        self.topic_id
    }

    pub fn partition(&self) -> i32 {
        self.partition
    }

    pub fn is_metadata(&self) -> bool {
        *self == *GroupKey::metadata()
    }

    /// The name of its directory in Kafka's layout: `<topic>-<partition>`.
    pub fn dir_name(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }

    /// Whether a request's partition, as the wire names it, is this group.
    pub fn is(&self, at: &WirePartition) -> bool {
        let topic = match &at.topic {
            WireTopic::Name(name) => name.as_str() == &*self.topic,
            WireTopic::Id(id) => *id == self.topic_id,
        };
        topic && at.partition == self.partition
    }
}

impl fmt::Display for GroupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

impl fmt::Debug for GroupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GroupKey({self})")
    }
}

/// The topic id every node derives for a group topic other than the metadata topic.
pub fn group_topic_id(topic: &str) -> Uuid {
    Uuid::new_v5(&GROUP_TOPIC_NAMESPACE, topic.as_bytes())
}

/// Kafka's rules for a topic name (`Topic.validate`), plus: no internal ("__") names.
fn check_topic_name(topic: &str) -> Result<(), GroupKeyError> {
    if topic.is_empty() {
        return Err(GroupKeyError::EmptyTopic);
    }
    if topic.len() > MAX_TOPIC_NAME_BYTES {
        return Err(GroupKeyError::TopicTooLong(topic.len()));
    }
    if topic == "." || topic == ".." {
        return Err(GroupKeyError::DotName);
    }
    if let Some(c) = topic
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(GroupKeyError::IllegalCharacter(c));
    }
    if topic.starts_with("__") {
        return Err(GroupKeyError::Internal);
    }
    Ok(())
}

/// How a request names its topic: Fetch by id, the other KRaft RPCs by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireTopic {
    Name(String),
    Id(Uuid),
}

/// The one partition a KRaft request names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WirePartition {
    pub topic: WireTopic,
    pub partition: i32,
}

impl fmt::Display for WirePartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.topic {
            WireTopic::Name(name) => write!(
                f,
                "{}-{}",
                crate::logsafe::Untrusted(name.as_str()),
                self.partition
            ),
            WireTopic::Id(id) => write!(
                f,
                "topic id {} partition {}",
                crate::ids::uuid_to_kafka_string(id),
                self.partition
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_group_is_kafkas_partition() {
        let m = GroupKey::metadata();
        assert_eq!(m.topic(), "__cluster_metadata");
        assert_eq!(m.topic_id(), Uuid::from_u64_pair(0, 1));
        assert_eq!(m.partition(), 0);
        assert_eq!(m.dir_name(), "__cluster_metadata-0");
        assert!(m.is_metadata());
        assert_eq!(GroupKey::new("__cluster_metadata", 0).as_ref(), Ok(m));
        assert_eq!(
            GroupKey::new("__cluster_metadata", 1),
            Err(GroupKeyError::Internal)
        );
    }

    #[test]
    fn group_topic_ids_are_stable_distinct_and_never_kafkas_reserved_ones() {
        let a = GroupKey::new("orders", 3).unwrap();
        assert_eq!(a.topic_id(), GroupKey::new("orders", 0).unwrap().topic_id());
        assert_eq!(a.topic_id().get_version_num(), 5);
        assert_ne!(
            a.topic_id(),
            GroupKey::new("orders2", 3).unwrap().topic_id()
        );
        // Pinned: a node of another build must derive the same id for the same name.
        assert_eq!(
            crate::ids::uuid_to_kafka_string(&group_topic_id("orders")),
            crate::ids::uuid_to_kafka_string(&Uuid::new_v5(
                &Uuid::parse_str("6d1f4a0e-93c2-4b7e-a5d8-0f3b2c91e647").unwrap(),
                b"orders"
            ))
        );
        for id in [Uuid::nil(), METADATA_TOPIC_ID] {
            assert_ne!(a.topic_id(), id);
        }
        assert!(!a.is_metadata());
        assert_eq!(a.to_string(), "orders-3");
    }

    #[test]
    fn topic_names_follow_kafkas_rules() {
        assert_eq!(GroupKey::new("", 0), Err(GroupKeyError::EmptyTopic));
        assert_eq!(GroupKey::new(".", 0), Err(GroupKeyError::DotName));
        assert_eq!(GroupKey::new("..", 0), Err(GroupKeyError::DotName));
        assert_eq!(
            GroupKey::new("a/b", 0),
            Err(GroupKeyError::IllegalCharacter('/'))
        );
        assert_eq!(
            GroupKey::new("é", 0),
            Err(GroupKeyError::IllegalCharacter('é'))
        );
        assert_eq!(
            GroupKey::new(&"x".repeat(250), 0),
            Err(GroupKeyError::TopicTooLong(250))
        );
        assert!(GroupKey::new(&"x".repeat(249), 0).is_ok());
        assert_eq!(GroupKey::new("__x", 0), Err(GroupKeyError::Internal));
        assert_eq!(
            GroupKey::new("t", -1),
            Err(GroupKeyError::NegativePartition(-1))
        );
        assert!(GroupKey::new("a.b_c-D9", i32::MAX).is_ok());
    }

    #[test]
    fn a_wire_partition_is_the_group_by_name_or_id() {
        let g = GroupKey::new("orders", 2).unwrap();
        let named = |name: &str, partition| WirePartition {
            topic: WireTopic::Name(name.into()),
            partition,
        };
        assert!(g.is(&named("orders", 2)));
        assert!(!g.is(&named("orders", 0)));
        assert!(!g.is(&named("Orders", 2)));
        let by_id = |id, partition| WirePartition {
            topic: WireTopic::Id(id),
            partition,
        };
        assert!(g.is(&by_id(g.topic_id(), 2)));
        assert!(!g.is(&by_id(METADATA_TOPIC_ID, 2)));
        assert!(GroupKey::metadata().is(&by_id(METADATA_TOPIC_ID, 0)));
        assert!(GroupKey::metadata().is(&named("__cluster_metadata", 0)));
    }
}
