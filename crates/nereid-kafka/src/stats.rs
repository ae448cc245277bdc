//! What the metrics endpoint reports of the Kafka frontend: counts per
//! route, the consumer's lag per partition (from librdkafka's statistics),
//! offsets the broker skipped, and the state readiness follows.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use nereid_core::exposition::Family;
use parking_lot::Mutex;

/// Counts of one route, since the server started.
#[derive(Debug, Default)]
pub struct RouteCounts {
    /// Answers delivered to the output topic.
    pub processed: AtomicU64,
    /// Records that could not be decoded, or whose inference or encoding
    /// failed, or whose answer could not be delivered.
    pub failed: AtomicU64,
    /// Dead letters delivered.
    pub dead_lettered: AtomicU64,
}

/// A partition as librdkafka's statistics last reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marks {
    /// Records behind the end of the partition.
    pub lag: i64,
    /// The partition's first offset (-1: not known yet).
    pub low: i64,
    /// One past the last offset a read may serve (the last stable offset
    /// where it is lower than the high watermark); -1: not known yet.
    pub end: i64,
}

/// What the broker skipped in one partition, since the server started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GapCounts {
    /// Offsets skipped even by a read from before them (or at once, under
    /// `on_gap = "skip"`): accounted for, never read.
    pub skipped: u64,
    /// Reads started again from before skipped offsets.
    pub rereads: u64,
}

/// The counts, lag and health, shared by the frontend's threads.
#[derive(Debug)]
pub struct Stats {
    routes: Vec<(String, RouteCounts)>,
    /// Each assigned partition by (topic, partition), as librdkafka last
    /// reported it.
    marks: Mutex<BTreeMap<(String, i32), Marks>>,
    gaps: Mutex<BTreeMap<(String, i32), GapCounts>>,
    pub joined: AtomicBool,
    pub connected: AtomicBool,
}

/// A copy of [`Stats`] for one scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// (input topic, processed, failed, dead lettered).
    pub routes: Vec<RouteSnapshot>,
    pub lag: Vec<(String, i32, i64)>,
    /// (topic, partition, counts) of partitions where the broker skipped.
    pub gaps: Vec<(String, i32, GapCounts)>,
    /// The consumer has joined its group and reaches a broker.
    pub consumer_up: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteSnapshot {
    pub topic: String,
    pub processed: u64,
    pub failed: u64,
    pub dead_lettered: u64,
}

impl Stats {
    pub fn new(topics: impl IntoIterator<Item = String>) -> Stats {
        Stats {
            routes: topics
                .into_iter()
                .map(|t| (t, RouteCounts::default()))
                .collect(),
            marks: Mutex::default(),
            gaps: Mutex::default(),
            joined: AtomicBool::new(false),
            connected: AtomicBool::new(true),
        }
    }

    pub fn route(&self, index: usize) -> Option<&RouteCounts> {
        self.routes.get(index).map(|(_, counts)| counts)
    }

    pub fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Replaces every partition's figures with librdkafka's latest.
    pub fn set_marks(&self, marks: BTreeMap<(String, i32), Marks>) {
        *self.marks.lock() = marks;
    }

    pub fn marks(&self, topic: &str, partition: i32) -> Option<Marks> {
        self.marks
            .lock()
            .get(&(topic.to_string(), partition))
            .copied()
    }

    /// Counts offsets `first` to `last` of a partition as skipped.
    pub fn skipped(&self, topic: &str, partition: i32, first: i64, last: i64) {
        let mut gaps = self.gaps.lock();
        let counts = gaps.entry((topic.to_string(), partition)).or_default();
        counts.skipped += (last - first + 1).max(0) as u64;
    }

    pub fn reread(&self, topic: &str, partition: i32) {
        let mut gaps = self.gaps.lock();
        gaps.entry((topic.to_string(), partition))
            .or_default()
            .rereads += 1;
    }

    pub fn consumer_up(&self) -> bool {
        self.joined.load(Ordering::SeqCst) && self.connected.load(Ordering::SeqCst)
    }

    pub fn snapshot(&self) -> Snapshot {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Snapshot {
            routes: self
                .routes
                .iter()
                .map(|(topic, c)| RouteSnapshot {
                    topic: topic.clone(),
                    processed: load(&c.processed),
                    failed: load(&c.failed),
                    dead_lettered: load(&c.dead_lettered),
                })
                .collect(),
            lag: self
                .marks
                .lock()
                .iter()
                .filter(|(_, m)| m.lag >= 0)
                .map(|((topic, partition), m)| (topic.clone(), *partition, m.lag))
                .collect(),
            gaps: self
                .gaps
                .lock()
                .iter()
                .map(|((topic, partition), &c)| (topic.clone(), *partition, c))
                .collect(),
            consumer_up: self.consumer_up(),
        }
    }
}

