//! `ringraft quorum …`: Kafka's `kafka-metadata-quorum` against a controller quorum
//! (docs/tools.md §2).
//!
//! `describe --status | --replication [--human-readable] --bootstrap-controller HOST:PORT` sends
//! the RPCs Kafka's admin client sends in controller mode (§2.1): DescribeCluster
//! (`EndpointType` 2) to a bootstrap controller to learn the active controller (`ControllerId`
//! and its host/port from `Brokers`), then on a new connection to that controller a second
//! DescribeCluster for the cluster id (`--status` only) and DescribeQuorum for
//! `__cluster_metadata-0`. Every connection starts with ApiVersions (`PeerConnection`).
//!
//! The output is what Kafka's tool prints, character for character (§2.2); the formatting is in
//! pure functions (`format_status`, `format_replication`) over the decoded responses. Where
//! Kafka 4.1/4.4's tool differs from the spec text, the tool wins: a voter or observer whose
//! directory id is ZERO has no `directoryId` key at all in `--status` (not `null`), as
//! `MetadataQuorumCommand.Node.toString` does. Failures (no connection, no active controller,
//! an error code, an undecodable answer) end with a message and exit code 1.

use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use clap::Subcommand;

use super::CliError;
use crate::ids::uuid_to_kafka_string;
use crate::net::peer::PeerConnection;
use crate::protocol::describe_cluster::{self as dc, DescribeClusterResponse};
use crate::protocol::describe_quorum::{
    self as dq, DescribeQuorumResponse, Node, PartitionData, ReplicaState,
};
use crate::protocol::group::GroupKey;
use crate::protocol::{apis, ApiKey, ErrorCode, Reader, Writer, METADATA_TOPIC_NAME};

/// `client_id` in every request header (Kafka's admin client sends `adminclient-<n>`).
const CLIENT_ID: &str = "ringraft-quorum";
/// TCP connect plus the ApiVersions handshake, per connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// One request/response round trip.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Subcommand)]
pub enum QuorumCommand {
    /// Describe the metadata quorum (like `kafka-metadata-quorum describe`).
    Describe(DescribeArgs),
    /// Add the controller whose server.properties is given to the voters (AddRaftVoter).
    AddController(AddControllerArgs),
    /// Remove a controller (node id and directory id) from the voters (RemoveRaftVoter).
    RemoveController(RemoveControllerArgs),
    /// Move the leadership to another voter (a ringraft leader; the target may be any voter,
    /// a Kafka controller included): docs/operations.md, "Moving the leadership".
    TransferLeader(TransferLeaderArgs),
}

#[derive(Debug, clap::Args)]
pub struct TransferLeaderArgs {
    /// The node id of the voter to hand the leadership to.
    #[arg(long = "to", value_name = "ID")]
    pub to: i32,
    /// A comma-separated list of controllers' host:port (default: the embedded default's,
    /// $RINGRAFT_LISTEN or 127.0.0.1:9093).
    #[arg(long = "bootstrap-controller", value_name = "HOST:PORT")]
    pub bootstrap_controller: Option<String>,
    /// Client properties (`security.protocol=SSL` and the `ssl.*` keys), as for describe.
    #[arg(long = "command-config", value_name = "FILE")]
    pub command_config: Option<std::path::PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct AddControllerArgs {
    /// The new controller's server.properties (its node.id, listeners and metadata.log.dir).
    #[arg(
        short = 'c',
        long = "config",
        alias = "command-config",
        value_name = "FILE"
    )]
    pub config: std::path::PathBuf,
    /// A comma-separated list of controllers' host:port (default: the embedded default's,
    /// $RINGRAFT_LISTEN or 127.0.0.1:9093).
    #[arg(long = "bootstrap-controller", value_name = "HOST:PORT")]
    pub bootstrap_controller: Option<String>,
    /// Print what would be sent, send nothing.
    #[arg(long = "dry-run")]
    pub dry_run: bool,
}

#[derive(Debug, clap::Args)]
pub struct RemoveControllerArgs {
    /// The node id of the controller to remove.
    #[arg(short = 'i', long = "controller-id")]
    pub controller_id: i32,
    /// Its metadata directory id (Kafka's base64 UUID text).
    #[arg(short = 'd', long = "controller-directory-id")]
    pub controller_directory_id: String,
    /// A comma-separated list of controllers' host:port (default: the embedded default's,
    /// $RINGRAFT_LISTEN or 127.0.0.1:9093).
    #[arg(long = "bootstrap-controller", value_name = "HOST:PORT")]
    pub bootstrap_controller: Option<String>,
    /// Client properties (`security.protocol=SSL` and the `ssl.*` keys), as for describe.
    #[arg(long = "command-config", value_name = "FILE")]
    pub command_config: Option<std::path::PathBuf>,
    /// Print what would be sent, send nothing.
    #[arg(long = "dry-run")]
    pub dry_run: bool,
}

#[derive(Debug, clap::Args)]
pub struct DescribeArgs {
    /// A short summary of the quorum status.
    #[arg(long)]
    pub status: bool,
    /// Detailed information about the status of replication.
    #[arg(long)]
    pub replication: bool,
    /// With --replication: timestamps as "`<n>` ms ago".
    #[arg(long = "human-readable")]
    pub human_readable: bool,
    /// A comma-separated list of controllers' host:port, hostnames resolved (default: the
    /// embedded default's, $RINGRAFT_LISTEN or 127.0.0.1:9093).
    #[arg(long = "bootstrap-controller", value_name = "HOST:PORT")]
    pub bootstrap_controller: Option<String>,
    /// Client properties, as Kafka's tool takes them: `security.protocol=SSL` with the `ssl.*`
    /// keys (PEM stores) reaches controllers whose listener is SSL.
    #[arg(long = "command-config", value_name = "FILE")]
    pub command_config: Option<std::path::PathBuf>,
    /// The group to describe: its topic (with --partition). Default: __cluster_metadata.
    /// Another group is described by whichever --bootstrap-controller leads it, so list its
    /// voters there.
    #[arg(long = "topic", default_value = METADATA_TOPIC_NAME)]
    pub topic: String,
    /// The group's partition.
    #[arg(long = "partition", default_value_t = 0)]
    pub partition: i32,
}

/// What `describe` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DescribeMode {
    Status,
    Replication { human_readable: bool },
}

impl DescribeArgs {
    /// Kafka's option checks, in its order and with its messages.
    pub fn mode(&self) -> Result<DescribeMode, String> {
        match (self.status, self.replication) {
            (true, true) => Err("Only one of --status or --replication should be specified \
                                 with describe sub-command"
                .into()),
            (_, true) => Ok(DescribeMode::Replication {
                human_readable: self.human_readable,
            }),
            (true, false) if self.human_readable => {
                Err("The option --human-readable is only supported along with --replication".into())
            }
            (true, false) => Ok(DescribeMode::Status),
            (false, false) => Err(
                "One of --status or --replication must be specified with describe sub-command"
                    .into(),
            ),
        }
    }
}

