//! Decoding `POST /v2/models/{m}/infer` bodies: plain JSON, or a JSON header
//! followed by raw tensor bytes (the binary tensor data extension). Binary
//! inputs stay slices of the received body. Every size a client declares is
//! checked against what was actually received before it is used. A body
//! without a JSON header is a raw request (`raw_request.rs`).

use bytes::Bytes;
use nereid_core::tensor::element_count;
use nereid_core::{
    DataType, Error, InferRequest, InputTensor, ModelVersion, RequestedOutput, SharedMemoryRef,
};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{json_data, params};
use crate::parameters::{take_bool, take_size};
use crate::routing::take_routing;

#[derive(Deserialize)]
struct RequestJson {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
    inputs: Vec<InputJson>,
    #[serde(default)]
    outputs: Option<Vec<OutputJson>>,
}

#[derive(Deserialize)]
struct InputJson {
    name: String,
    shape: Vec<i64>,
    datatype: String,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
    #[serde(default)]
    data: Option<Value>,
}

#[derive(Deserialize)]
struct OutputJson {
    name: String,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
}

/// Which outputs go back as raw bytes after the JSON header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutputEncoding {
    /// The request's `binary_data_output` parameter.
    pub default_binary: bool,
    /// Outputs that set their own `binary_data` parameter.
    pub explicit: Vec<(String, bool)>,
}

impl OutputEncoding {
    pub fn is_binary(&self, output: &str) -> bool {
        self.explicit
            .iter()
            .find(|(name, _)| name == output)
            .map_or(self.default_binary, |&(_, binary)| binary)
    }
}

/// A decoded request and how its response is to be encoded.
#[derive(Debug)]
pub struct DecodedRequest {
    pub request: InferRequest,
    pub encoding: OutputEncoding,
}

/// Decodes an inference request body for `model` / `version` whose first
/// `json_len` bytes are its JSON header ([`inference_header_length`], not
/// 0: a body without a header is a raw request).
pub fn decode_infer_request(
    model: &str,
    version: ModelVersion,
    body: Bytes,
    json_len: usize,
) -> Result<DecodedRequest, Error> {
    let json = body
        .get(..json_len)
        .ok_or_else(|| out_of_range(body.len(), json_len))?;
    let parsed: RequestJson = serde_json::from_slice(json).map_err(|e| {
        Error::invalid_argument(format!("failed to parse the request JSON buffer: {e}"))
    })?;
    let mut binary = BinaryCursor {
        body: &body,
        offset: json_len,
    };
    let inputs = parsed
        .inputs
        .into_iter()
        .map(|input| decode_input(model, input, &mut binary))
        .collect::<Result<Vec<_>, _>>()?;
    if binary.offset != body.len() {
        return Err(Error::invalid_argument(format!(
            "unexpected additional input data for model '{model}'"
        )));
    }
    let mut parameters = params::from_json(parsed.parameters.unwrap_or_default(), "the request")?;
    params::check_sequence(&parameters)?;
    let routing = take_routing(&mut parameters, version)?;
    let default_binary =
        take_bool(&mut parameters, "binary_data_output", "the request")?.unwrap_or(false);
    let mut encoding = OutputEncoding {
        default_binary,
        explicit: Vec::new(),
    };
    let outputs = parsed
        .outputs
        .unwrap_or_default()
        .into_iter()
        .map(|o| decode_output(o, &mut encoding))
        .collect::<Result<Vec<_>, _>>()?;
    let request = InferRequest {
        model_name: model.to_string(),
        id: parsed.id.unwrap_or_default(),
        routing,
        inputs,
        outputs,
        parameters,
        trace: None,
    };
    Ok(DecodedRequest { request, encoding })
}

