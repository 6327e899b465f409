//! `tuning/*.toml` → `Tuning`: which CPU runs which roles (see tuning/README.md), plus the few
//! executor knobs that matter on small machines. Without a file, `Tuning::spread` places roles
//! on the online cores by a fixed rule.

use std::collections::BTreeSet;
use std::fmt;

use serde::Deserialize;

use crate::constants as c;
use crate::protocol::group::GroupKey;

/// What a shard does. Every role may run on several shards. A Raft group (its quorum state,
/// core and log) lives on one shard with the `raft` role, its home (`home_of`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Accepts on the controller listeners (one bound socket, no SO_REUSEPORT) and parses
    /// requests.
    Acceptor,
    /// Home of Raft groups: their state machines and their logs' write paths.
    Raft,
    /// Serves Fetch requests from sealed segments and the batch cache.
    Fetch,
    /// Streams snapshot files (FetchSnapshot).
    Snapshot,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Role::Acceptor => "acceptor",
            Role::Raft => "raft",
            Role::Fetch => "fetch",
            Role::Snapshot => "snapshot",
        };
        f.write_str(name)
    }
}

pub const ALL_ROLES: [Role; 4] = [Role::Acceptor, Role::Raft, Role::Fetch, Role::Snapshot];

/// One pinned executor.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardPlan {
    pub cpu: usize,
    pub roles: BTreeSet<Role>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tuning {
    /// Microseconds an idle executor spins before sleeping. Keep 0 on machines with few cores:
    /// a spinning shard steals the CPU its neighbour needs (docs/design.md §4 measured 4× worse
    /// append latency on 2 vCPUs).
    #[serde(default)]
    pub spin_before_park_us: u64,
    /// Locked memory glommio reserves per executor for io_uring buffers, in KiB.
    #[serde(default = "default_io_memory_kib")]
    pub io_memory_kib: usize,
    #[serde(rename = "shard")]
    pub shards: Vec<ShardPlan>,
}

fn default_io_memory_kib() -> usize {
    c::IO_MEMORY_BYTES_DEFAULT / 1024
}

/// A tuning file that cannot be used, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TuningError(pub String);

impl fmt::Display for TuningError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TuningError {}

impl Tuning {
    /// Parses and validates a tuning file's text against the CPUs this process may run on.
    pub fn parse(text: &str, online_cpus: &[usize]) -> Result<Tuning, TuningError> {
        let tuning: Tuning = toml::from_str(text).map_err(|e| TuningError(e.to_string()))?;
        tuning.validate(online_cpus)?;
        Ok(tuning)
    }

    /// The default placement over `online_cpus` (sorted, non-empty):
    /// every core is an acceptor; the first core runs `raft`; `fetch` runs on every core but
    /// the first (on the only core when there is one); `snapshot` runs on the last core.
    pub fn spread(online_cpus: &[usize]) -> Tuning {
        assert!(!online_cpus.is_empty(), "no online CPU");
        let last = online_cpus.len() - 1;
        let shards = online_cpus
            .iter()
            .enumerate()
            .map(|(i, &cpu)| {
                let mut roles = BTreeSet::from([Role::Acceptor]);
                if i == 0 {
                    roles.insert(Role::Raft);
                }
                if i > 0 || last == 0 {
                    roles.insert(Role::Fetch);
                }
                if i == last {
                    roles.insert(Role::Snapshot);
                }
                ShardPlan { cpu, roles }
            })
            .collect();
        let tuning = Tuning {
            spin_before_park_us: 0,
            io_memory_kib: default_io_memory_kib(),
            shards,
        };
        debug_assert!(tuning.validate(online_cpus).is_ok());
        tuning
    }

    fn validate(&self, online_cpus: &[usize]) -> Result<(), TuningError> {
        if self.shards.is_empty() || self.shards.len() > c::SHARDS_MAX {
            return Err(TuningError(format!(
                "1 to {} [[shard]] tables are needed",
                c::SHARDS_MAX
            )));
        }
        let mut cpus = BTreeSet::new();
        for shard in &self.shards {
            if !online_cpus.contains(&shard.cpu) {
                return Err(TuningError(format!(
                    "cpu {} is not available to this process (available: {online_cpus:?})",
                    shard.cpu
                )));
            }
            if !cpus.insert(shard.cpu) {
                return Err(TuningError(format!(
                    "cpu {} appears in two shards",
                    shard.cpu
                )));
            }
            if shard.roles.is_empty() {
                return Err(TuningError(format!(
                    "the shard on cpu {} has no roles",
                    shard.cpu
                )));
            }
        }
        for role in ALL_ROLES {
            let count = self
                .shards
                .iter()
                .filter(|s| s.roles.contains(&role))
                .count();
            if count == 0 {
                return Err(TuningError(format!("no shard has the {role} role")));
            }
        }
        if self.io_memory_kib < 512 {
            return Err(TuningError(
                "io_memory_kib must be at least 512 (glommio's minimum)".into(),
            ));
        }
        Ok(())
    }

    /// The indexes of the shards with the `raft` role, in the file's order (never empty once
    /// validated).
    pub fn raft_shards(&self) -> Vec<usize> {
        (0..self.shards.len())
            .filter(|i| self.shards[*i].roles.contains(&Role::Raft))
            .collect()
    }

    /// The index of the shard that is `group`'s home (`home_of` over the raft shards).
    pub fn home_shard(&self, group: &GroupKey) -> usize {
        let raft = self.raft_shards();
        raft[home_of(group, raft.len())]
    }
}

