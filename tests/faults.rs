//! The fault suite (issue: hardening, item 7): three real `ringraft` processes, each running
//! the built-in load generator (2,000 records/s while it leads, its acknowledgements in
//! `acks-N` files), put through
//!
//! - a crash loop: SIGKILL of the leader or a follower, restart, catch-up;
//! - zombie-leader pauses: SIGSTOP of the leader for 1–10 s, then SIGCONT;
//! - network partitions of nodes in their own network namespaces (a bridge in the root
//!   namespace, a veth pair per node): symmetric (A↔B cut), one-way (A's packets to B
//!   dropped), majority-minority (A cut from B and C) and bridge (B talks to A and C, A and C
//!   cannot talk);
//! - disk full: one follower's metadata directory on a 64 MiB loop-mounted ext4, filled up;
//!   the node must stop with a clear ENOSPC error, and restarted once space is freed, catch up;
//! - corruption: byte flips and truncations at random positions of a stopped node's segment,
//!   index or snapshot files; on restart the node either refuses, naming the damaged file (it
//!   is then wiped and re-formatted with the same cluster id and catches up), or starts and
//!   catches up.
//!
//! After each round every node is stopped and its log read with `ringraft debug read-log`
//! (which recovers it: every batch's CRC32C is checked). Every acknowledged append must be on
//! at least two nodes as the same batch (offsets, record count, first sequence number, and the
//! same CRC32C, which covers every record byte, and epoch), or gone into snapshots on enough of
//! them; every node's log must reach the final high watermark, and below it all nodes must
//! hold identical batches. A node that served corrupt bytes to a follower fails these checks.
//! The crash-loop test then proves the checker can fail: it tampers with one acknowledgement,
//! and cuts an acknowledged batch that all three nodes hold from two nodes' segment files.
//!
//! ```sh
//! cargo test --test faults                                      # short form, any user
//! cargo test --test faults -- --ignored --exact \
//!     partitions_in_network_namespaces_lose_no_acknowledged_write \
//!     a_full_disk_stops_the_node_which_catches_up_once_freed     # as root (interop runs them)
//! cargo test --release --test faults -- --ignored --nocapture   # long form, as root
//! ```
//!
//! The long form reads `RINGRAFT_FAULT_KILLS` (default 200), `RINGRAFT_FAULT_PAUSES` (50),
//! `RINGRAFT_FAULT_PARTITIONS` (50) and `RINGRAFT_FAULT_CORRUPTIONS` (200), and prints the
//! counts at the end. `RINGRAFT_FAULT_SEED` replays a run (every test prints its seed);
//! `RINGRAFT_FAULT_KEEP=1` copies a failed cluster's directories aside (the path is printed),
//! `RINGRAFT_FAULT_LOG` sets the nodes' `RUST_LOG` (default `info`).
//!
//! Partitions and disk full need root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and iproute2,
//! util-linux and e2fsprogs, so `cargo test` (which must pass as any user) leaves them out:
//! they are `#[ignore]`d, and `tests/interop/run.sh`, which CI runs as root, runs them by name.
//! Either fails, saying why, when it cannot make a namespace or loop-mount. Packets are dropped
//! with `tc`: a u32 filter on the sender's veth classifies them into an htb class whose qdisc
//! is a `pfifo limit 0`, which drops everything. That is used instead of `action drop` or
//! netem because kernels without `act_gact` and `sch_netem` (this one) refuse both. Namespaces
//! are `rrf<pid>n1..3`, the bridge `rrf<pid>br`, addresses 10.213.<k>.1–3 and .254, all made
//! by the test and removed again, also when it panics.

mod common;

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::quorum::{majority_leader, probe_at, Probe, ELECTION_TIMEOUT_MS};
use common::{binary, free_port, Node, Rng, TempDir, SIGTERM};
use ringraft::records::Batch;

/// One three-node cluster at a time on a 2-core machine.
static SERIAL: Mutex<()> = Mutex::new(());

const SIGCONT: i32 = 18;
const SIGSTOP: i32 = 19;
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// The port every node listens on inside its own namespace.
const NAMESPACE_PORT: u16 = 9093;
/// Small segments (many files to damage, quick rolls that allocate space).
const SMALL_SEGMENTS: &str = concat!(
    "metadata.log.segment.min.bytes=16384\n",
    "metadata.log.segment.bytes=65536\n"
);
const PARTITION_KINDS: [&str; 4] = ["symmetric", "one-way", "majority-minority", "bridge"];

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn idx(id: i32) -> usize {
    assert!((1..=3).contains(&id), "node ids are 1..=3");
    id as usize - 1
}

