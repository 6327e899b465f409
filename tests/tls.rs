//! TLS on the controller listener and between voters (issue 11, item 6), against real
//! `ringraft` processes on 127.0.0.1 with certificates from a throwaway CA.
//!
//! A 3-voter quorum with `CONTROLLER:SSL` and `ssl.client.auth=required` elects a leader and
//! commits over TLS; `ringraft quorum describe --command-config` reaches it over TLS; a client
//! with a certificate from another CA, one without a certificate, and a plaintext client are
//! each refused, and the node says why. Key material that cannot be used stops the start with
//! a message naming the file. Two Raft groups beside the metadata group commit too, over
//! TLS like everything else.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{format_node, run, start_must_fail, three_voters, Node, TempDir};

/// `dir/trusted` holds `ca.pem` and `node-{1,2,3}.pem` and `client.pem`; `dir/intruder` a
/// second CA's `ca.pem` and `client.pem`.
fn two_pkis(dir: &Path) -> (PathBuf, PathBuf) {
    let (trusted, intruder) = (dir.join("trusted"), dir.join("intruder"));
    for (pki, names) in [
        (&trusted, &["node-1", "node-2", "node-3", "client"][..]),
        (&intruder, &["client"][..]),
    ] {
        std::fs::create_dir_all(pki).unwrap();
        ringraft::net::tls::write_throwaway_pki(pki, names).unwrap();
    }
    (trusted, intruder)
}

fn tls_lines(pki: &Path, keystore: &str) -> String {
    format!(
        "ssl.keystore.type=PEM\nssl.keystore.location={}\nssl.truststore.type=PEM\n\
         ssl.truststore.location={}\n",
        pki.join(keystore).display(),
        pki.join("ca.pem").display()
    )
}

