use nereid_core::model_config::{DataType as ConfigType, ModelInput};
use nereid_core::{Parameters, Tensor};

use super::*;
use crate::config::{OnGap, Ordering, OutputPartition};

fn route(format: Format) -> Route {
    Route {
        input_topic: "in".into(),
        model: "m".into(),
        model_version: nereid_core::ModelVersion::Latest,
        output_topic: "out".into(),
        dead_letter_topic: "dlq".into(),
        format,
        ordering: Ordering::Partition,
        output_partition: OutputPartition::Key,
        on_gap: OnGap::DeadLetter,
    }
}

fn config(max_batch_size: i32, dims: &[i64]) -> ModelConfig {
    ModelConfig {
        name: "m".into(),
        max_batch_size,
        input: vec![ModelInput {
            name: "INPUT0".into(),
            data_type: ConfigType::TypeFp32 as i32,
            dims: dims.to_vec(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn record(payload: &'static [u8], headers: Headers) -> Record {
    Record {
        route: 0,
        topic: "in".into(),
        partition: 3,
        offset: 41,
        key: Some(Bytes::from_static(b"k1")),
        payload: Bytes::from_static(payload),
        headers,
    }
}

fn header(name: &str, value: &str) -> (String, Option<Bytes>) {
    (name.to_string(), Some(Bytes::from(value.to_string())))
}

#[test]
fn kserve_json_and_binary_bodies_decode_as_over_http() {
    let json =
        br#"{"id":"r1","inputs":[{"name":"INPUT0","shape":[1,2],"datatype":"FP32","data":[1,2]}]}"#;
    let decoded = decode(
        &route(Format::Kserve),
        &record(json, vec![]),
        &config(8, &[2]),
    )
    .expect("JSON body");
    assert_eq!(decoded.request.id, "r1");
    assert_eq!(decoded.request.inputs[0].shape, vec![1, 2]);

    let header_json = br#"{"inputs":[{"name":"INPUT0","shape":[1,2],"datatype":"FP32","parameters":{"binary_data_size":8}}]}"#;
    let mut body = header_json.to_vec();
    body.extend_from_slice(&1f32.to_le_bytes());
    body.extend_from_slice(&2f32.to_le_bytes());
    let mut binary = record(
        b"",
        vec![
            header(
                "Inference-Header-Content-Length",
                &header_json.len().to_string(),
            ),
            header("id", "from-header"),
        ],
    );
    binary.payload = Bytes::from(body);
    let decoded = decode(&route(Format::Kserve), &binary, &config(8, &[2])).expect("binary body");
    assert_eq!(decoded.request.inputs[0].data.len(), 8);
    assert_eq!(decoded.request.id, "from-header");
}

#[test]
fn a_bad_body_is_an_invalid_argument() {
    let err = decode(
        &route(Format::Kserve),
        &record(b"not json", vec![]),
        &config(8, &[2]),
    )
    .expect_err("not JSON");
    assert_eq!(err.kind(), nereid_core::ErrorKind::InvalidArgument);
    let err = decode(
        &route(Format::JsonArray),
        &record(b"{\"a\":1}", vec![]),
        &config(8, &[2]),
    )
    .expect_err("not an array");
    assert!(err.message().contains("not a JSON array"), "{err:?}");
}

#[test]
fn json_arrays_take_the_input_from_the_config() {
    let decoded = decode(
        &route(Format::JsonArray),
        &record(b"[1.5, 2.5]", vec![]),
        &config(8, &[2]),
    )
    .expect("array");
    let input = &decoded.request.inputs[0];
    assert_eq!(input.name, "INPUT0");
    assert_eq!(input.shape, vec![1, 2], "a batch of one is added");
    assert_eq!(input.data.len(), 8);
    let decoded = decode(
        &route(Format::JsonArray),
        &record(b"[[1, 2], [3, 4]]", vec![]),
        &config(8, &[2]),
    )
    .expect("a batch");
    assert_eq!(decoded.request.inputs[0].shape, vec![2, 2]);
    let err = decode(
        &route(Format::JsonArray),
        &record(b"[[1, 2], [3]]", vec![]),
        &config(8, &[2]),
    )
    .expect_err("a ragged array");
    assert_eq!(err.kind(), nereid_core::ErrorKind::InvalidArgument);
}

#[test]
fn raw_values_are_the_one_input() {
    let mut raw = record(b"", vec![]);
    raw.payload = Bytes::from([1f32.to_le_bytes(), 2f32.to_le_bytes()].concat());
    let decoded = decode(&route(Format::Raw), &raw, &config(8, &[2])).expect("raw");
    assert_eq!(decoded.request.inputs[0].shape, vec![1, 2]);
    assert!(decoded.encoding.default_binary);
}

fn response() -> InferResponse {
    InferResponse {
        model_name: "m".into(),
        model_version: 1,
        id: "r1".into(),
        outputs: vec![Tensor {
            name: "OUTPUT0".into(),
            datatype: DataType::Fp32,
            shape: vec![1, 1],
            data: Bytes::from(3f32.to_le_bytes().to_vec()),
        }],
        parameters: Parameters::new(),
        in_shared_memory: vec![],
    }
}

#[test]
fn answers_keep_the_key_and_headers_and_set_their_own_header_length() {
    let input = record(
        b"x",
        vec![
            header("trace", "t1"),
            header("inference-header-content-length", "1"),
        ],
    );
    let json = answer(
        &route(Format::Kserve),
        &input,
        &response(),
        &OutputEncoding::default(),
    )
    .expect("JSON answer");
    assert_eq!(json.key.as_deref(), Some(&b"k1"[..]));
    assert_eq!(json.headers, vec![header("trace", "t1")]);
    assert_eq!(json.topic, "out");
    assert_eq!(json.partition, None);
    let body: Value = serde_json::from_slice(&json.payload).expect("JSON");
    assert_eq!(body["id"], "r1");
    assert_eq!(body["outputs"][0]["data"], json!([3.0]));

    let binary = OutputEncoding {
        default_binary: true,
        explicit: vec![],
    };
    let mut by_input = route(Format::Kserve);
    by_input.output_partition = OutputPartition::Input;
    let out = answer(&by_input, &input, &response(), &binary).expect("binary answer");
    assert_eq!(out.partition, Some(3));
    let (name, len) = out.headers.last().expect("header length").clone();
    assert_eq!(name, HEADER_CONTENT_LENGTH);
    let len: usize = std::str::from_utf8(&len.expect("value"))
        .expect("text")
        .parse()
        .expect("number");
    assert_eq!(out.payload.len(), len + 4);
}

#[test]
fn dead_letters_say_what_failed_and_where_the_record_was() {
    let input = record(b"bad", vec![header("trace", "t1")]);
    let letter = dead_letter(&route(Format::Kserve), &input, Stage::Decode, "not JSON");
    assert!(letter.dead_letter);
    assert_eq!(letter.topic, "dlq");
    assert_eq!(letter.payload, Bytes::from_static(b"bad"));
    assert_eq!(
        letter.headers,
        vec![
            header("trace", "t1"),
            header(ERROR_HEADER, "not JSON"),
            header(STAGE_HEADER, "decode"),
            header(SOURCE_TOPIC_HEADER, "in"),
            header(SOURCE_PARTITION_HEADER, "3"),
            header(SOURCE_OFFSET_HEADER, "41"),
        ]
    );
}

#[test]
fn a_gap_letter_names_the_missing_range() {
    let letter = gap_letter(&route(Format::Kserve), "in", 2, 64, 69);
    assert!(letter.dead_letter);
    assert_eq!(letter.topic, "dlq");
    assert!(letter.payload.is_empty() && letter.key.is_none());
    let text = |name: &str| {
        let (_, value) = letter
            .headers
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("{name} missing"));
        String::from_utf8(value.clone().unwrap_or_default().to_vec()).unwrap_or_default()
    };
    assert_eq!(text(STAGE_HEADER), "fetch");
    assert_eq!(text(SOURCE_TOPIC_HEADER), "in");
    assert_eq!(text(SOURCE_PARTITION_HEADER), "2");
    assert_eq!(text(SOURCE_OFFSET_HEADER), "64");
    assert_eq!(text(SOURCE_LAST_OFFSET_HEADER), "69");
    assert!(
        text(ERROR_HEADER).contains("64 to 69"),
        "{}",
        text(ERROR_HEADER)
    );
}