/// The seed of this test: `RINGRAFT_FAULT_SEED`, or one from the clock; printed.
fn seed(test: &str) -> u64 {
    let seed = std::env::var("RINGRAFT_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("faults: {test}: seed {seed} (replay with RINGRAFT_FAULT_SEED={seed})");
    seed
}

fn env_count(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Runs `program args`; its stdout, or why it failed.
fn sh(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("`{program}` cannot run: {e}"))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    Err(format!(
        "`{program} {}` failed ({}): {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

/// The last `n` lines of a node's log that are not DEBUG or TRACE.
fn tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| !l.contains("DEBUG") && !l.contains("TRACE"))
        .collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

// ---------------------------------------------------------------------------------------------
// What happened, for the summary.

#[derive(Default)]
struct Tally {
    kills: usize,
    leader_kills: usize,
    pauses: usize,
    pauses_with_new_leader: usize,
    partitions: BTreeMap<&'static str, usize>,
    /// "<file kind> <damage> → <outcome>" → cases.
    corruptions: BTreeMap<String, usize>,
    disk_full: Vec<String>,
    rounds: usize,
    acks_verified: usize,
    acks_in_snapshots: usize,
    batches_compared: usize,
    /// From a leader's loss (kill, pause, partition) until another committed.
    max_election: Duration,
    /// From a partition's start until the side with a majority committed 500 more records.
    max_partition_progress: Duration,
    /// From a node's restart (resume, heal) until it caught up.
    max_recovery: Duration,
}

impl Tally {
    fn election(&mut self, d: Duration) {
        self.max_election = self.max_election.max(d);
    }

    fn recovery(&mut self, d: Duration) {
        self.max_recovery = self.max_recovery.max(d);
    }

    fn print(&self, what: &str, started: Instant) {
        let mut out = format!("faults: {what} done in {:.1?}\n", started.elapsed());
        let mut line = |s: String| {
            out.push_str("  ");
            out.push_str(&s);
            out.push('\n');
        };
        line(format!(
            "kills: {} (of which leader: {})",
            self.kills, self.leader_kills
        ));
        line(format!(
            "pauses: {} (a new leader during {})",
            self.pauses, self.pauses_with_new_leader
        ));
        line(format!("partitions: {:?}", self.partitions));
        for (case, n) in &self.corruptions {
            line(format!("corruption: {case}: {n}"));
        }
        for d in &self.disk_full {
            line(format!("disk full: {d}"));
        }
        line(format!(
            "verified: {} rounds, {} acknowledged batches on a majority byte for byte, {} \
             acknowledged batches gone into snapshots, {} batch pairs compared below the high \
             watermark",
            self.rounds, self.acks_verified, self.acks_in_snapshots, self.batches_compared
        ));
        line(format!(
            "max election (leader lost → another committed): {:.2?}; max progress under a \
             partition: {:.2?}; max recovery (restart, resume or heal → caught up): {:.2?}",
            self.max_election, self.max_partition_progress, self.max_recovery
        ));
        eprint!("{out}");
    }
}

// ---------------------------------------------------------------------------------------------
// Network namespaces.

/// Three namespaces on a bridge, each with a drop class ready on its veth; removed on drop.
struct Namespaces {
    prefix: String,
    subnet: u8,
    cuts: Vec<(i32, i32)>,
}

impl Namespaces {
    fn create() -> Namespaces {
        let pid = std::process::id();
        let ns = Namespaces {
            prefix: format!("rrf{pid}"),
            subnet: (20 + pid % 200) as u8,
            cuts: Vec::new(),
        };
        if let Err(why) = sh("ip", &["netns", "add", &ns.name(1)]) {
            panic!(
                "the partition test needs network namespaces and cannot make one: {why}\n\
                 It must run as root (CAP_SYS_ADMIN and CAP_NET_ADMIN) with iproute2, e.g. \
                 `sudo -E cargo test --test faults partitions`, or as root in a VM or a \
                 privileged container."
            );
        }
        if let Err(why) = ns.build() {
            panic!("cannot build the namespaces' network: {why}");
        }
        ns
    }

    fn build(&self) -> Result<(), String> {
        let bridge = self.bridge();
        let gateway = format!("{}/24", self.gateway());
        sh("ip", &["link", "add", &bridge, "type", "bridge"])?;
        sh("ip", &["addr", "add", &gateway, "dev", &bridge])?;
        sh("ip", &["link", "set", &bridge, "up"])?;
        for id in 1..=3 {
            let (ns, host, inner) = (self.name(id), self.host_veth(id), self.inner_veth(id));
            if id > 1 {
                sh("ip", &["netns", "add", &ns])?;
            }
            sh("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
            let peer = ["link", "add", &host, "type", "veth", "peer", "name", &inner];
            sh("ip", &[&peer[..], &["netns", &ns]].concat())?;
            sh("ip", &["link", "set", &host, "master", &bridge])?;
            sh("ip", &["link", "set", &host, "up"])?;
            let addr = format!("{}/24", self.addr(id));
            sh("ip", &["-n", &ns, "addr", "add", &addr, "dev", &inner])?;
            sh("ip", &["-n", &ns, "link", "set", &inner, "up"])?;
            // Class 1:1 passes everything; what a filter sends to 1:2 meets a queue of length
            // zero, which drops it.
            let root = ["qdisc", "add", "dev", &inner, "root", "handle", "1:", "htb"];
            self.tc(id, &[&root[..], &["default", "1"]].concat())?;
            for class in ["1:1", "1:2"] {
                let add = [
                    "class", "add", "dev", &inner, "parent", "1:", "classid", class,
                ];
                let rate = ["htb", "rate", "10gbit", "quantum", "200000"];
                self.tc(id, &[&add[..], &rate[..]].concat())?;
            }
            let drop = [
                "qdisc", "add", "dev", &inner, "parent", "1:2", "handle", "20:",
            ];
            self.tc(id, &[&drop[..], &["pfifo", "limit", "0"]].concat())?;
        }
        Ok(())
    }

    fn name(&self, id: i32) -> String {
        format!("{}n{id}", self.prefix)
    }

    fn bridge(&self) -> String {
        format!("{}br", self.prefix)
    }

    fn host_veth(&self, id: i32) -> String {
        format!("{}h{id}", self.prefix)
    }

    fn inner_veth(&self, id: i32) -> String {
        format!("{}v{id}", self.prefix)
    }

    fn addr(&self, id: i32) -> Ipv4Addr {
        Ipv4Addr::new(10, 213, self.subnet, id as u8)
    }

    fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 213, self.subnet, 254)
    }

    /// `tc args` in node `id`'s namespace.
    fn tc(&self, id: i32, args: &[&str]) -> Result<String, String> {
        let ns = self.name(id);
        sh("ip", &[&["netns", "exec", &ns, "tc"][..], args].concat())
    }

    /// Drops every IPv4 packet node `from` sends to node `to`, in `from`'s namespace.
    fn cut(&mut self, from: i32, to: i32) -> Result<(), String> {
        let (dev, dst) = (self.inner_veth(from), format!("{}/32", self.addr(to)));
        let filter = [
            "filter", "add", "dev", &dev, "parent", "1:", "protocol", "ip",
        ];
        let rule = [
            "prio", "1", "u32", "match", "ip", "dst", &dst, "flowid", "1:2",
        ];
        self.tc(from, &[&filter[..], &rule[..]].concat())?;
        self.cuts.push((from, to));
        Ok(())
    }

    fn heal(&mut self) -> Result<(), String> {
        let mut from: Vec<i32> = self.cuts.iter().map(|c| c.0).collect();
        from.sort_unstable();
        from.dedup();
        for id in from {
            let dev = self.inner_veth(id);
            self.tc(id, &["filter", "del", "dev", &dev, "parent", "1:"])?;
        }
        self.cuts.clear();
        Ok(())
    }

    /// Packets node `id`'s drop class has dropped so far.
    fn dropped(&self, id: i32) -> Result<u64, String> {
        let dev = self.inner_veth(id);
        let out = self.tc(id, &["-s", "qdisc", "show", "dev", &dev])?;
        let mut lines = out.lines();
        while let Some(line) = lines.next() {
            if line.contains("qdisc pfifo 20:") {
                let stats = lines.next().unwrap_or_default();
                let n = stats
                    .split("dropped ")
                    .nth(1)
                    .and_then(|s| s.split(',').next())
                    .and_then(|s| s.trim().parse().ok());
                return n.ok_or_else(|| format!("no drop count in {stats:?}"));
            }
        }
        Err(format!("no drop qdisc on {dev}:\n{out}"))
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for id in 1..=3 {
            let _ = sh("ip", &["netns", "del", &self.name(id)]);
            let _ = sh("ip", &["link", "del", &self.host_veth(id)]);
        }
        let _ = sh("ip", &["link", "del", &self.bridge()]);
    }
}

// ---------------------------------------------------------------------------------------------
// A loop-mounted filesystem.

/// A small ext4 image mounted on a directory; unmounted and removed on drop.
struct LoopMount {
    image: PathBuf,
    path: PathBuf,
    device: Option<String>,
    mounted: bool,
}

impl LoopMount {
    fn create(bytes: u64) -> Result<LoopMount, String> {
        let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "ringraft-faults-disk-{}-{}",
            std::process::id(),
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let mut m = LoopMount {
            image: base.with_extension("img"),
            path: base,
            device: None,
            mounted: false,
        };
        let image = m.image.to_str().unwrap().to_owned();
        File::create(&m.image)
            .and_then(|f| f.set_len(bytes))
            .map_err(|e| format!("cannot create {image}: {e}"))?;
        sh("mkfs.ext4", &["-q", "-F", "-m", "0", &image])?;
        let device = sh("losetup", &["--find", "--show", &image])?;
        let device = device.trim().to_owned();
        m.device = Some(device.clone());
        std::fs::create_dir_all(&m.path).map_err(|e| e.to_string())?;
        sh("mount", &[&device, m.path.to_str().unwrap()])?;
        m.mounted = true;
        Ok(m)
    }

    fn filler(&self) -> PathBuf {
        self.path.join("filler")
    }

    /// Writes a file until the filesystem is full; returns its size.
    fn fill(&self) -> u64 {
        let mut file = File::create(self.filler()).unwrap();
        let mut written = 0u64;
        for chunk in [1 << 20, 4096, 512] {
            let buf = vec![0xa5u8; chunk];
            while let Ok(n) = file.write(&buf) {
                if n == 0 {
                    break;
                }
                written += n as u64;
            }
        }
        let _ = file.sync_all();
        written
    }

    fn unfill(&self) {
        std::fs::remove_file(self.filler()).unwrap();
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        let path = self.path.to_str().unwrap().to_owned();
        if self.mounted {
            // A process that just died may hold its files a moment longer (io_uring teardown).
            let unmounted = (0..50).any(|_| {
                let ok = sh("umount", &[&path]).is_ok();
                if !ok {
                    std::thread::sleep(ms(100));
                }
                ok
            });
            if !unmounted {
                let _ = sh("umount", &["-l", &path]);
            }
        }
        if let Some(device) = &self.device {
            let _ = sh("losetup", &["-d", device]);
        }
        let _ = std::fs::remove_dir(&self.path);
        let _ = std::fs::remove_file(&self.image);
    }
}

// ---------------------------------------------------------------------------------------------
// The cluster under test.

#[derive(Default)]
struct Options {
    /// Run each node in its own network namespace.
    netns: bool,
    /// Lines added to every node's server.properties.
    config: &'static str,
    /// Arguments added to every `ringraft start`.
    start_args: Vec<&'static str>,
    /// One node whose metadata directory lives elsewhere.
    data_dir: Option<(i32, PathBuf)>,
}

enum Launch {
    Running,
    Exited { code: Option<i32>, log: String },
}

/// Three voters with the load generator on; the nodes are dropped (killed) before the
/// namespaces.
struct Fleet {
    nodes: Vec<Option<Node>>,
    paused: [bool; 3],
    addrs: Vec<SocketAddr>,
    data_dirs: Vec<PathBuf>,
    cluster_id: String,
    start_args: Vec<&'static str>,
    launches: [usize; 3],
    seed: u64,
    dir: TempDir,
    netns: Option<Namespaces>,
}

impl Fleet {
    fn new(name: &str, seed: u64, options: Options) -> Fleet {
        let dir = TempDir::new(name);
        let netns = options.netns.then(Namespaces::create);
        let addrs: Vec<SocketAddr> = match &netns {
            Some(ns) => (1..=3)
                .map(|id| SocketAddr::from((ns.addr(id), NAMESPACE_PORT)))
                .collect(),
            None => (0..3)
                .map(|_| SocketAddr::from(([127, 0, 0, 1], free_port())))
                .collect(),
        };
        let voters = (1..=3)
            .map(|id| format!("{id}@{}", addrs[idx(id)]))
            .collect::<Vec<_>>()
            .join(",");
        let out = common::run(&["storage", "random-uuid"], dir.path());
        let cluster_id = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        let mut data_dirs = Vec::new();
        for id in 1..=3 {
            let node_dir = dir.path().join(format!("n{id}"));
            std::fs::create_dir_all(&node_dir).unwrap();
            let data = match &options.data_dir {
                Some((n, d)) if *n == id => d.clone(),
                _ => node_dir.join("data"),
            };
            let config = format!(
                "process.roles=controller\nnode.id={id}\nlisteners=CONTROLLER://{}\n\
                 controller.listener.names=CONTROLLER\ncontroller.quorum.voters={voters}\n\
                 controller.quorum.election.timeout.ms={ELECTION_TIMEOUT_MS}\n\
                 controller.quorum.fetch.timeout.ms={ELECTION_TIMEOUT_MS}\n\
                 metadata.log.dir={}\n{}",
                addrs[idx(id)],
                data.display(),
                options.config
            );
            std::fs::write(node_dir.join("server.properties"), config).unwrap();
            data_dirs.push(data);
        }
        let fleet = Fleet {
            nodes: vec![None, None, None],
            paused: [false; 3],
            addrs,
            data_dirs,
            cluster_id,
            start_args: options.start_args,
            launches: [0; 3],
            seed,
            dir,
            netns,
        };
        for id in 1..=3 {
            fleet.format(id);
        }
        fleet
    }

    fn node_dir(&self, id: i32) -> PathBuf {
        self.dir.path().join(format!("n{id}"))
    }

    fn partition_dir(&self, id: i32) -> PathBuf {
        self.data_dirs[idx(id)].join("__cluster_metadata-0")
    }

    /// Formats node `id` where it runs: format binds its listener for a moment, as start
    /// does, so in a namespace it runs in that namespace, and elsewhere it waits until a
    /// killed incarnation's listener is gone.
    fn format(&self, id: i32) {
        let args = ["storage", "format", "-t", &self.cluster_id];
        let mut command = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &ns.name(id), binary()]);
                c
            }
            None => {
                common::wait_port_free(self.addrs[idx(id)].port());
                Command::new(binary())
            }
        };
        let out = command
            .args(args)
            .args(["-c", "server.properties"])
            .current_dir(self.node_dir(id))
            .output()
            .unwrap();
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr);
            self.fail(&format!("cannot format node {id}: {why}"));
        }
    }

    /// Wipes node `id`'s metadata directory and formats it again with the same cluster id.
    fn wipe(&self, id: i32) {
        std::fs::remove_dir_all(&self.data_dirs[idx(id)]).unwrap();
        self.format(id);
    }

    /// Every launch's log of node `id`, oldest first.
    fn log_files(&self, id: i32) -> Vec<PathBuf> {
        let (dir, launches) = (self.node_dir(id), self.launches[idx(id)]);
        (0..launches)
            .map(|n| dir.join(format!("launch-{n}.log")))
            .collect()
    }

    fn latest_log(&self, id: i32) -> String {
        let files = self.log_files(id);
        files
            .last()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .unwrap_or_default()
    }

    fn spawn(&mut self, id: i32) -> Node {
        let n = self.launches[idx(id)];
        self.launches[idx(id)] += 1;
        let dir = self.node_dir(id);
        let log = dir.join(format!("launch-{n}.log"));
        let acks = dir.join(format!("acks-{n}"));
        let mut command = match &self.netns {
            Some(ns) => {
                // `ip netns exec` execs: the child's pid is the node's.
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &ns.name(id), binary()]);
                c
            }
            None => Command::new(binary()),
        };
        let load = ["--load-rate", "2000", "--load-warmup-ms", "0"];
        let child = command
            .args(["start", "-c", "server.properties"])
            .args(load)
            .arg("--load-ack-file")
            .arg(&acks)
            .args(&self.start_args)
            .current_dir(&dir)
            .env(
                "RUST_LOG",
                std::env::var("RINGRAFT_FAULT_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let port = self.addrs[idx(id)].port();
        Node { child, port, log }
    }

    /// Starts node `id` and waits until it listens, or exits (a refusal).
    fn launch(&mut self, id: i32) -> Launch {
        assert!(self.nodes[idx(id)].is_none(), "node {id} is running");
        let addr = self.addrs[idx(id)];
        let deadline = Instant::now() + Duration::from_secs(30);
        'spawn: loop {
            if self.netns.is_none() {
                common::wait_port_free(addr.port());
            }
            let mut node = self.spawn(id);
            loop {
                if let Some(status) = node.child.try_wait().unwrap() {
                    let log = node.log_text();
                    // A killed node's listener can outlive it for a moment.
                    if log.contains("Address already in use") && Instant::now() < deadline {
                        std::thread::sleep(ms(100));
                        continue 'spawn;
                    }
                    let code = status.code();
                    return Launch::Exited { code, log };
                }
                if node.log_text().contains("listening addr=")
                    && TcpStream::connect_timeout(&addr, PROBE_TIMEOUT).is_ok()
                {
                    self.nodes[idx(id)] = Some(node);
                    return Launch::Running;
                }
                if Instant::now() > deadline {
                    drop(node);
                    self.fail(&format!(
                        "node {id} neither listened nor exited within 30 s"
                    ));
                }
                std::thread::sleep(ms(20));
            }
        }
    }

    fn start(&mut self, id: i32) {
        if let Launch::Exited { code, log } = self.launch(id) {
            let log = tail(&log, 30);
            self.fail(&format!("node {id} did not start (exit {code:?}):\n{log}"));
        }
    }

    fn start_all(&mut self) {
        for id in 1..=3 {
            self.start(id);
        }
    }

    /// SIGKILL.
    fn kill(&mut self, id: i32) {
        self.paused[idx(id)] = false;
        self.nodes[idx(id)].take().expect("running").kill_now();
    }

    fn signal(&mut self, id: i32, signal: i32) {
        self.nodes[idx(id)]
            .as_ref()
            .expect("running")
            .signal(signal);
        self.paused[idx(id)] = signal == SIGSTOP;
    }

    /// Waits up to `within` for node `id` to exit; its exit code (None: a signal), or None
    /// if it still runs.
    fn wait_exit(&mut self, id: i32, within: Duration) -> Option<Option<i32>> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            let node = self.nodes[idx(id)].as_mut().expect("running");
            if let Some(status) = node.child.try_wait().unwrap() {
                self.nodes[idx(id)] = None;
                return Some(status.code());
            }
            std::thread::sleep(ms(20));
        }
        None
    }

    /// SIGTERM; the node must exit 0.
    fn stop(&mut self, id: i32) {
        self.check_alive();
        if self.paused[idx(id)] {
            self.signal(id, SIGCONT);
        }
        self.signal(id, SIGTERM);
        match self.wait_exit(id, Duration::from_secs(20)) {
            Some(Some(0)) => {}
            Some(code) => self.fail(&format!("node {id} stopped with exit {code:?}")),
            None => self.fail(&format!("node {id} did not stop within 20 s of SIGTERM")),
        }
    }

    /// Every node that should run still runs.
    fn check_alive(&mut self) {
        let mut exited = None;
        for id in 1..=3 {
            if let Some(node) = self.nodes[idx(id)].as_mut() {
                if let Some(status) = node.child.try_wait().unwrap() {
                    exited = Some((id, status));
                }
            }
        }
        if let Some((id, status)) = exited {
            self.nodes[idx(id)] = None;
            self.fail(&format!("node {id} exited on its own ({status})"));
        }
    }

    fn probe(&self, id: i32) -> Option<Probe> {
        if self.nodes[idx(id)].is_none() || self.paused[idx(id)] {
            return None;
        }
        probe_at(self.addrs[idx(id)], PROBE_TIMEOUT)
    }

    /// The leader as a majority of the nodes that answer report it, with a known high
    /// watermark.
    fn leader(&self) -> Option<(i32, Probe)> {
        majority_leader(|id| self.probe(id))
    }

    fn wait_for<T>(&self, within: Duration, mut f: impl FnMut(&Fleet) -> Option<T>) -> Option<T> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(v) = f(self) {
                return Some(v);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(ms(20));
        }
    }

    fn wait_leader(&self, within: Duration) -> (i32, Probe) {
        self.wait_for(within, Fleet::leader)
            .unwrap_or_else(|| self.fail(&format!("no leader within {within:?}")))
    }

    /// Waits until node `id` knows a high watermark at least the leader's when the wait
    /// began; how long that took, or why not (the node exited, or time ran out).
    fn catch_up(&mut self, id: i32, within: Duration) -> Result<Duration, String> {
        let started = Instant::now();
        let (_, p) = self.wait_leader(within);
        let target = p.high_watermark;
        loop {
            if let Some(node) = self.nodes[idx(id)].as_mut() {
                if let Some(status) = node.child.try_wait().unwrap() {
                    self.nodes[idx(id)] = None;
                    return Err(format!("node {id} exited ({status}) while catching up"));
                }
            }
            if self.probe(id).is_some_and(|q| q.high_watermark >= target) {
                return Ok(started.elapsed());
            }
            if started.elapsed() > within {
                let now = self.probe(id);
                return Err(format!(
                    "node {id} did not catch up to {target} within {within:?}: {now:?}"
                ));
            }
            std::thread::sleep(ms(20));
        }
    }

    fn must_catch_up(&mut self, id: i32, within: Duration) -> Duration {
        self.catch_up(id, within)
            .unwrap_or_else(|why| self.fail(&why))
    }

    /// Waits until every running node follows one leader and knows a high watermark at least
    /// the one that leader had when the wait began; returns that high watermark.
    fn converge(&self, within: Duration) -> i64 {
        let deadline = Instant::now() + within;
        let (_, first) = self.wait_leader(within);
        let target = first.high_watermark;
        loop {
            if let Some((leader, p)) = self.leader() {
                let all = (1..=3)
                    .filter(|id| self.nodes[idx(*id)].is_some())
                    .all(|id| {
                        self.probe(id).is_some_and(|q| {
                            q.leader == leader && q.epoch == p.epoch && q.high_watermark >= target
                        })
                    });
                if all {
                    return target;
                }
            }
            if Instant::now() > deadline {
                let probes: Vec<_> = (1..=3).map(|id| self.probe(id)).collect();
                self.fail(&format!(
                    "the nodes did not converge on one leader at ≥ {target} within \
                     {within:?}: {probes:?}"
                ));
            }
            std::thread::sleep(ms(20));
        }
    }

    /// Elections, probes and log tails: what a failure needs to be understood.
    fn diagnosis(&self) -> String {
        let mut out = String::from("elections and warnings:\n");
        let mut lines = Vec::new();
        for id in 1..=3 {
            for (n, file) in self.log_files(id).iter().enumerate() {
                let text = std::fs::read_to_string(file).unwrap_or_default();
                for line in text.lines() {
                    let wanted = ["leader changed", "shutting down", "ERROR", " WARN "];
                    if wanted.iter().any(|w| line.contains(w)) {
                        lines.push(format!("n{id}#{n}: {line}"));
                    }
                }
            }
        }
        out.push_str(&lines[lines.len().saturating_sub(150)..].join("\n"));
        for id in 1..=3 {
            let probe = self.probe(id);
            let log = tail(&self.latest_log(id), 30);
            out.push_str(&format!(
                "\n--- node {id} (probe {probe:?}), its log's tail:\n{log}"
            ));
        }
        out
    }

    fn fail(&self, what: &str) -> ! {
        eprintln!("{}", self.diagnosis());
        if std::env::var_os("RINGRAFT_FAULT_KEEP").is_some() {
            let kept = format!("{}-kept", self.dir.path().display());
            let copied = sh("cp", &["-a", self.dir.path().to_str().unwrap(), &kept]);
            eprintln!("faults: the cluster's directories are kept in {kept}: {copied:?}");
        }
        panic!(
            "{what}\n(seed {}: replay with RINGRAFT_FAULT_SEED={})",
            self.seed, self.seed
        );
    }

    /// `ringraft debug read-log` of a stopped node.
    fn read_log(&self, id: i32) -> Result<NodeLog, String> {
        let dir = self.partition_dir(id);
        let out = common::run(
            &["debug", "read-log", "--dir", dir.to_str().unwrap()],
            self.dir.path(),
        );
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr);
            return Err(format!("node {id}: read-log refused its log: {why}"));
        }
        NodeLog::parse(&String::from_utf8_lossy(&out.stdout))
            .map_err(|why| format!("node {id}: {why}"))
    }

    /// Every acknowledged append of every node's load generator, by last offset.
    fn acks(&self) -> Result<BTreeMap<i64, Ack>, String> {
        let mut acks = BTreeMap::new();
        for id in 1..=3 {
            let dir = self.node_dir(id);
            for n in 0..self.launches[idx(id)] {
                let Ok(text) = std::fs::read_to_string(dir.join(format!("acks-{n}"))) else {
                    continue; // a launch that never led, or was refused
                };
                // A line the kill cut short is not an acknowledgement.
                let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
                for line in complete.lines() {
                    let f: Vec<u64> = line.split(' ').filter_map(|x| x.parse().ok()).collect();
                    let [last, first, count, _commit_us] = f[..] else {
                        return Err(format!("node {id}: a malformed ack line {line:?}"));
                    };
                    let ack = Ack { first, count };
                    if let Some(other) = acks.insert(last as i64, ack).filter(|o| *o != ack) {
                        return Err(format!(
                            "two different appends acknowledged at offset {last}: {other:?} \
                             and {ack:?} (node {id})"
                        ));
                    }
                }
            }
        }
        Ok(acks)
    }

    /// Every node caught up, stopped with SIGTERM, and its log checked.
    fn finish(&mut self, tally: &mut Tally) -> Evidence {
        self.check_alive();
        for id in 1..=3 {
            if self.paused[idx(id)] {
                self.signal(id, SIGCONT);
            }
            if self.nodes[idx(id)].is_none() {
                self.start(id);
            }
        }
        let hwm = self.converge(Duration::from_secs(60));
        // Followers first: with the leader stopped last no new leader appends past it.
        let (leader, _) = self.wait_leader(Duration::from_secs(30));
        for id in (1..=3).filter(|id| *id != leader).chain([leader]) {
            self.stop(id);
        }
        let logs: Vec<NodeLog> = (1..=3)
            .map(|id| self.read_log(id).unwrap_or_else(|why| self.fail(&why)))
            .collect();
        let acks = self.acks().unwrap_or_else(|why| self.fail(&why));
        match check(&logs, &acks, hwm) {
            Ok(v) => {
                eprintln!(
                    "faults: verified {} acknowledged batches on a majority ({} more in \
                     snapshots), {} batch pairs equal below the high watermark {hwm}",
                    v.verified, v.in_snapshots, v.compared
                );
                tally.rounds += 1;
                tally.acks_verified += v.verified;
                tally.acks_in_snapshots += v.in_snapshots;
                tally.batches_compared += v.compared;
            }
            Err(problems) => self.fail(&format!(
                "the logs break the suite's invariants:\n{}",
                problems.join("\n")
            )),
        }
        Evidence { logs, acks, hwm }
    }
}

