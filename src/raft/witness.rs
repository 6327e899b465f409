//! Witness mode (`ringraft.leadership=witness`, docs/raft.md §15): a voter that votes, stores
//! and replicates like any other, but leaves leading to the others.
//!
//! A witness stands for election only when it has evidence that no other voter can win:
//!
//! - **A stale candidate.** It refused a vote (pre-vote or standard) because the candidate's
//!   log is behind its own, and no leader has been heard from since. With voters
//!   {witness, A, B}, B dead and A lagging, A can never win: it needs the witness's vote, and
//!   Raft forbids it. One election timeout after the refusal, the witness campaigns.
//! - **Patience exhausted.** No leader for a fetch timeout plus two election timeouts. The
//!   others had time to time out and hold an election; if none won, the witness may be what
//!   they are missing (its vote request carries the longest log, say, or it reaches them when
//!   they cannot reach each other).
//!
//! A witness that leads hands over as soon as it can: once its epoch is committed and some
//! other voter has fetched up to its log end, it resigns, and its EndQuorumEpoch names the best
//! replicated voters first. The first of them stands at once (no backoff); its log is as long
//! as the witness's, so the witness grants it the vote.
//!
//! None of this changes what Raft decides. The witness only delays campaigns, and resigns like
//! a leader that shuts down; the simulator checks the usual invariants over witness runs, and
//! that a non-witness voter leads within a bound (`tests/sim`).

use super::core::{Raft, Role};

/// How long after the leader was last heard from a witness may campaign without evidence of
/// a stale candidate, in election timeouts (beyond one fetch timeout).
const PATIENCE_ELECTION_TIMEOUTS: u64 = 2;

/// What a witness remembers between steps. All times are the core's milliseconds.
#[derive(Debug, Default, Clone)]
pub(super) struct WitnessState {
    /// When a leader (ourselves included) was last heard from: a Fetch answer, a
    /// BeginQuorumEpoch, or leading.
    pub leader_heard_ms: u64,
    /// When we last refused a voter's vote because its log is behind ours.
    pub stale_candidate_ms: Option<u64>,
    /// Campaigns this witness started, and leaderships it handed over (for logs and tests).
    pub campaigns: u64,
    pub handovers: u64,
}

impl Raft {
    /// Whether this replica runs as a witness.
    pub fn is_witness(&self) -> bool {
        self.config.witness
    }

    /// Campaigns started and leaderships handed over by this witness since it started.
    pub fn witness_counts(&self) -> (u64, u64) {
        (self.witness.campaigns, self.witness.handovers)
    }

    /// Whether a timer that would make this replica Prospective may do so now. Always true
    /// for a replica that is not a witness; `may_campaign` and shutdown are checked apart.
    pub(super) fn campaign_allowed(&mut self) -> bool {
        if !self.config.witness {
            return true;
        }
        if self.config.mutated(|m| m.witness_never_campaigns) {
            return false;
        }
        let now = self.now_ms;
        let w = &self.witness;
        let stale = w
            .stale_candidate_ms
            .is_some_and(|t| t >= w.leader_heard_ms && now >= t + self.config.election_timeout_ms);
        let exhausted = now >= w.leader_heard_ms + self.witness_patience_ms();
        if stale || exhausted {
            self.witness.campaigns += 1;
            let (epoch, campaigns) = (self.epoch, self.witness.campaigns);
            let why = if stale {
                "a voter behind our log asked for our vote, and no leader appeared since"
            } else {
                "no leader was heard from for the witness's patience"
            };
            tracing::info!(epoch, campaigns, "witness campaigns: {why}");
        }
        stale || exhausted
    }

    /// How long without a leader before a witness campaigns on no other evidence.
    fn witness_patience_ms(&self) -> u64 {
        self.config.fetch_timeout_ms + PATIENCE_ELECTION_TIMEOUTS * self.config.election_timeout_ms
    }

    /// When a witness that may not campaign looks again.
    pub(super) fn witness_recheck_deadline(&mut self) -> u64 {
        let now = self.now_ms;
        let w = &self.witness;
        let mut next = w.leader_heard_ms + self.witness_patience_ms();
        if let Some(t) = w.stale_candidate_ms.filter(|t| *t >= w.leader_heard_ms) {
            next = next.min(t + self.config.election_timeout_ms);
        }
        next.max(now + 1)
    }

