//! The Kafka route file (`--kafka-config PATH`), TOML: the brokers and the
//! consumer group, then one `[[routes]]` table per input topic. Parsed and
//! checked before the server binds a port; docs/streaming.md lists every
//! field.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::Duration;

use nereid_core::ModelVersion;
use nereid_core::routing::is_label;
use serde::Deserialize;

/// librdkafka properties Nereid sets itself because the delivery guarantee
/// rests on them; the route file may not change them.
const OWNED_CONSUMER_PROPERTIES: [&str; 4] = [
    "enable.auto.commit",
    "enable.auto.offset.store",
    "group.id",
    "bootstrap.servers",
];
const OWNED_PRODUCER_PROPERTIES: [&str; 1] = ["bootstrap.servers"];

/// Why the route file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the Kafka config '{path}': {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("the Kafka config '{path}' is not valid: {message}")]
    Parse { path: String, message: String },
    #[error("the Kafka config has no [[routes]]")]
    NoRoutes,
    #[error("input topic '{0}' has more than one route")]
    DuplicateInput(String),
    #[error("route for '{topic}': {message}")]
    Route { topic: String, message: String },
    #[error(
        "'{0}' is set by Nereid (at-least-once delivery depends on it) and cannot be configured"
    )]
    OwnedProperty(String),
    #[error("'{field}' must be at least 1, got {value}")]
    Zero { field: &'static str, value: u64 },
}

/// How a record's value becomes an inference request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// The KServe v2 JSON body, or Triton's binary tensor body whose JSON
    /// length is in the `Inference-Header-Content-Length` record header.
    Kserve,
    /// The whole value is the data of the model's one input.
    Raw,
    /// The value is a JSON array (nested for more dimensions) holding the
    /// model's one input.
    JsonArray,
}

/// Which records' outputs keep their relative order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ordering {
    /// Every output of a partition in the order its inputs were read.
    Partition,
    /// Only outputs of records with the same key; others may overtake.
    Key,
}

/// Which partition of the output topic an output goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputPartition {
    /// The producer's partitioner on the record's key.
    Key,
    /// The input record's partition number.
    Input,
}

/// What a route does when the broker serves a partition's records with
/// offsets missing between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnGap {
    /// Read the partition again from before the missing offsets (a broker
    /// that answers a fetch from inside a record batch with the next batch
    /// serves them then); those a read from before them still skips each
    /// range in one dead letter.
    DeadLetter,
    /// Count the missing offsets and go on: for compacted topics and
    /// transactional producers, whose offsets have gaps by design.
    Skip,
}

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    brokers: String,
    group_id: String,
    #[serde(default = "default_client_id")]
    client_id: String,
    #[serde(default = "default_in_flight")]
    max_in_flight_per_partition: u64,
    #[serde(default = "default_commit_interval")]
    commit_interval_ms: u64,
    #[serde(default)]
    dead_letter_topic: Option<String>,
    #[serde(default)]
    consumer: BTreeMap<String, String>,
    #[serde(default)]
    producer: BTreeMap<String, String>,
    #[serde(default)]
    routes: Vec<FileRoute>,
}

/// A route's `model_version`: a number or a version label.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum VersionField {
    Number(i64),
    Label(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRoute {
    input_topic: String,
    model: String,
    #[serde(default)]
    model_version: Option<VersionField>,
    output_topic: String,
    #[serde(default)]
    dead_letter_topic: Option<String>,
    #[serde(default = "default_format")]
    format: Format,
    #[serde(default = "default_ordering")]
    ordering: Ordering,
    #[serde(default = "default_output_partition")]
    output_partition: OutputPartition,
    #[serde(default = "default_on_gap")]
    on_gap: OnGap,
}

fn default_client_id() -> String {
    "nereid".to_string()
}
fn default_in_flight() -> u64 {
    64
}
fn default_commit_interval() -> u64 {
    200
}
fn default_format() -> Format {
    Format::Kserve
}
fn default_ordering() -> Ordering {
    Ordering::Partition
}
fn default_output_partition() -> OutputPartition {
    OutputPartition::Key
}
fn default_on_gap() -> OnGap {
    OnGap::DeadLetter
}

/// The Kafka frontend's settings, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct KafkaConfig {
    pub brokers: String,
    pub group_id: String,
    pub client_id: String,
    /// Records of one partition taken and not yet committable; at the
    /// bound the partition is paused.
    pub max_in_flight_per_partition: usize,
    /// How often finished offsets are committed.
    pub commit_interval: Duration,
    /// Extra librdkafka properties of the consumer and the producer.
    pub consumer: BTreeMap<String, String>,
    pub producer: BTreeMap<String, String>,
    pub routes: Vec<Route>,
}

