//! Configuration: `server.properties` with Kafka's key names verbatim (`server`), the Java
//! properties text format (`properties`), and core placement from `tuning/*.toml` (`tuning`).

pub mod properties;
pub mod server;
pub mod tuning;

pub use properties::Properties;
pub use server::{ConfigError, ServerConfig};
pub use tuning::{Role, Tuning};
