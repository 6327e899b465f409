//! KIP-853 voters as the format tool takes them (docs/membership.md §9): the text form
//! `id@host:port:directoryid[,…]` of `--initial-controllers`, the single voter `--standalone`
//! derives from the server config, and the `VotersRecord` both become in the bootstrap
//! checkpoint. Pure values: no I/O, no name resolution.
//!
//! The record must come out as Kafka 4.x writes it, byte for byte: one endpoint per voter under
//! the first `controller.listener.names` name, supported kraft.version 0..1, hosts as Java's
//! `InetSocketAddress.getHostString` returns them, and voters in `java.util.HashMap` order.

use std::net::{Ipv4Addr, Ipv6Addr};

use uuid::Uuid;

use super::ServerConfig;
use crate::ids::{parse_kafka_uuid, uuid_to_kafka_string, UuidTextError};
use crate::protocol::api_versions::KRAFT_VERSION_MAX;
use crate::records::control::{Endpoint, Voter, VotersRecord};

/// One voter of the bootstrap voter set, before it gets a listener name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamicVoter {
    pub node_id: i32,
    /// As given: brackets of an IPv6 literal removed, nothing resolved or rewritten.
    pub host: String,
    pub port: u16,
    pub directory_id: Uuid,
}

/// Why a text is not one voter, `id@host:port:directoryid`; `text` is the entry as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?}: {why}")]
pub struct VoterTextError {
    pub text: String,
    pub why: VoterTextWhy,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VoterTextWhy {
    #[error("expected id@host:port:directoryid")]
    NoAt,
    #[error("the node id {0:?} is not an integer")]
    NodeId(String),
    #[error("the node id must not be negative")]
    NegativeNodeId,
    #[error("'[' without a closing ']'")]
    UnclosedBracket,
    #[error("the host is empty")]
    EmptyHost,
    #[error("expected :port:directoryid after the host")]
    NoPortOrDirectory,
    #[error("the port {0:?} is not in 0..65535")]
    Port(String),
    #[error("{0}")]
    DirectoryId(UuidTextError),
    #[error("{0} is a reserved directory id (KIP-858), not one a log directory can have")]
    ReservedDirectoryId(String),
}

/// Why `--initial-controllers` is not a voter set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VotersTextError {
    #[error(transparent)]
    Voter(#[from] VoterTextError),
    #[error("node id {0} appears more than once")]
    Twice(i32),
    #[error("no voters given")]
    Empty,
}

/// `--standalone` on a config without a controller listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the config names no controller listener")]
pub struct NoControllerListener;

impl DynamicVoter {
    /// Parses one `id@host:port:directoryid` (host may be `[ipv6]`). Surrounding blanks are
    /// ignored, as Kafka ignores them.
    pub fn parse(text: &str) -> Result<DynamicVoter, VoterTextError> {
        use VoterTextWhy as Why;
        let text = text.trim();
        let refuse = |why| VoterTextError {
            text: text.to_owned(),
            why,
        };
        let (id, rest) = text.split_once('@').ok_or_else(|| refuse(Why::NoAt))?;
        let node_id: i32 = id.parse().map_err(|_| refuse(Why::NodeId(id.to_owned())))?;
        if node_id < 0 {
            return Err(refuse(Why::NegativeNodeId));
        }
        // A bracketed host runs to ']'; any other host to the first ':' (so an IPv6 literal
        // needs its brackets, as in Kafka).
        let (host, rest) = match rest.strip_prefix('[') {
            Some(bracketed) => bracketed
                .split_once(']')
                .ok_or_else(|| refuse(Why::UnclosedBracket))?,
            None => rest.split_at(rest.find(':').unwrap_or(rest.len())),
        };
        if host.is_empty() {
            return Err(refuse(Why::EmptyHost));
        }
        let (port, directory) = rest
            .strip_prefix(':')
            .and_then(|r| r.split_once(':'))
            .ok_or_else(|| refuse(Why::NoPortOrDirectory))?;
        let port: u16 = port
            .parse()
            .map_err(|_| refuse(Why::Port(port.to_owned())))?;
        let directory_id =
            parse_kafka_uuid(directory).map_err(|why| refuse(Why::DirectoryId(why)))?;
        if is_reserved(&directory_id) {
            return Err(refuse(Why::ReservedDirectoryId(directory.to_owned())));
        }
        Ok(DynamicVoter {
            node_id,
            host: host.to_owned(),
            port,
            directory_id,
        })
    }

