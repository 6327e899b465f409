//! The Raft and membership cores stay pure (docs/design.md, "A pure core"): no runtime, no
//! clock, no files. This
//! test fails the moment one of those words appears in their sources.

use std::path::Path;

const FORBIDDEN: &[&str] = &[
    "glommio",
    "async fn",
    "Instant::now",
    "SystemTime",
    "std::fs",
];

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn raft_and_membership_are_pure() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    for module in ["raft", "membership"] {
        sources(&root.join(module), &mut files);
    }
    assert!(!files.is_empty(), "src/raft and src/membership must exist");
    let mut hits = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            for word in FORBIDDEN {
                if line.contains(word) {
                    hits.push(format!("{}:{}: {word}", file.display(), n + 1));
                }
            }
        }
    }
    assert!(hits.is_empty(), "impure core:\n{}", hits.join("\n"));
}

/// What runs on the raft shard once it serves (issue: runtime, item 2): no blocking file call,
/// no sleep, no name lookup, no map of a file. Start-up (`log/recovery.rs`, `log/voter_history.rs`,
/// `node/raft_shard.rs` building the core, `node/startup.rs`, and `node/shard.rs`, which opens
/// the log before the shard serves), the blocking helpers other callers
/// use (`log/durable.rs`'s `replace_file`, `log/quorum_state.rs`'s `read`, the sync snapshot
/// writer of `log/snapshot.rs` for the CLI), the load generator's ack file (a test tool) and the
/// resolver (`net/resolve.rs`, which runs lookups on their own thread) and the ring decision
/// made when the log opens (`log/ring.rs`) are outside the list.
const SHARD_MODULES: &[&str] = &[
    "node/executor/mod.rs",
    "node/executor/ready.rs",
    "node/executor/deliver.rs",
    "node/executor/snapshot.rs",
    "node/executor/status.rs",
    "node/executor/policy.rs",
    "node/call.rs",
    "node/admin.rs",
    "node/peers.rs",
    "node/raft_storage.rs",
    "node/handle.rs",
    "log/metadata_log.rs",
    "log/segment.rs",
    "log/epoch_cache.rs",
    "log/snapshot_io.rs",
    "net/server.rs",
    "net/frame.rs",
    "net/peer.rs",
    "net/dispatch.rs",
    "net/raft_rpc.rs",
    "net/stop.rs",
    "net/frame_out.rs",
    // Serving shards (and the raft shard itself, in a one-shard layout).
    "node/publish.rs",
    "node/route.rs",
    "fetch/publication.rs",
    "fetch/view.rs",
    "fetch/reader.rs",
    "fetch/shard.rs",
];

const BLOCKING: &[&str] = &[
    "std::fs",
    "fs::read",
    "fs::write",
    "fs::metadata",
    "fs::remove",
    "fs::rename",
    "fs::create_dir",
    "File::open",
    "File::create",
    "sync_all",
    "sync_data",
    "map_read_only",
    "Mmap",
    "durable::replace_file(",
    "thread::sleep",
    "to_socket_addrs",
    "std::io::Read",
    "read_exact_at",
];

#[test]
fn the_raft_shard_never_blocks() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut hits = Vec::new();
    for module in SHARD_MODULES {
        let path = root.join(module);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (update SHARD_MODULES)", path.display()));
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for (n, line) in code.lines().enumerate() {
            let code_part = line.split("//").next().unwrap_or("");
            for word in BLOCKING {
                if contains_word(code_part, word) {
                    hits.push(format!("src/{module}:{}: {word}", n + 1));
                }
            }
        }
    }
    assert!(
        hits.is_empty(),
        "blocking calls on the raft shard:\n{}",
        hits.join("\n")
    );
}

/// `word` in `line`, not as the tail of a longer name (`PartFile::create` is not
/// `File::create`).
fn contains_word(line: &str, word: &str) -> bool {
    line.match_indices(word).any(|(at, _)| {
        line[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
    })
}

/// The check itself: it flags a blocking call, and not a name that merely ends like one.
#[test]
fn the_shard_check_catches_a_blocking_call() {
    let flagged = |line: &str| BLOCKING.iter().any(|w| contains_word(line, w));
    assert!(flagged("        let bytes = std::fs::read(path)?;"));
    assert!(flagged("    let f = File::open(&path)?;"));
    assert!(!flagged("    let part = PartFile::create(dir, id).await?;"));
}