// ---------------------------------------------------------------------------------------------
// The checker.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ack {
    first: u64,
    count: u64,
}

/// One `read-log` batch line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LogBatch {
    base: i64,
    last: i64,
    epoch: i32,
    data: bool,
    count: u64,
    crc: u32,
    first: i64,
    max_timestamp: i64,
}

impl fmt::Display for LogBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.data { "data" } else { "control" };
        write!(
            f,
            "[{}..={} epoch {} {kind} {} records crc {:#010x} first {} max ts {}]",
            self.base, self.last, self.epoch, self.count, self.crc, self.first, self.max_timestamp
        )
    }
}

/// A node's log as `read-log` printed it.
#[derive(Debug, Clone)]
struct NodeLog {
    start: i64,
    end: i64,
    batches: BTreeMap<i64, LogBatch>,
}

impl NodeLog {
    fn parse(text: &str) -> Result<NodeLog, String> {
        let mut log = NodeLog {
            start: -1,
            end: -1,
            batches: BTreeMap::new(),
        };
        for line in text.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            match f[..] {
                ["log", "start", start, "end", end, ..] => {
                    log.start = start.parse().map_err(|_| format!("bad line {line:?}"))?;
                    log.end = end.parse().map_err(|_| format!("bad line {line:?}"))?;
                }
                ["batch", base, last, epoch, kind, count, crc, first, max_ts] => {
                    let bad = |_| format!("bad line {line:?}");
                    let b = LogBatch {
                        base: base.parse().map_err(bad)?,
                        last: last.parse().map_err(bad)?,
                        epoch: epoch.parse().map_err(bad)?,
                        data: kind == "data",
                        count: count.parse().map_err(bad)?,
                        crc: crc.parse().map_err(bad)?,
                        first: first.parse().map_err(bad)?,
                        max_timestamp: max_ts.parse().map_err(bad)?,
                    };
                    log.batches.insert(b.base, b);
                }
                _ => {}
            }
        }
        if log.start < 0 {
            return Err("read-log printed no `log start` line".into());
        }
        Ok(log)
    }
}

