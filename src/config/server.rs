//! `server.properties` → `ServerConfig`: Kafka's controller keys verbatim, Kafka's defaults
//! (docs/tools.md §5), and validation that names the key, the value and why it is wrong.
//! Unknown keys are kept as warnings, not errors, so a real Kafka controller's file loads.

use std::fmt;
use std::path::PathBuf;

use super::properties::Properties;
use crate::constants as c;

/// A config value that cannot be used. Display: `invalid value "V" for key K: WHY`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub key: String,
    pub value: String,
    pub why: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid value {:?} for key {}: {}",
            self.value, self.key, self.why
        )
    }
}

impl std::error::Error for ConfigError {}

fn invalid(key: &str, value: &str, why: impl ToString) -> ConfigError {
    ConfigError {
        key: key.to_owned(),
        value: value.to_owned(),
        why: why.to_string(),
    }
}

/// One entry of `listeners`: `NAME://host:port`. An empty host binds every interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub name: String,
    pub host: String,
    pub port: u16,
}

impl fmt::Display for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "{}://[{}]:{}", self.name, self.host, self.port)
        } else {
            write!(f, "{}://{}:{}", self.name, self.host, self.port)
        }
    }
}

/// A static voter from `controller.quorum.voters`: `id@host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticVoter {
    pub id: i32,
    pub host: String,
    pub port: u16,
}

/// A `host:port` from `controller.quorum.bootstrap.servers`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    pub host: String,
    pub port: u16,
}

/// The typed server configuration. Field names follow the keys; units are in the names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    pub process_roles: Vec<String>,
    pub node_id: i32,
    pub listeners: Vec<Listener>,
    pub advertised_listeners: Vec<Listener>,
    pub controller_listener_names: Vec<String>,
    pub listener_security_protocol_map: Vec<(String, String)>,
    pub controller_quorum_voters: Vec<StaticVoter>,
    pub controller_quorum_bootstrap_servers: Vec<HostPort>,
    pub election_timeout_ms: i32,
    pub fetch_timeout_ms: i32,
    pub election_backoff_max_ms: i32,
    pub append_linger_ms: i32,
    pub request_timeout_ms: i32,
    pub retry_backoff_ms: i32,
    pub auto_join_enable: bool,
    pub fetch_max_bytes: i32,
    pub fetch_snapshot_max_bytes: i32,
    pub metadata_log_dir: Option<PathBuf>,
    pub log_dirs: Vec<PathBuf>,
    pub metadata_log_segment_bytes: i32,
    pub metadata_log_segment_min_bytes: i32,
    pub metadata_log_segment_ms: i64,
    pub metadata_max_retention_bytes: i64,
    pub metadata_max_retention_ms: i64,
    pub metadata_max_idle_interval_ms: i32,
    pub metadata_log_max_snapshot_interval_ms: i64,
    pub metadata_log_max_record_bytes_between_snapshots: i64,
    pub socket_request_max_bytes: i32,
    /// `queued.max.request.bytes`; −1: no bound (Kafka's default, not ringraft's).
    pub queued_max_request_bytes: i64,
    pub connections_max_idle_ms: i64,
    pub unstable_api_versions_enable: bool,
    /// `ringraft.admin.listener` (host:port): the HTTP listener of `/metrics`, `/livez` and
    /// `/readyz`. Unset or empty: none (the embedded default sets 127.0.0.1:9094).
    pub admin_listener: Option<HostPort>,
    /// `ringraft.leadership`: `voter` (the default) campaigns like any voter; `witness` votes,
    /// stores and replicates but leaves leading to the other voters (docs/raft.md §15).
    pub witness: bool,
    /// `ringraft.batch.cache.bytes`: each fetch shard's batch cache; the raft shard's is half
    /// (`constants::BATCH_CACHE_BYTES_DEFAULT`).
    pub batch_cache_bytes: i64,
    /// `ringraft.fetch.observer.interval.ms`: a caught-up observer's Fetch is answered at most
    /// once per this interval (`fetch::pacing`; 0: at once).
    pub fetch_observer_interval_ms: i64,
    /// `ringraft.log.append.enable`: serve Produce for `__cluster_metadata-0` (`ringraft log
    /// append`). False by default: beside Kafka controllers, raw records in the metadata log
    /// would stop them replaying it. The embedded default sets it.
    pub log_append_enable: bool,
    /// `ringraft.snapshot.adopt`: a node with no state machine takes the leader's snapshots,
    /// so that retention bounds its log (docs/raft.md §11.6). True by default; false keeps
    /// every record it ever committed.
    pub snapshot_adopt: bool,
    /// TLS on the controller listeners and on peer connections, when the first controller
    /// listener's security protocol is SSL (`config::tls`).
    pub tls: Option<super::tls::TlsConfig>,
    /// `ringraft.groups`: the Raft groups this node may host besides `__cluster_metadata-0`
    /// (`config::groups`); it hosts those it is a voter of.
    pub groups: Vec<super::groups::GroupDecl>,
    /// `ringraft.metrics.group.series`: how many of the busiest groups `/metrics` shows per-group
    /// gauges for (`node::metrics::groups`; a scrape may name more with `?group=T-P`).
    pub metrics_group_series: usize,
    /// `ringraft.recovery.bytes.per.second`: what this node's group leaders serve a second to
    /// followers behind the committed tail, shared by its shards (`node::recovery_budget`);
    /// 0: no bound.
    pub recovery_bytes_per_second: u64,
    /// Keys that were set but that ringraft does not know: logged as warnings at start.
    pub unknown_keys: Vec<String>,
}