/// The length of the JSON header of a `body_len`-byte body, given its
/// `Inference-Header-Content-Length` value `header`; 0 means the body is
/// raw input data. Triton's rules: without the header the whole body is
/// JSON (so an empty body is raw); the value is read as C's `atoi` reads
/// it (`abc` is 0) and may be anything from 0 to the body's length.
pub fn inference_header_length(body_len: usize, header: Option<&str>) -> Result<usize, Error> {
    let Some(value) = header else {
        return Ok(body_len);
    };
    match usize::try_from(atoi(value)) {
        Ok(n) if n <= body_len => Ok(n),
        _ => Err(Error::invalid_argument(format!(
            "inference header size should be in range (0, {body_len}), got: {value}"
        ))),
    }
}

/// C's `atoi`: leading white space, a sign, then as many digits as there
/// are; 0 without digits. A value past `i32` (where `atoi` is undefined)
/// reads as -1, which every caller refuses.
fn atoi(text: &str) -> i64 {
    let text = text.trim_start();
    let (sign, rest) = match text.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, text.strip_prefix('+').unwrap_or(text)),
    };
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    if end == 0 {
        return 0;
    }
    rest[..end]
        .parse::<i32>()
        .map_or(-1, |v| sign * i64::from(v))
}

fn out_of_range(body_len: usize, json_len: usize) -> Error {
    Error::invalid_argument(format!(
        "inference header size should be in range (0, {body_len}), got: {json_len}"
    ))
}

/// The part of the body after the JSON header, consumed input by input.
struct BinaryCursor<'a> {
    body: &'a Bytes,
    offset: usize,
}

impl BinaryCursor<'_> {
    fn take(&mut self, model: &str, input: &str, size: u64) -> Result<Bytes, Error> {
        let remaining = (self.body.len() - self.offset) as u64;
        if size > remaining {
            return Err(Error::invalid_argument(format!(
                "unexpected size for input '{input}', expecting {size} additional bytes for model '{model}' but only {remaining} remain in the body"
            )));
        }
        let start = self.offset;
        self.offset += size as usize;
        Ok(self.body.slice(start..self.offset))
    }
}

fn decode_input(
    model: &str,
    input: InputJson,
    binary: &mut BinaryCursor<'_>,
) -> Result<InputTensor, Error> {
    let InputJson {
        name,
        shape,
        datatype,
        parameters,
        data,
    } = input;
    let datatype = DataType::from_wire_name(&datatype).ok_or_else(|| {
        Error::invalid_argument(format!("invalid datatype '{datatype}' for input '{name}'"))
    })?;
    if let Some(d) = shape.iter().find(|&&d| d < 0) {
        return Err(Error::invalid_argument(format!(
            "input '{name}' has a negative dimension {d} in its shape"
        )));
    }
    let what = format!("input '{name}'");
    let mut parameters = params::from_json(parameters.unwrap_or_default(), &what)?;
    let binary_size = take_size(&mut parameters, "binary_data_size", &what)?;
    let in_shared_memory = SharedMemoryRef::is_in(&parameters);
    one_data_source(data.is_some(), binary_size.is_some(), in_shared_memory)?;
    let data = match (binary_size, data) {
        (Some(size), _) => binary.take(model, &name, size)?,
        (None, Some(data)) => {
            let expected = element_count(&shape).unwrap_or(u64::MAX);
            Bytes::from(json_data::encode(&name, datatype, &data, expected)?)
        }
        // The engine reads it from the region.
        (None, None) => Bytes::new(),
    };
    Ok(InputTensor {
        name,
        datatype,
        shape,
        data,
        parameters,
    })
}

/// Refuses an input with more or fewer than one place for its data, in
/// Triton's words.
fn one_data_source(data: bool, binary: bool, shared_memory: bool) -> Result<(), Error> {
    let set: Vec<&str> = [
        (data, "'data'"),
        (binary, "'binary_data_size'"),
        (shared_memory, "'shared_memory_region'"),
    ]
    .into_iter()
    .filter_map(|(is_set, field)| is_set.then_some(field))
    .collect();
    if set.len() == 1 {
        return Ok(());
    }
    let found = if set.is_empty() {
        "no field is set".to_string()
    } else {
        format!("set {}", set.join(" "))
    };
    Err(Error::invalid_argument(format!(
        "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. But {found}"
    )))
}