struct Verdict {
    verified: usize,
    in_snapshots: usize,
    compared: usize,
}

/// What `finish` checked, kept for the checker's own test.
struct Evidence {
    logs: Vec<NodeLog>,
    acks: BTreeMap<i64, Ack>,
    hwm: i64,
}

/// Every acknowledged append is the same batch on a majority (same offsets, record count,
/// first sequence, CRC32C over every record byte, epoch); below `hwm` (a high watermark every
/// node reached) a node whose log covers its offsets holds exactly it, and only a log that
/// starts past it (a snapshot) may lack it. Every log reaches `hwm`, and below it all logs
/// hold identical batches.
fn check(logs: &[NodeLog], acks: &BTreeMap<i64, Ack>, hwm: i64) -> Result<Verdict, Vec<String>> {
    const SHOWN: usize = 20;
    let mut problems = Vec::new();
    if acks.len() < 50 {
        problems.push(format!(
            "only {} acknowledged appends: the load did not run",
            acks.len()
        ));
    }
    let by_last: Vec<BTreeMap<i64, &LogBatch>> = logs
        .iter()
        .map(|l| l.batches.values().map(|b| (b.last, b)).collect())
        .collect();
    let (mut verified, mut in_snapshots) = (0, 0);
    for (&last, ack) in acks {
        let base = last + 1 - ack.count as i64;
        let what = format!(
            "acknowledged batch {base}..={last} (sequence {}, {} records)",
            ack.first, ack.count
        );
        let mut holders: Vec<(usize, &LogBatch)> = Vec::new();
        let mut compacted = 0;
        for (i, log) in logs.iter().enumerate() {
            match by_last[i].get(&last) {
                Some(b)
                    if b.base == base
                        && b.data
                        && b.count == ack.count
                        && b.first == ack.first as i64 =>
                {
                    holders.push((i, b))
                }
                // Past the high watermark every node reached, a node stopped before it heard of
                // a new leader may still hold its own uncommitted suffix there.
                _ if last >= hwm => {}
                Some(b) => problems.push(format!("node {}: {what} is {b} there", i + 1)),
                None if log.start > last => compacted += 1,
                None if log.end > base => problems.push(format!(
                    "node {}: {what} is missing from its log {}..{}",
                    i + 1,
                    log.start,
                    log.end
                )),
                None => {}
            }
        }
        if let Some(&(i, b)) = holders.first() {
            for &(j, other) in &holders[1..] {
                if (other.crc, other.epoch) != (b.crc, b.epoch) {
                    problems.push(format!(
                        "{what}: node {} has {b}, node {} {other}",
                        i + 1,
                        j + 1
                    ));
                }
            }
        }
        match holders.len() {
            n if n >= 2 => verified += 1,
            n if n + compacted >= 2 => in_snapshots += 1,
            n => problems.push(format!("{what} is on {n} node(s), not a majority")),
        }
        if problems.len() > SHOWN {
            break;
        }
    }
    for (i, log) in logs.iter().enumerate() {
        if log.end < hwm {
            problems.push(format!(
                "node {}'s log ends at {} below the high watermark {hwm}",
                i + 1,
                log.end
            ));
        }
    }
    let mut compared = 0;
    for (i, a) in logs.iter().enumerate() {
        for (j, b) in logs.iter().enumerate().filter(|(j, _)| *j != i) {
            let from = a.start.max(b.start);
            for (base, x) in a.batches.range(from..hwm) {
                match b.batches.get(base) {
                    Some(y) if y == x => compared += usize::from(i < j),
                    Some(y) => problems.push(format!(
                        "below the high watermark {hwm}: node {} has {x}, node {} {y}",
                        i + 1,
                        j + 1
                    )),
                    None => problems.push(format!(
                        "below the high watermark {hwm}: node {} has {x}, node {} no batch \
                         starting at {base}",
                        i + 1,
                        j + 1
                    )),
                }
                if problems.len() > SHOWN {
                    break;
                }
            }
        }
    }
    if problems.is_empty() {
        return Ok(Verdict {
            verified,
            in_snapshots,
            compared,
        });
    }
    problems.truncate(SHOWN);
    Err(problems)
}

