//! Configurations Kafka refuses and ringraft used to start on (issue "Hardening II", item 3):
//! each is refused by `storage format` and by `start`, within a second, in one line that names
//! the key or file and the fix, and leaves the data directory as it was.

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;

/// Runs the binary where it must refuse; returns the one `ringraft: …` line it printed.
fn refused(args: &[&str], cwd: &Path) -> String {
    let began = Instant::now();
    let out = run(args, cwd);
    let took = began.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    assert!(took < Duration::from_secs(1), "{args:?} took {took:?}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("ringraft: "))
        .collect();
    assert_eq!(lines.len(), 1, "{args:?}: one error line: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    lines[0].to_owned()
}

fn format_args(config: &str) -> [&str; 6] {
    ["storage", "format", "-t", TEST_CLUSTER_ID, "-c", config]
}

/// Every file under `dir` with its bytes, to show that a refusal changed nothing.
fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(tree(&path));
        } else {
            out.push((path.clone(), std::fs::read(&path).unwrap_or_default()));
        }
    }
    out.sort();
    out
}

fn set_key(file: &Path, key: &str, value: &str) {
    let text = std::fs::read_to_string(file).unwrap();
    let lines: Vec<String> = text
        .lines()
        .map(|l| {
            if l.starts_with(&format!("{key}=")) {
                format!("{key}={value}")
            } else {
                l.to_owned()
            }
        })
        .collect();
    std::fs::write(file, lines.join("\n") + "\n").unwrap();
}

/// Kafka: "the node id must be included in the set of voters" when controller.quorum.voters
/// is set. Such a node used to wait forever as an observer of a static quorum.
#[test]
fn a_controller_outside_the_static_voters_is_refused() {
    let dir = TempDir::new("not-a-voter");
    let port = free_port();
    let config = write_config(dir.path(), port, "");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("node.id=1", "node.id=4")).unwrap();
    let config = config.to_str().unwrap();
    for args in [&format_args(config)[..], &["start", "-c", config]] {
        let line = refused(args, dir.path());
        assert!(
            line.contains("controller.quorum.voters")
                && line.contains("node.id=4 must be included in the set of voters"),
            "{line}"
        );
        assert!(!dir.path().join("data").exists(), "{args:?} wrote nothing");
    }
}

/// `start` ran only part of what `format` checks and the other way round; now `format` runs
/// start's checks on the config: one id per voter, and listeners it can bind.
#[test]
fn format_refuses_what_start_refuses() {
    let dir = TempDir::new("format-start-checks");
    let port = free_port();
    let config = write_config(dir.path(), port, "");
    let text = std::fs::read_to_string(&config).unwrap();
    let twice = dir.path().join("twice.properties");
    let voters = format!("controller.quorum.voters=1@127.0.0.1:{port}");
    let other = free_port();
    std::fs::write(
        &twice,
        text.replace(&voters, &format!("{voters},1@127.0.0.1:{other}")),
    )
    .unwrap();
    let line = refused(&format_args(twice.to_str().unwrap()), dir.path());
    assert!(
        line.contains("controller.quorum.voters") && line.contains("voter 1 appears twice"),
        "{line}"
    );

    let config = config.to_str().unwrap();
    let held = TcpListener::bind(("127.0.0.1", port)).unwrap();
    let says = |line: &str| {
        assert!(
            line.contains("listeners:")
                && line.contains("Address already in use")
                && line.contains("CONTROLLER")
                && line.contains(&port.to_string()),
            "{line}"
        );
    };
    says(&refused(&format_args(config), dir.path()));
    assert!(!dir.path().join("data").exists(), "format wrote nothing");
    drop(held);
    format_node(config, dir.path());
    let _held = TcpListener::bind(("127.0.0.1", port)).unwrap();
    says(&refused(&["start", "-c", config], dir.path()));
    std::fs::remove_dir_all(dir.path().join("data")).unwrap();

    let admin_port = free_port();
    let with_admin = write_config(
        dir.path(),
        free_port(),
        &format!("ringraft.admin.listener=127.0.0.1:{admin_port}\n"),
    );
    let _admin = TcpListener::bind(("127.0.0.1", admin_port)).unwrap();
    let line = refused(&format_args(with_admin.to_str().unwrap()), dir.path());
    assert!(
        line.contains("ringraft.admin.listener") && line.contains("Address already in use"),
        "{line}"
    );
    assert!(!dir.path().join("data").exists());
}

