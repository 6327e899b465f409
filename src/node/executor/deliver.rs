//! Handing the application what a released Ready carries: leader changes, snapshots to load
//! (streamed a chunk at a time) and committed batches, in log order, each once.

use super::*;

impl<S: Storage + 'static, T: Transport, C: Clock> Executor<S, T, C> {
    /// Delivers what a released Ready carries to the application, in the contract's order.
    pub(super) async fn deliver(
        &mut self,
        leader_change: Option<LeaderAndEpoch>,
        load_snapshot: Option<OffsetAndEpoch>,
        high_watermark: Option<i64>,
    ) -> Result<(), Fatal> {
        if let Some(leader) = leader_change {
            let (local, state) = {
                let raft = self.raft.borrow();
                (raft.local().id, raft.state_name())
            };
            let shown = crate::types::OrNone(leader.leader_id);
            info!(epoch = leader.epoch, leader = %shown, state = %state, "leader changed");
            if leader.leader_id != Some(local) {
                self.commit_started.clear();
                for (offset, waiters) in std::mem::take(&mut self.commits) {
                    for w in waiters {
                        let lost = ClientError::LeadershipLost {
                            offset,
                            epoch: leader.epoch,
                            leader: leader.leader_id,
                        };
                        let _ = w.send(Err(lost));
                    }
                }
            }
            for l in &mut self.listeners {
                l.leader_change(leader);
            }
        }
        if let Some(id) = load_snapshot {
            self.load_snapshot(id).await?;
        }
        if let Some(hwm) = high_watermark {
            self.deliver_committed(hwm).await?;
        }
        Ok(())
    }

    /// Resolves the appends below `hwm` and hands the listeners every batch below it.
    pub(super) async fn deliver_committed(&mut self, hwm: i64) -> Result<(), Fatal> {
        assert!(
            hwm >= self.probe.delivered_high_watermark.get(),
            "the high watermark never decreases"
        );
        let resolved: Vec<i64> = self.commits.range(..hwm).map(|(o, _)| *o).collect();
        let now_ms = self.clock.now().mono_ms;
        let started: Vec<i64> = self.commit_started.range(..hwm).map(|(o, _)| *o).collect();
        for offset in started {
            if let Some((_, at)) = self.commit_started.remove(&offset) {
                let latency = at.elapsed();
                let ms = latency.as_secs_f64() * 1000.0;
                self.stats.commit_ms.borrow_mut().record(now_ms, ms);
                if let Some(m) = &self.metrics {
                    m.commit_seconds.observe(latency.as_secs_f64());
                }
            }
        }
        for offset in resolved {
            for w in self.commits.remove(&offset).unwrap_or_default() {
                let _ = w.send(Ok(offset));
            }
        }
        self.probe.delivered_high_watermark.set(hwm);
        if self.listeners.is_empty() {
            self.probe
                .delivered
                .set(hwm.max(self.probe.delivered.get()));
            // Nothing is read: the log's growth stands in for the bytes committed, enough to
            // say once that a snapshot is due and nothing here writes one.
            self.policy.log_grew_to(self.storage.log_bytes());
            self.ask_for_snapshot();
            return Ok(());
        }
        while self.probe.delivered.get() < hwm {
            let from = self.probe.delivered.get();
            let batches = self.storage.read(from, 1 << 20).await?;
            let mut committed = Vec::new();
            for batch in batches {
                // Checked when it entered: only the offsets are read, no CRC.
                let (base, next) = crate::records::batch::offsets_of(&batch).ok_or_else(|| {
                    let short = crate::records::BatchError::BadRecords("no batch header");
                    Fatal::new(StorageOp::Deliver { offset: from }, short)
                })?;
                if base >= hwm {
                    break;
                }
                committed.push(batch);
                self.probe.delivered.set(next);
            }
            if committed.is_empty() {
                break;
            }
            let unix_ms = crate::types::unix_millis();
            for bytes in committed {
                let batch = CommittedBatch::new(bytes)
                    .map_err(Fatal::during(StorageOp::Deliver { offset: from }))?;
                if let Some(m) = self.metrics.as_ref().filter(|_| !batch.is_control()) {
                    let stamped = batch.max_timestamp_ms();
                    if stamped > 0 && unix_ms >= stamped {
                        m.propagation_seconds
                            .observe((unix_ms - stamped) as f64 / 1000.0);
                    }
                }
                self.policy.committed(batch.bytes().len() as u64);
                for l in &mut self.listeners {
                    l.apply(&batch);
                }
            }
        }
        self.ask_for_snapshot();
        Ok(())
    }

    /// Streams snapshot `id` into the state machines: begin, every batch, end. Read through
    /// the storage a chunk at a time, so a large snapshot is never in memory whole.
    pub(super) async fn load_snapshot(&mut self, id: OffsetAndEpoch) -> Result<(), Fatal> {
        self.probe.delivered.set(id.offset);
        if self.listeners.is_empty() {
            return Ok(());
        }
        for l in &mut self.listeners {
            l.load_snapshot_begin(id);
        }
        let op = StorageOp::SnapshotLoad { id };
        let mut pending: Vec<u8> = Vec::new();
        let mut position = 0u64;
        loop {
            let chunk = self
                .storage
                .read_snapshot(id, position, SNAPSHOT_LOAD_CHUNK_BYTES)
                .await
                .map_err(Fatal::during(op))?;
            let Some(chunk) = chunk.filter(|c| !c.is_empty()) else {
                break;
            };
            position += chunk.len() as u64;
            pending.extend_from_slice(&chunk);
            let mut used = 0;
            while let Ok(size) = crate::records::batch::batch_size(&pending[used..]) {
                if pending.len() - used < size {
                    break;
                }
                let bytes = Bytes::copy_from_slice(&pending[used..used + size]);
                let batch = CommittedBatch::new(bytes).map_err(Fatal::during(op))?;
                for l in &mut self.listeners {
                    l.load_snapshot_batch(&batch);
                }
                used += size;
            }
            pending.drain(..used);
        }
        if !pending.is_empty() {
            let torn = crate::records::BatchError::Incomplete {
                needed: crate::records::batch::batch_size(&pending).unwrap_or(pending.len() + 1),
                available: pending.len(),
            };
            return Err(Fatal::new(op, torn));
        }
        for l in &mut self.listeners {
            l.load_snapshot_end(id);
        }
        self.policy.snapshot_taken(self.clock.now().mono_ms);
        Ok(())
    }
}
