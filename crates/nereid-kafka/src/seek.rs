//! What the consumer does about what [`crate::gap`] finds: reads a
//! partition again from before offsets the broker skipped (a seek),
//! accounts for those a read from before them skips too (a counter, a
//! warning naming the topic, partition and range, and under the route's
//! `on_gap = "dead_letter"` a dead letter), and looks every
//! [`CHECK_EVERY`] for partitions that serve nothing though the broker
//! says records are left.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::config::{KafkaConfig, OnGap};
use crate::gap::{Arrival, Stall, Stream};
use crate::logs::describe;
use crate::pipeline::Shared;

/// How often silent partitions are looked at.
pub(crate) const CHECK_EVERY: Duration = Duration::from_millis(250);
/// A partition with records left that serves none for this long, and for
/// four of the consumer's fetch waits, is read again.
const QUIET_MIN: Duration = Duration::from_millis(200);
const SEEK_TIMEOUT: Duration = Duration::from_secs(5);
const COMMITTED_TIMEOUT: Duration = Duration::from_secs(10);

/// Newly assigned partitions: the group's committed positions are the
/// offsets their reads must start at.
pub(crate) fn assigned(
    shared: &Shared,
    consumer: &BaseConsumer<impl ConsumerContext>,
    partitions: &TopicPartitionList,
) {
    let positions = consumer
        .committed_offsets(partitions.clone(), COMMITTED_TIMEOUT)
        .unwrap_or_else(|error| {
            tracing::warn!(
                "cannot read the committed positions of {}: {error}; the first record of each sets it",
                describe(partitions)
            );
            partitions.clone()
        });
    let now = Instant::now();
    let mut state = shared.state.lock();
    for element in positions.elements() {
        let position = match element.offset() {
            Offset::Offset(offset) => Some(offset),
            _ => None,
        };
        let key = (element.topic().to_string(), element.partition());
        let partition = state.partitions.entry(key).or_default();
        partition.stream = Stream::start(position);
        partition.heard = Some(now);
        partition.told = None;
    }
}

/// Whether `message`, of route `route`, is the next record of its
/// partition and is to be taken; reads again or accounts for a gap first
/// where it is not.
pub(crate) fn admit(
    shared: &Arc<Shared>,
    consumer: &BaseConsumer<impl ConsumerContext>,
    route: usize,
    message: &BorrowedMessage<'_>,
) -> bool {
    let (topic, partition, offset) = (message.topic(), message.partition(), message.offset());
    let on_gap = shared.config.routes[route].on_gap;
    let arrival = {
        let mut state = shared.state.lock();
        let key = (topic.to_string(), partition);
        let p = state.partitions.entry(key).or_default();
        p.heard = Some(Instant::now());
        p.told = None;
        let jumped = p.stream.expected().is_some_and(|e| offset > e);
        let floor = if jumped {
            floor(shared, topic, partition)
        } else {
            0
        };
        p.stream.arrive(offset, on_gap == OnGap::DeadLetter, floor)
    };
    match arrival {
        Arrival::Take => true,
        Arrival::Seen => false,
        Arrival::ReadFrom(from) => {
            tracing::debug!(
                topic,
                partition,
                "the broker served offset {offset} where another was expected: reading again from {from}"
            );
            read_from(shared, consumer, topic, partition, from);
            false
        }
        Arrival::Gap { first, last } => {
            account(shared, route, topic, partition, (first, last));
            true
        }
    }
}

