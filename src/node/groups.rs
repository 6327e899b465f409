//! The Raft groups a node hosts besides `__cluster_metadata-0` (`ringraft.groups`;
//! docs/groups.md): the table every shard routes by, and each group's start on its home shard.
//!
//! A group runs its own executor on its home shard, over its own log in
//! `<metadata.log.dir>/<topic>-<partition>` and with its own peer connections, except that its
//! Fetches travel in its shard's session for the leader node (`node::fetch_sessions`). Its
//! Fetches are answered by its executor; the fetch and snapshot roles serve group 0 only. A request that
//! lands on another shard reaches the group through its `RaftHandle`, a channel: the one hop.
//! A declared group's voter set is static, taken from `controller.quorum.voters`; a group
//! created at run time may have a dynamic one instead (KIP-853; `group_control::GroupVoters`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use std::time::Duration;

use tracing::{debug, info};
use uuid::Uuid;

use super::handle::RaftHandle;
use super::machine::StateMachine;
use super::metrics::GroupGauges;
use super::raft_shard::RaftSetup;
use super::{NodeError, RaftInputs};
use crate::config::{ServerConfig, Tuning};
use crate::membership::VoterSet;
use crate::protocol::group::{group_topic_id, GroupKey, WirePartition, WireTopic};
use crate::protocol::{METADATA_TOPIC_ID, METADATA_TOPIC_NAME};
use crate::raft::Endpoint;

/// A hosted group: its key, the door to its executor, its home shard and its preferred
/// leader (`config::groups`).
#[derive(Clone)]
pub struct Hosted {
    pub key: GroupKey,
    pub raft: RaftHandle,
    pub home: usize,
    /// The CPU the tuning file pins the home shard to.
    pub home_cpu: usize,
    /// The voter that should lead it when up (`config::groups::preferred_leader`); none for
    /// a dynamic group, whose voters change.
    pub preferred: Option<i32>,
    /// Its voters' controller endpoints (shared by the groups of one declaration).
    pub voters: Arc<Vec<(i32, Endpoint)>>,
    /// What `/metrics` shows of it, stored by its executor (`metrics::GroupGauges`).
    pub gauges: Arc<GroupGauges>,
    /// Declared in `ringraft.groups` (not created at run time: `node::group_control`).
    pub declared: bool,
}

impl Hosted {
    /// Where voter `id` of the group listens, for a NOT_LEADER answer's hint.
    pub fn endpoint(&self, id: i32) -> Option<Endpoint> {
        self.voters
            .iter()
            .find(|(v, _)| *v == id)
            .map(|(_, e)| e.clone())
    }
}

/// The groups this node hosts besides group 0, by topic id and partition.
#[derive(Default, Clone)]
pub struct GroupTable {
    groups: HashMap<(Uuid, i32), Hosted>,
}

impl GroupTable {
    /// The hosted group a request names, if any (never group 0).
    pub fn find(&self, at: &WirePartition) -> Option<&Hosted> {
        let id = match &at.topic {
            WireTopic::Id(id) => *id,
            WireTopic::Name(name) if name == METADATA_TOPIC_NAME => METADATA_TOPIC_ID,
            WireTopic::Name(name) => group_topic_id(name),
        };
        self.groups
            .get(&(id, at.partition))
            .filter(|hosted| hosted.key.is(at))
    }

    /// The hosted group named `topic` partition `partition`, if any.
    pub fn get(&self, topic: &str, partition: i32) -> Option<&Hosted> {
        self.find(&WirePartition {
            topic: WireTopic::Name(topic.to_string()),
            partition,
        })
    }

    pub fn len(&self) -> usize {
        self.groups.len()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Hosted> {
        self.groups.values()
    }

    /// The groups homed on `shard`.
    pub fn homed_on(&self, shard: usize) -> impl Iterator<Item = &Hosted> {
        self.groups.values().filter(move |h| h.home == shard)
    }

    /// Adds `hosted`, replacing any entry of the same group.
    pub fn insert(&mut self, hosted: Hosted) {
        let at = (hosted.key.topic_id(), hosted.key.partition());
        self.groups.insert(at, hosted);
    }

    pub fn remove(&mut self, key: &GroupKey) -> Option<Hosted> {
        self.groups.remove(&(key.topic_id(), key.partition()))
    }
}

/// The table every shard routes by, shared between them. It changes only when a group is
/// created or removed at run time (`node::group_control`): a change copies the table and
/// swaps it in, and a reader takes the current copy (`snapshot`) for as long as it needs it,
/// so a request being routed never sees a half-made change and never holds the lock.
#[derive(Default)]
pub struct Groups {
    table: std::sync::RwLock<Arc<GroupTable>>,
}

impl Groups {
    pub fn new(table: GroupTable) -> Groups {
        Groups {
            table: std::sync::RwLock::new(Arc::new(table)),
        }
    }

