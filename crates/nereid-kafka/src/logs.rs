//! librdkafka's log lines and errors in Nereid's log, without the flood: a
//! broker that is down makes librdkafka report the same failure on every
//! reconnect attempt, several times a second. Each kind of error is
//! logged once per [`REPEAT`] at most.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;
use rdkafka::topic_partition_list::TopicPartitionList;

const REPEAT: Duration = Duration::from_secs(10);

/// When a client last logged each kind of error (librdkafka's few codes).
#[derive(Debug, Default)]
pub(crate) struct ErrorLog {
    last: Mutex<HashMap<String, Instant>>,
}

impl ErrorLog {
    pub fn error(&self, client: &str, error: &KafkaError, reason: &str) {
        let kind = error.to_string();
        let mut last = self.last.lock();
        if last.get(&kind).is_some_and(|at| at.elapsed() < REPEAT) {
            return;
        }
        tracing::warn!("Kafka {client}: {kind}: {reason}");
        last.insert(kind, Instant::now());
    }
}

/// librdkafka's own lines: their failures reach [`ErrorLog`] too, so they
/// are debug lines here, but for the gravest.
pub(crate) fn line(level: RDKafkaLogLevel, facility: &str, message: &str) {
    match level {
        RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical => {
            tracing::error!("librdkafka {facility}: {message}")
        }
        _ => tracing::debug!("librdkafka {facility}: {message}"),
    }
}

/// Partitions as a log line names them: `topic[0], topic[1]`.
pub(crate) fn describe(list: &TopicPartitionList) -> String {
    let parts: Vec<String> = list
        .elements()
        .iter()
        .map(|e| format!("{}[{}]", e.topic(), e.partition()))
        .collect();
    parts.join(", ")
}
