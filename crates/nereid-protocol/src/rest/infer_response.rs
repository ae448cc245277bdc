//! Encoding inference responses: JSON, with the outputs the client asked
//! for as raw bytes after the JSON header (binary tensor data extension).

use bytes::{BufMut, Bytes, BytesMut};
use nereid_core::{DataType, Error, InferResponse, Parameters};
use serde::Serialize;

use super::infer_request::OutputEncoding;
use super::json_data::{self, JsonData};
use super::params::JsonParameters;

#[derive(Serialize)]
struct ResponseJson<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    id: &'a str,
    model_name: &'a str,
    model_version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<JsonParameters<'a>>,
    outputs: Vec<OutputJson<'a>>,
}

#[derive(Serialize)]
struct OutputJson<'a> {
    name: &'a str,
    datatype: &'static str,
    shape: &'a [i64],
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<JsonParameters<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<JsonData<'a>>,
}

/// An encoded response body; `header_length` is set when raw output bytes
/// follow the JSON header (not when every binary output is empty).
#[derive(Debug)]
pub struct EncodedResponse {
    pub body: Bytes,
    pub header_length: Option<usize>,
}

/// How one output travels in the body.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Placement {
    Json,
    Binary,
    /// Written into a shared memory region: neither data nor parameters,
    /// as Triton answers it.
    SharedMemory,
}

fn placements(response: &InferResponse, encoding: &OutputEncoding) -> Vec<Placement> {
    response
        .outputs
        .iter()
        .map(|o| {
            if response.in_shared_memory.contains(&o.name) {
                Placement::SharedMemory
            } else if encoding.is_binary(&o.name) {
                Placement::Binary
            } else {
                Placement::Json
            }
        })
        .collect()
}

/// Encodes `response`, sending as raw bytes the outputs `encoding` marks
/// binary. An FP16 or BF16 output asked for as JSON fails the whole
/// response, as in Triton.
pub fn encode_infer_response(
    response: &InferResponse,
    encoding: &OutputEncoding,
) -> Result<EncodedResponse, Error> {
    let placements = placements(response, encoding);
    for (output, &placement) in response.outputs.iter().zip(&placements) {
        if placement == Placement::Json {
            json_data::check_output(output.datatype)?;
        }
    }
    let binary_params: Vec<Option<Parameters>> = response
        .outputs
        .iter()
        .zip(&placements)
        .map(|(o, &placement)| {
            (placement == Placement::Binary).then(|| {
                Parameters::from([(
                    "binary_data_size".to_string(),
                    nereid_core::Parameter::Uint64(o.data.len() as u64),
                )])
            })
        })
        .collect();
    let outputs = response
        .outputs
        .iter()
        .zip(&binary_params)
        .zip(&placements)
        .map(|((o, params), &placement)| OutputJson {
            name: &o.name,
            datatype: DataType::wire_name(o.datatype),
            shape: &o.shape,
            parameters: params.as_ref().map(JsonParameters),
            data: (placement == Placement::Json).then_some(JsonData {
                datatype: o.datatype,
                data: &o.data,
            }),
        })
        .collect();
    let json = ResponseJson {
        id: &response.id,
        model_name: &response.model_name,
        model_version: response.model_version.to_string(),
        parameters: (!response.parameters.is_empty())
            .then_some(JsonParameters(&response.parameters)),
        outputs,
    };
    let header = serde_json::to_vec(&json)
        .map_err(|e| Error::internal(format!("cannot encode the response: {e}")))?;
    let binary_len: usize = response
        .outputs
        .iter()
        .zip(&binary_params)
        .filter(|(_, p)| p.is_some())
        .map(|(o, _)| o.data.len())
        .sum();
    // As in Triton, empty binary outputs add no bytes, and a body without
    // binary bytes goes as JSON.
    if binary_len == 0 {
        return Ok(EncodedResponse {
            body: Bytes::from(header),
            header_length: None,
        });
    }
    let mut body = BytesMut::with_capacity(header.len() + binary_len);
    body.put_slice(&header);
    for (output, params) in response.outputs.iter().zip(&binary_params) {
        if params.is_some() {
            body.put_slice(&output.data);
        }
    }
    Ok(EncodedResponse {
        body: body.freeze(),
        header_length: Some(header.len()),
    })
}

#[cfg(test)]
mod tests {
    use nereid_core::Tensor;

    use super::*;

    fn tensor(name: &str, data: Vec<u8>) -> Tensor {
        Tensor {
            name: name.into(),
            datatype: DataType::Uint8,
            shape: vec![data.len() as i64],
            data: Bytes::from(data),
        }
    }

    #[test]
    fn a_half_float_output_asked_for_as_json_is_refused() {
        let half = Tensor {
            datatype: DataType::Fp16,
            ..tensor("OUT", vec![0, 60])
        };
        let response = InferResponse {
            model_name: "m".into(),
            model_version: 1,
            id: String::new(),
            outputs: vec![half],
            parameters: Parameters::new(),
            in_shared_memory: Vec::new(),
        };
        let e = encode_infer_response(&response, &OutputEncoding::default()).unwrap_err();
        assert_eq!(
            e.message(),
            "sending FP16 data via JSON is not supported. Please use the binary data format for output"
        );
        let binary = OutputEncoding {
            default_binary: true,
            explicit: Vec::new(),
        };
        assert!(encode_infer_response(&response, &binary).is_ok());
    }

    #[test]
    fn empty_binary_outputs_leave_a_json_body() {
        let response = InferResponse {
            model_name: "m".into(),
            model_version: 1,
            id: String::new(),
            outputs: vec![tensor("EMPTY", vec![])],
            parameters: Parameters::new(),
            in_shared_memory: Vec::new(),
        };
        let binary = OutputEncoding {
            default_binary: true,
            explicit: Vec::new(),
        };
        let encoded = encode_infer_response(&response, &binary).unwrap();
        assert_eq!(encoded.header_length, None);
        let body: serde_json::Value = serde_json::from_slice(&encoded.body).unwrap();
        assert_eq!(
            body["outputs"][0]["parameters"]["binary_data_size"],
            serde_json::json!(0)
        );
    }

    #[test]
    fn outputs_in_shared_memory_carry_neither_data_nor_parameters() {
        let response = InferResponse {
            model_name: "m".into(),
            model_version: 1,
            id: String::new(),
            outputs: vec![tensor("SHM", vec![]), tensor("BIN", vec![7, 8])],
            parameters: Parameters::new(),
            in_shared_memory: vec!["SHM".into()],
        };
        let encoding = OutputEncoding {
            default_binary: true,
            explicit: Vec::new(),
        };
        let encoded = encode_infer_response(&response, &encoding).unwrap();
        let header_length = encoded.header_length.unwrap();
        let header: serde_json::Value =
            serde_json::from_slice(&encoded.body[..header_length]).unwrap();
        assert_eq!(
            header["outputs"][0],
            serde_json::json!({"name": "SHM", "datatype": "UINT8", "shape": [0]})
        );
        assert_eq!(
            header["outputs"][1]["parameters"]["binary_data_size"],
            serde_json::json!(2)
        );
        assert_eq!(&encoded.body[header_length..], &[7, 8]);
    }
}
