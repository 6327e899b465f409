//! `ringraft log append` and `ringraft log tail`: what kafka-console-producer and -consumer are
//! to a topic, for the metadata log (docs/operations.md "The commands"). Append writes through Produce, which
//! ringraft serves unadvertised when `ringraft.log.append.enable` is set (docs/wire.md §8.10);
//! tail is an anonymous observer (Fetch with replica id −1) that prints committed records only.
//!
//! Neither ever reports what it does not know: append prints an offset only for a record the
//! leader said is committed, and names every record whose outcome is unknown; tail prints a
//! record only once it is below the high watermark, so nothing it printed is ever retracted.

use std::collections::VecDeque;
use std::io::{BufRead, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use clap::{Args, Subcommand};

use super::CliError;
use crate::net::peer::{PeerConnection, PeerError};
use crate::protocol::apis::ApiKey;
use crate::protocol::group::GroupKey;
use crate::protocol::produce;
use crate::protocol::{ErrorCode, Reader, METADATA_TOPIC_NAME};
use crate::raft::message::{FetchRequest, FetchResponse, Records};
use crate::raft::{ReplicaKey, Request, Response};
use crate::records::batch::Batch;

const CLIENT_ID: &str = "ringraft-log";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a Produce may wait for its commit before its outcome is called unknown.
const PRODUCE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long append looks for a leader that takes a batch before giving up on it (nothing
/// written): Kafka's delivery.timeout.ms default is two minutes; a quorum elects in seconds.
const LEADER_SEARCH: Duration = Duration::from_secs(60);
/// Values in one batch at most, and their bytes: stdin lines that are already waiting go in one
/// Produce, so a pipe of many lines is not paced by one commit per line.
const BATCH_VALUES_MAX: usize = 1000;
const BATCH_VALUE_BYTES_MAX: usize = 1 << 20;
/// Tail's long poll: the leader parks a Fetch at the log's end this long.
const FETCH_MAX_WAIT_MS: i32 = 500;
const FETCH_MAX_BYTES: i32 = 1 << 20;
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// Append gives up (nothing written) when no controller at all has answered for this long: a
/// leader's failover leaves the other voters answering, so silence this long is a wrong
/// address or a stopped quorum.
const NOTHING_ANSWERS: Duration = Duration::from_secs(10);

#[derive(Debug, Subcommand)]
pub enum LogCommand {
    /// Append records (each VALUE, or one per line of stdin) through the leader; prints
    /// `<offset> <value>` for each once it is committed.
    Append(AppendArgs),
    /// Print committed records as they arrive, following leader changes.
    Tail(TailArgs),
}

#[derive(Debug, Args)]
pub struct AppendArgs {
    /// Controllers to start from, HOST:PORT[,HOST:PORT…]. Default: $RINGRAFT_LISTEN, else
    /// 127.0.0.1:9093.
    #[arg(long = "bootstrap-controller")]
    pub bootstrap_controller: Option<String>,
    /// The group to write to: its topic (with --partition). Default: __cluster_metadata.
    #[arg(long = "topic", default_value = METADATA_TOPIC_NAME)]
    pub topic: String,
    /// The group's partition.
    #[arg(long = "partition", default_value_t = 0)]
    pub partition: i32,
    /// The values; none (or `-`): one record per line of stdin.
    pub values: Vec<String>,
}

#[derive(Debug, Args)]
pub struct TailArgs {
    /// Controllers to start from, HOST:PORT[,HOST:PORT…]. Default: $RINGRAFT_LISTEN, else
    /// 127.0.0.1:9093.
    #[arg(long = "bootstrap-controller")]
    pub bootstrap_controller: Option<String>,
    /// The first offset to print. Without it: the log's start (after the latest snapshot).
    #[arg(long = "from")]
    pub from: Option<i64>,
    /// One JSON object per record: offset, timestamp, and value (a UTF-8 string) or
    /// value_base64 (any other bytes).
    #[arg(long = "json")]
    pub json: bool,
    /// Stop after this many records.
    #[arg(long = "count")]
    pub count: Option<u64>,
}

pub fn run(command: LogCommand) -> Result<(), CliError> {
    let executor = glommio::LocalExecutorBuilder::default()
        .io_memory(512 * 1024)
        .make()
        .map_err(|e| CliError::new(format!("cannot start glommio: {e}")))?;
    match command {
        LogCommand::Append(args) => {
            let group = GroupKey::new(&args.topic, args.partition)
                .map_err(|e| CliError::new(format!("--topic/--partition: {e}")))?;
            let controllers = Controllers::new(args.bootstrap_controller.as_deref())?;
            let source = Source::new(args.values);
            executor.run(append(controllers, source, group))
        }
        LogCommand::Tail(args) => {
            if args.from.is_some_and(|f| f < 0) {
                return Err(CliError::new("--from must be an offset, 0 or more"));
            }
            let controllers = Controllers::new(args.bootstrap_controller.as_deref())?;
            executor.run(Tail::new(controllers, &args).run())
        }
    }
}

/// Where the tools look for the leader: the bootstrap controllers in turn, or the leader a
/// controller named.
struct Controllers {
    bootstrap: Vec<(String, SocketAddr)>,
    /// What `--bootstrap-controller` said (or the default), for error messages.
    named: String,
    defaulted: bool,
    next: usize,
    /// The leader a controller named, tried before the bootstrap list.
    hint: Option<(String, u16)>,
}

impl Controllers {
    fn new(arg: Option<&str>) -> Result<Controllers, CliError> {
        let defaulted = arg.is_none();
        let named = arg.map_or_else(super::default_bootstrap_controller, str::to_owned);
        let bootstrap = super::quorum::parse_bootstrap_hosts(&named).map_err(CliError::new)?;
        Ok(Controllers {
            bootstrap,
            named,
            defaulted,
            next: 0,
            hint: None,
        })
    }

    /// A connection to the named leader if there is one, else to the next bootstrap
    /// controller that answers; the error names every address tried.
    async fn connect(&mut self) -> Result<PeerConnection, NoController> {
        if let Some((host, port)) = self.hint.take() {
            let addrs = (host.as_str(), port).to_socket_addrs();
            for addr in addrs.into_iter().flatten() {
                if let Ok(conn) = PeerConnection::connect(addr, CLIENT_ID, CONNECT_TIMEOUT).await {
                    return Ok(conn);
                }
            }
        }
        let mut failures = Vec::new();
        for _ in 0..self.bootstrap.len() {
            let (_, addr) = &self.bootstrap[self.next % self.bootstrap.len()];
            self.next = (self.next + 1) % self.bootstrap.len();
            match PeerConnection::connect(*addr, CLIENT_ID, CONNECT_TIMEOUT).await {
                Ok(conn) => return Ok(conn),
                Err(e) => failures.push(format!("{addr}: {}", connect_failure(&e))),
            }
        }
        Err(NoController {
            named: self.named.clone(),
            defaulted: self.defaulted,
            failures,
        })
    }

    /// The next connection goes to the leader `id` a controller named at `host:port`.
    fn follow(&mut self, host: &str, port: u16) {
        self.hint = Some((host.to_owned(), port));
    }
}

/// No controller answered: the list as named, and why each address failed.
#[derive(Debug, thiserror::Error)]
#[error("no controller answered at {named}{}: {}",
    if *.defaulted { " (the default: set --bootstrap-controller or RINGRAFT_LISTEN)" } else { "" },
    .failures.join("; "))]
