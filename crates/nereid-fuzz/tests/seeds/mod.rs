//! The seed inputs of each fuzz target, built from valid requests and
//! configs so the fuzzer starts deep inside each parser. `fuzz/seeds/` holds
//! them as files (written by `cargo test -p nereid-fuzz --test replay --
//! --ignored write_seeds`).

use base64::Engine as _;
use nereid_fuzz::http_infer_body;
use nereid_protocol::inference::model_infer_request::{
    InferInputTensor, InferRequestedOutputTensor,
};
use nereid_protocol::inference::{InferParameter, InferTensorContents, ModelInferRequest};
use prost::Message;
use serde_json::json;

/// `(target, name, input)` for every seed.
pub fn all() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut seeds = Vec::new();
    let mut add = |target: &'static str, inputs: Vec<Vec<u8>>| {
        for (i, input) in inputs.into_iter().enumerate() {
            seeds.push((target, format!("seed-{i:02}"), input));
        }
    };
    add("http_infer_body", http());
    add("json_tensor_data", json_tensor_data());
    add("bytes_framing", bytes_framing());
    add("grpc_infer_request", grpc());
    add("config_pbtxt", config_pbtxt());
    add("load_parameters", load_parameters());
    seeds
}

fn framed(elements: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in elements {
        nereid_core::tensor::push_bytes_element(&mut out, e);
    }
    out
}

fn le<const N: usize, T: Copy>(values: &[T], f: fn(T) -> [u8; N]) -> Vec<u8> {
    values.iter().flat_map(|&v| f(v)).collect()
}