/// Every key ringraft reads. Anything else in the file is reported as unknown.
pub const KNOWN_KEYS: &[&str] = &[
    "process.roles",
    "node.id",
    "listeners",
    "advertised.listeners",
    "controller.listener.names",
    "listener.security.protocol.map",
    "controller.quorum.voters",
    "controller.quorum.bootstrap.servers",
    "controller.quorum.election.timeout.ms",
    "controller.quorum.fetch.timeout.ms",
    "controller.quorum.election.backoff.max.ms",
    "controller.quorum.append.linger.ms",
    "controller.quorum.request.timeout.ms",
    "controller.quorum.retry.backoff.ms",
    "controller.quorum.auto.join.enable",
    "controller.quorum.fetch.max.bytes",
    "controller.quorum.fetch.snapshot.max.bytes",
    "metadata.log.dir",
    "log.dirs",
    "log.dir",
    "metadata.log.segment.bytes",
    "metadata.log.segment.min.bytes",
    "metadata.log.segment.ms",
    "metadata.max.retention.bytes",
    "metadata.max.retention.ms",
    "metadata.max.idle.interval.ms",
    "metadata.log.max.snapshot.interval.ms",
    "metadata.log.max.record.bytes.between.snapshots",
    "socket.request.max.bytes",
    "queued.max.request.bytes",
    "connections.max.idle.ms",
    "unstable.api.versions.enable",
    "ringraft.admin.listener",
    "ringraft.leadership",
    "ringraft.batch.cache.bytes",
    "ringraft.fetch.observer.interval.ms",
    "ringraft.log.append.enable",
    "ringraft.snapshot.adopt",
    "ringraft.groups",
    "ringraft.metrics.group.series",
    "ringraft.recovery.bytes.per.second",
];

/// The known key an unknown `key` was probably meant to be: the closest by edit distance,
/// within a third of its length (a typo, a dropped or swapped word part).
pub fn did_you_mean(key: &str) -> Option<&'static str> {
    let bound = (key.len() / 3).max(2);
    KNOWN_KEYS
        .iter()
        .chain(super::tls::SSL_KEYS)
        .map(|k| (edit_distance(key, k), *k))
        .filter(|(d, _)| *d <= bound)
        .min()
        .map(|(_, k)| k)
}

/// Levenshtein distance over bytes.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != cb))
                .min(above + 1)
                .min(row[j] + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

const DEFAULT_SECURITY_PROTOCOL_MAP: &str =
    "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT";

/// The embedded default of `cargo run --release`: a single-voter quorum on 127.0.0.1:9093
/// with its data under `./data`.
pub fn embedded_default_properties() -> String {
    embedded_default_properties_at(
        &format!("127.0.0.1:{}", c::DEFAULT_CONTROLLER_PORT),
        &format!("127.0.0.1:{}", c::DEFAULT_ADMIN_PORT),
    )
}

/// The embedded default with its controller listener at `listen` and its admin listener at
/// `admin` (both `host:port`; `ringraft --listen … --admin …`).
pub fn embedded_default_properties_at(listen: &str, admin: &str) -> String {
    format!(
        "process.roles=controller\n\
         node.id=1\n\
         listeners=CONTROLLER://{listen}\n\
         controller.listener.names=CONTROLLER\n\
         listener.security.protocol.map=CONTROLLER:PLAINTEXT\n\
         controller.quorum.voters=1@{listen}\n\
         metadata.log.dir=./data\n\
         ringraft.admin.listener={admin}\n\
         ringraft.log.append.enable=true\n"
    )
}

/// Typed lookups over `Properties` that report errors with the key and value.
struct Lookup<'a>(&'a Properties);

impl Lookup<'_> {
    fn str(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(str::trim)
    }

    fn list(&self, key: &str) -> Vec<String> {
        self.str(key)
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
            })
            .into_iter()
            .flatten()
            .collect()
    }

    fn int(&self, key: &str, default: i32, min: i32) -> Result<i32, ConfigError> {
        let Some(value) = self.str(key) else {
            return Ok(default);
        };
        let parsed: i32 = value
            .parse()
            .map_err(|_| invalid(key, value, "not a 32-bit integer"))?;
        if parsed < min {
            return Err(invalid(key, value, format!("must be at least {min}")));
        }
        Ok(parsed)
    }

    fn long(&self, key: &str, default: i64, min: i64) -> Result<i64, ConfigError> {
        let Some(value) = self.str(key) else {
            return Ok(default);
        };
        let parsed: i64 = value
            .parse()
            .map_err(|_| invalid(key, value, "not a 64-bit integer"))?;
        if parsed < min {
            return Err(invalid(key, value, format!("must be at least {min}")));
        }
        Ok(parsed)
    }

    fn bool(&self, key: &str, default: bool) -> Result<bool, ConfigError> {
        match self.str(key).map(str::to_ascii_lowercase).as_deref() {
            None => Ok(default),
            Some("true") => Ok(true),
            Some("false") => Ok(false),
            Some(_) => Err(invalid(
                key,
                self.str(key).unwrap_or(""),
                "must be true or false",
            )),
        }
    }
}

