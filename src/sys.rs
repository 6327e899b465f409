//! Every `unsafe` call in ringraft lives here: thin, checked wrappers over the few libc calls
//! that std and glommio do not offer. Each returns a plain Rust value or an `io::Error`.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Advises the kernel to back `len` bytes from `addr` with transparent huge pages, so that
/// a large O_DIRECT read into them pins a few 2 MiB pages instead of thousands of 4 KiB ones.
/// Advice only: it changes no byte, and an error (no transparent huge pages) changes nothing.
pub fn advise_huge_pages(addr: usize, len: usize) -> io::Result<()> {
    // SAFETY: MADV_HUGEPAGE leaves the contents and the mapping as they are; a range that is not
    // mapped is refused with an error.
    if unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_HUGEPAGE) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The CPUs this process may run on (its affinity mask), sorted; `[0]` if it cannot be read.
pub fn online_cpus() -> Vec<usize> {
    // SAFETY: `set` is a plain bitmask that sched_getaffinity fills and CPU_ISSET only reads;
    // the size passed is the size of the value.
    let cpus: Vec<usize> = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return vec![0];
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect()
    };
    if cpus.is_empty() {
        vec![0]
    } else {
        cpus
    }
}

/// The locked-memory limit, (soft, hard) in bytes; `None` means unlimited.
pub fn memlock_limit() -> io::Result<(Option<u64>, Option<u64>)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let finite = |v: libc::rlim_t| (v != libc::RLIM_INFINITY).then_some(v);
    Ok((finite(limit.rlim_cur), finite(limit.rlim_max)))
}

/// Raises the soft locked-memory limit to `bytes`, keeping the hard limit.
pub fn raise_memlock_soft(bytes: u64) -> io::Result<()> {
    let (_, hard) = memlock_limit()?;
    let limit = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: hard.unwrap_or(libc::RLIM_INFINITY),
    };
    // SAFETY: setrlimit reads only the struct we pass.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Raises the soft open-files limit (`ulimit -n`) to the hard one and returns the new soft
/// limit. A log keeps one descriptor per segment and index, as Kafka's does, and a login's
/// default soft limit (1024) is far below what a long log needs, while the hard limit a user
/// may raise to is usually much higher (Go's runtime raises it the same way).
pub fn raise_nofile_soft() -> io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads only the struct we pass.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(io::Error::last_os_error());
        }
        limit.rlim_cur = limit.rlim_max;
    }
    Ok(limit.rlim_cur)
}

/// Where glibc's malloc serves a block from `mmap` (and gives it back to the kernel on free):
/// 128 KiB, its own starting value.
pub const MALLOC_MMAP_THRESHOLD_BYTES: i32 = 128 << 10;

/// How many descriptors this process holds now (the entries of `/proc/self/fd`).
pub fn open_descriptors() -> io::Result<u64> {
    Ok(std::fs::read_dir("/proc/self/fd")?.count() as u64)
}