/// `--bootstrap-controller`, or the embedded default's listener when it is not given.
fn bootstrap(given: Option<&str>) -> Result<Vec<(String, SocketAddr)>, CliError> {
    let text = given.map_or_else(super::default_bootstrap_controller, str::to_string);
    parse_bootstrap_hosts(&text).map_err(CliError::new)
}

pub fn run(command: QuorumCommand) -> Result<(), CliError> {
    let text = match command {
        QuorumCommand::Describe(args) => {
            let mode = args.mode().map_err(CliError::new)?;
            let bootstrap = bootstrap(args.bootstrap_controller.as_deref())?;
            let dial = Dialer::from_command_config(args.command_config.as_deref())?;
            let group = crate::protocol::group::GroupKey::new(&args.topic, args.partition)
                .map_err(|e| CliError::new(format!("--topic/--partition: {e}")))?;
            on_glommio(describe(dial, bootstrap, mode, group))?
        }
        QuorumCommand::AddController(args) => {
            let bootstrap = bootstrap(args.bootstrap_controller.as_deref())?;
            let voter = new_controller(&args.config).map_err(CliError::new)?;
            let dial = Dialer::new(voter.tls.as_ref())?;
            let text = format!(
                "{} controller {} with directory id {} and endpoints: {}\n",
                if args.dry_run {
                    "DRY RUN of adding"
                } else {
                    "Added"
                },
                voter.id,
                uuid_to_kafka_string(&voter.directory_id),
                voter
                    .listeners
                    .iter()
                    .map(|l| endpoint_text(&l.name, &l.host, l.port))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            if !args.dry_run {
                on_glommio(add_controller(dial, bootstrap, voter))?;
            }
            text
        }
        QuorumCommand::TransferLeader(args) => {
            let bootstrap = bootstrap(args.bootstrap_controller.as_deref())?;
            let dial = Dialer::from_command_config(args.command_config.as_deref())?;
            on_glommio(transfer_leader(dial, bootstrap, args.to))?
        }
        QuorumCommand::RemoveController(args) => {
            let bootstrap = bootstrap(args.bootstrap_controller.as_deref())?;
            let dial = Dialer::from_command_config(args.command_config.as_deref())?;
            let directory_id = crate::ids::parse_kafka_uuid(&args.controller_directory_id)
                .map_err(|e| CliError::new(format!("--controller-directory-id: {e}")))?;
            if !args.dry_run {
                on_glommio(remove_controller(
                    dial,
                    bootstrap,
                    args.controller_id,
                    directory_id,
                ))?;
            }
            format!(
                "{} KRaft controller {} with directory id {}\n",
                if args.dry_run {
                    "DRY RUN of removing"
                } else {
                    "Removed"
                },
                args.controller_id,
                uuid_to_kafka_string(&directory_id)
            )
        }
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| CliError::new(format!("cannot write the output: {e}")))
}

pub(super) fn on_glommio<T>(
    task: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, CliError> {
    glommio::LocalExecutorBuilder::default()
        .io_memory(512 * 1024)
        .make()
        .map_err(|e| CliError::new(format!("cannot start glommio: {e}")))?
        .run(task)
        .map_err(CliError::new)
}

/// The controller `add-controller` adds, read as Kafka's tool reads it (docs/tools.md §2.1):
/// node.id and controller listeners from its config, directory.id from its metadata
/// directory's meta.properties.
#[derive(Debug, Clone)]
pub struct NewController {
    pub id: i32,
    pub directory_id: uuid::Uuid,
    pub listeners: Vec<crate::protocol::kraft::Listener>,
    /// Its controller listener's TLS, which the tool uses to reach the quorum too.
    pub tls: Option<crate::config::tls::TlsConfig>,
}

pub fn new_controller(path: &std::path::Path) -> Result<NewController, String> {
    let config = super::load_config(path).map_err(|e| e.to_string())?;
    if config.node_id < 0 {
        return Err("node.id must be set and non-negative in the new controller's config".into());
    }
    if !config.process_roles.iter().any(|r| r == "controller") {
        return Err("the new controller's process.roles must contain controller".into());
    }
    let mut listeners = Vec::new();
    for name in &config.controller_listener_names {
        let listener = config
            .advertised_listeners
            .iter()
            .find(|l| &l.name == name)
            .or_else(|| config.listeners.iter().find(|l| &l.name == name))
            .ok_or_else(|| format!("controller listener {name} is not in listeners"))?;
        listeners.push(crate::protocol::kraft::Listener {
            name: name.clone(),
            host: if listener.host.is_empty() {
                "localhost".into()
            } else {
                listener.host.clone()
            },
            port: listener.port,
        });
    }
    if listeners.is_empty() {
        return Err("controller.listener.names must name at least one listener".into());
    }
    let dir = config.metadata_dir();
    let meta = crate::log::MetaProperties::read(&dir)
        .map_err(|e| format!("cannot read the new controller's meta.properties: {e}"))?;
    let directory_id = meta.directory_id.ok_or_else(|| {
        format!(
            "{}/meta.properties has no directory.id (format the new controller first)",
            dir.display()
        )
    })?;
    Ok(NewController {
        id: config.node_id,
        directory_id,
        listeners,
        tls: config.tls,
    })
}

/// How long `transfer-leader` waits for the leader's answer (it gives up on its own after an
/// election timeout) and then for the next epoch's leader to be known.
const TRANSFER_ANSWER: Duration = Duration::from_secs(30);
const TRANSFER_ELECTION: Duration = Duration::from_secs(15);

/// The leader and epoch a DescribeQuorum answer names (−1: none known).
fn quorum_leader(response: &DescribeQuorumResponse) -> Result<(i32, i32), String> {
    let partition = response
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or("the DescribeQuorum answer names no partition")?;
    if partition.error_code != ErrorCode::NONE {
        let message = partition.error_message.as_deref();
        return Err(error_text(partition.error_code, message));
    }
    Ok((partition.leader_id, partition.leader_epoch))
}

/// `quorum transfer-leader`: TransferLeader to the active controller, then DescribeQuorum until
/// the next epoch has a leader.
async fn transfer_leader(
    dial: Dialer,
    bootstrap: Vec<(String, SocketAddr)>,
    to: i32,
) -> Result<String, String> {
    use crate::protocol::transfer_leader::{self as tl, TransferLeaderRequest};
    let mut conn = active_connection(&dial, &bootstrap).await?;
    let (from, epoch) = quorum_leader(&describe_quorum(&mut conn).await?)?;
    if from == to {
        return Ok(format!("Voter {to} already leads epoch {epoch}\n"));
    }
    let request = TransferLeaderRequest {
        to_id: to,
        timeout_ms: TRANSFER_ANSWER.as_millis() as i32,
    };
    let mut body = Writer::with_capacity(16);
    request.encode(&mut body, 0);
    let key = ApiKey::RINGRAFT_TRANSFER_LEADER;
    let started = std::time::Instant::now();
    let answer = conn
        .request_unadvertised(key, 0, 0, &body.into_vec(), TRANSFER_ANSWER)
        .await
        .map_err(|e| {
            format!(
                "the leader (node {from}) did not answer TransferLeader: {e}. Only a ringraft \
                 leader serves it: a Kafka controller that leads cannot be asked to move"
            )
        })?;
    let response = tl::TransferLeaderResponse::decode(&mut Reader::new(&answer), 0)
        .map_err(|e| format!("cannot decode the TransferLeader answer: {e}"))?;
    if response.error != ErrorCode::NONE {
        let why = error_text(response.error, response.error_message.as_deref());
        return Err(format!("node {from} did not hand over to {to}: {why}"));
    }
    let resigned = started.elapsed();
    drop(conn);
    // The election that follows takes a round trip or two; a bootstrap controller says who won.
    let deadline = std::time::Instant::now() + TRANSFER_ELECTION;
    let mut last = String::from("no controller answered");
    while std::time::Instant::now() < deadline {
        // DescribeQuorum is answered by the leader only: found through DescribeCluster.
        let described = async {
            let mut conn = active_connection(&dial, &bootstrap).await?;
            describe_quorum(&mut conn).await
        }
        .await;
        match described.and_then(|r| quorum_leader(&r)) {
            Ok((leader, now)) if leader >= 0 && now > epoch => {
                let elected = started.elapsed();
                let note = if leader == to {
                    String::new()
                } else {
                    format!(" (not {to}: another voter won the election)")
                };
                return Ok(format!(
                    "Leadership moved from {from} to {leader} in epoch {now}{note}: {from} \
                     resigned at offset {} after {} ms, {leader} led after {} ms\n",
                    response.resigned_at_offset,
                    resigned.as_millis(),
                    elected.as_millis()
                ));
            }
            Ok(_) => last = "the next epoch has no leader yet".into(),
            Err(e) => last = e,
        }
        glommio::timer::sleep(Duration::from_millis(20)).await;
    }
    Err(format!(
        "node {from} resigned at offset {} naming {to}, but no new leader was known within {} s: \
         {last}",
        response.resigned_at_offset,
        TRANSFER_ELECTION.as_secs()
    ))
}

/// How long add/remove keep retrying retriable answers (Kafka's default.api.timeout.ms).
const CHANGE_DEADLINE: Duration = Duration::from_secs(60);

/// Connects to the active controller (found through DescribeCluster on a bootstrap one).
async fn active_connection(
    dial: &Dialer,
    bootstrap: &[(String, SocketAddr)],
) -> Result<PeerConnection, String> {
    let mut conn = dial
        .connect_any(bootstrap)
        .await
        .map_err(|e| format!("no bootstrap controller answered: {e}"))?;
    let metadata = describe_cluster(&mut conn).await?;
    drop(conn);
    let (leader_id, host, port) = active_controller(&metadata)?;
    let addrs: Vec<(String, SocketAddr)> = (host.as_str(), port)
        .to_socket_addrs()
        .map_err(|e| {
            format!("cannot resolve the active controller {leader_id} at {host}:{port}: {e}")
        })?
        .map(|addr| (host.clone(), addr))
        .collect();
    dial.connect_any(&addrs)
        .await
        .map_err(|e| format!("the active controller is node {leader_id} at {host}:{port}, but {e}"))
}

/// Sends one voter change until it succeeds, fails for good, or the deadline passes; like
/// Kafka's admin client it retries REQUEST_TIMED_OUT, NOT_LEADER_OR_FOLLOWER and lost
/// connections (finding the active controller again).
async fn voter_change(
    dial: &Dialer,
    bootstrap: &[(String, SocketAddr)],
    what: &str,
    key: ApiKey,
    ours: (i16, i16),
    encode: impl Fn(&mut Writer, i16),
    decode: impl Fn(i16, &Bytes) -> Result<(ErrorCode, Option<String>), String>,
) -> Result<(), String> {
    // No bootstrap controller reachable at all is a mistake in the command, not a moment of
    // leader election: say so now instead of retrying for a minute.
    drop(
        dial.connect_any(bootstrap)
            .await
            .map_err(|e| format!("no bootstrap controller answered: {e}"))?,
    );
    let deadline = std::time::Instant::now() + CHANGE_DEADLINE;
    let mut last;
    loop {
        let attempt = async {
            let mut conn = active_connection(dial, bootstrap).await?;
            let (version, answer) = call(&mut conn, key, ours, &encode).await?;
            decode(version, &answer)
        }
        .await;
        match attempt {
            Ok((ErrorCode::NONE, _)) => return Ok(()),
            Ok((code, message)) => {
                last = format!("{what} failed: {}", error_text(code, message.as_deref()));
                let retriable = code == ErrorCode::REQUEST_TIMED_OUT
                    || code == ErrorCode::NOT_LEADER_OR_FOLLOWER
                    || code == ErrorCode::NOT_CONTROLLER;
                if !retriable {
                    return Err(last);
                }
            }
            Err(e) => last = format!("{what} failed: {e}"),
        }
        if std::time::Instant::now() >= deadline {
            return Err(format!(
                "{last} (gave up after {}s)",
                CHANGE_DEADLINE.as_secs()
            ));
        }
        glommio::timer::sleep(Duration::from_millis(500)).await;
    }
}

async fn add_controller(
    dial: Dialer,
    bootstrap: Vec<(String, SocketAddr)>,
    voter: NewController,
) -> Result<(), String> {
    use crate::protocol::add_raft_voter as arv;
    let request = arv::AddRaftVoterRequest {
        cluster_id: None,
        timeout_ms: CHANGE_DEADLINE.as_millis() as i32,
        voter_id: voter.id,
        voter_directory_id: voter.directory_id,
        listeners: voter.listeners.clone(),
        ack_when_committed: true,
        group: None,
    };
    voter_change(
        &dial,
        &bootstrap,
        "AddRaftVoter",
        ApiKey::ADD_RAFT_VOTER,
        (*arv::VERSIONS.start(), *arv::VERSIONS.end()),
        |w, v| request.encode(w, v),
        |v, answer| {
            arv::AddRaftVoterResponse::decode(&mut Reader::new(answer), v, answer)
                .map(|r| (r.error_code, r.error_message))
                .map_err(|e| format!("cannot decode the AddRaftVoter answer: {e}"))
        },
    )
    .await
}

async fn remove_controller(
    dial: Dialer,
    bootstrap: Vec<(String, SocketAddr)>,
    id: i32,
    directory_id: uuid::Uuid,
) -> Result<(), String> {
    use crate::protocol::remove_raft_voter as rrv;
    let request = rrv::RemoveRaftVoterRequest {
        cluster_id: None,
        voter_id: id,
        voter_directory_id: directory_id,
        group: None,
    };
    voter_change(
        &dial,
        &bootstrap,
        "RemoveRaftVoter",
        ApiKey::REMOVE_RAFT_VOTER,
        (*rrv::VERSIONS.start(), *rrv::VERSIONS.end()),
        |w, v| request.encode(w, v),
        |v, answer| {
            rrv::RemoveRaftVoterResponse::decode(&mut Reader::new(answer), v, answer)
                .map(|r| (r.error_code, r.error_message))
                .map_err(|e| format!("cannot decode the RemoveRaftVoter answer: {e}"))
        },
    )
    .await
}

/// Parses `--bootstrap-controller`: comma-separated `host:port` (IPv6 as `[addr]:port`), each
/// resolved with the system resolver; the addresses in order, none twice.
pub fn parse_bootstrap(text: &str) -> Result<Vec<SocketAddr>, String> {
    Ok(parse_bootstrap_hosts(text)?
        .into_iter()
        .map(|(_, addr)| addr)
        .collect())
}

/// `parse_bootstrap`, each address with the host it was named by (what a controller's TLS
/// certificate must name).
pub fn parse_bootstrap_hosts(text: &str) -> Result<Vec<(String, SocketAddr)>, String> {
    let mut out: Vec<(String, SocketAddr)> = Vec::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (host, port) = entry
            .rsplit_once(':')
            .ok_or_else(|| format!("invalid controller address {entry:?}: expected HOST:PORT"))?;
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err(format!(
                "invalid controller address {entry:?}: expected HOST:PORT"
            ));
        }
        let addrs = entry
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve controller address {entry:?}: {e}"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        for addr in addrs {
            if !out.iter().any(|(_, a)| *a == addr) {
                out.push((host.to_owned(), addr));
            }
        }
    }
    if out.is_empty() {
        return Err(format!(
            "no controller address in --bootstrap-controller {text:?}"
        ));
    }
    Ok(out)
}

