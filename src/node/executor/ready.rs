//! Running the core's Readys in the order their contract states (see the module doc of
//! `executor`): persist, apply the log operations, send the early messages, start a flush, and
//! release each Ready once its flush is durable; then the messages go out with their data.

use super::*;

impl<S: Storage + 'static, T: Transport, C: Clock> Executor<S, T, C> {
    /// Takes every Ready the core has and begins it (see the module doc).
    pub(super) async fn drain_readys(&mut self) -> Result<(), Fatal> {
        self.settle_fences();
        self.settle_transfers();
        loop {
            let ready = self.raft.borrow_mut().ready();
            let Some(ready) = ready else { break };
            self.begin(ready).await?;
        }
        self.publish_features();
        if let Some(p) = &mut self.publish {
            p.changed(&self.raft.borrow());
        }
        Ok(())
    }

    /// Steps 1–4 of a Ready; step 5 waits in `waiting` for `release`.
    pub(super) async fn begin(&mut self, ready: Ready) -> Result<(), Fatal> {
        let Ready {
            id,
            election_state,
            log_ops,
            must_sync,
            early_messages,
            messages,
            high_watermark,
            leader_change,
            load_snapshot,
        } = ready;
        let send_early = self
            .raft
            .borrow()
            .config()
            .mutated(|m| m.send_before_persist);
        let mut messages = Some(messages);
        if send_early {
            // The broken executor the simulator must catch: everything is sent before the
            // election state and the log are durable.
            for m in messages.take().into_iter().flatten() {
                self.send(m).await;
            }
        }
        if let Some(state) = &election_state {
            self.storage.persist_election(state).await?;
        }
        let floor = self.probe.delivered.get();
        let write_began = std::time::Instant::now();
        let leading = self.raft.borrow().is_leader();
        for op in &log_ops {
            if let (false, LogOp::Append(batches)) = (leading, op) {
                let records: i64 = batches
                    .batches()
                    .iter()
                    .filter(|b| !b.control)
                    .map(|b| b.last_offset - b.base_offset + 1)
                    .sum();
                let now = self.clock.now().mono_ms;
                self.stats
                    .fetched_records
                    .borrow_mut()
                    .record(now, records as f64);
            }
            if let Some(p) = &mut self.publish {
                p.before_op(op);
            }
            self.storage.apply(op, floor).await?;
        }
        if let (Some(m), false) = (&self.metrics, log_ops.is_empty()) {
            m.write_seconds.observe(write_began.elapsed().as_secs_f64());
        }
        for m in early_messages {
            self.send(m).await;
        }
        let flush_to = must_sync.then(|| self.storage.end_offset());
        if !self.waiting.is_empty() {
            self.probe
                .pipelined_readys
                .set(self.probe.pipelined_readys.get() + 1);
        }
        assert!(
            self.waiting.back().is_none_or(|w| w.id < id),
            "Readys begin in the order the core made them"
        );
        self.waiting.push_back(Waiting {
            id,
            flush_to,
            messages: messages.unwrap_or_default(),
            high_watermark,
            leader_change,
            load_snapshot,
        });
        let flushed = self.storage.flushed_offset();
        self.release(flushed).await
    }

    /// Step 5 for every waiting Ready, in order, whose flush has reached `flushed`; then a
    /// flush for the first one still waiting, if none is in flight.
    pub(super) async fn release(&mut self, flushed: i64) -> Result<(), Fatal> {
        while let Some(front) = self.waiting.front() {
            if front.flush_to.is_some_and(|to| to > flushed) {
                break;
            }
            let ready = self.waiting.pop_front().expect("checked");
            for m in ready.messages {
                self.send(m).await;
            }
            self.raft.borrow_mut().persisted(ready.id);
            self.deliver(
                ready.leader_change,
                ready.load_snapshot,
                ready.high_watermark,
            )
            .await?;
        }
        let needs_flush = self.waiting.iter().any(|w| w.flush_to.is_some());
        if needs_flush && self.flush.is_none() {
            let now = std::time::Instant::now();
            self.flush_began = Some(now);
            self.stats.flush_started.set(Some(now));
            self.flush = Some(self.storage.flush());
        }
        Ok(())
    }

    /// Sends one message; a response first gets the bytes it names, read now — after every
    /// log operation before it, so never torn by a later truncation (KAFKA-18723).
    pub(super) async fn send(&mut self, message: Outbound) {
        match message {
            Outbound::Request { id, to, request } => {
                let address = self.raft.borrow().address_of(to);
                if self.metrics.is_some() && !matches!(request, Request::Fetch(_)) {
                    if self.sent.len() > SENT_TRACKED_MAX {
                        self.sent.clear();
                    }
                    self.sent.insert(id, std::time::Instant::now());
                }
                self.transport.send_request(id, to, address, request);
            }
            Outbound::Response {
                token,
                mut response,
            } => {
                let data = self.response_data(&mut response).await;
                let broken =
                    (self.raft.borrow().config()).mutated(|m| m.reply_unpersisted_high_watermark);
                if broken {
                    // The broken reply path the simulator must catch.
                    if let Response::Fetch(r) = &mut response {
                        r.high_watermark = self.storage.end_offset();
                    }
                }
                self.pulses.borrow_mut().remove(&token);
                match self.replies.remove(&token) {
                    Some(reply) => {
                        let _ = reply.send(Answer::Raft { response, data });
                    }
                    None => warn!(token, "the core answered a request it was never given"),
                }
            }
        }
    }

    /// The records or snapshot chunk `response` names. A snapshot chunk that cannot be read
    /// whole and checked is not sent: the answer becomes SNAPSHOT_NOT_FOUND (the follower goes
    /// back to Fetch) and the reason is logged with file and byte.
    pub(super) async fn response_data(&mut self, response: &mut Response) -> Vec<Bytes> {
        match response {
            Response::Fetch(r) => match r.records {
                Records::Read { offset, max_bytes } => {
                    match self.storage.read(offset, max_bytes).await {
                        Ok(batches) => batches,
                        Err(e) => {
                            let now = std::time::Instant::now();
                            if let Some(unsaid) = self.unreadable_said.due(now) {
                                warn!(offset, error = %e, unsaid,
                                    "cannot read the log for a fetch");
                            }
                            Vec::new()
                        }
                    }
                }
                _ => Vec::new(),
            },
            Response::FetchSnapshot(r) => match r.bytes {
                SnapshotBytes::Read {
                    id,
                    position,
                    max_bytes,
                } => match self.storage.read_snapshot(id, position, max_bytes).await {
                    Ok(chunk) => chunk.into_iter().collect(),
                    Err(e) => {
                        let now = std::time::Instant::now();
                        if let Some(unsaid) = self.corrupt_snapshot_said.due(now) {
                            error!(error = %e, unsaid, "not serving a corrupt snapshot");
                        }
                        r.partition_error = ErrorCode::SNAPSHOT_NOT_FOUND;
                        r.size = -1;
                        r.bytes = SnapshotBytes::None;
                        Vec::new()
                    }
                },
                _ => Vec::new(),
            },
            _ => Vec::new(),
        }
    }
}
