//! Hidden commands for tests and investigations (`ringraft debug …`).
//!
//! `append-loop` appends batches to a metadata log directory from several concurrent writers
//! and prints `acked <base> <last> <crc>` for each batch only after `flush` says it is durable,
//! where `<crc>` is the CRC32C of the batch's record values. The crash tests kill it with
//! SIGKILL and check every printed batch after recovery. A storage error ends it with exit 1.

use std::io::Write;
use std::path::PathBuf;
use std::rc::Rc;

use clap::Subcommand;

use super::CliError;
use crate::log::{LogConfig, MetadataLog};
use crate::records::{Batch, BatchBuilder};

#[derive(Debug, Subcommand)]
pub enum DebugCommand {
    /// Append to a log until killed (or `--batches` are done), printing durable batches.
    AppendLoop {
        /// The partition directory (`…/__cluster_metadata-0`).
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value_t = 4)]
        writers: usize,
        /// Stop after this many batches (0 = never).
        #[arg(long, default_value_t = 0)]
        batches: u64,
        #[arg(long, default_value_t = 65536)]
        segment_bytes: usize,
    },
    /// Write a realistic metadata log (leader changes, voters, NoOp records, several segments,
    /// a snapshot) into a partition directory, then print every batch as `read-log` does.
    MakeLog {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value_t = 16384)]
        segment_bytes: usize,
    },
    /// Run light observers (Fetch clients with replica ids 1000, 1001, …, as `bench fetch`
    /// uses) against a running quorum for a while, then print where each got to.
    Observe {
        /// Voters' addresses, node 1's first (host:port,host:port,…).
        #[arg(long, value_delimiter = ',', required = true)]
        voters: Vec<std::net::SocketAddr>,
        #[arg(long, default_value_t = 5)]
        observers: usize,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// The cluster id to send (none: Kafka's brokers also may send none).
        #[arg(long)]
        cluster_id: Option<String>,
    },
    /// Open (and so recover) a partition directory and print every batch:
    /// `batch <base> <last> <epoch> <control|data> <records> <crc> <first> <max timestamp>`
    /// and its control records.
    ReadLog {
        #[arg(long)]
        dir: PathBuf,
        /// Also print each data record: `record <offset> <timestamp> <value as hex>` (what
        /// `ringraft log tail` is checked against).
        #[arg(long)]
        records: bool,
    },
}

fn executor() -> Result<glommio::LocalExecutor, CliError> {
    glommio::LocalExecutorBuilder::default()
        .io_memory(512 * 1024)
        .make()
        .map_err(|e| CliError::new(format!("cannot start glommio: {e}")))
}

pub fn run(command: DebugCommand) -> Result<(), CliError> {
    match command {
        DebugCommand::MakeLog { dir, segment_bytes } => {
            let config = LogConfig {
                segment_bytes,
                preallocate_bytes: 256 * 1024,
                cache_bytes: 1 << 20,
            };
            executor()?.run(make_log(dir, config))
        }
        DebugCommand::ReadLog { dir, records } => executor()?.run(read_log(dir, records)),
        DebugCommand::Observe {
            voters,
            observers,
            seconds,
            cluster_id,
        } => crate::bench::fetch::observe(voters, observers, seconds, cluster_id)
            .map_err(CliError::from),
        DebugCommand::AppendLoop {
            dir,
            writers,
            batches,
            segment_bytes,
        } => {
            let config = LogConfig {
                segment_bytes,
                preallocate_bytes: 256 * 1024,
                cache_bytes: 1 << 20,
            };
            glommio::LocalExecutorBuilder::default()
                .io_memory(512 * 1024)
                .make()
                .map_err(|e| CliError::new(format!("cannot start glommio: {e}")))?
                .run(append_loop(dir, config, writers, batches))
        }
    }
}

/// CRC32C over the values of a batch's records, in order: what `acked` lines carry.
pub fn values_crc(batch: &Batch<'_>) -> u32 {
    let mut crc = 0;
    for record in batch.records().expect("uncompressed") {
        crc = crc32c::crc32c_append(crc, record.expect("valid record").value.unwrap_or(&[]));
    }
    crc
}