/// Cuts node `dir`'s segment holding the batch at `base` just before that batch.
fn cut_segment_before(dir: &Path, base: i64) {
    let mut segments: Vec<(i64, PathBuf)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let start = name.strip_suffix(".log")?.parse().ok()?;
            Some((start, e.path()))
        })
        .filter(|(start, _)| *start <= base)
        .collect();
    segments.sort();
    let (_, path) = segments.pop().expect("a segment holding the batch");
    let bytes = std::fs::read(&path).unwrap();
    let mut position = 0;
    while position < bytes.len() {
        let (batch, _) = Batch::parse(&bytes[position..]).expect("an intact segment");
        if batch.base_offset() == base {
            let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            file.set_len(position as u64).unwrap();
            file.sync_all().unwrap();
            return;
        }
        position += batch.len();
    }
    panic!("no batch at {base} in {}", path.display());
}

/// The checker must fail when an acknowledgement is tampered with, and when an acknowledged
/// batch is cut from two of the three nodes' logs on disk.
fn prove_the_checker_can_fail(f: &Fleet, evidence: &Evidence) {
    let Evidence { logs, acks, hwm } = evidence;
    let mut tampered = acks.clone();
    let (&tampered_at, ack) = tampered.iter_mut().nth(acks.len() / 2).unwrap();
    ack.first += 1;
    let problems = check(logs, &tampered, *hwm).err().unwrap_or_default();
    assert!(
        problems
            .iter()
            .any(|p| p.contains(&format!("..={tampered_at} "))),
        "the checker missed a tampered acknowledgement at {tampered_at}: {problems:?}"
    );
    // The newest acknowledged batch on all three nodes, cut from two: one copy is left.
    let (last, base) = acks
        .iter()
        .rev()
        .map(|(&last, ack)| (last, last + 1 - ack.count as i64))
        .find(|(_, base)| logs.iter().all(|l| l.batches.contains_key(base)))
        .expect("an acknowledged batch on every node");
    let cut = [1, 2];
    for id in cut {
        cut_segment_before(&f.partition_dir(id), base);
    }
    let logs: Vec<NodeLog> = (1..=3).map(|id| f.read_log(id).unwrap()).collect();
    let problems = check(&logs, acks, *hwm).err().unwrap_or_default();
    let lost = format!("{base}..={last} ");
    assert!(
        problems
            .iter()
            .any(|p| p.contains(&lost) && p.contains("on 1 node(s), not a majority")),
        "the checker missed acknowledged batch {base}..={last} cut from nodes {cut:?}: \
         {problems:?}"
    );
    eprintln!(
        "faults: the checker failed as it must: a tampered ack at {tampered_at} and batch \
         {base}..={last} cut from nodes {cut:?} were reported"
    );
}