/// One input topic, through a model, to an output topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub input_topic: String,
    pub model: String,
    /// A number, a label (resolved as each record runs), or the latest.
    pub model_version: ModelVersion,
    pub output_topic: String,
    pub dead_letter_topic: String,
    pub format: Format,
    pub ordering: Ordering,
    pub output_partition: OutputPartition,
    pub on_gap: OnGap,
}

impl KafkaConfig {
    /// Reads and checks the route file at `path`.
    pub fn from_file(path: &Path) -> Result<KafkaConfig, ConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: shown.clone(),
            source,
        })?;
        KafkaConfig::parse(&text).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: shown,
                message,
            },
            other => other,
        })
    }

    /// Parses and checks a route file's text.
    pub fn parse(text: &str) -> Result<KafkaConfig, ConfigError> {
        let file: FileConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: String::new(),
            message: e.message().to_string(),
        })?;
        check_properties(&file)?;
        let default_dead_letter = file.dead_letter_topic.clone();
        let routes = file
            .routes
            .into_iter()
            .map(|r| route(r, default_dead_letter.as_deref()))
            .collect::<Result<Vec<_>, _>>()?;
        check_routes(&routes)?;
        Ok(KafkaConfig {
            brokers: nonempty("brokers", file.brokers)?,
            group_id: nonempty("group_id", file.group_id)?,
            client_id: file.client_id,
            max_in_flight_per_partition: at_least_one(
                "max_in_flight_per_partition",
                file.max_in_flight_per_partition,
            )? as usize,
            commit_interval: Duration::from_millis(at_least_one(
                "commit_interval_ms",
                file.commit_interval_ms,
            )?),
            consumer: file.consumer,
            producer: file.producer,
            routes,
        })
    }

    /// The route of records read from `topic`.
    pub fn route(&self, topic: &str) -> Option<&Route> {
        self.routes.iter().find(|r| r.input_topic == topic)
    }
}

fn route(file: FileRoute, default_dead_letter: Option<&str>) -> Result<Route, ConfigError> {
    let refuse = |message: &str| ConfigError::Route {
        topic: file.input_topic.clone(),
        message: message.to_string(),
    };
    if file.input_topic.is_empty() || file.output_topic.is_empty() || file.model.is_empty() {
        return Err(refuse(
            "input_topic, model and output_topic must not be empty",
        ));
    }
    let model_version = match &file.model_version {
        None => ModelVersion::Latest,
        Some(VersionField::Number(n)) if *n > 0 => ModelVersion::Number(*n),
        Some(VersionField::Label(label)) if is_label(label) => ModelVersion::Label(label.clone()),
        Some(_) => {
            return Err(refuse(
                "model_version must be a version number (1 or more) or a version label",
            ));
        }
    };
    if file.input_topic == file.output_topic {
        return Err(refuse("output_topic is the input topic"));
    }
    let dead_letter_topic = file
        .dead_letter_topic
        .or_else(|| default_dead_letter.map(str::to_string))
        .ok_or_else(|| refuse("no dead_letter_topic (set one here or at the top of the file)"))?;
    if dead_letter_topic == file.input_topic {
        return Err(refuse("dead_letter_topic is the input topic"));
    }
    Ok(Route {
        input_topic: file.input_topic,
        model: file.model,
        model_version,
        output_topic: file.output_topic,
        dead_letter_topic,
        format: file.format,
        ordering: file.ordering,
        output_partition: file.output_partition,
        on_gap: file.on_gap,
    })
}

fn check_routes(routes: &[Route]) -> Result<(), ConfigError> {
    if routes.is_empty() {
        return Err(ConfigError::NoRoutes);
    }
    let mut inputs = HashSet::new();
    for route in routes {
        if !inputs.insert(route.input_topic.as_str()) {
            return Err(ConfigError::DuplicateInput(route.input_topic.clone()));
        }
    }
    Ok(())
}