/// Parses `host:port`, `[v6]:port` or `:port` (empty host). Errors carry no key: the caller
/// adds it.
pub fn parse_host_port(text: &str) -> Result<(String, u16), HostPortError> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, rest) = rest.split_once(']').ok_or(HostPortError::UnclosedBracket)?;
        let port = rest.strip_prefix(':').ok_or(HostPortError::NoPortAfterV6)?;
        (host, port)
    } else {
        text.rsplit_once(':').ok_or(HostPortError::NoColon)?
    };
    let port: u16 = port
        .parse()
        .map_err(|_| HostPortError::Port(port.to_owned()))?;
    Ok((host.to_owned(), port))
}

/// Why a text is not `host:port`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostPortError {
    #[error("unclosed '[' in an IPv6 host")]
    UnclosedBracket,
    #[error("missing ':port' after the IPv6 host")]
    NoPortAfterV6,
    #[error("expected host:port")]
    NoColon,
    #[error("port {0:?} is not in 0..65535")]
    Port(String),
}

fn parse_listener(key: &str, text: &str) -> Result<Listener, ConfigError> {
    let (name, rest) = text
        .split_once("://")
        .ok_or_else(|| invalid(key, text, "expected NAME://host:port"))?;
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(invalid(
            key,
            text,
            "listener name must be letters, digits or '_'",
        ));
    }
    let (host, port) = parse_host_port(rest).map_err(|why| invalid(key, text, why))?;
    Ok(Listener {
        name: name.to_ascii_uppercase(),
        host,
        port,
    })
}

fn parse_listeners(key: &str, entries: &[String]) -> Result<Vec<Listener>, ConfigError> {
    let listeners: Vec<Listener> = entries
        .iter()
        .map(|e| parse_listener(key, e))
        .collect::<Result<_, _>>()?;
    for (i, l) in listeners.iter().enumerate() {
        if listeners[..i].iter().any(|other| other.name == l.name) {
            return Err(invalid(
                key,
                &entries.join(","),
                format!("listener {} repeats", l.name),
            ));
        }
    }
    Ok(listeners)
}

fn parse_voter(key: &str, text: &str) -> Result<StaticVoter, ConfigError> {
    let (id, hp) = text
        .split_once('@')
        .ok_or_else(|| invalid(key, text, "expected id@host:port"))?;
    let id: i32 = id
        .parse()
        .map_err(|_| invalid(key, text, "voter id is not an integer"))?;
    if id < 0 {
        return Err(invalid(key, text, "voter id must be non-negative"));
    }
    let (host, port) = parse_host_port(hp).map_err(|why| invalid(key, text, why))?;
    if host.is_empty() || host == "0.0.0.0" {
        return Err(invalid(
            key,
            text,
            "a voter needs a routable host (not empty or 0.0.0.0)",
        ));
    }
    Ok(StaticVoter { id, host, port })
}

impl ServerConfig {
    /// `server.properties` text, parsed and validated (`from_properties`).
    pub fn parse(text: &str) -> Result<ServerConfig, ConfigError> {
        ServerConfig::from_properties(&crate::config::properties::Properties::parse(text))
    }

