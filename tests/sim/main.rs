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
//!
//! Dynamic runs (KIP-853, issue item 8) start 1–5 voters from a bootstrap checkpoint plus 1–2
//! observers, and add the operator (`operator.rs`): AddRaftVoter, RemoveRaftVoter (the leader
//! too), UpdateRaftVoter after a listener moves, directories wiped and re-added, and the same
//! faults. A quarter of them run with auto-join. After healing, the voter sets and endpoints
//! must converge as well. Replay one with `RINGRAFT_SIM_DYNAMIC=1` added to the command.
//!
//! Multi-group runs (issue 25, `groups.rs`) host 4 or 16 groups on 3 nodes, their Fetches
//! coalesced in Fetch sessions, the same faults hitting every group of a node; every group's
//! invariants hold, and no group's log holds another group's records. Replay one with
//! `RINGRAFT_SIM_GROUPS=<count>` added to the command.

mod cluster;
mod fetch;
mod groups;
mod invariants;
mod operator;
mod runtime;
mod scenarios;

use cluster::{Cluster, Event, Fault, NetConfig};
use invariants::ChangeCounts;
use operator::Acks;
use ringraft::raft::types::Prng;
use ringraft::raft::Mutations;

/// After the last fault heals, a leader must commit something new within this much simulated
/// time: election timeout 1–2 s, fetch timeout 2 s, plus retries under 5% loss.
pub const LIVENESS_BOUND_MS: u64 = 20_000;
const FAULT_WINDOW_MS: u64 = 8_000;

pub struct RunStats {
    pub events: u64,
    /// Fetches fetch shards answered, and answers rebuilt after the log was rewritten.
    pub fetch_answers: u64,
    pub fetch_retries: u64,
    pub committed_batches: usize,
    pub snapshot_downloads: u64,
    /// Downloads abandoned because a chunk arrived corrupt (`corrupt_per_mille`).
    pub abandoned_downloads: u64,
    /// Snapshots a witness adopted from the leader (`raft::adopt`).
    pub adopted_snapshots: u64,
    pub truncations: u64,
    /// The run had a witness (`with_witness`), and how often it led and handed over.
    pub witness: bool,
    pub witness_handovers: u64,
    /// Checker::split_votes.
    pub split_votes: (usize, usize),
}

pub fn random_net(rng: &mut Prng) -> NetConfig {
    NetConfig {
        drop_per_mille: rng.below(60),
        duplicate_per_mille: rng.below(40),
        delay_min_ms: 1,
        delay_max_ms: 2 + rng.below(25),
        disk_delay_ms: 1 + rng.below(10),
        corrupt_per_mille: if rng.below(4) == 0 { 100 } else { 0 },
    }
}

/// Mixed into a seed for its fetch-shard lag, so that the other draws stay as they were.
const FETCH_SALT: u64 = 0xfe7c_4a11;

/// In three quarters of the seeds every node answers Fetch on a fetch shard, as the node does,
/// with publications arriving up to 0–40 ms (per seed) after they were made, or, in a quarter
/// of those, up to 300 ms: far slower than a node's fetch shard, to widen the windows in which
/// a view is stale. In the other quarter the core answers Fetch.
fn with_fetch_shards(c: &mut Cluster, seed: u64) {
    let mut rng = Prng::new(seed ^ FETCH_SALT);
    // A quarter of the runs serve Fetch in the core, as a node does when the connection's
    // shard has no fetch role: the executor's reply path answers them.
    if rng.below(4) == 0 {
        c.fetch_lag_ms = None;
        return;
    }
    let max = if rng.below(4) == 0 { 300 } else { 40 };
    c.fetch_lag_ms = Some(rng.below(max + 1));
}

/// Mixed into a seed for its append linger, so that the other draws stay as they were.
const LINGER_SALT: u64 = 0x1146_e725;

/// A quarter of the seeds run with `controller.quorum.append.linger.ms` between 1 and 25
/// (Kafka's default): the leader holds appends back and hands them to the core together.
fn with_linger(c: &mut Cluster, seed: u64) {
    let mut rng = Prng::new(seed ^ LINGER_SALT);
    if rng.below(4) == 0 {
        c.append_linger_ms = 1 + rng.below(25);
    }
}

