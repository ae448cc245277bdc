//! `BYTES` tensors: elements framed as a u32 little-endian length and the
//! element's bytes, as clients send them in binary data or raw contents.

use bytes::Bytes;
use nereid_core::tensor::{bytes_elements, count_bytes_elements, push_bytes_element};
use nereid_core::{DataType, InferResponse, Parameters, Tensor};
use nereid_protocol::rest::{OutputEncoding, encode_infer_response};

/// The whole input is the buffer. A well-framed buffer re-encodes to the
/// same bytes; a broken one names the element where the framing broke,
/// after every element before it was read.
pub fn check(data: &[u8]) {
    let mut elements = Vec::new();
    let mut failure = None;
    for element in bytes_elements(data) {
        match element {
            Ok(e) => elements.push(e),
            Err(e) => failure = Some(e),
        }
    }
    assert_eq!(
        count_bytes_elements(data),
        failure.clone().map_or(Ok(elements.len()), Err)
    );
    match &failure {
        None => {
            let mut again = Vec::with_capacity(data.len());
            for e in &elements {
                push_bytes_element(&mut again, e);
            }
            assert_eq!(again, data, "re-encoding changed the buffer");
        }
        Some(e) => assert!(
            e.to_string()
                .contains(&format!("element {}", elements.len()))
        ),
    }
    render(data, failure.is_none());
}

/// A `BYTES` output with this buffer renders as JSON exactly when it is
/// well framed.
fn render(data: &[u8], well_framed: bool) {
    let count = count_bytes_elements(data).unwrap_or(1) as i64;
    let response = InferResponse {
        model_name: "m".into(),
        model_version: 1,
        id: String::new(),
        outputs: vec![Tensor {
            name: "OUT".into(),
            datatype: DataType::Bytes,
            shape: vec![count],
            data: Bytes::copy_from_slice(data),
        }],
        parameters: Parameters::new(),
        in_shared_memory: Vec::new(),
    };
    let encoded = encode_infer_response(&response, &OutputEncoding::default());
    assert_eq!(encoded.is_ok(), well_framed, "{encoded:?}");
}
