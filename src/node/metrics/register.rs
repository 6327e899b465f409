//! The series a node exports, registered under their names and help texts: Kafka's raft
//! gauges as Kafka names them, and ringraft's own.

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{FloatGauge, KafkaGauges, Metrics};

/// Kafka's raft gauges (`kafka_server_raft_metrics_*`), as Kafka names and explains them.
pub(super) fn register_kafka(registry: &mut Registry, kafka: &KafkaGauges) {
    let k = |name: &str| format!("kafka_server_raft_metrics_{name}");
    let gauges: [(&str, &str, &Gauge); 9] = [
        (
            "current_leader",
            "The leader's id; -1 when unknown",
            &kafka.current_leader,
        ),
        ("current_epoch", "The current epoch", &kafka.current_epoch),
        (
            "current_vote",
            "The id voted for in this epoch; -1 when none",
            &kafka.current_vote,
        ),
        (
            "high_watermark",
            "The high watermark; -1 when unknown",
            &kafka.high_watermark,
        ),
        (
            "log_end_offset",
            "The log's end offset",
            &kafka.log_end_offset,
        ),
        (
            "log_end_epoch",
            "The epoch of the log's last batch",
            &kafka.log_end_epoch,
        ),
        (
            "number_of_voters",
            "Voters in the voter set",
            &kafka.number_of_voters,
        ),
        (
            "number_of_observers",
            "Observers fetching from this leader",
            &kafka.number_of_observers,
        ),
        (
            "uncommitted_voter_change",
            "1 while a voter change is not committed",
            &kafka.uncommitted_voter_change,
        ),
    ];
    for (name, help, gauge) in gauges {
        registry.register(k(name), help, gauge.clone());
    }
    let floats: [(&str, &str, &FloatGauge); 7] = [
        (
            "commit_latency_avg",
            "Average append-to-commit latency (ms)",
            &kafka.commit_latency_avg,
        ),
        (
            "commit_latency_max",
            "Largest append-to-commit latency (ms)",
            &kafka.commit_latency_max,
        ),
        (
            "election_latency_avg",
            "Average election latency (ms)",
            &kafka.election_latency_avg,
        ),
        (
            "election_latency_max",
            "Largest election latency (ms)",
            &kafka.election_latency_max,
        ),
        (
            "append_records_rate",
            "Records appended by this leader per second",
            &kafka.append_records_rate,
        ),
        (
            "fetch_records_rate",
            "Records fetched from the leader per second",
            &kafka.fetch_records_rate,
        ),
        (
            "poll_idle_ratio_avg",
            "Fraction of time the raft loop waits for input",
            &kafka.poll_idle_ratio_avg,
        ),
    ];
    for (name, help, gauge) in floats {
        registry.register(k(name), help, gauge.clone());
    }
    registry.register(
        k("current_state_info"),
        "1 for this replica's state (the current_state label)",
        kafka.current_state.clone(),
    );
}

