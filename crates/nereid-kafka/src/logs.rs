//! librdkafka's log lines and errors in Nereid's log, without the flood: a
//! broker that is down makes librdkafka report the same failure on every
//! reconnect attempt, several times a second. An error is logged when it
//! differs from the last one, or once per [`REPEAT`] while it repeats.

use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;

const REPEAT: Duration = Duration::from_secs(10);

/// The last error a client logged, and when.
#[derive(Debug, Default)]
pub(crate) struct ErrorLog {
    last: Mutex<Option<(String, Instant)>>,
}

impl ErrorLog {
    pub fn error(&self, client: &str, error: &KafkaError, reason: &str) {
        let line = format!("{error}: {reason}");
        let mut last = self.last.lock();
        let repeated = last
            .as_ref()
            .is_some_and(|(text, at)| *text == line && at.elapsed() < REPEAT);
        if !repeated {
            tracing::warn!("Kafka {client}: {line}");
            *last = Some((line, Instant::now()));
        }
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
