//! Records to requests and answers to records. The bodies are the HTTP
//! frontend's: `nereid_protocol::rest` decodes and encodes them; this file
//! only says where each piece of a Kafka record goes.

use bytes::Bytes;
use nereid_core::model_config::ModelConfig;
use nereid_core::{DataType, Error, InferResponse};
use nereid_protocol::rest::{
    DecodedRequest, HEADER_CONTENT_LENGTH, OutputEncoding, decode_infer_request,
    decode_raw_infer_request, encode_infer_response, inference_header_length,
};
use serde_json::{Value, json};

use crate::config::{Format, OutputPartition, Route};

/// Headers a dead letter carries besides the record's own.
pub const ERROR_HEADER: &str = "nereid-error";
pub const STAGE_HEADER: &str = "nereid-error-stage";
pub const SOURCE_TOPIC_HEADER: &str = "nereid-source-topic";
pub const SOURCE_PARTITION_HEADER: &str = "nereid-source-partition";
pub const SOURCE_OFFSET_HEADER: &str = "nereid-source-offset";
/// On the dead letter of offsets the broker skipped: the last of them
/// (`nereid-source-offset` is the first).
pub const SOURCE_LAST_OFFSET_HEADER: &str = "nereid-source-last-offset";

/// A record's headers, in order; a header may have no value.
pub type Headers = Vec<(String, Option<Bytes>)>;

/// A consumed record, owned: it outlives the consumer's buffer while its
/// request runs.
#[derive(Debug, Clone)]
pub struct Record {
    /// Index of the record's route in the config.
    pub route: usize,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Bytes>,
    pub payload: Bytes,
    pub headers: Headers,
}

/// Where a record failed, for the dead letter's `nereid-error-stage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Decode,
    Infer,
    Encode,
    Deliver,
    /// The broker skipped the offsets: no record was read.
    Fetch,
}

impl Stage {
    pub fn name(self) -> &'static str {
        match self {
            Stage::Decode => "decode",
            Stage::Infer => "infer",
            Stage::Encode => "encode",
            Stage::Deliver => "deliver",
            Stage::Fetch => "fetch",
        }
    }
}

/// A record to produce.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub topic: String,
    pub partition: Option<i32>,
    pub key: Option<Bytes>,
    pub payload: Bytes,
    pub headers: Headers,
    /// A dead letter rather than an answer.
    pub dead_letter: bool,
}

/// Decodes `record` as its route's format says; `config` is the model's
/// config (the raw and JSON array formats take the input from it).
pub fn decode(
    route: &Route,
    record: &Record,
    config: &ModelConfig,
) -> Result<DecodedRequest, Error> {
    let body = record.payload.clone();
    let mut decoded = match route.format {
        Format::Kserve => {
            let header = header_text(&record.headers, HEADER_CONTENT_LENGTH)?;
            match inference_header_length(body.len(), header.as_deref())? {
                0 => decode_raw_infer_request(
                    &route.model,
                    route.model_version.clone(),
                    body,
                    config,
                )?,
                n => decode_infer_request(&route.model, route.model_version.clone(), body, n)?,
            }
        }
        Format::Raw => {
            decode_raw_infer_request(&route.model, route.model_version.clone(), body, config)?
        }
        Format::JsonArray => {
            let kserve = json_array_body(&record.payload, config)?;
            let len = kserve.len();
            let mut decoded =
                decode_infer_request(&route.model, route.model_version.clone(), kserve, len)?;
            decoded.encoding = OutputEncoding::default();
            decoded
        }
    };
    if decoded.request.id.is_empty() {
        decoded.request.id = header_text(&record.headers, "id")?.unwrap_or_default();
    }
    Ok(decoded)
}

/// The answer to `record` as its output record: the HTTP body, the key and
/// headers of the input (its own header length replaced by the answer's).
pub fn answer(
    route: &Route,
    record: &Record,
    response: &InferResponse,
    encoding: &OutputEncoding,
) -> Result<Outgoing, Error> {
    let encoded = encode_infer_response(response, encoding)?;
    let mut headers: Headers = record
        .headers
        .iter()
        .filter(|(name, _)| !name.eq_ignore_ascii_case(HEADER_CONTENT_LENGTH))
        .cloned()
        .collect();
    if let Some(len) = encoded.header_length {
        headers.push((
            HEADER_CONTENT_LENGTH.to_string(),
            Some(Bytes::from(len.to_string())),
        ));
    }
    Ok(Outgoing {
        topic: route.output_topic.clone(),
        partition: output_partition(route, record),
        key: record.key.clone(),
        payload: encoded.body,
        headers,
        dead_letter: false,
    })
}

