//! Kafka streaming frontend: each route reads an input topic, runs every
//! record through a model (ensembles included) with [`Engine::infer`], and
//! writes the answer to an output topic, at least once: an input offset is
//! committed only once the broker acknowledged the output (or dead letter)
//! of it and of every record before it in its partition.
//!
//! Records are the HTTP frontend's bodies (KServe v2 JSON, Triton's binary
//! tensor format with its header length in a record header, or a route's
//! raw or JSON array shorthand), decoded and encoded by
//! `nereid-protocol`'s REST code. The consumer and the producer are
//! librdkafka's (`rdkafka`, built from the source it bundles).
//!
//! This crate knows the engine and the wire formats, not the server: the
//! server starts it, renders its [`Snapshot`] on the metrics endpoint and
//! stops it before the engine.

mod config;
mod consumer;
mod gap;
mod logs;
mod message;
mod partition;
mod pipeline;
mod producer;
mod seek;
mod stats;

use std::sync::atomic::Ordering as AtomicOrdering;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use nereid_engine::Engine;
use parking_lot::{Condvar, Mutex};

pub use config::{ConfigError, Format, KafkaConfig, OnGap, Ordering, OutputPartition, Route};
pub use message::{
    ERROR_HEADER, SOURCE_LAST_OFFSET_HEADER, SOURCE_OFFSET_HEADER, SOURCE_PARTITION_HEADER,
    SOURCE_TOPIC_HEADER, STAGE_HEADER,
};
pub use stats::{RouteSnapshot, Snapshot};

use pipeline::{Shared, State};
use stats::Stats;

/// Why the frontend did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot create the Kafka {what}: {source}")]
    Client {
        what: &'static str,
        source: rdkafka::error::KafkaError,
    },
    #[error("cannot start the Kafka consumer thread: {0}")]
    Thread(std::io::Error),
}

/// A running Kafka frontend; [`Kafka::shutdown`] drains it.
#[derive(Debug)]
pub struct Kafka {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What the metrics endpoint reads, without holding the frontend.
#[derive(Debug, Clone)]
pub struct KafkaStatus {
    stats: Arc<Stats>,
}

impl KafkaStatus {
    pub fn snapshot(&self) -> Snapshot {
        self.stats.snapshot()
    }
}

impl Kafka {
    /// Starts the consumer thread and the producer, on the current tokio
    /// runtime (the requests run there), and makes the engine's readiness
    /// wait for the consumer. `drain` bounds how long a revocation or the
    /// shutdown waits for the records taken.
    pub fn start(
        config: KafkaConfig,
        engine: Engine,
        drain: Duration,
    ) -> Result<Kafka, StartError> {
        let stats = Arc::new(Stats::new(
            config.routes.iter().map(|r| r.input_topic.clone()),
        ));
        let shared = Arc::new(Shared {
            config,
            engine: engine.clone(),
            runtime: tokio::runtime::Handle::current(),
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            producer: OnceLock::new(),
            stats,
            stopping: Default::default(),
        });
        let deliveries: Weak<dyn producer::Deliveries> = Arc::downgrade(&shared) as Weak<Shared>;
        let producer =
            producer::create(&shared.config, deliveries).map_err(|source| StartError::Client {
                what: "producer",
                source,
            })?;
        let _ = shared.producer.set(producer);
        let consumer = consumer::create(&shared, drain).map_err(|source| StartError::Client {
            what: "consumer",
            source,
        })?;
        engine.add_readiness_check(readiness(Arc::downgrade(&shared)));
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("nereid-kafka".into())
            .spawn(move || consumer::run(thread_shared, consumer, drain))
            .map_err(StartError::Thread)?;
        Ok(Kafka {
            shared,
            thread: Some(thread),
        })
    }

    /// The consumer has joined its group and reaches a broker, and every
    /// route's model is ready.
    pub fn is_ready(&self) -> bool {
        ready(&self.shared)
    }

    pub fn status(&self) -> KafkaStatus {
        KafkaStatus {
            stats: Arc::clone(&self.shared.stats),
        }
    }

    /// Stops taking records, waits for those taken to be delivered (at most
    /// the drain time given to [`Kafka::start`]), commits them and leaves
    /// the group; then flushes the producer.
    pub async fn shutdown(mut self) {
        self.shared.stopping.store(true, AtomicOrdering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let joined = tokio::task::spawn_blocking(move || thread.join()).await;
            if !matches!(joined, Ok(Ok(()))) {
                tracing::error!("the Kafka consumer thread panicked");
            }
        }
        let shared = Arc::clone(&self.shared);
        let _ = tokio::task::spawn_blocking(move || {
            if let Some(producer) = shared.producer.get() {
                use rdkafka::producer::Producer;
                if let Err(error) = producer.flush(Duration::from_secs(5)) {
                    tracing::warn!("Kafka producer flush: {error}");
                }
            }
        })
        .await;
        tracing::info!("Kafka frontend stopped");
    }
}

fn ready(shared: &Shared) -> bool {
    !shared.stopping()
        && shared.stats.consumer_up()
        && shared
            .config
            .routes
            .iter()
            .all(|r| route_ready(&shared.engine, r))
}

/// Whether the version `route` names is ready (a label as it stands now).
pub(crate) fn route_ready(engine: &Engine, route: &Route) -> bool {
    engine
        .version_number(&route.model, &route.model_version)
        .is_ok_and(|version| engine.model_ready(&route.model, version))
}

fn readiness(shared: Weak<Shared>) -> nereid_engine::ReadinessCheck {
    Arc::new(move || shared.upgrade().is_some_and(|s| ready(&s)))
}