    /// Builds the typed config and validates it as a controller-only node.
    pub fn from_properties(props: &Properties) -> Result<ServerConfig, ConfigError> {
        let l = Lookup(props);
        let process_roles = l.list("process.roles");
        let node_id = l.int("node.id", -1, i32::MIN)?;
        let listeners_raw = l.list("listeners");
        let listeners_raw = if l.str("listeners").is_none() {
            vec!["PLAINTEXT://:9092".into()]
        } else {
            listeners_raw
        };
        let listeners = parse_listeners("listeners", &listeners_raw)?;
        let advertised_listeners = match l.str("advertised.listeners") {
            Some(_) => parse_listeners("advertised.listeners", &l.list("advertised.listeners"))?,
            None => listeners.clone(),
        };
        let listener_security_protocol_map = security_protocol_map(&l)?;
        let voters_text = l.list("controller.quorum.voters");
        let controller_quorum_voters = voters_text
            .iter()
            .map(|v| parse_voter("controller.quorum.voters", v))
            .collect::<Result<Vec<_>, _>>()?;
        let controller_quorum_bootstrap_servers = bootstrap_servers(&l)?;
        // Kafka falls back to log.dir's default (/tmp/kafka-logs) and formats it too. A
        // controller-only node keeps no data there, so ringraft uses that default only when
        // metadata.log.dir is unset as well.
        let metadata_log_dir = l
            .str("metadata.log.dir")
            .filter(|s| !s.is_empty())
            .map(PathBuf::from);
        let log_dirs = match (l.str("log.dirs"), l.str("log.dir"), &metadata_log_dir) {
            (Some(_), _, _) => l.list("log.dirs").into_iter().map(PathBuf::from).collect(),
            (None, Some(dir), _) => vec![PathBuf::from(dir)],
            (None, None, Some(_)) => Vec::new(),
            (None, None, None) => vec![PathBuf::from("/tmp/kafka-logs")],
        };
        let q = QuorumKeys::read(&l)?;
        let g = LogKeys::read(&l)?;
        let mut config = ServerConfig {
            process_roles,
            node_id,
            listeners,
            advertised_listeners,
            controller_listener_names: l
                .list("controller.listener.names")
                .into_iter()
                .map(|n| n.to_ascii_uppercase())
                .collect(),
            listener_security_protocol_map,
            controller_quorum_voters,
            controller_quorum_bootstrap_servers,
            election_timeout_ms: q.election_timeout_ms,
            fetch_timeout_ms: q.fetch_timeout_ms,
            election_backoff_max_ms: q.election_backoff_max_ms,
            append_linger_ms: q.append_linger_ms,
            request_timeout_ms: q.request_timeout_ms,
            retry_backoff_ms: q.retry_backoff_ms,
            auto_join_enable: q.auto_join_enable,
            fetch_max_bytes: q.fetch_max_bytes,
            fetch_snapshot_max_bytes: q.fetch_snapshot_max_bytes,
            metadata_log_dir,
            log_dirs,
            metadata_log_segment_bytes: g.metadata_log_segment_bytes,
            metadata_log_segment_min_bytes: g.metadata_log_segment_min_bytes,
            metadata_log_segment_ms: g.metadata_log_segment_ms,
            metadata_max_retention_bytes: g.metadata_max_retention_bytes,
            metadata_max_retention_ms: g.metadata_max_retention_ms,
            metadata_max_idle_interval_ms: g.metadata_max_idle_interval_ms,
            metadata_log_max_snapshot_interval_ms: g.metadata_log_max_snapshot_interval_ms,
            metadata_log_max_record_bytes_between_snapshots: g
                .metadata_log_max_record_bytes_between_snapshots,
            socket_request_max_bytes: g.socket_request_max_bytes,
            queued_max_request_bytes: g.queued_max_request_bytes,
            connections_max_idle_ms: g.connections_max_idle_ms,
            unstable_api_versions_enable: g.unstable_api_versions_enable,
            admin_listener: admin_listener(&l)?,
            witness: is_witness(&l)?,
            batch_cache_bytes: g.batch_cache_bytes,
            fetch_observer_interval_ms: g.fetch_observer_interval_ms,
            log_append_enable: l.bool("ringraft.log.append.enable", false)?,
            snapshot_adopt: l.bool("ringraft.snapshot.adopt", true)?,
            groups: super::groups::parse(l.str("ringraft.groups").unwrap_or("")).map_err(
                |why| {
                    invalid(
                        "ringraft.groups",
                        l.str("ringraft.groups").unwrap_or(""),
                        why,
                    )
                },
            )?,
            metrics_group_series: metrics_group_series(&l)?,
            recovery_bytes_per_second: l.long(
                "ringraft.recovery.bytes.per.second",
                c::RECOVERY_BYTES_PER_SECOND_DEFAULT,
                0,
            )? as u64,
            tls: None,
            unknown_keys: props
                .keys()
                .filter(|k| !KNOWN_KEYS.contains(k) && !super::tls::is_ssl_key(k))
                .map(String::from)
                .collect(),
        };
        if let Err(mut e) = config.validate(props) {
            // A required key missing because of a typo: say which line was meant.
            let typo = config
                .unknown_keys
                .iter()
                .find(|u| did_you_mean(u) == Some(e.key.as_str()));
            if let Some(typo) = typo {
                e.why = format!("{}; the file sets {typo}: did you mean {}?", e.why, e.key);
            }
            return Err(e);
        }
        let first = &config.controller_listener_names[0];
        if config.security_protocol(first) == "SSL" {
            config.tls = Some(super::tls::parse(props, first)?);
        }
        Ok(config)
    }

    fn validate(&self, props: &Properties) -> Result<(), ConfigError> {
        let l = Lookup(props);
        let roles = l.str("process.roles").unwrap_or("");
        if self.process_roles != ["controller"] {
            let why = "ringraft runs the controller role only: set process.roles=controller";
            return Err(invalid("process.roles", roles, why));
        }
        if self.node_id < 0 {
            let why = "a controller needs node.id >= 0";
            return Err(invalid("node.id", l.str("node.id").unwrap_or(""), why));
        }
        let names = l.str("controller.listener.names").unwrap_or("");
        if self.controller_listener_names.is_empty() {
            return Err(invalid(
                "controller.listener.names",
                names,
                "required for a controller",
            ));
        }
        for name in &self.controller_listener_names {
            if !self.listeners.iter().any(|listener| &listener.name == name) {
                let why = format!("listener {name} is not in listeners");
                return Err(invalid("controller.listener.names", names, why));
            }
            let protocol = self.security_protocol(name);
            let first = &self.controller_listener_names[0];
            let map = l.str("listener.security.protocol.map").unwrap_or("");
            if protocol != "PLAINTEXT" && protocol != "SSL" {
                let why = format!(
                    "listener {name} uses {protocol}; ringraft serves PLAINTEXT and SSL only"
                );
                return Err(invalid("listener.security.protocol.map", map, why));
            }
            if protocol != self.security_protocol(first) {
                let why = format!(
                    "listeners {first} and {name} differ in security protocol; ringraft serves \
                     every controller listener the same way"
                );
                return Err(invalid("listener.security.protocol.map", map, why));
            }
        }
        if self.controller_quorum_voters.is_empty()
            && self.controller_quorum_bootstrap_servers.is_empty()
        {
            let why = "a controller needs controller.quorum.voters or \
                       controller.quorum.bootstrap.servers";
            return Err(invalid("controller.quorum.voters", "", why));
        }
        self.validate_static_voters(&l)?;
        self.validate_groups(&l)?;
        if self.metadata_log_segment_bytes < self.metadata_log_segment_min_bytes {
            let value = self.metadata_log_segment_bytes.to_string();
            let why = format!("must be at least metadata.log.segment.min.bytes ({})", {
                self.metadata_log_segment_min_bytes
            });
            return Err(invalid("metadata.log.segment.bytes", &value, why));
        }
        let queued = self.queued_max_request_bytes;
        if queued == 0 || (queued > 0 && queued < i64::from(self.socket_request_max_bytes)) {
            let why = format!(
                "must be -1 (no bound) or at least socket.request.max.bytes ({})",
                self.socket_request_max_bytes
            );
            return Err(invalid(
                "queued.max.request.bytes",
                &queued.to_string(),
                why,
            ));
        }
        if self.log_dirs.is_empty() && self.metadata_log_dir.is_none() {
            return Err(invalid("log.dirs", "", "no log directory configured"));
        }
        Ok(())
    }

