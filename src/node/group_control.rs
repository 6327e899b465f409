//! Groups created and removed while the node runs (the embedding API's
//! `RunningNode::create_group` and `remove_group`; docs/groups.md), as dragonboat's
//! `StartReplica` and `RemoveData`: the application calls them on each member node.
//!
//! A create checks the group and its voters here, adds the group to the shared table (so
//! requests for it are routed, and wait in its channel), and asks the home shard to start it
//! (`GroupCommand::Start`): the shard makes its directory on first use, recovers its log and
//! runs its executor, as for a declared group. A remove asks the home shard to stop the
//! group's executor (a leader resigns first), close its log and delete its directory; the
//! group leaves the table once that is done.
//!
//! A group created here has a static voter set, like a declared group's (its voters from
//! `controller.quorum.voters`), or a dynamic one (KIP-853, `GroupVoters`): one node creates
//! it as its only voter, as `kafka-storage format --standalone` does for group 0, the others
//! create it as observers, and voters are added and removed through the group's handle
//! (`RaftHandle::add_voter`, `remove_voter`) or join by themselves (auto-join). Nothing about
//! the group is kept outside its directory: after a restart the application creates it again
//! (the same way) and it resumes from its log, as dragonboat's replicas do; a dynamic
//! group's voters are then those its log holds.

use std::collections::HashSet;
use std::path::PathBuf;

use futures_channel::{mpsc, oneshot};

use super::groups::{prepare, GroupStart, Hosted, SharedGroups, Voting};
use super::handle::RaftHandle;
use super::machine::StateMachine;
use super::raft_shard::RaftSetup;
use super::ShardError;
use crate::config::Tuning;
use crate::constants as c;
use crate::protocol::group::{GroupKey, GroupKeyError};

/// Why a group cannot be created or removed. Nothing changed when one is returned, except
/// `Remove` (the group stopped; its directory is partly deleted, see the message).
#[derive(Debug, thiserror::Error)]
pub enum GroupControlError {
    #[error("{0}")]
    Name(#[from] GroupKeyError),
    #[error("__cluster_metadata-0 is group 0: it is neither created nor removed")]
    Metadata,
    #[error(
        "groups need a static quorum: their voters' addresses come from \
         controller.quorum.voters, which this node does not set"
    )]
    NoStaticQuorum,
    #[error("voter {0} is not in controller.quorum.voters")]
    UnknownVoter(i32),
    #[error("voter {0} is listed twice")]
    DuplicateVoter(i32),
    #[error("this node ({0}) is not among the group's voters: create a group on its voters only")]
    NotAVoter(i32),
    #[error("{0} is already hosted here")]
    AlreadyHosted(GroupKey),
    #[error(
        "this node already hosts {max} groups, the most it may (constants::GROUPS_PER_NODE_MAX)"
    )]
    TooMany { max: usize },
    #[error("{0} is not hosted here")]
    NotHosted(GroupKey),
    #[error("{0} is declared in ringraft.groups: remove it from the configuration instead")]
    Declared(GroupKey),
    #[error("{group} did not start: {source}")]
    Start {
        group: GroupKey,
        source: Box<ShardError>,
    },
    #[error(
        "{group} stopped, but deleting {} failed: {source}; delete it by hand before creating \
         the group again",
        dir.display()
    )]
    Remove {
        group: GroupKey,
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "a dynamic group's first voter is written with this node's directory id, and \
         meta.properties has none"
    )]
    NoDirectoryId,
    #[error(
        "a dynamic group's first voter is written with this node's controller listener, and \
         this node advertises none"
    )]
    NoListener,
    #[error(
        "this node holds {open} open files of the {limit} its limit allows (ulimit -n), and a \
         new group needs about {needed} more while it elects: raise the limit, or host fewer \
         groups on this node"
    )]
    OpenFiles { open: u64, needed: u64, limit: u64 },
    #[error("the node is stopping")]
    Stopped,
}

/// Who votes in a group created at run time (`RunningNode::create_group_with`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupVoters {
    /// A static voter set (kraft.version 0): ids of `controller.quorum.voters`, this node
    /// among them, as `ringraft.groups` declares. The first, rotated by the partition, is the
    /// group's preferred leader.
    Static(Vec<i32>),
    /// A dynamic voter set (KIP-853, kraft.version 1) that starts with this node alone, as
    /// `kafka-storage format --standalone` starts group 0: create the group so on one node.
    Standalone,
    /// A dynamic group this node hosts as an observer: it follows the leader (found among the
    /// nodes group 0 knows) until the leader adds it (`RaftHandle::add_voter`), or, with
    /// `auto_join`, it adds itself once caught up (`controller.quorum.auto.join.enable`).
    Observer { auto_join: bool },
}

