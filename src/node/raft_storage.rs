//! The node's `Storage` for the executor: the metadata log, `quorum-state`, and snapshot files,
//! all through the glommio ring (`log::metadata_log`, `log::snapshot_io`). A flush runs as its
//! own task, so the executor keeps taking inputs while it is in flight.

use std::cell::RefCell;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::rc::Rc;

use bytes::Bytes;
use tracing::{info, warn};

use super::executor::{Fatal, FatalCause, Storage, StorageOp, Unavailable};
use super::handle::SnapshotPart;
use crate::log::snapshot_io::{PartFile, SnapshotFile, SnapshotStream};
use crate::log::{MetadataLog, QuorumStateData};
use crate::raft::{ElectionState, LogOp, OffsetAndEpoch};
use crate::records::control::ControlRecord;

/// Records per data batch of a snapshot the application writes.
pub const SNAPSHOT_BATCH_RECORDS: usize = 1000;

pub struct LogStorage {
    log: Rc<MetadataLog>,
    /// The partition directory, absolute.
    dir: PathBuf,
    /// A snapshot being downloaded from the leader.
    download: RefCell<Option<(OffsetAndEpoch, PartFile)>>,
    /// The snapshot being served to followers, checked once when opened.
    serving: RefCell<Option<Rc<SnapshotFile>>>,
}

impl LogStorage {
    pub fn new(log: Rc<MetadataLog>) -> Self {
        let dir = log.dir().to_path_buf();
        LogStorage {
            log,
            dir,
            download: RefCell::new(None),
            serving: RefCell::new(None),
        }
    }

    async fn snapshot_chunk(
        &self,
        id: OffsetAndEpoch,
        position: u64,
        bytes: &Bytes,
    ) -> Result<(), Fatal> {
        let op = StorageOp::SnapshotDownload { id, position };
        let current = self.download.borrow_mut().take();
        let mut part = match current {
            Some((cid, part)) if cid == id && part.written() == position => part,
            other => {
                if let Some((_, old)) = other {
                    old.abandon().await;
                }
                if position != 0 {
                    let why = FatalCause::Contract("a snapshot chunk without its start");
                    return Err(Fatal::new(op, why));
                }
                PartFile::create(&self.dir, id)
                    .await
                    .map_err(Fatal::during(op))?
            }
        };
        part.write(bytes).await.map_err(Fatal::during(op))?;
        *self.download.borrow_mut() = Some((id, part));
        Ok(())
    }

    /// Makes the download of `id` durable and renames it into place; returns its size.
    async fn finish_download(&self, id: OffsetAndEpoch) -> Result<u64, Fatal> {
        let current = self.download.borrow_mut().take();
        let op = StorageOp::SnapshotInstall { id };
        let Some((_, part)) = current.filter(|(cid, _)| *cid == id) else {
            let why = FatalCause::Contract("a snapshot completed without its bytes");
            return Err(Fatal::new(op, why));
        };
        part.finish().await.map_err(Fatal::during(op))
    }

    async fn snapshot_complete(&self, id: OffsetAndEpoch) -> Result<(), Fatal> {
        let bytes = self.finish_download(id).await?;
        let op = StorageOp::SnapshotInstall { id };
        self.log
            .reset_to(id.offset)
            .await
            .map_err(Fatal::during(op))?;
        info!(
            offset = id.offset,
            epoch = id.epoch,
            bytes,
            "loaded a snapshot from the leader"
        );
        Ok(())
    }

    /// An adopted snapshot (`raft::adopt`): durable and in place, the log untouched.
    async fn snapshot_adopted(&self, id: OffsetAndEpoch) -> Result<(), Fatal> {
        self.finish_download(id).await.map(|_| ())
    }
}

impl Storage for LogStorage {
    async fn persist_election(&self, state: &ElectionState) -> Result<(), Fatal> {
        quorum_state_data(state)
            .write_async(&self.dir)
            .await
            .map_err(Fatal::during(StorageOp::PersistElection))?;
        tracing::debug!(
            epoch = state.epoch,
            leader = %crate::types::OrNone(state.leader_id),
            voted = %crate::types::OrNone(state.voted_key),
            "quorum-state written"
        );
        Ok(())
    }

    async fn apply(&self, op: &LogOp, floor: i64) -> Result<(), Fatal> {
        match op {
            LogOp::Truncate(offset) => self
                .log
                .truncate_to(*offset, floor)
                .await
                .map_err(Fatal::during(StorageOp::Truncate { to: *offset })),
            LogOp::Append(batches) => self
                .log
                .append(batches)
                .map(|_| ())
                .map_err(Fatal::during(StorageOp::Append)),
            LogOp::DeleteBefore(offset) => self
                .log
                .delete_before(*offset)
                .await
                .map_err(Fatal::during(StorageOp::DeleteBelow { offset: *offset })),
            LogOp::SnapshotChunk {
                id,
                position,
                bytes,
            } => self.snapshot_chunk(*id, *position, bytes).await,
            LogOp::SnapshotComplete { id } => self.snapshot_complete(*id).await,
            LogOp::SnapshotAdopted { id } => self.snapshot_adopted(*id).await,
            LogOp::SnapshotAbandon { id } => {
                let current = self.download.borrow_mut().take();
                if let Some((_, part)) = current {
                    warn!(
                        offset = id.offset,
                        epoch = id.epoch,
                        "discarding a snapshot download"
                    );
                    part.abandon().await;
                }
                Ok(())
            }
        }
    }

