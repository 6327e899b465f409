//! Deterministic simulation of ringraft's Raft core (issue: Raft core, item 4).
//!
//! Every run is a seed. The seed picks the network's drop/duplicate rates and delays, the disk
//! delay, and a schedule of faults: crashes and restarts (unflushed data lost), symmetric and
//! one-way partitions, clock jumps, graceful shutdowns. Invariants are checked after every
//! event (`invariants.rs`). After the faults the cluster heals and must elect a leader and
//! commit within `LIVENESS_BOUND_MS`.
//!
//! A failing seed prints itself and the command that replays it:
//! `RINGRAFT_SIM_SEED=<seed> RINGRAFT_SIM_SIZE=<n> cargo test --test sim replay -- --nocapture`.
//! `cargo test` runs 500 seeds per cluster size (3 and 5); `RINGRAFT_SIM_SEEDS=N` changes that
//! and `cargo test --release --test sim -- --ignored` runs 10,000 per size.

mod cluster;
mod invariants;
mod scenarios;

use cluster::{Cluster, Fault, NetConfig};
use ringraft::raft::types::Prng;
use ringraft::raft::Mutations;

/// After the last fault heals, a leader must commit something new within this much simulated
/// time: election timeout 1–2 s, fetch timeout 2 s, plus retries under 5% loss.
pub const LIVENESS_BOUND_MS: u64 = 20_000;
const FAULT_WINDOW_MS: u64 = 8_000;

pub struct RunStats {
    pub events: u64,
    pub committed_batches: usize,
    pub snapshot_downloads: u64,
    pub truncations: u64,
}

pub fn random_net(rng: &mut Prng) -> NetConfig {
    NetConfig {
        drop_per_mille: rng.below(60),
        duplicate_per_mille: rng.below(40),
        delay_min_ms: 1,
        delay_max_ms: 2 + rng.below(25),
        disk_delay_ms: 1 + rng.below(10),
    }
}

/// One seeded run on a `size`-voter cluster; `mutations` break every node's core on purpose.
pub fn random_run(seed: u64, size: usize, mutations: Mutations) -> Result<RunStats, String> {
    let mut rng = Prng::new(seed);
    let net = random_net(&mut rng);
    let mut c = Cluster::new(seed, size, net);
    // Half the seeds take snapshots and drop log prefixes, so lagging or wiped replicas must
    // catch up through FetchSnapshot.
    if rng.below(2) == 0 {
        c.snapshot_interval_ms = 300 + rng.below(1_500);
    }
    for node in &mut c.nodes {
        node.mutations = mutations;
    }
    c.start_all()?;
    let n = size as u64;
    let faults = rng.below(14);
    for _ in 0..faults {
        let at = 300 + rng.below(FAULT_WINDOW_MS);
        let node = rng.below(n) as i32;
        let lasting = 100 + rng.below(3_000);
        match rng.below(7) {
            0 | 1 => {
                schedule_fault(&mut c, at, Fault::Crash(node));
                schedule_fault(&mut c, at + lasting, Fault::Restart(node));
            }
            2 => {
                schedule_fault(&mut c, at, Fault::Isolate(node));
                schedule_fault(&mut c, at + lasting, Fault::HealAll);
            }
            3 => {
                let other = ((node as u64 + 1 + rng.below(n - 1)) % n) as i32;
                schedule_fault(&mut c, at, Fault::Block(node, other));
                schedule_fault(&mut c, at + lasting, Fault::HealAll);
            }
            4 => schedule_fault(&mut c, at, Fault::ClockJump(node, 50 + rng.below(4_000))),
            5 => {
                schedule_fault(&mut c, at, Fault::Shutdown(node));
                schedule_fault(&mut c, at + 300, Fault::Crash(node));
                schedule_fault(&mut c, at + 300 + lasting, Fault::Restart(node));
            }
            _ => {
                // A majority partition: the first half cut from the rest, both ways.
                for a in 0..size as i32 / 2 {
                    for b in size as i32 / 2..size as i32 {
                        schedule_fault(&mut c, at, Fault::Block(a, b));
                        schedule_fault(&mut c, at, Fault::Block(b, a));
                    }
                }
                schedule_fault(&mut c, at + lasting, Fault::HealAll);
            }
        }
    }
    let end = 300 + FAULT_WINDOW_MS + 3_200;
    c.run_until(end)?;
    heal(&mut c)?;
    check_liveness(&mut c)?;
    Ok(RunStats {
        events: c.events_run,
        committed_batches: c.checker.committed_batches,
        snapshot_downloads: c.snapshot_downloads,
        truncations: c.truncations,
    })
}

fn schedule_fault(c: &mut Cluster, at: u64, fault: Fault) {
    c.schedule(at, cluster::Event::Fault(fault));
}

pub fn heal(c: &mut Cluster) -> Result<(), String> {
    c.fault(Fault::HealAll)?;
    for id in 0..c.nodes.len() as i32 {
        c.fault(Fault::Restart(id))?;
    }
    Ok(())
}