/// The RPCs of docs/tools.md §2.1, then the text to print.
async fn describe(
    dial: Dialer,
    bootstrap: Vec<(String, SocketAddr)>,
    mode: DescribeMode,
    group: GroupKey,
) -> Result<String, String> {
    let (mut leader, quorum) = if group.is_metadata() {
        let mut leader = active_connection(&dial, &bootstrap).await?;
        let quorum = describe_quorum(&mut leader).await?;
        (leader, quorum)
    } else {
        group_leader(&dial, &bootstrap, &group).await?
    };
    match mode {
        DescribeMode::Status => {
            let cluster = describe_cluster(&mut leader).await?;
            format_status_for(&group, &cluster.cluster_id, &quorum)
        }
        DescribeMode::Replication { human_readable } => {
            format_replication_for(&group, &quorum, human_readable.then(now_ms))
        }
    }
}

/// The first bootstrap controller that leads `group`, and its DescribeQuorum answer. A node
/// that follows names only the leader's id, not its address: the leader must be among them.
async fn group_leader(
    dial: &Dialer,
    bootstrap: &[(String, SocketAddr)],
    group: &GroupKey,
) -> Result<(PeerConnection, DescribeQuorumResponse), String> {
    let mut tried = Vec::new();
    for one in bootstrap {
        let mut conn = match dial.connect_any(std::slice::from_ref(one)).await {
            Ok(conn) => conn,
            Err(e) => {
                tried.push(e);
                continue;
            }
        };
        let answer = describe_quorum_for(&mut conn, group).await?;
        let error = answer
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .map(|p| (p.error_code, p.error_message.clone(), p.leader_id));
        match error {
            Some((ErrorCode::NONE, ..)) => return Ok((conn, answer)),
            Some((code, message, leader)) => tried.push(format!(
                "{}: {} (leader {leader})",
                one.1,
                error_text(code, message.as_deref())
            )),
            None => tried.push(format!("{}: no partition in the answer", one.1)),
        }
    }
    Err(format!(
        "no bootstrap controller leads {group}: {}",
        tried.join("; ")
    ))
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// How the tool reaches controllers: plaintext, or TLS as `--command-config` says.
pub struct Dialer {
    tls: Option<crate::net::tls::Tls>,
}

impl Dialer {
    pub(super) fn new(tls: Option<&crate::config::tls::TlsConfig>) -> Result<Dialer, CliError> {
        let tls = tls
            .map(crate::net::tls::Tls::client)
            .transpose()
            .map_err(|e| CliError::new(format!("TLS: {e}")))?;
        Ok(Dialer { tls })
    }

    fn from_command_config(path: Option<&std::path::Path>) -> Result<Dialer, CliError> {
        let Some(path) = path else {
            return Ok(Dialer { tls: None });
        };
        let text = std::fs::read_to_string(path).map_err(|e| {
            CliError::new(format!(
                "cannot read --command-config {}: {e}",
                path.display()
            ))
        })?;
        let props = crate::config::Properties::parse(&text);
        let tls = crate::config::tls::parse_client(&props)
            .map_err(|e| CliError::new(format!("--command-config {}: {e}", path.display())))?;
        Self::new(tls.as_ref())
    }

    /// A connection to the first of `addrs` that answers; the error names the last failure.
    /// The first of `addrs` that connects and answers ApiVersions; the error names every
    /// address tried and why each failed.
    pub(super) async fn connect_any(
        &self,
        addrs: &[(String, SocketAddr)],
    ) -> Result<PeerConnection, String> {
        let mut tried = Vec::new();
        for (host, addr) in addrs {
            let tls = self.tls.as_ref().map(|t| (t, host.as_str()));
            match PeerConnection::connect_with(*addr, CLIENT_ID, CONNECT_TIMEOUT, tls, None).await {
                Ok(conn) => return Ok(conn),
                Err(e) => tried.push(format!("{addr} ({e})")),
            }
        }
        if tried.is_empty() {
            return Err("no address to connect to".into());
        }
        Err(format!("tried {}", tried.join(", ")))
    }
}

/// One request at the highest version both sides speak within `ours`; the response body.
async fn call(
    conn: &mut PeerConnection,
    key: ApiKey,
    ours: (i16, i16),
    encode: impl FnOnce(&mut Writer, i16),
) -> Result<(i16, Bytes), String> {
    let peer = conn.peer_addr();
    let version = conn.negotiate(key, ours).ok_or_else(|| {
        format!(
            "controller {peer} does not serve {} at versions {}..={} (it offers {:?})",
            key.name(),
            ours.0,
            ours.1,
            conn.peer_range(key)
        )
    })?;
    let flexible_from = apis::served(key).map_or(0, |spec| spec.flexible_from);
    let mut body = Writer::new();
    encode(&mut body, version);
    let answer = conn
        .request(
            key,
            version,
            flexible_from,
            &body.into_vec(),
            REQUEST_TIMEOUT,
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok((version, answer))
}

/// DescribeCluster for the controllers (`EndpointType` 2) at the highest common version ≥ 1,
/// with Kafka's checks: no error code, the endpoint type that was asked for.
async fn describe_cluster(conn: &mut PeerConnection) -> Result<DescribeClusterResponse, String> {
    let peer = conn.peer_addr();
    let request = dc::DescribeClusterRequest {
        include_cluster_authorized_operations: false,
        endpoint_type: dc::ENDPOINT_TYPE_CONTROLLER,
        include_fenced_brokers: false,
    };
    let (version, answer) = call(
        conn,
        ApiKey::DESCRIBE_CLUSTER,
        (request.min_version(), *dc::VERSIONS.end()),
        |w, v| request.encode(w, v),
    )
    .await?;
    let response = DescribeClusterResponse::decode(&mut Reader::new(&answer), version, &answer)
        .map_err(|e| {
            format!("cannot decode the DescribeCluster v{version} answer of {peer}: {e}")
        })?;
    if response.error_code != ErrorCode::NONE {
        return Err(format!(
            "controller {peer} answered DescribeCluster with {}",
            error_text(response.error_code, response.error_message.as_deref())
        ));
    }
    if response.endpoint_type != dc::ENDPOINT_TYPE_CONTROLLER {
        return Err(format!(
            "controller {peer} described endpoint type {} instead of {} (controllers)",
            response.endpoint_type,
            dc::ENDPOINT_TYPE_CONTROLLER
        ));
    }
    Ok(response)
}

/// DescribeQuorum for `__cluster_metadata-0` at the highest common version.
async fn describe_quorum(conn: &mut PeerConnection) -> Result<DescribeQuorumResponse, String> {
    describe_quorum_for(conn, GroupKey::metadata()).await
}

/// DescribeQuorum for `group` at the highest common version.
async fn describe_quorum_for(
    conn: &mut PeerConnection,
    group: &GroupKey,
) -> Result<DescribeQuorumResponse, String> {
    let peer = conn.peer_addr();
    let request = dq::DescribeQuorumRequest {
        topics: vec![dq::RequestTopicData {
            topic_name: group.topic().to_owned(),
            partitions: vec![dq::RequestPartitionData {
                partition_index: group.partition(),
            }],
        }],
    };
    let ours = (*dq::VERSIONS.start(), *dq::VERSIONS.end());
    let (version, answer) = call(conn, ApiKey::DESCRIBE_QUORUM, ours, |w, v| {
        request.encode(w, v)
    })
    .await?;
    DescribeQuorumResponse::decode(&mut Reader::new(&answer), version, &answer)
        .map_err(|e| format!("cannot decode the DescribeQuorum v{version} answer of {peer}: {e}"))
}

fn error_text(code: ErrorCode, message: Option<&str>) -> String {
    match message.filter(|m| !m.is_empty()) {
        Some(m) => format!("{} ({}): {m}", code.name(), code.0),
        None => format!("{} ({})", code.name(), code.0),
    }
}

/// The active controller named by a DescribeCluster answer: its id, host and port.
pub fn active_controller(response: &DescribeClusterResponse) -> Result<(i32, String, u16), String> {
    let id = response.controller_id;
    if id < 0 {
        return Err(format!(
            "no active controller: the quorum reports ControllerId {id} \
             (an election may be in progress; try again)"
        ));
    }
    let node = response
        .brokers
        .iter()
        .find(|b| b.broker_id == id)
        .ok_or_else(|| {
            format!("the active controller {id} is not among the described controllers")
        })?;
    let port = u16::try_from(node.port).map_err(|_| {
        format!(
            "the active controller {id} has port {} out of range",
            node.port
        )
    })?;
    Ok((id, node.host.clone(), port))
}

/// Kafka's `QuorumInfo` as the tool sees it: the one partition, and the voters' endpoints
/// by node id. Mirrors the admin client's checks (`KafkaAdminClient.describeMetadataQuorum`).
struct QuorumView<'a> {
    partition: &'a PartitionData,
    nodes: HashMap<i32, &'a Node>,
}

impl<'a> QuorumView<'a> {
    /// The answer's one partition, which must be `group`'s.
    fn new(response: &'a DescribeQuorumResponse, group: &GroupKey) -> Result<Self, String> {
        if response.error_code != ErrorCode::NONE {
            return Err(format!(
                "DescribeQuorum failed: {}",
                error_text(response.error_code, response.error_message.as_deref())
            ));
        }
        let [topic] = &response.topics[..] else {
            return Err(format!(
                "DescribeQuorum answered {} topics when 1 was expected",
                response.topics.len()
            ));
        };
        let [partition] = &topic.partitions[..] else {
            return Err(format!(
                "DescribeQuorum answered {} partitions when 1 was expected",
                topic.partitions.len()
            ));
        };
        if topic.topic_name != group.topic() || partition.partition_index != group.partition() {
            return Err(format!(
                "DescribeQuorum answered {}-{} when {group} was expected",
                crate::logsafe::Untrusted(topic.topic_name.as_str()),
                partition.partition_index
            ));
        }
        if partition.error_code != ErrorCode::NONE {
            return Err(format!(
                "DescribeQuorum failed: {}",
                error_text(partition.error_code, partition.error_message.as_deref())
            ));
        }
        let mut nodes = HashMap::new();
        for node in &response.nodes {
            if nodes.insert(node.node_id, node).is_some() {
                return Err(format!("DescribeQuorum lists node {} twice", node.node_id));
            }
        }
        Ok(QuorumView { partition, nodes })
    }

    /// The leader's entry among the voters (the first with its id).
    fn leader(&self) -> Result<(usize, &'a ReplicaState), String> {
        let id = self.partition.leader_id;
        self.partition
            .current_voters
            .iter()
            .enumerate()
            .find(|(_, v)| v.replica_id == id)
            .ok_or_else(|| format!("the leader {id} is not among the current voters"))
    }

    /// `{"id": 1, "directoryId": "…", "endpoints": ["NAME://host:port", …]}` per replica, the
    /// directory id left out when ZERO, the endpoints when there are none.
    fn replicas_json(&self, replicas: &[ReplicaState]) -> String {
        let mut out = String::from("[");
        for (i, r) in replicas.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str(&format!("{{\"id\": {}", r.replica_id));
            if !r.replica_directory_id.is_nil() {
                out.push_str(&format!(
                    ", \"directoryId\": \"{}\"",
                    uuid_to_kafka_string(&r.replica_directory_id)
                ));
            }
            let listeners = self
                .nodes
                .get(&r.replica_id)
                .map_or(&[][..], |n| &n.listeners);
            if !listeners.is_empty() {
                let endpoints: Vec<String> = listeners
                    .iter()
                    .map(|l| format!("\"{}\"", endpoint_text(&l.name, &l.host, l.port)))
                    .collect();
                out.push_str(&format!(", \"endpoints\": [{}]", endpoints.join(", ")));
            }
            out.push('}');
        }
        out.push(']');
        out
    }
}