    /// A static quorum (`controller.quorum.voters` set) names each voter once, and a controller
    /// of it is one of them: Kafka refuses a controller outside the set ("the node id must be
    /// included in the set of voters"), which would otherwise wait forever as an observer. With
    /// `controller.quorum.bootstrap.servers` alone the quorum is dynamic and observers are legal.
    fn validate_static_voters(&self, l: &Lookup) -> Result<(), ConfigError> {
        let key = "controller.quorum.voters";
        let value = l.str(key).unwrap_or("");
        let voters = &self.controller_quorum_voters;
        for (i, voter) in voters.iter().enumerate() {
            if voters[..i].iter().any(|other| other.id == voter.id) {
                let why = format!("voter {} appears twice; each voter id once", voter.id);
                return Err(invalid(key, value, why));
            }
        }
        if !voters.is_empty() && !voters.iter().any(|v| v.id == self.node_id) {
            let why = format!(
                "node.id={} must be included in the set of voters; add {}@host:port, or use \
                 controller.quorum.bootstrap.servers for a dynamic quorum it can join",
                self.node_id, self.node_id
            );
            return Err(invalid(key, value, why));
        }
        Ok(())
    }

    /// Groups' voters are voters of `controller.quorum.voters`, which says where they listen.
    fn validate_groups(&self, l: &Lookup) -> Result<(), ConfigError> {
        let key = "ringraft.groups";
        let value = l.str(key).unwrap_or("");
        if self.groups.is_empty() {
            return Ok(());
        }
        if self.controller_quorum_voters.is_empty() {
            let why = "groups need controller.quorum.voters (a static quorum), which gives their \
                       voters' addresses";
            return Err(invalid(key, value, why));
        }
        for decl in &self.groups {
            let known = |id: &i32| self.controller_quorum_voters.iter().any(|v| v.id == *id);
            if let Some(id) = decl.voters.iter().find(|id| !known(id)) {
                let why = format!(
                    "topic {}: voter {id} is not in controller.quorum.voters",
                    decl.topic
                );
                return Err(invalid(key, value, why));
            }
        }
        Ok(())
    }

    /// The security protocol of a listener name. An unmapped name counts as PLAINTEXT, which is
    /// what Kafka does for controller listeners when the map is left at its default.
    pub fn security_protocol(&self, listener_name: &str) -> String {
        self.listener_security_protocol_map
            .iter()
            .find(|(name, _)| name == listener_name)
            .map(|(_, proto)| proto.clone())
            .unwrap_or_else(|| "PLAINTEXT".to_owned())
    }

    /// `metadata.log.dir`, else the first of `log.dirs`.
    pub fn metadata_dir(&self) -> PathBuf {
        self.metadata_log_dir
            .clone()
            .unwrap_or_else(|| self.log_dirs[0].clone())
    }

    /// Every directory `storage format` formats: `log.dirs` ∪ `metadata.log.dir`.
    pub fn all_log_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = self.log_dirs.clone();
        if let Some(meta) = &self.metadata_log_dir {
            if !dirs.contains(meta) {
                dirs.push(meta.clone());
            }
        }
        dirs
    }

    /// The listeners this controller serves on, in `controller.listener.names` order.
    pub fn controller_listeners(&self) -> Vec<&Listener> {
        self.controller_listener_names
            .iter()
            .filter_map(|name| self.listeners.iter().find(|l| &l.name == name))
            .collect()
    }

    /// The controller listeners as other nodes should reach them, in `controller.listener.names`
    /// order: the `advertised.listeners` entry of each name, else its `listeners` entry. A
    /// wildcard host (`0.0.0.0`) becomes empty, which means "this host, name unknown": Kafka
    /// writes `localhost` for it in a `--standalone` voter (docs/membership.md §9).
    pub fn effective_advertised_controller_listeners(&self) -> Vec<Listener> {
        self.controller_listener_names
            .iter()
            .filter_map(|name| {
                let advertised = self.advertised_listeners.iter().find(|l| &l.name == name);
                advertised.or_else(|| self.listeners.iter().find(|l| &l.name == name))
            })
            .map(|listener| Listener {
                host: if listener.host == "0.0.0.0" {
                    String::new()
                } else {
                    listener.host.clone()
                },
                ..listener.clone()
            })
            .collect()
    }
}