/// Pins glibc's mmap threshold at `MALLOC_MMAP_THRESHOLD_BYTES` unless the environment sets
/// one (`MALLOC_MMAP_THRESHOLD_`). By default glibc raises the threshold to the size of each
/// mmapped block freed (up to 32 MiB), so the next block that size comes from a thread's heap,
/// where a free rarely returns it. A node's largest blocks are the batch caches' queues
/// (several MiB, regrown as the number of cached batches changes), so its resident memory
/// stepped up and down by about 9 MiB for minutes at a time in `bench soak` (+11 % and +12 %
/// between two samples 30 minutes apart on two of three nodes); with the threshold pinned the
/// same run stayed within 0.2 % on those two. Process-wide, so an embedding application's
/// allocations follow it too. Returns whether it was set.
pub fn pin_malloc_mmap_threshold() -> bool {
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some() {
        return false;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only sets a parameter of the allocator; any value is accepted or
        // refused (0).
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD_BYTES) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Free heap memory that, once freed since the heap last held less, the heap trimmer gives
/// back to the kernel (`start_heap_trimmer`).
pub const HEAP_TRIM_FREED_BYTES: usize = 16 << 20;

/// How often the heap trimmer looks at the heap.
const HEAP_TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// When to trim, from the heap's free bytes sampled over time: once `HEAP_TRIM_FREED_BYTES`
/// more are free than at the lowest point since the last trim, a burst has allocated and
/// freed that much, and glibc keeps those pages resident (it returns only the top of each
/// heap). A steady node's free bytes move by less and it is never trimmed; memory that is
/// reused and freed again after a trim is resident again, so it counts anew.
#[derive(Debug, Default)]
pub struct HeapTrimPolicy {
    /// The fewest free bytes seen since the last trim.
    low: Option<usize>,
}

impl HeapTrimPolicy {
    /// The heap holds `free` bytes free now: whether to trim.
    pub fn sample(&mut self, free: usize) -> bool {
        let low = self.low.map_or(free, |low| low.min(free));
        self.low = Some(low);
        free - low >= HEAP_TRIM_FREED_BYTES
    }

    /// Trimmed; the heap holds `free` bytes free (trimming releases their pages, not the
    /// bytes from the heap's count).
    pub fn trimmed(&mut self, free: usize) {
        self.low = Some(free);
    }
}

/// Starts, once per process, a thread that gives the allocator's freed heap memory back to the
/// kernel after bursts (`HeapTrimPolicy`), with `malloc_trim`. glibc returns only the top of a
/// heap by itself, so a node keeps resident what start-up elections, a catch-up or a burst of
/// connections needed: 3 nodes × 2,000 idle groups each held 118–122 MB each once settled, and
/// 90–91 MB after one `malloc_trim(0)`, which took 3–6 ms. The thread is not a shard: a
/// shard allocating from an arena while it is trimmed waits those milliseconds, once per
/// burst. Process-wide, as `pin_malloc_mmap_threshold`. Returns whether it started (glibc only;
/// `MALLOC_TRIM_THRESHOLD_` in the environment leaves trimming to it).
pub fn start_heap_trimmer() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static STARTED: std::sync::Once = std::sync::Once::new();
        if std::env::var_os("MALLOC_TRIM_THRESHOLD_").is_some() {
            return false;
        }
        let mut started = false;
        STARTED.call_once(|| {
            started = std::thread::Builder::new()
                .name("ringraft-heap-trim".into())
                .spawn(trim_heap_after_bursts)
                .is_ok();
        });
        started
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_heap_after_bursts() {
    let free = || {
        // SAFETY: mallinfo2 only reads the allocator's statistics (locking each arena).
        let info = unsafe { libc::mallinfo2() };
        info.fordblks
    };
    // SAFETY: sysconf only reads a system constant.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    // Resident bytes, from /proc/self/statm (pages).
    let resident = || {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
        let pages: u64 = statm
            .split(' ')
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        pages * page
    };
    let mut policy = HeapTrimPolicy::default();
    loop {
        std::thread::sleep(HEAP_TRIM_EVERY);
        if policy.sample(free()) {
            let (before, began) = (resident(), std::time::Instant::now());
            // SAFETY: malloc_trim releases free pages of the heap; no allocation changes.
            unsafe { libc::malloc_trim(0) };
            let took = began.elapsed();
            policy.trimmed(free());
            // Rare by design (once per burst), and it holds up allocations meanwhile: said.
            tracing::info!(
                took_ms = took.as_secs_f64() * 1e3,
                released_mib = before.saturating_sub(resident()) >> 20,
                "heap trimmed"
            );
        }
    }
}

/// Creates and closes a 4-entry io_uring: `Ok` when this process may use io_uring.
pub fn probe_io_uring() -> io::Result<()> {
    let mut params = [0u8; 120]; // struct io_uring_params, zeroed = defaults
                                 // SAFETY: io_uring_setup reads and fills `params`, whose size matches the kernel struct.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 4u32, params.as_mut_ptr()) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is the descriptor io_uring_setup just returned; nothing else holds it.
    unsafe { libc::close(fd as i32) };
    Ok(())
}

/// Takes an exclusive, non-blocking `flock` on `file`; fails if another process holds it.
pub fn try_lock_exclusive(file: &File) -> io::Result<()> {
    // SAFETY: flock on a descriptor owned by `file`, which outlives the call.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Maps a file read-only. The map must not change under us: ringraft maps only sealed segments
/// and snapshots, which it never writes again, in a directory it holds the lock on.
pub fn map_read_only(file: &File) -> io::Result<memmap2::Mmap> {
    // SAFETY: memmap2 marks mapping unsafe because another process could modify or truncate the
    // file while it is mapped; ringraft's directory lock and the immutability of sealed files
    // rule that out for the files it maps.
    unsafe { memmap2::Mmap::map(file) }
}

/// Takes ownership of a listening socket for the calling glommio executor.
pub fn glommio_listener(listener: std::net::TcpListener) -> glommio::net::TcpListener {
    use std::os::fd::{FromRawFd, IntoRawFd};
    let fd = listener.into_raw_fd();
    // SAFETY: `fd` is a bound, listening TCP socket that this call owns from here on
    // (`into_raw_fd` gave up the std listener's ownership), as `from_raw_fd` requires.
    unsafe { glommio::net::TcpListener::from_raw_fd(fd) }
}

/// Clock ticks per second, the unit of `/proc/<pid>/stat`'s CPU times (100 when unknown).
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|t| *t > 0).unwrap_or(100)
}