/// Kafka's `RaftVoterEndpoint.toString`: `NAME://host:port`, hosts with a `:` in brackets.
pub fn endpoint_text(name: &str, host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("{name}://[{host}]:{port}")
    } else {
        format!("{name}://{host}:{port}")
    }
}

/// `describe --status`: eight lines, labels padded to 24 characters.
pub fn format_status(
    cluster_id: &str,
    response: &DescribeQuorumResponse,
) -> Result<String, String> {
    format_status_for(GroupKey::metadata(), cluster_id, response)
}

/// `format_status` of `group`'s answer.
pub fn format_status_for(
    group: &GroupKey,
    cluster_id: &str,
    response: &DescribeQuorumResponse,
) -> Result<String, String> {
    let view = QuorumView::new(response, group)?;
    let p = view.partition;
    let (leader_at, leader) = view.leader()?;
    // Kafka's `Stream.min`: the first voter with the smallest log end offset.
    let (min_at, min) =
        p.current_voters
            .iter()
            .enumerate()
            .fold((leader_at, leader), |best, (i, v)| {
                if v.log_end_offset < best.1.log_end_offset
                    || (v.log_end_offset == best.1.log_end_offset && i < best.0)
                {
                    (i, v)
                } else {
                    best
                }
            });
    let max_lag = leader.log_end_offset.wrapping_sub(min.log_end_offset);
    // Kafka compares the two entries by reference: a follower tied with the leader and listed
    // before it is "the max-lag follower".
    let max_lag_time = if min_at == leader_at {
        0
    } else if leader.last_caught_up_timestamp != -1 && min.last_caught_up_timestamp != -1 {
        leader
            .last_caught_up_timestamp
            .wrapping_sub(min.last_caught_up_timestamp)
    } else {
        -1
    };
    let lines = [
        ("ClusterId:", cluster_id.to_owned()),
        ("LeaderId:", p.leader_id.to_string()),
        ("LeaderEpoch:", p.leader_epoch.to_string()),
        ("HighWatermark:", p.high_watermark.to_string()),
        ("MaxFollowerLag:", max_lag.to_string()),
        ("MaxFollowerLagTimeMs:", max_lag_time.to_string()),
        ("CurrentVoters:", view.replicas_json(&p.current_voters)),
        ("CurrentObservers:", view.replicas_json(&p.observers)),
    ];
    let mut text: String = lines
        .iter()
        .map(|(label, value)| format!("{label:<24}{value}\n"))
        .collect();
    // ringraft's own line, for the groups besides group 0 (whose answers are Kafka's).
    if let Some(home) = p.home {
        let line = format!(
            "shard {} (cpu {}) on node {}",
            home.shard, home.cpu, p.leader_id
        );
        text.push_str(&format!("{:<24}{line}\n", "LeaderHome:"));
    }
    Ok(text)
}

