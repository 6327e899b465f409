//! What a node shows of itself on `/metrics` (`node::admin_http`), in Prometheus' format.
//!
//! Two families of series:
//! - `kafka_server_raft_metrics_*`: every attribute of Kafka's `raft-metrics` group, under the
//!   names the Strimzi metrics reporter gives them (what Kafka's KRaft dashboards query). The
//!   windowed ones (`*_avg`, `*_max`, `*_rate`) are computed as Kafka's `Sensor`s are: two
//!   samples of 30 s each, so a value covers the last 30–60 s.
//! - `ringraft_*`: this node's own, with histogram buckets from 25 µs (our fsyncs take
//!   140–400 µs; etcd's buckets start at 1 ms and would put them all in one); among them
//!   `ringraft_ready{check}`, one gauge per `/readyz` check, which the shipped alerts use, and
//!   `ringraft_build_info`.
//! - `process_*`: what every Prometheus client library exports (`process.rs`).
//!
//! `Metrics` is shared by every shard (atomics); `RaftStats` lives on the raft shard and is fed
//! by the executor; the Kafka gauges are set from the core when `/metrics` is read.

mod groups;
mod process;
mod register;
mod shard;
mod window;

pub use groups::{shown, GroupGauges, GroupReading, LoopMetrics};
pub use shard::sample_shard;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};
pub use window::{RaftStats, Window};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::protocol::api_versions::FeatureState;
use crate::raft::Raft;

type Labels = Vec<(String, String)>;
type FloatGauge = Gauge<f64, AtomicU64>;

/// Kafka's sample window: two samples of this long.
pub const SAMPLE_MS: u64 = 30_000;

/// Latency buckets in seconds: 25 µs × 2^k, up to about 3.3 s.
fn latency_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(25e-6, 2.0, 18)
}

/// The Kafka `raft-metrics` gauges.
#[derive(Default)]
struct KafkaGauges {
    current_leader: Gauge,
    current_epoch: Gauge,
    current_vote: Gauge,
    high_watermark: Gauge,
    log_end_offset: Gauge,
    log_end_epoch: Gauge,
    commit_latency_avg: FloatGauge,
    commit_latency_max: FloatGauge,
    election_latency_avg: FloatGauge,
    election_latency_max: FloatGauge,
    append_records_rate: FloatGauge,
    fetch_records_rate: FloatGauge,
    poll_idle_ratio_avg: FloatGauge,
    number_of_voters: Gauge,
    number_of_observers: Gauge,
    uncommitted_voter_change: Gauge,
    current_state: Family<Labels, Gauge>,
}