/// `record` as a dead letter: its key, value and headers, with the error
/// and where the record came from in headers.
pub fn dead_letter(route: &Route, record: &Record, stage: Stage, error: &str) -> Outgoing {
    let mut headers = record.headers.clone();
    let text = |s: String| Some(Bytes::from(s));
    headers.push((ERROR_HEADER.to_string(), text(error.to_string())));
    headers.push((STAGE_HEADER.to_string(), text(stage.name().to_string())));
    headers.push((SOURCE_TOPIC_HEADER.to_string(), text(record.topic.clone())));
    headers.push((
        SOURCE_PARTITION_HEADER.to_string(),
        text(record.partition.to_string()),
    ));
    headers.push((
        SOURCE_OFFSET_HEADER.to_string(),
        text(record.offset.to_string()),
    ));
    Outgoing {
        topic: route.dead_letter_topic.clone(),
        partition: None,
        key: record.key.clone(),
        payload: record.payload.clone(),
        headers,
        dead_letter: true,
    }
}

/// The dead letter of offsets `first` to `last` of a partition, which the
/// broker skipped even in a read from before them: no key, no value, the
/// range in headers.
pub fn gap_letter(route: &Route, topic: &str, partition: i32, first: i64, last: i64) -> Outgoing {
    let error = format!(
        "the broker served no records at offsets {first} to {last} of {topic}[{partition}]: a read from before them skipped them"
    );
    let text = |s: String| Some(Bytes::from(s));
    let headers = vec![
        (ERROR_HEADER.to_string(), text(error)),
        (
            STAGE_HEADER.to_string(),
            text(Stage::Fetch.name().to_string()),
        ),
        (SOURCE_TOPIC_HEADER.to_string(), text(topic.to_string())),
        (
            SOURCE_PARTITION_HEADER.to_string(),
            text(partition.to_string()),
        ),
        (SOURCE_OFFSET_HEADER.to_string(), text(first.to_string())),
        (
            SOURCE_LAST_OFFSET_HEADER.to_string(),
            text(last.to_string()),
        ),
    ];
    Outgoing {
        topic: route.dead_letter_topic.clone(),
        partition: None,
        key: None,
        payload: Bytes::new(),
        headers,
        dead_letter: true,
    }
}

fn output_partition(route: &Route, record: &Record) -> Option<i32> {
    match route.output_partition {
        OutputPartition::Key => None,
        OutputPartition::Input => Some(record.partition),
    }
}

/// The first header called `name` (any case), as UTF-8 text.
fn header_text(headers: &Headers, name: &str) -> Result<Option<String>, Error> {
    let Some((_, value)) = headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)) else {
        return Ok(None);
    };
    let bytes = value.clone().unwrap_or_default();
    String::from_utf8(bytes.to_vec())
        .map(Some)
        .map_err(|_| Error::invalid_argument(format!("header '{name}' is not UTF-8 text")))
}

/// The KServe body of a JSON array for the model's one input: its datatype
/// from the config, its shape from the array's nesting (a batch of 1 added
/// when the model batches and the array has only the input's own dims).
fn json_array_body(payload: &[u8], config: &ModelConfig) -> Result<Bytes, Error> {
    let [input] = config.input.as_slice() else {
        return Err(Error::invalid_argument(format!(
            "the json_array format needs a model with one input; '{}' has {}",
            config.name,
            config.input.len()
        )));
    };
    let datatype = DataType::from_config(input.data_type()).ok_or_else(|| {
        Error::invalid_argument(format!(
            "input '{}' has no datatype a request can carry",
            input.name
        ))
    })?;
    let data: Value = serde_json::from_slice(payload)
        .map_err(|e| Error::invalid_argument(format!("the record's value is not JSON: {e}")))?;
    if !data.is_array() {
        return Err(Error::invalid_argument(
            "the record's value is not a JSON array",
        ));
    }
    let mut shape = nesting(&data);
    if config.max_batch_size > 0 && shape.len() == input.dims.len() {
        shape.insert(0, 1);
    }
    let body = json!({
        "inputs": [{
            "name": input.name,
            "datatype": DataType::wire_name(datatype),
            "shape": shape,
            "data": data,
        }]
    });
    Ok(Bytes::from(body.to_string()))
}

/// The lengths of an array's first element at each depth (`[[1,2,3]]` is
/// `[1, 3]`); ragged arrays are refused later, when the data does not
/// match the shape.
fn nesting(value: &Value) -> Vec<i64> {
    let mut shape = Vec::new();
    let mut level = value;
    while let Value::Array(items) = level {
        shape.push(items.len() as i64);
        match items.first() {
            Some(first) => level = first,
            None => break,
        }
    }
    shape
}

#[cfg(test)]
mod tests;
