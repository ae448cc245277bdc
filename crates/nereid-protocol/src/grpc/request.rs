//! `ModelInferRequest` -> core [`InferRequest`].
//!
//! Input data comes from `raw_input_contents[i]` for the i-th input when the
//! request has raw contents (kept as the received `Bytes`, no copy), else
//! from the input's typed `contents`. As in Triton, an input may not carry
//! both; fewer raw contents than inputs is an error naming the first input
//! without data; extra raw contents are ignored, because Triton accepts
//! them and clients that send them work against Triton today.

use bytes::Bytes;
use nereid_core::{DataType, Error, InferRequest, InputTensor, RequestedOutput, SharedMemoryRef};

use super::contents::{Target, contents_to_raw};
use super::params::{check_request_parameters, parameters_from_proto};
use super::parse_version;
use crate::inference::ModelInferRequest;
use crate::inference::model_infer_request::{InferInputTensor, InferRequestedOutputTensor};
use crate::parameters::take_bool;
use crate::routing::take_routing;

/// Decodes a gRPC inference request. Shapes, datatypes and byte sizes are
/// checked against the model by the engine; this checks what only the wire
/// format can get wrong (datatype names, negative dims, where data is).
pub fn decode_infer_request(request: ModelInferRequest) -> Result<InferRequest, Error> {
    let ModelInferRequest {
        model_name,
        model_version,
        id,
        parameters,
        inputs,
        outputs,
        raw_input_contents,
    } = request;
    let version = parse_version(&model_version)?;
    // Triton reads the request's parameters before its inputs.
    check_request_parameters(&parameters)?;
    let has_raw = !raw_input_contents.is_empty();
    let mut raw = raw_input_contents.into_iter();
    let inputs = inputs
        .into_iter()
        .map(|input| {
            // As in Triton, inputs in shared memory take no raw contents.
            let in_shm = input
                .parameters
                .contains_key(nereid_core::shared_memory::REGION);
            let raw_data = if has_raw && !in_shm { raw.next() } else { None };
            decode_input(&model_name, input, has_raw, raw_data)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut parameters = parameters_from_proto(parameters, "the request")?;
    // Every gRPC output is raw already; dropped so that backends see the same
    // parameters whichever protocol a request came by (as REST does).
    take_bool(&mut parameters, "binary_data_output", "the request")?;
    let routing = take_routing(&mut parameters, version)?;
    let outputs = outputs
        .into_iter()
        .map(decode_output)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(InferRequest {
        model_name,
        id,
        routing,
        inputs,
        outputs,
        parameters,
        trace: None,
    })
}

fn decode_input(
    model: &str,
    input: InferInputTensor,
    has_raw: bool,
    raw: Option<Bytes>,
) -> Result<InputTensor, Error> {
    let InferInputTensor {
        name,
        datatype,
        shape,
        parameters,
        contents,
    } = input;
    let what = format!("input '{name}'");
    let parameters = parameters_from_proto(parameters, &what)?;
    let datatype = DataType::from_wire_name(&datatype).ok_or_else(|| {
        Error::invalid_argument(format!("invalid datatype '{datatype}' for input '{name}'"))
    })?;
    if let Some(d) = shape.iter().find(|&&d| d < 0) {
        return Err(Error::invalid_argument(format!(
            "input '{name}' has a negative dimension {d} in its shape"
        )));
    }
    let data = match (contents, raw) {
        // The engine reads it from the region.
        (None, _) if SharedMemoryRef::is_in(&parameters) => Bytes::new(),
        (Some(_), _) if SharedMemoryRef::is_in(&parameters) => {
            return Err(Error::invalid_argument(format!(
                "contents field must not be specified when using shared memory for '{name}' for model '{model}'"
            )));
        }
        (Some(_), _) if has_raw => {
            return Err(Error::invalid_argument(format!(
                "contents field must not be specified when using raw_input_contents for '{name}' for model '{model}'"
            )));
        }
        (Some(contents), _) => {
            let target = Target {
                input: &name,
                model,
                datatype,
            };
            contents_to_raw(&target, contents)?
        }
        (None, Some(raw)) => raw,
        (None, None) => {
            return Err(Error::invalid_argument(format!(
                "unable to find data for input tensor '{name}' for model '{model}' in request."
            )));
        }
    };
    Ok(InputTensor {
        name,
        datatype,
        shape,
        data,
        parameters,
    })
}

fn decode_output(output: InferRequestedOutputTensor) -> Result<RequestedOutput, Error> {
    let what = format!("output '{}'", output.name);
    let mut parameters = parameters_from_proto(output.parameters, &what)?;
    take_bool(&mut parameters, "binary_data", &what)?;
    Ok(RequestedOutput {
        name: output.name,
        parameters,
    })
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
