//! How many of a shard's groups may campaign at once (`CampaignGate`).
//!
//! A node that starts with thousands of groups, or loses a peer that led thousands, would
//! otherwise start thousands of elections in the same second: each one writes `quorum-state`
//! (twice fsynced) on its candidate and on every voter, and once the writes and Vote round
//! trips outlast the election timeout, the elections time out, start again one epoch higher
//! and write again. Measured with 2,000 groups on each of three nodes (docs/groups.md): no
//! group of 2,000 had a leader after 90 s, the nodes busy with quorum-state writes.
//!
//! A gate admits a bounded number of campaigns; a group whose timer would start one while the
//! gate is full keeps its state and looks again a fraction of an election timeout later. The
//! lease a campaign holds is given back when the group leaves Prospective and Candidate (won,
//! lost, or told of a leader), or when its core is dropped. Only a timer's campaign is gated:
//! one a leader asked for (EndQuorumEpoch's preferred candidate, a transfer) starts at once.
//! Group 0 has no gate.

use std::cell::Cell;
use std::rc::Rc;

use super::core::Raft;

/// Shared by the cores of one shard's groups (cloned into each).
#[derive(Debug, Clone)]
pub struct CampaignGate(Rc<GateState>);

#[derive(Debug)]
struct GateState {
    limit: usize,
    active: Cell<usize>,
    refused: Cell<u64>,
}

/// A campaign admitted by a gate; dropping it makes room for another.
#[derive(Debug)]
pub struct CampaignLease(Rc<GateState>);

impl CampaignGate {
    /// A gate admitting at most `limit` campaigns at once (at least one).
    pub fn new(limit: usize) -> Self {
        CampaignGate(Rc::new(GateState {
            limit: limit.max(1),
            active: Cell::new(0),
            refused: Cell::new(0),
        }))
    }

    /// A lease when the gate has room; `None` (counted) when it is full.
    pub fn try_enter(&self) -> Option<CampaignLease> {
        let s = &self.0;
        if s.active.get() >= s.limit {
            s.refused.set(s.refused.get() + 1);
            return None;
        }
        s.active.set(s.active.get() + 1);
        Some(CampaignLease(self.0.clone()))
    }

    /// Campaigns holding a lease now.
    pub fn active(&self) -> usize {
        self.0.active.get()
    }

    /// Campaigns refused so far (each one's group looked again later).
    pub fn refused(&self) -> u64 {
        self.0.refused.get()
    }

    fn is_full(&self) -> bool {
        self.0.active.get() >= self.0.limit
    }
}

impl Raft {
    /// Bounds this replica's timer campaigns by `gate`, shared with the other groups of its
    /// shard. Set before the first step.
    pub fn set_campaign_gate(&mut self, gate: CampaignGate) {
        self.campaign_gate = Some(gate);
    }

    /// Whether a timer may start a campaign now: the witness's rule, then the gate, whose
    /// lease the campaign then holds.
    pub(super) fn start_campaign(&mut self) -> bool {
        let lease = match (&self.campaign_gate, &self.campaign_lease) {
            (Some(gate), None) => match gate.try_enter() {
                Some(lease) => Some(lease),
                None => return false,
            },
            _ => None,
        };
        if !self.campaign_allowed() {
            return false;
        }
        if lease.is_some() {
            self.campaign_lease = lease;
        }
        true
    }

    /// When a timer whose campaign was refused looks again: a full gate's refusal a quarter
    /// to a whole election timeout later (spread, so that the refused do not all come back
    /// in one tick), a witness's when its evidence may have changed.
    pub(super) fn campaign_recheck_deadline(&mut self) -> u64 {
        let gated = self.campaign_lease.is_none()
            && self
                .campaign_gate
                .as_ref()
                .is_some_and(CampaignGate::is_full);
        if !gated {
            return self.witness_recheck_deadline();
        }
        let t = self.config.election_timeout_ms;
        self.now_ms + t / 4 + self.rng.below(t - t / 4 + 1)
    }
}

impl Drop for CampaignLease {
    fn drop(&mut self) {
        self.0.active.set(self.0.active.get().saturating_sub(1));
    }
}

#[cfg(test)]
mod tests {
    use super::super::core::testing;
    use super::*;
    use crate::raft::{Input, Time};

    fn tick(raft: &mut Raft, now: u64) {
        raft.step(Time::simulated(now), Input::Tick);
        testing::drain(raft);
    }

    #[test]
    fn a_full_gate_holds_a_timer_campaign_back_until_the_campaign_ends() {
        let gate = CampaignGate::new(1);
        let mut a = testing::core(1, &[1, 2, 3]);
        let mut config = testing::config(1);
        config.seed = 99;
        let mut b = testing::start(config, &[1, 2, 3], None);
        a.set_campaign_gate(gate.clone());
        b.set_campaign_gate(gate.clone());
        // Both election timers have run out (a deadline is at most two timeouts away).
        let t = a.config.election_timeout_ms;
        let mut now = 2 * t + 1;
        tick(&mut a, now);
        tick(&mut b, now);
        assert_eq!(
            (a.state_name(), b.state_name()),
            ("Prospective", "Unattached")
        );
        assert_eq!((gate.active(), gate.refused()), (1, 1));
        // The refused one looks again within an election timeout, and is refused again while
        // the other campaigns.
        let again = b.deadline_ms();
        assert!(again > now && again <= now + t, "{again} after {now}");
        now = again;
        tick(&mut b, now);
        assert_eq!(b.state_name(), "Unattached");
        assert_eq!(gate.refused(), 2);
        // The campaign times out unanswered: its lease goes back, and the next look starts one.
        now += 2 * t + 1;
        tick(&mut a, now);
        assert_ne!(a.state_name(), "Prospective");
        assert_eq!(gate.active(), 0);
        now = now.max(b.deadline_ms());
        tick(&mut b, now);
        assert_eq!(b.state_name(), "Prospective");
        assert_eq!(gate.active(), 1);
        drop(b);
        assert_eq!(gate.active(), 0, "a dropped core gives its lease back");
    }

    #[test]
    fn a_full_gate_refuses_until_a_lease_is_dropped() {
        let gate = CampaignGate::new(2);
        let a = gate.try_enter().expect("room");
        let b = gate.try_enter().expect("room");
        assert!(gate.try_enter().is_none());
        assert_eq!((gate.active(), gate.refused()), (2, 1));
        drop(a);
        let c = gate.try_enter().expect("room again");
        assert_eq!(gate.active(), 2);
        drop((b, c));
        assert_eq!(gate.active(), 0);
    }
}