fn client_config(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

fn describe(bootstrap: &str, config: Option<&str>, cwd: &Path) -> (bool, String) {
    let mut args = vec![
        "quorum",
        "describe",
        "--status",
        "--bootstrap-controller",
        bootstrap,
    ];
    if let Some(config) = config {
        args.extend(["--command-config", config]);
    }
    let out = run(&args, cwd);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn a_tls_quorum_commits_and_refuses_clients_without_a_trusted_certificate() {
    let dir = TempDir::new("tls-quorum");
    let (trusted, intruder) = two_pkis(dir.path());
    let _turn = common::one_quorum_at_a_time();
    let (ports, voters) = three_voters();
    let mut nodes = Vec::new();
    for id in 1..=3 {
        let node_dir = dir.path().join(format!("n{id}"));
        std::fs::create_dir_all(&node_dir).unwrap();
        let config = format!(
            "process.roles=controller\nnode.id={id}\n\
             listeners=CONTROLLER://127.0.0.1:{}\ncontroller.listener.names=CONTROLLER\n\
             listener.security.protocol.map=CONTROLLER:SSL\nssl.client.auth=required\n\
             controller.quorum.voters={voters}\nmetadata.log.dir={}\n\
             ringraft.groups=kv:2@1,2,3\n{}",
            ports[id - 1],
            node_dir.join("data").display(),
            tls_lines(&trusted, &format!("node-{id}.pem"))
        );
        std::fs::write(node_dir.join("server.properties"), config).unwrap();
        format_node("server.properties", &node_dir);
        let acks = node_dir.join("acks");
        let node = common::start_writing(&node_dir, ports[id - 1], 500, &acks, &[]);
        nodes.push((node, acks));
    }

    // Commits: the leader's load generator acknowledges appends, which takes a majority over
    // TLS between the voters.
    let deadline = Instant::now() + Duration::from_secs(30);
    let acknowledged = || -> usize {
        nodes
            .iter()
            .map(|(_, acks)| {
                std::fs::read_to_string(acks)
                    .unwrap_or_default()
                    .lines()
                    .count()
            })
            .sum()
    };
    while acknowledged() < 50 {
        assert!(
            Instant::now() < deadline,
            "no commits over TLS within 30 s:\n{}",
            nodes[0].0.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let bootstrap = format!("127.0.0.1:{}", ports[0]);
    let cwd = dir.path();
    let good = client_config(
        cwd,
        "good.properties",
        &format!(
            "security.protocol=SSL\n{}",
            tls_lines(&trusted, "client.pem")
        ),
    );
    let (ok, text) = describe(&bootstrap, Some(&good), cwd);
    assert!(ok, "describe over TLS failed: {text}");
    assert!(text.contains("LeaderId:"), "{text}");
    for port in &ports {
        assert!(
            text.contains(&format!("CONTROLLER://127.0.0.1:{port}")),
            "{text}"
        );
    }

    // A certificate the nodes do not trust is refused at the handshake, and the node says so.
    let foreign = client_config(
        cwd,
        "foreign.properties",
        &format!(
            "security.protocol=SSL\nssl.keystore.type=PEM\nssl.keystore.location={}\n\
             ssl.truststore.type=PEM\nssl.truststore.location={}\n",
            intruder.join("client.pem").display(),
            trusted.join("ca.pem").display()
        ),
    );
    let (ok, text) = describe(&bootstrap, Some(&foreign), cwd);
    assert!(
        !ok,
        "a client with a foreign certificate was served: {text}"
    );
    assert!(text.contains("alert"), "{text}");
    let said = |node: &Node| node.log_text().contains("TLS handshake failed");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !said(&nodes[0].0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(said(&nodes[0].0), "{}", nodes[0].0.log_text());

    // No certificate at all: ssl.client.auth=required refuses it.
    let anonymous = client_config(
        cwd,
        "anonymous.properties",
        &format!(
            "security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={}\n",
            trusted.join("ca.pem").display()
        ),
    );
    let (ok, text) = describe(&bootstrap, Some(&anonymous), cwd);
    assert!(!ok, "a client without a certificate was served: {text}");
    assert!(text.contains("CertificateRequired"), "{text}");

    // A client that does not trust the nodes' CA refuses them.
    let distrustful = client_config(
        cwd,
        "distrustful.properties",
        &format!(
            "security.protocol=SSL\n{}",
            tls_lines(&intruder, "client.pem")
        ),
    );
    let (ok, text) = describe(&bootstrap, Some(&distrustful), cwd);
    assert!(
        !ok,
        "a client trusted a certificate from another CA: {text}"
    );
    assert!(text.contains("UnknownIssuer"), "{text}");

    // Plaintext gets no answer, only a hint that the listener speaks TLS.
    let (ok, text) = describe(&bootstrap, None, cwd);
    assert!(!ok, "a plaintext client was served: {text}");
    assert!(text.contains("security.protocol=SSL"), "{text}");

    // The quorum is still committing after all of that.
    let before = acknowledged();
    let deadline = Instant::now() + Duration::from_secs(20);
    while acknowledged() < before + 20 {
        assert!(
            Instant::now() < deadline,
            "commits stopped after the refused clients"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // Each group commits its leader's first record (LeaderChange) only once a follower's
    // Fetches reached it over TLS.
    for partition in ["0", "1"] {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ports
            .iter()
            .any(|port| group_high_watermark(port, partition, &good, cwd) >= 1)
        {
            assert!(
                Instant::now() < deadline,
                "group kv-{partition} committed nothing over TLS within 30 s:\n{}",
                nodes[0].0.log_text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Group `kv-<partition>`'s high watermark as the node on `port` describes it (−1: it does
/// not say, for instance because it does not lead the group).
fn group_high_watermark(port: &u16, partition: &str, config: &str, cwd: &Path) -> i64 {
    let bootstrap = format!("127.0.0.1:{port}");
    let args = [
        "quorum",
        "describe",
        "--status",
        "--topic",
        "kv",
        "--partition",
        partition,
        "--bootstrap-controller",
        &bootstrap,
        "--command-config",
        config,
    ];
    let out = run(&args, cwd);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("HighWatermark:")?.trim().parse().ok())
        .unwrap_or(-1)
}

#[test]
fn a_plaintext_listener_says_when_a_tls_client_knocks() {
    let dir = TempDir::new("tls-on-plaintext");
    let (trusted, _) = two_pkis(dir.path());
    let port = common::free_port();
    let config = common::write_config(dir.path(), port, "");
    format_node(config.to_str().unwrap(), dir.path());
    let node = Node::start(&["start", "-c", config.to_str().unwrap()], dir.path(), port);
    let tls = client_config(
        dir.path(),
        "tls.properties",
        &format!(
            "security.protocol=SSL\n{}",
            tls_lines(&trusted, "client.pem")
        ),
    );
    let (ok, text) = describe(&format!("127.0.0.1:{port}"), Some(&tls), dir.path());
    assert!(!ok, "{text}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !node
        .log_text()
        .contains("TLS ClientHello on a PLAINTEXT listener")
    {
        assert!(Instant::now() < deadline, "{}", node.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn key_material_that_cannot_be_used_stops_the_start_naming_the_file() {
    let dir = TempDir::new("tls-bad-keys");
    let (trusted, intruder) = two_pkis(dir.path());
    let port = common::free_port();
    // A keystore whose key belongs to another certificate.
    let node = std::fs::read_to_string(trusted.join("node-1.pem")).unwrap();
    let other = std::fs::read_to_string(intruder.join("client.pem")).unwrap();
    let key_end = node.find("-----END PRIVATE KEY-----").unwrap() + 26;
    let cert_start = other.find("-----BEGIN CERTIFICATE-----").unwrap();
    let mismatched = dir.path().join("mismatched.pem");
    std::fs::write(
        &mismatched,
        format!("{}{}", &node[..key_end], &other[cert_start..]),
    )
    .unwrap();
    let no_key = dir.path().join("no-key.pem");
    std::fs::write(&no_key, &node[key_end..]).unwrap();
    let encrypted = dir.path().join("encrypted.pem");
    std::fs::write(
        &encrypted,
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n",
    )
    .unwrap();
    let missing = dir.path().join("missing.pem");
    let cases: [(&Path, &str); 4] = [
        (&mismatched, "does not fit"),
        (&no_key, "no usable private key"),
        (&encrypted, "encrypted"),
        (&missing, "cannot read"),
    ];
    for (keystore, why) in cases {
        let extra = format!(
            "listener.security.protocol.map=CONTROLLER:SSL\nssl.keystore.type=PEM\n\
             ssl.keystore.location={}\nssl.truststore.type=PEM\nssl.truststore.location={}\n",
            keystore.display(),
            trusted.join("ca.pem").display()
        );
        // storage format runs start's checks on the config, so it refuses first.
        let _ = std::fs::remove_dir_all(dir.path().join("data"));
        let config = common::write_config(dir.path(), port, &extra);
        let config = config.to_str().unwrap();
        let out = run(
            &[
                "storage",
                "format",
                "-t",
                common::TEST_CLUSTER_ID,
                "-c",
                config,
            ],
            dir.path(),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(why) && err.contains(keystore.to_str().unwrap()),
            "{err}"
        );
        assert!(!dir.path().join("data").exists(), "format wrote nothing");
        // A directory formatted before the key material went bad: start refuses it.
        format_node(
            common::write_config(dir.path(), port, "").to_str().unwrap(),
            dir.path(),
        );
        common::write_config(dir.path(), port, &extra);
        let err = start_must_fail(&["start", "-c", config], dir.path());
        assert!(err.contains(why), "{}: {err}", keystore.display());
        assert!(err.contains(keystore.to_str().unwrap()), "{err}");
    }
    // A JKS keystore (Kafka's default type) is refused by the config, naming the key.
    let config = common::write_config(
        dir.path(),
        port,
        "listener.security.protocol.map=CONTROLLER:SSL\nssl.keystore.location=/k.jks\n",
    );
    let err = start_must_fail(&["start", "-c", config.to_str().unwrap()], dir.path());
    assert!(err.contains("ssl.keystore.type"), "{err}");
}

#[test]
fn a_certificate_must_name_the_host_dialled_unless_identification_is_off() {
    let dir = TempDir::new("tls-hostname");
    let (trusted, _) = two_pkis(dir.path());
    let port = common::free_port();
    // Every loopback address reaches this node; its certificate names 127.0.0.1 and localhost.
    let extra = format!(
        "listeners=CONTROLLER://0.0.0.0:{port}\nadvertised.listeners=CONTROLLER://127.0.0.1:{port}\n\
         listener.security.protocol.map=CONTROLLER:SSL\n{}",
        tls_lines(&trusted, "node-1.pem")
    );
    let config = common::write_config(dir.path(), port, &extra);
    format_node(config.to_str().unwrap(), dir.path());
    let _node = Node::start(&["start", "-c", config.to_str().unwrap()], dir.path(), port);
    let client = |name: &str, extra: &str| {
        client_config(
            dir.path(),
            name,
            &format!(
                "security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={}\n{extra}",
                trusted.join("ca.pem").display()
            ),
        )
    };
    let checking = client("checking.properties", "");
    let unchecked = client(
        "unchecked.properties",
        "ssl.endpoint.identification.algorithm=\n",
    );
    let (ok, text) = describe(&format!("127.0.0.2:{port}"), Some(&checking), dir.path());
    assert!(
        !ok,
        "a certificate for 127.0.0.1 was accepted for 127.0.0.2: {text}"
    );
    assert!(text.contains("not valid for name"), "{text}");
    // Without the check the bootstrap connection to 127.0.0.2 passes (the active controller
    // is then dialled where it advertises itself, 127.0.0.1).
    let (ok, text) = describe(&format!("127.0.0.2:{port}"), Some(&unchecked), dir.path());
    assert!(ok, "{text}");
    let (ok, text) = describe(&format!("localhost:{port}"), Some(&checking), dir.path());
    assert!(ok, "{text}");
}
