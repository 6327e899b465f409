//! Snapshots the application writes: started beside the loop, reported to the core once durable.

use super::*;

/// A snapshot write started for the application: it runs beside the loop, which keeps
/// taking inputs, and the core hears of the snapshot once it is durable.
pub(super) struct SnapshotInFlight {
    pub(super) write: SnapshotWrite,
    pub(super) reply: SnapshotReply,
}

pub(super) enum SnapshotFailure {
    Refused(ClientError),
    Fatal(Fatal),
}

impl<S: Storage + 'static, T: Transport, C: Clock> Executor<S, T, C> {
    /// Starts writing the application's snapshot below `offset` (a committed batch boundary)
    /// from the batches `parts` streams.
    pub(super) fn start_snapshot(
        &mut self,
        offset: i64,
        parts: futures_channel::mpsc::Receiver<crate::node::handle::SnapshotPart>,
        reply: SnapshotReply,
    ) {
        if self.snapshot.is_some() {
            let busy = ClientError::Invalid("a snapshot is being written".into());
            let _ = reply.send(Err(busy));
            return;
        }
        let (id, header) = {
            let raft = self.raft.borrow();
            match raft.snapshot_id_for(offset) {
                Ok(id) => (id, raft.membership().snapshot_records(id.offset)),
                Err(why) => {
                    let _ = reply.send(Err(ClientError::Invalid(why.to_string())));
                    return;
                }
            }
        };
        let storage = self.storage.clone();
        let unix_ms = self.now().unix_ms;
        let write = async move {
            let boundary = offset == storage.end_offset()
                || storage
                    .read(offset, 1)
                    .await
                    .ok()
                    .and_then(|b| b.into_iter().next())
                    .and_then(|b| crate::records::batch::offsets_of(&b))
                    .is_some_and(|(base, _)| base == offset);
            if !boundary {
                let why = format!("{offset} is not a batch boundary");
                return Err(SnapshotFailure::Refused(ClientError::Invalid(why)));
            }
            match storage.write_snapshot(id, header, parts, unix_ms).await {
                Ok(Some((size, delete_log_before))) => Ok((id, size, delete_log_before)),
                Ok(None) => Err(SnapshotFailure::Refused(ClientError::Invalid(
                    "the snapshot writer was dropped before it finished".into(),
                ))),
                Err(fatal) => Err(SnapshotFailure::Fatal(fatal)),
            }
        };
        self.snapshot = Some(SnapshotInFlight {
            write: Box::pin(write),
            reply,
        });
    }

    pub(super) fn snapshot_written(
        &mut self,
        result: Result<(OffsetAndEpoch, u64, bool), SnapshotFailure>,
        reply: SnapshotReply,
    ) -> Result<(), Fatal> {
        match result {
            Ok((id, size, delete_log_before)) => {
                self.step(Input::SnapshotCreated { id, size });
                if delete_log_before {
                    self.step(Input::DeleteBefore { offset: id.offset });
                }
                let _ = reply.send(Ok(id));
                Ok(())
            }
            Err(SnapshotFailure::Refused(e)) => {
                let _ = reply.send(Err(e));
                Ok(())
            }
            Err(SnapshotFailure::Fatal(e)) => {
                let _ = reply.send(Err(ClientError::Stopped));
                Err(e)
            }
        }
    }
}
