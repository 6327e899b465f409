//! The one table of APIs this node serves, with their version ranges and the version from which
//! each is flexible (docs/wire.md §3.3, §7). ApiVersions answers from this table, the request
//! decoder refuses anything outside it, and later issues add rows as they add handlers: a row
//! here is a promise that the node parses every version in its range.

/// Kafka API keys known to ringraft (only the ones in `SERVED` are answered).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ApiKey(pub i16);

impl ApiKey {
    pub const PRODUCE: ApiKey = ApiKey(0);
    pub const FETCH: ApiKey = ApiKey(1);
    pub const METADATA: ApiKey = ApiKey(3);
    pub const API_VERSIONS: ApiKey = ApiKey(18);
    pub const VOTE: ApiKey = ApiKey(52);
    pub const BEGIN_QUORUM_EPOCH: ApiKey = ApiKey(53);
    pub const END_QUORUM_EPOCH: ApiKey = ApiKey(54);
    pub const DESCRIBE_QUORUM: ApiKey = ApiKey(55);
    pub const ALTER_PARTITION: ApiKey = ApiKey(56);
    pub const UPDATE_FEATURES: ApiKey = ApiKey(57);
    pub const ENVELOPE: ApiKey = ApiKey(58);
    pub const FETCH_SNAPSHOT: ApiKey = ApiKey(59);
    pub const DESCRIBE_CLUSTER: ApiKey = ApiKey(60);
    pub const BROKER_REGISTRATION: ApiKey = ApiKey(62);
    pub const BROKER_HEARTBEAT: ApiKey = ApiKey(63);
    pub const ALLOCATE_PRODUCER_IDS: ApiKey = ApiKey(67);
    pub const CONTROLLER_REGISTRATION: ApiKey = ApiKey(70);
    pub const ASSIGN_REPLICAS_TO_DIRS: ApiKey = ApiKey(73);
    pub const ADD_RAFT_VOTER: ApiKey = ApiKey(80);
    pub const REMOVE_RAFT_VOTER: ApiKey = ApiKey(81);
    pub const UPDATE_RAFT_VOTER: ApiKey = ApiKey(82);
    /// ringraft's own, unadvertised (`protocol::transfer_leader`): far above Kafka's keys.
    pub const RINGRAFT_TRANSFER_LEADER: ApiKey = ApiKey(10_000);

    /// Kafka's name for the key, for logs ("unknown" for keys ringraft has no name for).
    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "Produce",
            1 => "Fetch",
            2 => "ListOffsets",
            3 => "Metadata",
            18 => "ApiVersions",
            52 => "Vote",
            53 => "BeginQuorumEpoch",
            54 => "EndQuorumEpoch",
            55 => "DescribeQuorum",
            56 => "AlterPartition",
            57 => "UpdateFeatures",
            58 => "Envelope",
            59 => "FetchSnapshot",
            60 => "DescribeCluster",
            62 => "BrokerRegistration",
            63 => "BrokerHeartbeat",
            67 => "AllocateProducerIds",
            70 => "ControllerRegistration",
            73 => "AssignReplicasToDirs",
            80 => "AddRaftVoter",
            81 => "RemoveRaftVoter",
            82 => "UpdateRaftVoter",
            10_000 => "TransferLeader (ringraft)",
            _ => "unknown",
        }
    }
}

/// One served API: its key, the versions served, and the first flexible version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiSpec {
    pub key: ApiKey,
    pub min_version: i16,
    pub max_version: i16,
    /// Versions at or above this use request header v2 / response header v1 and compact
    /// encodings. `i16::MAX` for an API that is never flexible.
    pub flexible_from: i16,
}

impl ApiSpec {
    pub fn is_flexible(&self, version: i16) -> bool {
        version >= self.flexible_from
    }

    pub fn serves(&self, version: i16) -> bool {
        (self.min_version..=self.max_version).contains(&version)
    }

    /// Request header version for a request at `version` (docs/wire.md §3.1).
    pub fn request_header_version(&self, version: i16) -> i16 {
        if self.is_flexible(version) {
            2
        } else {
            1
        }
    }

    /// Response header version (docs/wire.md §3.2): ApiVersions always answers with v0 so that
    /// a client that sent a too-new version can still read the header.
    pub fn response_header_version(&self, version: i16) -> i16 {
        if self.key == ApiKey::API_VERSIONS || !self.is_flexible(version) {
            0
        } else {
            1
        }
    }
}

