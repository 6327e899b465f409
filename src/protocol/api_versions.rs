//! ApiVersions (key 18), versions 0–5, flexible from 3 (docs/wire.md §6, KIP-35, KIP-511,
//! KIP-1242).
//!
//! Owns the message types, their checked decoders and encoders, the features a Kafka 4.4
//! controller advertises, and `answer`, the pure function that turns a request into the node's
//! response. It must not know about sockets or files.

use super::apis::{self, ApiSpec};
use super::codec::{DecodeResult, Reader, Writer};
use super::errors::ErrorCode;

/// `kraft.version`: the feature KIP-853 adds; level 1 means a dynamic (log-kept) voter set.
pub const KRAFT_VERSION_FEATURE: &str = "kraft.version";
pub const KRAFT_VERSION_MAX: i16 = 1;

/// `metadata.version`: the level of the metadata schema the cluster runs at.
pub const METADATA_VERSION_FEATURE: &str = "metadata.version";

/// A feature and the levels this node supports, as a Kafka 4.4.0 controller advertises it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureSpec {
    pub name: &'static str,
    pub min_level: i16,
    pub max_level: i16,
}

/// The SupportedFeatures of a Kafka 4.4.0 controller (`unstable.feature.versions.enable`
/// off), captured from one, in the order it sends them. metadata.version runs from 3.3-IV3
/// (7), the oldest level KRaft supports, to 4.4-IV2 (33), the latest production release.
/// Finalized levels are kept per entry of this table (`FeatureState::levels`).
pub const SUPPORTED_FEATURES: [FeatureSpec; FEATURE_COUNT] = [
    feature("group.version", 0, 1),
    feature(KRAFT_VERSION_FEATURE, 0, KRAFT_VERSION_MAX),
    feature(METADATA_VERSION_FEATURE, 7, 33),
    feature("share.version", 0, 2),
    feature("streams.version", 0, 1),
    feature("transaction.version", 0, 2),
    feature("eligible.leader.replicas.version", 0, 1),
];
pub const FEATURE_COUNT: usize = 7;
const KRAFT_VERSION_INDEX: usize = 1;

const fn feature(name: &'static str, min_level: i16, max_level: i16) -> FeatureSpec {
    assert!(min_level >= 0 && min_level <= max_level);
    FeatureSpec {
        name,
        min_level,
        max_level,
    }
}

const _: () = assert!(matches!(
    SUPPORTED_FEATURES[KRAFT_VERSION_INDEX].name.as_bytes(),
    b"kraft.version"
));

/// The index of `name` in `SUPPORTED_FEATURES`.
pub fn feature_index(name: &str) -> Option<usize> {
    SUPPORTED_FEATURES.iter().position(|f| f.name == name)
}

/// The request body. Versions 0–2 have no fields (both strings empty); versions 0–4 have no
/// ClusterId (`None`) and NodeId (−1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiVersionsRequest {
    pub client_software_name: String,
    pub client_software_version: String,
    /// v5+ (KIP-1242): the cluster the client means to reach; `None` (null) when unknown.
    pub cluster_id: Option<String>,
    /// v5+ (KIP-1242): the node the client means to reach; −1 when unknown.
    pub node_id: i32,
}

impl Default for ApiVersionsRequest {
    fn default() -> Self {
        ApiVersionsRequest {
            client_software_name: String::new(),
            client_software_version: String::new(),
            cluster_id: None,
            node_id: -1,
        }
    }
}

impl ApiVersionsRequest {
    pub fn decode(r: &mut Reader<'_>, version: i16) -> DecodeResult<Self> {
        let mut out = ApiVersionsRequest::default();
        if version < 3 {
            return Ok(out);
        }
        out.client_software_name = r.string("ClientSoftwareName", true)?.to_owned();
        out.client_software_version = r.string("ClientSoftwareVersion", true)?.to_owned();
        if version >= 5 {
            out.cluster_id = r.nullable_string("ClusterId", true)?.map(str::to_owned);
            out.node_id = r.i32("NodeId")?;
        }
        r.skip_tagged_fields()?;
        Ok(out)
    }

    /// Writes the fields `version` has; ClusterId and NodeId are dropped below v5.
    pub fn encode(&self, w: &mut Writer, version: i16) {
        if version < 3 {
            return;
        }
        w.string(&self.client_software_name, true);
        w.string(&self.client_software_version, true);
        if version >= 5 {
            w.nullable_string(self.cluster_id.as_deref(), true);
            w.i32(self.node_id);
        }
        w.no_tagged_fields();
    }

