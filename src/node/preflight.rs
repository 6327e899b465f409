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
/// soft memlock limit towards the hard one when that is enough.
pub fn check(shards: usize, io_memory_bytes: usize) -> Result<(), PreflightError> {
    check_memlock(shards, io_memory_bytes)?;
    check_io_uring()
}

fn check_memlock(shards: usize, io_memory_bytes: usize) -> Result<(), PreflightError> {
    // glommio also locks its rings on older kernels; leave room for them.
    let needed = (shards as u64) * (io_memory_bytes as u64 + 256 * 1024);
    // SAFETY: getrlimit/setrlimit only read and write the struct passed in.
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) } != 0 {
        return Ok(()); // cannot tell; let glommio report what it finds
    }
    if limit.rlim_cur == libc::RLIM_INFINITY || limit.rlim_cur >= needed {
        return Ok(());
    }
    if limit.rlim_max == libc::RLIM_INFINITY || limit.rlim_max >= needed {
        let raised = libc::rlimit {
            rlim_cur: needed,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &raised) } == 0 {
            return Ok(());
        }
    }
    Err(PreflightError(format!(
        "the locked-memory limit (ulimit -l) is {} KiB but {shards} shard(s) with \
         io_memory_kib = {} need about {} KiB. Raise it (`ulimit -l {}`, LimitMEMLOCK= in a \
         systemd unit, or memlock in /etc/security/limits.conf), or lower io_memory_kib or the \
         number of shards in the tuning file.",
        limit.rlim_cur / 1024,
        io_memory_bytes / 1024,
        needed / 1024,
        needed / 1024
    )))
}

fn check_io_uring() -> Result<(), PreflightError> {
    // SAFETY: io_uring_setup reads `params` (zeroed = defaults) and returns a new fd we close.
    let (fd, errno) = unsafe {
        let mut params = [0u8; 120]; // struct io_uring_params
        let fd = libc::syscall(libc::SYS_io_uring_setup, 4u32, params.as_mut_ptr());
        (fd, *libc::__errno_location())
    };
    if fd >= 0 {
        // SAFETY: `fd` is the descriptor io_uring_setup just returned to us.
        unsafe { libc::close(fd as i32) };
        return Ok(());
    }
    let sysctl = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "absent".into());
    let advice = match errno {
        libc::ENOSYS => "this kernel has no io_uring (Linux 5.8 or newer is needed)".to_owned(),
        libc::EPERM | libc::EACCES => format!(
            "io_uring is forbidden here (kernel.io_uring_disabled = {sysctl}). Set \
             `sysctl -w kernel.io_uring_disabled=0`, or add this user to the group in \
             kernel.io_uring_group when it is 1; in a container, the seccomp profile must \
             allow io_uring_setup, io_uring_enter and io_uring_register"
        ),
        libc::ENOMEM => "io_uring_setup ran out of locked memory: raise `ulimit -l`".to_owned(),
        other => format!("io_uring_setup failed with errno {other}"),
    };
    Err(PreflightError(format!("io_uring is not usable: {advice}")))
}
