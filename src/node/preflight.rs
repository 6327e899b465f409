//! Start-up checks that turn "glommio could not start" into a message that says what to change:
//! io_uring must be usable and the locked-memory limit must cover every executor's io memory.

use std::fmt;

/// Why the node cannot run on this machine, with what to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreflightError(pub String);

impl fmt::Display for PreflightError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PreflightError {}

/// Checks io_uring and memlock for `shards` executors of `io_memory_bytes` each. Raises the
/// soft memlock limit towards the hard one when that is enough, and the soft open-files limit
/// to the hard one.
pub fn check(shards: usize, io_memory_bytes: usize) -> Result<(), PreflightError> {
    // Best effort: a node that cannot raise it says so when a segment fails to open (EMFILE,
    // with the path).
    let _ = crate::sys::raise_nofile_soft();
    // Large blocks back to the kernel when freed: memory flat under load (`bench soak`).
    crate::sys::pin_malloc_mmap_threshold();
    check_memlock(shards, io_memory_bytes)?;
    check_io_uring()
}

fn check_memlock(shards: usize, io_memory_bytes: usize) -> Result<(), PreflightError> {
    // glommio also locks its rings on older kernels; leave room for them.
    let needed = (shards as u64) * (io_memory_bytes as u64 + 256 * 1024);
    let Ok((soft, hard)) = crate::sys::memlock_limit() else {
        return Ok(()); // cannot tell; let glommio report what it finds
    };
    if soft.is_none_or(|soft| soft >= needed) {
        return Ok(());
    }
    if hard.is_none_or(|hard| hard >= needed) && crate::sys::raise_memlock_soft(needed).is_ok() {
        return Ok(());
    }
    let soft = soft.unwrap_or(0);
    Err(PreflightError(format!(
        "the locked-memory limit (ulimit -l) is {} KiB but {shards} shard(s) with \
         io_memory_kib = {} need about {} KiB. Raise it (`ulimit -l {}`, LimitMEMLOCK= in a \
         systemd unit, or memlock in /etc/security/limits.conf), or lower io_memory_kib or the \
         number of shards in the tuning file.",
        soft / 1024,
        io_memory_bytes / 1024,
        needed / 1024,
        needed / 1024
    )))
}

fn check_io_uring() -> Result<(), PreflightError> {
    let Err(error) = crate::sys::probe_io_uring() else {
        return Ok(());
    };
    let sysctl = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "absent".into());
    let advice = match error.raw_os_error() {
        Some(libc::ENOSYS) => {
            "this kernel has no io_uring (Linux 5.8 or newer is needed)".to_owned()
        }
        Some(libc::EPERM) | Some(libc::EACCES) => format!(
            "io_uring is forbidden here (kernel.io_uring_disabled = {sysctl}). Set \
             `sysctl -w kernel.io_uring_disabled=0`, or add this user to the group in \
             kernel.io_uring_group when it is 1; in a container, the seccomp profile must \
             allow io_uring_setup, io_uring_enter and io_uring_register"
        ),
        Some(libc::ENOMEM) => {
            "io_uring_setup ran out of locked memory: raise `ulimit -l`".to_owned()
        }
        _ => format!("io_uring_setup failed: {error}"),
    };
    Err(PreflightError(format!("io_uring is not usable: {advice}")))
}
