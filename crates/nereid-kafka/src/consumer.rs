//! The consumer thread: waits for the routes' models, joins the group,
//! takes records while their partition has room (pausing it when not),
//! commits finished positions every commit interval, and on revocation or
//! shutdown finishes and commits what it took before letting go.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering as AtomicOrdering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::statistics::Statistics;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::{ClientContext, TopicPartitionList as Tpl};

use crate::logs::{self, ErrorLog, describe};
use crate::message::Record;
use crate::pipeline::Shared;
use crate::seek;
use crate::stats::Marks;

/// How long a poll waits while records are in flight (then paused
/// partitions are looked at again) and while idle.
const POLL_BUSY: Duration = Duration::from_millis(5);
const POLL_IDLE: Duration = Duration::from_millis(100);

/// librdkafka's callbacks, run on the consumer thread inside `poll`.
#[derive(Debug)]
pub(crate) struct Context {
    pub shared: Arc<Shared>,
    /// How long a revocation waits for the records it takes away.
    pub drain: Duration,
    pub errors: ErrorLog,
}

impl ClientContext for Context {
    fn stats(&self, statistics: Statistics) {
        let stats = &self.shared.stats;
        let up = statistics.brokers.values().any(|b| b.state == "UP");
        stats.connected.store(up, AtomicOrdering::SeqCst);
        let mut marks = BTreeMap::new();
        for (name, topic) in &statistics.topics {
            for (&id, p) in &topic.partitions {
                if id >= 0 && p.fetch_state != "none" {
                    let end = match p.ls_offset >= 0 {
                        true => p.ls_offset.min(p.hi_offset),
                        false => p.hi_offset,
                    };
                    let lag = p.consumer_lag;
                    let low = p.lo_offset;
                    marks.insert((name.clone(), id), Marks { lag, low, end });
                }
            }
        }
        stats.set_marks(marks);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::AllBrokersDown) {
            self.shared
                .stats
                .connected
                .store(false, AtomicOrdering::SeqCst);
        }
        self.errors.error("consumer", &error, reason);
    }

    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        logs::line(level, facility, message);
    }
}

impl ConsumerContext for Context {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(partitions) = rebalance {
            release(&self.shared, consumer, partitions, self.drain);
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(partitions) => {
                // A partition paused before it was revoked starts afresh: its
                // bookkeeping went with the revocation.
                if let Err(error) = consumer.resume(partitions) {
                    tracing::debug!("resuming newly assigned partitions: {error}");
                }
                seek::assigned(&self.shared, consumer, partitions);
                self.shared.stats.joined.store(true, AtomicOrdering::SeqCst);
                tracing::info!("Kafka partitions assigned: {}", describe(partitions));
            }
            Rebalance::Revoke(partitions) => {
                tracing::info!("Kafka partitions revoked: {}", describe(partitions));
            }
            Rebalance::Error(error) => tracing::warn!("Kafka rebalance failed: {error}"),
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        if let Err(error) = &result {
            tracing::warn!("Kafka commit failed (retried at the next interval): {error}");
        }
        record_commit(&self.shared, offsets, result.is_ok());
    }
}

/// The consumer, configured for at-least-once: nothing committed or stored
/// by librdkafka itself, a new group starting at the earliest record.
pub(crate) fn create(shared: &Arc<Shared>, drain: Duration) -> KafkaResult<BaseConsumer<Context>> {
    let config = &shared.config;
    let mut client = ClientConfig::new();
    client
        .set("bootstrap.servers", &config.brokers)
        .set("group.id", &config.group_id)
        .set("client.id", &config.client_id)
        .set("auto.offset.reset", "earliest")
        .set("statistics.interval.ms", "1000");
    for (key, value) in &config.consumer {
        client.set(key, value);
    }
    client
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false");
    client.create_with_context(Context {
        shared: Arc::clone(shared),
        drain,
        errors: ErrorLog::default(),
    })
}

