//! What the KRaft RPC codecs share (docs/wire.md §8): the metadata topic's name and id, the
//! endpoint structs that Vote, BeginQuorumEpoch, EndQuorumEpoch and FetchSnapshot carry in their
//! flexible versions (KIP-853), and the voter `Listener` of DescribeQuorum, AddRaftVoter and
//! UpdateRaftVoter. Message types and checked codecs only: no state, no I/O.

use uuid::Uuid;

use super::codec::{DecodeResult, Reader, Writer};

/// The one topic the KRaft RPCs name (docs/wire.md §8): `__cluster_metadata`, partition 0.
pub const METADATA_TOPIC_NAME: &str = "__cluster_metadata";

/// Its topic id, (0, 1): `AAAAAAAAAAAAAAAAAAAAAQ` in Kafka's text form, the same value as
/// `log::layout::METADATA_TOPIC_ID`. Fetch v13+ names the topic by this id.
pub const METADATA_TOPIC_ID: Uuid = Uuid::from_u64_pair(0, 1);

/// `NodeEndpoint` of the Vote, BeginQuorumEpoch, EndQuorumEpoch and FetchSnapshot responses
/// (tag 0 of the top-level struct, v1+ of each, always flexible): where a leader named in the
/// response listens. The port is a `uint16` here, unlike Fetch's own `NodeEndpoint`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeEndpoint {
    pub node_id: i32,
    pub host: String,
    pub port: u16,
}

impl NodeEndpoint {
    /// The smallest encoding: int32, empty compact string, uint16, empty tag section.
    pub(crate) const MIN_BYTES: usize = 4 + 1 + 2 + 1;

    pub(crate) fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let out = NodeEndpoint {
            node_id: r.i32("NodeEndpoints.NodeId")?,
            host: r.string("NodeEndpoints.Host", true)?.to_owned(),
            port: r.u16("NodeEndpoints.Port")?,
        };
        r.skip_tagged_fields()?;
        Ok(out)
    }

    pub(crate) fn encode(&self, w: &mut Writer) {
        w.i32(self.node_id);
        w.string(&self.host, true);
        w.u16(self.port);
        w.no_tagged_fields();
    }

    /// The `NodeEndpoints` tag body: a compact array of endpoints.
    pub(crate) fn decode_all(r: &mut Reader<'_>) -> DecodeResult<Vec<Self>> {
        r.array_of("NodeEndpoints", true, Self::MIN_BYTES, Self::decode)
    }

    pub(crate) fn encode_all(endpoints: &[Self], w: &mut Writer) {
        w.array_of(endpoints, true, |w, e| e.encode(w));
    }
}

/// `LeaderEndpoint` of the BeginQuorumEpoch and EndQuorumEpoch requests (v1+, not tagged): one
/// of the sending leader's listeners.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaderEndpoint {
    /// The listener name.
    pub name: String,
    pub host: String,
    pub port: u16,
}

impl LeaderEndpoint {
    /// The smallest encoding: two empty compact strings, uint16, empty tag section.
    pub(crate) const MIN_BYTES: usize = 1 + 1 + 2 + 1;

    pub(crate) fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let out = LeaderEndpoint {
            name: r.string("LeaderEndpoints.Name", true)?.to_owned(),
            host: r.string("LeaderEndpoints.Host", true)?.to_owned(),
            port: r.u16("LeaderEndpoints.Port")?,
        };
        r.skip_tagged_fields()?;
        Ok(out)
    }

    pub(crate) fn encode(&self, w: &mut Writer) {
        w.string(&self.name, true);
        w.string(&self.host, true);
        w.u16(self.port);
        w.no_tagged_fields();
    }

    pub(crate) fn decode_all(r: &mut Reader<'_>) -> DecodeResult<Vec<Self>> {
        r.array_of("LeaderEndpoints", true, Self::MIN_BYTES, Self::decode)
    }

    pub(crate) fn encode_all(endpoints: &[Self], w: &mut Writer) {
        w.array_of(endpoints, true, |w, e| e.encode(w));
    }
}

/// `Listener`: one listener of a voter, as DescribeQuorum's `Nodes` (v2+), AddRaftVoter and
/// UpdateRaftVoter carry it (always flexible). The same bytes as `LeaderEndpoint`; a separate
/// type because Kafka names the fields differently in errors and in its schemas.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Listener {
    pub name: String,
    pub host: String,
    /// A `uint16`, unlike DescribeCluster's and UpdateRaftVoter's `CurrentLeader` ports.
    pub port: u16,
}