fn http() -> Vec<Vec<u8>> {
    let json_only = json!({"id": "r1", "inputs": [
        {"name": "IN0", "shape": [2, 3], "datatype": "INT32", "data": [[1, 2, 3], [4, 5, 6]]},
        {"name": "IN1", "shape": [2, 1], "datatype": "BYTES", "data": ["a", "bc"]}
    ], "outputs": [{"name": "OUT0", "parameters": {"binary_data": true}}]});
    let binary_header = json!({"inputs": [
        {"name": "IN0", "shape": [1, 3], "datatype": "INT32", "parameters": {"binary_data_size": 12}},
        {"name": "IN1", "shape": [1, 2], "datatype": "BYTES", "parameters": {"binary_data_size": 11}},
        {"name": "IN2", "shape": [1, 2], "datatype": "FP16", "parameters": {"binary_data_size": 4}}
    ], "parameters": {"binary_data_output": true}});
    let mut binary = le(&[7i32, -8, 9], i32::to_le_bytes);
    binary.extend(framed(&[b"xyz", b""]));
    binary.extend(le(&[0x3c00u16, 0xc000], u16::to_le_bytes));
    let plain = json!({"inputs": [
        {"name": "X", "shape": [4], "datatype": "FP32", "parameters": {"binary_data_size": 16}},
        {"name": "S", "shape": [2], "datatype": "BYTES", "data": ["s", "t"]},
        {"name": "B", "shape": [3], "datatype": "BOOL", "data": [true, false, true]},
        {"name": "U", "shape": [1, 2], "datatype": "UINT64", "data": [[1, 18446744073709551615u64]]}
    ], "outputs": [{"name": "Y"}]});
    let shm = json!({"inputs": [
        {"name": "X", "shape": [4], "datatype": "FP32",
         "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 16}}
    ], "outputs": [{"name": "Y", "parameters": {"shared_memory_region": "o",
         "shared_memory_byte_size": 16, "binary_data": false}}]});
    let bytes = |v: &serde_json::Value| v.to_string().into_bytes();
    let mut header_text = b"\x02 14 \n".to_vec();
    header_text.extend(b"{\"inputs\": []}");
    vec![
        [vec![0], bytes(&json_only)].concat(),
        http_infer_body::encode(&bytes(&binary_header), &binary),
        http_infer_body::encode(
            &bytes(&plain),
            &le(&[1.0f32, 2.0, 3.0, 4.0], f32::to_le_bytes),
        ),
        [vec![0], bytes(&shm)].concat(),
        header_text,
    ]
}

fn json_tensor_data() -> Vec<Vec<u8>> {
    let values = [
        json!([[true, false], [false, true]]),
        json!([0, 1, 255]),
        json!([[-1, 2], [3, -4]]),
        json!([1.5, -2.25, 1e300, 0]),
        json!(["", "a", "é", "\u{0}"]),
        json!([[[1]], [[2]]]),
        json!([18446744073709551615u64, -9223372036854775808i64]),
        json!(7),
    ];
    let mut seeds = Vec::new();
    for kind in 0..nereid_core::DataType::ALL.len() as u8 {
        let value = &values[usize::from(kind) % values.len()];
        let mut input = vec![kind, kind % 4];
        input.extend(value.to_string().into_bytes());
        seeds.push(input);
    }
    seeds
}

fn bytes_framing() -> Vec<Vec<u8>> {
    vec![
        framed(&[b"a", b"", b"longer element"]),
        framed(&[]),
        [framed(&[b"ok"]), vec![5, 0, 0, 0, b'x']].concat(),
        vec![0xff, 0xff, 0xff, 0xff, 1],
        vec![1, 0],
    ]
}

fn tensor(name: &str, datatype: &str, shape: &[i64]) -> InferInputTensor {
    InferInputTensor {
        name: name.into(),
        datatype: datatype.into(),
        shape: shape.to_vec(),
        ..Default::default()
    }
}

fn grpc() -> Vec<Vec<u8>> {
    let raw = ModelInferRequest {
        model_name: "batched".into(),
        model_version: "1".into(),
        id: "g1".into(),
        inputs: vec![
            tensor("IN0", "INT32", &[1, 3]),
            tensor("IN1", "BYTES", &[1, 1]),
        ],
        outputs: vec![InferRequestedOutputTensor {
            name: "OUT0".into(),
            ..Default::default()
        }],
        raw_input_contents: vec![
            le(&[1i32, 2, 3], i32::to_le_bytes).into(),
            framed(&[b"q"]).into(),
        ],
        ..Default::default()
    };
    let mut x = tensor("X", "FP32", &[4]);
    x.contents = Some(InferTensorContents {
        fp32_contents: vec![1.0, 2.0, 3.0, 4.0],
        ..Default::default()
    });
    let mut s = tensor("S", "BYTES", &[2]);
    s.contents = Some(InferTensorContents {
        bytes_contents: vec![b"a".to_vec().into(), b"b".to_vec().into()],
        ..Default::default()
    });
    let mut u = tensor("U", "UINT64", &[1, 1]);
    u.contents = Some(InferTensorContents {
        uint64_contents: vec![u64::MAX],
        ..Default::default()
    });
    let typed = ModelInferRequest {
        model_name: "plain".into(),
        inputs: vec![x, s, u],
        ..Default::default()
    };
    let mut in_shm = tensor("X", "FP32", &[4]);
    in_shm.parameters.insert(
        "shared_memory_region".into(),
        InferParameter {
            parameter_choice: Some(
                nereid_protocol::inference::infer_parameter::ParameterChoice::StringParam(
                    "r".into(),
                ),
            ),
        },
    );
    let shm = ModelInferRequest {
        model_name: "plain".into(),
        inputs: vec![in_shm, tensor("B", "BOOL", &[2])],
        raw_input_contents: vec![vec![1u8, 0].into()],
        ..Default::default()
    };
    vec![
        raw.encode_to_vec(),
        typed.encode_to_vec(),
        shm.encode_to_vec(),
    ]
}

/// The example repository's configs.
fn config_pbtxt() -> Vec<Vec<u8>> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../model_repository");
    let mut paths: Vec<_> = std::fs::read_dir(root)
        .expect("model_repository/")
        .map(|e| e.expect("an entry").path().join("config.pbtxt"))
        .filter(|p| p.exists())
        .collect();
    paths.sort();
    let mut seeds: Vec<Vec<u8>> = paths
        .iter()
        .map(|p| std::fs::read(p).expect("a config"))
        .collect();
    seeds.push(
        br#"name: "seq" max_batch_size: 2 backend: "onnxruntime"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] reshape { shape: [ ] } } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
sequence_batching { max_sequence_idle_microseconds: 5000000
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] } ]
  oldest { max_candidate_sequences: 4 } }
instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0, 1 ] } ]
version_policy: { latest { num_versions: 2 } }
model_warmup [ { name: "w" batch_size: 1 inputs { key: "IN" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } } ]
"#
        .to_vec(),
    );
    seeds
}

fn load_parameters() -> Vec<Vec<u8>> {
    let config = json!({"name": "m", "backend": "onnxruntime", "max_batch_size": 2,
        "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [-1]}],
        "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [-1]}],
        "dynamic_batching": {"preferred_batch_size": [2]}});
    let base64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let body = |name: &str, parameters: serde_json::Value| {
        let mut out = format!("{name}\n").into_bytes();
        out.extend(json!({ "parameters": parameters }).to_string().into_bytes());
        out
    };
    vec![
        body(
            "m",
            json!({"config": config.to_string(), "file:1/model.onnx": base64(b"onnx")}),
        ),
        body("m", json!({"config": config.to_string()})),
        body(
            "m",
            json!({"config": "{}", "file:../x": base64(b""), "file:1/a/b": base64(b"c")}),
        ),
        body("..", json!({"config": "{}", "file:1/x": "not base64!"})),
        body("m", json!({"config": 1, "other": [1, 2]})),
    ]
}
