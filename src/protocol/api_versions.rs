//! ApiVersions (key 18), versions 0–4, flexible from 3 (docs/wire.md §6, KIP-35, KIP-511).
//!
//! Owns the message types, their checked decoders and encoders, and `answer`, the pure
//! function that turns a request into the node's response. It must not know about sockets.

use super::apis::{self, ApiSpec};
use super::codec::{DecodeResult, Reader, Writer};
use super::errors::ErrorCode;

/// `kraft.version`: the feature KIP-853 adds; level 1 means a dynamic (log-kept) voter set.
pub const KRAFT_VERSION_FEATURE: &str = "kraft.version";
pub const KRAFT_VERSION_MAX: i16 = 1;

/// The request body. Versions 0–2 have no fields; both strings are then empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiVersionsRequest {
    pub client_software_name: String,
    pub client_software_version: String,
}

impl ApiVersionsRequest {
    pub fn decode(r: &mut Reader<'_>, version: i16) -> DecodeResult<Self> {
        if version < 3 {
            return Ok(Self::default());
        }
        let client_software_name = r.string("ClientSoftwareName", true)?.to_owned();
        let client_software_version = r.string("ClientSoftwareVersion", true)?.to_owned();
        r.skip_tagged_fields()?;
        Ok(ApiVersionsRequest {
            client_software_name,
            client_software_version,
        })
    }

    pub fn encode(&self, w: &mut Writer, version: i16) {
        if version < 3 {
            return;
        }
        w.string(&self.client_software_name, true);
        w.string(&self.client_software_version, true);
        w.no_tagged_fields();
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

/// What the node knows about its features when it answers: the finalized `kraft.version` level
/// and the offset of the last record applied (−1 while unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureState {
    pub kraft_version_level: i16,
    pub finalized_features_epoch: i64,
}

impl Default for FeatureState {
    fn default() -> Self {
        FeatureState {
            kraft_version_level: 0,
            finalized_features_epoch: -1,
        }
    }
}

/// The response to a parsed ApiVersions request at a served `version` (docs/wire.md §6).
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
    if version >= 3 && !request.has_valid_client_software() {
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
    let mut supported = vec![SupportedFeature {
        name: KRAFT_VERSION_FEATURE.to_owned(),
        min_version: 0,
        max_version: KRAFT_VERSION_MAX,
    }];
    // KAFKA-17011: clients older than v4 cannot parse a supported feature whose minimum is 0.
    if version < 4 {
        supported.retain(|f| f.min_version > 0);
    }
    let mut finalized = Vec::new();
    if features.kraft_version_level > 0 {
        finalized.push(FinalizedFeature {
            name: KRAFT_VERSION_FEATURE.to_owned(),
            max_version_level: features.kraft_version_level,
            min_version_level: features.kraft_version_level,
        });
    }
    ApiVersionsResponse {
        api_keys,
        supported_features: supported,
        finalized_features_epoch: features.finalized_features_epoch,
        finalized_features: finalized,
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

    #[test]
    fn kraft_version_is_hidden_below_v4() {
        let req = ApiVersionsRequest {
            client_software_name: "x".into(),
            client_software_version: "1".into(),
        };
        let v3 = answer_v(&req, 3);
        assert!(v3.supported_features.is_empty());
        let v4 = answer_v(&req, 4);
        assert_eq!(v4.supported_features.len(), 1);
        assert_eq!(v4.supported_features[0].name, "kraft.version");
        assert!(
            v4.finalized_features.is_empty(),
            "level 0 is never listed as finalized"
        );
    }

    #[test]
    fn bad_client_software_gets_invalid_request_at_the_requested_version() {
        let req = ApiVersionsRequest {
            client_software_name: "bad name".into(),
            client_software_version: "1".into(),
        };
        let refused = answer_v(&req, 3);
        assert_eq!(refused.error_code, ErrorCode::INVALID_REQUEST);
        assert!(refused.api_keys.is_empty());
        // Versions 0-2 carry no software fields, so nothing to refuse there.
        assert_eq!(answer_v(&req, 2).error_code, ErrorCode::NONE);
    }

    fn answer_v(req: &ApiVersionsRequest, version: i16) -> ApiVersionsResponse {
        answer(req, version, apis::SERVED, FeatureState::default())
    }

    #[test]
    fn unsupported_version_fallback_bytes_match_the_spec() {
        // docs/wire.md §6: 00000010 00000007 0023 00000001 0012 0000 0004 (with frame + header)
        let mut w = Writer::new();
        unsupported_version_answer().encode(&mut w, 0);
        assert_eq!(
            w.into_vec(),
            [0x00, 0x23, 0, 0, 0, 1, 0x00, 0x12, 0, 0, 0, 4]
        );
    }
}