// ---------------------------------------------------------------------------------------------
// The faults.

/// One of the two nodes other than `id`.
fn other(id: i32, rng: &mut Rng) -> i32 {
    let others: Vec<i32> = (1..=3).filter(|o| *o != id).collect();
    others[rng.below(2) as usize]
}

/// SIGKILL of the leader (half the time) or a follower, restart after up to a second,
/// catch-up; `kills` times on one cluster, then the check.
fn crash_round(rng: &mut Rng, tally: &mut Tally, seed: u64, kills: usize) -> (Fleet, Evidence) {
    let mut f = Fleet::new("faults-crash", seed, Options::default());
    f.start_all();
    f.wait_leader(Duration::from_secs(30));
    for _ in 0..kills {
        std::thread::sleep(ms(300 + rng.below(1200)));
        let (leader, before) = f.wait_leader(Duration::from_secs(30));
        let victim = if rng.below(2) == 0 {
            leader
        } else {
            other(leader, rng)
        };
        f.kill(victim);
        let killed = Instant::now();
        let next = f.wait_for(Duration::from_secs(20), |f| {
            f.leader()
                .filter(|(id, p)| *id != victim && p.high_watermark > before.high_watermark)
        });
        if next.is_none() {
            f.fail(&format!(
                "no leader committed within 20 s of killing node {victim} (leader {leader})"
            ));
        }
        tally.kills += 1;
        if victim == leader {
            tally.leader_kills += 1;
            tally.election(killed.elapsed());
        }
        std::thread::sleep(ms(rng.below(1000)));
        f.start(victim);
        let took = f.must_catch_up(victim, Duration::from_secs(30));
        tally.recovery(took);
        f.check_alive();
    }
    let evidence = f.finish(tally);
    (f, evidence)
}

/// SIGSTOP of the leader for each of `pauses`, then SIGCONT; a pause of 5 s or more must see
/// another leader commit, and afterwards all nodes follow one leader again.
fn pause_round(rng: &mut Rng, tally: &mut Tally, seed: u64, pauses: &[Duration]) {
    let mut f = Fleet::new("faults-pause", seed, Options::default());
    f.start_all();
    f.wait_leader(Duration::from_secs(30));
    for &pause in pauses {
        std::thread::sleep(ms(300 + rng.below(1000)));
        let (leader, before) = f.wait_leader(Duration::from_secs(30));
        f.signal(leader, SIGSTOP);
        let stopped = Instant::now();
        let mut successor = None;
        while stopped.elapsed() < pause {
            let next = || {
                f.leader().filter(|(id, p)| {
                    *id != leader
                        && p.epoch > before.epoch
                        && p.high_watermark > before.high_watermark
                })
            };
            if successor.is_none() && next().is_some() {
                successor = Some(stopped.elapsed());
            }
            std::thread::sleep(ms(20));
        }
        f.signal(leader, SIGCONT);
        let resumed = Instant::now();
        tally.pauses += 1;
        match successor {
            Some(took) => {
                tally.pauses_with_new_leader += 1;
                tally.election(took);
            }
            None if pause >= Duration::from_secs(5) => f.fail(&format!(
                "no other leader committed while leader {leader} was stopped for {pause:?}"
            )),
            None => {}
        }
        f.converge(Duration::from_secs(30));
        tally.recovery(resumed.elapsed());
        f.check_alive();
    }
    f.finish(tally);
}

