//! A record's way once taken: a task on the server's runtime decodes it,
//! calls [`Engine::infer`] (so the model's own scheduler batches it with
//! HTTP and gRPC requests), and hands the answer, or a dead letter, to its
//! lane; the lane sends answers to the producer in input order; the
//! broker's acknowledgement marks the offset done, which lets the consumer
//! commit past it.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use nereid_core::{Error, ErrorKind, InferRequest, InferResponse};
use nereid_engine::{Call, Engine};
use parking_lot::{Condvar, Mutex};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, ThreadedProducer};

use crate::config::{KafkaConfig, Ordering, Route};
use crate::gap::Stream;
use crate::message::{self, Outgoing, Record, Stage};
use crate::partition::{Lanes, Offsets};
use crate::producer::{Deliveries, DeliveryContext, Sent};
use crate::stats::Stats;

/// How long a request the model could not take now (a full queue, a model
/// being reloaded) waits before it is tried again, at first and at most.
const RETRY_FIRST: Duration = Duration::from_millis(20);
const RETRY_MAX: Duration = Duration::from_secs(1);
/// How long a dead letter the broker did not take waits to be sent again.
const DEAD_LETTER_RETRY: Duration = Duration::from_secs(1);

/// What the consumer thread, the request tasks and the producer's delivery
/// callbacks share.
pub(crate) struct Shared {
    pub config: KafkaConfig,
    pub engine: Engine,
    pub runtime: tokio::runtime::Handle,
    pub state: Mutex<State>,
    /// Signalled whenever an offset is done, for drains.
    pub changed: Condvar,
    pub producer: OnceLock<ThreadedProducer<DeliveryContext>>,
    pub stats: Arc<Stats>,
    /// Set at shutdown: take no more records, finish those taken.
    pub stopping: AtomicBool,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("config", &self.config)
            .field("stopping", &self.stopping)
            .finish_non_exhaustive()
    }
}

/// Every assigned partition that has records taken, by (topic, partition).
#[derive(Debug, Default)]
pub(crate) struct State {
    pub partitions: HashMap<(String, i32), Partition>,
}

#[derive(Debug, Default)]
pub(crate) struct Partition {
    pub offsets: Offsets,
    pub lanes: Lanes<(Arc<Record>, Outgoing)>,
    pub paused: bool,
    pub stream: Stream,
    /// When the partition last served a record or its read (re)started.
    pub heard: Option<std::time::Instant>,
    /// The unreadable range last logged, so that it is logged once.
    pub told: Option<(i64, i64)>,
}

impl State {
    /// Records taken and not done, in every partition.
    pub fn in_flight(&self) -> usize {
        self.partitions
            .values()
            .map(|p| p.offsets.in_flight())
            .sum()
    }
}

impl Shared {
    /// Takes `record`: marks its offset outstanding, queues it in its lane
    /// and starts its request. Returns how many records its partition has
    /// in flight now.
    pub fn take(self: &Arc<Self>, record: Record) -> usize {
        let route = &self.config.routes[record.route];
        let lane = lane(route, &record);
        let in_flight = {
            let mut state = self.state.lock();
            let partition = state
                .partitions
                .entry((record.topic.clone(), record.partition))
                .or_default();
            partition.offsets.take(record.offset);
            partition.lanes.push(lane, record.offset);
            partition.offsets.in_flight()
        };
        let shared = Arc::clone(self);
        let record = Arc::new(record);
        self.runtime.spawn(async move {
            let outgoing = shared.outcome(&record).await;
            shared.complete(record, lane, outgoing);
        });
        in_flight
    }

    /// Accounts for offsets `first` to `last` the broker skipped: their dead
    /// letter holds the commit position at `first` until the broker has
    /// it, as a record's would.
    pub fn gap_letter(
        self: &Arc<Self>,
        route: usize,
        topic: &str,
        partition: i32,
        first: i64,
        last: i64,
    ) {
        {
            let mut state = self.state.lock();
            let key = (topic.to_string(), partition);
            state.partitions.entry(key).or_default().offsets.take(first);
        }
        let letter = message::gap_letter(&self.config.routes[route], topic, partition, first, last);
        let record = Record {
            route,
            topic: topic.to_string(),
            partition,
            offset: first,
            key: None,
            payload: bytes::Bytes::new(),
            headers: Vec::new(),
        };
        self.send(Arc::new(record), letter);
    }