    /// The voter `--standalone` makes of this node: its first effective advertised controller
    /// listener (`localhost` when that listener names no host) and `directory_id`.
    pub fn standalone(
        config: &ServerConfig,
        directory_id: Uuid,
    ) -> Result<DynamicVoter, NoControllerListener> {
        let listener = config
            .effective_advertised_controller_listeners()
            .into_iter()
            .next()
            .ok_or(NoControllerListener)?;
        let host = if listener.host.is_empty() {
            "localhost".to_owned()
        } else {
            listener.host
        };
        Ok(DynamicVoter {
            node_id: config.node_id,
            host,
            port: listener.port,
            directory_id,
        })
    }

    /// The `VotersRecord` entry: one endpoint, named `listener_name`, kraft.version 0..1.
    pub fn to_voter(&self, listener_name: &str) -> Voter {
        Voter {
            voter_id: self.node_id,
            directory_id: self.directory_id,
            endpoints: vec![Endpoint {
                name: listener_name.to_owned(),
                host: java_host_string(&self.host),
                port: self.port,
            }],
            min_supported_kraft_version: 0,
            max_supported_kraft_version: KRAFT_VERSION_MAX,
        }
    }
}

impl std::fmt::Display for DynamicVoter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let id = uuid_to_kafka_string(&self.directory_id);
        if self.host.contains(':') {
            write!(f, "{}@[{}]:{}:{id}", self.node_id, self.host, self.port)
        } else {
            write!(f, "{}@{}:{}:{id}", self.node_id, self.host, self.port)
        }
    }
}

/// Parses `--initial-controllers`: comma-separated voters, empty entries skipped (blank ones
/// are not: Kafka refuses them too), at least one voter, no node id twice. Two voters may share
/// a directory id (Kafka accepts that too: the replica key is the pair).
pub fn parse_dynamic_voters(text: &str) -> Result<Vec<DynamicVoter>, VotersTextError> {
    let mut voters: Vec<DynamicVoter> = Vec::new();
    for entry in text.trim().split(',').filter(|e| !e.is_empty()) {
        let voter = DynamicVoter::parse(entry)?;
        if voters.iter().any(|v| v.node_id == voter.node_id) {
            return Err(VotersTextError::Twice(voter.node_id));
        }
        voters.push(voter);
    }
    if voters.is_empty() {
        return Err(VotersTextError::Empty);
    }
    Ok(voters)
}

/// The bootstrap `VotersRecord` for `voters`, every endpoint under `listener_name` (the first
/// of `controller.listener.names`), in the order Kafka writes them.
pub fn voters_record(voters: &[DynamicVoter], listener_name: &str) -> VotersRecord {
    assert!(!voters.is_empty(), "a bootstrap voter set needs a voter");
    let mut ids: Vec<i32> = voters.iter().map(|v| v.node_id).collect();
    java_hash_map_order(&mut ids);
    let voters = ids
        .iter()
        .map(|id| {
            let voter = voters
                .iter()
                .find(|v| v.node_id == *id)
                .expect("id from voters");
            voter.to_voter(listener_name)
        })
        .collect();
    VotersRecord { voters }
}

/// Reserved UUIDs (KIP-858): the most significant half zero and the least below 100. ZERO
/// means "unknown directory" on the wire; a voter with it would match any directory.
fn is_reserved(id: &Uuid) -> bool {
    let (high, low) = id.as_u64_pair();
    high == 0 && low < 100
}

