//! What the metrics endpoint reports of the Kafka frontend: counts per
//! route, the consumer's lag per partition (from librdkafka's statistics),
//! and the state readiness follows.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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
