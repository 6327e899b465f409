//! The `ringraft` command line (clap). Each subcommand parses its arguments and calls into the
//! library; nothing here holds state. Errors end the process with a message and exit code 1.

pub mod debug;
pub mod format;
pub mod log;
pub mod quorum;
pub mod recover;
pub mod storage;

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

use crate::config::{Properties, ServerConfig, Tuning};

#[derive(Debug, Parser)]
#[command(
    name = "ringraft",
    version,
    about = "A KRaft metadata quorum node for Linux"
)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// `ringraft` with no subcommand is `ringraft start`, and takes its flags.
    #[command(flatten)]
    pub start: StartArgs,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the node (the default: without -c, a single-voter quorum on 127.0.0.1:9093 with its
    /// data under ./data, formatted on first start).
    Start(StartArgs),
    /// Prepare or inspect log directories (like kafka-storage).
    #[command(subcommand)]
    Storage(storage::StorageCommand),
    /// Describe the metadata quorum through a controller (like kafka-metadata-quorum).
    #[command(subcommand)]
    Quorum(quorum::QuorumCommand),
    /// Append to and tail the metadata log (like kafka-console-producer/-consumer).
    #[command(subcommand)]
    Log(log::LogCommand),
    /// Benchmarks that print ratios against baselines measured in the same run.
    #[command(subcommand)]
    Bench(crate::bench::BenchCommand),
    /// Print the version.
    Version,
    /// Tools for tests and investigations.
    #[command(subcommand, hide = true)]
    Debug(debug::DebugCommand),
}

#[derive(Debug, Default, clap::Args)]
pub struct StartArgs {
    /// server.properties with Kafka's controller keys. Without it: the embedded default.
    #[arg(short = 'c', long = "config")]
    pub config: Option<PathBuf>,
    /// The embedded default's controller listener (default 127.0.0.1:9093). `ringraft quorum`
    /// and `ringraft log` read the same variable to find it.
    #[arg(long, value_name = "HOST:PORT", env = LISTEN_ENV)]
    pub listen: Option<String>,
    /// The embedded default's admin listener: /metrics, /livez, /readyz (default
    /// 127.0.0.1:9094).
    #[arg(long, value_name = "HOST:PORT", env = ADMIN_ENV)]
    pub admin: Option<String>,
    /// Core placement (tuning/*.toml). Without it: every online core, roles spread by rule.
    #[arg(long = "tuning")]
    pub tuning: Option<PathBuf>,
    /// How log lines look on stderr: text (key=value) or json (one object per line).
    #[arg(long = "log-format", value_enum, default_value_t = crate::node::LogFormat::Text)]
    pub log_format: crate::node::LogFormat,
    /// Load generator: append this many records per second while this node leads (open
    /// loop, in the shape of Kafka's TestRaftServer). Record i's value is i as a big-endian
    /// u64, zero-padded to --load-record-bytes; the sequence restarts at 0 with each
    /// leadership. Prints one JSON progress line per --load-report-ms and a summary.
    #[arg(long = "load-rate", help_heading = "Load generator")]
    pub load_rate: Option<u64>,
    /// Bytes per record value (at least 8).
    #[arg(
        long = "load-record-bytes",
        default_value_t = 100,
        help_heading = "Load generator"
    )]
    pub load_record_bytes: usize,
    /// Wake at most once per this many milliseconds and append the records due by then as
    /// one batch (0: at each record's own due time). Kafka's TestRaftServer throttles in whole
    /// milliseconds; latency still counts from when each batch's first record was due.
    #[arg(
        long = "load-tick-ms",
        default_value_t = 0,
        value_parser = clap::value_parser!(u64).range(0..=60_000),
        help_heading = "Load generator"
    )]
    pub load_tick_ms: u64,
    /// Measured seconds after the warm-up; 0 runs until stopped.
    #[arg(
        long = "load-seconds",
        default_value_t = 0,
        help_heading = "Load generator"
    )]
    pub load_seconds: u64,
    /// Appends in the first this many milliseconds are not measured.
    #[arg(
        long = "load-warmup-ms",
        default_value_t = 1000,
        help_heading = "Load generator"
    )]
    pub load_warmup_ms: u64,
    /// Interval between progress lines.
    #[arg(
        long = "load-report-ms",
        default_value_t = 1000,
        help_heading = "Load generator"
    )]
    pub load_report_ms: u64,
    /// Acknowledgements: one line per committed append, written once the commit is known:
    /// `<last offset> <first sequence> <record count> <commit unix µs>` (the batch holds
    /// offsets last−count+1..=last). What the fault suite checks every node's log against.
    #[arg(long = "load-ack-file", help_heading = "Load generator")]
    pub load_ack_file: Option<PathBuf>,
    /// Snapshot (and drop the log below it) every this many committed records.
    #[arg(
        long = "load-snapshot-every",
        default_value_t = 0,
        help_heading = "Load generator"
    )]
    pub load_snapshot_every: u64,
    /// After the measured seconds, stream one snapshot of about this many bytes.
    #[arg(
        long = "load-snapshot-bytes",
        default_value_t = 0,
        help_heading = "Load generator"
    )]
    pub load_snapshot_bytes: u64,
}

/// A failed command: the message goes to stderr, then the process exits with `code`.
#[derive(Debug)]
pub struct CliError {
    pub message: Option<String>,
    pub code: i32,
}

impl CliError {
    pub fn new(message: impl Into<String>) -> Self {
        CliError {
            message: Some(message.into()),
            code: 1,
        }
    }

    /// A failure whose explanation was already printed.
    pub fn silent(code: i32) -> Self {
        CliError {
            message: None,
            code,
        }
    }
}