/// `describe --replication`: a header and one row per replica (leader, other voters,
/// observers), every cell padded to its column's width and followed by a tab. `now_ms` set
/// means `--human-readable` (timestamps as `<n> ms ago`, relative to it).
pub fn format_replication(
    response: &DescribeQuorumResponse,
    now_ms: Option<i64>,
) -> Result<String, String> {
    format_replication_for(GroupKey::metadata(), response, now_ms)
}

/// `format_replication` of `group`'s answer.
pub fn format_replication_for(
    group: &GroupKey,
    response: &DescribeQuorumResponse,
    now_ms: Option<i64>,
) -> Result<String, String> {
    let view = QuorumView::new(response, group)?;
    let p = view.partition;
    let (_, leader) = view.leader()?;
    let timestamp = |ts: i64, desc: &str| -> Result<String, String> {
        match now_ms {
            _ if ts == -1 => Ok("-1".to_owned()),
            None => Ok(ts.to_string()),
            Some(now) => relative_time_ms(ts, desc, now).map(|ms| format!("{ms} ms ago")),
        }
    };
    let row = |r: &ReplicaState, status: &str| -> Result<Vec<String>, String> {
        Ok(vec![
            r.replica_id.to_string(),
            uuid_to_kafka_string(&r.replica_directory_id),
            r.log_end_offset.to_string(),
            leader
                .log_end_offset
                .wrapping_sub(r.log_end_offset)
                .to_string(),
            timestamp(r.last_fetch_timestamp, "last fetch")?,
            timestamp(r.last_caught_up_timestamp, "last caught up")?,
            status.to_owned(),
        ])
    };
    let mut rows = vec![row(leader, "Leader")?];
    for v in p
        .current_voters
        .iter()
        .filter(|v| v.replica_id != p.leader_id)
    {
        rows.push(row(v, "Follower")?);
    }
    for o in &p.observers {
        rows.push(row(o, "Observer")?);
    }
    let headers = [
        "NodeId",
        "DirectoryId",
        "LogEndOffset",
        "Lag",
        "LastFetchTimestamp",
        "LastCaughtUpTimestamp",
        "Status",
    ];
    Ok(pretty_table(&headers, &rows))
}