/// Every API this node answers. Order is the order ApiVersions lists them in.
pub const SERVED: &[ApiSpec] = &[
    ApiSpec {
        key: ApiKey::FETCH,
        min_version: 13,
        max_version: 18,
        flexible_from: 12,
    },
    ApiSpec {
        key: ApiKey::API_VERSIONS,
        min_version: 0,
        max_version: 5,
        flexible_from: 3,
    },
    ApiSpec {
        key: ApiKey::VOTE,
        min_version: 0,
        max_version: 2,
        flexible_from: 0,
    },
    ApiSpec {
        key: ApiKey::BEGIN_QUORUM_EPOCH,
        min_version: 0,
        max_version: 1,
        flexible_from: 1,
    },
    ApiSpec {
        key: ApiKey::END_QUORUM_EPOCH,
        min_version: 0,
        max_version: 1,
        flexible_from: 1,
    },
    ApiSpec {
        key: ApiKey::DESCRIBE_QUORUM,
        min_version: 0,
        max_version: 2,
        flexible_from: 0,
    },
    ApiSpec {
        key: ApiKey::UPDATE_FEATURES,
        min_version: 0,
        max_version: 2,
        flexible_from: 0,
    },
    ApiSpec {
        key: ApiKey::FETCH_SNAPSHOT,
        min_version: 0,
        max_version: 1,
        flexible_from: 0,
    },
    ApiSpec {
        key: ApiKey::DESCRIBE_CLUSTER,
        min_version: 0,
        max_version: 2,
        flexible_from: 0,
    },
    // Kafka 4.2+ serves AddRaftVoter 0–1 (4.1: 0 only); a 4.1 client negotiates v0.
    ApiSpec {
        key: ApiKey::ADD_RAFT_VOTER,
        min_version: 0,
        max_version: 1,
        flexible_from: 0,
    },
    ApiSpec {
        key: ApiKey::REMOVE_RAFT_VOTER,
        min_version: 0,
        max_version: 0,
        flexible_from: 0,
    },
    ApiSpec {
        key: ApiKey::UPDATE_RAFT_VOTER,
        min_version: 0,
        max_version: 0,
        flexible_from: 0,
    },
    // Served only to say NOT_CONTROLLER (`controller_only`): Kafka's controllers and brokers
    // send them to the Raft leader, and a leader that does not advertise them makes them fail
    // with UNSUPPORTED_VERSION instead of looking for the active controller.
    ApiSpec {
        key: ApiKey::ALTER_PARTITION,
        min_version: 2,
        max_version: 3,
        flexible_from: 0,
    },
    ApiSpec {
        key: ApiKey::ENVELOPE,
        min_version: 0,
        max_version: 0,
        flexible_from: 0,
    },
    ApiSpec {
        key: ApiKey::BROKER_REGISTRATION,
        min_version: 0,
        max_version: 4,
        flexible_from: 0,
    },
    ApiSpec {
        key: ApiKey::BROKER_HEARTBEAT,
        min_version: 0,
        max_version: 2,
        flexible_from: 0,
    },
    ApiSpec {
        key: ApiKey::ALLOCATE_PRODUCER_IDS,
        min_version: 0,
        max_version: 0,
        flexible_from: 0,
    },
    ApiSpec {
        key: ApiKey::CONTROLLER_REGISTRATION,
        min_version: 0,
        max_version: 0,
        flexible_from: 0,
    },
    ApiSpec {
        key: ApiKey::ASSIGN_REPLICAS_TO_DIRS,
        min_version: 0,
        max_version: 0,
        flexible_from: 0,
    },
];

/// APIs this node parses and answers without listing them in ApiVersions: interop compares
/// our ApiVersions answer with a Kafka controller's, and no Kafka client should find them by
/// negotiation. Produce serves `ringraft log append` (docs/wire.md §8.10), TransferLeader
/// `ringraft quorum transfer-leader` (§8.11).
pub const UNADVERTISED: &[ApiSpec] = &[
    ApiSpec {
        key: ApiKey::PRODUCE,
        min_version: 9,
        max_version: 12,
        flexible_from: 9,
    },
    ApiSpec {
        key: ApiKey::RINGRAFT_TRANSFER_LEADER,
        min_version: 0,
        max_version: 0,
        flexible_from: 0,
    },
];

/// The served API with this key, if any (advertised or not).
pub fn served(key: ApiKey) -> Option<&'static ApiSpec> {
    SERVED
        .iter()
        .chain(UNADVERTISED)
        .find(|spec| spec.key == key)
}

/// The ApiVersions row, needed by the too-new-version fallback.
pub fn api_versions_spec() -> &'static ApiSpec {
    served(ApiKey::API_VERSIONS).expect("ApiVersions is always served")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_well_formed() {
        for (i, spec) in SERVED.iter().enumerate() {
            assert!(
                spec.min_version >= 0 && spec.min_version <= spec.max_version,
                "{spec:?}"
            );
            assert!(
                SERVED[i + 1..].iter().all(|other| other.key != spec.key),
                "duplicate"
            );
        }
        for spec in UNADVERTISED {
            assert!(SERVED.iter().all(|other| other.key != spec.key), "{spec:?}");
        }
        let av = api_versions_spec();
        assert_eq!((av.min_version, av.max_version), (0, 5));
        assert_eq!(av.response_header_version(4), 0);
        assert_eq!(av.request_header_version(3), 2);
        assert_eq!(av.request_header_version(2), 1);
    }
}