/// Liveness: a leader commits past every node's log end at heal time within the bound.
pub fn check_liveness(c: &mut Cluster) -> Result<(), String> {
    let target = c.nodes.iter().map(|n| n.disk.log.end()).max().unwrap_or(0);
    let healed_at = c.now;
    let done = c.run_while(LIVENESS_BOUND_MS, |c| {
        c.leader()
            .and_then(|(id, _)| c.nodes[id as usize].raft.as_ref()?.high_watermark())
            .is_none_or(|hwm| hwm <= target)
    })?;
    if !done {
        return Err(format!(
            "Liveness: no leader committed past {target} within {LIVENESS_BOUND_MS} ms of healing at {healed_at} ms (leader now {:?})",
            c.leader()
        ));
    }
    Ok(())
}

fn replay_command(seed: u64, size: usize) -> String {
    format!("RINGRAFT_SIM_SEED={seed} RINGRAFT_SIM_SIZE={size} cargo test --test sim replay -- --nocapture")
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} must be a number, got {v}"))
        })
        .unwrap_or(default)
}

/// Runs `count` seeds from `base`; panics with the first failure and its replay command.
fn run_seeds(size: usize, count: u64) {
    let base = env_u64("RINGRAFT_SIM_BASE", 0);
    let (mut events, mut committed, mut downloads, mut truncations) = (0u64, 0usize, 0, 0);
    for seed in base..base + count {
        match random_run(seed, size, Mutations::default()) {
            Ok(stats) => {
                events += stats.events;
                committed += stats.committed_batches;
                downloads += stats.snapshot_downloads;
                truncations += stats.truncations;
            }
            Err(why) => panic!(
                "seed {seed}, {size} nodes: {why}\nreplay: {}",
                replay_command(seed, size)
            ),
        }
    }
    println!(
        "{count} seeds × {size} nodes: 0 violations, {events} events, {committed} committed \
         batches, {truncations} divergence truncations, {downloads} snapshot downloads"
    );
    assert!(
        committed as u64 >= count,
        "the runs committed almost nothing"
    );
    // The faults must reach the paths they exist for.
    assert!(truncations > 0, "no run truncated a divergent suffix");
    assert!(downloads > 0, "no run caught up through FetchSnapshot");
}

#[test]
fn three_voters_many_seeds() {
    run_seeds(3, env_u64("RINGRAFT_SIM_SEEDS", 500));
}

#[test]
fn five_voters_many_seeds() {
    run_seeds(5, env_u64("RINGRAFT_SIM_SEEDS", 500));
}

#[test]
#[ignore = "long: 10,000 seeds per cluster size; run with --release"]
fn ten_thousand_seeds_per_size() {
    run_seeds(3, 10_000);
    run_seeds(5, 10_000);
}

/// Replays one seed (`RINGRAFT_SIM_SEED`, `RINGRAFT_SIM_SIZE`; seed 0 on 3 nodes by default).
#[test]
fn replay() {
    let seed = env_u64("RINGRAFT_SIM_SEED", 0);
    let size = env_u64("RINGRAFT_SIM_SIZE", 3) as usize;
    if let Err(why) = random_run(seed, size, Mutations::default()) {
        panic!("seed {seed}, {size} nodes: {why}");
    }
}

/// Runs seeds with a broken core until a checker fires; returns the first violation.
fn first_violation(size: usize, mutations: Mutations, seeds: u64) -> Option<(u64, String)> {
    (0..seeds).find_map(|seed| random_run(seed, size, mutations).err().map(|e| (seed, e)))
}

#[test]
fn broken_core_vote_not_persisted_is_caught() {
    let broken = Mutations {
        vote_not_persisted: true,
        ..Mutations::default()
    };
    let found = scenarios::vote_not_persisted_scenario(broken);
    let why = found.expect_err("a vote that is not durable must be caught");
    assert!(
        why.contains("VoteGrantedOnce") || why.contains("SingleLeader"),
        "{why}"
    );
    scenarios::vote_not_persisted_scenario(Mutations::default()).unwrap();
}

#[test]
fn broken_core_leader_counted_twice_is_caught() {
    let broken = Mutations {
        leader_counted_twice: true,
        ..Mutations::default()
    };
    let (seed, why) = first_violation(3, broken, 200).expect("must be caught within 200 seeds");
    assert!(
        why.contains("MajorityReachedHighWatermark") || why.contains("ConsistentCommittedData"),
        "seed {seed}: {why}"
    );
}

#[test]
fn broken_core_high_watermark_from_minority_is_caught() {
    let broken = Mutations {
        high_watermark_from_minority: true,
        ..Mutations::default()
    };
    let (seed, why) = first_violation(5, broken, 200).expect("must be caught within 200 seeds");
    assert!(
        why.contains("MajorityReachedHighWatermark") || why.contains("ConsistentCommittedData"),
        "seed {seed}: {why}"
    );
}
