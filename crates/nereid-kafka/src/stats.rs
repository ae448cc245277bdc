//! What the metrics endpoint reports of the Kafka frontend: counts per
//! route, the consumer's lag per partition (from librdkafka's statistics),
//! and the state readiness follows.

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

/// The counts, lag and health, shared by the frontend's threads.
#[derive(Debug)]
pub struct Stats {
    routes: Vec<(String, RouteCounts)>,
    /// Messages behind the end of each assigned partition, by (topic,
    /// partition), as librdkafka last reported it.
    lag: Mutex<BTreeMap<(String, i32), i64>>,
    pub joined: AtomicBool,
    pub connected: AtomicBool,
}

/// A copy of [`Stats`] for one scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// (input topic, processed, failed, dead lettered).
    pub routes: Vec<RouteSnapshot>,
    pub lag: Vec<(String, i32, i64)>,
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
            lag: Mutex::default(),
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

    /// Replaces the lag of every partition with librdkafka's latest figures.
    pub fn set_lag(&self, lag: BTreeMap<(String, i32), i64>) {
        *self.lag.lock() = lag;
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
                .lag
                .lock()
                .iter()
                .map(|((topic, partition), &lag)| (topic.clone(), *partition, lag))
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
    /// it); and `nereid_kafka_consumer_up` (joined to its group and
    /// reaching a broker).
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
        let mut up = Family::gauge(
            "nereid_kafka_consumer_up",
            "Whether the Kafka consumer has joined its group and reaches a broker (1) or not (0)",
        );
        up.add(Vec::new(), f64::from(u8::from(self.consumer_up)));
        families.extend([lag, up]);
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
            consumer_up: true,
        };
        let mut text = String::new();
        nereid_core::exposition::render(&snapshot.families(), &mut text);
        for line in [
            r#"nereid_kafka_records_processed_total{topic="in"} 7"#,
            r#"nereid_kafka_records_failed_total{topic="in"} 2"#,
            r#"nereid_kafka_records_dead_lettered_total{topic="in"} 1"#,
            r#"nereid_kafka_consumer_lag{topic="in",partition="3"} 12"#,
            "nereid_kafka_consumer_up 1",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }
}
