//! Helpers for tests that run the real `ringraft` binary on 127.0.0.1.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_ringraft")
}

/// A fresh directory under the target dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        // On the build's disk, not /tmp: /tmp may be tmpfs, which has no O_DIRECT.
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "ringraft-test-{name}-{}-{}",
            std::process::id(),
            nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// A port that was free a moment ago, below the kernel's ephemeral range (32768 and up on
/// Linux), so that no outgoing connection of a running node can be given it as its local port
/// before the node that should listen there starts; never the same one twice in a process.
pub fn free_port() -> u16 {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let given = given.get_or_insert_with(HashSet::new);
    let seed = nanos() as u64 ^ u64::from(std::process::id()) << 32;
    for i in 0..10_000u64 {
        let port = 20_000
            + ((seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(i * 7919))
                % 12_000) as u16;
        if !given.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return port;
        }
    }
    panic!("no free port in 20000..32000");
}

/// A controller config for node 1 on `port` with its data in `dir`.
pub fn write_config(dir: &Path, port: u16, extra: &str) -> PathBuf {
    let path = dir.join("server.properties");
    let data = dir.join("data");
    let text = format!(
        "process.roles=controller\nnode.id=1\nlisteners=CONTROLLER://127.0.0.1:{port}\n\
         controller.listener.names=CONTROLLER\ncontroller.quorum.voters=1@127.0.0.1:{port}\n\
         metadata.log.dir={}\n{extra}",
        data.display()
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// The cluster id the single-node tests format with.
pub const TEST_CLUSTER_ID: &str = "MkU3OEVBNTcwNTJENDM2Qg";

/// `ringraft storage format` of the node `config` describes, in `TEST_CLUSTER_ID`; panics
/// with the tool's stderr when it fails.
pub fn format_node(config: &str, cwd: &Path) {
    let out = run(
        &["storage", "format", "-t", TEST_CLUSTER_ID, "-c", config],
        cwd,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Voters 1..=3 on free ports of 127.0.0.1: their ports and the `controller.quorum.voters`
/// value naming them.
pub fn three_voters() -> (Vec<u16>, String) {
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let voters = (1..=3)
        .map(|id| format!("{id}@127.0.0.1:{}", ports[id - 1]))
        .collect::<Vec<_>>()
        .join(",");
    (ports, voters)
}

/// The config of voter `id` of `voters`, embedded in the test process: it listens on `port`
/// and keeps its log under `dir`; `extra` lines are appended.
pub fn embedded_config(
    id: i32,
    port: u16,
    voters: &str,
    dir: &Path,
    extra: &str,
) -> ringraft::ServerConfig {
    let properties = format!(
        "node.id={id}\nprocess.roles=controller\ncontroller.quorum.voters={voters}\n\
         listeners=CONTROLLER://127.0.0.1:{port}\ncontroller.listener.names=CONTROLLER\n\
         metadata.log.dir={}\n{extra}",
        dir.display()
    );
    ringraft::ServerConfig::parse(&properties).expect("a valid config")
}

/// Polls `f` every 50 ms until it gives a value; panics after `within`.
pub fn wait_until<T>(within: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "nothing within {within:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs the binary with `args` where it must refuse to start; returns its stderr. A process
/// still running after 20 s fails the test instead of hanging it.
pub fn start_must_fail(args: &[&str], cwd: &Path) -> String {
    let mut child = Command::new(binary())
        .args(args)
        .current_dir(cwd)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > until {
            let _ = child.kill();
            panic!("`ringraft {}` started instead of refusing", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success(), "exit status {}", out.status);
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn run(args: &[&str], cwd: &Path) -> Output {
    Command::new(binary())
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap()
}

/// Waits until 127.0.0.1:`port` can be bound. A node killed with SIGKILL keeps its listener
/// for a few milliseconds after it exits, until the kernel's deferred teardown of its io_uring
/// cancels the accept it had queued (a node that stops normally shuts its listener down
/// first); a restart on the same port waits for that. Still taken after 5 s: the test fails.
pub fn wait_port_free(port: u16) {
    let until = Instant::now() + Duration::from_secs(5);
    while std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
        if Instant::now() > until {
            panic!("port {port} is in use; the test needs it free");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Starts `ringraft start -c server.properties` in `cwd` (listening on `port`) with the load
/// generator appending `rate` records/s from the first moment, its acknowledgements in `acks`;
/// `extra` arguments after those.
pub fn start_writing(cwd: &Path, port: u16, rate: u32, acks: &Path, extra: &[&str]) -> Node {
    let rate = rate.to_string();
    let mut args = vec![
        "start",
        "-c",
        "server.properties",
        "--load-rate",
        &rate,
        "--load-warmup-ms",
        "0",
        "--load-ack-file",
        acks.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    Node::start(&args, cwd, port)
}

/// One quorum of several nodes at a time in a test process; hold the guard for the test (or in
/// the cluster's last field, so that its nodes are gone before the next test's start).
/// Without CAP_IPC_LOCK (any user but root) the kernel counts every ring's registered memory
/// against one `ulimit -l` for all of the user's processes together: measured here, five
/// default nodes fit under 8 MiB and a sixth fails with ENOMEM, so two three-node tests side
/// by side did not. A single-node test may still run beside one quorum.
pub fn one_quorum_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static QUORUM: std::sync::Mutex<()> = std::sync::Mutex::new(());
    QUORUM.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running node, killed on drop if the test did not stop it.
pub struct Node {
    pub child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl Node {
    pub fn start(args: &[&str], cwd: &Path, port: u16) -> Node {
        Node::start_logging(args, cwd, port, "debug")
    }

    /// `start` with `RUST_LOG=filter` (the default level of a real node is info).
    pub fn start_logging(args: &[&str], cwd: &Path, port: u16, filter: &str) -> Node {
        wait_port_free(port);
        let log = cwd.join(format!("node-{}.log", nanos()));
        let child = Command::new(binary())
            .args(args)
            .current_dir(cwd)
            .env("RUST_LOG", filter)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut node = Node { child, port, log };
        node.wait_listening();
        node
    }

    fn wait_listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("node exited early ({status}):\n{}", self.log_text());
            }
            // The node's own "listening" line comes first: a listener of a node that just
            // exited can outlive its process for a moment (the kernel tears down its io_uring,
            // which holds the socket, asynchronously), so a bare connect can reach a ghost.
            if self.log_text().contains("listening addr=")
                && TcpStream::connect(("127.0.0.1", self.port)).is_ok()
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("node did not listen within 20 s:\n{}", self.log_text());
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc_kill(self.child.id() as i32, signal) };
    }

    /// SIGKILL, and reap.
    /// SIGKILL, reaped, and its controller port released (`wait_port_free`), so that a test
    /// may format or restart on the same port at once.
    pub fn kill_now(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        wait_port_free(self.port);
    }

    /// Waits for exit; returns the exit code (None if killed by a signal).
    pub fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("node did not exit within {within:?}:\n{}", self.log_text());
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

pub const SIGINT: i32 = 2;
pub const SIGTERM: i32 = 15;

/// Sends one size-prefixed frame.
pub fn send_frame(stream: &mut TcpStream, body: &[u8]) {
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(body);
    stream.write_all(&frame).unwrap();
}

/// Reads one response frame body, or None if the server closed the connection.
pub fn read_frame(stream: &mut TcpStream) -> Option<Vec<u8>> {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let mut size = [0u8; 4];
    if stream.read_exact(&mut size).is_err() {
        return None;
    }
    let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
    stream.read_exact(&mut body).ok()?;
    Some(body)
}

pub mod glommio_rt;
pub mod quorum;

/// SplitMix64: a small seeded generator, so every randomized test is replayable.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform-enough in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