/// `listener.security.protocol.map`: (listener name, protocol) pairs, upper case.
fn security_protocol_map(l: &Lookup) -> Result<Vec<(String, String)>, ConfigError> {
    let map_text = l
        .str("listener.security.protocol.map")
        .unwrap_or(DEFAULT_SECURITY_PROTOCOL_MAP);
    map_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|entry| {
            let (name, proto) = entry.split_once(':').ok_or_else(|| {
                invalid(
                    "listener.security.protocol.map",
                    map_text,
                    "expected NAME:PROTOCOL",
                )
            })?;
            Ok((
                name.trim().to_ascii_uppercase(),
                proto.trim().to_ascii_uppercase(),
            ))
        })
        .collect()
}

/// `controller.quorum.bootstrap.servers`: host:port pairs, each with a host.
fn bootstrap_servers(l: &Lookup) -> Result<Vec<HostPort>, ConfigError> {
    l.list("controller.quorum.bootstrap.servers")
        .iter()
        .map(|hp| {
            let key = "controller.quorum.bootstrap.servers";
            let (host, port) = parse_host_port(hp).map_err(|why| invalid(key, hp, why))?;
            if host.is_empty() {
                return Err(invalid(key, hp, "a bootstrap server needs a host"));
            }
            Ok(HostPort { host, port })
        })
        .collect()
}

/// The `controller.quorum.*` timings and sizes.
#[derive(Debug)]
struct QuorumKeys {
    election_timeout_ms: i32,
    fetch_timeout_ms: i32,
    election_backoff_max_ms: i32,
    append_linger_ms: i32,
    request_timeout_ms: i32,
    retry_backoff_ms: i32,
    auto_join_enable: bool,
    fetch_max_bytes: i32,
    fetch_snapshot_max_bytes: i32,
}

impl QuorumKeys {
    fn read(l: &Lookup) -> Result<QuorumKeys, ConfigError> {
        Ok(QuorumKeys {
            election_timeout_ms: l.int(
                "controller.quorum.election.timeout.ms",
                c::ELECTION_TIMEOUT_MS_DEFAULT,
                1,
            )?,
            fetch_timeout_ms: l.int(
                "controller.quorum.fetch.timeout.ms",
                c::FETCH_TIMEOUT_MS_DEFAULT,
                1,
            )?,
            election_backoff_max_ms: l.int(
                "controller.quorum.election.backoff.max.ms",
                c::ELECTION_BACKOFF_MAX_MS_DEFAULT,
                1,
            )?,
            append_linger_ms: l.int(
                "controller.quorum.append.linger.ms",
                c::APPEND_LINGER_MS_DEFAULT,
                0,
            )?,
            request_timeout_ms: l.int(
                "controller.quorum.request.timeout.ms",
                c::REQUEST_TIMEOUT_MS_DEFAULT,
                1,
            )?,
            retry_backoff_ms: l.int(
                "controller.quorum.retry.backoff.ms",
                c::RETRY_BACKOFF_MS_DEFAULT,
                0,
            )?,
            auto_join_enable: l.bool("controller.quorum.auto.join.enable", false)?,
            fetch_max_bytes: l.int(
                "controller.quorum.fetch.max.bytes",
                c::FETCH_MAX_BYTES_DEFAULT,
                1,
            )?,
            fetch_snapshot_max_bytes: l.int(
                "controller.quorum.fetch.snapshot.max.bytes",
                c::FETCH_SNAPSHOT_MAX_BYTES_DEFAULT,
                1,
            )?,
        })
    }
}

/// The log, retention, snapshot and socket keys.
#[derive(Debug)]
struct LogKeys {
    metadata_log_segment_bytes: i32,
    metadata_log_segment_min_bytes: i32,
    metadata_log_segment_ms: i64,
    metadata_max_retention_bytes: i64,
    metadata_max_retention_ms: i64,
    metadata_max_idle_interval_ms: i32,
    metadata_log_max_snapshot_interval_ms: i64,
    metadata_log_max_record_bytes_between_snapshots: i64,
    socket_request_max_bytes: i32,
    queued_max_request_bytes: i64,
    connections_max_idle_ms: i64,
    unstable_api_versions_enable: bool,
    batch_cache_bytes: i64,
    fetch_observer_interval_ms: i64,
}

impl LogKeys {
    fn read(l: &Lookup) -> Result<LogKeys, ConfigError> {
        Ok(LogKeys {
            metadata_log_segment_bytes: l.int(
                "metadata.log.segment.bytes",
                c::METADATA_LOG_SEGMENT_BYTES_DEFAULT,
                1,
            )?,
            metadata_log_segment_min_bytes: l.int(
                "metadata.log.segment.min.bytes",
                c::METADATA_LOG_SEGMENT_MIN_BYTES_DEFAULT,
                1,
            )?,
            metadata_log_segment_ms: l.long(
                "metadata.log.segment.ms",
                c::METADATA_LOG_SEGMENT_MS_DEFAULT,
                1,
            )?,
            metadata_max_retention_bytes: l.long(
                "metadata.max.retention.bytes",
                c::METADATA_MAX_RETENTION_BYTES_DEFAULT,
                -1,
            )?,
            metadata_max_retention_ms: l.long(
                "metadata.max.retention.ms",
                c::METADATA_MAX_RETENTION_MS_DEFAULT,
                -1,
            )?,
            metadata_max_idle_interval_ms: l.int(
                "metadata.max.idle.interval.ms",
                c::METADATA_MAX_IDLE_INTERVAL_MS_DEFAULT,
                0,
            )?,
            metadata_log_max_snapshot_interval_ms: l.long(
                "metadata.log.max.snapshot.interval.ms",
                c::METADATA_LOG_MAX_SNAPSHOT_INTERVAL_MS_DEFAULT,
                0,
            )?,
            metadata_log_max_record_bytes_between_snapshots: l.long(
                "metadata.log.max.record.bytes.between.snapshots",
                c::METADATA_LOG_MAX_RECORD_BYTES_BETWEEN_SNAPSHOTS_DEFAULT,
                1,
            )?,
            socket_request_max_bytes: l.int(
                "socket.request.max.bytes",
                c::SOCKET_REQUEST_MAX_BYTES_DEFAULT,
                c::REQUEST_HEADER_MIN_BYTES as i32,
            )?,
            queued_max_request_bytes: l.long(
                "queued.max.request.bytes",
                c::QUEUED_MAX_REQUEST_BYTES_DEFAULT,
                -1,
            )?,
            connections_max_idle_ms: l.long(
                "connections.max.idle.ms",
                c::CONNECTIONS_MAX_IDLE_MS_DEFAULT,
                -1,
            )?,
            unstable_api_versions_enable: l.bool("unstable.api.versions.enable", false)?,
            batch_cache_bytes: l.long(
                "ringraft.batch.cache.bytes",
                c::BATCH_CACHE_BYTES_DEFAULT,
                0,
            )?,
            fetch_observer_interval_ms: observer_interval(l)?,
        })
    }
}

