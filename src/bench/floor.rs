//! One process of `bench quorum`'s floor (`ringraft bench quorum-floor-node`, spawned by the
//! quorum bench): the leader appends each commit to its own file with one O_DIRECT|O_DSYNC
//! write while it sends the batch to both followers over loopback TCP; a follower appends it
//! the same way and acks. The leader prints the same JSON lines as ringraft's load generator.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;

use super::harness::*;
use super::BenchError;
use crate::records::BatchBuilder;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FloorRole {
    Leader,
    Follower,
}

/// One process of the floor (spawned by `bench quorum`; not for direct use).
#[derive(Debug, Args)]
pub struct FloorNodeArgs {
    #[arg(long, value_enum)]
    pub role: FloorRole,
    /// The file this process appends to (created, truncated).
    #[arg(long)]
    pub file: PathBuf,
    /// Leader: the followers' addresses.
    #[arg(long, value_delimiter = ',')]
    pub followers: Vec<SocketAddr>,
    #[arg(long, default_value_t = 2000)]
    pub rate: u64,
    #[arg(long, default_value_t = 100)]
    pub record_bytes: usize,
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    #[arg(long, default_value_t = 2000)]
    pub warmup_ms: u64,
    #[arg(long, default_value_t = 1000)]
    pub report_ms: u64,
}

// ---------------------------------------------------------------------------------------------
// The floor's processes.

pub fn run_floor_node(args: FloorNodeArgs) -> Result<(), BenchError> {
    let result = match args.role {
        FloorRole::Follower => floor_follower(&args.file),
        FloorRole::Leader => floor_leader(&args),
    };
    result.map_err(|e| BenchError::new(format!("floor {:?}: {e}", args.role)))
}

fn open_dsync(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT | libc::O_DSYNC)
        .open(path)
}

const PAGE: usize = 4096;

fn round_up(len: usize) -> usize {
    len.div_ceil(PAGE) * PAGE
}

/// The floor writes into this many bytes of pre-zeroed blocks, over and over: the cheapest
/// durable write the disk can do (no block allocation or extent conversion for the journal).
const FLOOR_RING_BYTES: usize = 16 << 20;

/// An O_DIRECT|O_DSYNC appender: each append goes, zero-padded to whole pages, at the next page
/// boundary of a pre-zeroed region (wrapping at its end), through a 4 KiB-aligned buffer
/// (carved from a larger vector).
struct DsyncAppender {
    file: File,
    position: u64,
    buf: Vec<u8>,
}

impl DsyncAppender {
    fn open(path: &Path) -> std::io::Result<DsyncAppender> {
        {
            use std::io::Write;
            let mut zeros = File::create(path)?;
            let chunk = vec![0u8; 1 << 20];
            for _ in 0..FLOOR_RING_BYTES / chunk.len() {
                zeros.write_all(&chunk)?;
            }
            zeros.sync_all()?;
        }
        Ok(DsyncAppender {
            file: open_dsync(path)?,
            position: 0,
            buf: Vec::new(),
        })
    }

    /// One durable append of `parts`, concatenated.
    fn append(&mut self, parts: &[&[u8]]) -> std::io::Result<()> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let padded = round_up(len.max(1));
        if self.buf.len() < padded + PAGE {
            self.buf = vec![0; padded + PAGE];
        }
        let offset = (PAGE - self.buf.as_ptr() as usize % PAGE) % PAGE;
        let page = &mut self.buf[offset..offset + padded];
        let mut at = 0;
        for p in parts {
            page[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        page[at..].fill(0);
        if self.position as usize + padded > FLOOR_RING_BYTES {
            self.position = 0;
        }
        self.file.write_all_at(page, self.position)?;
        self.position += padded as u64;
        Ok(())
    }
}

/// Leader → follower: `[id u64 LE][len u32 LE][len bytes]`. Follower → leader: `[id u64 LE]`,
/// meaning every commit up to `id` is durable there.
const FRAME_HEADER: usize = 12;

fn floor_follower(file: &Path) -> std::io::Result<()> {
    let mut disk = DsyncAppender::open(file)?;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    println!("{{\"listening\":\"{}\"}}", listener.local_addr()?);
    std::io::stdout().flush()?;
    let (stream, _) = listener.accept()?;
    stream.set_nodelay(true)?;
    let mut acks = stream.try_clone()?;
    let mut reader = BufReader::with_capacity(4 << 20, stream);
    let mut payloads: Vec<Vec<u8>> = Vec::new();
    loop {
        // Block for one frame, then take every frame already received whole: they share one
        // append, as a follower appends what one fetch brings.
        let Some((mut last, first)) = read_frame(&mut reader)? else {
            return Ok(()); // the leader is done
        };
        payloads.clear();
        payloads.push(first);
        while let Some((id, len)) = buffered_frame(reader.buffer()) {
            reader.consume(FRAME_HEADER);
            let mut payload = vec![0; len];
            reader.read_exact(&mut payload)?;
            payloads.push(payload);
            last = id;
        }
        let parts: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        disk.append(&parts)?;
        acks.write_all(&last.to_le_bytes())?;
    }
}

/// The next frame if all of it is in `buffer`: (id, payload length).
fn buffered_frame(buffer: &[u8]) -> Option<(u64, usize)> {
    if buffer.len() < FRAME_HEADER {
        return None;
    }
    let id = u64::from_le_bytes(buffer[..8].try_into().ok()?);
    let len = u32::from_le_bytes(buffer[8..12].try_into().ok()?) as usize;
    (buffer.len() >= FRAME_HEADER + len).then_some((id, len))
}

/// One frame, or `None` at a clean end of stream.
fn read_frame(reader: &mut impl Read) -> std::io::Result<Option<(u64, Vec<u8>)>> {
    let mut header = [0u8; FRAME_HEADER];
    let mut got = 0;
    while got < FRAME_HEADER {
        match reader.read(&mut header[got..])? {
            0 if got == 0 => return Ok(None),
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => got += n,
        }
    }
    let id = u64::from_le_bytes(header[..8].try_into().unwrap_or_default());
    let len = u32::from_le_bytes(header[8..].try_into().unwrap_or_default()) as usize;
    let mut payload = vec![0; len];
    reader.read_exact(&mut payload)?;
    Ok(Some((id, payload)))
}

fn histogram() -> std::io::Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, 60_000_000, 3)
        .map_err(|e| std::io::Error::other(format!("histogram: {e}")))
}

