//! The Raft groups' series (issue 25), bounded whatever the number of groups:
//! - per raft shard, the latency histograms of all its groups but group 0 together
//!   (`ringraft_groups_*_seconds{shard}`), fed by each group's executor through `LoopMetrics`;
//! - per group, four gauges (`ringraft_group_{leader,epoch,high_watermark,log_end_offset}`)
//!   for the busiest `top` groups only, plus any group a scrape names (`/metrics?group=T-P`).
//!   "Busiest" is the most offsets committed over the last `groups::GROUPS_PASS`.
//!
//! Each group's executor stores its gauges in a `GroupGauges` (atomics) once per turn; the
//! admin listener, on another shard, reads them when scraped.

use std::sync::atomic::{AtomicI64, Ordering};

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::{latency_buckets, shard_labels, Labels, Metrics};
use crate::raft::Raft;

/// A family of latency histograms, one per label set.
pub type HistogramFamily = Family<Labels, Histogram, fn() -> Histogram>;

fn new_histogram() -> Histogram {
    Histogram::new(latency_buckets())
}

/// The histograms one executor feeds: the node's own for group 0, its shard's aggregate for
/// every other group (`Metrics::shard_group_loop`).
#[derive(Clone)]
pub struct LoopMetrics {
    pub flush_seconds: Histogram,
    pub write_seconds: Histogram,
    pub commit_seconds: Histogram,
    pub propagation_seconds: Histogram,
    pub peer_round_trip_seconds: Histogram,
}

/// The per-shard histograms of the groups (`ringraft_groups_*_seconds{shard}`).
pub struct GroupHistograms {
    flush: HistogramFamily,
    write: HistogramFamily,
    commit: HistogramFamily,
    propagation: HistogramFamily,
    peer_round_trip: HistogramFamily,
}

impl Default for GroupHistograms {
    fn default() -> Self {
        let family = || HistogramFamily::new_with_constructor(new_histogram as fn() -> Histogram);
        GroupHistograms {
            flush: family(),
            write: family(),
            commit: family(),
            propagation: family(),
            peer_round_trip: family(),
        }
    }
}

/// The per-group gauges, filled at each scrape for the groups it shows.
#[derive(Default)]
pub struct GroupGaugeFamilies {
    leader: Family<Labels, Gauge>,
    epoch: Family<Labels, Gauge>,
    high_watermark: Family<Labels, Gauge>,
    log_end_offset: Family<Labels, Gauge>,
}

/// One group's gauges, stored by its executor once per turn. -1 until known.
#[derive(Debug)]
pub struct GroupGauges {
    leader: AtomicI64,
    epoch: AtomicI64,
    high_watermark: AtomicI64,
    log_end_offset: AtomicI64,
    /// The high watermark at the last groups pass, and the offsets committed since the pass
    /// before it (what ranks the busiest groups).
    passed_at: AtomicI64,
    recent: AtomicI64,
}

impl Default for GroupGauges {
    fn default() -> Self {
        GroupGauges {
            leader: AtomicI64::new(-1),
            epoch: AtomicI64::new(-1),
            high_watermark: AtomicI64::new(-1),
            log_end_offset: AtomicI64::new(-1),
            passed_at: AtomicI64::new(-1),
            recent: AtomicI64::new(0),
        }
    }
}

/// What a scrape shows of one group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupReading {
    pub leader: i64,
    pub epoch: i64,
    pub high_watermark: i64,
    pub log_end_offset: i64,
    /// Offsets committed over the last groups pass.
    pub recent: i64,
}

impl GroupGauges {
    /// Stores what `raft` says now (relaxed: each value stands alone).
    pub fn store(&self, raft: &Raft) {
        let r = Ordering::Relaxed;
        self.leader.store(raft.leader_id().map_or(-1, i64::from), r);
        self.epoch.store(i64::from(raft.epoch()), r);
        self.high_watermark
            .store(raft.high_watermark().unwrap_or(-1), r);
        self.log_end_offset.store(raft.log_end_offset(), r);
    }

    /// At each groups pass: the offsets committed since the previous pass become `recent`.
    pub fn pass(&self) {
        let hw = self.high_watermark.load(Ordering::Relaxed);
        let before = self.passed_at.swap(hw, Ordering::Relaxed);
        let recent = if before < 0 || hw < before {
            0
        } else {
            hw - before
        };
        self.recent.store(recent, Ordering::Relaxed);
    }

    /// Tests only: a group whose executor committed up to `hw`.
    #[cfg(test)]
    pub fn set_high_watermark(&self, hw: i64) {
        self.high_watermark.store(hw, Ordering::Relaxed);
    }

    pub fn read(&self) -> GroupReading {
        let r = Ordering::Relaxed;
        GroupReading {
            leader: self.leader.load(r),
            epoch: self.epoch.load(r),
            high_watermark: self.high_watermark.load(r),
            log_end_offset: self.log_end_offset.load(r),
            recent: self.recent.load(r),
        }
    }
}

/// The groups a scrape shows: the `top` busiest of `readings` (most offsets committed over the
/// last pass, ties by name), then every one `asked` names that is not among them. Each is
/// (its name `topic-partition`, its home shard, its reading).
pub fn shown(
    mut readings: Vec<(String, usize, GroupReading)>,
    top: usize,
    asked: &[&str],
) -> Vec<(String, usize, GroupReading)> {
    readings.sort_by(|a, b| b.2.recent.cmp(&a.2.recent).then_with(|| a.0.cmp(&b.0)));
    let mut shown = Vec::with_capacity(top + asked.len());
    for (i, r) in readings.into_iter().enumerate() {
        if i < top || asked.contains(&r.0.as_str()) {
            shown.push(r);
        }
    }
    shown
}