/// `ringraft.fetch.observer.interval.ms`: 0 to a minute (an observer's Fetch waits at most
/// 500 ms in Kafka's clients; longer would only make them time out and retry).
fn observer_interval(l: &Lookup) -> Result<i64, ConfigError> {
    const KEY: &str = "ringraft.fetch.observer.interval.ms";
    let ms = l.long(KEY, c::FETCH_OBSERVER_INTERVAL_MS_DEFAULT, 0)?;
    if ms > 60_000 {
        return Err(invalid(
            KEY,
            l.str(KEY).unwrap_or(""),
            "must be at most 60000",
        ));
    }
    Ok(ms)
}

/// `ringraft.metrics.group.series`: 0 (no per-group gauges unless a scrape names them) up to
/// the most groups a node hosts.
fn metrics_group_series(l: &Lookup) -> Result<usize, ConfigError> {
    const KEY: &str = "ringraft.metrics.group.series";
    let n = l.int(KEY, c::METRICS_GROUP_SERIES_DEFAULT, 0)?;
    if n as usize > c::GROUPS_PER_NODE_MAX {
        let why = format!("must be at most {}", c::GROUPS_PER_NODE_MAX);
        return Err(invalid(KEY, l.str(KEY).unwrap_or(""), why));
    }
    Ok(n as usize)
}

/// `ringraft.admin.listener`: where `/metrics`, `/livez` and `/readyz` are served, if at all.
fn admin_listener(l: &Lookup) -> Result<Option<HostPort>, ConfigError> {
    let Some(v) = l.str("ringraft.admin.listener").filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let (host, port) =
        parse_host_port(v).map_err(|why| invalid("ringraft.admin.listener", v, why))?;
    Ok(Some(HostPort { host, port }))
}