/// The size of a memory page in bytes (`/proc` counts resident memory in pages).
pub fn page_size() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).unwrap_or(4096)
}

/// The fields of `/proc/<pid>/stat` the node reads (proc(5), counting from 1): utime (14) and
/// stime (15) in clock ticks, starttime (22) in ticks after boot, vsize (23) in bytes, rss
/// (24) in pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    pub utime: u64,
    pub stime: u64,
    pub start_ticks: u64,
    pub vsize: u64,
    pub rss_pages: u64,
}

/// `/proc/<pid>/stat` of process `pid`; `None` once it has gone or when it does not parse.
pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    parse_proc_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The command name (field 2) may hold spaces and parentheses, so fields are counted after
/// its last `)`.
fn parse_proc_stat(stat: &str) -> Option<ProcStat> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` starts at field 3 (state).
    let f: Vec<&str> = rest.split_whitespace().collect();
    let at = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
    Some(ProcStat {
        utime: at(14)?,
        stime: at(15)?,
        start_ticks: at(22)?,
        vsize: at(23)?,
        rss_pages: at(24)?,
    })
}

/// User plus system CPU time of process `pid` so far, in clock ticks; `None` once it has gone.
pub fn process_cpu_ticks(pid: u32) -> Option<u64> {
    proc_stat(pid).map(|s| s.utime + s.stime)
}

/// A reading of the machine's busy clock, in µs. The difference between two readings is the
/// CPU time everything on the machine used between them: processes, the kernel's workers (the
/// ones that finish a direct write's sync) and softirqs.
///
/// It is every CPU's time since an arbitrary start, less what `/proc/stat` counts idle or
/// waiting for I/O and stolen by the hypervisor. On a tickless kernel the idle time is kept
/// exactly, while `/proc/stat`'s busy fields are sampled at the tick: a load of short wakes
/// that end between two ticks is missed. Summed, those fields gave `bench quorum`'s floor,
/// whose load is short wakes, between three quarters and a twentieth of the CPU its own
/// processes' exact counts showed.
pub fn system_busy_clock_us() -> Option<u64> {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let since = START.get_or_init(std::time::Instant::now).elapsed();
    let (not_busy_ticks, cpus) =
        parse_system_not_busy(&std::fs::read_to_string("/proc/stat").ok()?)?;
    let tick_us = 1e6 / clock_ticks_per_second() as f64;
    let all_us = since.as_micros() as f64 * cpus as f64;
    // Offset so that the clock starts high: idle time before `START` is in the count.
    Some((all_us + 1e15 - not_busy_ticks as f64 * tick_us).max(0.0) as u64)
}

/// The `cpu` line's idle, iowait and steal ticks, and how many CPUs the file lists.
fn parse_system_not_busy(stat: &str) -> Option<(u64, usize)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal ...
    let at = |i: usize| f.get(i).copied().unwrap_or(0);
    let cpus = stat
        .lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .count();
    (cpus > 0).then_some((at(3) + at(4) + at(7), cpus))
}

/// Context switches, voluntary and not, of every thread of process `pid` so far (each
/// thread's `/proc/<pid>/task/<tid>/status`; the process's own line counts its main thread
/// only). `None` once the process has gone.
pub fn process_context_switches(pid: u32) -> Option<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        // A thread that exits meanwhile takes its count with it.
        let Ok(text) = std::fs::read_to_string(entry.ok()?.path().join("status")) else {
            continue;
        };
        total += parse_switches(&text)?;
    }
    Some(total)
}

fn parse_switches(status: &str) -> Option<u64> {
    let field = |name: &str| {
        let line = status.lines().find_map(|l| l.strip_prefix(name))?;
        line.trim().parse::<u64>().ok()
    };
    Some(field("voluntary_ctxt_switches:")? + field("nonvoluntary_ctxt_switches:")?)
}

/// Takes a listening socket out of LISTEN at once (`shutdown(2)`), so that its port is free
/// the moment this process exits. Without it, an accept still queued in an io_uring keeps the
/// socket listening until the kernel's deferred ring teardown cancels that accept, a few
/// milliseconds after exit, and a node restarted at once fails with "Address already in use".
pub fn shutdown_listener(listener: &std::net::TcpListener) -> io::Result<()> {
    // SAFETY: shutdown takes a descriptor this listener owns and touches no memory of ours.
    if unsafe { libc::shutdown(listener.as_raw_fd(), libc::SHUT_RDWR) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// One non-blocking `sendmsg(2)` of `slices` on a connected socket (no SIGPIPE): how many bytes
/// the kernel took, or `WouldBlock` when its buffer is full.
pub fn send_vectored(fd: std::os::fd::RawFd, slices: &[&[u8]]) -> io::Result<usize> {
    let iov: Vec<libc::iovec> = slices
        .iter()
        .take(IOV_MAX)
        .map(|s| libc::iovec {
            iov_base: s.as_ptr() as *mut libc::c_void,
            iov_len: s.len(),
        })
        .collect();
    // SAFETY: every iovec points into a slice borrowed for this call, and msghdr names only
    // that array; sendmsg reads them and writes nothing of ours.
    let sent = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = iov.len() as _;
        libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT)
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sent as usize)
}

/// Linux's limit on the slices of one `sendmsg`.
pub const IOV_MAX: usize = 1024;

/// A std handle on the socket of a glommio stream (a duplicate descriptor), to hand the
/// connection to another shard; the glommio stream is dropped by the caller.
pub fn std_stream(stream: &glommio::net::TcpStream) -> io::Result<std::net::TcpStream> {
    // SAFETY: the descriptor belongs to `stream`, which outlives this call; the borrow is only
    // used to duplicate it into a descriptor the returned value owns.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(stream.as_raw_fd()) };
    Ok(std::net::TcpStream::from(borrowed.try_clone_to_owned()?))
}

/// A glommio stream on this shard for a connected socket another shard accepted.
pub fn glommio_stream(stream: std::net::TcpStream) -> glommio::net::TcpStream {
    use std::os::fd::{FromRawFd, IntoRawFd};
    let fd = stream.into_raw_fd();
    // SAFETY: `fd` is a connected TCP socket this call owns from here on (`into_raw_fd` gave
    // up the std stream's ownership), as `from_raw_fd` requires.
    unsafe { glommio::net::TcpStream::from_raw_fd(fd) }
}

/// Lowers the calling thread's scheduling priority to `nice` (a benchmark's load generators
/// stand for other machines and must not starve the nodes they measure).
pub fn renice_this_thread(nice: i32) -> io::Result<()> {
    // SAFETY: setpriority touches no memory of ours; on Linux, who = 0 is the calling thread.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::{HeapTrimPolicy, HEAP_TRIM_FREED_BYTES};

    #[test]
    fn the_heap_is_trimmed_after_a_burst_and_not_while_steady() {
        const MIB: usize = 1 << 20;
        let mut p = HeapTrimPolicy::default();
        // A steady node: free bytes move by a few MiB.
        for free in [40, 44, 38, 50, 41].map(|m| m * MIB) {
            assert!(!p.sample(free), "{free}");
        }
        // A burst allocates 30 MiB of the free space and more, then frees it all.
        assert!(!p.sample(10 * MIB));
        assert!(p.sample(10 * MIB + HEAP_TRIM_FREED_BYTES));
        p.trimmed(60 * MIB);
        // The count of free bytes stays where it was after the trim: no second trim...
        assert!(!p.sample(60 * MIB));
        assert!(!p.sample(62 * MIB));
        // ...until memory is reused (resident again) and freed again.
        assert!(!p.sample(30 * MIB));
        assert!(p.sample(60 * MIB));
    }

    #[test]
    fn not_busy_is_idle_iowait_and_steal_over_the_listed_cpus() {
        let stat = "cpu  10 2 30 4000 500 6 7 8 0 0\ncpu0 1 1 1 1 1 1 1 1 0 0\n\
                    cpu1 1 1 1 1 1 1 1 1 0 0\nctxt 99\n";
        assert_eq!(
            super::parse_system_not_busy(stat),
            Some((4000 + 500 + 8, 2))
        );
        assert_eq!(super::parse_system_not_busy("cpu0 1 2 3\n"), None);
        assert_eq!(super::parse_system_not_busy("cpu  1 x 3\n"), None);
        assert_eq!(
            super::parse_system_not_busy("cpu  1 2 3 4\n"),
            None,
            "no cpuN line"
        );
    }

    #[test]
    fn the_busy_clock_counts_a_spinning_thread() {
        let before = super::system_busy_clock_us().expect("/proc/stat");
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(300) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let used = super::system_busy_clock_us().expect("/proc/stat") - before;
        // A third of the 300 ms this thread spun at least, whatever the hypervisor stole; a
        // clock in the wrong unit, or counting one CPU's idle time against all, is far off.
        assert!(
            used >= 100_000,
            "busy clock moved {used} µs over a 300 ms spin"
        );
    }

    #[test]
    fn switches_add_voluntary_and_involuntary() {
        let status = "Name:\tringraft\nvoluntary_ctxt_switches:\t120\n\
                      nonvoluntary_ctxt_switches:\t7\n";
        assert_eq!(super::parse_switches(status), Some(127));
        assert_eq!(super::parse_switches("voluntary_ctxt_switches:\t1\n"), None);
    }

    #[test]
    fn proc_stat_fields_count_after_the_command_name() {
        let stat = "42 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 111 222 13 14 15 16 17 18 333 444 555 \
                    26 27";
        let f = super::parse_proc_stat(stat).expect("parsed");
        assert_eq!(
            (f.utime, f.stime, f.start_ticks, f.vsize, f.rss_pages),
            (111, 222, 333, 444, 555)
        );
        assert!(super::parse_proc_stat("garbage").is_none());
        assert!(super::proc_stat(std::process::id()).is_some_and(|s| s.rss_pages > 0));
    }

    #[test]
    fn the_soft_open_files_limit_rises_to_the_hard_one() {
        let soft = super::raise_nofile_soft().expect("getrlimit and setrlimit work");
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
        let line = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .unwrap();
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields[3], soft.to_string(), "{line}");
        assert_eq!(fields[3], fields[4], "soft equals hard: {line}");
    }
}
