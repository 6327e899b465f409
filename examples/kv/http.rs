//! A small HTTP/1.1 server (a thread per connection, keep-alive) and the API's handlers.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ringraft::{ClientError, RaftHandle};

use crate::state::{Command, Shared};

/// The largest request body accepted.
const BODY_MAX_BYTES: usize = 1 << 20;
/// How long a request waits for its write or read to be applied locally.
const APPLY_WAIT: Duration = Duration::from_secs(10);

pub struct Service {
    /// One per Raft group the keys are spread over: its state and its handle.
    pub shards: Vec<Shard>,
    pub unsafe_local_reads: bool,
}

/// One group's state machine and handle.
pub struct Shard {
    pub shared: Arc<Shared>,
    pub raft: RaftHandle,
}

impl Service {
    /// The group that holds `key`: a stable hash of the key over the groups (FNV-1a, so
    /// that every node and every restart picks the same one).
    fn shard(&self, key: &[u8]) -> &Shard {
        let hash = key.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        });
        &self.shards[(hash % self.shards.len() as u64) as usize]
    }
}

struct Request {
    method: String,
    path: String,
    query: String,
    body: Vec<u8>,
}

struct Response {
    status: u16,
    body: Vec<u8>,
    leader: Option<i32>,
}

fn respond(status: u16, body: impl Into<Vec<u8>>) -> Response {
    Response {
        status,
        body: body.into(),
        leader: None,
    }
}

pub fn serve(listener: TcpListener, service: Arc<Service>) {
    for stream in listener.incoming().flatten() {
        let service = service.clone();
        std::thread::spawn(move || connection(stream, &service));
    }
}

fn connection(stream: TcpStream, service: &Service) {
    let _ = stream.set_nodelay(true);
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    loop {
        let request = match read_request(&mut reader) {
            Ok(Some(r)) => r,
            Ok(None) => return,
            Err(e) => {
                let _ = write_response(&mut writer, &respond(400, e));
                return;
            }
        };
        let response = handle(service, request);
        if write_response(&mut writer, &response).is_err() {
            return;
        }
    }
}

fn read_request(reader: &mut impl BufRead) -> Result<Option<Request>, String> {
    let mut line = String::new();
    match reader.read_line(&mut line) {
        Ok(0) => return Ok(None),
        Ok(_) => {}
        Err(_) => return Ok(None),
    }
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return Err("a malformed request line".into());
    };
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).map_err(|e| e.to_string())? == 0 {
            return Err("the headers end early".into());
        }
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value
                    .trim()
                    .parse()
                    .map_err(|_| "a bad Content-Length".to_string())?;
            }
        }
    }
    if length > BODY_MAX_BYTES {
        return Err(format!("a body over {BODY_MAX_BYTES} bytes"));
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).map_err(|e| e.to_string())?;
    Ok(Some(Request {
        method: method.to_string(),
        path: path.to_string(),
        query: query.to_string(),
        body,
    }))
}

fn write_response(out: &mut impl Write, r: &Response) -> std::io::Result<()> {
    let reason = match r.status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        409 => "Conflict",
        421 => "Misdirected Request",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    };
    let mut head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Length: {}\r\n",
        r.status,
        r.body.len()
    );
    if let Some(leader) = r.leader {
        head.push_str(&format!("X-Leader: {leader}\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    out.write_all(&r.body)?;
    out.flush()
}

fn handle(service: &Service, r: Request) -> Response {
    let key = |prefix: &str| r.path.strip_prefix(prefix).map(|k| k.as_bytes().to_vec());
    match (r.method.as_str(), key("/kv/"), key("/cas/")) {
        ("GET", Some(key), _) => get(service, &key, r.query.split('&').any(|q| q == "stale")),
        ("PUT", Some(key), _) => write(service, Command::Put { key, value: r.body }),
        ("DELETE", Some(key), _) => write(service, Command::Delete { key }),
        ("POST", _, Some(key)) => {
            let body = String::from_utf8_lossy(&r.body);
            let Some((old, new)) = body.split_once('\n') else {
                return respond(400, "the body is \"<old>\\n<new>\"");
            };
            let command = Command::Cas {
                key,
                old: old.as_bytes().to_vec(),
                new: new.as_bytes().to_vec(),
            };
            write(service, command)
        }
        ("GET", _, _) if r.path == "/status" => status(&service.shards[0]),
        _ => respond(404, "no such endpoint"),
    }
}

/// A failed append or fence, as an HTTP answer.
fn failed(e: ClientError) -> Response {
    match e {
        ClientError::NotLeader { leader, .. } => Response {
            status: 421,
            body: format!("not the leader: {e}").into_bytes(),
            leader,
        },
        ClientError::LeadershipLost { leader, .. } => Response {
            status: 503,
            body: format!("outcome unknown: {e}").into_bytes(),
            leader,
        },
        other => respond(503, other.to_string()),
    }
}

fn get(service: &Service, key: &[u8], stale: bool) -> Response {
    let shard = service.shard(key);
    let state = if stale || service.unsafe_local_reads {
        shard.shared.lock()
    } else {
        // Linearizable: everything committed before the fence began is below `applied_to`.
        let applied_to = match futures_lite::future::block_on(shard.raft.read_fence()) {
            Ok(offset) => offset,
            Err(e) => return failed(e),
        };
        match shard.shared.wait_applied(applied_to, APPLY_WAIT) {
            Some(state) => state,
            None => return respond(504, "not applied in time"),
        }
    };
    match state.map.get(key) {
        Some(value) => respond(200, value.clone()),
        None => respond(404, "no such key"),
    }
}

fn write(service: &Service, command: Command) -> Response {
    let cas = matches!(command, Command::Cas { .. });
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let shard = service.shard(command.key());
    let value = command.encode();
    let offset =
        match futures_lite::future::block_on(shard.raft.append(&[value.as_slice()], now_ms)) {
            Ok(offset) => offset,
            Err(e) => return failed(e),
        };
    let Some(state) = shard.shared.wait_applied(offset + 1, APPLY_WAIT) else {
        return respond(503, "committed but not applied in time");
    };
    match (cas, state.results.get(&offset)) {
        (true, Some(false)) => respond(409, "the value was not the expected one"),
        // Applied, but its outcome was replaced by a snapshot load since: unknown here.
        (true, None) => respond(503, "outcome unknown: a snapshot replaced it"),
        _ => respond(200, format!("{offset}")),
    }
}

/// The first group's leader and progress (the only group without `--groups`).
fn status(shard: &Shard) -> Response {
    let state = shard.shared.lock();
    let (leader, epoch) = state.leader.map_or((None, -1), |l| (l.leader_id, l.epoch));
    let leader = leader.map_or_else(|| "none".to_string(), |l| l.to_string());
    respond(
        200,
        format!("leader={leader} epoch={epoch} applied={}\n", state.applied),
    )
}