/// Sorts non-negative node ids into the iteration order of Kafka's voter map: a
/// `java.util.HashMap<Integer, _>` filled in ascending id order, then copied
/// (`VoterSet.fromMap`). A map iterates bucket by bucket (bucket = `(h ^ h >>> 16) & (cap−1)`
/// for `h` = the id) and, within a bucket, in the order entries arrived. The source map grows
/// from 16 by doubling past a 0.75 load; the copy presizes to the next power of two ≥
/// ⌊n/0.75 + 1⌋ — JDK 17's rule (JDK 19 and later use ⌈n/0.75⌉, which orders a few id sets,
/// such as {1, 2, 5}, differently). Exact while no bucket holds more than 8 voters.
fn java_hash_map_order(ids: &mut [i32]) {
    assert!(ids.iter().all(|id| *id >= 0), "node ids are non-negative");
    let n = ids.len();
    let mut source_capacity = 16usize;
    while n * 4 > source_capacity * 3 {
        source_capacity *= 2;
    }
    let copy_capacity = (n * 4 / 3 + 1).next_power_of_two();
    let spread = |id: i32| {
        let h = id as u32;
        (h ^ (h >> 16)) as usize
    };
    ids.sort_by_key(|id| {
        let h = spread(*id);
        (h & (copy_capacity - 1), h & (source_capacity - 1), *id)
    });
}

/// The host text Java's `InetSocketAddress(host, port).getHostString()` returns, which is what
/// Kafka writes: an IP literal in Java's canonical form (dotted-quad IPv4, also from shorthand
/// such as `127.1`; IPv6 as eight unabbreviated lower-case groups; IPv4-mapped IPv6 as IPv4),
/// anything else unchanged.
pub fn java_host_string(host: &str) -> String {
    if let Some(v4) = java_ipv4_literal(host) {
        return v4.to_string();
    }
    match host.parse::<Ipv6Addr>() {
        Ok(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let groups: Vec<String> = v6.segments().iter().map(|g| format!("{g:x}")).collect();
                groups.join(":")
            }
        },
        Err(_) => host.to_owned(),
    }
}