impl Listener {
    /// Two empty compact strings, uint16, an empty tag section.
    pub(crate) const MIN_BYTES: usize = 1 + 1 + 2 + 1;

    pub(crate) fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let out = Listener {
            name: r.string("Listeners.Name", true)?.to_owned(),
            host: r.string("Listeners.Host", true)?.to_owned(),
            port: r.u16("Listeners.Port")?,
        };
        r.skip_tagged_fields()?;
        Ok(out)
    }

    pub(crate) fn encode(&self, w: &mut Writer) {
        w.string(&self.name, true);
        w.string(&self.host, true);
        w.u16(self.port);
        w.no_tagged_fields();
    }

    /// A compact array of listeners.
    pub(crate) fn decode_all(r: &mut Reader<'_>, field: &'static str) -> DecodeResult<Vec<Self>> {
        r.array_of(field, true, Self::MIN_BYTES, Self::decode)
    }

    pub(crate) fn encode_all(listeners: &[Self], w: &mut Writer) {
        w.array_of(listeners, true, |w, l| l.encode(w));
    }
}

/// The error every decoder returns for a version outside its message's range.
pub(crate) fn unsupported_version() -> super::codec::DecodeError {
    super::codec::DecodeError::Invalid {
        field: "version",
        why: "version not supported by this message",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::uuid_to_kafka_string;
    use crate::log::layout;

    #[test]
    fn metadata_topic_id_matches_the_log_layout_text() {
        assert_eq!(
            uuid_to_kafka_string(&METADATA_TOPIC_ID),
            layout::METADATA_TOPIC_ID
        );
        assert_eq!(
            format!("{METADATA_TOPIC_NAME}-0"),
            layout::PARTITION_DIR,
            "the partition directory is <topic>-<partition>"
        );
    }

    #[test]
    fn endpoint_minimum_sizes_are_exact() {
        let mut w = Writer::new();
        NodeEndpoint::default().encode(&mut w);
        assert_eq!(w.len(), NodeEndpoint::MIN_BYTES);
        let mut w = Writer::new();
        LeaderEndpoint::default().encode(&mut w);
        assert_eq!(w.len(), LeaderEndpoint::MIN_BYTES);
        let mut w = Writer::new();
        Listener::default().encode(&mut w);
        assert_eq!(w.len(), Listener::MIN_BYTES);
    }

    #[test]
    fn endpoint_port_is_unsigned() {
        let e = NodeEndpoint {
            node_id: 7,
            host: "h".into(),
            port: 65_535,
        };
        let mut w = Writer::new();
        e.encode(&mut w);
        let bytes = w.into_vec();
        assert_eq!(bytes, [0, 0, 0, 7, 2, b'h', 0xff, 0xff, 0]);
        assert_eq!(NodeEndpoint::decode(&mut Reader::new(&bytes)).unwrap(), e);
    }
}

/// ringraft's own tagged field in AddRaftVoter, RemoveRaftVoter and UpdateRaftVoter requests:
/// the Raft group the voter change is for (docs/wire.md §8.7). Those RPCs name no partition in
/// Kafka's schemas, so they are `__cluster_metadata-0`'s; a group with a dynamic voter set
/// (docs/groups.md) sends its own with this tag. Never written for group 0, so that its
/// requests stay byte for byte Kafka's; a reader that does not know the tag skips it (KIP-482).
pub const GROUP_TAG: u32 = 10_001;

/// The group a voter change names (`GROUP_TAG`): a topic name and a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaftGroup {
    pub topic: String,
    pub partition: i32,
}

impl RaftGroup {
    /// A request's tag section: empty, or the group's tag.
    pub fn encode_tags(group: Option<&RaftGroup>, w: &mut Writer) {
        match group {
            Some(g) => {
                w.unsigned_varint(1);
                w.tagged_field(GROUP_TAG, |w| {
                    w.string(&g.topic, true);
                    w.i32(g.partition);
                });
            }
            None => w.no_tagged_fields(),
        }
    }

    /// A request's tag section: the group it names, if any; other tags are skipped.
    pub fn decode_tags(r: &mut Reader<'_>) -> DecodeResult<Option<RaftGroup>> {
        let mut group = None;
        r.tagged_fields(|tag, body| match tag {
            GROUP_TAG => {
                group = Some(RaftGroup {
                    topic: body.string("Group.Topic", true)?.to_owned(),
                    partition: body.i32("Group.Partition")?,
                });
                Ok(true)
            }
            _ => Ok(false),
        })?;
        Ok(group)
    }
}
