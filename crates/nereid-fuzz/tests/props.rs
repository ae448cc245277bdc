//! Every fuzz target's check on inputs proptest builds: near-valid
//! requests, configs and load parameters with the fields that matter
//! varied, so `cargo test` covers what `make fuzz` explores at length.

use nereid_fuzz::load_parameters::check_params;
use nereid_fuzz::{
    bytes_framing, config_pbtxt, grpc_infer_request, http_infer_body, json_tensor_data,
    load_parameters,
};
use nereid_protocol::inference::model_infer_request::InferInputTensor;
use nereid_protocol::inference::{InferTensorContents, ModelInferRequest};
use nereid_server::model_control::Param;
use proptest::prelude::*;
use prost::Message;
use serde_json::{Value, json};

const NAMES: [&str; 8] = ["IN0", "IN1", "IN2", "X", "S", "B", "U", "?"];
const DATATYPES: [&str; 15] = [
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16",
    "BF16", "FP32", "FP64", "BYTES", "FP8",
];

fn dim() -> impl Strategy<Value = i64> {
    prop_oneof![
        8 => 0i64..5,
        1 => Just(-1i64),
        1 => Just(i64::MAX),
        1 => Just(1i64 << 32),
    ]
}

fn shape() -> impl Strategy<Value = Vec<i64>> {
    prop::collection::vec(dim(), 0..4)
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "[a-z\u{e9}]{0,4}".prop_map(Value::from),
        Just(Value::Null),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop::collection::vec(inner, 0..6).prop_map(Value::Array)
    })
}

/// Where one HTTP input's data is: JSON values, binary bytes of a declared
/// size, or a shared memory region.
#[derive(Debug, Clone)]
enum Source {
    Json(Value),
    Binary(u64, Vec<u8>),
    Region,
}

fn source() -> impl Strategy<Value = Source> {
    prop_oneof![
        json_value().prop_map(Source::Json),
        (0u64..40, prop::collection::vec(any::<u8>(), 0..40))
            .prop_map(|(n, b)| Source::Binary(n, b)),
        (Just(u64::MAX), prop::collection::vec(any::<u8>(), 0..4))
            .prop_map(|(n, b)| Source::Binary(n, b)),
        Just(Source::Region),
    ]
}

fn http_body() -> impl Strategy<Value = Vec<u8>> {
    let input = (
        prop::sample::select(&NAMES[..]),
        prop::sample::select(&DATATYPES[..]),
        shape(),
        source(),
    );
    (prop::collection::vec(input, 0..4), any::<bool>(), -3i64..3).prop_map(
        |(inputs, binary_output, skew)| {
            let mut binary = Vec::new();
            let inputs: Vec<Value> = inputs
                .into_iter()
                .map(|(name, datatype, shape, source)| {
                    let mut input = json!({"name": name, "datatype": datatype, "shape": shape});
                    match source {
                        Source::Json(data) => input["data"] = data,
                        Source::Binary(size, bytes) => {
                            input["parameters"] = json!({"binary_data_size": size});
                            binary.extend(bytes);
                        }
                        Source::Region => {
                            input["parameters"] = json!({"shared_memory_region": "r"});
                        }
                    }
                    input
                })
                .collect();
            let header = json!({"inputs": inputs, "outputs": [{"name": "OUT0"}],
                "parameters": {"binary_data_output": binary_output}})
            .to_string()
            .into_bytes();
            let len = (header.len() as i64 + skew).max(0) as u16;
            let mut out = vec![1];
            out.extend_from_slice(&len.to_be_bytes());
            out.extend(header);
            out.extend(binary);
            out
        },
    )
}

fn contents() -> impl Strategy<Value = Option<InferTensorContents>> {
    let small = || prop::collection::vec(any::<i32>(), 0..6);
    prop::option::of(prop_oneof![
        small().prop_map(|v| InferTensorContents {
            int_contents: v,
            ..Default::default()
        }),
        small().prop_map(|v| InferTensorContents {
            uint_contents: v.into_iter().map(|x| x as u32).collect(),
            ..Default::default()
        }),
        prop::collection::vec(any::<f32>(), 0..6).prop_map(|v| InferTensorContents {
            fp32_contents: v,
            ..Default::default()
        }),
        prop::collection::vec(prop::collection::vec(any::<u8>(), 0..5), 0..4).prop_map(|v| {
            InferTensorContents {
                bytes_contents: v.into_iter().map(Into::into).collect(),
                ..Default::default()
            }
        }),
        prop::collection::vec(any::<bool>(), 0..6).prop_map(|v| InferTensorContents {
            bool_contents: v,
            int64_contents: vec![1],
            ..Default::default()
        }),
    ])
}

fn grpc_request() -> impl Strategy<Value = Vec<u8>> {
    let input = (
        prop::sample::select(&NAMES[..]),
        prop::sample::select(&DATATYPES[..]),
        shape(),
        contents(),
    )
        .prop_map(|(name, datatype, shape, contents)| InferInputTensor {
            name: name.into(),
            datatype: datatype.into(),
            shape,
            contents,
            ..Default::default()
        });
    (
        prop::collection::vec(input, 0..4),
        prop::collection::vec(prop::collection::vec(any::<u8>(), 0..24), 0..4),
        prop::sample::select(&["", "1", "-1", "x"][..]),
    )
        .prop_map(|(inputs, raw, version)| {
            ModelInferRequest {
                model_name: "m".into(),
                model_version: version.into(),
                inputs,
                raw_input_contents: raw.into_iter().map(Into::into).collect(),
                ..Default::default()
            }
            .encode_to_vec()
        })
}

