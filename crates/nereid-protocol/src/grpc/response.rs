//! Core [`InferResponse`] -> `ModelInferResponse`: every output's data goes
//! in `raw_output_contents` (as Triton does), moved, not copied; an output
//! written into shared memory has an empty entry there.

use std::collections::HashMap;

use nereid_core::InferResponse;

use super::params::parameters_to_proto;
use crate::inference::model_infer_response::InferOutputTensor;
use crate::inference::{ModelInferResponse, ModelStreamInferResponse};

/// Encodes a response; output `i`'s bytes are `raw_output_contents[i]`.
pub fn encode_infer_response(response: InferResponse) -> ModelInferResponse {
    let InferResponse {
        model_name,
        model_version,
        id,
        outputs,
        parameters,
        // Their data is empty already: as Triton, they keep their place in
        // `raw_output_contents` with an empty entry.
        in_shared_memory: _,
    } = response;
    let mut tensors = Vec::with_capacity(outputs.len());
    let mut raw = Vec::with_capacity(outputs.len());
    for output in outputs {
        tensors.push(InferOutputTensor {
            name: output.name,
            datatype: output.datatype.wire_name().to_string(),
            shape: output.shape,
            parameters: HashMap::new(),
            contents: None,
        });
        raw.push(output.data);
    }
    ModelInferResponse {
        model_name,
        model_version: model_version.to_string(),
        id,
        parameters: parameters_to_proto(&parameters),
        outputs: tensors,
        raw_output_contents: raw,
    }
}

/// The stream message for a request that failed: the error, and the
/// request's id (with its model name and version) so the client can tell
/// which request it answers. The stream itself stays open.
pub fn stream_error_response(
    id: String,
    model_name: String,
    model_version: String,
    message: &str,
) -> ModelStreamInferResponse {
    ModelStreamInferResponse {
        error_message: message.to_string(),
        infer_response: Some(ModelInferResponse {
            model_name,
            model_version,
            id,
            ..ModelInferResponse::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use nereid_core::{DataType, Parameter, Parameters, Tensor};

    use super::*;

    #[test]
    fn outputs_go_raw_in_order_without_copy() {
        let data = Bytes::from(vec![1u8, 0, 0, 0, 2, 0, 0, 0]);
        let response = InferResponse {
            model_name: "simple".into(),
            model_version: 3,
            id: "req-1".into(),
            outputs: vec![
                Tensor {
                    name: "OUT0".into(),
                    datatype: DataType::Int32,
                    shape: vec![1, 2],
                    data: data.clone(),
                },
                Tensor {
                    name: "OUT1".into(),
                    datatype: DataType::Bytes,
                    shape: vec![0],
                    data: Bytes::new(),
                },
            ],
            parameters: Parameters::from([("p".to_string(), Parameter::Int64(4))]),
            in_shared_memory: Vec::new(),
        };
        let encoded = encode_infer_response(response);
        assert_eq!(encoded.model_name, "simple");
        assert_eq!(encoded.model_version, "3");
        assert_eq!(encoded.id, "req-1");
        assert_eq!(encoded.outputs.len(), 2);
        assert_eq!(encoded.outputs[0].name, "OUT0");
        assert_eq!(encoded.outputs[0].datatype, "INT32");
        assert_eq!(encoded.outputs[0].shape, vec![1, 2]);
        assert_eq!(encoded.outputs[1].datatype, "BYTES");
        assert!(encoded.outputs.iter().all(|o| o.contents.is_none()));
        assert_eq!(
            encoded.raw_output_contents,
            vec![data.clone(), Bytes::new()]
        );
        assert_eq!(encoded.raw_output_contents[0].as_ptr(), data.as_ptr());
        assert_eq!(encoded.parameters.len(), 1);
    }

    #[test]
    fn stream_errors_carry_the_request_id() {
        let r = stream_error_response("7".into(), "m".into(), "".into(), "boom");
        assert_eq!(r.error_message, "boom");
        let inner = r.infer_response.unwrap();
        assert_eq!(inner.id, "7");
        assert_eq!(inner.model_name, "m");
        assert!(inner.outputs.is_empty());
    }
}