/// Kafka's `MetadataQuorumCommand.relativeTimeMs`: `now − ts`, refused unless
/// `0 < ts ≤ now`.
fn relative_time_ms(ts: i64, desc: &str, now: i64) -> Result<i64, String> {
    if ts > 0 && ts <= now {
        Ok(now - ts)
    } else {
        Err(format!(
            "Error while computing relative time, possible drift in system clock.\n\
             Current timestamp is {now}, {desc} timestamp is {ts}"
        ))
    }
}

/// Kafka's `ToolsUtils.prettyPrintTable`: each cell left-aligned, padded with spaces to the
/// widest cell of its column (header included) and followed by a tab; one line per row.
fn pretty_table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        for (cell, width) in cells.zip(&widths) {
            out.push_str(cell);
            out.extend(std::iter::repeat_n(' ', width - cell.chars().count()));
            out.push('\t');
        }
        out.push('\n');
    };
    line(&mut headers.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::describe_cluster::DescribeClusterBroker;
    use crate::protocol::describe_quorum::{Listener, TopicData};
    use uuid::Uuid;

    // Kafka's text for these ids (base64url of the 16 bytes, no padding), worked out by hand.
    const U1: u128 = 0x27c6803dc7cb42dd9baacd494ffacc81; // J8aAPcfLQt2bqs1JT_rMgQ
    const U2: u128 = 0x0123456789abcdef0123456789abcdef; // ASNFZ4mrze8BI0VniavN7w
    const U4: u128 = 1; // AAAAAAAAAAAAAAAAAAAAAQ

    fn replica(id: i32, dir: u128, leo: i64, fetch: i64, caught_up: i64) -> ReplicaState {
        ReplicaState {
            replica_id: id,
            replica_directory_id: Uuid::from_u128(dir),
            log_end_offset: leo,
            last_fetch_timestamp: fetch,
            last_caught_up_timestamp: caught_up,
        }
    }

    fn listener(name: &str, host: &str, port: u16) -> Listener {
        Listener {
            name: name.into(),
            host: host.into(),
            port,
        }
    }

    fn response(partition: PartitionData, nodes: Vec<Node>) -> DescribeQuorumResponse {
        DescribeQuorumResponse {
            error_code: ErrorCode::NONE,
            error_message: None,
            topics: vec![TopicData {
                topic_name: METADATA_TOPIC_NAME.into(),
                partitions: vec![partition],
            }],
            nodes,
        }
    }

    /// Leader 1 listed second; voter 3 with a ZERO directory id and no timestamps; one
    /// observer; voter 2 with an IPv6 and a second listener, voter 3 with no listener.
    fn quorum() -> DescribeQuorumResponse {
        response(
            PartitionData {
                partition_index: 0,
                error_code: ErrorCode::NONE,
                error_message: None,
                leader_id: 1,
                leader_epoch: 5,
                high_watermark: 100,
                current_voters: vec![
                    replica(2, U2, 98, 1_700_000_009_000, 1_700_000_008_000),
                    replica(1, U1, 100, 1_700_000_010_000, 1_700_000_010_000),
                    replica(3, 0, 100, -1, -1),
                ],
                observers: vec![replica(4, U4, 90, 1_700_000_009_900, 1_700_000_001_000)],
                home: None,
            },
            vec![
                Node {
                    node_id: 1,
                    listeners: vec![listener("CONTROLLER", "localhost", 9093)],
                },
                Node {
                    node_id: 2,
                    listeners: vec![
                        listener("CONTROLLER", "::1", 9094),
                        listener("EXTERNAL", "h2", 19094),
                    ],
                },
                Node {
                    node_id: 3,
                    listeners: vec![],
                },
            ],
        )
    }

    fn partition_mut(r: &mut DescribeQuorumResponse) -> &mut PartitionData {
        &mut r.topics[0].partitions[0]
    }

    #[test]
    fn status_prints_kafkas_eight_lines() {
        let expected = concat!(
            "ClusterId:              MkU3OEVBNTcwNTJENDM2Qk\n",
            "LeaderId:               1\n",
            "LeaderEpoch:            5\n",
            "HighWatermark:          100\n",
            "MaxFollowerLag:         2\n",
            "MaxFollowerLagTimeMs:   2000\n",
            "CurrentVoters:          [",
            "{\"id\": 2, \"directoryId\": \"ASNFZ4mrze8BI0VniavN7w\", ",
            "\"endpoints\": [\"CONTROLLER://[::1]:9094\", \"EXTERNAL://h2:19094\"]}, ",
            "{\"id\": 1, \"directoryId\": \"J8aAPcfLQt2bqs1JT_rMgQ\", ",
            "\"endpoints\": [\"CONTROLLER://localhost:9093\"]}, ",
            "{\"id\": 3}]\n",
            "CurrentObservers:       [{\"id\": 4, \"directoryId\": \"AAAAAAAAAAAAAAAAAAAAAQ\"}]\n",
        );
        assert_eq!(
            format_status("MkU3OEVBNTcwNTJENDM2Qk", &quorum()).unwrap(),
            expected
        );
    }

    #[test]
    fn status_of_a_single_voter_without_observers_or_v2_fields() {
        // What a v0/v1 answer decodes to: ZERO directory ids, no Nodes.
        let r = response(
            PartitionData {
                leader_id: 7,
                leader_epoch: 1,
                high_watermark: 0,
                current_voters: vec![replica(7, 0, 0, -1, -1)],
                ..Default::default()
            },
            vec![],
        );
        let expected = concat!(
            "ClusterId:              c\n",
            "LeaderId:               7\n",
            "LeaderEpoch:            1\n",
            "HighWatermark:          0\n",
            "MaxFollowerLag:         0\n",
            "MaxFollowerLagTimeMs:   0\n",
            "CurrentVoters:          [{\"id\": 7}]\n",
            "CurrentObservers:       []\n",
        );
        assert_eq!(format_status("c", &r).unwrap(), expected);
    }

    #[test]
    fn max_follower_lag_time_follows_kafkas_min_and_missing_rules() {
        let lag = |voters: Vec<ReplicaState>| {
            let mut r = quorum();
            partition_mut(&mut r).current_voters = voters;
            let text = format_status("c", &r).unwrap();
            let line = |label: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(label))
                    .unwrap()
                    .trim_start()
                    .to_owned()
            };
            (line("MaxFollowerLag:"), line("MaxFollowerLagTimeMs:"))
        };
        // The leader is the only voter with the smallest LEO: 0.
        assert_eq!(
            lag(vec![
                replica(2, U2, 60, 1, 900),
                replica(1, U1, 50, 1, 1000)
            ]),
            ("0".into(), "0".into())
        );
        // A follower tied with the leader and listed first is Kafka's "max-lag follower".
        assert_eq!(
            lag(vec![
                replica(2, U2, 100, 1, 900),
                replica(1, U1, 100, 1, 1000)
            ]),
            ("0".into(), "100".into())
        );
        // Listed after the leader, the tie goes to the leader.
        assert_eq!(
            lag(vec![
                replica(1, U1, 100, 1, 1000),
                replica(2, U2, 100, 1, 900)
            ]),
            ("0".into(), "0".into())
        );
        // A missing caught-up time on either side: -1.
        assert_eq!(
            lag(vec![
                replica(1, U1, 100, 1, 1000),
                replica(2, U2, 90, 1, -1)
            ]),
            ("10".into(), "-1".into())
        );
        assert_eq!(
            lag(vec![replica(1, U1, 100, 1, -1), replica(2, U2, 90, 1, 900)]),
            ("10".into(), "-1".into())
        );
    }

    #[test]
    fn replication_prints_kafkas_table() {
        let expected = concat!(
            "NodeId\tDirectoryId           \tLogEndOffset\tLag\tLastFetchTimestamp\tLastCaughtUpTimestamp\tStatus  \t\n",
            "1     \tJ8aAPcfLQt2bqs1JT_rMgQ\t100         \t0  \t1700000010000     \t1700000010000        \tLeader  \t\n",
            "2     \tASNFZ4mrze8BI0VniavN7w\t98          \t2  \t1700000009000     \t1700000008000        \tFollower\t\n",
            "3     \tAAAAAAAAAAAAAAAAAAAAAA\t100         \t0  \t-1                \t-1                   \tFollower\t\n",
            "4     \tAAAAAAAAAAAAAAAAAAAAAQ\t90          \t10 \t1700000009900     \t1700000001000        \tObserver\t\n",
        );
        assert_eq!(format_replication(&quorum(), None).unwrap(), expected);
    }

    #[test]
    fn replication_human_readable_is_relative_to_now() {
        let expected = concat!(
            "NodeId\tDirectoryId           \tLogEndOffset\tLag\tLastFetchTimestamp\tLastCaughtUpTimestamp\tStatus  \t\n",
            "1     \tJ8aAPcfLQt2bqs1JT_rMgQ\t100         \t0  \t250 ms ago        \t250 ms ago           \tLeader  \t\n",
            "2     \tASNFZ4mrze8BI0VniavN7w\t98          \t2  \t1250 ms ago       \t2250 ms ago          \tFollower\t\n",
            "3     \tAAAAAAAAAAAAAAAAAAAAAA\t100         \t0  \t-1                \t-1                   \tFollower\t\n",
            "4     \tAAAAAAAAAAAAAAAAAAAAAQ\t90          \t10 \t350 ms ago        \t9250 ms ago          \tObserver\t\n",
        );
        assert_eq!(
            format_replication(&quorum(), Some(1_700_000_010_250)).unwrap(),
            expected
        );
    }

    #[test]
    fn replication_of_a_lone_leader_keeps_header_widths() {
        let r = response(
            PartitionData {
                leader_id: 1,
                current_voters: vec![replica(1, U1, 5, -1, -1)],
                ..Default::default()
            },
            vec![],
        );
        let expected = concat!(
            "NodeId\tDirectoryId           \tLogEndOffset\tLag\tLastFetchTimestamp\tLastCaughtUpTimestamp\tStatus\t\n",
            "1     \tJ8aAPcfLQt2bqs1JT_rMgQ\t5           \t0  \t-1                \t-1                   \tLeader\t\n",
        );
        assert_eq!(format_replication(&r, None).unwrap(), expected);
        assert_eq!(format_replication(&r, Some(1)).unwrap(), expected);
    }

    #[test]
    fn human_readable_refuses_future_and_non_positive_timestamps() {
        let err = format_replication(&quorum(), Some(1_700_000_009_950)).unwrap_err();
        assert_eq!(
            err,
            "Error while computing relative time, possible drift in system clock.\n\
             Current timestamp is 1700000009950, last fetch timestamp is 1700000010000"
        );
        let mut r = quorum();
        partition_mut(&mut r).observers[0].last_caught_up_timestamp = 0;
        let err = format_replication(&r, Some(1_700_000_010_250)).unwrap_err();
        assert!(err.ends_with("last caught up timestamp is 0"), "{err}");
    }

    #[test]
    fn endpoints_bracket_ipv6_hosts() {
        assert_eq!(endpoint_text("CONTROLLER", "h", 1), "CONTROLLER://h:1");
        assert_eq!(
            endpoint_text("CONTROLLER", "fe80::1", 9093),
            "CONTROLLER://[fe80::1]:9093"
        );
    }

    #[test]
    fn error_answers_are_refused_with_their_code_and_message() {
        let mut r = quorum();
        let p = partition_mut(&mut r);
        p.error_code = ErrorCode::NOT_LEADER_OR_FOLLOWER;
        p.error_message = Some("this controller is not the leader".into());
        assert_eq!(
            format_status("c", &r).unwrap_err(),
            "DescribeQuorum failed: NOT_LEADER_OR_FOLLOWER (6): this controller is not the leader"
        );
        assert_eq!(
            format_replication(&r, None).unwrap_err(),
            "DescribeQuorum failed: NOT_LEADER_OR_FOLLOWER (6): this controller is not the leader"
        );

        let mut r = quorum();
        r.error_code = ErrorCode::UNKNOWN_SERVER_ERROR;
        assert_eq!(
            format_status("c", &r).unwrap_err(),
            "DescribeQuorum failed: UNKNOWN_SERVER_ERROR (-1)"
        );

        let mut r = quorum();
        r.topics[0].topic_name = "other".into();
        assert!(format_status("c", &r).is_err());
        let mut r = quorum();
        r.topics.clear();
        assert!(format_replication(&r, None).is_err());
        let mut r = quorum();
        partition_mut(&mut r).partition_index = 1;
        assert!(format_replication(&r, None).is_err());
        let mut r = quorum();
        let node = r.nodes[0].clone();
        r.nodes.push(node);
        assert_eq!(
            format_status("c", &r).unwrap_err(),
            "DescribeQuorum lists node 1 twice"
        );
    }

    #[test]
    fn a_leader_missing_from_the_voters_is_an_error_not_a_panic() {
        for leader in [9, -1] {
            let mut r = quorum();
            partition_mut(&mut r).leader_id = leader;
            let expected = format!("the leader {leader} is not among the current voters");
            assert_eq!(format_status("c", &r).unwrap_err(), expected);
            assert_eq!(format_replication(&r, None).unwrap_err(), expected);
        }
    }

    #[test]
    fn active_controller_comes_from_controller_id_and_brokers() {
        let broker = |id, host: &str, port| DescribeClusterBroker {
            broker_id: id,
            host: host.into(),
            port,
            rack: None,
            is_fenced: false,
        };
        let mut r = DescribeClusterResponse {
            endpoint_type: dc::ENDPOINT_TYPE_CONTROLLER,
            cluster_id: "c".into(),
            controller_id: 2,
            brokers: vec![broker(1, "a", 9091), broker(2, "b", 9092)],
            ..Default::default()
        };
        assert_eq!(active_controller(&r).unwrap(), (2, "b".into(), 9092));
        r.controller_id = -1;
        assert!(active_controller(&r)
            .unwrap_err()
            .contains("ControllerId -1"));
        r.controller_id = 3;
        assert!(active_controller(&r).is_err());
        r.controller_id = 1;
        r.brokers[0].port = 70_000;
        assert!(active_controller(&r).is_err());
    }

    #[test]
    fn bootstrap_addresses_parse_and_resolve() {
        assert_eq!(
            parse_bootstrap("127.0.0.1:9093").unwrap(),
            vec!["127.0.0.1:9093".parse::<SocketAddr>().unwrap()]
        );
        assert_eq!(
            parse_bootstrap("[::1]:9093, 127.0.0.1:1,127.0.0.1:1").unwrap(),
            vec![
                "[::1]:9093".parse::<SocketAddr>().unwrap(),
                "127.0.0.1:1".parse().unwrap()
            ]
        );
        assert!(parse_bootstrap("localhost:9093")
            .unwrap()
            .iter()
            .all(|a| a.port() == 9093 && a.ip().is_loopback()));
        for bad in [
            "",
            "127.0.0.1",
            "127.0.0.1:x",
            ":9093",
            "127.0.0.1:70000",
            ",",
        ] {
            assert!(parse_bootstrap(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn option_checks_match_kafkas() {
        let args = |status, replication, human_readable| DescribeArgs {
            status,
            replication,
            human_readable,
            bootstrap_controller: None,
            command_config: None,
            topic: METADATA_TOPIC_NAME.into(),
            partition: 0,
        };
        assert_eq!(args(true, false, false).mode(), Ok(DescribeMode::Status));
        assert_eq!(
            args(false, true, true).mode(),
            Ok(DescribeMode::Replication {
                human_readable: true
            })
        );
        assert!(args(true, true, false)
            .mode()
            .unwrap_err()
            .starts_with("Only one of --status or --replication"));
        assert!(args(true, false, true)
            .mode()
            .unwrap_err()
            .starts_with("The option --human-readable is only supported"));
        assert!(args(false, false, false)
            .mode()
            .unwrap_err()
            .starts_with("One of --status or --replication must be specified"));
    }
}