/// ringraft's own series (`ringraft_*`).
pub(super) fn register_ringraft(r: &mut Registry, m: &Metrics) {
    r.register(
        "ringraft_log_flush_seconds",
        "A log flush: the queued appends written, then fdatasync",
        m.flush_seconds.clone(),
    );
    r.register(
        "ringraft_log_write_seconds",
        "Applying one Ready's log operations before its flush",
        m.write_seconds.clone(),
    );
    r.register(
        "ringraft_append_commit_seconds",
        "On the leader: an application append until committed",
        m.commit_seconds.clone(),
    );
    r.register(
        "ringraft_commit_propagation_seconds",
        "A batch's timestamp until this node delivered it as committed",
        m.propagation_seconds.clone(),
    );
    r.register(
        "ringraft_peer_round_trip_seconds",
        "A request to a peer until its answer (not the long-polling Fetch)",
        m.peer_round_trip_seconds.clone(),
    );
    r.register(
        "ringraft_requests",
        "Requests received, by API",
        m.requests.clone(),
    );
    r.register(
        "ringraft_requests_by_version",
        "Requests received, by API and version",
        m.requests_by_version.clone(),
    );
    r.register(
        "ringraft_peer_requests",
        "Requests sent to peers and answered, by API and version",
        m.peer_requests.clone(),
    );
    r.register(
        "ringraft_fetch_session_requests",
        "Fetch session requests sent to leader nodes",
        m.session_requests.clone(),
    );
    r.register(
        "ringraft_fetch_session_requests_pipelined",
        "Fetch session requests sent while an earlier one of the same session was unanswered",
        m.session_requests_pipelined.clone(),
    );
    r.register(
        "ringraft_recovery_bytes",
        "Bytes this node's group leaders served to followers behind the committed tail",
        m.recovery_bytes.clone(),
    );
    r.register(
        "ringraft_recovery_fetches_deferred",
        "Fetches of followers behind the committed tail that waited for the recovery budget",
        m.recovery_deferred.clone(),
    );
    r.register(
        "ringraft_request_bytes",
        "Request bytes received, by API",
        m.request_bytes.clone(),
    );
    r.register(
        "ringraft_response_bytes",
        "Response bytes sent, by API",
        m.response_bytes.clone(),
    );
    r.register(
        "ringraft_shard_busy_ratio",
        "Fraction of the last second the shard's executor ran tasks or polled I/O",
        m.shard_busy_ratio.clone(),
    );
    r.register(
        "ringraft_shard_tasks",
        "Tasks the shard ran",
        m.shard_tasks.clone(),
    );
    r.register(
        "ringraft_shard_ring_reads",
        "File reads the shard's rings completed",
        m.shard_ring_reads.clone(),
    );
    r.register(
        "ringraft_shard_ring_writes",
        "File writes the shard's rings completed",
        m.shard_ring_writes.clone(),
    );
    r.register(
        "ringraft_shard_ring_read_bytes",
        "Bytes the shard's rings read",
        m.shard_ring_read_bytes.clone(),
    );
    r.register(
        "ringraft_shard_ring_written_bytes",
        "Bytes the shard's rings wrote",
        m.shard_ring_written_bytes.clone(),
    );
    r.register(
        "ringraft_shard_stalls",
        "Times the shard's 100 ms probe timer fired more than 10 ms late (a task held it)",
        m.stalls.clone(),
    );
    r.register(
        "ringraft_ready",
        "1 while this /readyz check passes (label check: storage, leader, member, fsync), 0 \
         while it fails",
        m.ready.clone(),
    );
    r.register(
        "ringraft_build_info",
        "1, labelled with the running ringraft's version",
        m.build_info.clone(),
    );
    r.register(
        "kafka_server_node_metrics_maximum_supported_level",
        "The highest level of this feature the node supports (KIP-1180)",
        m.max_supported_level.clone(),
    );
    r.register(
        "kafka_server_node_metrics_minimum_supported_level",
        "The lowest level of this feature the node supports (KIP-1180)",
        m.min_supported_level.clone(),
    );
    r.register(
        "kafka_server_metadataloader_finalizedlevel",
        "The finalized level of this feature (KIP-1180): metadata.version and kraft.version \
         always, the others while finalized above 0",
        m.finalized_level.clone(),
    );
    r.register(
        "ringraft_data_dir_ring_info",
        "The kind of ring serving each data directory",
        m.data_dir_ring.clone(),
    );
    register_groups(r, m);
}

/// The Raft groups' series (issue 25): bounded by the shards, plus one info series per group.
fn register_groups(r: &mut Registry, m: &Metrics) {
    r.register(
        "ringraft_group_home_info",
        "The shard each hosted Raft group is homed on",
        m.group_home.clone(),
    );
    r.register(
        "ringraft_shard_groups",
        "Raft groups homed on the shard besides __cluster_metadata-0",
        m.shard_groups.clone(),
    );
    r.register(
        "ringraft_shard_groups_leading",
        "Of the groups homed on the shard, those this node leads",
        m.shard_groups_leading.clone(),
    );
    r.register(
        "ringraft_shard_group_campaigns",
        "Groups of the shard campaigning now (at most ringraft's bound per shard)",
        m.shard_group_campaigns.clone(),
    );
    r.register(
        "ringraft_shard_group_campaigns_refused",
        "Election timers of the shard's groups that found its campaign bound full and waited",
        m.shard_group_campaigns_refused.clone(),
    );
    super::groups::register(r, &m.group_histograms, &m.group_gauges);
}
