//! Which io_uring serves a data directory's O_DIRECT files, decided from the device rather than
//! guessed.
//!
//! glommio 0.9 sends a `DmaFile`'s reads and writes to a ring created with IORING_SETUP_IOPOLL
//! whenever a probe read on the first such file of a device succeeds, and caches that answer
//! per device for the thread. The first file is usually a new, empty segment: the probe reads
//! past its end, which succeeds without reaching the device, so even a device without poll
//! queues (`queue/io_poll` = 0 in sysfs: nearly every cloud disk, NVMe without `poll_queues`)
//! is taken as pollable. An executor with a write in flight then never sleeps: it spins in
//! `io_uring_enter` (13k–136k calls per second per node measured here) and steals the core from
//! everything else on it.
//!
//! glommio offers no switch for this, and the probe runs once per device and thread. So before
//! any segment or snapshot file is opened on a shard, `prepare` reads `queue/io_poll` for the
//! directory's device; when it is not 1, it makes glommio's first probe on that device read a
//! scratch file that holds a page of data, through glommio's public `OpenOptions::dma_open`.
//! That read reaches the device, which refuses polled I/O (EOPNOTSUPP), and glommio records the
//! device as not pollable for this thread: every later `DmaFile` there uses the
//! interrupt-driven main ring, which sleeps while I/O is in flight. Where the device does
//! support polling, nothing is done and polling stays. A write and a read of the scratch file,
//! counted by glommio's per-ring statistics, then show which ring really serves the directory.

use std::fmt;
use std::io;
use std::path::Path;

use glommio::io::OpenOptions;

use super::segment::{glommio_io, PAGE_BYTES};

/// The ring that serves a directory's O_DIRECT files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingKind {
    /// Completions are reaped by polling the device (IORING_SETUP_IOPOLL).
    Polled,
    /// Completions arrive by interrupt; the executor sleeps while I/O is in flight.
    Interrupt,
    /// No O_DIRECT I/O was seen on either ring (a filesystem without O_DIRECT, e.g. tmpfs,
    /// where glommio falls back to buffered I/O).
    Buffered,
}

impl fmt::Display for RingKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RingKind::Polled => "polled (IOPOLL)",
            RingKind::Interrupt => "interrupt-driven",
            RingKind::Buffered => "buffered (no O_DIRECT)",
        })
    }
}

/// What `prepare` found for a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingReport {
    /// The device's `queue/io_poll` ("0", "1"), or why it could not be read.
    pub io_poll: String,
    pub ring: RingKind,
}

/// Decides, for the calling shard, which ring serves O_DIRECT files in `dir` (an existing,
/// absolute directory); see the module doc. Call before any `DmaFile` in `dir` is opened on
/// this shard.
pub async fn prepare(dir: &Path) -> io::Result<RingReport> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(dir)?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let io_poll = device_io_poll(major, minor);
    // One scratch file per shard: several shards of a process prepare the same directory.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let pid = std::process::id();
    let scratch = dir.join(format!("{SCRATCH_PREFIX}{pid}-{n}"));
    remove_stale_scratch(dir, pid);
    if io_poll.as_deref() != Some("1") {
        // A page of data, so that glommio's probe read reaches the device (see above). Written
        // before the shard serves anything; this runs at start-up only.
        std::fs::write(&scratch, [0u8; PAGE_BYTES])?;
        let probe = OpenOptions::new()
            .read(true)
            .dma_open(&scratch)
            .await
            .map_err(glommio_io)?;
        probe.close().await.map_err(glommio_io)?;
    }
    let ring = observe_ring(&scratch).await;
    let _ = glommio::io::remove(&scratch).await;
    Ok(RingReport {
        io_poll: io_poll.unwrap_or_else(|| format!("no queue/io_poll for device {major}:{minor}")),
        ring: ring?,
    })
}

const SCRATCH_PREFIX: &str = ".ringraft-ring-probe-";

/// Removes scratch files an earlier process left (killed while it started). Only this
/// process uses the directory (it holds the directory's lock), so another pid's are stale.
fn remove_stale_scratch(dir: &Path, pid: u32) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let ours = format!("{SCRATCH_PREFIX}{pid}-");
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(SCRATCH_PREFIX) && !name.starts_with(&ours) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// `queue/io_poll` of the device `major:minor` (of its disk when it is a partition); `None`
/// when sysfs has none.
fn device_io_poll(major: u32, minor: u32) -> Option<String> {
    let base = format!("/sys/dev/block/{major}:{minor}");
    for path in [
        format!("{base}/queue/io_poll"),
        format!("{base}/../queue/io_poll"),
    ] {
        if let Ok(text) = std::fs::read_to_string(&path) {
            return Some(text.trim().to_owned());
        }
    }
    None
}

/// Writes and reads one page of `scratch` and asks glommio which ring counted them.
async fn observe_ring(scratch: &Path) -> io::Result<RingKind> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .dma_open(scratch)
        .await
        .map_err(glommio_io)?;
    let _ = glommio::executor().io_stats(); // taking the stats resets them
    let mut buffer = file.alloc_dma_buffer(PAGE_BYTES);
    buffer.as_bytes_mut().fill(0);
    file.write_at(buffer, 0).await.map_err(glommio_io)?;
    let _ = file
        .read_at_aligned(0, PAGE_BYTES)
        .await
        .map_err(glommio_io)?;
    let stats = glommio::executor().io_stats();
    file.close().await.map_err(glommio_io)?;
    let counted = |ring: &glommio::RingIoStats| ring.file_writes().0 + ring.file_reads().0;
    Ok(if counted(&stats.poll_ring) > 0 {
        RingKind::Polled
    } else if counted(&stats.main_ring) > 0 {
        RingKind::Interrupt
    } else {
        RingKind::Buffered
    })
}
