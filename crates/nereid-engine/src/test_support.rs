//! Values the engine's unit tests share.

use bytes::Bytes;
use nereid_core::{DataType, InferResponse, Parameters, Tensor};

/// A response of model `m` version 1 with one UINT8 output `OUT` holding
/// `data`.
pub fn uint8_response(data: Vec<u8>) -> InferResponse {
    InferResponse {
        model_name: "m".into(),
        model_version: 1,
        id: String::new(),
        outputs: vec![Tensor {
            name: "OUT".into(),
            datatype: DataType::Uint8,
            shape: vec![data.len() as i64],
            data: Bytes::from(data),
        }],
        parameters: Parameters::new(),
        in_shared_memory: Vec::new(),
    }
}