/// Every series of one node. Cheap to share (`Arc`); every field is atomic.
pub struct Metrics {
    registry: Registry,
    /// Each API's request counters by version, looked up in their families once: a request
    /// then costs four atomic adds, not four label lookups with their strings.
    served: RwLock<HashMap<(&'static str, i16), ApiCounters>>,
    /// The same for requests sent to peers.
    sent: RwLock<HashMap<(&'static str, i16), Counter>>,
    kafka: KafkaGauges,
    /// A log flush (the writes of the queued appends, then fdatasync).
    pub flush_seconds: Histogram,
    /// Applying one Ready's log operations (queueing appends, truncations, snapshot installs).
    pub write_seconds: Histogram,
    /// On the leader: an application append until it is committed.
    pub commit_seconds: Histogram,
    /// On every node: a batch's timestamp (its writer's clock) until this node delivered it
    /// as committed.
    pub propagation_seconds: Histogram,
    /// A request to a peer until its answer (Vote, BeginQuorumEpoch, EndQuorumEpoch,
    /// FetchSnapshot, the voter-change probes; not the long-polling Fetch).
    pub peer_round_trip_seconds: Histogram,
    /// Requests and bytes in and out, by API.
    pub requests: Family<Labels, Counter>,
    /// Requests received, and sent to peers, by API and version (which version a peer
    /// negotiated: Fetch v18 between Kafka 4.4 and ringraft, say).
    pub requests_by_version: Family<Labels, Counter>,
    pub peer_requests: Family<Labels, Counter>,
    /// Fetch session requests sent, and those sent while an earlier request of the same
    /// session was unanswered (`node::fetch_sessions`): an idle node sends none of the latter.
    pub session_requests: Counter,
    pub session_requests_pipelined: Counter,
    /// Bytes served to followers behind the committed tail, and the fetches that waited for
    /// the recovery budget (`node::recovery_budget`).
    pub recovery_bytes: Counter,
    pub recovery_deferred: Counter,
    pub request_bytes: Family<Labels, Counter>,
    pub response_bytes: Family<Labels, Counter>,
    /// Per shard, sampled every second: busy ratio, tasks run, ring reads and writes.
    pub shard_busy_ratio: Family<Labels, FloatGauge>,
    pub shard_tasks: Family<Labels, Counter>,
    pub shard_ring_reads: Family<Labels, Counter>,
    pub shard_ring_writes: Family<Labels, Counter>,
    pub shard_ring_read_bytes: Family<Labels, Counter>,
    pub shard_ring_written_bytes: Family<Labels, Counter>,
    /// The ring serving each data directory (1 per directory, labelled).
    pub data_dir_ring: Family<Labels, Gauge>,
    /// The shard (and its CPU) each hosted Raft group is homed on (1 per group, labelled).
    pub group_home: Family<Labels, Gauge>,
    /// Per raft shard: the groups homed there besides group 0, and how many of them this
    /// node leads (counted every `groups::GROUPS_PASS`; per-shard, so bounded whatever the
    /// number of groups).
    pub shard_groups: Family<Labels, Gauge>,
    pub shard_groups_leading: Family<Labels, Gauge>,
    /// Per raft shard: its groups campaigning now, and the timer campaigns its bound held
    /// back (`raft::campaigns`; sampled every `groups::GROUPS_PASS`).
    pub shard_group_campaigns: Family<Labels, Gauge>,
    pub shard_group_campaigns_refused: Family<Labels, Counter>,
    /// Per raft shard, the latency histograms of its groups together (`metrics::groups`).
    group_histograms: groups::GroupHistograms,
    /// Per group, for the busiest groups and those a scrape names.
    group_gauges: groups::GroupGaugeFamilies,
    /// Per shard: times its probe timer (every `STALL_PROBE_MS`) fired more than `STALL_MS`
    /// late, so a task held the shard that long.
    pub stalls: Family<Labels, Counter>,
    /// 1 while a `/readyz` check passes, 0 while it fails, labelled by check.
    ready: Family<Labels, Gauge>,
    /// Always 1, labelled with the version.
    build_info: Family<Labels, Gauge>,
    /// KIP-1180: each feature's supported range (Kafka's `node-metrics` group) and finalized
    /// level (Kafka's Yammer `MetadataLoader` `FinalizedLevel`), under the names the Strimzi
    /// reporter gives them. Both are labelled `feature_name` with the feature's own name:
    /// Kafka tags the Yammer gauge `featureName=metadataVersion`, but Prometheus' lint
    /// (`promtool check metrics`) refuses camel-case label names, and one label on both lets a
    /// query join them.
    max_supported_level: Family<Labels, Gauge>,
    min_supported_level: Family<Labels, Gauge>,
    finalized_level: Family<Labels, Gauge>,
}

/// One `/readyz` check's outcome, as `ringraft_ready` shows it.
pub struct Readiness<'a> {
    pub check: &'a str,
    pub ready: bool,
}

/// The stall probe's period, and the lateness that counts as a stall. glommio's own stall
/// detector cannot feed a counter: 0.9 does not export the `StallDetection` type a handler's
/// method takes, so only its default handler (which logs backtraces) can be used.
pub const STALL_PROBE_MS: u64 = 100;
pub const STALL_MS: u64 = 10;

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let kafka = KafkaGauges::default();
        let mut registry = Registry::default();
        register::register_kafka(&mut registry, &kafka);
        let histogram = || Histogram::new(latency_buckets());
        let mut metrics = Metrics {
            kafka,
            flush_seconds: histogram(),
            write_seconds: histogram(),
            commit_seconds: histogram(),
            propagation_seconds: histogram(),
            peer_round_trip_seconds: histogram(),
            requests: Family::default(),
            requests_by_version: Family::default(),
            peer_requests: Family::default(),
            session_requests: Counter::default(),
            session_requests_pipelined: Counter::default(),
            recovery_bytes: Counter::default(),
            recovery_deferred: Counter::default(),
            request_bytes: Family::default(),
            response_bytes: Family::default(),
            shard_busy_ratio: Family::default(),
            shard_tasks: Family::default(),
            shard_ring_reads: Family::default(),
            shard_ring_writes: Family::default(),
            shard_ring_read_bytes: Family::default(),
            shard_ring_written_bytes: Family::default(),
            data_dir_ring: Family::default(),
            group_home: Family::default(),
            shard_groups: Family::default(),
            shard_groups_leading: Family::default(),
            shard_group_campaigns: Family::default(),
            shard_group_campaigns_refused: Family::default(),
            group_histograms: groups::GroupHistograms::default(),
            group_gauges: groups::GroupGaugeFamilies::default(),
            stalls: Family::default(),
            ready: Family::default(),
            build_info: Family::default(),
            max_supported_level: Family::default(),
            min_supported_level: Family::default(),
            finalized_level: Family::default(),
            registry: Registry::default(),
            served: RwLock::default(),
            sent: RwLock::default(),
        };
        for spec in crate::protocol::api_versions::SUPPORTED_FEATURES {
            let labels = vec![("feature_name".to_string(), spec.name.to_string())];
            metrics
                .max_supported_level
                .get_or_create(&labels)
                .set(i64::from(spec.max_level));
            metrics
                .min_supported_level
                .get_or_create(&labels)
                .set(i64::from(spec.min_level));
        }
        metrics
            .build_info
            .get_or_create(&vec![(
                "version".to_string(),
                env!("CARGO_PKG_VERSION").to_string(),
            )])
            .set(1);
        register::register_ringraft(&mut registry, &metrics);
        // Every served API shows from the start, at zero, so a dashboard and an alert see
        // the series before the first request.
        for spec in crate::protocol::apis::SERVED {
            let labels = vec![("api".to_string(), spec.key.name().to_string())];
            let _ = metrics.requests.get_or_create(&labels);
            let _ = metrics.request_bytes.get_or_create(&labels);
            let _ = metrics.response_bytes.get_or_create(&labels);
        }
        metrics.registry = registry;
        metrics
    }

    /// Counts one request of `api` at `version` (`bytes` long) and its response (`answered`
    /// bytes).
    pub fn request(&self, api: &'static str, version: i16, bytes: usize, answered: usize) {
        let key = (api, version);
        if let Some(c) = read(&self.served).get(&key) {
            c.count(bytes, answered);
            return;
        }
        let labels = vec![("api".to_string(), api.to_string())];
        let c = ApiCounters {
            requests: self.requests.get_or_create(&labels).clone(),
            by_version: (self.requests_by_version)
                .get_or_create(&versioned(api, version))
                .clone(),
            request_bytes: self.request_bytes.get_or_create(&labels).clone(),
            response_bytes: self.response_bytes.get_or_create(&labels).clone(),
        };
        c.count(bytes, answered);
        write(&self.served).insert(key, c);
    }

    /// Counts one request sent to a peer and answered.
    pub fn sent(&self, api: &'static str, version: i16) {
        let key = (api, version);
        if let Some(c) = read(&self.sent).get(&key) {
            c.inc();
            return;
        }
        let c = (self.peer_requests)
            .get_or_create(&versioned(api, version))
            .clone();
        c.inc();
        write(&self.sent).insert(key, c);
    }

    /// The exposition: the Kafka gauges set from `raft` and `stats` first, the readiness
    /// gauges from `ready` (the `/readyz` checks just made), then the process series.
    pub fn render(
        &self,
        raft: &Raft,
        stats: &RaftStats,
        now_ms: u64,
        ready: &[Readiness<'_>],
        features: &FeatureState,
    ) -> String {
        self.set_finalized_levels(features);
        for r in ready {
            self.ready
                .get_or_create(&vec![("check".to_string(), r.check.to_string())])
                .set(i64::from(r.ready));
        }
        let k = &self.kafka;
        k.current_leader.set(raft.leader_id().map_or(-1, i64::from));
        k.current_epoch.set(i64::from(raft.epoch()));
        k.current_vote.set(raft.voted_id().map_or(-1, i64::from));
        k.high_watermark.set(raft.high_watermark().unwrap_or(-1));
        k.log_end_offset.set(raft.log_end_offset());
        k.log_end_epoch
            .set(i64::from(raft.log_view().last_fetched_epoch()));
        k.number_of_voters.set(raft.voters().len() as i64);
        let observers = raft.describe_quorum().map_or(0, |d| d.observers.len());
        k.number_of_observers.set(observers as i64);
        k.uncommitted_voter_change
            .set(i64::from(raft.voter_change_pending()));
        let commit = stats.commit_ms.borrow();
        k.commit_latency_avg.set(commit.avg(now_ms));
        k.commit_latency_max.set(commit.max(now_ms));
        let election = stats.election_ms.borrow();
        k.election_latency_avg.set(election.avg(now_ms));
        k.election_latency_max.set(election.max(now_ms));
        k.append_records_rate
            .set(stats.appended_records.borrow().rate(now_ms));
        k.fetch_records_rate
            .set(stats.fetched_records.borrow().rate(now_ms));
        k.poll_idle_ratio_avg
            .set(stats.poll_idle.borrow().avg(now_ms));
        k.current_state.clear();
        let state = kafka_state(raft).to_string();
        k.current_state
            .get_or_create(&vec![("current_state".to_string(), state)])
            .set(1);
        let mut out = String::new();
        let _ = encode(&mut out, &self.registry);
        let mut text = to_text_format(&out);
        text.push_str(&process::render());
        text
    }
}