    fn flush(&self) -> Pin<Box<dyn Future<Output = Result<i64, Fatal>>>> {
        let log = self.log.clone();
        let up_to = log.end_offset();
        // Its own task: the flush progresses while the executor's loop awaits other things.
        let task = glommio::spawn_local(async move { log.flush(up_to).await }).detach();
        Box::pin(async move {
            match task.await {
                Some(Ok(flushed)) => Ok(flushed),
                Some(Err(e)) => Err(Fatal::new(StorageOp::Flush, e)),
                None => Err(Fatal::new(StorageOp::Flush, FatalCause::Cancelled)),
            }
        })
    }

    fn end_offset(&self) -> i64 {
        self.log.end_offset()
    }

    fn flushed_offset(&self) -> i64 {
        self.log.flushed_offset()
    }

    async fn read(&self, offset: i64, max_bytes: usize) -> Result<Vec<Bytes>, Fatal> {
        self.log
            .read(offset, max_bytes)
            .await
            .map_err(Fatal::during(StorageOp::Read { offset }))
    }

    async fn read_snapshot(
        &self,
        id: OffsetAndEpoch,
        position: u64,
        max_bytes: usize,
    ) -> Result<Option<Bytes>, Unavailable> {
        let current = self.serving.borrow().clone().filter(|s| s.id == id);
        let file = match current {
            Some(file) => file,
            None => {
                let file = SnapshotFile::open(&self.dir, id)
                    .await
                    .map_err(|e| Unavailable(format!("snapshot {e}")))?;
                let file = Rc::new(file);
                *self.serving.borrow_mut() = Some(file.clone());
                file
            }
        };
        let chunk = file.read_chunk(position, max_bytes).await;
        if chunk.is_err() {
            *self.serving.borrow_mut() = None;
        }
        chunk.map_err(|e| Unavailable(format!("snapshot {e}")))
    }

    async fn write_snapshot(
        &self,
        id: OffsetAndEpoch,
        header: Vec<ControlRecord>,
        mut parts: futures_channel::mpsc::Receiver<SnapshotPart>,
        timestamp_ms: i64,
    ) -> Result<Option<(u64, bool)>, Fatal> {
        use futures_lite::StreamExt;
        let fail = |e: std::io::Error| Fatal::new(StorageOp::SnapshotWrite { id }, e);
        let mut stream = SnapshotStream::create(&self.dir, id, &header, timestamp_ms)
            .await
            .map_err(fail)?;
        loop {
            match parts.next().await {
                Some(SnapshotPart::Values(values)) => {
                    for chunk in values.chunks(SNAPSHOT_BATCH_RECORDS) {
                        let refs: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
                        if let Err(e) = stream.append(&refs, timestamp_ms).await {
                            stream.abandon().await;
                            return Err(fail(e));
                        }
                    }
                }
                Some(SnapshotPart::Finish { delete_log_before }) => {
                    let size = stream.finish(timestamp_ms).await.map_err(fail)?;
                    return Ok(Some((size, delete_log_before)));
                }
                None => {
                    // The application dropped its writer: no snapshot.
                    stream.abandon().await;
                    return Ok(None);
                }
            }
        }
    }

    fn log_bytes(&self) -> u64 {
        self.log.size_bytes()
    }

    async fn snapshot_timestamp(&self, id: OffsetAndEpoch) -> Option<i64> {
        match crate::log::snapshot_io::header_timestamp(&self.dir, id).await {
            Ok(timestamp) => timestamp,
            Err(e) => {
                warn!(offset = id.offset, epoch = id.epoch, error = %e,
                    "cannot read a snapshot's header: retention will not age it");
                None
            }
        }
    }
}

pub fn quorum_state_data(state: &ElectionState) -> QuorumStateData {
    QuorumStateData {
        leader_id: state.leader_id.unwrap_or(-1),
        leader_epoch: state.epoch,
        voted_id: state.voted_key.map_or(-1, |k| k.id),
        voted_directory_id: state
            .voted_key
            .map_or(uuid::Uuid::nil(), |k| k.wire_directory_id()),
        data_version: 1,
        current_voters: None,
    }
}

pub fn election_state(data: &QuorumStateData) -> Option<ElectionState> {
    Some(ElectionState {
        epoch: data.leader_epoch,
        leader_id: (data.leader_id >= 0).then_some(data.leader_id),
        voted_key: (data.voted_id >= 0)
            .then(|| crate::raft::ReplicaKey::from_wire(data.voted_id, data.voted_directory_id)),
    })
}