/// A cluster.id that is not a base64url UUID: `format` never writes one, and start now reads
/// the file the way format checks the flag.
#[test]
fn a_malformed_cluster_id_is_refused_at_start() {
    let dir = TempDir::new("bad-cluster-id");
    let config = write_config(dir.path(), free_port(), "");
    let config = config.to_str().unwrap();
    format_node(config, dir.path());
    let meta = dir.path().join("data/meta.properties");
    set_key(&meta, "cluster.id", "not-a-cluster-id");
    let before = tree(&dir.path().join("data"));
    let line = refused(&["start", "-c", config], dir.path());
    assert!(
        line.contains("meta.properties is malformed")
            && line.contains("cluster.id")
            && line.contains("restore it"),
        "{line}"
    );
    let mut args = format_args(config).to_vec();
    args.push("-g");
    let line = refused(&args, dir.path());
    assert!(line.contains("meta.properties is malformed"), "{line}");
    assert_eq!(tree(&dir.path().join("data")), before, "nothing changed");
}

/// Every `log.dirs` entry is read at start, as Kafka reads them: another cluster's or node's,
/// an empty, an unreadable or a missing `meta.properties` is refused, naming the directory.
#[test]
fn every_log_dir_must_belong_to_this_node() {
    let dir = TempDir::new("log-dirs");
    let extra = dir.path().join("extra");
    let config = write_config(
        dir.path(),
        free_port(),
        &format!("log.dirs={}\n", extra.display()),
    );
    let config = config.to_str().unwrap();
    format_node(config, dir.path());
    let meta = extra.join("meta.properties");
    let good = std::fs::read(&meta).unwrap();
    let shown = meta.display().to_string();
    let other_cluster = "AAAAAAAAAAAAAAAAAAAAZA";
    /// A case's name, how it spoils `extra/meta.properties`, and what the refusal says.
    type Case<'a> = (&'a str, Box<dyn Fn() + 'a>, Vec<String>);
    let cases: Vec<Case> = vec![
        (
            "another cluster",
            Box::new(|| set_key(&meta, "cluster.id", other_cluster)),
            vec![
                format!("{shown} has cluster.id={other_cluster}"),
                format!("data/meta.properties has cluster.id={TEST_CLUSTER_ID}"),
                "another cluster".into(),
            ],
        ),
        (
            "another node",
            Box::new(|| set_key(&meta, "node.id", "7")),
            vec![format!("{shown} has node.id=7"), "another node".into()],
        ),
        (
            "empty",
            Box::new(|| std::fs::write(&meta, "").unwrap()),
            vec![format!("{shown} is malformed")],
        ),
        (
            "unreadable",
            Box::new(|| {
                // A directory in its place: unreadable even for root, unlike chmod 000.
                std::fs::remove_file(&meta).unwrap();
                std::fs::create_dir(&meta).unwrap();
            }),
            vec![format!("cannot read {shown}")],
        ),
        (
            "missing",
            Box::new(|| std::fs::remove_file(&meta).unwrap()),
            vec![
                format!("{} (log.dirs) is not formatted", extra.display()),
                "storage format -g".into(),
            ],
        ),
    ];
    for (case, spoil, says) in cases {
        let _ = std::fs::remove_dir(&meta);
        std::fs::write(&meta, &good).unwrap();
        spoil();
        let before = (tree(&dir.path().join("data")), tree(&extra));
        let line = refused(&["start", "-c", config], dir.path());
        for text in &says {
            assert!(line.contains(text.as_str()), "{case}: {line}");
        }
        let after = (tree(&dir.path().join("data")), tree(&extra));
        assert_eq!(before, after, "{case}: nothing changed");
    }
    std::fs::write(&meta, &good).unwrap();
    set_key(&meta, "cluster.id", other_cluster);
    let before = tree(&extra);
    let mut args = format_args(config).to_vec();
    args.push("-g");
    let line = refused(&args, dir.path());
    assert!(
        line.contains(&format!("{shown} has cluster.id={other_cluster}"))
            && line.contains(&format!("--cluster-id is {TEST_CLUSTER_ID}")),
        "format -g checks the directories it skips: {line}"
    );
    assert_eq!(tree(&extra), before);
}