/// The consumer thread's whole life.
pub(crate) fn run(shared: Arc<Shared>, consumer: BaseConsumer<Context>, drain: Duration) {
    if !wait_for_models(&shared) {
        return;
    }
    let topics: Vec<&str> = shared
        .config
        .routes
        .iter()
        .map(|r| r.input_topic.as_str())
        .collect();
    if let Err(error) = consumer.subscribe(&topics) {
        tracing::error!("Kafka consumer cannot subscribe to {topics:?}: {error}");
        return;
    }
    tracing::info!(
        "Kafka consumer of group '{}' subscribed to {topics:?}",
        shared.config.group_id
    );
    let mut last_commit = Instant::now();
    let mut last_check = Instant::now();
    while !shared.stopping() {
        let busy = shared.state.lock().in_flight() > 0;
        match consumer.poll(if busy { POLL_BUSY } else { POLL_IDLE }) {
            Some(Ok(message)) => take(&shared, &consumer, &message),
            Some(Err(error)) => tracing::debug!("Kafka consumer: {error}"),
            None => {}
        }
        resume(&shared, &consumer);
        if last_check.elapsed() >= seek::CHECK_EVERY {
            seek::check_stalls(&shared, &consumer);
            last_check = Instant::now();
        }
        if last_commit.elapsed() >= shared.config.commit_interval {
            commit(&shared, &consumer, CommitMode::Async, None);
            last_commit = Instant::now();
        }
    }
    finish(&shared, &consumer, drain);
}

/// Waits until every route's model is ready; false when the server stops
/// first.
fn wait_for_models(shared: &Shared) -> bool {
    let mut told = false;
    loop {
        if shared.stopping() {
            return false;
        }
        let waiting: Vec<&str> = shared
            .config
            .routes
            .iter()
            .filter(|r| !crate::route_ready(&shared.engine, r))
            .map(|r| r.model.as_str())
            .collect();
        if waiting.is_empty() {
            return true;
        }
        if !told {
            tracing::info!("Kafka consumer waits for models {waiting:?} to be ready");
            told = true;
        }
        std::thread::sleep(POLL_IDLE);
    }
}

fn take(shared: &Arc<Shared>, consumer: &BaseConsumer<Context>, message: &BorrowedMessage<'_>) {
    let Some(route) = shared
        .config
        .routes
        .iter()
        .position(|r| r.input_topic == message.topic())
    else {
        return;
    };
    if !seek::admit(shared, consumer, route, message) {
        return;
    }
    let record = Record {
        route,
        topic: message.topic().to_string(),
        partition: message.partition(),
        offset: message.offset(),
        key: message.key().map(Bytes::copy_from_slice),
        payload: message
            .payload()
            .map(Bytes::copy_from_slice)
            .unwrap_or_default(),
        headers: message
            .headers()
            .map(|headers| {
                headers
                    .iter()
                    .map(|h| (h.key.to_string(), h.value.map(Bytes::copy_from_slice)))
                    .collect()
            })
            .unwrap_or_default(),
    };
    let (topic, partition) = (record.topic.clone(), record.partition);
    let in_flight = shared.take(record);
    if in_flight >= shared.config.max_in_flight_per_partition {
        pause(shared, consumer, &topic, partition);
    }
}

fn pause(shared: &Shared, consumer: &BaseConsumer<Context>, topic: &str, partition: i32) {
    let mut list = Tpl::new();
    list.add_partition(topic, partition);
    match consumer.pause(&list) {
        Ok(()) => {
            let mut state = shared.state.lock();
            if let Some(p) = state.partitions.get_mut(&(topic.to_string(), partition)) {
                p.paused = true;
            }
        }
        Err(error) => tracing::warn!("cannot pause {topic}[{partition}]: {error}"),
    }
}

/// Resumes the paused partitions that have room again.
fn resume(shared: &Shared, consumer: &BaseConsumer<Context>) {
    let max = shared.config.max_in_flight_per_partition;
    let mut list = Tpl::new();
    {
        let mut state = shared.state.lock();
        for ((topic, partition), p) in state.partitions.iter_mut() {
            if p.paused && p.offsets.in_flight() < max {
                p.paused = false;
                p.stream.restarted();
                p.heard = Some(Instant::now());
                list.add_partition(topic, *partition);
            }
        }
    }
    if list.count() > 0
        && let Err(error) = consumer.resume(&list)
    {
        tracing::warn!("cannot resume {}: {error}", describe(&list));
    }
}