    /// Kafka's `ApiVersionsRequest.isValid`: from v5, ClusterId and NodeId come both or
    /// neither; from v3, both software strings match KIP-511's
    /// `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?`.
    pub fn is_valid(&self, version: i16) -> bool {
        if version >= 5 && self.cluster_id.is_some() != (self.node_id != -1) {
            return false;
        }
        version < 3 || self.has_valid_client_software()
    }

    /// KIP-511: both strings must match `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?`.
    pub fn has_valid_client_software(&self) -> bool {
        is_valid_software_token(&self.client_software_name)
            && is_valid_software_token(&self.client_software_version)
    }
}

fn is_valid_software_token(s: &str) -> bool {
    let bytes = s.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'.')
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiVersionRange {
    pub api_key: i16,
    pub min_version: i16,
    pub max_version: i16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SupportedFeature {
    pub name: String,
    pub min_version: i16,
    pub max_version: i16,
}

/// A finalized feature. On the wire the max level comes before the min level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinalizedFeature {
    pub name: String,
    pub max_version_level: i16,
    pub min_version_level: i16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiVersionsResponse {
    pub error_code: ErrorCode,
    pub api_keys: Vec<ApiVersionRange>,
    /// v1+.
    pub throttle_time_ms: i32,
    /// Tag 0, v3+.
    pub supported_features: Vec<SupportedFeature>,
    /// Tag 1, v3+; −1 when unknown.
    pub finalized_features_epoch: i64,
    /// Tag 2, v3+.
    pub finalized_features: Vec<FinalizedFeature>,
    /// Tag 3, v3+; always false in Kafka 4.x.
    pub zk_migration_ready: bool,
}

impl Default for ApiVersionsResponse {
    fn default() -> Self {
        ApiVersionsResponse {
            error_code: ErrorCode::NONE,
            api_keys: Vec::new(),
            throttle_time_ms: 0,
            supported_features: Vec::new(),
            finalized_features_epoch: -1,
            finalized_features: Vec::new(),
            zk_migration_ready: false,
        }
    }
}

impl ApiVersionsResponse {
    pub fn encode(&self, w: &mut Writer, version: i16) {
        let flexible = version >= 3;
        w.i16(self.error_code.0);
        w.array_len(self.api_keys.len(), flexible);
        for key in &self.api_keys {
            w.i16(key.api_key);
            w.i16(key.min_version);
            w.i16(key.max_version);
            if flexible {
                w.no_tagged_fields();
            }
        }
        if version >= 1 {
            w.i32(self.throttle_time_ms);
        }
        if flexible {
            self.encode_tagged_fields(w);
        }
    }

    /// Tagged fields are written only when they differ from their defaults, in tag order.
    fn encode_tagged_fields(&self, w: &mut Writer) {
        let count = usize::from(!self.supported_features.is_empty())
            + usize::from(self.finalized_features_epoch != -1)
            + usize::from(!self.finalized_features.is_empty())
            + usize::from(self.zk_migration_ready);
        w.unsigned_varint(count as u32);
        if !self.supported_features.is_empty() {
            w.tagged_field(0, |w| {
                w.array_len(self.supported_features.len(), true);
                for f in &self.supported_features {
                    w.string(&f.name, true);
                    w.i16(f.min_version);
                    w.i16(f.max_version);
                    w.no_tagged_fields();
                }
            });
        }
        if self.finalized_features_epoch != -1 {
            w.tagged_field(1, |w| w.i64(self.finalized_features_epoch));
        }
        if !self.finalized_features.is_empty() {
            w.tagged_field(2, |w| {
                w.array_len(self.finalized_features.len(), true);
                for f in &self.finalized_features {
                    w.string(&f.name, true);
                    w.i16(f.max_version_level);
                    w.i16(f.min_version_level);
                    w.no_tagged_fields();
                }
            });
        }
        if self.zk_migration_ready {
            w.tagged_field(3, |w| w.bool(true));
        }
    }

    pub fn decode(r: &mut Reader<'_>, version: i16) -> DecodeResult<Self> {
        let flexible = version >= 3;
        let mut out = ApiVersionsResponse {
            error_code: ErrorCode(r.i16("ErrorCode")?),
            ..Default::default()
        };
        let element_bytes = if flexible { 7 } else { 6 };
        let count = r.array_len("ApiKeys", flexible, element_bytes)?;
        out.api_keys.reserve_exact(count);
        for _ in 0..count {
            out.api_keys.push(ApiVersionRange {
                api_key: r.i16("ApiKey")?,
                min_version: r.i16("MinVersion")?,
                max_version: r.i16("MaxVersion")?,
            });
            if flexible {
                r.skip_tagged_fields()?;
            }
        }
        if version >= 1 {
            out.throttle_time_ms = r.i32("ThrottleTimeMs")?;
        }
        if flexible {
            r.tagged_fields(|tag, body| out.decode_tagged_field(tag, body))?;
        }
        Ok(out)
    }

    fn decode_tagged_field(&mut self, tag: u32, r: &mut Reader<'_>) -> DecodeResult<bool> {
        match tag {
            0 => {
                let count = r.array_len("SupportedFeatures", true, 6)?;
                self.supported_features.reserve_exact(count);
                for _ in 0..count {
                    self.supported_features.push(SupportedFeature {
                        name: r.string("SupportedFeatures.Name", true)?.to_owned(),
                        min_version: r.i16("SupportedFeatures.MinVersion")?,
                        max_version: r.i16("SupportedFeatures.MaxVersion")?,
                    });
                    r.skip_tagged_fields()?;
                }
            }
            1 => self.finalized_features_epoch = r.i64("FinalizedFeaturesEpoch")?,
            2 => {
                let count = r.array_len("FinalizedFeatures", true, 6)?;
                self.finalized_features.reserve_exact(count);
                for _ in 0..count {
                    self.finalized_features.push(FinalizedFeature {
                        name: r.string("FinalizedFeatures.Name", true)?.to_owned(),
                        max_version_level: r.i16("FinalizedFeatures.MaxVersionLevel")?,
                        min_version_level: r.i16("FinalizedFeatures.MinVersionLevel")?,
                    });
                    r.skip_tagged_fields()?;
                }
            }
            3 => self.zk_migration_ready = r.bool("ZkMigrationReady")?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// What the node knows about its features when it answers: the finalized level of each
/// feature of `SUPPORTED_FEATURES` (0 when not finalized: kraft.version from the voter-set
/// records, the others from the bootstrap checkpoint's FeatureLevelRecords) and the offset of
/// the last record applied (−1 while unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureState {
    pub levels: [i16; FEATURE_COUNT],
    pub finalized_features_epoch: i64,
}

impl Default for FeatureState {
    fn default() -> Self {
        FeatureState {
            levels: [0; FEATURE_COUNT],
            finalized_features_epoch: -1,
        }
    }
}

impl FeatureState {
    pub fn kraft_version_level(&self) -> i16 {
        self.levels[KRAFT_VERSION_INDEX]
    }

    pub fn set_kraft_version_level(&mut self, level: i16) {
        self.levels[KRAFT_VERSION_INDEX] = level;
    }

    /// Applies a FeatureLevelRecord: `name` is finalized at `level` (0 removes it, as in
    /// Kafka's FeaturesImage). False, and nothing changes, for a feature outside
    /// `SUPPORTED_FEATURES` and for kraft.version, which follows the voter-set records only.
    pub fn apply_feature_level(&mut self, name: &str, level: i16) -> bool {
        match feature_index(name) {
            Some(i) if i != KRAFT_VERSION_INDEX && level >= 0 => {
                self.levels[i] = level;
                true
            }
            _ => false,
        }
    }

    /// The finalized features as Kafka lists them: every feature above level 0, with min and
    /// max both at its level, in `SUPPORTED_FEATURES` order. (A Kafka controller sends them in
    /// an order that differs from run to run; clients read them as a map.)
    pub fn finalized(&self) -> Vec<FinalizedFeature> {
        SUPPORTED_FEATURES
            .iter()
            .zip(self.levels)
            .filter(|(_, level)| *level > 0)
            .map(|(spec, level)| FinalizedFeature {
                name: spec.name.to_owned(),
                max_version_level: level,
                min_version_level: level,
            })
            .collect()
    }
}

/// The SupportedFeatures a client at `version` is sent. KAFKA-17011: clients before v4 cannot
/// parse a minimum of 0, so Kafka leaves those features out below v4 (ApiVersionsResponse
/// .maybeFilterSupportedFeatureKeys); only metadata.version (7..33) remains there.
pub fn supported_features(version: i16) -> Vec<SupportedFeature> {
    SUPPORTED_FEATURES
        .iter()
        .filter(|f| version >= 4 || f.min_level > 0)
        .map(|f| SupportedFeature {
            name: f.name.to_owned(),
            min_version: f.min_level,
            max_version: f.max_level,
        })
        .collect()
}

/// The response to a parsed ApiVersions request at a served `version` (docs/wire.md §6), as a
/// Kafka 4.4 controller gives it (`ControllerApis.handleApiVersionsRequest`): an invalid
/// request (`is_valid`) gets INVALID_REQUEST and nothing else; any other gets the served APIs
/// and the features. A controller does not compare a v5 request's ClusterId and NodeId with
/// its own: only Kafka's brokers answer REBOOTSTRAP_REQUIRED (`KafkaApis`), so ringraft, a
/// controller, does not either (KIP-1242; docs/wire.md §6).
pub fn answer(
    request: &ApiVersionsRequest,
    version: i16,
    served: &[ApiSpec],
    features: FeatureState,
) -> ApiVersionsResponse {
    assert!(
        apis::api_versions_spec().serves(version),
        "ApiVersions v{version} not served"
    );
    if !request.is_valid(version) {
        return ApiVersionsResponse {
            error_code: ErrorCode::INVALID_REQUEST,
            ..Default::default()
        };
    }
    let api_keys = served
        .iter()
        .map(|spec| ApiVersionRange {
            api_key: spec.key.0,
            min_version: spec.min_version,
            max_version: spec.max_version,
        })
        .collect();
    ApiVersionsResponse {
        api_keys,
        supported_features: supported_features(version),
        finalized_features_epoch: features.finalized_features_epoch,
        finalized_features: features.finalized(),
        ..Default::default()
    }
}

/// The v0-format answer to an ApiVersions request newer than this node serves: error
/// UNSUPPORTED_VERSION and a single entry saying which ApiVersions versions are served, so
/// the client can retry at `min(its max, ours)` (KIP-511).
pub fn unsupported_version_answer() -> ApiVersionsResponse {
    let spec = apis::api_versions_spec();
    ApiVersionsResponse {
        error_code: ErrorCode::UNSUPPORTED_VERSION,
        api_keys: vec![ApiVersionRange {
            api_key: spec.key.0,
            min_version: spec.min_version,
            max_version: spec.max_version,
        }],
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn software_token_rule() {
        for ok in [
            "apache-kafka-java",
            "4.0.0",
            "a",
            "librdkafka",
            "kafka-python",
            "1.2-rc1",
        ] {
            assert!(is_valid_software_token(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "a b", ".", "a_b", "é"] {
            assert!(!is_valid_software_token(bad), "{bad}");
        }
    }

    fn request(version: i16) -> ApiVersionsRequest {
        let mut req = ApiVersionsRequest {
            client_software_name: "x".into(),
            client_software_version: "1".into(),
            ..Default::default()
        };
        if version < 3 {
            req.client_software_name.clear();
            req.client_software_version.clear();
        }
        req
    }

    fn names(features: &[SupportedFeature]) -> Vec<&str> {
        features.iter().map(|f| f.name.as_str()).collect()
    }

    #[test]
    fn supported_features_are_kafka_4_4s_and_only_metadata_version_below_v4() {
        let v3 = answer_v(&request(3), 3);
        assert_eq!(names(&v3.supported_features), ["metadata.version"]);
        assert_eq!(
            (
                v3.supported_features[0].min_version,
                v3.supported_features[0].max_version
            ),
            (7, 33)
        );
        for version in [4, 5] {
            let answer = answer_v(&request(version), version);
            assert_eq!(
                names(&answer.supported_features),
                [
                    "group.version",
                    "kraft.version",
                    "metadata.version",
                    "share.version",
                    "streams.version",
                    "transaction.version",
                    "eligible.leader.replicas.version"
                ]
            );
            assert!(answer.finalized_features.is_empty(), "nothing is finalized");
        }
    }

    #[test]
    fn finalized_lists_the_levels_above_zero() {
        let mut features = FeatureState {
            finalized_features_epoch: 9,
            ..Default::default()
        };
        features.levels[feature_index("metadata.version").unwrap()] = 33;
        features.levels[feature_index("share.version").unwrap()] = 2;
        let answer = answer(&request(4), 4, apis::SERVED, features);
        assert_eq!(answer.finalized_features_epoch, 9);
        let listed: Vec<_> = answer
            .finalized_features
            .iter()
            .map(|f| (f.name.as_str(), f.min_version_level, f.max_version_level))
            .collect();
        assert_eq!(
            listed,
            [("metadata.version", 33, 33), ("share.version", 2, 2)]
        );
        assert!(features.apply_feature_level("share.version", 0));
        assert!(!features.apply_feature_level("kraft.version", 1));
        assert!(!features.apply_feature_level("no.such.version", 1));
        assert_eq!(
            features.finalized().len(),
            1,
            "share.version 0 is not finalized"
        );
        features.set_kraft_version_level(1);
        assert_eq!(features.kraft_version_level(), 1);
        assert_eq!(features.finalized()[0].name, "kraft.version");
    }

    #[test]
    fn v5_cluster_and_node_come_both_or_neither() {
        let mut req = request(5);
        assert!(req.is_valid(5));
        req.cluster_id = Some("MkU3OEVBNTcwNTJENDM2Qg".into());
        assert!(!req.is_valid(5), "a cluster id without a node id");
        assert_eq!(answer_v(&req, 5).error_code, ErrorCode::INVALID_REQUEST);
        req.node_id = 1;
        assert!(req.is_valid(5));
        // A controller answers whatever cluster and node the client names (ControllerApis).
        req.cluster_id = Some("AAAAAAAAAAAAAAAAAAAAAA".into());
        req.node_id = 2;
        assert_eq!(answer_v(&req, 5), answer_v(&request(5), 5));
        req.cluster_id = None;
        assert!(!req.is_valid(5), "a node id without a cluster id");
        // Below v5 the fields are not on the wire, so nothing is checked.
        assert!(req.is_valid(4));
    }

    #[test]
    fn v5_request_bytes_follow_the_schema() {
        // ApiVersionsRequest.json v5: compact strings, then a compact nullable string and an
        // int32, then tagged fields.
        let req = ApiVersionsRequest {
            client_software_name: "ab".into(),
            client_software_version: "1".into(),
            cluster_id: Some("c".into()),
            node_id: 2,
        };
        let mut w = Writer::new();
        req.encode(&mut w, 5);
        let bytes = w.into_vec();
        assert_eq!(bytes, [3, b'a', b'b', 2, b'1', 2, b'c', 0, 0, 0, 2, 0]);
        let decoded = ApiVersionsRequest::decode(&mut Reader::new(&bytes), 5).unwrap();
        assert_eq!(decoded, req);
        let null = ApiVersionsRequest {
            cluster_id: None,
            node_id: -1,
            ..req.clone()
        };
        let mut w = Writer::new();
        null.encode(&mut w, 5);
        assert_eq!(
            w.into_vec(),
            [3, b'a', b'b', 2, b'1', 0, 0xff, 0xff, 0xff, 0xff, 0]
        );
        let mut w = Writer::new();
        req.encode(&mut w, 4);
        assert_eq!(w.into_vec(), [3, b'a', b'b', 2, b'1', 0], "v4 drops them");
        assert!(ApiVersionsRequest::decode(&mut Reader::new(&bytes[..8]), 5).is_err());
    }

    #[test]
    fn bad_client_software_gets_invalid_request_at_the_requested_version() {
        let req = ApiVersionsRequest {
            client_software_name: "bad name".into(),
            client_software_version: "1".into(),
            ..Default::default()
        };
        let refused = answer_v(&req, 3);
        assert_eq!(refused.error_code, ErrorCode::INVALID_REQUEST);
        assert!(refused.api_keys.is_empty());
        // Versions 0-2 carry no software fields, so nothing to refuse there.
        assert_eq!(answer_v(&req, 2).error_code, ErrorCode::NONE);
    }

    #[test]
    fn invalid_v5_answer_bytes_are_kafkas() {
        // A Kafka 4.4.0 controller's body for a v5 request naming a node but no cluster.
        let mut w = Writer::new();
        let req = ApiVersionsRequest {
            node_id: 2,
            ..request(5)
        };
        answer_v(&req, 5).encode(&mut w, 5);
        assert_eq!(w.into_vec(), [0x00, 0x2a, 0x01, 0, 0, 0, 0, 0x00]);
    }

    fn answer_v(req: &ApiVersionsRequest, version: i16) -> ApiVersionsResponse {
        answer(req, version, apis::SERVED, FeatureState::default())
    }

    #[test]
    fn unsupported_version_fallback_bytes_match_the_spec() {
        // docs/wire.md §6: 00000010 00000007 0023 00000001 0012 0000 0005 (with frame + header)
        let mut w = Writer::new();
        unsupported_version_answer().encode(&mut w, 0);
        assert_eq!(
            w.into_vec(),
            [0x00, 0x23, 0, 0, 0, 1, 0x00, 0x12, 0, 0, 0, 5]
        );
    }
}