/// A directory that lost its `meta.properties` but holds a log: start used to say "format it
/// with a random cluster id", and following that stamped a new cluster id onto the old log.
/// Now start, format (with or without -g) and the embedded default refuse it and say to
/// restore the file; `storage info` shows what the directory holds.
#[test]
fn a_log_without_meta_properties_is_never_reformatted() {
    let dir = TempDir::new("lost-meta");
    let port = free_port();
    let config = write_config(dir.path(), port, "");
    let config = config.to_str().unwrap();
    format_node(config, dir.path());
    let mut node = Node::start(&["start", "-c", config], dir.path(), port);
    node.signal(SIGTERM);
    assert_eq!(node.wait_exit(Duration::from_secs(20)), Some(0));
    let data = dir.path().join("data");
    std::fs::remove_file(data.join("meta.properties")).unwrap();
    let before = tree(&data);
    let says = |line: &str| {
        assert!(
            line.contains("meta.properties is missing")
                && line.contains("holds a metadata log")
                && line.contains("quorum-state")
                && line.contains("restore meta.properties")
                && line.contains("node.id=1")
                && !line.contains("random-uuid"),
            "{line}"
        );
    };
    says(&refused(&["start", "-c", config], dir.path()));
    says(&refused(&format_args(config), dir.path()));
    let mut args = format_args(config).to_vec();
    args.push("-g");
    says(&refused(&args, dir.path()));
    // The embedded default formats ./data on its first start, but not this one.
    let embedded = TempDir::new("lost-meta-embedded");
    copy_tree(&data, &embedded.path().join("data"));
    says(&refused(&["start"], embedded.path()));
    assert!(!embedded.path().join("data/meta.properties").exists());

    let out = run(&["storage", "info", "-c", config], dir.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    says(&stdout);
    assert_eq!(tree(&data), before, "nothing changed");

    // A format that crashed leaves the bootstrap snapshot without meta.properties: that is
    // not a log, and formatting again is what to do.
    let fresh = TempDir::new("crashed-format");
    let config = write_config(fresh.path(), free_port(), "");
    let config = config.to_str().unwrap();
    format_node(config, fresh.path());
    std::fs::remove_file(fresh.path().join("data/meta.properties")).unwrap();
    format_node(config, fresh.path());
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_tree(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

/// `ringraft.groups` (issue 25): a declaration that cannot be hosted is refused by `format` and
/// `start` alike, naming the key and what is wrong, and nothing is written.
#[test]
fn bad_group_declarations_are_refused() {
    let dir = TempDir::new("bad-groups");
    for (value, says) in [
        ("orders", "expected <topic>:<partitions>@<voter id>"),
        ("orders:0@1", "partitions must be 1 to 4096"),
        ("orders:2@1,7", "voter 7 is not in controller.quorum.voters"),
        ("bad/name:1@1", "only ASCII letters"),
        ("__cluster_metadata:1@1", "is group 0"),
        ("a:1@1;a:2@1", "topic a is declared twice"),
    ] {
        let config = write_config(
            dir.path(),
            free_port(),
            &format!("ringraft.groups={value}\n"),
        );
        let config = config.to_str().unwrap();
        for args in [&format_args(config)[..], &["start", "-c", config]] {
            let line = refused(args, dir.path());
            assert!(
                line.contains("ringraft.groups") && line.contains(says),
                "{value}: {line}"
            );
        }
        assert!(
            !dir.path().join("data").exists(),
            "{value}: nothing written"
        );
    }
    // Groups need a static quorum: their voters' addresses come from controller.quorum.voters.
    let port = free_port();
    let config = write_config(dir.path(), port, "ringraft.groups=kv:1@1\n");
    let text = std::fs::read_to_string(&config).unwrap();
    let dynamic = text.replace(
        &format!("controller.quorum.voters=1@127.0.0.1:{port}"),
        &format!("controller.quorum.bootstrap.servers=127.0.0.1:{port}"),
    );
    std::fs::write(&config, dynamic).unwrap();
    let line = refused(&["start", "-c", config.to_str().unwrap()], dir.path());
    assert!(
        line.contains("ringraft.groups") && line.contains("static quorum"),
        "{line}"
    );
}

/// A group's log (issue 25) counts as a log of the directory: with `meta.properties` gone,
/// `storage format` refuses rather than hand `kv-0`'s votes and records to a new cluster.
#[test]
fn a_groups_log_without_meta_properties_is_never_reformatted() {
    let dir = TempDir::new("group-log-no-meta");
    let config = write_config(dir.path(), free_port(), "ringraft.groups=kv:1@1\n");
    let group = dir.path().join("data").join("kv-0");
    std::fs::create_dir_all(&group).unwrap();
    std::fs::write(group.join("quorum-state"), b"{}").unwrap();
    let before = tree(dir.path());
    let line = refused(&format_args(config.to_str().unwrap()), dir.path());
    assert!(
        line.contains("data/kv-0 holds a metadata log (kv-0/quorum-state)"),
        "{line}"
    );
    assert_eq!(tree(dir.path()), before, "nothing written");
}

/// More groups than the open-files limit allows (issue 25): the node would run out of
/// descriptors while its groups elect and fail them one by one with EMFILE. It is refused at
/// start with the number to raise `ulimit -n` to, before anything is written.
#[test]
fn groups_beyond_the_open_files_limit_are_refused() {
    let dir = TempDir::new("nofile-groups");
    let config = write_config(dir.path(), free_port(), "ringraft.groups=kv:200@1\n");
    let config = config.to_str().unwrap();
    assert!(run(&format_args(config), dir.path()).status.success());
    // `ulimit -n` in sh sets the hard limit too, so the node cannot raise it.
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n 600 && exec {} start -c {config}",
            binary()
        ))
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("ringraft: ringraft.groups gives this node 200 groups")
            && stderr.contains("ulimit -n 1256"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("data").join("kv-0").exists(),
        "no group started"
    );
}