/// Commits the position of every partition (of `only`, when given) that
/// moved past what was committed.
fn commit(
    shared: &Shared,
    consumer: &BaseConsumer<Context>,
    mode: CommitMode,
    only: Option<&TopicPartitionList>,
) {
    let mut list = Tpl::new();
    {
        let mut state = shared.state.lock();
        for ((topic, partition), p) in state.partitions.iter_mut() {
            let wanted = only.is_none_or(|l| l.find_partition(topic, *partition).is_some());
            if let Some(position) = wanted.then(|| p.offsets.take_commit()).flatten() {
                let _ = list.add_partition_offset(topic, *partition, Offset::Offset(position));
            }
        }
    }
    if list.count() == 0 {
        return;
    }
    let result = consumer.commit(&list, mode);
    if matches!(mode, CommitMode::Sync) {
        if let Err(error) = &result {
            tracing::warn!("Kafka commit of {} failed: {error}", describe(&list));
        }
        record_commit(shared, &list, result.is_ok());
    } else if let Err(error) = result {
        tracing::warn!("Kafka commit of {} not sent: {error}", describe(&list));
        record_commit(shared, &list, false);
    }
}

fn record_commit(shared: &Shared, offsets: &TopicPartitionList, ok: bool) {
    let mut state = shared.state.lock();
    for element in offsets.elements() {
        let Offset::Offset(position) = element.offset() else {
            continue;
        };
        let key = (element.topic().to_string(), element.partition());
        if let Some(p) = state.partitions.get_mut(&key) {
            p.offsets.commit_result(position, ok);
        }
    }
}

/// Before `partitions` go to another consumer: waits (at most `drain`)
/// for the records taken from them, commits, and forgets them.
fn release(
    shared: &Shared,
    consumer: &BaseConsumer<Context>,
    partitions: &TopicPartitionList,
    drain: Duration,
) {
    let keys: Vec<(String, i32)> = partitions
        .elements()
        .iter()
        .map(|e| (e.topic().to_string(), e.partition()))
        .collect();
    let left = wait_until_done(shared, drain, |state| {
        keys.iter()
            .filter_map(|k| state.partitions.get(k))
            .map(|p| p.offsets.in_flight())
            .sum()
    });
    if left > 0 {
        tracing::warn!(
            "{left} records of revoked partitions did not finish within {drain:?}: they will be read again by the next owner"
        );
    }
    commit(shared, consumer, CommitMode::Sync, Some(partitions));
    let mut state = shared.state.lock();
    for key in &keys {
        state.partitions.remove(key);
    }
}

/// Shutdown: waits for everything taken (at most `drain`), commits it, and
/// leaves the group (the consumer's drop closes it).
fn finish(shared: &Shared, consumer: &BaseConsumer<Context>, drain: Duration) {
    let taken = shared.state.lock().in_flight();
    tracing::info!("Kafka consumer draining: {taken} records taken and not yet delivered");
    let left = wait_until_done(shared, drain, |state| state.in_flight());
    if left > 0 {
        tracing::warn!(
            "{left} Kafka records did not finish within {drain:?}: they will be read again"
        );
    }
    commit(shared, consumer, CommitMode::Sync, None);
    consumer.unsubscribe();
}

/// Waits until `count` reads 0 or `limit` passes; returns the last count.
fn wait_until_done(
    shared: &Shared,
    limit: Duration,
    count: impl Fn(&crate::pipeline::State) -> usize,
) -> usize {
    let deadline = Instant::now() + limit;
    let mut state = shared.state.lock();
    loop {
        let left = count(&state);
        if left == 0 || Instant::now() >= deadline {
            return left;
        }
        shared.changed.wait_until(&mut state, deadline);
    }
}
