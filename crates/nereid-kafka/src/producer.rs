//! The producer: answers and dead letters, each record carrying what its
//! delivery report needs to mark its input's offset done.

use std::sync::{Arc, Weak};

use rdkafka::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::producer::{DeliveryResult, ProducerContext, ThreadedProducer};

use crate::config::KafkaConfig;
use crate::logs::{self, ErrorLog};
use crate::message::{Outgoing, Record};

/// What a produced record carries to its delivery report.
#[derive(Debug)]
pub(crate) struct Sent {
    pub record: Arc<Record>,
    pub outgoing: Outgoing,
}

/// Where delivery reports go: the pipeline, which marks the offsets.
pub(crate) trait Deliveries: Send + Sync {
    /// The broker's answer to `outgoing`, sent for `record`.
    fn report(
        self: Arc<Self>,
        result: Result<(), KafkaError>,
        record: Arc<Record>,
        outgoing: Outgoing,
    );
}

/// Routes delivery reports (on the producer's own polling thread) to the
/// pipeline. Weak: the pipeline owns the producer.
pub(crate) struct DeliveryContext {
    pub shared: Weak<dyn Deliveries>,
    pub errors: ErrorLog,
}

impl std::fmt::Debug for DeliveryContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeliveryContext").finish_non_exhaustive()
    }
}

impl ClientContext for DeliveryContext {
    fn error(&self, error: KafkaError, reason: &str) {
        self.errors.error("producer", &error, reason);
    }

    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        logs::line(level, facility, message);
    }
}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Box<Sent>;

    fn delivery(&self, result: &DeliveryResult<'_>, sent: Box<Sent>) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let result = match result {
            Ok(_) => Ok(()),
            Err((error, _)) => Err(error.clone()),
        };
        let Sent { record, outgoing } = *sent;
        shared.report(result, record, outgoing);
    }
}

/// The producer's settings: acknowledged by every in-sync replica, and
/// idempotent, so that a retried batch neither duplicates nor reorders a
/// partition's records. The route file's `[producer]` table comes on top.
pub(crate) fn create(
    config: &KafkaConfig,
    shared: Weak<dyn Deliveries>,
) -> KafkaResult<ThreadedProducer<DeliveryContext>> {
    let mut client = ClientConfig::new();
    client
        .set("bootstrap.servers", &config.brokers)
        .set("client.id", &config.client_id)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "1");
    for (key, value) in &config.producer {
        client.set(key, value);
    }
    client.create_with_context(DeliveryContext {
        shared,
        errors: ErrorLog::default(),
    })
}
