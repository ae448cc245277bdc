//! `POST /v2/models/{m}/infer` bodies: a JSON header, then binary tensor
//! data, split where `Inference-Header-Content-Length` says; without a
//! header (the value 0, or an empty body) the raw data of a model's one
//! input.

use bytes::Bytes;
use nereid_core::InferRequest;
use nereid_protocol::rest::{decode_infer_request, inference_header_length};

use crate::assert_clear;
use crate::models::{raw_against_models, validate_against_models};

/// The first byte says where the `Inference-Header-Content-Length` value
/// comes from: none (`0`), the next two bytes as a big-endian number (`1`)
/// or the text up to the first newline, as sent (`2`). The rest is the body.
pub fn check(data: &[u8]) {
    let Some((header, body)) = split(data) else {
        return;
    };
    let body = Bytes::copy_from_slice(body);
    let json_len = match inference_header_length(body.len(), header.as_deref()) {
        Ok(0) => return raw_against_models(body, check_decoded),
        Ok(json_len) => json_len,
        Err(e) => return assert_clear(&e),
    };
    match decode_infer_request("m", nereid_core::ModelVersion::Number(1), body, json_len) {
        Ok(decoded) => check_decoded(&decoded.request),
        Err(e) => assert_clear(&e),
    }
}

/// Every decoded shape is non-negative, and the models' validation takes
/// or refuses the request cleanly.
fn check_decoded(request: &InferRequest) {
    for input in &request.inputs {
        assert!(input.shape.iter().all(|&d| d >= 0), "{:?}", input.shape);
    }
    validate_against_models(request);
}

/// The header value and the body, as [`check`] reads its input.
pub fn split(data: &[u8]) -> Option<(Option<String>, &[u8])> {
    let (&mode, rest) = data.split_first()?;
    Some(match mode % 3 {
        0 => (None, rest),
        1 => {
            let (len, body) = rest.split_first_chunk::<2>()?;
            (Some(u16::from_be_bytes(*len).to_string()), body)
        }
        _ => {
            let end = rest.iter().position(|&b| b == b'\n')?;
            let value = String::from_utf8_lossy(&rest[..end]).into_owned();
            (Some(value), &rest[end + 1..])
        }
    })
}

/// The input [`check`] reads for `body` with `header_length` (mode `1`).
pub fn encode(json: &[u8], binary: &[u8]) -> Vec<u8> {
    let len = u16::try_from(json.len()).unwrap_or(u16::MAX);
    let mut out = vec![1];
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(json);
    out.extend_from_slice(binary);
    out
}
