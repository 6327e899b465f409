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
    // And freed heap memory back after bursts (start-up elections, catch-ups).
    crate::sys::start_heap_trimmer();
    check_memlock(shards, io_memory_bytes)?;
    check_io_uring()
}

/// Descriptors a group with `voters` static voters holds while it elects: its log's three
/// files, a connection to and from each other voter (Vote, BeginQuorumEpoch) until the idle
/// ones close (`constants::GROUP_PEER_IDLE_CLOSE`), and two to spare. Its Fetches travel in
/// its shard's sessions (`node::fetch_sessions`), shared by all groups. Measured with three
/// voters on 3 nodes, peaks per node (the node's own descriptors included): 6,712–6,796 with
/// 1,000 groups each, 14,856–16,689 with 2,000 (elections take longer, so more connections
/// are open at once); 3 per group once settled.
pub fn group_descriptors(voters: usize) -> u64 {
    let voters = voters.max(1) as u64;
    3 + 2 * (voters - 1) + 2
}

/// Descriptors a node needs besides its groups': group 0's log and connections, listeners,
/// rings and the admin listener, with room to spare.
const NODE_DESCRIPTORS: u64 = 256;

/// Refuses a start whose groups (`voters` of each hosted group) need more descriptors than the
/// open-files limit allows, once raised to the hard limit: such a node would run out of
/// descriptors while its groups elect, and fail one group after another with EMFILE.
pub fn check_open_files(groups: &[usize]) -> Result<(), PreflightError> {
    if groups.is_empty() {
        return Ok(());
    }
    let Ok(limit) = crate::sys::raise_nofile_soft() else {
        return Ok(()); // cannot tell; an EMFILE names its path
    };
    check_open_files_within(groups, limit)
}

fn check_open_files_within(groups: &[usize], limit: u64) -> Result<(), PreflightError> {
    let needed = NODE_DESCRIPTORS
        + groups
            .iter()
            .map(|voters| group_descriptors(*voters))
            .sum::<u64>();
    if limit >= needed {
        return Ok(());
    }
    Err(PreflightError(format!(
        "ringraft.groups gives this node {} groups, which need about {needed} open files while \
         they elect (each group's log files, and a connection to and from each peer), but the \
         open-files limit (ulimit -n) is {limit}. Raise it (`ulimit -n {needed}`, \
         LimitNOFILE= in a systemd unit, or nofile in /etc/security/limits.conf), or host fewer \
         groups on this node.",
        groups.len()
    )))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_fit_the_open_files_limit_or_the_start_says_how_to_raise_it() {
        // Three voters: 9 descriptors each while they elect (7.4-8.3 measured).
        assert_eq!(group_descriptors(3), 9);
        assert_eq!(group_descriptors(1), 5);
        let two_thousand = vec![3; 2_000];
        assert!(check_open_files_within(&two_thousand, 20_000).is_ok());
        let three_thousand = vec![3; 3_000];
        let e = check_open_files_within(&three_thousand, 20_000).unwrap_err();
        assert!(
            e.0.contains("3000 groups") && e.0.contains("ulimit -n 27256"),
            "{e}"
        );
        assert!(!e.0.contains("  "), "{e}");
        assert!(check_open_files_within(&[3], 264).is_err());
        assert!(check_open_files_within(&[3], 265).is_ok());
    }
}