/// Mixed into a seed to pick the third of the runs with a witness, and which node it is.
const WITNESS_SALT: u64 = 0x3717_4e55;

/// A third of the seeds run one node as a witness (`ringraft.leadership=witness`), so the
/// invariants are checked over witness campaigns and handovers too.
fn with_witness(c: &mut Cluster, seed: u64) {
    let mut rng = Prng::new(seed ^ WITNESS_SALT);
    if rng.below(3) == 0 {
        let node = rng.below(c.nodes.len() as u64) as i32;
        c.witnesses.insert(node);
    }
}

/// After healing, a witness never stays leader: a voter that is not a witness leads within
/// this much of liveness being shown (the witness hands over once a voter caught up; that
/// voter stands at once, and elections under 5 % loss may need a few rounds).
pub const WITNESS_HANDOVER_BOUND_MS: u64 = 15_000;

/// Witness liveness: with every node up and connected, a non-witness leads within the bound.
pub fn check_witness_hands_over(c: &mut Cluster) -> Result<(), String> {
    if c.witnesses.is_empty() {
        return Ok(());
    }
    let from = c.now;
    let done = c.run_while(WITNESS_HANDOVER_BOUND_MS, |c| {
        c.leader().is_none_or(|(id, _)| c.witnesses.contains(&id))
    })?;
    if !done {
        return Err(format!(
            "Witness liveness: no voter but the witness {:?} led within {WITNESS_HANDOVER_BOUND_MS} ms of {from} ms (leader now {:?}): {}",
            c.witnesses,
            c.leader(),
            describe(c)
        ));
    }
    Ok(())
}

/// One seeded run on a `size`-voter cluster; `mutations` break every node's core on purpose.
pub fn random_run(seed: u64, size: usize, mutations: Mutations) -> Result<RunStats, String> {
    let mut rng = Prng::new(seed);
    let net = random_net(&mut rng);
    let mut c = Cluster::new(seed, size, net);
    with_fetch_shards(&mut c, seed);
    with_linger(&mut c, seed);
    // Half the seeds take snapshots and drop log prefixes, so lagging or wiped replicas must
    // catch up through FetchSnapshot.
    if rng.below(2) == 0 {
        c.snapshot_interval_ms = 300 + rng.below(1_500);
    }
    for node in &mut c.nodes {
        node.mutations = mutations;
    }
    with_witness(&mut c, seed);
    c.start_all()?;
    schedule_random_faults(&mut c, &mut rng, size);
    let end = 300 + FAULT_WINDOW_MS + 3_200;
    c.run_until(end)?;
    heal(&mut c)?;
    check_liveness(&mut c)?;
    check_witness_hands_over(&mut c)?;
    Ok(RunStats {
        events: c.events_run,
        fetch_answers: c.fetch_shard_answers,
        fetch_retries: c.fetch_shard_retries,
        committed_batches: c.checker.committed_batches,
        snapshot_downloads: c.snapshot_downloads,
        abandoned_downloads: c.abandoned_downloads,
        adopted_snapshots: c.adopted_snapshots,
        truncations: c.truncations,
        witness: !c.witnesses.is_empty(),
        witness_handovers: c
            .witnesses
            .iter()
            .filter_map(|w| c.nodes[*w as usize].raft().map(|r| r.witness_counts().1))
            .sum(),
        split_votes: c.checker.split_votes(),
    })
}

/// What a multi-group run did.
pub struct GroupRunStats {
    pub events: u64,
    pub committed_batches: usize,
    pub truncations: u64,
    pub snapshot_downloads: u64,
    pub sessions: groups::GroupStats,
}