/// Offsets `first` to `last` are not there: counted, logged, and under
/// `on_gap = "dead_letter"` a dead letter says so.
fn account(shared: &Arc<Shared>, route: usize, topic: &str, partition: i32, range: (i64, i64)) {
    let (first, last) = range;
    shared.stats.skipped(topic, partition, first, last);
    let config = &shared.config.routes[route];
    match config.on_gap {
        OnGap::DeadLetter => {
            tracing::warn!(
                topic,
                partition,
                first,
                last,
                "the broker skipped offsets {first} to {last} of {topic}[{partition}] even in a read from before them: a dead letter to '{}' says so",
                config.dead_letter_topic
            );
            shared.gap_letter(route, topic, partition, first, last);
        }
        OnGap::Skip => tracing::debug!(
            topic,
            partition,
            first,
            last,
            "no records at offsets {first} to {last} of {topic}[{partition}] (on_gap = \"skip\")"
        ),
    }
}

fn read_from(
    shared: &Shared,
    consumer: &BaseConsumer<impl ConsumerContext>,
    topic: &str,
    partition: i32,
    from: i64,
) {
    shared.stats.reread(topic, partition);
    if let Err(error) = consumer.seek(topic, partition, Offset::Offset(from), SEEK_TIMEOUT) {
        tracing::warn!("cannot read {topic}[{partition}] again from {from}: {error}");
    }
    let mut state = shared.state.lock();
    if let Some(p) = state.partitions.get_mut(&(topic.to_string(), partition)) {
        p.heard = Some(Instant::now());
    }
}

/// The partition's first offset, as librdkafka last reported it.
fn floor(shared: &Shared, topic: &str, partition: i32) -> i64 {
    shared
        .stats
        .marks(topic, partition)
        .map_or(0, |m| m.low.max(0))
}

/// Partitions not paused that served nothing for a while though the
/// broker says records are left: read again from before their expected
/// offset, or said to be unreadable (once).
pub(crate) fn check_stalls(shared: &Shared, consumer: &BaseConsumer<impl ConsumerContext>) {
    let quiet = quiet_time(&shared.config);
    let now = Instant::now();
    let mut reads = Vec::new();
    {
        let mut state = shared.state.lock();
        for ((topic, partition), p) in state.partitions.iter_mut() {
            let heard = *p.heard.get_or_insert(now);
            let marks = shared.stats.marks(topic, *partition);
            let Some(marks) = marks.filter(|m| m.end >= 0) else {
                continue;
            };
            if p.paused || now.duration_since(heard) < quiet {
                continue;
            }
            let recover = shared
                .config
                .route(topic)
                .is_some_and(|r| r.on_gap == OnGap::DeadLetter);
            let stall = match recover {
                true => p.stream.stalled(marks.end, marks.low.max(0)),
                false => {
                    p.stream
                        .expected()
                        .filter(|&e| e < marks.end)
                        .map(|e| Stall::Unreadable {
                            first: e,
                            last: marks.end - 1,
                        })
                }
            };
            match stall {
                None => {}
                Some(Stall::ReadFrom(from)) => {
                    p.heard = Some(now);
                    reads.push((topic.clone(), *partition, from));
                }
                Some(Stall::Unreadable { first, last }) if p.told != Some((first, last)) => {
                    p.told = Some((first, last));
                    tracing::warn!(
                        topic = %topic,
                        partition,
                        first,
                        last,
                        "{topic}[{partition}] serves no record from offset {first}, though the broker has offsets up to {last}: transaction markers or aborted records, or a broker that does not serve them; the partition waits for records after them"
                    );
                }
                Some(Stall::Unreadable { .. }) => {}
            }
        }
    }
    for (topic, partition, from) in reads {
        tracing::debug!(
            topic = %topic,
            partition,
            "{topic}[{partition}] serves nothing though records are left: reading again from {from}"
        );
        read_from(shared, consumer, &topic, partition, from);
    }
}

/// How long a partition with records left may serve nothing: four of the
/// consumer's fetch waits (a broker may hold a fetch that long), at least
/// [`QUIET_MIN`].
fn quiet_time(config: &KafkaConfig) -> Duration {
    let wait_ms = config
        .consumer
        .get("fetch.wait.max.ms")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(500);
    QUIET_MIN.max(Duration::from_millis(4 * wait_ms))
}
