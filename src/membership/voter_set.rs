//! The voter set: which replicas vote, campaign and count toward the high watermark, with the
//! listeners raft connects to (raft.md §1, membership.md §2). Static sets come from
//! `controller.quorum.voters`; KIP-853 sets from the log (the membership issue).

use crate::raft::types::{Endpoint, ReplicaKey};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Voter {
    pub key: ReplicaKey,
    pub endpoints: Vec<Endpoint>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoterSet {
    voters: Vec<Voter>,
}

impl VoterSet {
    /// A set of distinct node ids, sorted by id. Errors name the duplicate.
    pub fn new(mut voters: Vec<Voter>) -> Result<VoterSet, String> {
        voters.sort_by_key(|v| v.key.id);
        if let Some(pair) = voters.windows(2).find(|w| w[0].key.id == w[1].key.id) {
            return Err(format!("voter {} appears twice", pair[0].key.id));
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

    /// Whether `key` is a voter: same id and matching directory id (raft.md §1).
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn voter(id: i32) -> Voter {
        Voter {
            key: ReplicaKey::new(id, None),
            endpoints: vec![],
        }
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
