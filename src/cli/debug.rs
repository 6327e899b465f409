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
}

pub fn run(command: DebugCommand) -> Result<(), CliError> {
    match command {
        DebugCommand::AppendLoop {
            dir,
            writers,
            batches,
            segment_bytes,
        } => {
            let config = LogConfig {
                segment_bytes,
                zero_chunk_bytes: 256 * 1024,
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
    Ok(())
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
        let info = log
            .append_as_leader(bytes, epoch)
            .map_err(|e| CliError::new(e.to_string()))?;
        if let Err(e) = log.flush(info.last_offset + 1).await {
            return Err(CliError::new(format!(
                "{e}: stopping (an fsync error is never retried)"
            )));
        }
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "acked {} {} {crc}", info.base_offset, info.last_offset);
        let _ = out.flush();
    }
    Ok(())
}