fn decode_output(
    output: OutputJson,
    encoding: &mut OutputEncoding,
) -> Result<RequestedOutput, Error> {
    let what = format!("output '{}'", output.name);
    let mut parameters = params::from_json(output.parameters.unwrap_or_default(), &what)?;
    let binary = take_bool(&mut parameters, "binary_data", &what)?;
    // tritonclient sends `binary_data: false` with a region; Triton
    // refuses only `true`.
    if binary == Some(true) && SharedMemoryRef::is_in(&parameters) {
        return Err(Error::invalid_argument(
            "Output can't set both 'shared_memory_region' and 'binary_data'",
        ));
    }
    if let Some(binary) = binary {
        encoding.explicit.push((output.name.clone(), binary));
    }
    Ok(RequestedOutput {
        name: output.name,
        parameters,
    })
}

#[cfg(test)]
mod tests {
    use nereid_core::Parameter;

    use super::*;

    fn decode(body: serde_json::Value) -> Result<DecodedRequest, Error> {
        let body = Bytes::from(body.to_string());
        let json_len = body.len();
        decode_infer_request("m", ModelVersion::Latest, body, json_len)
    }

    #[test]
    fn the_header_length_is_read_as_triton_reads_it() {
        assert_eq!(inference_header_length(94, None).unwrap(), 94);
        assert_eq!(inference_header_length(0, None).unwrap(), 0);
        assert_eq!(inference_header_length(94, Some("94")).unwrap(), 94);
        assert_eq!(inference_header_length(94, Some("0")).unwrap(), 0);
        assert_eq!(inference_header_length(94, Some("abc")).unwrap(), 0);
        assert_eq!(inference_header_length(94, Some(" +12abc")).unwrap(), 12);
        for value in ["-1", "95", "99999999999"] {
            let e = inference_header_length(94, Some(value)).unwrap_err();
            assert_eq!(
                e.message(),
                format!("inference header size should be in range (0, 94), got: {value}")
            );
        }
    }

    #[test]
    fn an_input_in_shared_memory_keeps_its_place_for_the_engine() {
        let decoded = decode(serde_json::json!({"inputs": [{
            "name": "IN", "shape": [2], "datatype": "INT32",
            "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 8}
        }]}))
        .unwrap();
        let input = &decoded.request.inputs[0];
        assert!(input.data.is_empty());
        assert_eq!(
            input.parameters.get("shared_memory_region"),
            Some(&Parameter::String("r".into()))
        );
    }

    #[test]
    fn an_input_needs_exactly_one_place_for_its_data() {
        let e = decode(serde_json::json!({"inputs": [{
            "name": "IN", "shape": [1], "datatype": "INT32", "data": [1],
            "parameters": {"shared_memory_region": "r", "binary_data_size": 4}
        }]}))
        .unwrap_err();
        assert!(
            e.message()
                .ends_with("But set 'data' 'binary_data_size' 'shared_memory_region'"),
            "{e}"
        );
        let e = decode(serde_json::json!({"inputs": [{
            "name": "IN", "shape": [1], "datatype": "INT32"
        }]}))
        .unwrap_err();
        assert!(e.message().ends_with("But no field is set"), "{e}");
    }

    #[test]
    fn an_output_in_shared_memory_cannot_be_binary() {
        let output = |binary: bool| {
            serde_json::json!({"inputs": [], "outputs": [{"name": "OUT", "parameters": {
                "shared_memory_region": "r", "shared_memory_byte_size": 4, "binary_data": binary
            }}]})
        };
        assert!(decode(output(false)).is_ok());
        let e = decode(output(true)).unwrap_err();
        assert_eq!(
            e.message(),
            "Output can't set both 'shared_memory_region' and 'binary_data'"
        );
    }
}