/// Java's IPv4 literal forms: one to four dot-separated decimal parts, the last of which fills
/// the remaining bytes (`127.1` is 127.0.0.1, `2130706433` too).
fn java_ipv4_literal(text: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = text.split('.').collect();
    let digits = |p: &&str| !p.is_empty() && p.len() <= 10 && p.bytes().all(|b| b.is_ascii_digit());
    if parts.len() > 4 || !parts.iter().all(digits) {
        return None;
    }
    let (last, leading) = parts.split_last()?;
    let mut value: u64 = 0;
    for part in leading {
        let byte: u64 = part.parse().ok()?;
        if byte > 0xff {
            return None;
        }
        value = value << 8 | byte;
    }
    let last_bits = 8 * (4 - leading.len() as u32);
    let last: u64 = last.parse().ok()?;
    if last >> last_bits != 0 {
        return None;
    }
    Some(Ipv4Addr::from(((value << last_bits) | last) as u32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Properties;

    const DIR_A: &str = "J8aAPcfLQt2bqs1JT_rMgQ";
    const DIR_B: &str = "MkU3OEVBNTcwNTJENDM2Qg";

    #[test]
    fn parses_kafka_voter_strings() {
        let text = format!(" 1@host-a:9093:{DIR_A},,2@[::1]:9094:{DIR_B},");
        let voters = parse_dynamic_voters(&text).unwrap();
        assert_eq!(voters.len(), 2);
        assert_eq!((voters[0].node_id, voters[0].host.as_str()), (1, "host-a"));
        assert_eq!((voters[1].host.as_str(), voters[1].port), ("::1", 9094));
        assert_eq!(voters[1].to_string(), format!("2@[::1]:9094:{DIR_B}"));
        assert_eq!(voters[1].directory_id, parse_kafka_uuid(DIR_B).unwrap());
        // The same directory id twice is accepted; the same node id twice is not.
        assert!(parse_dynamic_voters(&format!("1@h:1:{DIR_A},2@h:2:{DIR_A}")).is_ok());
        let twice = parse_dynamic_voters(&format!("1@h:1:{DIR_A},1@h:2:{DIR_B}"));
        assert!(twice.unwrap_err().to_string().contains("more than once"));
    }

    #[test]
    fn refuses_malformed_voters() {
        for (text, says) in [
            ("", "no voters"),
            (
                "1@h:1:J8aAPcfLQt2bqs1JT_rMgQ, ,2@h:2:J8aAPcfLQt2bqs1JT_rMgQ",
                "expected id@",
            ),
            ("1@h:1", "expected :port:directoryid"),
            ("1h:1:x", "expected id@"),
            ("x@h:1:J8aAPcfLQt2bqs1JT_rMgQ", "not an integer"),
            ("-1@h:1:J8aAPcfLQt2bqs1JT_rMgQ", "negative"),
            ("1@:1:J8aAPcfLQt2bqs1JT_rMgQ", "host is empty"),
            ("1@[::1:1:J8aAPcfLQt2bqs1JT_rMgQ", "closing"),
            ("1@::1:1:J8aAPcfLQt2bqs1JT_rMgQ", "host is empty"),
            ("1@h:70000:J8aAPcfLQt2bqs1JT_rMgQ", "port"),
            ("1@h:1:nope", "22-character"),
            ("1@h:1:AAAAAAAAAAAAAAAAAAAAAA", "reserved"),
        ] {
            let err = parse_dynamic_voters(text).unwrap_err().to_string();
            assert!(err.contains(says), "{text:?}: {err}");
        }
    }

    #[test]
    fn hosts_as_java_writes_them() {
        for (given, java) in [
            ("127.0.0.1", "127.0.0.1"),
            ("127.1", "127.0.0.1"),
            ("0127.000.0.1", "127.0.0.1"),
            ("2130706433", "127.0.0.1"),
            ("::1", "0:0:0:0:0:0:0:1"),
            ("2001:DB8::A", "2001:db8:0:0:0:0:0:a"),
            ("::ffff:1.2.3.4", "1.2.3.4"),
            ("::1.2.3.4", "0:0:0:0:0:0:102:304"),
            ("1.2.3.4.5", "1.2.3.4.5"),
            ("1.2.3.256", "1.2.3.256"),
            ("LocalHost", "LocalHost"),
            ("fe80::1%lo", "fe80::1%lo"),
        ] {
            assert_eq!(java_host_string(given), java, "{given}");
        }
    }

    #[test]
    fn voters_in_java_hash_map_order() {
        // Captured from JDK 17: `new HashMap<>(map filled in ascending order).keySet()`.
        for (ids, java) in [
            (vec![1, 2, 3], vec![1, 2, 3]),
            (vec![2, 5], vec![5, 2]),
            (vec![1, 16], vec![16, 1]),
            (vec![1, 2, 5], vec![1, 2, 5]),
            (vec![1, 2, 3001], vec![1, 3001, 2]),
            ((1..=13).collect(), (1..=13).collect()),
            (vec![100, 200, 300], vec![200, 100, 300]),
            (vec![65536, 1], vec![1, 65536]),
            (vec![7, 8, 9, 10, 11, 12], vec![7, 8, 9, 10, 11, 12]),
            (vec![0, 17, 33, 49, 65], vec![0, 17, 33, 49, 65]),
        ] {
            let mut sorted = ids.clone();
            java_hash_map_order(&mut sorted);
            assert_eq!(sorted, java, "{ids:?}");
        }
    }

    #[test]
    fn standalone_uses_the_first_advertised_controller_listener() {
        let config = |listeners: &str| {
            let text = format!(
                "process.roles=controller\nnode.id=4\ncontroller.listener.names=CONTROLLER\n\
                 controller.quorum.bootstrap.servers=h:1\nmetadata.log.dir=/d\n{listeners}\n"
            );
            ServerConfig::from_properties(&Properties::parse(&text)).unwrap()
        };
        let id = parse_kafka_uuid(DIR_A).unwrap();
        let voter = |c: &ServerConfig| DynamicVoter::standalone(c, id).unwrap();
        let plain = config("listeners=CONTROLLER://10.1.2.3:9093");
        assert_eq!(
            voter(&plain).to_string(),
            format!("4@10.1.2.3:9093:{DIR_A}")
        );
        for wildcard in ["CONTROLLER://:9093", "CONTROLLER://0.0.0.0:9093"] {
            let c = config(&format!("listeners={wildcard}"));
            assert_eq!(voter(&c).host, "localhost", "{wildcard}");
        }
        let advertised = config(
            "listeners=CONTROLLER://0.0.0.0:9093\nadvertised.listeners=CONTROLLER://c.example:1",
        );
        assert_eq!(
            (voter(&advertised).host.as_str(), voter(&advertised).port),
            ("c.example", 1)
        );
        let record = voters_record(&[voter(&plain)], "CONTROLLER");
        assert_eq!(record.voters[0].endpoints[0].name, "CONTROLLER");
        assert_eq!(record.voters[0].max_supported_kraft_version, 1);
    }
}