/// Descriptors kept free for everything else the node opens (segments rolled, snapshots,
/// connections of group 0 and clients).
const OPEN_FILES_RESERVE: u64 = 64;

/// Refuses a new group that would leave the node without descriptors while it elects (the
/// start's check, `preflight::check_open_files`, for groups created later): counted against
/// what the process holds now.
fn check_open_files(peers: usize) -> Result<(), GroupControlError> {
    let (Ok(open), Ok(limit)) = (
        crate::sys::open_descriptors(),
        crate::sys::raise_nofile_soft(),
    ) else {
        return Ok(()); // cannot tell; an EMFILE names its path
    };
    open_files_fit(open, peers, limit)
}

fn open_files_fit(open: u64, peers: usize, limit: u64) -> Result<(), GroupControlError> {
    let needed = super::preflight::group_descriptors(peers);
    if open + needed + OPEN_FILES_RESERVE > limit {
        return Err(GroupControlError::OpenFiles {
            open,
            needed,
            limit,
        });
    }
    Ok(())
}

/// What a raft shard is asked to do with one of its groups.
pub enum GroupCommand {
    Start {
        hosted: Hosted,
        start: Box<GroupStart>,
        reply: oneshot::Sender<Result<(), GroupControlError>>,
    },
    Remove {
        hosted: Hosted,
        reply: oneshot::Sender<Result<(), GroupControlError>>,
    },
}

/// Each shard's receiver of `GroupCommand`s, taken by the shard as it starts.
pub type CommandReceivers =
    std::sync::Arc<std::sync::Mutex<Vec<Option<mpsc::UnboundedReceiver<GroupCommand>>>>>;

/// The embedding API's door to the groups: what a create needs to make a group as the start
/// made the declared ones, and a sender to each shard.
pub struct GroupControl {
    groups: SharedGroups,
    group0: RaftSetup,
    tuning: Tuning,
    node_id: i32,
    metrics: super::metrics::SharedMetrics,
    commands: Vec<mpsc::UnboundedSender<GroupCommand>>,
}

impl GroupControl {
    /// The control, and the receivers its shards take (one per shard of `tuning`).
    pub fn new(
        groups: SharedGroups,
        group0: RaftSetup,
        tuning: Tuning,
        node_id: i32,
        metrics: super::metrics::SharedMetrics,
    ) -> (GroupControl, CommandReceivers) {
        let (commands, receivers): (Vec<_>, Vec<_>) = (0..tuning.shards.len())
            .map(|_| {
                let (tx, rx) = mpsc::unbounded();
                (tx, Some(rx))
            })
            .unzip();
        let control = GroupControl {
            groups,
            group0,
            tuning,
            node_id,
            metrics,
            commands,
        };
        let receivers = std::sync::Arc::new(std::sync::Mutex::new(receivers));
        (control, receivers)
    }

    /// Creates group `topic`-`partition` with `voters` (ids from `controller.quorum.voters`,
    /// this node among them; the first is its preferred leader, rotated by the partition as
    /// `ringraft.groups` does) and starts it on its home shard, with `machine` hearing its
    /// log. Returns its handle once its log is open and its executor runs. A group created
    /// before (its directory exists) resumes from its log.
    pub async fn create(
        &self,
        topic: &str,
        partition: i32,
        voters: &GroupVoters,
        machine: Option<Box<dyn StateMachine>>,
    ) -> Result<RaftHandle, GroupControlError> {
        let key = GroupKey::new(topic, partition)?;
        if key.is_metadata() {
            return Err(GroupControlError::Metadata);
        }
        let first;
        let voting = match voters {
            GroupVoters::Static(voters) => {
                self.check_voters(voters)?;
                let preferred = crate::config::groups::preferred_leader(voters, partition);
                Voting::Static { voters, preferred }
            }
            GroupVoters::Standalone => {
                first = self.standalone_voters()?;
                Voting::Dynamic {
                    first: Some(&first),
                    auto_join: false,
                }
            }
            GroupVoters::Observer { auto_join } => Voting::Dynamic {
                first: None,
                auto_join: *auto_join,
            },
        };
        let peers = match voters {
            GroupVoters::Static(voters) => voters.len(),
            _ => self.group0.config.bootstrap.len(),
        };
        check_open_files(peers)?;
        let (hosted, start) = prepare(&self.group0, &self.tuning, key.clone(), voting, machine)
            // The voters were checked above; what is left is group 0's own set.
            .map_err(|_| GroupControlError::NoStaticQuorum)?;
        let handle = hosted.raft.clone();
        self.groups.update(|table| {
            if table.get(key.topic(), key.partition()).is_some() {
                return Err(GroupControlError::AlreadyHosted(key.clone()));
            }
            if table.len() >= c::GROUPS_PER_NODE_MAX {
                let max = c::GROUPS_PER_NODE_MAX;
                return Err(GroupControlError::TooMany { max });
            }
            table.insert(hosted.clone());
            Ok(())
        })?;
        let series = self.groups.snapshot().len() <= c::GROUP_HOME_SERIES_MAX;
        super::startup::log_group_home(&self.tuning, &key, &self.metrics, series);
        let (reply, answer) = oneshot::channel();
        let command = GroupCommand::Start {
            hosted,
            start: Box::new(start),
            reply,
        };
        let result = self.ask(&key, command, answer).await;
        if result.is_err() {
            self.groups.update(|table| table.remove(&key));
        }
        result.map(|()| handle)
    }

