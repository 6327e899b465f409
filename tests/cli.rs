//! `ringraft storage …` and `ringraft version` as a user runs them.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use ringraft::ids::{parse_kafka_uuid, uuid_to_kafka_string};
use ringraft::log::bootstrap::{self, BootstrapSnapshot};
use ringraft::log::MetaProperties;
use ringraft::records::control::{Endpoint, Voter};
use ringraft::records::metadata::FeatureLevelRecord;

#[test]
fn random_uuid_is_kafka_text() {
    let out = run(&["storage", "random-uuid"], std::path::Path::new("."));
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let text = text.trim();
    assert_eq!(text.len(), 22);
    parse_kafka_uuid(text).unwrap();
}

#[test]
fn format_then_info_then_refuse_reformat() {
    let dir = TempDir::new("format");
    let config = write_config(dir.path(), free_port(), "");
    let config = config.to_str().unwrap();
    let cluster = "MkU3OEVBNTcwNTJENDM2Qg";
    let out = run(
        &["storage", "format", "-t", cluster, "-c", config],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("Formatting metadata directory"));
    let meta = MetaProperties::read(&dir.path().join("data")).unwrap();
    assert_eq!(
        (meta.node_id, meta.cluster_id.as_str(), meta.version),
        (1, cluster, 1)
    );
    assert!(meta.directory_id.is_some());

    let out = run(&["storage", "info", "-c", config], dir.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains(&format!("cluster.id={cluster}")) && stdout.contains("node.id=1"));

    let out = run(
        &["storage", "format", "-t", cluster, "-c", config],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already formatted"));
    let out = run(
        &["storage", "format", "-t", cluster, "-c", config, "-g"],
        dir.path(),
    );
    assert!(out.status.success());
    assert_eq!(
        MetaProperties::read(&dir.path().join("data")).unwrap(),
        meta,
        "-g keeps it"
    );
}

#[test]
fn info_reports_a_corrupt_meta_properties() {
    let dir = TempDir::new("info-bad");
    let config = write_config(dir.path(), free_port(), "");
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    std::fs::write(
        dir.path().join("data/meta.properties"),
        "version=1\nnode.id=x\n",
    )
    .unwrap();
    let out = run(
        &["storage", "info", "-c", config.to_str().unwrap()],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Found problem"));
}

#[test]
fn version_prints() {
    let out = run(&["version"], std::path::Path::new("."));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ringraft 0.1.0"));
}

/// The load generator's flags, the ack file's format included, are documented where a user
/// looks: the fault suite and `bench quorum` drive nodes through them.
#[test]
fn start_help_documents_the_load_generator_and_its_ack_file() {
    let out = run(&["start", "--help"], std::path::Path::new("."));
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--load-rate",
        "--load-ack-file",
        "--load-record-bytes",
        "--load-seconds",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
    assert!(
        help.contains("<last offset> <first sequence> <record count>"),
        "{help}"
    );
}

const CLUSTER: &str = "MkU3OEVBNTcwNTJENDM2Qg";
const DIR_A: &str = "J8aAPcfLQt2bqs1JT_rMgQ";
const DIR_B: &str = "SY_0DqwmR2S7xi35MCzorA";

/// A controller config for node `node_id` on `port` that finds its quorum through
/// controller.quorum.bootstrap.servers (no static voters), data in `dir`/data.
fn dynamic_config(dir: &Path, node_id: i32, port: u16) -> PathBuf {
    let path = dir.join("server.properties");
    let text = format!(
        "process.roles=controller\nnode.id={node_id}\nlisteners=CONTROLLER://127.0.0.1:{port}\n\
         controller.listener.names=CONTROLLER\n\
         controller.quorum.bootstrap.servers=127.0.0.1:{port}\nmetadata.log.dir={}\n",
        dir.join("data").display()
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs `storage format -t CLUSTER -c config args…` and returns its stdout; panics on failure.
fn format_ok(dir: &Path, config: &Path, args: &[&str]) -> String {
    let mut all = vec![
        "storage",
        "format",
        "-t",
        CLUSTER,
        "-c",
        config.to_str().unwrap(),
    ];
    all.extend(args);
    let out = run(&all, dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

/// The bootstrap snapshot of `dir`/data, checked to be the only file of its partition dir.
fn bootstrap_of(dir: &Path) -> BootstrapSnapshot {
    let partition = dir.join("data/__cluster_metadata-0");
    let names: Vec<_> = std::fs::read_dir(&partition)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["00000000000000000000-0000000000.checkpoint"]);
    bootstrap::read(&partition)
        .unwrap()
        .expect("a bootstrap snapshot")
}

fn directory_id(dir: &Path) -> String {
    let meta = MetaProperties::read(&dir.join("data")).unwrap();
    assert_eq!((meta.cluster_id.as_str(), meta.version), (CLUSTER, 1));
    uuid_to_kafka_string(&meta.directory_id.unwrap())
}

fn voter(id: i32, dir: &str, host: &str, port: u16) -> Voter {
    Voter {
        voter_id: id,
        directory_id: parse_kafka_uuid(dir).unwrap(),
        endpoints: vec![Endpoint {
            name: "CONTROLLER".into(),
            host: host.into(),
            port,
        }],
        min_supported_kraft_version: 0,
        max_supported_kraft_version: 1,
    }
}

/// What Kafka 4.4.0 prints and writes as the feature levels of a fresh cluster.
fn assert_kafka_4_4_feature_levels(stdout: &str, snapshot: &BootstrapSnapshot) {
    let first = stdout.lines().next().unwrap();
    assert!(
        first.starts_with("Bootstrap metadata: BootstrapMetadata(records=[ApiMessageAndVersion(")
            && first.ends_with("], metadataVersionLevel=33, source=format command)"),
        "{first}"
    );
    let levels: Vec<(String, i16)> = snapshot
        .records
        .iter()
        .map(|r| FeatureLevelRecord::decode(r).unwrap().unwrap())
        .map(|r| (r.name, r.feature_level))
        .collect();
    let want = [
        ("metadata.version", 33),
        ("eligible.leader.replicas.version", 1),
        ("group.version", 1),
        ("share.version", 2),
        ("streams.version", 1),
        ("transaction.version", 2),
    ];
    let want: Vec<(String, i16)> = want.iter().map(|(n, l)| (n.to_string(), *l)).collect();
    assert_eq!(levels, want);
}

#[test]
fn format_standalone_writes_this_node_as_the_only_voter() {
    let dir = TempDir::new("format-standalone");
    let port = free_port();
    let config = dynamic_config(dir.path(), 1, port);
    let stdout = format_ok(dir.path(), &config, &["--standalone"]);
    let data = dir.path().join("data");
    assert_eq!(
        stdout.lines().nth(1).unwrap(),
        format!(
            "Formatting dynamic metadata voter directory {} with metadata.version 4.4-IV2.",
            data.display()
        )
    );
    let snapshot = bootstrap_of(dir.path());
    assert_kafka_4_4_feature_levels(&stdout, &snapshot);
    assert_eq!(snapshot.kraft_version, 1);
    let own = directory_id(dir.path());
    let voters = snapshot.voters.expect("voters").voters;
    assert_eq!(voters, [voter(1, &own, "127.0.0.1", port)]);
    assert!(
        !data.join("bootstrap.checkpoint").exists(),
        "Kafka 4.4 writes none"
    );
}

#[test]
fn format_initial_controllers_writes_the_listed_voters() {
    let dir = TempDir::new("format-initial");
    let port = free_port();
    let config = dynamic_config(dir.path(), 2, port);
    let list = format!("1@a.example:9093:{DIR_A},2@[::1]:{port}:{DIR_B}");
    let stdout = format_ok(dir.path(), &config, &["--initial-controllers", &list]);
    assert!(stdout.contains("Formatting dynamic metadata voter directory "));
    assert_eq!(
        directory_id(dir.path()),
        DIR_B,
        "this node's listed directory id"
    );
    let snapshot = bootstrap_of(dir.path());
    assert_eq!(snapshot.kraft_version, 1);
    assert_eq!(
        snapshot.voters.unwrap().voters,
        [
            voter(1, DIR_A, "a.example", 9093),
            voter(2, DIR_B, "0:0:0:0:0:0:0:1", port), // as Java spells ::1
        ]
    );

    // A controller that is not listed gets a directory id of its own.
    let other = TempDir::new("format-initial-other");
    let config = dynamic_config(other.path(), 3, free_port());
    let stdout = format_ok(other.path(), &config, &["-I", &list]);
    assert!(
        stdout.contains("Formatting dynamic metadata directory "),
        "{stdout}"
    );
    let own = directory_id(other.path());
    assert!(own != DIR_A && own != DIR_B);
    assert_eq!(bootstrap_of(other.path()).voters.unwrap().voters.len(), 2);
}

#[test]
fn format_no_initial_controllers_and_static_write_no_voters() {
    // Dynamic (no controller.quorum.voters): kraft.version 1, voters learned at start.
    let dir = TempDir::new("format-observer");
    let config = dynamic_config(dir.path(), 4, free_port());
    let stdout = format_ok(dir.path(), &config, &["--no-initial-controllers"]);
    assert!(
        stdout.contains("Formatting metadata directory "),
        "{stdout}"
    );
    let snapshot = bootstrap_of(dir.path());
    assert_kafka_4_4_feature_levels(&stdout, &snapshot);
    assert_eq!((snapshot.kraft_version, snapshot.voters), (1, None));

    // Static voters: kraft.version 0 with or without -N (KAFKA-19719), and -f kraft.version=0.
    for args in [&[][..], &["-N"], &["-f", "kraft.version=0"]] {
        let dir = TempDir::new("format-static");
        let config = write_config(dir.path(), free_port(), "");
        let stdout = format_ok(dir.path(), &config, args);
        assert!(
            stdout.contains("Formatting metadata directory "),
            "{stdout}"
        );
        let snapshot = bootstrap_of(dir.path());
        assert_eq!(
            (snapshot.kraft_version, snapshot.voters),
            (0, None),
            "{args:?}"
        );
    }
}

#[test]
fn format_refuses_what_kafka_refuses_without_writing() {
    let dir = TempDir::new("format-bad");
    let port = free_port();
    let static_config = write_config(dir.path(), port, "");
    let static_config = static_config.to_str().unwrap().to_owned();
    let dynamic = TempDir::new("format-bad-dynamic");
    let dynamic_config = dynamic_config(dynamic.path(), 1, port);
    let dynamic_config = dynamic_config.to_str().unwrap().to_owned();
    let voters_and_flag = "You cannot specify controller.quorum.voters and format the node with \
        --initial-controllers or --standalone. If you want to use dynamic quorum, please remove \
        controller.quorum.voters and specify controller.quorum.bootstrap.servers instead.";
    let no_flag = "Because controller.quorum.voters is not set on this controller, you must \
        specify one of the following: --standalone, --initial-controllers, or \
        --no-initial-controllers.";
    let kraft_0 = "Cannot set kraft.version to 0 if controller.quorum.voters is empty and one of \
        the flags --standalone, --initial-controllers, or --no-initial-controllers is used. For \
        dynamic controllers support, try removing the --feature flag for kraft.version.";
    let kraft_1 = "Cannot set kraft.version to 1 unless controller.quorum.voters is empty and \
        one of the flags --standalone, --initial-controllers, or --no-initial-controllers is \
        used. For dynamic controllers support, try using one of --standalone, \
        --initial-controllers, or --no-initial-controllers and removing \
        controller.quorum.voters.";
    let list = format!("1@h:1:{DIR_A}");
    for (config, args, says) in [
        (&static_config, vec!["-t", "not-a-uuid"], "cluster id"),
        (
            &static_config,
            vec!["-t", CLUSTER, "--standalone"],
            voters_and_flag,
        ),
        (
            &static_config,
            vec!["-t", CLUSTER, "-I", &list],
            voters_and_flag,
        ),
        (
            &static_config,
            vec!["-t", CLUSTER, "-f", "kraft.version=1"],
            kraft_1,
        ),
        (&dynamic_config, vec!["-t", CLUSTER], no_flag),
        (
            &dynamic_config,
            vec!["-t", CLUSTER, "-s", "-f", "kraft.version=0"],
            kraft_0,
        ),
        (
            &dynamic_config,
            vec!["-t", CLUSTER, "-N", "-f", "kraft.version=0"],
            kraft_0,
        ),
        (
            &dynamic_config,
            vec!["-t", CLUSTER, "-I", "1@h"],
            "--initial-controllers: ",
        ),
        (
            &dynamic_config,
            vec!["-t", CLUSTER, "-s", "-f", "foo=1"],
            "Unsupported feature: foo",
        ),
    ] {
        let mut all = vec!["storage", "format", "-c", config];
        all.extend(&args);
        let out = run(&all, dir.path());
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
        for base in [dir.path(), dynamic.path()] {
            assert!(!base.join("data").exists(), "{args:?} wrote nothing");
        }
    }
    // The three flags exclude each other (a usage error, as in Kafka).
    let out = run(
        &[
            "storage",
            "format",
            "-c",
            &dynamic_config,
            "-t",
            CLUSTER,
            "-s",
            "-N",
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(!dynamic.path().join("data").exists());
}

/// `quorum add-controller` / `remove-controller` without a quorum to talk to: `--dry-run`
/// prints what Kafka's tool prints and sends nothing; bad input is a one-line error and exit 1.
#[test]
fn quorum_add_and_remove_controller_dry_runs_and_refusals() {
    let dir = TempDir::new("cli-voters");
    let port = free_port();
    let config = dynamic_config(dir.path(), 4, port);
    let nobody = format!("127.0.0.1:{}", free_port());
    let args = |extra: &[&str]| {
        let mut all = vec!["quorum"];
        all.extend(extra);
        all.extend(["--bootstrap-controller", nobody.as_str()]);
        run(&all, dir.path())
    };
    // Unformatted: no directory id to add.
    let out = args(&[
        "add-controller",
        "-c",
        config.to_str().unwrap(),
        "--dry-run",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("meta.properties"), "{err}");
    format_ok(dir.path(), &config, &["--no-initial-controllers"]);
    let directory = directory_id(dir.path());
    let out = args(&[
        "add-controller",
        "-c",
        config.to_str().unwrap(),
        "--dry-run",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!(
            "DRY RUN of adding controller 4 with directory id {directory} and endpoints: \
             CONTROLLER://127.0.0.1:{port}\n"
        )
    );
    let out = args(&[
        "remove-controller",
        "-i",
        "4",
        "-d",
        &directory,
        "--dry-run",
    ]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("DRY RUN of removing KRaft controller 4 with directory id {directory}\n")
    );
    // A malformed directory id, and a real attempt with no controller listening.
    let out = args(&["remove-controller", "-i", "4", "-d", "not-a-uuid"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--controller-directory-id"));
    let out = args(&["remove-controller", "-i", "4", "-d", &directory]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no bootstrap controller answered"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