impl Metrics {
    /// KIP-1180's FinalizedLevel, as Kafka's metadata loader records it: metadata.version and
    /// kraft.version always, every other feature while finalized above level 0.
    fn set_finalized_levels(&self, features: &FeatureState) {
        use crate::protocol::api_versions::{
            KRAFT_VERSION_FEATURE, METADATA_VERSION_FEATURE, SUPPORTED_FEATURES,
        };
        self.finalized_level.clear();
        for (spec, level) in SUPPORTED_FEATURES.iter().zip(features.levels) {
            let always =
                spec.name == METADATA_VERSION_FEATURE || spec.name == KRAFT_VERSION_FEATURE;
            if always || level > 0 {
                let labels = vec![("feature_name".to_string(), spec.name.to_string())];
                self.finalized_level
                    .get_or_create(&labels)
                    .set(i64::from(level));
            }
        }
    }
}

/// The content type of `Metrics::render`'s output.
pub const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// prometheus-client writes OpenMetrics; this is Prometheus' text format 0.0.4, which every
/// scraper and `promtool check metrics` read: a counter's HELP and TYPE name its `_total`
/// samples, and there is no `# EOF` or `# UNIT`.
fn to_text_format(open_metrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = open_metrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(open_metrics.len() + 64 * counters.len());
    for line in open_metrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (*p, rest)));
        match meta {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                if counters.contains(name) {
                    out.push_str(&format!("{prefix}{name}_total {tail}\n"));
                } else {
                    out.push_str(line);
                    out.push('\n');
                }
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// Kafka's names for the replica states (`QuorumState`): a voter that voted in this epoch and
/// waits is "voted", a follower that cannot vote is an "observer".
fn kafka_state(raft: &Raft) -> &'static str {
    match raft.state_name() {
        "Leader" => "leader",
        "Candidate" => "candidate",
        "Prospective" => "prospective",
        "Resigned" => "resigned",
        "Follower" if !raft.is_voter() => "observer",
        "Follower" => "follower",
        "Unattached" if raft.voted_id().is_some() => "voted",
        _ => "unattached",
    }
}

