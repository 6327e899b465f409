//! The Kafka wire protocol: checked decoders, encoders, headers, the table of served APIs and
//! error codes (spec/wire.md). No state and no I/O: sockets live in `net/`.

pub mod api_versions;
pub mod apis;
pub mod codec;
pub mod errors;
pub mod header;
pub mod request;

pub use apis::{ApiKey, ApiSpec};
pub use codec::{DecodeError, Reader, Writer};
pub use errors::ErrorCode;
pub use request::{decode_request, Decoded, RequestBody, RequestError};