impl From<crate::bench::BenchError> for CliError {
    fn from(e: crate::bench::BenchError) -> Self {
        CliError {
            message: e.message,
            code: e.code,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message.as_deref().unwrap_or("failed"))
    }
}

/// The environment variable that moves the embedded default's controller listener (as
/// `--listen` does), and where `ringraft quorum …` and `ringraft log …` look without
/// `--bootstrap-controller`.
pub const LISTEN_ENV: &str = "RINGRAFT_LISTEN";
/// The environment variable that moves the embedded default's admin listener (`--admin`).
pub const ADMIN_ENV: &str = "RINGRAFT_ADMIN";

/// `--bootstrap-controller` when none is given: the embedded default's listener
/// (`$RINGRAFT_LISTEN`, else 127.0.0.1:9093).
pub fn default_bootstrap_controller() -> String {
    std::env::var(LISTEN_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| format!("127.0.0.1:{}", crate::constants::DEFAULT_CONTROLLER_PORT))
}

/// The embedded default, with `--listen` and `--admin` applied.
fn embedded_config(args: &StartArgs) -> Result<ServerConfig, CliError> {
    use crate::config::server::{embedded_default_properties_at, parse_host_port};
    use crate::constants::{DEFAULT_ADMIN_PORT, DEFAULT_CONTROLLER_PORT};
    let address = |flag: &str, env: &str, given: &Option<String>, port: u16| {
        let Some(text) = given else {
            return Ok(format!("127.0.0.1:{port}"));
        };
        match parse_host_port(text.trim()) {
            Ok((host, port)) if !host.is_empty() && port != 0 => Ok(text.trim().to_string()),
            Ok(_) => Err(CliError::new(format!(
                "--{flag} (or {env}) {text:?}: give a host and a non-zero port, e.g. \
                 127.0.0.1:{port}"
            ))),
            Err(why) => Err(CliError::new(format!(
                "--{flag} (or {env}) {text:?}: {why}"
            ))),
        }
    };
    let listen = address("listen", LISTEN_ENV, &args.listen, DEFAULT_CONTROLLER_PORT)?;
    let admin = address("admin", ADMIN_ENV, &args.admin, DEFAULT_ADMIN_PORT)?;
    let text = embedded_default_properties_at(&listen, &admin);
    ServerConfig::from_properties(&Properties::parse(&text))
        .map_err(|e| CliError::new(format!("embedded default: {e}")))
}

/// Reads and validates a server.properties file.
pub fn load_config(path: &Path) -> Result<ServerConfig, CliError> {
    let bytes = fs::read(path)
        .map_err(|e| CliError::new(format!("cannot read config {}: {e}", path.display())))?;
    let text: String = bytes.iter().map(|&b| char::from(b)).collect();
    ServerConfig::from_properties(&Properties::parse(&text))
        .map_err(|e| CliError::new(format!("{}: {e}", path.display())))
}

fn load_tuning(path: Option<&Path>) -> Result<Tuning, CliError> {
    let online = crate::config::tuning::online_cpus();
    let Some(path) = path else {
        return Ok(Tuning::spread(&online));
    };
    let text = fs::read_to_string(path)
        .map_err(|e| CliError::new(format!("cannot read tuning {}: {e}", path.display())))?;
    Tuning::parse(&text, &online).map_err(|e| CliError::new(format!("{}: {e}", path.display())))
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> Result<(), CliError> {
    // Every command may open a whole log (storage info, debug read-log): one descriptor per
    // segment. Best effort, as the node's own preflight.
    let _ = crate::sys::raise_nofile_soft();
    match cli.command.unwrap_or(Command::Start(cli.start)) {
        Command::Start(args) => start(&args),
        Command::Storage(command) => storage::run(command),
        Command::Quorum(command) => quorum::run(command),
        Command::Log(command) => log::run(command),
        Command::Debug(command) => debug::run(command),
        Command::Bench(command) => crate::bench::run(command).map_err(CliError::from),
        Command::Version => {
            println!("ringraft {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
    }
}

fn start(args: &StartArgs) -> Result<(), CliError> {
    let tuning = load_tuning(args.tuning.as_deref())?;
    let (config, embedded) = match &args.config {
        Some(path) => {
            if args.listen.is_some() || args.admin.is_some() {
                return Err(CliError::new(format!(
                    "--listen and --admin (or {LISTEN_ENV} and {ADMIN_ENV}) move the embedded \
                     default's listeners; with -c, set listeners and ringraft.admin.listener in \
                     {}",
                    path.display()
                )));
            }
            (load_config(path)?, false)
        }
        None => (embedded_config(args)?, true),
    };
    let load = args.load_rate.map(|rate| crate::node::load::LoadSpec {
        rate_per_s: rate,
        tick_ms: args.load_tick_ms,
        record_bytes: args.load_record_bytes,
        seconds: args.load_seconds,
        warmup_ms: args.load_warmup_ms,
        report_ms: args.load_report_ms.max(1),
        ack_file: args.load_ack_file.clone(),
        snapshot_every: args.load_snapshot_every,
        snapshot_bytes: args.load_snapshot_bytes,
    });
    let mut builder = crate::embed::Node::builder(config)
        .tuning(tuning)
        .handle_signals(true);
    builder = match args.log_format {
        crate::node::LogFormat::Text => builder.init_logging(true),
        crate::node::LogFormat::Json => builder.init_json_logging(),
    };
    if embedded {
        builder = builder.format_new_cluster_if_empty();
    }
    if let Some(load) = load {
        builder = builder.load(load);
    }
    let failed = |e: crate::node::NodeError| CliError::new(e.to_string());
    builder.start().map_err(failed)?.join().map_err(failed)
}