/// One seeded run of `count` groups on `size` nodes (`groups.rs`): the seed picks the network,
/// the disk delay, fetch shards, linger and snapshots as `random_run` does (the same for every
/// group), and one schedule of node faults that hits every group at once.
pub fn random_groups_run(
    seed: u64,
    size: usize,
    count: usize,
    misroute: bool,
) -> Result<GroupRunStats, String> {
    let mut rng = Prng::new(seed);
    let net_seed = rng.below(u64::MAX);
    let mut s = groups::Groups::new(seed, size, count, || random_net(&mut Prng::new(net_seed)));
    s.misroute = misroute;
    let snapshots = rng.below(2) == 0;
    let snapshot_interval = 300 + rng.below(1_500);
    for c in &mut s.groups {
        with_fetch_shards(c, seed);
        with_linger(c, seed);
        if snapshots {
            c.snapshot_interval_ms = snapshot_interval;
        }
    }
    s.start_all()?;
    for (at, fault) in random_faults(&mut rng, size) {
        s.schedule_fault(at, fault);
    }
    let end = 300 + FAULT_WINDOW_MS + 3_200;
    s.run_until(end)?;
    s.heal()?;
    s.check_liveness(LIVENESS_BOUND_MS)?;
    Ok(GroupRunStats {
        events: s.groups.iter().map(|c| c.events_run).sum(),
        committed_batches: s.groups.iter().map(|c| c.checker.committed_batches).sum(),
        truncations: s.groups.iter().map(|c| c.truncations).sum(),
        snapshot_downloads: s.groups.iter().map(|c| c.snapshot_downloads).sum(),
        sessions: s.stats.clone(),
    })
}

fn replay_groups_command(seed: u64, size: usize, count: usize) -> String {
    format!("RINGRAFT_SIM_GROUPS={count} {}", replay_command(seed, size))
}

/// Runs `count` multi-group seeds from `base`; panics with the first failure and its replay
/// command; prints what the runs did and checks that they reached the session paths.
fn run_group_seeds(size: usize, groups: usize, count: u64) {
    let base = env_u64("RINGRAFT_SIM_BASE", 0);
    let (mut events, mut committed, mut truncations, mut downloads) = (0u64, 0usize, 0u64, 0u64);
    let mut sessions = groups::GroupStats::default();
    for seed in base..base + count {
        match random_groups_run(seed, size, groups, false) {
            Ok(stats) => {
                events += stats.events;
                committed += stats.committed_batches;
                truncations += stats.truncations;
                downloads += stats.snapshot_downloads;
                sessions.add(&stats.sessions);
            }
            Err(why) => panic!(
                "seed {seed}, {size} nodes × {groups} groups: {why}\nreplay: {}",
                replay_groups_command(seed, size, groups)
            ),
        }
    }
    println!(
        "{count} seeds × {size} nodes × {groups} groups: 0 violations, {events} events, \
         {committed} committed batches, {truncations} divergence truncations, {downloads} \
         snapshot downloads; sessions: {} requests ({} carrying two or more groups), {} answers, \
         {} connections broken, {} requests held for busy groups' fetches ({} to the end of the \
         wait); {} records checked for their group",
        sessions.session_requests,
        sessions.coalesced_requests,
        sessions.session_answers,
        sessions.broken_connections,
        sessions.grace_holds,
        sessions.grace_expired,
        sessions.records_checked,
    );
    assert!(
        committed as u64 >= count,
        "the runs committed almost nothing"
    );
    assert!(
        sessions.coalesced_requests > 0,
        "no session request carried two groups"
    );
    assert!(
        sessions.broken_connections > 0,
        "no session connection broke"
    );
    assert!(
        sessions.grace_holds > sessions.grace_expired,
        "no session request waited for a busy group's fetch and got it"
    );
    assert!(truncations > 0, "no run truncated a divergent suffix");
}

/// What a dynamic run did beyond a static one.
pub struct DynamicStats {
    pub run: RunStats,
    /// Voter changes in the committed log.
    pub changes: ChangeCounts,
    /// The operator's requests the leader answered NONE, and its port changes and wipes.
    pub acks: Acks,
    pub stale_restarts: u64,
}

/// Mixed into a dynamic run's seed so it does not replay a static run's draws.
const DYNAMIC_SALT: u64 = 0xd1a3_0853;
/// After liveness, every node's voter set (keys and endpoints) matches the leader's within
/// this much: two update-voter periods (3 × fetch timeout each) and an election.
pub const CONVERGENCE_BOUND_MS: u64 = 20_000;