impl Metrics {
    /// The histograms group 0's executor feeds: the node's own.
    pub fn group_0_loop(&self) -> LoopMetrics {
        LoopMetrics {
            flush_seconds: self.flush_seconds.clone(),
            write_seconds: self.write_seconds.clone(),
            commit_seconds: self.commit_seconds.clone(),
            propagation_seconds: self.propagation_seconds.clone(),
            peer_round_trip_seconds: self.peer_round_trip_seconds.clone(),
        }
    }

    /// The histograms every other group homed on `shard` feeds: the shard's aggregate.
    pub fn shard_group_loop(&self, shard: usize) -> LoopMetrics {
        let labels = shard_labels(shard);
        let h = &self.group_histograms;
        LoopMetrics {
            flush_seconds: h.flush.get_or_create_owned(&labels),
            write_seconds: h.write.get_or_create_owned(&labels),
            commit_seconds: h.commit.get_or_create_owned(&labels),
            propagation_seconds: h.propagation.get_or_create_owned(&labels),
            peer_round_trip_seconds: h.peer_round_trip.get_or_create_owned(&labels),
        }
    }

    /// Replaces the per-group gauges with `groups` (from `shown`), before an exposition.
    pub fn set_group_readings(&self, groups: &[(String, usize, GroupReading)]) {
        let g = &self.group_gauges;
        let families = [&g.leader, &g.epoch, &g.high_watermark, &g.log_end_offset];
        for f in families {
            f.clear();
        }
        for (name, shard, reading) in groups {
            let labels = vec![
                ("group".to_string(), name.clone()),
                ("shard".to_string(), shard.to_string()),
            ];
            g.leader.get_or_create(&labels).set(reading.leader);
            g.epoch.get_or_create(&labels).set(reading.epoch);
            g.high_watermark
                .get_or_create(&labels)
                .set(reading.high_watermark);
            g.log_end_offset
                .get_or_create(&labels)
                .set(reading.log_end_offset);
        }
    }
}

/// Registers the groups' histograms and gauges.
pub(super) fn register(r: &mut Registry, h: &GroupHistograms, g: &GroupGaugeFamilies) {
    let histograms: [(&str, &str, &HistogramFamily); 5] = [
        (
            "ringraft_groups_flush_seconds",
            "A log flush of a group homed on the shard (every group but __cluster_metadata-0)",
            &h.flush,
        ),
        (
            "ringraft_groups_write_seconds",
            "Applying one Ready's log operations, for the shard's groups",
            &h.write,
        ),
        (
            "ringraft_groups_commit_seconds",
            "On a leader of one of the shard's groups: an append until it is committed",
            &h.commit,
        ),
        (
            "ringraft_groups_propagation_seconds",
            "A batch of one of the shard's groups: its timestamp until this node delivered it",
            &h.propagation,
        ),
        (
            "ringraft_groups_peer_round_trip_seconds",
            "A request of one of the shard's groups to a peer until its answer",
            &h.peer_round_trip,
        ),
    ];
    for (name, help, family) in histograms {
        r.register(name, help, family.clone());
    }
    let gauges: [(&str, &str, &Family<Labels, Gauge>); 4] = [
        (
            "ringraft_group_leader",
            "A group's leader id, -1 when unknown (the busiest groups, and those a scrape names)",
            &g.leader,
        ),
        ("ringraft_group_epoch", "A group's epoch", &g.epoch),
        (
            "ringraft_group_high_watermark",
            "A group's high watermark, -1 when unknown",
            &g.high_watermark,
        ),
        (
            "ringraft_group_log_end_offset",
            "A group's log end offset on this node",
            &g.log_end_offset,
        ),
    ];
    for (name, help, family) in gauges {
        r.register(name, help, family.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(recent: i64) -> GroupReading {
        GroupReading {
            leader: 1,
            epoch: 1,
            high_watermark: 10,
            log_end_offset: 10,
            recent,
        }
    }

    #[test]
    fn a_scrape_shows_the_busiest_groups_and_those_it_names() {
        let readings = vec![
            ("a-0".to_string(), 0, reading(5)),
            ("a-1".to_string(), 0, reading(50)),
            ("a-2".to_string(), 1, reading(0)),
            ("a-3".to_string(), 1, reading(5)),
        ];
        let names = |v: Vec<(String, usize, GroupReading)>| -> Vec<String> {
            v.into_iter().map(|(n, _, _)| n).collect()
        };
        assert_eq!(names(shown(readings.clone(), 2, &[])), ["a-1", "a-0"]);
        assert_eq!(
            names(shown(readings.clone(), 1, &["a-2", "zz-9"])),
            ["a-1", "a-2"]
        );
        assert!(shown(readings, 0, &[]).is_empty());
    }

    #[test]
    fn recent_counts_the_offsets_committed_between_two_passes() {
        let g = GroupGauges::default();
        g.high_watermark.store(100, Ordering::Relaxed);
        g.pass();
        assert_eq!(g.read().recent, 0, "the first pass has nothing to compare");
        g.high_watermark.store(130, Ordering::Relaxed);
        g.pass();
        assert_eq!(g.read().recent, 30);
        g.pass();
        assert_eq!(g.read().recent, 0);
        // A high watermark that went back (a restored snapshot, say) counts nothing.
        g.high_watermark.store(5, Ordering::Relaxed);
        g.pass();
        assert_eq!(g.read().recent, 0);
    }
}