/// The packet flows node `from` → node `to` that a partition of `kind` cuts, for nodes
/// `a`, `b`, `c` (A, B, C of the issue).
fn partition_cuts(kind: usize, [a, b, c]: [i32; 3]) -> Vec<(i32, i32)> {
    match kind {
        0 => vec![(a, b), (b, a)],
        1 => vec![(a, b)],
        2 => vec![(a, b), (b, a), (a, c), (c, a)],
        _ => vec![(a, c), (c, a)],
    }
}

/// Each partition of `kinds` in turn, held for `hold_ms` (min, random extra): the side with
/// a majority must keep committing; once healed, all nodes converge.
fn partition_round(
    rng: &mut Rng,
    tally: &mut Tally,
    seed: u64,
    kinds: &[usize],
    hold_ms: (u64, u64),
) {
    let options = Options {
        netns: true,
        ..Options::default()
    };
    let mut f = Fleet::new("faults-partition", seed, options);
    f.start_all();
    f.wait_leader(Duration::from_secs(30));
    for &kind in kinds {
        std::thread::sleep(ms(300 + rng.below(1000)));
        let (leader, before) = f.wait_leader(Duration::from_secs(30));
        // The leader plays A or B: in every kind but a bridge led by B, the cut touches it.
        let follower = other(leader, rng);
        let (a, b) = if rng.below(2) == 0 {
            (leader, follower)
        } else {
            (follower, leader)
        };
        let c = 6 - a - b;
        let cuts = partition_cuts(kind, [a, b, c]);
        let name = PARTITION_KINDS[kind];
        let ns = f.netns.as_mut().expect("namespaces");
        let dropped_before: u64 = cuts.iter().map(|c| ns.dropped(c.0).unwrap()).sum();
        for &(from, to) in &cuts {
            ns.cut(from, to).unwrap();
        }
        let cut_at = Instant::now();
        let hold = ms(hold_ms.0 + rng.below(hold_ms.1));
        let mut progress = None;
        let give_up = hold + Duration::from_secs(20);
        while cut_at.elapsed() < hold || (progress.is_none() && cut_at.elapsed() < give_up) {
            let moved = |f: &Fleet| {
                f.leader()
                    .filter(|(_, p)| p.high_watermark > before.high_watermark + 500)
            };
            if progress.is_none() && moved(&f).is_some() {
                progress = Some(cut_at.elapsed());
            }
            std::thread::sleep(ms(20));
        }
        let ns = f.netns.as_mut().expect("namespaces");
        let dropped: u64 = cuts.iter().map(|c| ns.dropped(c.0).unwrap()).sum();
        ns.heal().unwrap();
        let healed = Instant::now();
        let what =
            format!("{name} partition (A={a} B={b} C={c}, leader was {leader}, held {hold:?})");
        eprintln!("faults: {what}: progress after {progress:?}");
        // A follower's fetches to its leader cross every cut that touches the leader.
        let touches_leader = cuts.iter().any(|&(x, y)| x == leader || y == leader);
        if touches_leader && dropped == dropped_before {
            f.fail(&format!("{what}: the cuts {cuts:?} dropped no packet"));
        }
        let Some(progress) = progress else {
            f.fail(&format!(
                "{what}: the majority committed nothing in {give_up:?}"
            ));
        };
        *tally.partitions.entry(name).or_default() += 1;
        tally.max_partition_progress = tally.max_partition_progress.max(progress);
        f.converge(Duration::from_secs(30));
        tally.recovery(healed.elapsed());
        f.check_alive();
    }
    f.finish(tally);
}

/// Node 3's metadata directory on a 64 MiB ext4; filled up, the node must stop with a clear
/// ENOSPC error while the others go on; space freed, it restarts and catches up.
fn disk_full_round(tally: &mut Tally, seed: u64) {
    let mount = match LoopMount::create(64 << 20) {
        Ok(m) => m,
        Err(why) => {
            panic!(
                "faults: the disk-full case cannot loop-mount a filesystem: {why}. It needs \
                 root, /dev/loop-control, losetup (util-linux), mkfs.ext4 (e2fsprogs) and \
                 mount: run it as root, as tests/interop/run.sh does."
            );
        }
    };
    let options = Options {
        config: SMALL_SEGMENTS,
        data_dir: Some((3, mount.path.join("data"))),
        ..Options::default()
    };
    let mut f = Fleet::new("faults-disk-full", seed, options);
    f.start(1);
    f.start(2);
    f.wait_leader(Duration::from_secs(30));
    f.start(3);
    f.must_catch_up(3, Duration::from_secs(30));
    let filled = mount.fill();
    let full_at = Instant::now();
    let Some(code) = f.wait_exit(3, Duration::from_secs(60)) else {
        f.fail(&format!(
            "node 3 still runs 60 s after its disk filled ({filled} bytes)"
        ));
    };
    let stopped_after = full_at.elapsed();
    let log = f.latest_log(3);
    let enospc = log
        .lines()
        .find(|l| l.contains("No space left on device") || l.contains("os error 28"));
    let Some(enospc) = enospc.filter(|_| code.is_some_and(|c| c != 0)) else {
        f.fail(&format!(
            "node 3 did not stop with a clear ENOSPC error (exit {code:?})"
        ));
    };
    let enospc = enospc.trim().to_owned();
    // The other two go on.
    let (_, p) = f.wait_leader(Duration::from_secs(30));
    let on = f.wait_for(Duration::from_secs(20), |f| {
        f.leader()
            .filter(|(_, q)| q.high_watermark > p.high_watermark + 500)
    });
    if on.is_none() {
        f.fail("nodes 1 and 2 stopped committing after node 3's disk filled");
    }
    mount.unfill();
    f.start(3);
    let took = f.must_catch_up(3, Duration::from_secs(60));
    tally.recovery(took);
    tally.disk_full.push(format!(
        "node 3 stopped {stopped_after:.1?} after its disk filled (exit {code:?}: {enospc}); \
         with space freed it caught up in {took:.1?}"
    ));
    f.finish(tally);
}

#[derive(Debug, Clone, Copy)]
enum FileKind {
    Segment,
    Index,
    Snapshot,
}

impl FileKind {
    const ALL: [FileKind; 3] = [FileKind::Segment, FileKind::Index, FileKind::Snapshot];

    fn name(self) -> &'static str {
        match self {
            FileKind::Segment => "segment",
            FileKind::Index => "index",
            FileKind::Snapshot => "snapshot",
        }
    }

    fn matches(self, name: &str) -> bool {
        match self {
            FileKind::Segment => name.ends_with(".log"),
            FileKind::Index => name.ends_with(".index") || name.ends_with(".timeindex"),
            FileKind::Snapshot => name.ends_with(".checkpoint"),
        }
    }
}