    /// A leader was heard from (or we lead): evidence gathered before it is moot.
    pub(super) fn note_leader_heard(&mut self) {
        self.witness.leader_heard_ms = self.now_ms;
    }

    /// We refused `candidate`'s vote because its log is behind ours: look again one election
    /// timeout from now, whatever timer we are waiting on.
    pub(super) fn note_stale_candidate(&mut self, candidate: i32) {
        if !self.config.witness || !self.voters().ids().any(|id| id == candidate) {
            return;
        }
        let now = self.now_ms;
        self.witness.stale_candidate_ms = Some(now);
        let recheck = now + self.config.election_timeout_ms;
        match &mut self.role {
            Role::Follower(s) => s.fetch_deadline = s.fetch_deadline.min(recheck),
            Role::Unattached(s) => s.election_deadline = s.election_deadline.min(recheck),
            Role::Resigned(s) => s.election_deadline = s.election_deadline.min(recheck),
            _ => {}
        }
    }

    /// A witness leader resigns once its epoch is committed and another voter has caught up
    /// to its log end: that voter can then win an election with the witness's vote.
    pub(super) fn maybe_hand_over(&mut self) {
        if !self.config.witness
            || self.shutting_down
            || self.config.mutated(|m| m.witness_never_hands_over)
        {
            return;
        }
        let end = self.log.end_offset();
        let Role::Leader(s) = &self.role else {
            return;
        };
        if s.high_watermark != Some(end) || s.pending.is_some() {
            return;
        }
        let local = self.config.local.id;
        let successor = self
            .voters()
            .voters()
            .iter()
            .map(|v| v.key.id)
            .filter(|id| *id != local)
            .find(|id| s.replicas.get(id).and_then(|r| r.end_offset) == Some(end));
        let Some(successor) = successor else {
            return;
        };
        self.witness.handovers += 1;
        let epoch = self.epoch;
        tracing::info!(
            epoch,
            successor,
            offset = end,
            "witness hands leadership over: voter {successor} has caught up to offset {end}"
        );
        self.become_resigned();
        self.send_end_quorum_epochs();
    }
}

#[cfg(test)]
mod tests {
    use super::super::core::testing;
    use super::*;

    fn core(witness: bool) -> Raft {
        let mut config = testing::config(1);
        config.seed = 7;
        config.witness = witness;
        testing::start(config, &[1, 2, 3], None)
    }

    /// Fairness against Kafka voters, whose fetch timer is exact: ours falls on both sides
    /// of the configured timeout, within 5 %.
    #[test]
    fn the_fetch_timeout_jitter_is_centred_on_the_configured_timeout() {
        let mut raft = core(false);
        let t = raft.config.fetch_timeout_ms;
        let deadlines: Vec<u64> = (0..500).map(|_| raft.random_fetch_deadline(0)).collect();
        let (lo, hi) = (
            deadlines.iter().min().unwrap(),
            deadlines.iter().max().unwrap(),
        );
        assert!(*lo >= t - t / 20 && *hi <= t + t / 20, "{lo}..{hi}");
        assert!(*lo < t && *hi > t, "{lo}..{hi} must straddle {t}");
    }

    #[test]
    fn a_witness_waits_for_evidence_or_patience() {
        let mut raft = core(true);
        raft.now_ms = 100;
        assert!(!raft.campaign_allowed(), "no evidence yet");
        raft.note_stale_candidate(2);
        raft.now_ms += raft.config.election_timeout_ms - 1;
        assert!(
            !raft.campaign_allowed(),
            "one election timeout after the refusal"
        );
        raft.now_ms += 1;
        assert!(raft.campaign_allowed());
        // A leader heard from since makes the refusal moot.
        raft.note_leader_heard();
        raft.now_ms += 10;
        assert!(!raft.campaign_allowed());
        // Patience: a fetch timeout and two election timeouts without a leader.
        raft.now_ms += raft.config.fetch_timeout_ms + 2 * raft.config.election_timeout_ms;
        assert!(raft.campaign_allowed());
        // A replica outside the voter set is no evidence.
        let mut raft = core(true);
        raft.note_stale_candidate(9);
        raft.now_ms += raft.config.election_timeout_ms * 2;
        assert!(!raft.campaign_allowed());
        assert!(
            core(false).campaign_allowed(),
            "a voter that is not a witness always may"
        );
    }
}