impl Snapshot {
    /// The Kafka frontend's metric families (Triton has none; the names
    /// are Nereid's): by input topic `nereid_kafka_records_processed_total`,
    /// `nereid_kafka_records_failed_total` and
    /// `nereid_kafka_records_dead_lettered_total`; by topic and partition
    /// `nereid_kafka_consumer_lag` (records behind the end of the
    /// partition, from the committed offset, as librdkafka last reported
    /// it), `nereid_kafka_offsets_skipped_total` (offsets the broker
    /// skipped even in a read from before them) and
    /// `nereid_kafka_rereads_total` (reads started again from before
    /// skipped offsets); and `nereid_kafka_consumer_up` (joined to its
    /// group and reaching a broker).
    pub fn families(&self) -> Vec<Family> {
        type Read = fn(&RouteSnapshot) -> u64;
        let counters: [(&'static str, &'static str, Read); 3] = [
            (
                "nereid_kafka_records_processed_total",
                "Kafka records whose answer the output topic acknowledged, by input topic",
                |r| r.processed,
            ),
            (
                "nereid_kafka_records_failed_total",
                "Kafka records that could not be decoded, inferred, encoded or delivered, by input topic",
                |r| r.failed,
            ),
            (
                "nereid_kafka_records_dead_lettered_total",
                "Kafka records the dead-letter topic acknowledged, by input topic",
                |r| r.dead_lettered,
            ),
        ];
        let mut families: Vec<Family> = counters
            .into_iter()
            .map(|(name, help, read)| {
                let mut family = Family::counter(name, help);
                for route in &self.routes {
                    family.add(vec![("topic", route.topic.clone())], read(route) as f64);
                }
                family
            })
            .collect();
        let mut lag = Family::gauge(
            "nereid_kafka_consumer_lag",
            "Kafka records not yet committed behind the end of each assigned partition",
        );
        for (topic, partition, behind) in &self.lag {
            let labels = vec![
                ("topic", topic.clone()),
                ("partition", partition.to_string()),
            ];
            lag.add(labels, *behind as f64);
        }
        let mut skipped = Family::counter(
            "nereid_kafka_offsets_skipped_total",
            "Kafka offsets the broker skipped even in a read from before them, accounted for and never read, by topic and partition",
        );
        let mut rereads = Family::counter(
            "nereid_kafka_rereads_total",
            "Kafka reads started again from before offsets the broker skipped, by topic and partition",
        );
        for (topic, partition, counts) in &self.gaps {
            let labels = vec![
                ("topic", topic.clone()),
                ("partition", partition.to_string()),
            ];
            skipped.add(labels.clone(), counts.skipped as f64);
            rereads.add(labels, counts.rereads as f64);
        }
        let mut up = Family::gauge(
            "nereid_kafka_consumer_up",
            "Whether the Kafka consumer has joined its group and reaches a broker (1) or not (0)",
        );
        up.add(Vec::new(), f64::from(u8::from(self.consumer_up)));
        families.extend([lag, skipped, rereads, up]);
        families
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_lag_and_state_render_with_their_labels() {
        let snapshot = Snapshot {
            routes: vec![RouteSnapshot {
                topic: "in".into(),
                processed: 7,
                failed: 2,
                dead_lettered: 1,
            }],
            lag: vec![("in".into(), 3, 12)],
            gaps: vec![(
                "in".into(),
                3,
                GapCounts {
                    skipped: 6,
                    rereads: 2,
                },
            )],
            consumer_up: true,
        };
        let mut text = String::new();
        nereid_core::exposition::render(&snapshot.families(), &mut text);
        for line in [
            r#"nereid_kafka_records_processed_total{topic="in"} 7"#,
            r#"nereid_kafka_records_failed_total{topic="in"} 2"#,
            r#"nereid_kafka_records_dead_lettered_total{topic="in"} 1"#,
            r#"nereid_kafka_consumer_lag{topic="in",partition="3"} 12"#,
            r#"nereid_kafka_offsets_skipped_total{topic="in",partition="3"} 6"#,
            r#"nereid_kafka_rereads_total{topic="in",partition="3"} 2"#,
            "nereid_kafka_consumer_up 1",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }
}
