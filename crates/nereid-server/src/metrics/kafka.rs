//! The Kafka frontend's metrics (Triton has none; the names are Nereid's):
//! by input topic `nereid_kafka_records_processed_total`,
//! `nereid_kafka_records_failed_total` and
//! `nereid_kafka_records_dead_lettered_total`; by topic and partition
//! `nereid_kafka_consumer_lag` (records behind the end of the partition,
//! from the committed offset, as librdkafka last reported it); and
//! `nereid_kafka_consumer_up` (joined to its group and reaching a broker).

use metrics::{Key, Label, Recorder};
use metrics_exporter_prometheus::PrometheusBuilder;
use nereid_kafka::{RouteSnapshot, Snapshot};

use super::METADATA;

type Read = fn(&RouteSnapshot) -> u64;

const COUNTERS: [(&str, &str, Read); 3] = [
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

pub fn render(snapshot: &Snapshot) -> String {
    let recorder = PrometheusBuilder::new().build_recorder();
    for (name, help, read) in COUNTERS {
        recorder.describe_counter(name.into(), None, help.into());
        for route in &snapshot.routes {
            let key = Key::from_parts(name, vec![Label::new("topic", route.topic.clone())]);
            recorder
                .register_counter(&key, &METADATA)
                .absolute(read(route));
        }
    }
    let lag = "nereid_kafka_consumer_lag";
    recorder.describe_gauge(
        lag.into(),
        None,
        "Kafka records not yet committed behind the end of each assigned partition".into(),
    );
    for (topic, partition, behind) in &snapshot.lag {
        let labels = vec![
            Label::new("topic", topic.clone()),
            Label::new("partition", partition.to_string()),
        ];
        recorder
            .register_gauge(&Key::from_parts(lag, labels), &METADATA)
            .set(*behind as f64);
    }
    let up = "nereid_kafka_consumer_up";
    recorder.describe_gauge(
        up.into(),
        None,
        "Whether the Kafka consumer has joined its group and reaches a broker (1) or not (0)"
            .into(),
    );
    recorder
        .register_gauge(&Key::from_name(up), &METADATA)
        .set(f64::from(u8::from(snapshot.consumer_up)));
    recorder.handle().render()
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
        let text = render(&snapshot);
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