async fn append_loop(
    dir: PathBuf,
    config: LogConfig,
    writers: usize,
    batches: u64,
) -> Result<(), CliError> {
    let (log, report) = MetadataLog::open(&dir, config)
        .await
        .map_err(|e| CliError::new(format!("cannot open the log: {e}")))?;
    eprintln!("opened: end {} report {:?}", log.end_offset(), report);
    let log = Rc::new(log);
    let per_writer = if batches == 0 {
        u64::MAX
    } else {
        batches.div_ceil(writers as u64)
    };
    let tasks: Vec<_> = (0..writers)
        .map(|writer| glommio::spawn_local(write(log.clone(), writer as u64, per_writer)))
        .collect();
    for task in tasks {
        task.await?;
    }
    match Rc::try_unwrap(log) {
        Ok(log) => log.close().await.map_err(|e| CliError::new(e.to_string())),
        Err(_) => Ok(()),
    }
}

/// A NoOpRecord (apiKey 20, version 0) in the metadata-record frame Kafka decodes. (docs/records.md §6
/// says 23; Kafka 4.4's decoder reads 23 as BeginTransactionRecord.)
const NO_OP_RECORD: [u8; 4] = [0x01, 0x14, 0x00, 0x00];

async fn make_log(dir: PathBuf, config: LogConfig) -> Result<(), CliError> {
    use crate::records::control::{
        control_batch, ControlRecord, Endpoint, LeaderChangeMessage, Voter, VotersRecord,
    };
    let fail = |e: crate::log::LogError| CliError::new(e.to_string());
    let (log, _) = MetadataLog::open(&dir, config).await.map_err(fail)?;
    let ts = 1_700_000_000_000;
    let voters = VotersRecord {
        voters: vec![Voter {
            voter_id: 1,
            directory_id: uuid::Uuid::from_u128(0x27c6803dc7cb42dd9baacd494ffacc81),
            endpoints: vec![Endpoint {
                name: "CONTROLLER".into(),
                host: "localhost".into(),
                port: 9093,
            }],
            min_supported_kraft_version: 0,
            max_supported_kraft_version: 1,
        }],
    };
    let mut snapshot_at = None;
    for epoch in 1..=3 {
        let change = LeaderChangeMessage {
            leader_id: 1,
            voters: vec![1],
            granting_voters: vec![1],
        };
        log.append_as_leader(
            control_batch(0, 0, ts, &[ControlRecord::LeaderChange(change)]),
            epoch,
        )
        .map_err(fail)?;
        if epoch == 1 {
            let records = [
                ControlRecord::KRaftVersion { kraft_version: 1 },
                ControlRecord::Voters(voters.clone()),
            ];
            log.append_as_leader(control_batch(0, 0, ts, &records), epoch)
                .map_err(fail)?;
        }
        for i in 0..150u64 {
            let mut builder = BatchBuilder::new(0, 0, ts + i as i64, false);
            for _ in 0..1 + i % 5 {
                builder.append(None, Some(&NO_OP_RECORD));
            }
            log.append_as_leader(builder.finish(), epoch)
                .map_err(fail)?;
        }
        if epoch == 2 {
            snapshot_at = Some((log.end_offset(), epoch));
        }
    }
    log.flush(log.end_offset()).await.map_err(fail)?;
    let (end_offset, epoch) = snapshot_at.expect("set in epoch 2");
    let id = crate::log::snapshot::SnapshotId { end_offset, epoch };
    let io = |e: std::io::Error| CliError::new(e.to_string());
    let mut snapshot =
        crate::log::snapshot::SnapshotWriter::create(&dir, id, ts, 1, Some(&voters)).map_err(io)?;
    for _ in 0..10 {
        snapshot
            .append(&[&NO_OP_RECORD, &NO_OP_RECORD], ts)
            .map_err(io)?;
    }
    snapshot.finish(ts).map_err(io)?;
    log.close().await.map_err(fail)?;
    read_log(dir, false).await
}

