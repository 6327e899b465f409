//! UpdateFeatures (key 57), versions 0–2, flexible in every version (docs/wire.md §8.9,
//! docs/membership.md §10; KIP-584, KIP-778 replaces `AllowDowngrade` by `UpgradeType` and adds
//! `ValidateOnly` in v1, v2 answers without per-feature results). Kafka 4.1 through 4.4 serve
//! 0–2 on controllers; `kafka-features --bootstrap-controller` sends it to the active one.
//!
//! Owns the request and response types and their checked decoders and encoders; no state, no
//! I/O. Field names and defaults follow Kafka 4.4's schemas (the same as 4.1's). `encode`
//! writes only the fields the version has: fields it lacks are dropped. `AllowDowngrade`,
//! `UpgradeType` and `ValidateOnly` are not ignorable in Kafka, so a sender picks the version
//! first (`UpdateFeaturesRequest::min_version`) and a receiver reads the update's kind through
//! `FeatureUpdateKey::upgrade_type`, which knows what v0 meant.

use std::ops::RangeInclusive;

use bytes::Bytes;

use super::codec::{DecodeResult, Reader, Writer};
use super::errors::ErrorCode;
use super::kraft::unsupported_version;

/// The versions these codecs read and write. Every one is flexible.
pub const VERSIONS: RangeInclusive<i16> = 0..=2;

/// `UpgradeType` values (v1+). Kafka reads any other value as an unknown type.
pub const UPGRADE_TYPE_UPGRADE: i8 = 1;
pub const UPGRADE_TYPE_SAFE_DOWNGRADE: i8 = 2;
pub const UPGRADE_TYPE_UNSAFE_DOWNGRADE: i8 = 3;

/// `timeoutMs` when the sender sets none.
pub const DEFAULT_TIMEOUT_MS: i32 = 60_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateFeaturesRequest {
    /// Kafka spells this field `timeoutMs`; 60000 by default.
    pub timeout_ms: i32,
    /// Keyed by feature name in Kafka; kept in wire order here, duplicates included.
    pub feature_updates: Vec<FeatureUpdateKey>,
    /// v1+, not ignorable: check the updates without applying them.
    pub validate_only: bool,
}

impl Default for UpdateFeaturesRequest {
    fn default() -> Self {
        UpdateFeaturesRequest {
            timeout_ms: DEFAULT_TIMEOUT_MS,
            feature_updates: Vec::new(),
            validate_only: false,
        }
    }
}

/// One requested change of a finalized feature level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureUpdateKey {
    pub feature: String,
    /// The new level; below 1 asks to delete the feature (with a downgrade type).
    pub max_version_level: i16,
    /// v0 only, not ignorable: a downgrade is allowed (read as a safe downgrade).
    pub allow_downgrade: bool,
    /// v1+, not ignorable: `UPGRADE_TYPE_UPGRADE` (1) by default.
    pub upgrade_type: i8,
}

impl Default for FeatureUpdateKey {
    fn default() -> Self {
        FeatureUpdateKey {
            feature: String::new(),
            max_version_level: 0,
            allow_downgrade: false,
            upgrade_type: UPGRADE_TYPE_UPGRADE,
        }
    }
}

impl UpdateFeaturesRequest {
    pub fn decode(r: &mut Reader<'_>, version: i16, _frame: &Bytes) -> DecodeResult<Self> {
        if !VERSIONS.contains(&version) {
            return Err(unsupported_version());
        }
        let mut out = UpdateFeaturesRequest {
            timeout_ms: r.i32("timeoutMs")?,
            feature_updates: r.array_of(
                "FeatureUpdates",
                true,
                FeatureUpdateKey::MIN_BYTES,
                |r| FeatureUpdateKey::decode(r, version),
            )?,
            validate_only: false,
        };
        if version >= 1 {
            out.validate_only = r.bool("ValidateOnly")?;
        }
        r.skip_tagged_fields()?;
        Ok(out)
    }

    pub fn encode(&self, w: &mut Writer, version: i16) {
        assert!(
            VERSIONS.contains(&version),
            "UpdateFeatures v{version} is not supported"
        );
        w.i32(self.timeout_ms);
        w.array_of(&self.feature_updates, true, |w, u| u.encode(w, version));
        if version >= 1 {
            w.bool(self.validate_only);
        }
        w.no_tagged_fields();
    }

    /// The lowest version that carries every field set here: 1 for a validate-only request or
    /// an upgrade type other than a plain upgrade, else 0. `allow_downgrade` exists only in v0;
    /// a sender that wants a downgrade at v1+ sets `upgrade_type` instead.
    pub fn min_version(&self) -> i16 {
        let typed = self
            .feature_updates
            .iter()
            .any(|u| u.upgrade_type != UPGRADE_TYPE_UPGRADE);
        if self.validate_only || typed {
            1
        } else {
            0
        }
    }
}

impl FeatureUpdateKey {
    /// Empty name, int16, one bool or int8, an empty tag section.
    const MIN_BYTES: usize = 1 + 2 + 1 + 1;