    /// The record's answer, or its dead letter when it fails.
    async fn outcome(&self, record: &Record) -> Outgoing {
        let route = &self.config.routes[record.route];
        match self.answer(route, record).await {
            Ok(outgoing) => outgoing,
            Err((stage, error)) => {
                if let Some(counts) = self.stats.route(record.route) {
                    Stats::count(&counts.failed);
                }
                tracing::warn!(
                    topic = %record.topic,
                    partition = record.partition,
                    offset = record.offset,
                    stage = stage.name(),
                    "record goes to dead-letter topic '{}': {}",
                    route.dead_letter_topic,
                    error.message()
                );
                message::dead_letter(route, record, stage, error.message())
            }
        }
    }

    async fn answer(&self, route: &Route, record: &Record) -> Result<Outgoing, (Stage, Error)> {
        let config = self
            .retrying(|| {
                let engine = self.engine.clone();
                async move {
                    let _kept = engine.load_on_request(&route.model, None).await?;
                    let version = engine.version_number(&route.model, &route.model_version)?;
                    engine.model_config(&route.model, version)
                }
            })
            .await
            .map_err(|e| (Stage::Infer, e))?;
        if config.model_transaction_policy.is_some_and(|p| p.decoupled) {
            let refusal = Error::unsupported(format!(
                "model '{}' is decoupled (several answers per request), which the Kafka frontend does not serve",
                route.model
            ));
            return Err((Stage::Infer, refusal));
        }
        let decoded = message::decode(route, record, &config).map_err(|e| (Stage::Decode, e))?;
        let request = decoded.request;
        let response = self
            .retrying(|| infer(self.engine.clone(), request.clone()))
            .await
            .map_err(|e| (Stage::Infer, e))?;
        message::answer(route, record, &response, &decoded.encoding).map_err(|e| (Stage::Encode, e))
    }