/// `ringraft.leadership`: `voter` (the default) or `witness`.
fn is_witness(l: &Lookup) -> Result<bool, ConfigError> {
    match l.str("ringraft.leadership").unwrap_or("voter") {
        "voter" => Ok(false),
        "witness" => Ok(true),
        v => Err(invalid(
            "ringraft.leadership",
            v,
            "expected voter or witness",
        )),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_unknown_key_gets_the_known_key_it_was_probably_meant_to_be() {
        use super::did_you_mean;
        assert_eq!(
            did_you_mean("controller.quorum.voter"),
            Some("controller.quorum.voters")
        );
        assert_eq!(did_you_mean("metadata.logs.dir"), Some("metadata.log.dir"));
        assert_eq!(did_you_mean("node_id"), Some("node.id"));
        assert_eq!(did_you_mean("broker.rack"), None);
    }

    use super::*;

    fn load(text: &str) -> Result<ServerConfig, ConfigError> {
        ServerConfig::from_properties(&Properties::parse(text))
    }

    #[test]
    fn embedded_default_is_valid_with_kafka_defaults() {
        let config = load(&embedded_default_properties()).unwrap();
        assert_eq!(config.node_id, 1);
        assert_eq!(config.controller_listeners()[0].port, 9093);
        assert_eq!(config.election_timeout_ms, 1000);
        assert_eq!(config.fetch_timeout_ms, 2000);
        assert_eq!(config.append_linger_ms, 0);
        assert_eq!(config.socket_request_max_bytes, 100 * 1024 * 1024);
        assert_eq!(config.metadata_dir(), PathBuf::from("./data"));
        assert!(config.unknown_keys.is_empty());
        // The embedded default is a ringraft-only quorum: `ringraft log append` works on it.
        assert!(config.log_append_enable);
        let text = embedded_default_properties().replace("ringraft.log.append.enable=true", "");
        assert!(!load(&text).unwrap().log_append_enable, "off unless set");
        assert_eq!(
            config.all_log_dirs(),
            [PathBuf::from("./data")],
            "no /tmp/kafka-logs"
        );
    }

    #[test]
    fn recovery_budget_is_a_rate_or_none() {
        let base = embedded_default_properties();
        assert_eq!(load(&base).unwrap().recovery_bytes_per_second, 100 << 20);
        let none = format!("{base}ringraft.recovery.bytes.per.second=0\n");
        assert_eq!(load(&none).unwrap().recovery_bytes_per_second, 0);
        for bad in ["-1", "fast", "1e9"] {
            let text = format!("{base}ringraft.recovery.bytes.per.second={bad}\n");
            let e = load(&text).unwrap_err();
            assert_eq!(e.key, "ringraft.recovery.bytes.per.second", "{bad}");
        }
    }

    #[test]
    fn metrics_group_series_is_bounded() {
        let base = embedded_default_properties();
        assert_eq!(load(&base).unwrap().metrics_group_series, 16);
        let zero = format!("{base}ringraft.metrics.group.series=0\n");
        assert_eq!(load(&zero).unwrap().metrics_group_series, 0);
        for bad in ["-1", "4097", "many"] {
            let text = format!("{base}ringraft.metrics.group.series={bad}\n");
            let e = load(&text).unwrap_err();
            assert_eq!(e.key, "ringraft.metrics.group.series", "{bad}");
        }
    }

    #[test]
    fn leadership_is_voter_or_witness() {
        let base = embedded_default_properties();
        assert!(!load(&base).unwrap().witness);
        let witness = format!("{base}ringraft.leadership=witness\n");
        assert!(load(&witness).unwrap().witness);
        let bad = format!("{base}ringraft.leadership=leader\n");
        let e = load(&bad).unwrap_err();
        assert_eq!(
            (e.key.as_str(), e.value.as_str()),
            ("ringraft.leadership", "leader")
        );
        assert!(e.why.contains("voter or witness"), "{}", e.why);
    }

    #[test]
    fn errors_name_key_value_and_reason() {
        let base = embedded_default_properties();
        let err = load(&format!(
            "{base}controller.quorum.election.timeout.ms=soon\n"
        ))
        .unwrap_err();
        assert_eq!(err.key, "controller.quorum.election.timeout.ms");
        assert_eq!(err.value, "soon");
        assert!(err.to_string().contains("not a 32-bit integer"), "{err}");
        let err = load(&format!("{base}controller.quorum.voters=1@0.0.0.0:9093\n")).unwrap_err();
        assert_eq!(err.key, "controller.quorum.voters");
        let err = load(&format!(
            "{base}controller.quorum.bootstrap.servers=:9093\n"
        ))
        .unwrap_err();
        assert_eq!(err.key, "controller.quorum.bootstrap.servers");
        let err = load(&base.replace("node.id=1", "node.id=2")).unwrap_err();
        assert_eq!(err.key, "controller.quorum.voters");
        assert!(err.why.contains("node.id=2 must be included"), "{err}");
        let twice = base.replace(
            "controller.quorum.voters=1@127.0.0.1:9093",
            "controller.quorum.voters=1@127.0.0.1:9093,1@127.0.0.1:9095",
        );
        let err = load(&twice).unwrap_err();
        assert!(err.why.contains("voter 1 appears twice"), "{err}");
        let err = load(&base.replace("node.id=1", "node.id=-3")).unwrap_err();
        assert_eq!(err.key, "node.id");
        let err =
            load(&base.replace("process.roles=controller", "process.roles=broker")).unwrap_err();
        assert_eq!(err.key, "process.roles");
        let err = load(&format!(
            "{base}listener.security.protocol.map=CONTROLLER:SASL_SSL\n"
        ))
        .unwrap_err();
        assert!(err.why.contains("PLAINTEXT and SSL only"), "{err}");
        // SSL without a keystore names the key that is missing.
        let err = load(&format!(
            "{base}listener.security.protocol.map=CONTROLLER:SSL\nssl.keystore.type=PEM\n\
             ssl.truststore.type=PEM\nssl.truststore.location=/ca.pem\n"
        ))
        .unwrap_err();
        assert_eq!(err.key, "ssl.keystore.location");
    }

    #[test]
    fn unknown_keys_are_warnings() {
        let config = load(&format!(
            "{}num.io.threads=8\n",
            embedded_default_properties()
        ))
        .unwrap();
        assert_eq!(config.unknown_keys, ["num.io.threads"]);
    }

    #[test]
    fn advertised_controller_listeners_fall_back_per_name() {
        let base = "process.roles=controller\nnode.id=1\ncontroller.quorum.voters=1@h:1\n\
                    metadata.log.dir=/d\ncontroller.listener.names=A,B\n\
                    listener.security.protocol.map=A:PLAINTEXT,B:PLAINTEXT\n";
        let config = load(&format!(
            "{base}listeners=A://0.0.0.0:1,B://:2\nadvertised.listeners=B://b.example:3\n"
        ))
        .unwrap();
        let effective = config.effective_advertised_controller_listeners();
        let shown: Vec<String> = effective.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["A://:1", "B://b.example:3"]);
        let config = load(&format!("{base}listeners=B://10.0.0.2:2,A://10.0.0.1:1\n")).unwrap();
        let effective = config.effective_advertised_controller_listeners();
        assert_eq!((effective[0].name.as_str(), effective[0].port), ("A", 1));
    }

    #[test]
    fn listener_forms() {
        assert_eq!(parse_host_port("[::1]:9093").unwrap(), ("::1".into(), 9093));
        assert_eq!(parse_host_port(":9093").unwrap(), (String::new(), 9093));
        assert!(parse_host_port("host:99999").is_err());
        assert!(parse_listener("listeners", "CONTROLLER:/x:1").is_err());
    }
}
