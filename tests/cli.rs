//! `ringraft storage …` and `ringraft version` as a user runs them.

mod common;

use common::*;
use ringraft::ids::parse_kafka_uuid;
use ringraft::log::MetaProperties;

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
fn format_refuses_bad_input_without_writing() {
    let dir = TempDir::new("format-bad");
    let config = write_config(dir.path(), free_port(), "");
    let config = config.to_str().unwrap();
    for (args, says) in [
        (vec!["-t", "not-a-uuid"], "cluster id"),
        (
            vec!["-t", "MkU3OEVBNTcwNTJENDM2Qg", "--standalone"],
            "cannot write it yet",
        ),
        (
            vec![
                "-t",
                "MkU3OEVBNTcwNTJENDM2Qg",
                "--initial-controllers",
                "1@h",
            ],
            "initial-controllers",
        ),
    ] {
        let mut all = vec!["storage", "format", "-c", config];
        all.extend(args);
        let out = run(&all, dir.path());
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{err}");
        assert!(
            !dir.path().join("data/meta.properties").exists(),
            "nothing written"
        );
    }
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
