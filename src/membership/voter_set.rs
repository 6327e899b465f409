//! The voter set: which replicas vote, campaign and count toward the high watermark, with the
//! listeners raft connects to (docs/raft.md §1, docs/membership.md §2). Static sets come from
//! `controller.quorum.voters`; KIP-853 sets from the log (the membership issue).

use super::MembershipError;
use crate::types::{Endpoint, ReplicaKey};

/// The kraft.version levels a voter supports (VotersRecord's KRaftVersionFeature).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KRaftRange {
    pub min: i16,
    pub max: i16,
}

impl KRaftRange {
    /// What ringraft (like Kafka 3.9+) supports.
    pub const LOCAL: KRaftRange = KRaftRange { min: 0, max: 1 };
    /// What a static (`controller.quorum.voters`) voter is assumed to support.
    pub const STATIC: KRaftRange = KRaftRange { min: 0, max: 0 };

    pub fn contains(&self, level: i16) -> bool {
        self.min <= level && level <= self.max
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Voter {
    pub key: ReplicaKey,
    pub endpoints: Vec<Endpoint>,
    pub supported: KRaftRange,
}

impl Voter {
    /// A voter supporting kraft.version 0..1.
    pub fn new(key: ReplicaKey, endpoints: Vec<Endpoint>) -> Self {
        Voter {
            key,
            endpoints,
            supported: KRaftRange::LOCAL,
        }
    }

    /// The endpoint on listener `name`, else the first.
    pub fn endpoint(&self, name: Option<&str>) -> Option<&Endpoint> {
        name.and_then(|n| self.endpoints.iter().find(|e| e.name == n))
            .or(self.endpoints.first())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoterSet {
    voters: Vec<Voter>,
}

impl VoterSet {
    /// A set of distinct node ids, sorted by id. Errors name the duplicate.
    pub fn new(mut voters: Vec<Voter>) -> Result<VoterSet, MembershipError> {
        voters.sort_by_key(|v| v.key.id);
        if let Some(pair) = voters.windows(2).find(|w| w[0].key.id == w[1].key.id) {
            return Err(MembershipError::DuplicateVoter(pair[0].key.id));
        }
        Ok(VoterSet { voters })
    }

    pub fn voters(&self) -> &[Voter] {
        &self.voters
    }

    pub fn len(&self) -> usize {
        self.voters.len()
    }

    pub fn is_empty(&self) -> bool {
        self.voters.is_empty()
    }

    pub fn ids(&self) -> impl Iterator<Item = i32> + '_ {
        self.voters.iter().map(|v| v.key.id)
    }

    pub fn get(&self, id: i32) -> Option<&Voter> {
        self.voters.iter().find(|v| v.key.id == id)
    }

    pub fn contains_id(&self, id: i32) -> bool {
        self.get(id).is_some()
    }

    /// Whether `key` is a voter: same id and matching directory id (docs/raft.md §1).
    pub fn contains_key(&self, key: &ReplicaKey) -> bool {
        self.get(key.id).is_some_and(|v| v.key.matches(key))
    }

    /// Votes needed to win: a strict majority.
    pub fn majority(&self) -> usize {
        self.voters.len() / 2 + 1
    }

    pub fn is_only_voter(&self, key: &ReplicaKey) -> bool {
        self.voters.len() == 1 && self.contains_key(key)
    }

    /// This set plus `voter` (its id must be new).
    pub fn with_voter(&self, voter: Voter) -> Result<VoterSet, MembershipError> {
        let mut voters = self.voters.clone();
        voters.push(voter);
        VoterSet::new(voters)
    }

    /// This set without the voter whose key is exactly `key`; `None` if it is not a voter.
    pub fn without_voter(&self, key: &ReplicaKey) -> Option<VoterSet> {
        let position = self.voters.iter().position(|v| v.key == *key)?;
        let mut voters = self.voters.clone();
        voters.remove(position);
        Some(VoterSet { voters })
    }

    /// This set with `voter` replacing the entry of the same id.
    pub fn with_updated(&self, voter: Voter) -> VoterSet {
        let mut voters = self.voters.clone();
        if let Some(v) = voters.iter_mut().find(|v| v.key.id == voter.key.id) {
            *v = voter;
        }
        VoterSet { voters }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn voter(id: i32) -> Voter {
        Voter::new(ReplicaKey::new(id, None), vec![])
    }

    #[test]
    fn majority_and_membership() {
        let set = VoterSet::new(vec![voter(3), voter(1), voter(2)]).unwrap();
        assert_eq!(set.majority(), 2);
        assert_eq!(set.ids().collect::<Vec<_>>(), vec![1, 2, 3]);
        assert!(set.contains_id(2) && !set.contains_id(4));
        assert!(VoterSet::new(vec![voter(1), voter(1)]).is_err());
        let one = VoterSet::new(vec![voter(1)]).unwrap();
        assert!(one.is_only_voter(&ReplicaKey::new(1, None)));
        assert_eq!(one.majority(), 1);
    }
}