/// `config.pbtxt` text from fields that parse, with the values that
/// validation cares about varied, and some noise.
fn pbtxt() -> impl Strategy<Value = String> {
    let field = prop_oneof![
        Just("name: \"m\"".to_owned()),
        Just("platform: \"ensemble\"".to_owned()),
        Just("backend: \"onnxruntime\"".to_owned()),
        (-2i32..10).prop_map(|n| format!("max_batch_size: {n}")),
        (shape(), 0usize..16).prop_map(|(dims, t)| format!(
            "input [ {{ name: \"in{t}\" data_type: {t} dims: {dims:?} reshape {{ shape: {dims:?} }} }} ]"
        )),
        (shape(), any::<bool>()).prop_map(|(dims, ragged)| format!(
            "output [ {{ name: \"out\" data_type: TYPE_FP32 dims: {dims:?} is_shape_tensor: {ragged} }} ]"
        )),
        (prop::collection::vec(-1i32..9, 0..3), -1i64..3).prop_map(|(sizes, delay)| format!(
            "dynamic_batching {{ preferred_batch_size: {sizes:?} max_queue_delay_microseconds: {delay} }}"
        )),
        (-1i32..3, prop::collection::vec(-1i32..3, 0..3)).prop_map(|(count, gpus)| format!(
            "instance_group [ {{ count: {count} kind: KIND_GPU gpus: {gpus:?} }} ]"
        )),
        Just("sequence_batching { direct { } control_input [ { name: \"S\" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0 ] } ] } ] }".to_owned()),
        Just("ensemble_scheduling { step [ { model_name: \"a\" model_version: -1 input_map { key: \"x\" value: \"y\" } } ] }".to_owned()),
        Just("version_policy: { specific { versions: [ 1, -3 ] } }".to_owned()),
        Just("response_cache { enable: true }".to_owned()),
        Just("model_transaction_policy { decoupled: true }".to_owned()),
        "[\\[\\]{}:# \"a-z0-9\\n]{0,12}",
    ];
    prop::collection::vec(field, 0..8).prop_map(|fields| fields.join("\n"))
}

fn file_path() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(&["1", "..", ".", "", "model.onnx", "a\0b", "/"][..]);
    prop::collection::vec(piece, 0..4).prop_map(|p| p.join("/"))
}

fn param() -> impl Strategy<Value = Param> {
    prop_oneof![
        any::<bool>().prop_map(Param::Bool),
        any::<i64>().prop_map(Param::Int),
        prop_oneof![
            Just(r#"{"name": "m", "backend": "onnxruntime", "max_batch_size": 2}"#.to_owned()),
            Just(r#"{"input": [{"name": "x", "dims": [-5]}], "max_batch_size": -1}"#.to_owned()),
            ".{0,8}".prop_map(|s| s),
        ]
        .prop_map(Param::Text),
        prop::collection::vec(any::<u8>(), 0..8).prop_map(Param::Bytes),
    ]
}

fn load_params() -> impl Strategy<Value = (String, Vec<(String, Param)>)> {
    let key = prop_oneof![
        Just("config".to_owned()),
        file_path().prop_map(|p| format!("file:{p}")),
        Just("unload_dependents".to_owned()),
    ];
    (
        prop::sample::select(&["m", "..", "a/b", "", "."][..]).prop_map(str::to_owned),
        prop::collection::vec((key, param()), 0..4),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn http_infer_body_on_built_requests(body in http_body()) {
        http_infer_body::check(&body);
    }

    #[test]
    fn http_infer_body_on_any_bytes(body in prop::collection::vec(any::<u8>(), 0..64)) {
        http_infer_body::check(&body);
    }

    #[test]
    fn json_tensor_data_of_every_datatype(kind: u8, mode: u8, data in json_value()) {
        let mut input = vec![kind, mode];
        input.extend(data.to_string().into_bytes());
        json_tensor_data::check(&input);
    }

    #[test]
    fn bytes_framing_of_any_buffer(data in prop::collection::vec(any::<u8>(), 0..64)) {
        bytes_framing::check(&data);
    }

    #[test]
    fn bytes_framing_of_framed_elements(
        elements in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..12), 0..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut data = Vec::new();
        for e in &elements {
            nereid_core::tensor::push_bytes_element(&mut data, e);
        }
        bytes_framing::check(&data);
        let cut = cut.index(data.len() + 1);
        bytes_framing::check(&data[..cut]);
    }

    #[test]
    fn grpc_infer_request_with_raw_and_typed_contents(message in grpc_request()) {
        grpc_infer_request::check(&message);
    }

    #[test]
    fn config_pbtxt_of_varied_fields(text in pbtxt()) {
        config_pbtxt::check(text.as_bytes());
    }

    #[test]
    fn load_parameters_from_either_frontend((model, params) in load_params()) {
        let json: serde_json::Map<String, Value> = params
            .iter()
            .map(|(k, v)| {
                let value = match v {
                    Param::Bool(b) => json!(b),
                    Param::Int(i) => json!(i),
                    Param::Text(t) | Param::Other(t) => json!(t),
                    Param::Bytes(b) => json!(String::from_utf8_lossy(b)),
                };
                (k.clone(), value)
            })
            .collect();
        let mut body = format!("{model}\n").into_bytes();
        body.extend(json!({ "parameters": json }).to_string().into_bytes());
        load_parameters::check(&body);
        check_params(&model, params);
    }
}
