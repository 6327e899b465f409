//! The one metadata record the format tool writes (docs/records.md §6): `FeatureLevelRecord`
//! (api key 12, version 0, flexible), framed as Kafka frames every metadata data record —
//! `uvarint frameVersion (1) · uvarint apiKey · uvarint version · body`. ringraft never
//! interprets metadata records otherwise; this exists so that a formatted directory carries the
//! feature levels a Kafka controller expects. Pure values.

use crate::protocol::codec::{DecodeError, DecodeResult, Reader, Writer};

pub const FRAME_VERSION: u32 = 1;
pub const FEATURE_LEVEL_RECORD_API_KEY: u32 = 12;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureLevelRecord {
    pub name: String,
    pub feature_level: i16,
}

impl FeatureLevelRecord {
    /// The framed record value, at record version 0.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.unsigned_varint(FRAME_VERSION);
        w.unsigned_varint(FEATURE_LEVEL_RECORD_API_KEY);
        w.unsigned_varint(0);
        w.string(&self.name, true);
        w.i16(self.feature_level);
        w.no_tagged_fields();
        w.into_vec()
    }

    /// Decodes a framed record value; `Ok(None)` for any other metadata record type.
    pub fn decode(value: &[u8]) -> DecodeResult<Option<FeatureLevelRecord>> {
        let mut r = Reader::new(value);
        if r.unsigned_varint("FrameVersion")? != FRAME_VERSION {
            return Err(DecodeError::Invalid {
                field: "FrameVersion",
                why: "not 1",
            });
        }
        if r.unsigned_varint("ApiKey")? != FEATURE_LEVEL_RECORD_API_KEY {
            return Ok(None);
        }
        r.unsigned_varint("Version")?;
        let name = r.string("FeatureLevelRecord.Name", true)?.to_owned();
        let feature_level = r.i16("FeatureLevelRecord.FeatureLevel")?;
        r.skip_tagged_fields()?;
        Ok(Some(FeatureLevelRecord {
            name,
            feature_level,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_like_kafka() {
        // From a 4.4.0 `kafka-storage format` checkpoint: metadata.version at level 33.
        let record = FeatureLevelRecord {
            name: "metadata.version".into(),
            feature_level: 33,
        };
        let mut want = vec![0x01, 0x0c, 0x00, 0x11];
        want.extend_from_slice(b"metadata.version");
        want.extend_from_slice(&[0x00, 0x21, 0x00]);
        assert_eq!(record.encode(), want);
        assert_eq!(FeatureLevelRecord::decode(&want).unwrap(), Some(record));
        assert_eq!(FeatureLevelRecord::decode(&[1, 23, 0, 0]).unwrap(), None);
        assert!(FeatureLevelRecord::decode(&[2, 12]).is_err());
        assert!(FeatureLevelRecord::decode(&want[..6]).is_err());
    }
}
