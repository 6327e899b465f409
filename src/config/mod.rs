//! Configuration: `server.properties` with Kafka's key names verbatim (`server`), the Java
//! properties text format (`properties`), core placement from `tuning/*.toml` (`tuning`), and the
//! KIP-853 voter strings of `storage format` (`dynamic_voters`).

pub mod dynamic_voters;
pub mod groups;
pub mod properties;
pub mod server;
pub mod tls;
pub mod tuning;

pub use properties::Properties;
pub use server::{ConfigError, ServerConfig};
pub use tuning::{Role, Tuning};