/// One seeded dynamic run (KIP-853): initial voters from a bootstrap checkpoint, observers,
/// the operator's changes and the random faults.
pub fn random_dynamic_run(seed: u64, mutations: Mutations) -> Result<DynamicStats, String> {
    let hasty = Prng::new(seed ^ HASTY_SALT).below(2) == 0;
    dynamic_run(seed, mutations, true, hasty)
}

/// Mixed into a seed to pick the half of the dynamic runs with a hasty operator.
const HASTY_SALT: u64 = 0x4a57_7e0f;

/// `random_dynamic_run`, with Fetch answered by fetch shards or by the core itself, and an
/// operator that does or does not also act the instant a leader is elected.
pub fn dynamic_run(
    seed: u64,
    mutations: Mutations,
    fetch_shards: bool,
    hasty_operator: bool,
) -> Result<DynamicStats, String> {
    let mut rng = Prng::new(seed ^ DYNAMIC_SALT);
    let net = random_net(&mut rng);
    let voters = [1, 2, 3, 3, 4, 5][rng.below(6) as usize];
    let spares = 1 + rng.below(2) as usize;
    let mut c = Cluster::new_dynamic(seed, voters, spares, net);
    if fetch_shards {
        with_fetch_shards(&mut c, seed);
    }
    with_linger(&mut c, seed);
    c.hasty_operator = hasty_operator;
    c.auto_join = rng.below(4) == 0;
    if rng.below(2) == 0 {
        c.snapshot_interval_ms = 300 + rng.below(1_500);
    }
    for node in &mut c.nodes {
        node.mutations = mutations;
    }
    c.start_all()?;
    schedule_random_faults(&mut c, &mut rng, voters + spares);
    for _ in 0..4 + rng.below(10) {
        c.schedule(500 + rng.below(FAULT_WINDOW_MS), Event::Operator);
    }
    let end = 300 + FAULT_WINDOW_MS + 3_200;
    c.run_until(end)?;
    heal(&mut c)?;
    check_liveness(&mut c)?;
    check_convergence(&mut c)?;
    Ok(DynamicStats {
        run: RunStats {
            events: c.events_run,
            fetch_answers: c.fetch_shard_answers,
            fetch_retries: c.fetch_shard_retries,
            committed_batches: c.checker.committed_batches,
            snapshot_downloads: c.snapshot_downloads,
            abandoned_downloads: c.abandoned_downloads,
            adopted_snapshots: c.adopted_snapshots,
            truncations: c.truncations,
            witness: false,
            witness_handovers: 0,
            split_votes: c.checker.split_votes(),
        },
        changes: c.checker.committed_changes(&c.voters),
        acks: operator::acks(&c),
        stale_restarts: c.stale_restarts,
    })
}

/// Whether every running node has the leader's latest voter set, that set is committed, and
/// each voter's endpoint there is where its node listens now.
pub fn voter_sets_converged(c: &Cluster) -> bool {
    let Some((leader, _)) = c.leader() else {
        return false;
    };
    let raft = c.nodes[leader as usize].raft().expect("running");
    let set = raft.voters();
    let committed = raft
        .high_watermark()
        .is_some_and(|h| raft.membership().latest_offset().is_none_or(|o| o < h));
    let endpoints_current = set.voters().iter().all(|v| {
        let node = &c.nodes[v.key.id as usize];
        v.endpoints == vec![cluster::endpoint(v.key.id, node.port)]
    });
    committed
        && endpoints_current
        && c.running()
            .all(|n| n.raft().is_some_and(|r| r.voters() == set))
}

/// VoterSetsConverge: after healing, voter sets and endpoints agree everywhere in time, the
/// operator finishing what wipes started (`operator::tidy`).
pub fn check_convergence(c: &mut Cluster) -> Result<(), String> {
    let from = c.now;
    let deadline = from + CONVERGENCE_BOUND_MS;
    let mut converged = voter_sets_converged(c);
    while !converged && c.now < deadline {
        operator::tidy(c)?;
        c.run_while(500, |c| !voter_sets_converged(c))?;
        converged = voter_sets_converged(c);
    }
    if !converged {
        return Err(format!(
            "VoterSetsConverge: not converged {CONVERGENCE_BOUND_MS} ms after {from} ms: {}",
            describe(c)
        ));
    }
    Ok(())
}

