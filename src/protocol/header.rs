//! Request and response headers (docs/wire.md §3). The request header's version depends on the
//! API and its version, so the decoder reads key and version first, then the rest.

use super::codec::{DecodeResult, Reader, Writer};

/// A decoded request header (v1 or v2). A null client id is kept as `None`; Kafka treats it
/// as the empty string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHeader {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
}

impl RequestHeader {
    /// The two fields that decide how the rest of the frame is parsed. `None` when the frame is
    /// too short to hold them.
    pub fn peek_key_version(frame: &[u8]) -> Option<(i16, i16)> {
        let key = i16::from_be_bytes(frame.get(0..2)?.try_into().ok()?);
        let version = i16::from_be_bytes(frame.get(2..4)?.try_into().ok()?);
        Some((key, version))
    }

    /// Decodes a header of `header_version` (1 or 2). The client id is always an int16-length
    /// string, even in v2; v2 adds a tagged-field section.
    pub fn decode(r: &mut Reader<'_>, header_version: i16) -> DecodeResult<RequestHeader> {
        assert!(
            header_version == 1 || header_version == 2,
            "header v{header_version}"
        );
        let api_key = r.i16("RequestApiKey")?;
        let api_version = r.i16("RequestApiVersion")?;
        let correlation_id = r.i32("CorrelationId")?;
        let client_id = r.nullable_string("ClientId", false)?.map(str::to_owned);
        if header_version == 2 {
            r.skip_tagged_fields()?;
        }
        Ok(RequestHeader {
            api_key,
            api_version,
            correlation_id,
            client_id,
        })
    }

    pub fn encode(&self, w: &mut Writer, header_version: i16) {
        assert!(
            header_version == 1 || header_version == 2,
            "header v{header_version}"
        );
        w.i16(self.api_key);
        w.i16(self.api_version);
        w.i32(self.correlation_id);
        w.nullable_string(self.client_id.as_deref(), false);
        if header_version == 2 {
            w.no_tagged_fields();
        }
    }
}

/// Writes a response header of `header_version` (0 or 1).
pub fn encode_response_header(w: &mut Writer, correlation_id: i32, header_version: i16) {
    assert!(
        header_version == 0 || header_version == 1,
        "response header v{header_version}"
    );
    w.i32(correlation_id);
    if header_version == 1 {
        w.no_tagged_fields();
    }
}

/// Reads a response header of `header_version` and returns the correlation id.
pub fn decode_response_header(r: &mut Reader<'_>, header_version: i16) -> DecodeResult<i32> {
    let correlation_id = r.i32("CorrelationId")?;
    if header_version == 1 {
        r.skip_tagged_fields()?;
    }
    Ok(correlation_id)
}