/// One line per batch: `batch <base> <last> <epoch> <control|data> <records> <crc> <first>
/// <max timestamp>`, where `<first>` is a data batch's first value read as a big-endian u64
/// (the load generator's sequence number), then one line per control record.
fn print_batch(out: &mut impl Write, batch: &Batch<'_>) -> Result<(), CliError> {
    use crate::records::control::decode_control_batch;
    let kind = if batch.is_control() {
        "control"
    } else {
        "data"
    };
    let first = batch
        .records()
        .ok()
        .and_then(|mut r| r.next())
        .and_then(|r| r.ok())
        .and_then(|r| r.value)
        .and_then(|v| v.get(..8))
        .map_or(-1, |v| {
            u64::from_be_bytes(v.try_into().unwrap_or_default()) as i64
        });
    let _ = writeln!(
        out,
        "batch {} {} {} {kind} {} {} {first} {}",
        batch.base_offset(),
        batch.last_offset(),
        batch.partition_leader_epoch(),
        batch.header().records_count.get(),
        batch.header().crc.get(),
        batch.max_timestamp()
    );
    if batch.is_control() {
        for record in decode_control_batch(batch).map_err(|e| CliError::new(e.to_string()))? {
            let _ = writeln!(out, "  {record:?}");
        }
    }
    Ok(())
}

/// `record <offset> <timestamp> <value as hex>` per record of a data batch (`-` for a null
/// value).
fn print_records(out: &mut impl Write, batch: &Batch<'_>) -> Result<(), CliError> {
    let records = batch.records().map_err(|e| CliError::new(e.to_string()))?;
    let base_timestamp = batch.header().base_timestamp.get();
    for record in records {
        let record = record.map_err(|e| CliError::new(e.to_string()))?;
        let value = record.value.map_or_else(
            || "-".to_string(),
            |v| v.iter().map(|b| format!("{b:02x}")).collect(),
        );
        let _ = writeln!(
            out,
            "record {} {} {value}",
            batch.base_offset() + i64::from(record.offset_delta),
            base_timestamp + record.timestamp_delta
        );
    }
    Ok(())
}

async fn read_log(dir: PathBuf, records: bool) -> Result<(), CliError> {
    let (log, report) = MetadataLog::open(&dir, LogConfig::default())
        .await
        .map_err(|e| CliError::new(format!("cannot open the log: {e}")))?;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "log start {} end {} torn_tail {:?}",
        log.start_offset(),
        log.end_offset(),
        report.torn_tail
    );
    let mut offset = log.start_offset();
    while offset < log.end_offset() {
        let batches = log
            .read(offset, 1 << 20)
            .await
            .map_err(|e| CliError::new(e.to_string()))?;
        if batches.is_empty() {
            break;
        }
        for bytes in &batches {
            let mut rest: &[u8] = bytes;
            while !rest.is_empty() {
                let (batch, after) =
                    Batch::parse(rest).map_err(|e| CliError::new(e.to_string()))?;
                print_batch(&mut out, &batch)?;
                if records && !batch.is_control() {
                    print_records(&mut out, &batch)?;
                }
                offset = batch.next_offset();
                rest = after;
            }
        }
    }
    for id in crate::log::snapshot::list(&dir).map_err(|e| CliError::new(e.to_string()))? {
        let _ = writeln!(out, "snapshot {} {}", id.end_offset, id.epoch);
    }
    // Closing trims the active segment again, leaving files Kafka's tools can read.
    log.close().await.map_err(|e| CliError::new(e.to_string()))
}

async fn write(log: Rc<MetadataLog>, writer: u64, batches: u64) -> Result<(), CliError> {
    let epoch = log.last_epoch().max(1);
    for seq in 0..batches {
        let mut builder = BatchBuilder::new(0, 0, 0, false);
        for r in 0..1 + (seq % 4) {
            let mut value = writer.to_be_bytes().to_vec();
            value.extend_from_slice(&seq.to_be_bytes());
            value.resize(16 + ((seq * 7 + r) % 200) as usize, (seq + r) as u8);
            builder.append(None, Some(&value));
        }
        let bytes = builder.finish();
        let (batch, _) = Batch::parse(&bytes).expect("built batch");
        let crc = values_crc(&batch);
        // Printed only after the append's future said the batch is durable.
        let info = match log.append_durable(bytes, epoch).await {
            Ok(info) => info,
            Err(e) => {
                let why = format!("{e}: stopping (an fsync error is never retried)");
                return Err(CliError::new(why));
            }
        };
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "acked {} {} {crc}", info.base_offset, info.last_offset);
        let _ = out.flush();
    }
    Ok(())
}
