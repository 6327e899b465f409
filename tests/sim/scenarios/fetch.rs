//! Fetch shards answering from a stale view while the log is rewritten under them
//! (`ringraft::fetch`): the scenario that makes the generation check necessary.
//!
//! Five voters; the leader L is cut off with one follower C. L keeps appending (its tail
//! reaches only C) until a majority elects a new leader N. Then L hears from N — it truncates
//! its tail and takes N's log at the same offsets — while C still sees nobody but L and keeps
//! fetching from it in the old epoch. L's fetch shard gets its publications 5 s late, so it
//! still answers as leader of the old epoch. Reading from the rewritten log, it would hand C
//! batches L never had in that epoch; the generation check makes it wait for the newer view.

use ringraft::raft::Mutations;

use super::super::cluster::{Cluster, Fault};
use super::{quiet_net, wait_for_leader};

/// Runs the scenario; `Err` with the violation when a checker fires. Returns the answers the
/// fetch shards rebuilt after a rewrite.
fn stale_view_scenario(seed: u64, mutations: Mutations) -> Result<u64, String> {
    let mut c = Cluster::new(seed, 5, quiet_net());
    c.fetch_lag_ms = Some(0);
    for node in &mut c.nodes {
        node.mutations = mutations;
    }
    c.start_all()?;
    let (leader, _) = wait_for_leader(&mut c, 20_000);
    c.run_until(c.now + 1_000)?;
    let follower = (leader + 1) % 5;
    let majority: Vec<i32> = (0..5).filter(|n| *n != leader && *n != follower).collect();
    // From now on the leader's fetch shard hears of everything up to 5 s late.
    c.fetch_lag_of.insert(leader, 5_000);
    for &a in &[leader, follower] {
        for &b in &majority {
            c.fault(Fault::Block(a, b))?;
            c.fault(Fault::Block(b, a))?;
        }
    }
    // The majority elects a new leader and commits at the offsets of the old leader's tail.
    let elected = c.run_while(10_000, |c| {
        c.leader().is_none_or(|(l, _)| !majority.contains(&l))
    })?;
    if !elected {
        return Err("setup: the majority elected no leader".into());
    }
    c.run_until(c.now + 500)?;
    // The old leader hears the new one; the follower still hears only the old leader.
    for &b in &majority {
        c.blocked.remove(&(leader, b));
        c.blocked.remove(&(b, leader));
    }
    c.run_until(c.now + 8_000)?;
    Ok(c.fetch_shard_retries)
}

#[test]
fn a_fetch_shard_never_serves_a_rewritten_log_from_a_stale_view() {
    let mut rebuilt = 0;
    for seed in 0..5 {
        rebuilt += stale_view_scenario(seed, Mutations::default())
            .unwrap_or_else(|why| panic!("seed {seed}: {why}"));
    }
    assert!(
        rebuilt > 0,
        "no fetch shard saw the log rewritten under its view: the scenario tests nothing"
    );
}

/// The broken fetch shard that skips the generation check is caught.
#[test]
fn broken_fetch_shard_serving_a_stale_view_is_caught() {
    let broken = Mutations {
        stale_fetch_view: true,
        ..Mutations::default()
    };
    // The scenario's timing varies with the seed: about one seed in eight reaches a fetch
    // shard while its log is rewritten under its view.
    let caught = (0..40).find_map(|seed| stale_view_scenario(seed, broken).err());
    let why = caught.expect("a fetch shard serving a rewritten log from a stale view is caught");
    assert!(why.contains("ServedWhatItsViewHeld"), "{why}");
    println!("caught: {why}");
}