struct NoController {
    named: String,
    defaulted: bool,
    failures: Vec<String>,
}

fn connect_failure(e: &PeerError) -> String {
    match e {
        PeerError::Connect { source, .. } => source.to_string(),
        other => other.to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// append

/// Where the values come from: the arguments, or stdin read by a thread (so that the lines
/// already waiting can go in one batch while the first is being written).
enum Source {
    Args(VecDeque<String>),
    Stdin(mpsc::Receiver<String>),
}

impl Source {
    fn new(values: Vec<String>) -> Source {
        if !values.is_empty() && values != ["-"] {
            return Source::Args(values.into());
        }
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Source::Stdin(rx)
    }

    /// The next values to append together; empty at the end.
    fn next_batch(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        let mut bytes = 0;
        let full = |out: &Vec<String>, bytes: usize| {
            out.len() >= BATCH_VALUES_MAX || bytes >= BATCH_VALUE_BYTES_MAX
        };
        match self {
            Source::Args(values) => {
                while let Some(v) = values.pop_front() {
                    bytes += v.len();
                    out.push(v);
                    if full(&out, bytes) {
                        break;
                    }
                }
            }
            Source::Stdin(rx) => {
                // Blocking is fine: this executor runs nothing else while append waits.
                let Ok(first) = rx.recv() else { return out };
                bytes += first.len();
                out.push(first);
                while !full(&out, bytes) {
                    let Ok(v) = rx.try_recv() else { break };
                    bytes += v.len();
                    out.push(v);
                }
            }
        }
        out
    }
}

/// What became of one batch.
enum Outcome {
    /// Committed; the first record's offset.
    Committed(i64),
    /// It may or may not be in the log.
    Unknown(String),
    /// Nothing was written (no leader took it in time).
    NotWritten(String),
}

async fn append(
    mut controllers: Controllers,
    mut source: Source,
    group: GroupKey,
) -> Result<(), CliError> {
    let mut conn: Option<PeerConnection> = None;
    let (mut unknown, mut not_written) = (0usize, 0usize);
    loop {
        let values = source.next_batch();
        if values.is_empty() {
            break;
        }
        let outcome = append_batch(&mut controllers, &mut conn, &group, &values).await?;
        let mut out = std::io::stdout().lock();
        match outcome {
            Outcome::Committed(base) => {
                for (i, v) in values.iter().enumerate() {
                    let _ = writeln!(out, "{} {v}", base + i as i64);
                }
                let _ = out.flush();
            }
            Outcome::Unknown(why) => {
                unknown += values.len();
                for v in &values {
                    eprintln!(
                        "ringraft log append: outcome unknown for {v:?}: {why}; it may or may \
                         not be committed (ringraft log tail shows the log)"
                    );
                }
            }
            Outcome::NotWritten(why) => {
                not_written += values.len();
                for v in &values {
                    eprintln!("ringraft log append: not written: {v:?}: {why}");
                }
            }
        }
    }
    if unknown + not_written > 0 {
        return Err(CliError::new(format!(
            "{unknown} record(s) with an unknown outcome, {not_written} not written"
        )));
    }
    Ok(())
}

fn produce_body(group: &GroupKey, values: &[String]) -> Vec<u8> {
    let values = values.iter().map(|v| v.as_bytes());
    crate::node::produce::request_body(group, values, PRODUCE_TIMEOUT)
}

/// Sends one batch to the leader, following NOT_LEADER_OR_FOLLOWER answers (nothing was
/// written) until one takes it or `LEADER_SEARCH` passes. A refusal ends the command.
async fn append_batch(
    controllers: &mut Controllers,
    conn: &mut Option<PeerConnection>,
    group: &GroupKey,
    values: &[String],
) -> Result<Outcome, CliError> {
    let body = produce_body(group, values);
    let deadline = Instant::now() + LEADER_SEARCH;
    let mut last = String::from("no leader answered");
    let mut silent_since: Option<Instant> = None;
    while Instant::now() < deadline {
        let c = match conn.as_mut().filter(|c| c.is_usable()) {
            Some(c) => c,
            None => match controllers.connect().await {
                Ok(c) => {
                    silent_since = None;
                    conn.insert(c)
                }
                Err(e) => {
                    let since = *silent_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= NOTHING_ANSWERS {
                        return Err(CliError::new(format!("{e}; nothing was written")));
                    }
                    last = e.to_string();
                    glommio::timer::sleep(RETRY_PAUSE).await;
                    continue;
                }
            },
        };
        let (key, version) = (ApiKey::PRODUCE, produce::CLIENT_VERSION);
        let sent = c
            .request_unadvertised(key, version, version, &body, PRODUCE_TIMEOUT)
            .await;
        let answer = match sent {
            Ok(answer) => answer,
            Err(e) => {
                // Sent, maybe received, maybe appended: only the log can tell now.
                *conn = None;
                return Ok(Outcome::Unknown(format!("the request was sent, then {e}")));
            }
        };
        let response = produce::ProduceResponse::decode(&mut Reader::new(&answer), version)
            .map_err(|e| CliError::new(format!("cannot decode the Produce answer: {e}")))?;
        let partition = response
            .topics
            .iter()
            .filter(|t| t.name == group.topic())
            .flat_map(|t| &t.partitions)
            .find(|p| p.index == group.partition())
            .ok_or_else(|| CliError::new(format!("the Produce answer names no {group}")))?;
        let message = partition.error_message.as_deref().unwrap_or("");
        match partition.error_code {
            ErrorCode::NONE => return Ok(Outcome::Committed(partition.base_offset)),
            ErrorCode::NOT_LEADER_OR_FOLLOWER => {
                let (leader, epoch) = partition.current_leader;
                let endpoint = response.node_endpoints.iter().find(|e| e.node_id == leader);
                let peer = c.peer_addr();
                *conn = None;
                match endpoint.and_then(|e| u16::try_from(e.port).ok().map(|p| (&e.host, p))) {
                    Some((host, port)) => controllers.follow(host, port),
                    None => glommio::timer::sleep(RETRY_PAUSE).await,
                }
                last = format!("{peer} is not the leader (epoch {epoch}, leader {leader})");
            }
            ErrorCode::REQUEST_TIMED_OUT => return Ok(Outcome::Unknown(message.to_owned())),
            code => {
                return Err(CliError::new(format!(
                    "the controller refused the records: {} ({}){}{message}; nothing was written",
                    code.name(),
                    code.0,
                    if message.is_empty() { "" } else { ": " },
                )))
            }
        }
    }
    Ok(Outcome::NotWritten(format!(
        "no leader took it within {} s: {last}",
        LEADER_SEARCH.as_secs()
    )))
}

// ---------------------------------------------------------------------------------------------
// tail

/// An anonymous observer's position, and the batches fetched but not yet all printed.
struct Tail {
    controllers: Controllers,
    json: bool,
    from_given: bool,
    count: Option<u64>,
    printed: u64,
    /// The next offset to print: everything below it was printed (or skipped as below
    /// `--from`, or as a control record).
    print_from: i64,
    /// The epoch of the batch holding `print_from - 1` (what a refetch from there names).
    print_epoch: i32,
    /// True while no answer told the epoch at `print_from` (a `--from` in the middle of the
    /// log): the fetch then names the leader's epoch, which the leader validates.
    epoch_unknown: bool,
    fetch_offset: i64,
    last_fetched_epoch: i32,
    leader_epoch: i32,
    /// Fetched batches, in offset order, that hold records not yet printed.
    pending: VecDeque<Bytes>,
}

impl Tail {
    fn new(controllers: Controllers, args: &TailArgs) -> Tail {
        let from = args.from.unwrap_or(0);
        Tail {
            controllers,
            json: args.json,
            from_given: args.from.is_some(),
            count: args.count,
            printed: 0,
            print_from: from,
            print_epoch: 0,
            epoch_unknown: from > 0,
            fetch_offset: from,
            last_fetched_epoch: 0,
            leader_epoch: 0,
            pending: VecDeque::new(),
        }
    }

    fn done(&self) -> bool {
        self.count.is_some_and(|c| self.printed >= c)
    }

    /// After a lost connection or a leader change: drop what was not printed and fetch again
    /// from the first record not printed.
    fn restart(&mut self) {
        self.pending.clear();
        self.fetch_offset = self.print_from;
        self.last_fetched_epoch = self.print_epoch;
    }

    async fn run(mut self) -> Result<(), CliError> {
        let mut conn: Option<PeerConnection> = None;
        let mut said = false;
        while !self.done() {
            let c = match conn.as_mut().filter(|c| c.is_usable()) {
                Some(c) => c,
                None => match self.controllers.connect().await {
                    Ok(c) => {
                        self.restart();
                        conn.insert(c)
                    }
                    Err(e) => {
                        if !said {
                            eprintln!("ringraft log tail: {e}; retrying");
                            said = true;
                        }
                        glommio::timer::sleep(RETRY_PAUSE).await;
                        continue;
                    }
                },
            };
            if self.epoch_unknown {
                self.last_fetched_epoch = self.leader_epoch;
            }
            let request = Request::Fetch(FetchRequest {
                cluster_id: None,
                // Replica id −1: an observer the leader serves without tracking it.
                replica: ReplicaKey::new(-1, None),
                max_wait_ms: FETCH_MAX_WAIT_MS,
                fetch_offset: self.fetch_offset,
                last_fetched_epoch: self.last_fetched_epoch,
                current_leader_epoch: self.leader_epoch,
                max_bytes: FETCH_MAX_BYTES,
                high_watermark: None,
            });
            let r = match crate::node::peers::exchange(c, &request, FETCH_TIMEOUT).await {
                Ok(Response::Fetch(r)) => r,
                _ => {
                    conn = None;
                    continue;
                }
            };
            if !self.answer(r, &mut conn).await? {
                continue;
            }
        }
        Ok(())
    }

    /// Handles one Fetch answer; `false` when it carried no records to take.
    async fn answer(
        &mut self,
        r: FetchResponse,
        conn: &mut Option<PeerConnection>,
    ) -> Result<bool, CliError> {
        if r.error != ErrorCode::NONE || r.partition_error != ErrorCode::NONE {
            self.leader_epoch = self.leader_epoch.max(r.leader_epoch);
            let error = if r.error != ErrorCode::NONE {
                r.error
            } else {
                r.partition_error
            };
            if error == ErrorCode::INVALID_REQUEST || error == ErrorCode::INCONSISTENT_CLUSTER_ID {
                return Err(CliError::new(format!("Fetch answered {}", error.name())));
            }
            if error == ErrorCode::NOT_LEADER_OR_FOLLOWER
                || error == ErrorCode::BROKER_NOT_AVAILABLE
            {
                *conn = None;
                match r.leader_endpoints.first().filter(|_| r.leader_id >= 0) {
                    Some(e) => self.controllers.follow(&e.host, e.port),
                    None => glommio::timer::sleep(RETRY_PAUSE).await,
                }
            } else {
                glommio::timer::sleep(Duration::from_millis(20)).await;
            }
            return Ok(false);
        }
        self.leader_epoch = r.leader_epoch;
        if let Some(d) = r.diverging_epoch {
            // Only batches not yet printed can be on the wrong side: printed ones were
            // committed, and a committed record is in every later leader's log.
            if d.offset < self.print_from && self.printed > 0 {
                return Err(CliError::new(format!(
                    "the leader's log diverges at {} below printed offset {}: not a Raft log",
                    d.offset, self.print_from
                )));
            }
            self.pending.clear();
            self.fetch_offset = d.offset.min(self.fetch_offset);
            self.last_fetched_epoch = d.epoch;
            self.epoch_unknown = false;
            return Ok(false);
        }
        if let Some(id) = r.snapshot_id {
            if self.from_given || self.printed > 0 {
                return Err(CliError::new(format!(
                    "offset {} is below the log start: the records before {} are in snapshot \
                     {:020}-{:010}; the first offset that can be tailed is {} (--from {})",
                    self.fetch_offset, id.offset, id.offset, id.epoch, id.offset, id.offset
                )));
            }
            eprintln!(
                "ringraft log tail: the log starts at {} (records before it are in snapshot \
                 {:020}-{:010}); tailing from there",
                id.offset, id.offset, id.epoch
            );
            self.print_from = id.offset;
            self.print_epoch = id.epoch;
            self.restart();
            return Ok(false);
        }
        self.epoch_unknown = false;
        if let Records::Bytes(bytes) = &r.records {
            self.take(bytes)?;
        }
        self.print(r.high_watermark)?;
        Ok(true)
    }

    /// Queues the whole batches of a Fetch answer (a partial one at its end is dropped).
    fn take(&mut self, bytes: &Bytes) -> Result<(), CliError> {
        let mut rest: &[u8] = bytes;
        while !rest.is_empty() {
            let Ok((batch, tail)) = Batch::parse(rest) else {
                break;
            };
            let (base, next) = (batch.base_offset(), batch.next_offset());
            if base > self.fetch_offset || next <= self.fetch_offset {
                return Err(CliError::new(format!(
                    "asked for offset {}, got a batch at {base}..{next}",
                    self.fetch_offset
                )));
            }
            let start = bytes.len() - rest.len();
            self.pending
                .push_back(bytes.slice(start..start + batch.len()));
            self.fetch_offset = next;
            self.last_fetched_epoch = batch.partition_leader_epoch();
            rest = tail;
        }
        Ok(())
    }

    /// Prints the pending records below `high_watermark` (committed), in order, once each.
    fn print(&mut self, high_watermark: i64) -> Result<(), CliError> {
        let mut out = std::io::stdout().lock();
        while let Some(bytes) = self.pending.front() {
            let (batch, _) = Batch::parse(bytes).expect("checked when taken");
            if batch.base_offset() >= high_watermark || self.done() {
                break;
            }
            if !batch.is_control() {
                let records = batch
                    .records()
                    .map_err(|e| CliError::new(format!("batch at {}: {e}", batch.base_offset())))?;
                let base_ts = batch.header().base_timestamp.get();
                for record in records {
                    let record = record.map_err(|e| CliError::new(e.to_string()))?;
                    let offset = batch.base_offset() + i64::from(record.offset_delta);
                    if offset < self.print_from || offset >= high_watermark || self.done() {
                        continue;
                    }
                    let line = self.line(offset, base_ts + record.timestamp_delta, record.value);
                    if writeln!(out, "{line}").is_err() {
                        // The reader went away (a closed pipe): nothing more to do.
                        std::process::exit(0);
                    }
                    self.printed += 1;
                    self.print_from = offset + 1;
                    self.print_epoch = batch.partition_leader_epoch();
                }
            }
            let next = batch.next_offset();
            if next > high_watermark || self.done() {
                break;
            }
            if next > self.print_from {
                self.print_from = next;
                self.print_epoch = batch.partition_leader_epoch();
            }
            self.pending.pop_front();
        }
        let _ = out.flush();
        Ok(())
    }

    fn line(&self, offset: i64, timestamp: i64, value: Option<&[u8]>) -> String {
        if !self.json {
            let text = value.map_or_else(String::new, |v| String::from_utf8_lossy(v).into());
            return format!("{offset} {}", text.replace('\n', "\\n"));
        }
        let mut object = serde_json::Map::new();
        object.insert("offset".into(), offset.into());
        object.insert("timestamp".into(), timestamp.into());
        match value {
            None => {
                object.insert("value".into(), serde_json::Value::Null);
            }
            Some(v) => match std::str::from_utf8(v) {
                Ok(text) => {
                    object.insert("value".into(), text.into());
                }
                Err(_) => {
                    let encoded = base64::engine::general_purpose::STANDARD.encode(v);
                    object.insert("value_base64".into(), encoded.into());
                }
            },
        }
        serde_json::Value::Object(object).to_string()
    }
}