    fn decode(r: &mut Reader<'_>, version: i16) -> DecodeResult<Self> {
        let mut out = FeatureUpdateKey {
            feature: r.string("Feature", true)?.to_owned(),
            max_version_level: r.i16("MaxVersionLevel")?,
            ..Default::default()
        };
        if version == 0 {
            out.allow_downgrade = r.bool("AllowDowngrade")?;
        } else {
            out.upgrade_type = r.i8("UpgradeType")?;
        }
        r.skip_tagged_fields()?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer, version: i16) {
        w.string(&self.feature, true);
        w.i16(self.max_version_level);
        if version == 0 {
            w.bool(self.allow_downgrade);
        } else {
            w.i8(self.upgrade_type);
        }
        w.no_tagged_fields();
    }

    /// The kind of update as Kafka's controller reads it from a request at `version`: at v0,
    /// `AllowDowngrade` means a safe downgrade and its absence an upgrade; from v1 the
    /// `UpgradeType` field as sent (possibly a value Kafka does not know).
    pub fn upgrade_type(&self, version: i16) -> i8 {
        match (version, self.allow_downgrade) {
            (0, true) => UPGRADE_TYPE_SAFE_DOWNGRADE,
            (0, false) => UPGRADE_TYPE_UPGRADE,
            _ => self.upgrade_type,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateFeaturesResponse {
    pub throttle_time_ms: i32,
    /// Top-level error. Kafka's admin client fails every update with it when it is not NONE
    /// (NOT_CONTROLLER makes it look for the active controller again).
    pub error_code: ErrorCode,
    /// Nullable; the empty string by default (the schema gives none). Null on success.
    pub error_message: Option<String>,
    /// v0–1 only, ignorable: one result per requested feature. Kafka's admin client reads a
    /// top-level NONE with no results as success for every update.
    pub results: Vec<UpdatableFeatureResult>,
}

impl Default for UpdateFeaturesResponse {
    fn default() -> Self {
        UpdateFeaturesResponse {
            throttle_time_ms: 0,
            error_code: ErrorCode::NONE,
            error_message: Some(String::new()),
            results: Vec::new(),
        }
    }
}

/// The outcome of one feature update (v0–1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdatableFeatureResult {
    pub feature: String,
    pub error_code: ErrorCode,
    /// Nullable; the empty string by default. Null on success.
    pub error_message: Option<String>,
}

impl Default for UpdatableFeatureResult {
    fn default() -> Self {
        UpdatableFeatureResult {
            feature: String::new(),
            error_code: ErrorCode::NONE,
            error_message: Some(String::new()),
        }
    }
}

impl UpdateFeaturesResponse {
    pub fn decode(r: &mut Reader<'_>, version: i16, _frame: &Bytes) -> DecodeResult<Self> {
        if !VERSIONS.contains(&version) {
            return Err(unsupported_version());
        }
        let mut out = UpdateFeaturesResponse {
            throttle_time_ms: r.i32("ThrottleTimeMs")?,
            error_code: ErrorCode(r.i16("ErrorCode")?),
            error_message: r.nullable_string("ErrorMessage", true)?.map(str::to_owned),
            results: Vec::new(),
        };
        if version <= 1 {
            out.results = r.array_of(
                "Results",
                true,
                UpdatableFeatureResult::MIN_BYTES,
                UpdatableFeatureResult::decode,
            )?;
        }
        r.skip_tagged_fields()?;
        Ok(out)
    }

    pub fn encode(&self, w: &mut Writer, version: i16) {
        assert!(
            VERSIONS.contains(&version),
            "UpdateFeatures v{version} is not supported"
        );
        w.i32(self.throttle_time_ms);
        w.i16(self.error_code.0);
        w.nullable_string(self.error_message.as_deref(), true);
        if version <= 1 {
            w.array_of(&self.results, true, |w, r| r.encode(w));
        }
        w.no_tagged_fields();
    }
}

impl UpdatableFeatureResult {
    /// Empty name, int16, null message, an empty tag section.
    const MIN_BYTES: usize = 1 + 2 + 1 + 1;

    fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let out = UpdatableFeatureResult {
            feature: r.string("Results.Feature", true)?.to_owned(),
            error_code: ErrorCode(r.i16("Results.ErrorCode")?),
            error_message: r
                .nullable_string("Results.ErrorMessage", true)?
                .map(str::to_owned),
        };
        r.skip_tagged_fields()?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer) {
        w.string(&self.feature, true);
        w.i16(self.error_code.0);
        w.nullable_string(self.error_message.as_deref(), true);
        w.no_tagged_fields();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::codec::DecodeError;

    fn encoded<F: FnOnce(&mut Writer)>(f: F) -> Bytes {
        let mut w = Writer::new();
        f(&mut w);
        Bytes::from(w.into_vec())
    }

    /// What `kafka-features upgrade --feature kraft.version=1` sends.
    fn kraft_upgrade() -> UpdateFeaturesRequest {
        UpdateFeaturesRequest {
            timeout_ms: 30_000,
            feature_updates: vec![FeatureUpdateKey {
                feature: "kraft.version".into(),
                max_version_level: 1,
                ..Default::default()
            }],
            validate_only: false,
        }
    }

    #[test]
    fn v0_carries_allow_downgrade_and_v1_upgrade_type_and_validate_only() {
        let req = kraft_upgrade();
        assert_eq!(req.min_version(), 0);
        let v0 = encoded(|w| req.encode(w, 0));
        // timeoutMs, FeatureUpdates, name (14), level, AllowDowngrade, two tag sections.
        assert_eq!(v0.len(), 4 + 1 + 14 + 2 + 1 + 1 + 1);
        assert_eq!(&v0[v0.len() - 5..], [0, 1, 0, 0, 0]);
        let v1 = encoded(|w| req.encode(w, 1));
        // UpgradeType 1 in place of AllowDowngrade, then ValidateOnly.
        assert_eq!(v1.len(), v0.len() + 1);
        assert_eq!(&v1[v1.len() - 5..], [1, 1, 0, 0, 0]);
        assert_eq!(
            encoded(|w| req.encode(w, 2)),
            v1,
            "v2 requests are v1 requests"
        );
        for version in VERSIONS {
            let bytes = encoded(|w| req.encode(w, version));
            let back = UpdateFeaturesRequest::decode(&mut Reader::new(&bytes), version, &bytes);
            assert_eq!(back.unwrap(), req);
        }
    }

    #[test]
    fn upgrade_type_reads_v0_allow_downgrade_as_a_safe_downgrade() {
        let down = FeatureUpdateKey {
            feature: "metadata.version".into(),
            max_version_level: 21,
            allow_downgrade: true,
            upgrade_type: UPGRADE_TYPE_UPGRADE,
        };
        assert_eq!(down.upgrade_type(0), UPGRADE_TYPE_SAFE_DOWNGRADE);
        assert_eq!(down.upgrade_type(1), UPGRADE_TYPE_UPGRADE);
        let req = UpdateFeaturesRequest {
            feature_updates: vec![down.clone()],
            validate_only: true,
            ..Default::default()
        };
        assert_eq!(req.min_version(), 1);
        // At v1 AllowDowngrade is dropped and ValidateOnly kept; at v0 the reverse.
        let v1 = encoded(|w| req.encode(w, 1));
        let back = UpdateFeaturesRequest::decode(&mut Reader::new(&v1), 1, &v1).unwrap();
        assert!(back.validate_only && !back.feature_updates[0].allow_downgrade);
        let v0 = encoded(|w| req.encode(w, 0));
        let back = UpdateFeaturesRequest::decode(&mut Reader::new(&v0), 0, &v0).unwrap();
        assert!(!back.validate_only && back.feature_updates[0].allow_downgrade);
        assert_eq!(back.timeout_ms, DEFAULT_TIMEOUT_MS);
    }

    #[test]
    fn v2_response_has_no_results() {
        let resp = UpdateFeaturesResponse {
            throttle_time_ms: 0,
            error_code: ErrorCode::NONE,
            error_message: None,
            results: vec![UpdatableFeatureResult {
                feature: "kraft.version".into(),
                error_code: ErrorCode::INVALID_UPDATE_VERSION,
                error_message: Some("voter 3 does not support 1".into()),
            }],
        };
        for version in 0..=1 {
            let bytes = encoded(|w| resp.encode(w, version));
            let back = UpdateFeaturesResponse::decode(&mut Reader::new(&bytes), version, &bytes);
            assert_eq!(back.unwrap(), resp);
        }
        let v2 = encoded(|w| resp.encode(w, 2));
        assert_eq!(&v2[..], [0, 0, 0, 0, 0, 0, 0, 0]);
        let back = UpdateFeaturesResponse::decode(&mut Reader::new(&v2), 2, &v2).unwrap();
        assert!(back.results.is_empty());
    }

    #[test]
    fn hostile_counts_are_refused_and_versions_checked() {
        // timeoutMs, then 2^28 - 2 updates with one byte left.
        let hostile = Bytes::from_static(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f, 0]);
        assert!(matches!(
            UpdateFeaturesRequest::decode(&mut Reader::new(&hostile), 2, &hostile),
            Err(DecodeError::Truncated {
                field: "FeatureUpdates",
                ..
            })
        ));
        let empty = Bytes::new();
        for version in [-1, 3] {
            assert!(matches!(
                UpdateFeaturesRequest::decode(&mut Reader::new(&empty), version, &empty),
                Err(DecodeError::Invalid {
                    field: "version",
                    ..
                })
            ));
            assert!(
                UpdateFeaturesResponse::decode(&mut Reader::new(&empty), version, &empty).is_err()
            );
        }
    }

    #[test]
    fn minimum_sizes_are_exact() {
        let size = |f: &dyn Fn(&mut Writer)| {
            let mut w = Writer::new();
            f(&mut w);
            w.len()
        };
        for version in VERSIONS {
            assert_eq!(
                size(&|w| FeatureUpdateKey::default().encode(w, version)),
                FeatureUpdateKey::MIN_BYTES
            );
        }
        let null = UpdatableFeatureResult {
            error_message: None,
            ..Default::default()
        };
        assert_eq!(size(&|w| null.encode(w)), UpdatableFeatureResult::MIN_BYTES);
    }
}