    /// Stops group `topic`-`partition` (a leader resigns first), closes its log and deletes
    /// its directory. Remove a group on every one of its voters: a voter that forgot its log
    /// and votes must not come back in the same group.
    pub async fn remove(&self, topic: &str, partition: i32) -> Result<(), GroupControlError> {
        let key = GroupKey::new(topic, partition)?;
        if key.is_metadata() {
            return Err(GroupControlError::Metadata);
        }
        let table = self.groups.snapshot();
        let hosted = table
            .get(key.topic(), key.partition())
            .ok_or_else(|| GroupControlError::NotHosted(key.clone()))?;
        if hosted.declared {
            return Err(GroupControlError::Declared(key));
        }
        let (reply, answer) = oneshot::channel();
        let command = GroupCommand::Remove {
            hosted: hosted.clone(),
            reply,
        };
        let result = self.ask(&key, command, answer).await;
        // Stopped, whether or not its directory is gone: it is no longer hosted.
        if !matches!(result, Err(GroupControlError::Stopped)) {
            self.groups.update(|table| table.remove(&key));
        }
        result
    }

    /// The handle of a hosted group.
    pub fn handle(&self, topic: &str, partition: i32) -> Option<RaftHandle> {
        let table = self.groups.snapshot();
        table.get(topic, partition).map(|h| h.raft.clone())
    }

    /// Sends `command` to `key`'s home shard and waits for its answer.
    async fn ask(
        &self,
        key: &GroupKey,
        command: GroupCommand,
        answer: oneshot::Receiver<Result<(), GroupControlError>>,
    ) -> Result<(), GroupControlError> {
        let home = self.tuning.home_shard(key);
        let sender = self.commands.get(home).ok_or(GroupControlError::Stopped)?;
        sender
            .unbounded_send(command)
            .map_err(|_| GroupControlError::Stopped)?;
        answer.await.unwrap_or(Err(GroupControlError::Stopped))
    }

    /// This node alone, with its directory id and controller listener, as a group's first
    /// voter set.
    fn standalone_voters(
        &self,
    ) -> Result<crate::records::control::VotersRecord, GroupControlError> {
        let config = &self.group0.config;
        if config.local.directory_id.is_none() {
            return Err(GroupControlError::NoDirectoryId);
        }
        if config.local_endpoints.is_empty() {
            return Err(GroupControlError::NoListener);
        }
        let me = crate::membership::Voter::new(config.local, config.local_endpoints.clone());
        let set = crate::membership::VoterSet::new(vec![me])
            .map_err(|_| GroupControlError::NoListener)?;
        Ok(crate::membership::history::voters_record(&set))
    }

    fn check_voters(&self, voters: &[i32]) -> Result<(), GroupControlError> {
        let known = self.group0.static_voters.voters();
        if known.is_empty() {
            return Err(GroupControlError::NoStaticQuorum);
        }
        let mut seen = HashSet::new();
        for id in voters {
            if !seen.insert(*id) {
                return Err(GroupControlError::DuplicateVoter(*id));
            }
            if !known.iter().any(|v| v.key.id == *id) {
                return Err(GroupControlError::UnknownVoter(*id));
            }
        }
        if !seen.contains(&self.node_id) {
            return Err(GroupControlError::NotAVoter(self.node_id));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_is_created_only_with_descriptors_to_spare() {
        // Three voters need about 9 while they elect, and 64 stay free for the rest.
        assert!(open_files_fit(1_000, 3, 1_073).is_ok());
        let e = open_files_fit(1_001, 3, 1_073).unwrap_err();
        assert!(matches!(
            e,
            GroupControlError::OpenFiles {
                open: 1_001,
                needed: 9,
                limit: 1_073
            }
        ));
        assert!(e.to_string().contains("ulimit -n"), "{e}");
    }
}
