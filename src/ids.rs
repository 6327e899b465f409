//! Identifiers that get mixed up if they are bare integers, and Kafka's text form of a UUID:
//! URL-safe base64 without padding, 22 characters (docs/wire.md §2).

use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use uuid::Uuid;

/// A replica's `node.id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub i32);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A log directory's `directory.id` (KIP-853 replica directory id). ZERO means unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DirectoryId(pub Uuid);

impl fmt::Display for DirectoryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&uuid_to_kafka_string(&self.0))
    }
}

/// Kafka's text form of a UUID.
pub fn uuid_to_kafka_string(uuid: &Uuid) -> String {
    URL_SAFE_NO_PAD.encode(uuid.as_bytes())
}

/// Why a text is not Kafka's form of a UUID. The text is kept to show it (escaped: it may
/// come from a file or a peer).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UuidTextError {
    #[error("{0:?} is not a 22-character base64url UUID")]
    Length(String),
    #[error("{text:?} is not a base64url UUID: {why}")]
    Base64 {
        text: String,
        why: base64::DecodeError,
    },
}

/// Parses Kafka's text form; the error says why the text is not one.
pub fn parse_kafka_uuid(text: &str) -> Result<Uuid, UuidTextError> {
    // 22 base64 characters without padding always decode to 16 bytes.
    if text.len() != 22 {
        return Err(UuidTextError::Length(text.to_owned()));
    }
    let bytes = URL_SAFE_NO_PAD
        .decode(text)
        .map_err(|why| UuidTextError::Base64 {
            text: text.to_owned(),
            why,
        })?;
    let bytes: [u8; 16] = bytes
        .try_into()
        .map_err(|_| UuidTextError::Length(text.to_owned()))?;
    Ok(Uuid::from_bytes(bytes))
}

/// A random UUID as Kafka's `Uuid.randomUuid` makes them: never one of the reserved values
/// (most significant half 0 and least significant half below 100, KIP-858) and never one whose
/// text starts with '-' (it would read as a command-line flag).
pub fn random_kafka_uuid() -> Uuid {
    loop {
        let uuid = Uuid::new_v4();
        let (high, low) = uuid.as_u64_pair();
        let reserved = high == 0 && low < 100;
        if !reserved && !uuid_to_kafka_string(&uuid).starts_with('-') {
            return uuid;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_topic_id_text() {
        let id = Uuid::from_u64_pair(0, 1);
        assert_eq!(uuid_to_kafka_string(&id), "AAAAAAAAAAAAAAAAAAAAAQ");
        assert_eq!(parse_kafka_uuid("AAAAAAAAAAAAAAAAAAAAAQ").unwrap(), id);
    }

    #[test]
    fn random_ids_round_trip_and_avoid_dash() {
        for _ in 0..1000 {
            let id = random_kafka_uuid();
            let text = uuid_to_kafka_string(&id);
            assert_eq!(text.len(), 22);
            assert!(!text.starts_with('-'));
            assert_eq!(parse_kafka_uuid(&text).unwrap(), id);
        }
        assert!(parse_kafka_uuid("short").is_err());
        assert!(parse_kafka_uuid("!!!!!!!!!!!!!!!!!!!!!!").is_err());
    }
}