/// Every running node: role, epoch, log end, high watermark, port and voter set (id@port).
pub fn describe(c: &Cluster) -> String {
    let nodes: Vec<String> = c
        .running()
        .map(|n| {
            let raft = n.raft().expect("running");
            let voters: Vec<String> = raft
                .voters()
                .voters()
                .iter()
                .map(|v| {
                    let port = v.endpoints.first().map_or(0, |e| e.port);
                    let current = if c.is_current(&v.key) { "" } else { "(stale)" };
                    format!("{}{current}@{port}", v.key.id)
                })
                .collect();
            let log = raft.log_view();
            format!(
                "node {} {} e{} start {} end {} last epoch {} snapshot {:?} hwm {:?} port {}: [{}]",
                n.id,
                raft.state_name(),
                raft.epoch(),
                raft.log_start_offset(),
                raft.log_end_offset(),
                log.last_fetched_epoch(),
                log.latest_snapshot().map(|s| (s.offset, s.epoch)),
                raft.high_watermark(),
                n.port,
                voters.join(" ")
            )
        })
        .collect();
    nodes.join("; ")
}

/// Up to 13 faults inside the fault window, each healed (restart, heal) after a while.
fn schedule_random_faults(c: &mut Cluster, rng: &mut Prng, size: usize) {
    for (at, fault) in random_faults(rng, size) {
        schedule_fault(c, at, fault);
    }
}

/// `schedule_random_faults`' faults, with when each comes.
fn random_faults(rng: &mut Prng, size: usize) -> Vec<(u64, Fault)> {
    let mut out = Vec::new();
    let n = size as u64;
    let faults = rng.below(14);
    for _ in 0..faults {
        let at = 300 + rng.below(FAULT_WINDOW_MS);
        let node = rng.below(n) as i32;
        let lasting = 100 + rng.below(3_000);
        match rng.below(7) {
            0 | 1 => {
                out.push((at, Fault::Crash(node)));
                out.push((at + lasting, Fault::Restart(node)));
            }
            2 => {
                out.push((at, Fault::Isolate(node)));
                out.push((at + lasting, Fault::HealAll));
            }
            3 => {
                let other = ((node as u64 + 1 + rng.below(n - 1)) % n) as i32;
                out.push((at, Fault::Block(node, other)));
                out.push((at + lasting, Fault::HealAll));
            }
            4 => out.push((at, Fault::ClockJump(node, 50 + rng.below(4_000)))),
            5 => {
                out.push((at, Fault::Shutdown(node)));
                out.push((at + 300, Fault::Crash(node)));
                out.push((at + 300 + lasting, Fault::Restart(node)));
            }
            _ => {
                // A majority partition: the first half cut from the rest, both ways.
                for a in 0..size as i32 / 2 {
                    for b in size as i32 / 2..size as i32 {
                        out.push((at, Fault::Block(a, b)));
                        out.push((at, Fault::Block(b, a)));
                    }
                }
                out.push((at + lasting, Fault::HealAll));
            }
        }
    }
    out
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
    let target = c
        .nodes
        .iter()
        .map(|n| n.disk.borrow().log.end())
        .max()
        .unwrap_or(0);
    let healed_at = c.now;
    let done = c.run_while(LIVENESS_BOUND_MS, |c| {
        c.leader()
            .and_then(|(id, _)| c.nodes[id as usize].raft()?.high_watermark())
            .is_none_or(|hwm| hwm <= target)
    })?;
    if !done {
        return Err(format!(
            "Liveness: no leader committed past {target} within {LIVENESS_BOUND_MS} ms of healing at {healed_at} ms (leader now {:?}): {}",
            c.leader(),
            describe(c)
        ));
    }
    Ok(())
}

