//! `tuning/*.toml` → `Tuning`: which CPU runs which roles (see tuning/README.md), plus the few
//! executor knobs that matter on small machines. Without a file, `Tuning::spread` places roles
//! on the online cores by a fixed rule.

use std::collections::BTreeSet;
use std::fmt;

use serde::Deserialize;

use crate::constants as c;

/// What a shard does. A role may run on several shards, except `raft`, which owns the
/// partition's quorum state and log and therefore runs on exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Accepts on the controller listeners (one bound socket, no SO_REUSEPORT) and parses
    /// requests.
    Acceptor,
    /// Owns the Raft state machine and the log's write path.
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
            if role == Role::Raft && count > 1 {
                return Err(TuningError(
                    "exactly one shard may have the raft role".into(),
                ));
            }
        }
        if self.io_memory_kib < 512 {
            return Err(TuningError(
                "io_memory_kib must be at least 512 (glommio's minimum)".into(),
            ));
        }
        Ok(())
    }

    /// Index of the shard that owns the Raft partition.
    pub fn raft_shard(&self) -> usize {
        self.shards
            .iter()
            .position(|s| s.roles.contains(&Role::Raft))
            .expect("validated")
    }
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
        assert_eq!(two.raft_shard(), 0);
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
}
