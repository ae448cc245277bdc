//! An input's JSON `data` of every datatype: nested arrays of numbers,
//! booleans or strings, checked against the shape and encoded as raw bytes;
//! then rendered back as a JSON output.

use bytes::Bytes;
use nereid_core::tensor::{count_bytes_elements, element_count};
use nereid_core::{DataType, InferResponse, Parameters, Tensor};
use nereid_protocol::rest::{OutputEncoding, decode_infer_request, encode_infer_response};
use serde_json::{Value, json};

use crate::assert_clear;

/// The first byte picks the datatype, the second how the shape relates to
/// the number of values (matching, one more, split in two rows, or a huge
/// first dimension); the rest is the JSON `data`.
pub fn check(data: &[u8]) {
    let [kind, shape_mode, text @ ..] = data else {
        return;
    };
    let Ok(values) = serde_json::from_slice::<Value>(text) else {
        return;
    };
    let datatype = DataType::ALL[usize::from(*kind) % DataType::ALL.len()];
    let count = leaves(&values);
    let shape = shape_for(*shape_mode, count);
    let body = json!({"inputs": [{
        "name": "X", "datatype": datatype.wire_name(), "shape": shape, "data": values
    }]});
    let body = Bytes::from(body.to_string());
    let json_len = body.len();
    let input = match decode_infer_request("m", nereid_core::ModelVersion::Latest, body, json_len) {
        Ok(decoded) => decoded
            .request
            .inputs
            .into_iter()
            .next()
            .expect("one input"),
        Err(e) => return assert_clear(&e),
    };
    assert_eq!(element_count(&shape), Some(count as u64), "{shape:?}");
    match datatype.element_size() {
        Some(size) => assert_eq!(input.data.len(), count * size),
        None => assert_eq!(count_bytes_elements(&input.data), Ok(count)),
    }
    render(datatype, &input.shape, input.data, count);
}

/// The number of values in nested arrays, as the decoder flattens them.
fn leaves(value: &Value) -> usize {
    match value {
        Value::Array(items) => items.iter().map(leaves).sum(),
        _ => 1,
    }
}

fn shape_for(mode: u8, count: usize) -> Vec<i64> {
    let n = count as i64;
    match mode % 4 {
        0 => vec![n],
        1 => vec![n + 1],
        2 if count.is_multiple_of(2) => vec![2, n / 2],
        2 => vec![n, 1],
        _ => vec![i64::MAX, n],
    }
}

/// Renders the decoded bytes as a JSON output, which must hold `count`
/// values.
fn render(datatype: DataType, shape: &[i64], data: Bytes, count: usize) {
    let response = InferResponse {
        model_name: "m".into(),
        model_version: 1,
        id: String::new(),
        outputs: vec![Tensor {
            name: "X".into(),
            datatype,
            shape: shape.to_vec(),
            data,
        }],
        parameters: Parameters::new(),
        in_shared_memory: Vec::new(),
    };
    let rendered = encode_infer_response(&response, &OutputEncoding::default());
    if matches!(datatype, DataType::Fp16 | DataType::Bf16) {
        // As in Triton, half floats never go out as JSON.
        return assert_clear(&rendered.expect_err("a half-float JSON output"));
    }
    let encoded = rendered.expect("valid data renders");
    let body: Value = serde_json::from_slice(&encoded.body).expect("the response is JSON");
    let rendered = body["outputs"][0]["data"].as_array().map(Vec::len);
    assert_eq!(rendered, Some(count), "{body}");
}