fn replay_dynamic_command(seed: u64) -> String {
    format!("RINGRAFT_SIM_DYNAMIC=1 {}", replay_command(seed, 0))
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
    let (mut abandoned, mut answers, mut retries, mut witnesses, mut handovers) = (0, 0, 0, 0, 0);
    let (mut split, mut contested, mut adopted) = (0, 0, 0);
    for seed in base..base + count {
        match random_run(seed, size, Mutations::default()) {
            Ok(stats) => {
                witnesses += u64::from(stats.witness);
                handovers += stats.witness_handovers;
                events += stats.events;
                answers += stats.fetch_answers;
                retries += stats.fetch_retries;
                committed += stats.committed_batches;
                downloads += stats.snapshot_downloads;
                abandoned += stats.abandoned_downloads;
                adopted += stats.adopted_snapshots;
                truncations += stats.truncations;
                split += stats.split_votes.0;
                contested += stats.split_votes.1;
            }
            Err(why) => panic!(
                "seed {seed}, {size} nodes: {why}\nreplay: {}",
                replay_command(seed, size)
            ),
        }
    }
    println!(
        "{count} seeds × {size} nodes: 0 violations, {events} events, {committed} committed \
         batches, {truncations} divergence truncations, {downloads} snapshot downloads, \
         {abandoned} corrupt downloads abandoned, {answers} fetch-shard answers ({retries} \
         rebuilt after a rewrite); {witnesses} runs with a witness, each ending with a non-witness \
         leader ({handovers} witness handovers since the last restarts, {adopted} snapshots \
         adopted); {split} of {contested} epochs with a candidate had two or more (split votes)"
    );
    assert!(witnesses > 0, "no run had a witness");
    assert!(adopted > 0, "no witness adopted a leader's snapshot");
    assert!(answers > 0, "no fetch shard answered");
    assert!(
        committed as u64 >= count,
        "the runs committed almost nothing"
    );
    // The faults must reach the paths they exist for.
    assert!(truncations > 0, "no run truncated a divergent suffix");
    assert!(downloads > 0, "no run caught up through FetchSnapshot");
    assert!(
        abandoned > 0,
        "no run abandoned a corrupt snapshot download"
    );
}

/// Runs `count` dynamic seeds from `base`; panics with the first failure and its replay
/// command; prints and checks coverage: ≥ 30 % of seeds commit a voter change, and every kind
/// of change happens somewhere.
fn run_dynamic_seeds(count: u64) {
    let base = env_u64("RINGRAFT_SIM_BASE", 0);
    let (mut changed, mut events, mut stale) = (0u64, 0u64, 0u64);
    let (mut split, mut contested) = (0, 0);
    let mut changes = ChangeCounts::default();
    let mut acks = Acks::default();
    for seed in base..base + count {
        match random_dynamic_run(seed, Mutations::default()) {
            Ok(stats) => {
                changed += u64::from(stats.changes.any());
                events += stats.run.events;
                stale += stats.stale_restarts;
                split += stats.run.split_votes.0;
                contested += stats.run.split_votes.1;
                changes.add(&stats.changes);
                acks.adds += stats.acks.adds;
                acks.removes += stats.acks.removes;
                acks.updates += stats.acks.updates;
                acks.port_changes += stats.acks.port_changes;
                acks.wipes += stats.acks.wipes;
            }
            Err(why) => panic!(
                "dynamic seed {seed}: {why}\nreplay: {}",
                replay_dynamic_command(seed)
            ),
        }
    }
    println!(
        "{count} dynamic seeds: 0 violations, {events} events; {changed} seeds ({}%) committed a \
         voter change; committed: {} adds, {} removes ({} of the leader), {} endpoint updates, \
         {} wiped nodes re-added; operator acks: {} adds, {} removes, {} updates; {} port \
         changes, {} wipes, {stale} restarts with a stale voter set; {split} of {contested} \
         epochs with a candidate had two or more (split votes)",
        changed * 100 / count.max(1),
        changes.adds,
        changes.removes,
        changes.leader_removals,
        changes.updates,
        changes.readds_after_wipe,
        acks.adds,
        acks.removes,
        acks.updates,
        acks.port_changes,
        acks.wipes,
    );
    assert!(
        changed * 100 >= count * 30,
        "fewer than 30% of seeds changed the voters"
    );
    if count >= 100 {
        assert!(changes.adds > 0 && changes.removes > 0 && changes.updates > 0);
        assert!(changes.leader_removals > 0, "no run removed its leader");
        assert!(changes.readds_after_wipe > 0, "no wiped node was re-added");
        assert!(stale > 0, "no node restarted with a stale voter set");
    }
}

