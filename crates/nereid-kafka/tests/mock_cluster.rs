//! The frontend against librdkafka's mock cluster (in-process brokers that
//! can be told to fail requests), with an engine whose one model doubles
//! its INT32 input. The end-to-end tests against a real broker are in
//! tests/python/test_kafka.py; these inject the faults a real broker does
//! not produce on demand.

#![expect(clippy::unwrap_used, reason = "test code")]

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nereid_core::testing::{FnBackend, map_int32};
use nereid_engine::{Engine, EngineOptions};
use nereid_kafka::{Kafka, KafkaConfig};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

fn engine(root: &Path) -> Engine {
    let dir = root.join("double");
    std::fs::create_dir_all(dir.join("1")).unwrap();
    std::fs::write(dir.join("1/model.doubler"), "").unwrap();
    std::fs::write(
        dir.join("config.pbtxt"),
        r#"backend: "doubler"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
dynamic_batching { max_queue_delay_microseconds: 500 }
"#,
    )
    .unwrap();
    let options = EngineOptions {
        repositories: vec![root.to_path_buf()],
        mirrors: Vec::new(),
        strict_model_config: true,
        strict_readiness: nereid_engine::Readiness::Strict,
        response_cache: None,
        devices: Default::default(),
    };
    let doubler = FnBackend::new("doubler", |batch| {
        Ok(vec![map_int32(&batch.inputs[0], "OUTPUT0", |v| v * 2)])
    });
    let engine = Engine::new(options, vec![Arc::new(doubler)]);
    engine.load_all().unwrap();
    engine
}

fn route_file(bootstrap: &str, ordering: &str) -> KafkaConfig {
    KafkaConfig::parse(&format!(
        r#"
        brokers = "{bootstrap}"
        group_id = "g"
        dead_letter_topic = "dlq"
        max_in_flight_per_partition = 4
        commit_interval_ms = 50
        # One produce request in flight: librdkafka's mock broker takes a
        # batch past a gap its idempotence check should refuse (a failed
        # batch ahead of it), and then acks the failed batch's retry as a
        # duplicate without storing it. A real broker refuses the gap.
        [producer]
        "max.in.flight.requests.per.connection" = "1"
        [[routes]]
        input_topic = "in"
        model = "double"
        output_topic = "out"
        format = "raw"
        ordering = "{ordering}"
        output_partition = "input"
        "#
    ))
    .unwrap()
}

/// Produces `count` records (value i as INT32, key i), alternating over two
/// partitions, plus one that cannot be decoded (3 bytes) at the end.
fn produce(bootstrap: &str, count: i32) {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    for i in 0..count {
        let key = i.to_string();
        let value = i.to_le_bytes();
        let record = BaseRecord::to("in")
            .key(&key)
            .payload(&value[..])
            .partition(i % 2);
        producer.send(record).map_err(|(e, _)| e).unwrap();
    }
    producer
        .send(
            BaseRecord::to("in")
                .key("poison")
                .payload(&b"bad"[..])
                .partition(0),
        )
        .map_err(|(e, _)| e)
        .unwrap();
    producer.flush(Duration::from_secs(60)).unwrap();
}

/// Reads `topic` until `count` records came or 120 s passed.
fn read(bootstrap: &str, topic: &str, count: usize) -> Vec<(i32, String, Vec<u8>)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("reader-{topic}"))
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&[topic]).unwrap();
    let mut records = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while records.len() < count && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            let key = String::from_utf8(m.key().unwrap_or_default().to_vec()).unwrap();
            records.push((m.partition(), key, m.payload().unwrap_or_default().to_vec()));
        }
    }
    records
}

fn committed(bootstrap: &str) -> Vec<Offset> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "g")
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    list.add_partition("in", 0);
    list.add_partition("in", 1);
    let offsets = consumer
        .committed_offsets(list, Duration::from_secs(60))
        .unwrap();
    offsets.elements().iter().map(|e| e.offset()).collect()
}

/// The INT32 after the JSON header of a binary answer.
fn doubled_value(payload: &[u8]) -> i32 {
    let tail: [u8; 4] = payload[payload.len() - 4..].try_into().unwrap();
    i32::from_le_bytes(tail)
}

type Cluster = MockCluster<'static, DefaultProducerContext>;

/// Produces `count` records, lets `inject` set up faults, runs the
/// frontend until every answer is read, stops it, and checks what it
/// committed and counted.
async fn run_through(cluster: &Cluster, count: i32, inject: impl FnOnce(&Cluster)) {
    let bootstrap = cluster.bootstrap_servers();
    for topic in ["in", "out"] {
        cluster.create_topic(topic, 2, 1).unwrap();
    }
    cluster.create_topic("dlq", 1, 1).unwrap();
    let root = tempfile::tempdir().unwrap();
    let engine = engine(root.path());
    produce(&bootstrap, count);
    inject(cluster);
    let kafka = Kafka::start(
        route_file(&bootstrap, "partition"),
        engine.clone(),
        Duration::from_secs(60),
    )
    .unwrap();
    let out = tokio::task::spawn_blocking({
        let bootstrap = bootstrap.clone();
        move || read(&bootstrap, "out", count as usize)
    })
    .await
    .unwrap();
    assert_eq!(out.len(), count as usize, "every record answered once");
    let mut last_by_partition: HashMap<i32, i32> = HashMap::new();
    for (partition, key, payload) in &out {
        let i: i32 = key.parse().unwrap();
        assert_eq!(*partition, i % 2, "output_partition = input");
        assert_eq!(doubled_value(payload), 2 * i);
        let last = last_by_partition.insert(*partition, i);
        assert!(
            last.is_none_or(|l| l < i),
            "answers keep their partition's order"
        );
    }
    let letters = tokio::task::spawn_blocking({
        let bootstrap = bootstrap.clone();
        move || read(&bootstrap, "dlq", 1)
    })
    .await
    .unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].1, "poison");
    let status = kafka.status();
    kafka.shutdown().await;
    let snapshot = status.snapshot();
    let positions = tokio::task::spawn_blocking(move || committed(&bootstrap))
        .await
        .unwrap();
    let half = i64::from(count / 2);
    assert_eq!(
        positions,
        vec![Offset::Offset(half + 1), Offset::Offset(half)],
        "committed past every record, the poison one included"
    );
    assert_eq!(snapshot.routes[0].processed, count as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_are_answered_in_order_and_committed_past_the_poison_one() {
    let cluster = MockCluster::new(1).unwrap();
    run_through(&cluster, 40, |_| {}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_and_commit_errors_the_broker_returns_lose_nothing() {
    let cluster = MockCluster::new(1).unwrap();
    run_through(&cluster, 40, inject_errors).await;
}

fn inject_errors(cluster: &Cluster) {
    use RDKafkaRespErr::*;
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[
            RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
            RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
            RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
        ],
    );
    cluster.request_errors(
        RDKafkaApiKey::OffsetCommit,
        &[
            RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
            RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
        ],
    );
}