/// Labels of one shard.
pub fn shard_labels(index: usize) -> Labels {
    vec![("shard".to_string(), index.to_string())]
}

/// One API's request counters at one version, sharing their values with the families'
/// series.
struct ApiCounters {
    requests: Counter,
    by_version: Counter,
    request_bytes: Counter,
    response_bytes: Counter,
}

impl ApiCounters {
    fn count(&self, bytes: usize, answered: usize) {
        self.requests.inc();
        self.by_version.inc();
        self.request_bytes.inc_by(bytes as u64);
        self.response_bytes.inc_by(answered as u64);
    }
}

/// A lookup table's read side; a panic elsewhere while it was written leaves it usable (it
/// only ever gains whole entries).
fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|p| p.into_inner())
}

fn versioned(api: &str, version: i16) -> Labels {
    vec![
        ("api".to_string(), api.to_string()),
        ("version".to_string(), version.to_string()),
    ]
}

/// A shared handle to one node's metrics.
pub type SharedMetrics = Arc<Metrics>;

impl crate::net::server::ServerProbe for Metrics {
    fn request(&self, api: &'static str, version: i16, bytes: usize, answered: usize) {
        Metrics::request(self, api, version, bytes, answered)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn finalized_levels_follow_kafkas_loader() {
        use crate::protocol::api_versions::{feature_index, FeatureState};
        let m = super::Metrics::new();
        let mut features = FeatureState::default();
        features.levels[feature_index("metadata.version").unwrap()] = 33;
        features.levels[feature_index("group.version").unwrap()] = 1;
        let text = m.render(
            &test_core(),
            &super::RaftStats::default(),
            0,
            &[],
            &features,
        );
        let has = |line: &str| text.lines().any(|l| l == line);
        assert!(has(
            "kafka_server_metadataloader_finalizedlevel{feature_name=\"metadata.version\"} 33"
        ));
        assert!(has(
            "kafka_server_metadataloader_finalizedlevel{feature_name=\"kraft.version\"} 0"
        ));
        assert!(has(
            "kafka_server_metadataloader_finalizedlevel{feature_name=\"group.version\"} 1"
        ));
        assert!(
            !text.contains("finalizedlevel{feature_name=\"share.version\"}"),
            "not finalized: no series"
        );
        assert!(has(
            "kafka_server_node_metrics_maximum_supported_level{feature_name=\"metadata.version\"} 33"
        ));
        assert!(has(
            "kafka_server_node_metrics_minimum_supported_level{feature_name=\"metadata.version\"} 7"
        ));
    }

    #[test]
    fn the_exposition_is_prometheus_text_format() {
        let m = super::Metrics::new();
        // The second of each goes through the counters kept from the first.
        m.request("Fetch", 18, 100, 200);
        m.request("Fetch", 18, 50, 10);
        m.sent("Vote", 2);
        m.sent("Vote", 2);
        let core = test_core();
        let text = m.render(
            &core,
            &super::RaftStats::default(),
            0,
            &[],
            &crate::protocol::api_versions::FeatureState::default(),
        );
        assert!(text.contains("# TYPE ringraft_requests_total counter\n"));
        assert!(text.contains("ringraft_requests_total{api=\"Fetch\"} 2\n"));
        assert!(
            text.contains("ringraft_requests_by_version_total{api=\"Fetch\",version=\"18\"} 2\n")
        );
        assert!(text.contains("ringraft_peer_requests_total{api=\"Vote\",version=\"2\"} 2\n"));
        assert!(text.contains("ringraft_request_bytes_total{api=\"Fetch\"} 150\n"));
        assert!(text.contains("ringraft_response_bytes_total{api=\"Fetch\"} 210\n"));
        assert!(!text.contains("# EOF"));
        assert!(text.contains(
            "kafka_server_raft_metrics_current_state_info{current_state=\"unattached\"} 1"
        ));
    }

    fn test_core() -> crate::raft::Raft {
        crate::raft::core::testing::core(1, &[1, 2, 3])
    }
}
