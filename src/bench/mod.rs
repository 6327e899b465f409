//! The benchmark programs behind `ringraft bench …`, beside the library rather than inside its
//! command line: each program in its own file, one shared harness (`harness`: scratch
//! directories, node processes, the schedule and summaries) and one report (`report`: goals as
//! ratios against a baseline measured in the same run, `--check`, plots).
//!
//! - `log`: the log's write path against the disk's own floor;
//! - `quorum`: 3-voter commit latency against an ideal floor (`floor`, its processes);
//! - `fetch`: fan-out to observers, catch-up and snapshot streaming against raw reads;
//! - `soak`: memory of a 3-voter quorum under steady load;
//! - `sweep`: `bench quorum --sweep`, the floor and ringraft from 2k to 100k records/s;
//! - `groups`: many Raft groups, throughput and idle cost (issue 25).

pub mod fetch;
pub mod floor;
pub mod groups;
pub mod harness;
pub mod log;
pub mod quorum;
pub mod report;
pub mod soak;
pub mod sweep;
pub mod transfer;

use clap::Subcommand;

/// A failed bench: the message (if not already printed) goes to stderr, then the process exits
/// with `code` (`report::MISSED_EXIT_CODE` when `--check` finds a goal missed).
#[derive(Debug)]
pub struct BenchError {
    pub message: Option<String>,
    pub code: i32,
}

impl BenchError {
    pub fn new(message: impl Into<String>) -> Self {
        BenchError {
            message: Some(message.into()),
            code: 1,
        }
    }
}

impl From<String> for BenchError {
    fn from(message: String) -> Self {
        BenchError::new(message)
    }
}

impl From<&str> for BenchError {
    fn from(message: &str) -> Self {
        BenchError::new(message)
    }
}

impl std::fmt::Display for BenchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message.as_deref().unwrap_or("failed"))
    }
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Durable append latency and throughput against the raw disk, with ratios.
    Log(log::LogBenchArgs),
    /// 3-voter commit latency at a target rate against an ideal floor, with ratios.
    Quorum(quorum::QuorumBenchArgs),
    /// Fetch fan-out to observers, catch-up and snapshot streaming, against same-run
    /// baselines, with ratios.
    Fetch(fetch::FetchBenchArgs),
    /// Leadership transfers under load: the write pause each causes, against the commit
    /// latency measured in the same run.
    Transfer(transfer::TransferBenchArgs),
    /// Many Raft groups on three nodes: throughput with one group and with many, idle groups'
    /// cost, against same-run baselines.
    Groups(groups::GroupsBenchArgs),
    /// A 3-voter quorum under steady load for a long while: each node's memory after the
    /// warm-up must stay flat (RSS at the end within 10 % of RSS after the warm-up).
    Soak(soak::SoakBenchArgs),
    /// One process of `bench quorum`'s floor (spawned by it).
    #[command(hide = true)]
    QuorumFloorNode(floor::FloorNodeArgs),
}

/// Runs one bench program.
pub fn run(command: BenchCommand) -> Result<(), BenchError> {
    match command {
        BenchCommand::Log(args) => log::run(args),
        BenchCommand::Quorum(args) => quorum::run(args),
        BenchCommand::Fetch(args) => fetch::run(args),
        BenchCommand::Soak(args) => soak::run(args),
        BenchCommand::Transfer(args) => transfer::run(args),
        BenchCommand::Groups(args) => groups::run(args),
        BenchCommand::QuorumFloorNode(args) => floor::run_floor_node(args),
    }
}