    /// The table as it is now.
    pub fn snapshot(&self) -> Arc<GroupTable> {
        // A writer cannot panic while holding the lock (`update` runs only `change`, which is
        // the table's own infallible code), so a poisoned lock still holds a whole table.
        match self.table.read() {
            Ok(t) => t.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Applies `change` to a copy of the table and swaps the copy in.
    pub fn update<R>(&self, change: impl FnOnce(&mut GroupTable) -> R) -> R {
        let mut guard = match self.table.write() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let mut copy = GroupTable::clone(&guard);
        let out = change(&mut copy);
        *guard = Arc::new(copy);
        out
    }
}

/// The groups, shared by every shard and the embedding API.
pub type SharedGroups = Arc<Groups>;

/// What a group's home shard takes at start: its setup, its executor's inputs and the
/// application's state machine for it, if any.
pub type GroupStarts = Arc<Mutex<HashMap<GroupKey, GroupStart>>>;

/// One group's start (`GroupStarts`).
pub struct GroupStart {
    pub setup: RaftSetup,
    pub inputs: RaftInputs,
    pub machine: Option<Box<dyn StateMachine>>,
    /// A dynamic group's first voter set, written as its bootstrap checkpoint while its log
    /// is empty (`Voting::Dynamic`).
    pub first_voters: Option<crate::records::control::VotersRecord>,
}

/// The application's state machines of hosted groups (the embedding API), by group.
pub type GroupMachines = HashMap<GroupKey, Box<dyn StateMachine>>;

/// The table of the groups `config` declares with this node among their voters, homed by
/// `tuning`, and what each home shard needs to start them. `group0` is group 0's setup: a
/// group's differs only in its voters and where it looks for its leader. A state machine
/// for a group this node does not host is refused.
pub fn plan(
    config: &ServerConfig,
    tuning: &Tuning,
    group0: &RaftSetup,
    mut machines: GroupMachines,
) -> Result<(GroupTable, GroupStarts), NodeError> {
    let mut table = GroupTable::default();
    let mut starts = HashMap::new();
    for decl in &config.groups {
        if !decl.voters.contains(&config.node_id) {
            continue;
        }
        for key in decl.groups() {
            let machine = machines.remove(&key);
            let voters = Voting::Static {
                voters: &decl.voters,
                preferred: decl.preferred_leader(key.partition()),
            };
            let (mut hosted, start) = prepare(group0, tuning, key, voters, machine)?;
            hosted.declared = true;
            starts.insert(hosted.key.clone(), start);
            table.insert(hosted);
        }
    }
    if let Some(key) = machines.keys().next() {
        return Err(NodeError::Refused(format!(
            "a state machine was given for {key}, which this node does not host: declare it in \
             ringraft.groups with node {} among its voters",
            config.node_id
        )));
    }
    Ok((table, Arc::new(Mutex::new(starts))))
}

/// How a group's voters are set (`prepare`).
#[derive(Debug, Clone, Copy)]
pub enum Voting<'a> {
    /// A static set: ids of `controller.quorum.voters`, and the one that should lead.
    Static { voters: &'a [i32], preferred: i32 },
    /// A dynamic set (KIP-853) kept in the group's log. `first` is the bootstrap checkpoint
    /// that makes this node its only voter, written if the group's log is still empty
    /// (`--standalone`); without it the node observes until a leader adds it, or, with
    /// `auto_join`, it adds itself once caught up.
    Dynamic {
        first: Option<&'a crate::records::control::VotersRecord>,
        auto_join: bool,
    },
}

/// One group's entry in the table and what its home shard takes to start it: group 0's setup
/// with the group's voters, its own election jitter, and its leader looked for among its
/// voters only (a static group) or among every node group 0 knows (a dynamic one).
pub fn prepare(
    group0: &RaftSetup,
    tuning: &Tuning,
    key: GroupKey,
    voting: Voting,
    machine: Option<Box<dyn StateMachine>>,
) -> Result<(Hosted, GroupStart), NodeError> {
    let all = group0.static_voters.voters();
    let (voters, preferred): (Vec<_>, _) = match voting {
        Voting::Static { voters, preferred } => (
            all.iter()
                .filter(|v| voters.contains(&v.key.id))
                .cloned()
                .collect(),
            Some(preferred),
        ),
        Voting::Dynamic { .. } => (all.to_vec(), None),
    };
    let endpoints: Arc<Vec<(i32, Endpoint)>> = Arc::new(
        voters
            .iter()
            .filter_map(|v| Some((v.key.id, v.endpoints.first()?.clone())))
            .collect(),
    );
    let mut setup = group0.clone();
    setup.timer_grid_ms = crate::constants::GROUP_TIMER_GRID_MS;
    let config = &mut setup.config;
    config.fetch_max_wait_ms =
        group_fetch_max_wait_ms(config.fetch_timeout_ms, config.request_timeout_ms);
    let mut first = None;
    match voting {
        Voting::Static { .. } => {
            setup.config.bootstrap = voters.iter().flat_map(|v| v.endpoints.clone()).collect();
            setup.config.static_voters = true;
            setup.config.auto_join = false;
            setup.static_voters = VoterSet::new(voters).map_err(NodeError::Voters)?;
        }
        Voting::Dynamic {
            first: record,
            auto_join,
        } => {
            // The leader is looked for where group 0 looks for its own (its bootstrap
            // servers); the voters are what the group's log says.
            setup.config.static_voters = false;
            setup.config.auto_join = auto_join;
            setup.static_voters = VoterSet::new(Vec::new()).map_err(NodeError::Voters)?;
            first = record.cloned();
        }
    }
    // Each group's election jitter is its own.
    let (high, low) = key.topic_id().as_u64_pair();
    setup.config.seed ^= high ^ low.rotate_left(17) ^ key.partition() as u64;
    let (raft, inputs) = RaftHandle::channel();
    let home = tuning.home_shard(&key);
    let hosted = Hosted {
        key,
        raft,
        home,
        home_cpu: tuning.shards[home].cpu,
        preferred,
        voters: endpoints,
        gauges: Arc::default(),
        declared: false,
    };
    let start = GroupStart {
        setup,
        inputs,
        machine,
        first_voters: first,
    };
    Ok((hosted, start))
}

/// How often a shard walks its groups (leadership counts, preferred leaders).
pub const GROUPS_PASS: Duration = Duration::from_secs(10);

/// On each raft shard with groups, every `GROUPS_PASS`: counts the groups homed here and
/// those this node leads (`ringraft_shard_groups*`), samples the shard's campaign bound
/// (`ringraft_shard_group_campaigns*`), and hands each group it leads that
/// prefers another voter, which has everything committed, to that voter
/// (`RaftHandle::transfer_leadership`). One group at a time, so a shard with thousands of
/// groups sends at most one transfer at once; nothing when settled but the pass itself.
pub async fn groups_pass(
    groups: SharedGroups,
    (shard, campaigns): (usize, crate::raft::campaigns::CampaignGate),
    local_id: i32,
    metrics: super::metrics::SharedMetrics,
) {
    let labels = super::metrics::shard_labels(shard);
    let mut refused = 0;
    loop {
        let now_refused = campaigns.refused();
        metrics
            .shard_group_campaigns_refused
            .get_or_create(&labels)
            .inc_by(now_refused - refused);
        refused = now_refused;
        metrics
            .shard_group_campaigns
            .get_or_create(&labels)
            .set(campaigns.active() as i64);
        let (mut hosted_here, mut leading) = (0, 0);
        let table = groups.snapshot();
        for hosted in table.homed_on(shard) {
            hosted_here += 1;
            hosted.gauges.pass();
            // A group removed meanwhile (`group_control`) no longer answers.
            let Ok(status) = hosted.raft.describe_quorum().await else {
                continue;
            };
            let Some(replicas) = status.replicas.filter(|r| r.leader_id == local_id) else {
                continue;
            };
            leading += 1;
            let Some(preferred) = hosted.preferred.filter(|p| *p != local_id) else {
                continue;
            };
            let caught_up = replicas.voters.iter().any(|v| {
                v.key.id == preferred
                    && replicas.high_watermark >= 0
                    && v.log_end_offset >= replicas.high_watermark
            });
            if caught_up {
                match hosted.raft.transfer_leadership(preferred).await {
                    Ok(_) => info!(group = %hosted.key, to = preferred,
                        "leadership handed to the preferred leader"),
                    Err(e) => debug!(group = %hosted.key, to = preferred, error = %e,
                        "preferred leader not taken"),
                }
            }
        }
        metrics.shard_groups.get_or_create(&labels).set(hosted_here);
        metrics
            .shard_groups_leading
            .get_or_create(&labels)
            .set(leading);
        glommio::timer::sleep(GROUPS_PASS).await;
    }
}

/// The MaxWaitMs of a group's Fetches: two fifths of the fetch timeout (800 ms by default,
/// where group 0 asks Kafka's 500 ms). Every idle group's follower costs one long-poll round
/// trip per wait. It stays below half the fetch timeout, the leader's BeginQuorumEpoch period
/// (a voter that has not fetched for that long is sent one), with a fifth to spare for the
/// round trip and a busy shard, and so well within the fetch timeout; and at most half the
/// request timeout, so that a held Fetch is never given up on as unanswered.
pub fn group_fetch_max_wait_ms(fetch_timeout_ms: u64, request_timeout_ms: u64) -> i32 {
    let cap = crate::raft::FETCH_PARK_MAX_MS as u64;
    let wait = (fetch_timeout_ms.saturating_mul(2) / 5).min(request_timeout_ms / 2);
    // Within 1..=cap, and cap fits an i32.
    wait.clamp(1, cap) as i32
}

/// A hosted group and its executor's input, for tests that play the executor.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    pub fn hosted(
        key: &GroupKey,
    ) -> (
        Hosted,
        futures_channel::mpsc::UnboundedReceiver<super::super::handle::ExecutorInput>,
    ) {
        let (raft, inputs) = RaftHandle::channel();
        let hosted = Hosted {
            key: key.clone(),
            raft,
            home: 0,
            home_cpu: 0,
            preferred: None,
            voters: Arc::default(),
            gauges: Arc::default(),
            declared: true,
        };
        (hosted, inputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_groups_long_poll_stays_under_the_begin_quorum_epoch_period() {
        assert_eq!(
            group_fetch_max_wait_ms(2_000, 2_000),
            800,
            "Kafka's default fetch and request timeouts"
        );
        assert_eq!(group_fetch_max_wait_ms(2_000, 1_000), 500);
        for timeout in [1u64, 10, 600, 2_000, 9_999, 1 << 40] {
            for request in [1u64, 30, 2_000, 30_000, 1 << 40] {
                let wait = group_fetch_max_wait_ms(timeout, request);
                assert!((1..=crate::raft::FETCH_PARK_MAX_MS).contains(&wait));
                let bound = (timeout / 2).min(request / 2).max(1);
                assert!(wait as u64 <= bound, "{timeout} {request}: {wait}");
            }
        }
    }

    #[test]
    fn the_table_finds_groups_by_name_or_id_and_never_group_0() {
        let mut table = GroupTable::default();
        let key = GroupKey::new("orders", 1).unwrap();
        let (raft, _inputs) = RaftHandle::channel();
        table.insert(Hosted {
            key: key.clone(),
            raft,
            home: 1,
            home_cpu: 1,
            preferred: Some(1),
            voters: Arc::default(),
            gauges: Arc::default(),
            declared: true,
        });
        assert_eq!(table.get("orders", 1).map(|h| h.home), Some(1));
        assert!(table.get("orders", 0).is_none());
        assert!(table.get("orders2", 1).is_none());
        let by_id = WirePartition {
            topic: WireTopic::Id(key.topic_id()),
            partition: 1,
        };
        assert!(table.find(&by_id).is_some());
        assert!(table.get(METADATA_TOPIC_NAME, 0).is_none());
        assert_eq!(table.homed_on(1).count(), 1);
        assert_eq!(table.homed_on(0).count(), 0);
    }
}