fn check_properties(file: &FileConfig) -> Result<(), ConfigError> {
    let owned = file
        .consumer
        .keys()
        .find(|k| OWNED_CONSUMER_PROPERTIES.contains(&k.as_str()))
        .or_else(|| {
            file.producer
                .keys()
                .find(|k| OWNED_PRODUCER_PROPERTIES.contains(&k.as_str()))
        });
    match owned {
        Some(key) => Err(ConfigError::OwnedProperty(key.clone())),
        None => Ok(()),
    }
}

fn nonempty(field: &'static str, value: String) -> Result<String, ConfigError> {
    match value.is_empty() {
        true => Err(ConfigError::Parse {
            path: String::new(),
            message: format!("'{field}' must not be empty"),
        }),
        false => Ok(value),
    }
}

fn at_least_one(field: &'static str, value: u64) -> Result<u64, ConfigError> {
    match value {
        0 => Err(ConfigError::Zero { field, value }),
        n => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
        brokers = "127.0.0.1:9092"
        group_id = "g"
        dead_letter_topic = "dlq"
        [[routes]]
        input_topic = "in"
        model = "simple"
        output_topic = "out"
    "#;

    #[test]
    fn defaults_fill_what_the_file_leaves_out() {
        let config = KafkaConfig::parse(MINIMAL).expect("valid");
        assert_eq!(config.max_in_flight_per_partition, 64);
        assert_eq!(config.commit_interval, Duration::from_millis(200));
        assert_eq!(config.client_id, "nereid");
        let route = config.route("in").expect("route");
        assert_eq!(route.dead_letter_topic, "dlq");
        assert_eq!(route.format, Format::Kserve);
        assert_eq!(route.ordering, Ordering::Partition);
        assert_eq!(route.output_partition, OutputPartition::Key);
        assert_eq!(route.model_version, ModelVersion::Latest);
        assert_eq!(route.on_gap, OnGap::DeadLetter);
    }

    #[test]
    fn a_route_overrides_the_dead_letter_topic_and_formats_parse() {
        let text = r#"
            brokers = "b:1"
            group_id = "g"
            [[routes]]
            input_topic = "in"
            model = "mlp"
            model_version = 2
            output_topic = "out"
            dead_letter_topic = "in-dlq"
            format = "json_array"
            ordering = "key"
            output_partition = "input"
            on_gap = "skip"
        "#;
        let config = KafkaConfig::parse(text).expect("valid");
        let route = &config.routes[0];
        assert_eq!(route.dead_letter_topic, "in-dlq");
        assert_eq!(route.format, Format::JsonArray);
        assert_eq!(route.ordering, Ordering::Key);
        assert_eq!(route.output_partition, OutputPartition::Input);
        assert_eq!(route.model_version, ModelVersion::Number(2));
        assert_eq!(route.on_gap, OnGap::Skip);
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        let no_dlq = MINIMAL.replace("dead_letter_topic = \"dlq\"", "");
        let err = KafkaConfig::parse(&no_dlq).expect_err("no dead letter topic");
        assert!(err.to_string().contains("no dead_letter_topic"), "{err}");

        let owned = MINIMAL.replace(
            "[[routes]]",
            "[consumer]\n\"enable.auto.commit\" = \"true\"\n[[routes]]",
        );
        let err = KafkaConfig::parse(&owned).expect_err("owned property");
        assert!(err.to_string().contains("enable.auto.commit"), "{err}");

        let twice = format!(
            "{MINIMAL}{}",
            &MINIMAL[MINIMAL.find("[[routes]]").unwrap_or(0)..]
        );
        let err = KafkaConfig::parse(&twice).expect_err("two routes for one topic");
        assert!(
            matches!(err, ConfigError::DuplicateInput(ref t) if t == "in"),
            "{err}"
        );

        let unknown = MINIMAL.replace("group_id", "grup_id");
        assert!(KafkaConfig::parse(&unknown).is_err());

        let zero = MINIMAL.replace(
            "group_id = \"g\"",
            "group_id = \"g\"\nmax_in_flight_per_partition = 0",
        );
        let err = KafkaConfig::parse(&zero).expect_err("zero in flight");
        assert!(
            err.to_string().contains("max_in_flight_per_partition"),
            "{err}"
        );

        let looped = MINIMAL.replace("output_topic = \"out\"", "output_topic = \"in\"");
        assert!(KafkaConfig::parse(&looped).is_err());
    }
}
