//! The replicated state: commands as records, applied in log order by the state machine on
//! ringraft's raft shard, read by the HTTP threads; and its snapshots.

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ringraft::embed::LeaderAndEpoch;
use ringraft::{CommittedBatch, OffsetAndEpoch, SnapshotWriter, StateMachine};

/// A command, as one record's value: an op byte, then length-prefixed fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Delete {
        key: Vec<u8>,
    },
    Cas {
        key: Vec<u8>,
        old: Vec<u8>,
        new: Vec<u8>,
    },
}

impl Command {
    /// The key it writes.
    pub fn key(&self) -> &[u8] {
        match self {
            Command::Put { key, .. } | Command::Delete { key } | Command::Cas { key, .. } => key,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let (op, fields): (u8, Vec<&[u8]>) = match self {
            Command::Put { key, value } => (b'P', vec![key, value]),
            Command::Delete { key } => (b'D', vec![key]),
            Command::Cas { key, old, new } => (b'C', vec![key, old, new]),
        };
        let mut out = vec![op];
        for f in fields {
            put_field(&mut out, f);
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Option<Command> {
        let (&op, mut rest) = bytes.split_first()?;
        let mut next = || take_field(&mut rest);
        let command = match op {
            b'P' => Command::Put {
                key: next()?,
                value: next()?,
            },
            b'D' => Command::Delete { key: next()? },
            b'C' => Command::Cas {
                key: next()?,
                old: next()?,
                new: next()?,
            },
            _ => return None,
        };
        Some(command)
    }
}

fn put_field(out: &mut Vec<u8>, field: &[u8]) {
    out.extend_from_slice(&(field.len() as u32).to_be_bytes());
    out.extend_from_slice(field);
}

fn take_field(rest: &mut &[u8]) -> Option<Vec<u8>> {
    let len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let field = rest.get(4..4 + len)?.to_vec();
    *rest = &rest[4 + len..];
    Some(field)
}

/// Commands' outcomes are kept this far behind the newest (a CAS answer is read right after
/// its commit).
const RESULTS_KEPT: i64 = 100_000;

#[derive(Debug, Default)]
pub struct State {
    pub map: HashMap<Vec<u8>, Vec<u8>>,
    /// Every offset below this is applied.
    pub applied: i64,
    /// Whether the command at an offset took effect (a CAS that matched, a delete of a key).
    pub results: BTreeMap<i64, bool>,
    pub leader: Option<LeaderAndEpoch>,
}

/// The state, and a condition variable signalled whenever `applied` moves.
#[derive(Debug, Default)]
pub struct Shared {
    state: Mutex<State>,
    moved: Condvar,
}

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until everything below `offset` is applied; `None` after `timeout`.
    pub fn wait_applied(&self, offset: i64, timeout: Duration) -> Option<MutexGuard<'_, State>> {
        let deadline = Instant::now() + timeout;
        let mut state = self.lock();
        while state.applied < offset {
            let left = deadline.checked_duration_since(Instant::now())?;
            state = self
                .moved
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        Some(state)
    }
}

/// A snapshot ringraft asked for: its writer and a copy of the map as of its offset.
pub type SnapshotJob = (SnapshotWriter, Vec<(Vec<u8>, Vec<u8>)>);

/// The state machine ringraft calls.
pub struct Machine {
    shared: Arc<Shared>,
    snapshots: mpsc::Sender<SnapshotJob>,
}

impl Machine {
    pub fn new(shared: Arc<Shared>) -> (Machine, mpsc::Receiver<SnapshotJob>) {
        let (snapshots, rx) = mpsc::channel();
        (Machine { shared, snapshots }, rx)
    }
}

fn apply_command(state: &mut State, offset: i64, command: Command) {
    let took = match command {
        Command::Put { key, value } => {
            state.map.insert(key, value);
            true
        }
        Command::Delete { key } => state.map.remove(&key).is_some(),
        Command::Cas { key, old, new } => match state.map.get_mut(&key) {
            Some(v) if *v == old => {
                *v = new;
                true
            }
            _ => false,
        },
    };
    state.results.insert(offset, took);
}

impl StateMachine for Machine {
    fn apply(&mut self, batch: &CommittedBatch) {
        let mut state = self.shared.lock();
        if !batch.is_control() {
            for record in batch.records().flatten() {
                // A record that is not a command (another writer's) changes nothing.
                if let Some(command) = record.value.and_then(Command::decode) {
                    apply_command(&mut state, record.offset, command);
                }
            }
        }
        state.applied = batch.last_offset() + 1;
        let oldest = state.applied - RESULTS_KEPT;
        while state
            .results
            .first_key_value()
            .is_some_and(|(o, _)| *o < oldest)
        {
            state.results.pop_first();
        }
        drop(state);
        self.shared.moved.notify_all();
    }

    fn leader_change(&mut self, leader: LeaderAndEpoch) {
        self.shared.lock().leader = Some(leader);
    }

    fn load_snapshot_begin(&mut self, _id: OffsetAndEpoch) {
        let mut state = self.shared.lock();
        state.map.clear();
        state.results.clear();
    }

    fn load_snapshot_batch(&mut self, batch: &CommittedBatch) {
        if batch.is_control() {
            return;
        }
        let mut state = self.shared.lock();
        for record in batch.records().flatten() {
            let Some(mut rest) = record.value else {
                continue;
            };
            if let (Some(k), Some(v)) = (take_field(&mut rest), take_field(&mut rest)) {
                state.map.insert(k, v);
            }
        }
    }

    fn load_snapshot_end(&mut self, id: OffsetAndEpoch) {
        let mut state = self.shared.lock();
        state.applied = id.offset;
        drop(state);
        self.shared.moved.notify_all();
    }

    /// ringraft's policy (`metadata.log.max.record.bytes.between.snapshots`) asks: the map is
    /// copied now, while it is exactly the state below `writer.offset()`, and written by the
    /// snapshotter thread.
    fn take_snapshot(&mut self, writer: SnapshotWriter) -> Result<(), SnapshotWriter> {
        let entries = {
            let state = self.shared.lock();
            debug_assert_eq!(state.applied, writer.offset());
            state
                .map
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        self.snapshots
            .send((writer, entries))
            .map_err(|refused| refused.0 .0)
    }
}

/// Entries per snapshot batch.
const SNAPSHOT_BATCH_ENTRIES: usize = 1000;

/// Writes the snapshots ringraft asks for, streamed in batches. Retention, not this
/// application, then drops the log below older ones.
pub fn spawn_snapshotter(asks: mpsc::Receiver<SnapshotJob>) {
    std::thread::spawn(move || {
        for (mut writer, entries) in asks {
            let offset = writer.offset();
            let written = ringraft::embed::block_on(async {
                for chunk in entries.chunks(SNAPSHOT_BATCH_ENTRIES) {
                    let values: Vec<Vec<u8>> = chunk
                        .iter()
                        .map(|(k, v)| {
                            let mut out = Vec::new();
                            put_field(&mut out, k);
                            put_field(&mut out, v);
                            out
                        })
                        .collect();
                    let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
                    writer.append(&refs).await?;
                }
                writer.finish(false).await
            });
            if let Err(e) = written {
                eprintln!("kv: snapshot at {offset} not written: {e}");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::Command;

    #[test]
    fn commands_round_trip() {
        let put = Command::Cas {
            key: b"k".to_vec(),
            old: b"".to_vec(),
            new: b"v".to_vec(),
        };
        assert_eq!(Command::decode(&put.encode()), Some(put));
        assert_eq!(Command::decode(b"P\0\0\0\x09k"), None, "a hostile length");
    }
}