    /// Runs `attempt` until it succeeds or fails for a reason other than
    /// the model being unable to take it now: an `Unavailable` model (its
    /// queue full, its version loading) holds the record back, since a
    /// dead letter would take it out of the stream for good.
    async fn retrying<T, F, Fut>(&self, attempt: F) -> Result<T, Error>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let mut wait = RETRY_FIRST;
        loop {
            match attempt().await {
                Err(e) if e.kind() == ErrorKind::Unavailable => {
                    tracing::debug!(
                        "model unavailable, trying again in {wait:?}: {}",
                        e.message()
                    );
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(RETRY_MAX);
                }
                other => return other,
            }
        }
    }

    /// Gives the record its outcome and sends what its lane lets go, under
    /// the lock, so that the producer gets a lane's records in order.
    fn complete(self: &Arc<Self>, record: Arc<Record>, lane: u64, outgoing: Outgoing) {
        let mut state = self.state.lock();
        let key = (record.topic.clone(), record.partition);
        let Some(partition) = state.partitions.get_mut(&key) else {
            tracing::warn!(topic = %record.topic, partition = record.partition, offset = record.offset, "answer for a partition no longer assigned: dropped, the record will be read again");
            return;
        };
        let offset = record.offset;
        for (record, outgoing) in partition.lanes.complete(lane, offset, (record, outgoing)) {
            self.send(record, outgoing);
        }
    }

    /// Hands `outgoing` to the producer; a record it refuses at once is
    /// treated as a failed delivery.
    pub fn send(self: &Arc<Self>, record: Arc<Record>, outgoing: Outgoing) {
        let Some(producer) = self.producer.get() else {
            return;
        };
        let headers = outgoing.headers.iter().fold(
            OwnedHeaders::new_with_capacity(outgoing.headers.len()),
            |h, (key, value)| {
                h.insert(Header {
                    key,
                    value: value.as_deref(),
                })
            },
        );
        let mut base = BaseRecord::with_opaque_to(
            &outgoing.topic,
            Box::new(Sent {
                record: Arc::clone(&record),
                outgoing: outgoing.clone(),
            }),
        )
        .payload(&outgoing.payload[..])
        .headers(headers);
        if let Some(key) = &outgoing.key {
            base = base.key(&key[..]);
        }
        if let Some(partition) = outgoing.partition {
            base = base.partition(partition);
        }
        if let Err((error, _)) = producer.send(base) {
            self.delivered(Err(error), record, outgoing);
        }
    }

    /// The broker's answer to a produced record. Delivered: its offset is
    /// done. An answer not delivered becomes a dead letter; a dead letter
    /// not delivered is sent again later (its offset stays outstanding, so
    /// nothing is committed past it meanwhile).
    pub fn delivered(
        self: &Arc<Self>,
        result: Result<(), KafkaError>,
        record: Arc<Record>,
        outgoing: Outgoing,
    ) {
        let counts = self.stats.route(record.route);
        match result {
            Ok(()) => {
                if let Some(counts) = counts {
                    Stats::count(match outgoing.dead_letter {
                        true => &counts.dead_lettered,
                        false => &counts.processed,
                    });
                }
                let mut state = self.state.lock();
                if let Some(p) = state
                    .partitions
                    .get_mut(&(record.topic.clone(), record.partition))
                {
                    p.offsets.done(record.offset);
                }
                drop(state);
                self.changed.notify_all();
            }
            Err(error) if !outgoing.dead_letter && !about_the_record(&error) => {
                // The broker, not the answer: librdkafka gave up on it
                // (message.timeout.ms) while the broker was away.
                tracing::warn!(topic = %record.topic, partition = record.partition, offset = record.offset, "cannot deliver to '{}', trying again in {DEAD_LETTER_RETRY:?}: {error}", outgoing.topic);
                let shared = Arc::clone(self);
                self.runtime.spawn(async move {
                    tokio::time::sleep(DEAD_LETTER_RETRY).await;
                    shared.send(record, outgoing);
                });
            }
            Err(error) if !outgoing.dead_letter => {
                if let Some(counts) = counts {
                    Stats::count(&counts.failed);
                }
                let route = &self.config.routes[record.route];
                let reason = format!("cannot deliver to '{}': {error}", outgoing.topic);
                tracing::warn!(topic = %record.topic, partition = record.partition, offset = record.offset, "{reason}");
                let letter = message::dead_letter(route, &record, Stage::Deliver, &reason);
                self.send(record, letter);
            }
            Err(error) => {
                tracing::warn!(topic = %record.topic, partition = record.partition, offset = record.offset, "cannot deliver the dead letter to '{}', trying again in {DEAD_LETTER_RETRY:?}: {error}", outgoing.topic);
                let shared = Arc::clone(self);
                self.runtime.spawn(async move {
                    tokio::time::sleep(DEAD_LETTER_RETRY).await;
                    shared.send(record, outgoing);
                });
            }
        }
    }

    /// Whether the frontend is draining.
    pub fn stopping(&self) -> bool {
        self.stopping.load(AtomicOrdering::SeqCst)
    }
}

/// Whether a failed delivery is the record's own fault (too large, not a
/// valid record), so that sending it again cannot help: it becomes a dead
/// letter. Any other failure is the broker's, and the answer is sent again.
fn about_the_record(error: &KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode::*;
    matches!(
        error.rdkafka_error_code(),
        Some(MessageSizeTooLarge | InvalidMessageSize | InvalidMessage | InvalidRecord)
    )
}

async fn infer(engine: Engine, request: InferRequest) -> Result<InferResponse, Error> {
    engine.infer(request, Call::one()).await?.one()
}

/// The lane a record's answer waits in: one per partition, or one per key
/// (records without a key have no order to keep).
fn lane(route: &Route, record: &Record) -> u64 {
    match (route.ordering, &record.key) {
        (Ordering::Partition, _) => 0,
        (Ordering::Key, Some(key)) => {
            let mut hasher = DefaultHasher::new();
            key.hash(&mut hasher);
            hasher.finish() | 1
        }
        (Ordering::Key, None) => (record.offset as u64) << 1,
    }
}

impl Deliveries for Shared {
    fn report(
        self: Arc<Self>,
        result: Result<(), KafkaError>,
        record: Arc<Record>,
        outgoing: Outgoing,
    ) {
        self.delivered(result, record, outgoing);
    }
}