#[test]
fn dynamic_membership_many_seeds() {
    run_dynamic_seeds(env_u64("RINGRAFT_SIM_DYNAMIC_SEEDS", 500));
}

#[test]
#[ignore = "long: 10,000 dynamic seeds; run with --release"]
fn dynamic_membership_ten_thousand_seeds() {
    run_dynamic_seeds(10_000);
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
fn groups_three_nodes_four_groups_many_seeds() {
    run_group_seeds(3, 4, env_u64("RINGRAFT_SIM_GROUP_SEEDS", 500));
}

#[test]
fn groups_three_nodes_sixteen_groups_many_seeds() {
    run_group_seeds(3, 16, env_u64("RINGRAFT_SIM_GROUP_SEEDS", 500));
}

#[test]
#[ignore = "long: 10,000 seeds per multi-group configuration; run with --release"]
fn groups_ten_thousand_seeds_per_configuration() {
    run_group_seeds(3, 4, 10_000);
    run_group_seeds(3, 16, 10_000);
}

#[test]
fn broken_session_routing_an_answer_to_another_group_is_caught() {
    // A misrouted answer shows up as another group's records in a log (NoForeignBytes), or
    // as a high watermark or a divergence a group's own invariants refuse, or as a group whose
    // follower stalls on offsets it cannot match. Most seeds catch it; NoForeignBytes must be
    // among the checkers that do.
    let seeds = 10;
    let caught: Vec<(u64, String)> = (0..seeds)
        .filter_map(|seed| random_groups_run(seed, 3, 4, true).err().map(|e| (seed, e)))
        .collect();
    for (seed, why) in &caught {
        println!("seed {seed}: {}", &why[..why.len().min(160)]);
    }
    assert!(
        caught.len() as u64 * 2 > seeds,
        "only {} of {seeds} seeds caught a session book routing answers to the wrong group",
        caught.len()
    );
    assert!(
        caught.iter().any(|(_, why)| why.contains("NoForeignBytes")),
        "NoForeignBytes never caught another group's records in a log"
    );
}

/// A group's commits never wait on another group's flush: beside a group whose disk takes up to
/// 400 ms per flush, a group's appends wait for their commit no longer than beside groups on a
/// fast disk. The measure is the records appended and not committed yet (the leader's log end
/// less its high watermark), summed over samples every 10 ms.
#[test]
fn a_slow_disk_under_one_group_does_not_slow_the_others() {
    let backlog = |c: &Cluster| -> i64 {
        c.leader()
            .and_then(|(id, _)| {
                let raft = c.nodes[id as usize].raft()?;
                Some(raft.log_end_offset() - raft.high_watermark()?)
            })
            .unwrap_or(0)
    };
    let run = |slow: bool| -> Result<(i64, i64), String> {
        let net = || NetConfig {
            drop_per_mille: 0,
            duplicate_per_mille: 0,
            delay_min_ms: 1,
            delay_max_ms: 5,
            disk_delay_ms: 2,
            corrupt_per_mille: 0,
        };
        let mut s = groups::Groups::new(7, 3, 4, net);
        if slow {
            s.groups[1].net.disk_delay_ms = 400;
        }
        s.start_all()?;
        s.run_until(2_000)?;
        let mut sums = (0, 0);
        s.run_while(10_000, |s| {
            sums.0 += backlog(&s.groups[0]);
            sums.1 += backlog(&s.groups[1]);
            true
        })?;
        Ok(sums)
    };
    let (fast0, fast1) = run(false).unwrap();
    let (slow0, slow1) = run(true).unwrap();
    println!("waiting records × samples: group 0 {fast0} → {slow0}; group 1 (its disk slowed) {fast1} → {slow1}");
    assert!(
        slow1 > 3 * fast1,
        "the slow disk did not slow its own group"
    );
    assert!(
        slow0 * 4 <= fast0 * 5 + 20,
        "group 0's appends waited {slow0} beside a slow group, {fast0} beside fast ones"
    );
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
    if std::env::var_os("RINGRAFT_SIM_DYNAMIC").is_some() {
        if let Err(why) = random_dynamic_run(seed, Mutations::default()) {
            panic!("dynamic seed {seed}: {why}");
        }
        return;
    }
    let size = env_u64("RINGRAFT_SIM_SIZE", 3) as usize;
    if let Some(groups) = std::env::var_os("RINGRAFT_SIM_GROUPS") {
        let groups = groups.to_string_lossy().parse().expect("a group count");
        if let Err(why) = random_groups_run(seed, size, groups, false) {
            panic!("seed {seed}, {size} nodes × {groups} groups: {why}");
        }
        return;
    }
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

/// The node's executor with two effects reordered — every message sent before the election
/// state and the log it depends on are durable — must be caught: the simulator runs that
/// executor, so its order is what the checkers see.
#[test]
fn broken_reply_path_is_caught() {
    // A Fetch answer that reports the leader's log end as the high watermark: followers
    // deliver what no majority holds yet.
    let broken = Mutations {
        reply_unpersisted_high_watermark: true,
        ..Mutations::default()
    };
    let (seed, why) = first_violation(3, broken, 300).expect("must be caught within 300 seeds");
    assert!(
        why.contains("HighWatermarkOnAMajority"),
        "seed {seed}: {why}"
    );
    println!("caught at seed {seed}: {why}");
}

#[test]
fn broken_executor_sending_before_persist_is_caught() {
    let broken = Mutations {
        send_before_persist: true,
        ..Mutations::default()
    };
    let (seed, why) = first_violation(3, broken, 300).expect("must be caught within 300 seeds");
    assert!(
        why.contains("MajorityReachedHighWatermark")
            || why.contains("VoteGrantedOnce")
            || why.contains("ConsistentCommittedData"),
        "seed {seed}: {why}"
    );
    println!("caught at seed {seed}: {why}");
}

#[test]
fn broken_core_installing_unchecked_snapshots_is_caught() {
    let broken = Mutations {
        snapshot_unchecked: true,
        ..Mutations::default()
    };
    let (seed, why) = first_violation(3, broken, 300).expect("must be caught within 300 seeds");
    assert!(
        why.contains("NoCorruptSnapshotInstalled"),
        "seed {seed}: {why}"
    );
}

/// Dynamic seeds with a broken core until a checker fires; returns the first violation.
fn first_dynamic_violation(mutations: Mutations, seeds: u64) -> Option<(u64, String)> {
    (0..seeds).find_map(|seed| random_dynamic_run(seed, mutations).err().map(|e| (seed, e)))
}

#[test]
fn broken_core_high_watermark_may_decrease_is_caught_by_dynamic_runs() {
    let broken = Mutations {
        high_watermark_may_decrease: true,
        ..Mutations::default()
    };
    let (seed, why) = first_dynamic_violation(broken, 50).expect("caught within 50 seeds");
    assert!(why.contains("MonotonicHighWatermark"), "seed {seed}: {why}");
}

#[test]
fn broken_core_leader_counted_twice_is_caught_by_dynamic_runs() {
    let broken = Mutations {
        leader_counted_twice: true,
        ..Mutations::default()
    };
    let (seed, why) = first_dynamic_violation(broken, 50).expect("caught within 50 seeds");
    assert!(
        why.contains("MajorityReachedHighWatermark"),
        "seed {seed}: {why}"
    );
}

/// The single-server change bug in random runs: a leader that changes the voters before its
/// epoch commits leaves two uncommitted changes behind (its scenario shows the split commit).
/// Since followers send UpdateRaftVoter one fetch timeout after a leader appears (Kafka 4.1+),
/// only an operator acting at once reaches a leader in that window: the hasty one.
#[test]
#[ignore = "long: up to 10,000 dynamic seeds (caught at 4271); run with --release"]
fn broken_core_voter_change_before_high_watermark_is_caught_by_dynamic_runs() {
    let broken = Mutations {
        voter_change_before_high_watermark: true,
        ..Mutations::default()
    };
    let caught = (0..10_000).find_map(|seed| {
        dynamic_run(seed, broken, false, true)
            .err()
            .map(|e| (seed, e))
    });
    let (seed, why) = caught.expect("caught within 10,000 seeds");
    assert!(
        why.contains("AtMostOneUncommittedVoterChange") || why.contains("ConsistentCommittedData"),
        "seed {seed}: {why}"
    );
    println!("caught at dynamic seed {seed}: {why}");
}