/// A commit the leader has sent and not yet seen complete.
struct Pending {
    id: u64,
    intended: Instant,
    count: u64,
    measured: bool,
}

/// The leader's bookkeeping, shared by its threads. Watermarks count commits (`id + 1`).
struct Tracker {
    pending: VecDeque<Pending>,
    disk_done: u64,
    acked: Vec<u64>,
    followers_lost: usize,
    interval: Histogram<u64>,
    total: Histogram<u64>,
    interval_records: u64,
    error: Option<String>,
}

impl Tracker {
    /// Records every commit that both the local write and some follower have covered.
    fn advance(&mut self) {
        let acked = self.acked.iter().copied().max().unwrap_or(0);
        let done = self.disk_done.min(acked);
        let now = Instant::now();
        while self.pending.front().is_some_and(|p| p.id < done) {
            let Some(p) = self.pending.pop_front() else {
                break;
            };
            let latency = (now.duration_since(p.intended).as_micros() as u64).max(1);
            let _ = self.interval.record_n(latency, p.count);
            if p.measured {
                let _ = self.total.record_n(latency, p.count);
            }
            self.interval_records += p.count;
        }
    }
}

type Shared = Arc<Mutex<Tracker>>;

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Tracker> {
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn floor_leader(args: &FloorNodeArgs) -> std::io::Result<()> {
    if args.followers.is_empty() {
        return Err(std::io::Error::other("--followers is required"));
    }
    let mut disk = DsyncAppender::open(&args.file)?;
    let shared: Shared = Arc::new(Mutex::new(Tracker {
        pending: VecDeque::new(),
        disk_done: 0,
        acked: vec![0; args.followers.len()],
        followers_lost: 0,
        interval: histogram()?,
        total: histogram()?,
        interval_records: 0,
        error: None,
    }));
    let mut senders = Vec::new();
    for (f, addr) in args.followers.iter().enumerate() {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        let mut acks = stream.try_clone()?;
        senders.push(Some(stream));
        let shared = shared.clone();
        std::thread::spawn(move || {
            let mut id = [0u8; 8];
            while acks.read_exact(&mut id).is_ok() {
                let mut t = lock(&shared);
                t.acked[f] = t.acked[f].max(u64::from_le_bytes(id) + 1);
                t.advance();
            }
            lock(&shared).followers_lost += 1;
        });
    }
    let (disk_tx, disk_rx) = mpsc::channel::<(u64, Arc<Vec<u8>>)>();
    {
        let shared = shared.clone();
        std::thread::spawn(move || {
            while let Ok(first) = disk_rx.recv() {
                // Commits that queued behind the last write share this one.
                let mut batch = vec![first];
                batch.extend(disk_rx.try_iter());
                let parts: Vec<&[u8]> = batch.iter().map(|(_, b)| b.as_slice()).collect();
                let written = disk.append(&parts);
                let mut t = lock(&shared);
                match written {
                    Ok(()) => {
                        t.disk_done = batch.last().map_or(t.disk_done, |(id, _)| id + 1);
                        t.advance();
                    }
                    Err(e) => {
                        t.error = Some(format!("write failed: {e}"));
                        return;
                    }
                }
            }
        });
    }
    let start = Instant::now();
    let measure_from = Duration::from_millis(args.warmup_ms);
    let end = measure_from + Duration::from_secs(args.seconds);
    let report_every = Duration::from_millis(args.report_ms.max(1));
    let mut next_report = report_every;
    let mut schedule = Schedule::new(args.rate);
    let mut id = 0u64;
    let size = args.record_bytes.max(8);
    loop {
        let elapsed = start.elapsed();
        {
            let t = lock(&shared);
            if let Some(e) = &t.error {
                return Err(std::io::Error::other(e.clone()));
            }
            if t.followers_lost == args.followers.len() {
                return Err(std::io::Error::other("every follower disconnected"));
            }
        }
        if elapsed >= end {
            print_floor_summary(args, &lock(&shared));
            return Ok(());
        }
        if let Some(due) = schedule.poll(elapsed) {
            let batch = Arc::new(load_batch(due.first, due.count, size));
            lock(&shared).pending.push_back(Pending {
                id,
                intended: start + due.intended,
                count: due.count,
                measured: due.intended >= measure_from,
            });
            let _ = disk_tx.send((id, batch.clone()));
            let mut frame = Vec::with_capacity(FRAME_HEADER + batch.len());
            frame.extend_from_slice(&id.to_le_bytes());
            frame.extend_from_slice(&(batch.len() as u32).to_le_bytes());
            frame.extend_from_slice(&batch);
            for sender in senders.iter_mut() {
                if sender
                    .as_mut()
                    .is_some_and(|s| s.write_all(&frame).is_err())
                {
                    *sender = None; // its ack thread sees the disconnect
                }
            }
            id += 1;
        }
        if start.elapsed() >= next_report {
            report_floor(args, &mut lock(&shared), start);
            next_report += report_every;
        }
        let wake = schedule.next_due().min(next_report).min(end);
        let wait = wake.saturating_sub(start.elapsed());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }
}

/// The same batch bytes the node's generator appends (src/node/load.rs): `count` records of
/// `size` bytes, each starting with its sequence number from `first`.
fn load_batch(first: u64, count: u64, size: usize) -> Vec<u8> {
    let mut builder = BatchBuilder::new(0, 0, unix_millis(), false);
    for seq in first..first + count {
        let mut v = vec![0u8; size];
        v[..8].copy_from_slice(&seq.to_be_bytes());
        builder.append(None, Some(&v));
    }
    builder.finish()
}

fn percentiles(h: &Histogram<u64>) -> [u64; 4] {
    [50.0, 75.0, 99.0, 99.9].map(|q| h.value_at_quantile(q / 100.0))
}

fn report_floor(args: &FloorNodeArgs, t: &mut Tracker, start: Instant) {
    let [p50, p75, p99, p999] = percentiles(&t.interval);
    let secs = args.report_ms.max(1) as f64 / 1000.0;
    let bytes_per_s = t.interval_records as f64 * args.record_bytes as f64 / secs;
    println!(
        "{{\"t_ms\":{},\"records\":{},\"committed_bytes_per_s\":{:.0},\"p50_us\":{p50},\
         \"p75_us\":{p75},\"p99_us\":{p99},\"p999_us\":{p999},\"failed\":0}}",
        start.elapsed().as_millis(),
        t.interval_records,
        bytes_per_s,
    );
    let _ = std::io::stdout().flush();
    t.interval.reset();
    t.interval_records = 0;
}

fn print_floor_summary(args: &FloorNodeArgs, t: &Tracker) {
    let [p50, p75, p99, p999] = percentiles(&t.total);
    let records = t.total.len();
    let bytes_per_s = records as f64 * args.record_bytes as f64 / args.seconds.max(1) as f64;
    println!(
        "{{\"summary\":true,\"epoch\":0,\"records\":{records},\"committed_bytes_per_s\":{:.0},\
         \"p50_us\":{p50},\"p75_us\":{p75},\"p99_us\":{p99},\"p999_us\":{p999},\"max_us\":{},\
         \"failed\":0}}",
        bytes_per_s,
        t.total.max(),
    );
    let _ = std::io::stdout().flush();
}

fn unix_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_and_aligned_appends() {
        let mut wire = Vec::new();
        for (id, payload) in [(7u64, &b"abc"[..]), (8, &b""[..])] {
            wire.extend_from_slice(&id.to_le_bytes());
            wire.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            wire.extend_from_slice(payload);
        }
        assert_eq!(buffered_frame(&wire), Some((7, 3)));
        assert_eq!(buffered_frame(&wire[..14]), None);
        let mut reader = &wire[..];
        assert_eq!(read_frame(&mut reader).unwrap(), Some((7, b"abc".to_vec())));
        assert_eq!(read_frame(&mut reader).unwrap(), Some((8, Vec::new())));
        assert_eq!(read_frame(&mut reader).unwrap(), None);
        assert_eq!(
            (round_up(1), round_up(4096), round_up(4097)),
            (4096, 4096, 8192)
        );
    }
}