/// Flips a byte (anywhere, or in the last 512 bytes, where a torn tail would be) or cuts
/// the file at a random length, in a non-empty file of `kind` in `dir`; the file and what was
/// done, or None if there is no such file.
fn damage(dir: &Path, kind: FileKind, rng: &mut Rng) -> Option<(PathBuf, &'static str, String)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| kind.matches(&e.file_name().to_string_lossy()))
        .filter(|e| e.metadata().is_ok_and(|m| m.len() > 0))
        .map(|e| e.path())
        .collect();
    files.sort();
    if files.is_empty() {
        return None;
    }
    let path = files[rng.below(files.len() as u64) as usize].clone();
    let mut bytes = std::fs::read(&path).unwrap();
    let len = bytes.len() as u64;
    let permissions = std::fs::metadata(&path).unwrap().permissions();
    let mut writable = permissions.clone();
    #[allow(clippy::permissions_set_readonly_false)]
    writable.set_readonly(false);
    std::fs::set_permissions(&path, writable).unwrap();
    let (how, done) = if rng.below(2) == 0 {
        let position = if rng.below(2) == 0 {
            rng.below(len)
        } else {
            len - 1 - rng.below(len.min(512))
        };
        let mask = 1 + rng.below(255) as u8;
        bytes[position as usize] ^= mask;
        std::fs::write(&path, &bytes).unwrap();
        ("flip", format!("byte {position} of {len} xor {mask:#04x}"))
    } else {
        let keep = rng.below(len);
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(keep).unwrap();
        ("truncation", format!("cut to {keep} of {len} bytes"))
    };
    std::fs::set_permissions(&path, permissions).unwrap();
    Some((path, how, done))
}

/// `cases` times: stop a node, damage one of its files, restart it. It either refuses,
/// naming the file (then it is wiped, re-formatted and must catch up), or starts and catches
/// up.
fn corruption_round(rng: &mut Rng, tally: &mut Tally, seed: u64, cases: usize) {
    let options = Options {
        config: SMALL_SEGMENTS,
        start_args: vec!["--load-snapshot-every", "16000"],
        ..Options::default()
    };
    let mut f = Fleet::new("faults-corruption", seed, options);
    f.start_all();
    f.wait_leader(Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(2));
    for case in 0..cases {
        std::thread::sleep(ms(300 + rng.below(1000)));
        let victim = 1 + rng.below(3) as i32;
        f.stop(victim);
        let kind = FileKind::ALL[case % 3];
        let dir = f.partition_dir(victim);
        let (kind, (path, how, done)) = match damage(&dir, kind, rng) {
            Some(d) => (kind, d),
            None => (
                FileKind::Segment,
                damage(&dir, FileKind::Segment, rng).expect("a segment"),
            ),
        };
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        let what = format!("node {victim}: {} {file}: {done}", kind.name());
        let restarted = Instant::now();
        let refusal = match f.launch(victim) {
            Launch::Exited { code, log } => Some((code, log)),
            Launch::Running => match f.catch_up(victim, Duration::from_secs(60)) {
                Ok(_) => None,
                Err(why) if f.nodes[idx(victim)].is_some() => f.fail(&format!("{what}: {why}")),
                Err(why) => Some((None, format!("{why}\n{}", f.latest_log(victim)))),
            },
        };
        let outcome = match refusal {
            None => {
                eprintln!("faults: {what}: started and caught up");
                "started and caught up"
            }
            Some((code, log)) => {
                let says = log.lines().find(|l| l.contains(&file));
                let Some(says) = says.filter(|_| code != Some(0)) else {
                    let log = tail(&log, 30);
                    f.fail(&format!(
                        "{what}: the node stopped (exit {code:?}) without naming the file:\n{log}"
                    ));
                };
                eprintln!("faults: {what}: refused: {}", says.trim());
                f.wipe(victim);
                f.start(victim);
                f.must_catch_up(victim, Duration::from_secs(60));
                "refused, naming the file; re-formatted and caught up"
            }
        };
        tally.recovery(restarted.elapsed());
        let key = format!("{} {how} → {outcome}", kind.name());
        *tally.corruptions.entry(key).or_default() += 1;
        f.check_alive();
    }
    f.finish(tally);
}

// ---------------------------------------------------------------------------------------------
// Short form.

#[test]
fn crash_loop_loses_no_acknowledged_write() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (started, seed) = (Instant::now(), seed("crash loop"));
    let (mut rng, mut tally) = (Rng(seed), Tally::default());
    let (f, evidence) = crash_round(&mut rng, &mut tally, seed, 5);
    prove_the_checker_can_fail(&f, &evidence);
    tally.print("crash loop", started);
}

#[test]
fn zombie_leader_pauses_lose_no_acknowledged_write() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (started, seed) = (Instant::now(), seed("pauses"));
    let (mut rng, mut tally) = (Rng(seed), Tally::default());
    // One short (1–3 s), one around the election timeout's reach (3–6 s), one long (6–10 s).
    let pauses: Vec<Duration> = [(1000, 2000), (3000, 3000), (6000, 4000)]
        .iter()
        .map(|&(min, extra)| ms(min + rng.below(extra)))
        .collect();
    pause_round(&mut rng, &mut tally, seed, &pauses);
    tally.print("pauses", started);
}

#[test]
#[ignore = "needs root: tests/interop/run.sh runs it (see the module doc)"]
fn partitions_in_network_namespaces_lose_no_acknowledged_write() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (started, seed) = (Instant::now(), seed("partitions"));
    let (mut rng, mut tally) = (Rng(seed), Tally::default());
    partition_round(&mut rng, &mut tally, seed, &[0, 1, 2, 3], (2000, 2000));
    tally.print("partitions", started);
}

#[test]
#[ignore = "needs root: tests/interop/run.sh runs it (see the module doc)"]
fn a_full_disk_stops_the_node_which_catches_up_once_freed() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (started, seed) = (Instant::now(), seed("disk full"));
    let mut tally = Tally::default();
    disk_full_round(&mut tally, seed);
    tally.print("disk full", started);
}

#[test]
fn corrupt_segments_indexes_and_snapshots_are_refused_or_repaired() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (started, seed) = (Instant::now(), seed("corruption"));
    let (mut rng, mut tally) = (Rng(seed), Tally::default());
    corruption_round(&mut rng, &mut tally, seed, 10);
    tally.print("corruption", started);
}

// ---------------------------------------------------------------------------------------------
// Long form.

/// Splits `total` into rounds of at most `per_round`.
fn rounds(total: usize, per_round: usize) -> impl Iterator<Item = usize> {
    (0..total.div_ceil(per_round)).map(move |r| per_round.min(total - r * per_round))
}

#[test]
#[ignore = "long form: cargo test --release --test faults -- --ignored --nocapture"]
fn fault_suite_long() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (started, seed) = (Instant::now(), seed("long form"));
    let (mut rng, mut tally) = (Rng(seed), Tally::default());
    let kills = env_count("RINGRAFT_FAULT_KILLS", 200);
    let pauses = env_count("RINGRAFT_FAULT_PAUSES", 50);
    let partitions = env_count("RINGRAFT_FAULT_PARTITIONS", 50);
    let corruptions = env_count("RINGRAFT_FAULT_CORRUPTIONS", 200);
    for n in rounds(kills, 25) {
        crash_round(&mut rng, &mut tally, seed, n);
        tally.print("long form so far", started);
    }
    for n in rounds(pauses, 10) {
        let lengths: Vec<Duration> = (0..n).map(|_| ms(1000 + rng.below(9000))).collect();
        pause_round(&mut rng, &mut tally, seed, &lengths);
        tally.print("long form so far", started);
    }
    let mut next_kind = 0;
    for n in rounds(partitions, 12) {
        let kinds: Vec<usize> = (0..n).map(|k| (next_kind + k) % 4).collect();
        next_kind += n;
        partition_round(&mut rng, &mut tally, seed, &kinds, (2000, 8000));
        tally.print("long form so far", started);
    }
    disk_full_round(&mut tally, seed);
    for n in rounds(corruptions, 25) {
        corruption_round(&mut rng, &mut tally, seed, n);
        tally.print("long form so far", started);
    }
    tally.print("long form", started);
}