/// Which of `shards` raft shards is `group`'s home: a stable function of the group's topic id
/// and partition, the same on every node and in every release (a group that moved home would
/// move its commits to another core). Jump consistent hashing (Lamping and Veach, 2014): groups
/// spread evenly, and growing from n to n + 1 raft shards moves only about 1/(n + 1) of them,
/// all to the new shard.
pub fn home_of(group: &GroupKey, shards: usize) -> usize {
    let (high, low) = group.topic_id().as_u64_pair();
    // The key mixes the whole id with the partition (SplitMix64's finaliser, so that
    // neighbouring partitions of one topic land independently).
    let mut key = mix(high ^ mix(low ^ mix(group.partition() as u32 as u64)));
    let (mut bucket, mut next) = (-1i64, 0i64);
    while next < shards as i64 {
        bucket = next;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        next = ((bucket + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    bucket.max(0) as usize
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub use crate::sys::online_cpus;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_tuning_files_are_valid() {
        for (name, text) in [
            ("1-core", include_str!("../../tuning/1-core.toml")),
            ("2-cores", include_str!("../../tuning/2-cores.toml")),
            (
                "2-cores-all-raft",
                include_str!("../../tuning/2-cores-all-raft.toml"),
            ),
        ] {
            let tuning = Tuning::parse(text, &[0, 1]).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(tuning.spin_before_park_us, 0, "{name}");
        }
    }

    #[test]
    fn spread_rule() {
        let one = Tuning::spread(&[3]);
        assert_eq!(one.shards.len(), 1);
        assert_eq!(one.shards[0].roles.len(), 4);
        let two = Tuning::spread(&[0, 1]);
        assert_eq!(two.raft_shards(), [0]);
        assert_eq!(two.home_shard(GroupKey::metadata()), 0);
        assert!(!two.shards[0].roles.contains(&Role::Fetch));
        assert!(two.shards[1].roles.contains(&Role::Snapshot));
        assert!(two.shards.iter().all(|s| s.roles.contains(&Role::Acceptor)));
    }

    #[test]
    fn bad_files_say_why() {
        let no_raft = "[[shard]]\ncpu = 0\nroles = [\"acceptor\", \"fetch\", \"snapshot\"]\n";
        assert!(Tuning::parse(no_raft, &[0]).unwrap_err().0.contains("raft"));
        let offline =
            "[[shard]]\ncpu = 7\nroles = [\"acceptor\", \"raft\", \"fetch\", \"snapshot\"]\n";
        assert!(Tuning::parse(offline, &[0, 1])
            .unwrap_err()
            .0
            .contains("cpu 7"));
        let typo = "[[shard]]\ncpu = 0\nroles = [\"acceptr\"]\n";
        assert!(Tuning::parse(typo, &[0]).is_err());
    }

    fn groups(topics: &[&str], partitions: i32) -> Vec<GroupKey> {
        topics
            .iter()
            .flat_map(|t| (0..partitions).map(move |p| GroupKey::new(t, p).unwrap()))
            .collect()
    }

    #[test]
    fn homes_are_pinned() {
        // These must never change: a release that moved a group's home would move its commits
        // to another core on every node that upgraded.
        let g = |t: &str, p| GroupKey::new(t, p).unwrap();
        let found: Vec<usize> = [
            (GroupKey::metadata().clone(), 2),
            (g("orders", 0), 2),
            (g("orders", 1), 4),
            (g("orders", 7), 4),
            (g("kv", 63), 16),
        ]
        .iter()
        .map(|(group, n)| home_of(group, *n))
        .collect();
        assert_eq!(found, PINNED_HOMES);
        assert_eq!(home_of(&g("orders", 1), 1), 0);
    }

    const PINNED_HOMES: [usize; 5] = [0, 0, 2, 2, 9];

    /// Four standard deviations of a count of `n` draws that each hit with probability `p`: a
    /// uniform hash stays within it; a skewed one does not.
    fn four_sigmas(n: usize, p: f64) -> f64 {
        4.0 * (n as f64 * p * (1.0 - p)).sqrt()
    }

    #[test]
    fn homes_spread_evenly_and_move_little_when_shards_are_added() {
        let all = groups(&["orders", "payments", "kv"], 400);
        for n in [2usize, 3, 8] {
            let mut per = vec![0usize; n];
            for g in &all {
                per[home_of(g, n)] += 1;
            }
            let mean = all.len() / n;
            for (shard, count) in per.iter().enumerate() {
                assert!(
                    (count.abs_diff(mean) as f64) < four_sigmas(all.len(), 1.0 / n as f64),
                    "{n} shards: shard {shard} has {count} of {} groups",
                    all.len()
                );
            }
        }
        for n in [1usize, 2, 5] {
            let moved: Vec<&GroupKey> = all
                .iter()
                .filter(|g| home_of(g, n) != home_of(g, n + 1))
                .collect();
            assert!(
                moved.iter().all(|g| home_of(g, n + 1) == n),
                "a group moved between old shards"
            );
            let p = 1.0 / (n + 1) as f64;
            let expected = (all.len() as f64 * p) as usize;
            assert!(
                (moved.len().abs_diff(expected) as f64) < four_sigmas(all.len(), p),
                "{n} → {} shards moved {} of {} groups",
                n + 1,
                moved.len(),
                all.len()
            );
        }
    }

    #[test]
    fn raft_on_every_core_homes_each_group_on_one_of_them() {
        let text = include_str!("../../tuning/2-cores-all-raft.toml");
        let tuning = Tuning::parse(text, &[0, 1]).unwrap();
        assert_eq!(tuning.raft_shards(), [0, 1]);
        let homes: BTreeSet<usize> = groups(&["t"], 16)
            .iter()
            .map(|g| tuning.home_shard(g))
            .collect();
        assert_eq!(homes, BTreeSet::from([0, 1]));
    }
}
