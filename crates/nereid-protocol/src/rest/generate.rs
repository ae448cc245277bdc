//! Triton's generate extension (`/generate`, `/generate_stream`): a flat
//! JSON object instead of KServe's `inputs` list, read as Triton 2.51
//! reads it. A key that names one of the model's inputs becomes that
//! tensor, shaped from the model's dimensions; any other key becomes a
//! request parameter. `"id"` is also the request's id, and the members of
//! a `"parameters"` object are read as top-level keys are. A response is
//! a flat object too: each output by name (a lone element unwrapped from
//! its array), `model_name`, `model_version`, `id` when there is one, and
//! the response parameters, keys in byte order as Triton writes them.

use bytes::Bytes;
use nereid_core::{
    DataType, Error, InferRequest, InferResponse, InputTensor, ModelVersion, Parameter, Parameters,
    Tensor,
};
use serde_json::{Map, Value};

use super::json_data::{self, JsonData};

/// The key whose object's members are read as top-level keys (Triton's
/// one nested schema, "parameters").
const NESTED: &str = "parameters";

/// One input of the model, as its metadata gives it: `dims` with a
/// leading -1 for the batch when the model batches.
#[derive(Debug, Clone)]
pub struct GenerateInput {
    pub name: String,
    pub datatype: DataType,
    pub dims: Vec<i64>,
}

/// Decodes a generate request body for `model` with `inputs`. An empty
/// body is an empty object.
pub fn decode_generate_request(
    model: &str,
    version: ModelVersion,
    body: &[u8],
    inputs: &[GenerateInput],
) -> Result<InferRequest, Error> {
    let object = body_object(body)?;
    let mut request = InferRequest {
        model_name: model.to_owned(),
        id: request_id(&object)?,
        ..Default::default()
    };
    for (key, value) in object {
        if key == NESTED {
            flatten_nested(&mut request, inputs, value)?;
        } else {
            map_key(&mut request, inputs, key, value)?;
        }
    }
    request.routing = crate::routing::take_routing(&mut request.parameters, version)?;
    Ok(request)
}

fn body_object(body: &[u8]) -> Result<Map<String, Value>, Error> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice(body) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(_) => Err(Error::invalid_argument(
            "the generate request must be a JSON object",
        )),
        Err(e) => Err(Error::invalid_argument(format!(
            "failed to parse the request JSON buffer: {e}"
        ))),
    }
}

/// The body's `"id"`, a string; empty when there is none. It stays in the
/// body: Triton passes it on as a parameter (or tensor) too. Triton's
/// words, which it answers with 500 and Nereid with 400 (the request is at
/// fault).
fn request_id(object: &Map<String, Value>) -> Result<String, Error> {
    match object.get("id") {
        None => Ok(String::new()),
        Some(Value::String(id)) => Ok(id.clone()),
        Some(_) => Err(Error::invalid_argument(
            "Unable to parse 'id': attempt to access JSON non-string as string",
        )),
    }
}

/// `"parameters": {...}`: its members become tensors or parameters as
/// top-level keys do, and its errors say where they came from. Triton
/// answers a body whose `parameters` is not an object with 500; Nereid
/// with 400, in Triton's words.
fn flatten_nested(
    request: &mut InferRequest,
    inputs: &[GenerateInput],
    value: Value,
) -> Result<(), Error> {
    if inputs.iter().any(|input| input.name == NESTED) {
        return Err(Error::invalid_argument(format!(
            "Keyword '{NESTED}' for nested schema also given as input tensor name"
        )));
    }
    let Value::Object(members) = value else {
        return Err(Error::invalid_argument(format!(
            "Expected JSON object for keyword: '{NESTED}': attempt to access JSON non-object as object"
        )));
    };
    for (key, value) in members {
        map_key(request, inputs, key, value).map_err(|e| {
            Error::new(
                e.kind(),
                format!("Converting keyword: '{NESTED}': {}", e.message()),
            )
        })?;
    }
    Ok(())
}

/// One key: the tensor of the input it names, else a request parameter.
fn map_key(
    request: &mut InferRequest,
    inputs: &[GenerateInput],
    key: String,
    value: Value,
) -> Result<(), Error> {
    match inputs.iter().find(|input| input.name == key) {
        Some(input) => request.inputs.push(tensor(input, &value)?),
        None => {
            let parameter = parameter(&key, value)?;
            request.parameters.insert(key, parameter);
        }
    }
    Ok(())
}

/// The tensor for `input` from its JSON value (one element, or a flat
/// array), shaped as Triton shapes it: the fixed dimensions take their
/// share of the elements, the innermost variable one takes the rest and
/// the other variable ones are 1.
fn tensor(input: &GenerateInput, value: &Value) -> Result<InputTensor, Error> {
    let count = match value {
        Value::Array(items) => items.len() as i64,
        _ => 1,
    };
    let shape = shape_for(&input.name, &input.dims, count)?;
    let data = json_data::encode(&input.name, input.datatype, value, count as u64)?;
    Ok(InputTensor {
        name: input.name.clone(),
        datatype: input.datatype,
        shape,
        data: Bytes::from(data),
        parameters: Parameters::new(),
    })
}

fn shape_for(name: &str, dims: &[i64], count: i64) -> Result<Vec<i64>, Error> {
    let unfit = || {
        Error::invalid_argument(format!(
            "The schema can not convert input '{name}' to tensor with proper shape"
        ))
    };
    let mut left = count;
    for &dim in dims.iter().rev().filter(|&&d| d != -1) {
        if dim == 0 || left % dim != 0 {
            return Err(unfit());
        }
        left /= dim;
    }
    let mut shape = dims.to_vec();
    for dim in shape.iter_mut().rev().filter(|d| **d == -1) {
        *dim = left;
        left = 1;
    }
    if left != 1 && count != 0 {
        return Err(unfit());
    }
    Ok(shape)
}

/// A request parameter from a key that names no input, as Triton takes
/// it: a string, an integer, a boolean or another number.
fn parameter(key: &str, value: Value) -> Result<Parameter, Error> {
    match value {
        Value::String(s) => Ok(Parameter::String(s)),
        Value::Bool(b) => Ok(Parameter::Bool(b)),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Ok(Parameter::Int64(i)),
            (None, Some(f)) => Ok(Parameter::Double(f)),
            (None, None) => Err(invalid_parameter(key)),
        },
        _ => Err(invalid_parameter(key)),
    }
}

fn invalid_parameter(key: &str) -> Error {
    Error::invalid_argument(format!(
        "parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
    ))
}

/// Encodes one response as its flat JSON object. As in Triton, a name
/// taken keeps its first value: `id`, `model_name` and `model_version`
/// before the response parameters, those before the outputs; and the keys
/// come out in byte order (Triton gathers them in a `std::map`).
pub fn encode_generate_response(response: &InferResponse) -> Result<Vec<u8>, Error> {
    let mut object = Map::new();
    if !response.id.is_empty() {
        object.insert("id".into(), Value::String(response.id.clone()));
    }
    object.insert(
        "model_name".into(),
        Value::String(response.model_name.clone()),
    );
    object.insert(
        "model_version".into(),
        Value::String(response.model_version.to_string()),
    );
    for (key, value) in response.parameters.iter() {
        let value = match value {
            Parameter::Bool(b) => Value::from(*b),
            Parameter::Int64(i) => Value::from(*i),
            Parameter::Uint64(u) => Value::from(*u),
            Parameter::Double(d) => Value::from(*d),
            Parameter::String(s) => Value::from(s.clone()),
        };
        object.entry(key.clone()).or_insert(value);
    }
    for output in &response.outputs {
        let value = output_value(output)?;
        object.entry(output.name.clone()).or_insert(value);
    }
    serde_json::to_vec(&Value::Object(object))
        .map_err(|e| Error::internal(format!("cannot encode the response: {e}")))
}

/// An output's elements as JSON, a lone one unwrapped from its array.
fn output_value(output: &Tensor) -> Result<Value, Error> {
    json_data::check_output(output.datatype)?;
    let data = serde_json::to_value(JsonData {
        datatype: output.datatype,
        data: &output.data,
    })
    .map_err(|e| Error::internal(format!("output '{}': {e}", output.name)))?;
    Ok(match data {
        Value::Array(mut items) if items.len() == 1 => items.remove(0),
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn inputs() -> Vec<GenerateInput> {
        vec![
            GenerateInput {
                name: "text_input".into(),
                datatype: DataType::Bytes,
                dims: vec![1],
            },
            GenerateInput {
                name: "ids".into(),
                datatype: DataType::Int32,
                dims: vec![-1, 2, -1],
            },
        ]
    }

    #[test]
    fn inputs_become_tensors_and_other_keys_parameters() {
        let body = json!({"text_input": "hi", "stream": false, "max_tokens": 5, "temperature": 0.5, "tag": "x"});
        let request = decode_generate_request(
            "m",
            ModelVersion::Number(2),
            body.to_string().as_bytes(),
            &inputs(),
        )
        .unwrap();
        assert_eq!(
            (request.model_name.as_str(), request.routing.version.clone()),
            ("m", ModelVersion::Number(2))
        );
        let text = &request.inputs[0];
        assert_eq!(
            (text.name.as_str(), text.shape.as_slice()),
            ("text_input", &[1][..])
        );
        assert_eq!(text.data.as_ref(), b"\x02\x00\x00\x00hi");
        assert_eq!(
            request.parameters.get("stream"),
            Some(&Parameter::Bool(false))
        );
        assert_eq!(
            request.parameters.get("max_tokens"),
            Some(&Parameter::Int64(5))
        );
        assert_eq!(
            request.parameters.get("temperature"),
            Some(&Parameter::Double(0.5))
        );
        assert_eq!(
            request.parameters.get("tag"),
            Some(&Parameter::String("x".into()))
        );
    }

    #[test]
    fn variable_dimensions_take_what_the_fixed_ones_leave() {
        let body = json!({"ids": [1, 2, 3, 4, 5, 6]});
        let request = decode_generate_request(
            "m",
            ModelVersion::Latest,
            body.to_string().as_bytes(),
            &inputs(),
        )
        .unwrap();
        assert_eq!(request.inputs[0].shape, [1, 2, 3]);
        let odd = json!({"ids": [1, 2, 3]});
        let error = decode_generate_request(
            "m",
            ModelVersion::Latest,
            odd.to_string().as_bytes(),
            &inputs(),
        )
        .unwrap_err();
        assert_eq!(
            error.message(),
            "The schema can not convert input 'ids' to tensor with proper shape"
        );
    }

    #[test]
    fn objects_and_arrays_are_no_parameters() {
        let body = json!({"options": {"a": 1}});
        let error = decode_generate_request(
            "m",
            ModelVersion::Latest,
            body.to_string().as_bytes(),
            &inputs(),
        )
        .unwrap_err();
        assert_eq!(
            error.message(),
            "parameter 'options' has invalid type. It should be either 'int', 'bool', or 'string'."
        );
        assert!(decode_generate_request("m", ModelVersion::Latest, b"", &inputs()).is_ok());
        assert!(decode_generate_request("m", ModelVersion::Latest, b"[1]", &inputs()).is_err());
    }

    fn decode(body: Value) -> Result<InferRequest, Error> {
        decode_generate_request(
            "m",
            ModelVersion::Latest,
            body.to_string().as_bytes(),
            &inputs(),
        )
    }

    #[test]
    fn parameters_members_are_read_as_top_level_keys() {
        let body = json!({"parameters": {"text_input": "hi", "max_tokens": 5, "temperature": 0.5, "stream": true}});
        let request = decode(body).unwrap();
        assert_eq!(request.inputs.len(), 1);
        assert_eq!(request.inputs[0].name, "text_input");
        assert_eq!(request.inputs[0].data.as_ref(), b"\x02\x00\x00\x00hi");
        let expected = Parameters::from_iter([
            ("max_tokens".to_owned(), Parameter::Int64(5)),
            ("stream".to_owned(), Parameter::Bool(true)),
            ("temperature".to_owned(), Parameter::Double(0.5)),
        ]);
        assert_eq!(request.parameters, expected);
    }

    #[test]
    fn parameters_refusals_are_tritons() {
        let error = decode(json!({"parameters": {"nested": {"twice": 1}}})).unwrap_err();
        assert_eq!(
            error.message(),
            "Converting keyword: 'parameters': parameter 'nested' has invalid type. It should be either 'int', 'bool', or 'string'."
        );
        let error = decode(json!({"parameters": {"ids": [1, 2, 3]}})).unwrap_err();
        assert_eq!(
            error.message(),
            "Converting keyword: 'parameters': The schema can not convert input 'ids' to tensor with proper shape"
        );
        let error = decode(json!({"parameters": 1})).unwrap_err();
        assert_eq!(
            error.message(),
            "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object"
        );
        let mut named = inputs();
        named[1].name = "parameters".into();
        let body = json!({"parameters": {"a": 1}}).to_string();
        let error = decode_generate_request("m", ModelVersion::Latest, body.as_bytes(), &named)
            .unwrap_err();
        assert_eq!(
            error.message(),
            "Keyword 'parameters' for nested schema also given as input tensor name"
        );
        // Without the key in the body, such a model takes requests.
        let body = json!({"text_input": "hi"}).to_string();
        assert!(
            decode_generate_request("m", ModelVersion::Latest, body.as_bytes(), &named).is_ok()
        );
    }

    #[test]
    fn the_id_is_the_request_id_and_a_parameter_too() {
        let request = decode(json!({"id": "42", "text_input": "hi"})).unwrap();
        assert_eq!(request.id, "42");
        assert_eq!(
            request.parameters.get("id"),
            Some(&Parameter::String("42".into()))
        );
        assert_eq!(decode(json!({"text_input": "hi"})).unwrap().id, "");
        let error = decode(json!({"id": 42})).unwrap_err();
        assert_eq!(
            error.message(),
            "Unable to parse 'id': attempt to access JSON non-string as string"
        );
        assert_eq!(error.kind(), nereid_core::ErrorKind::InvalidArgument);
    }

    /// A BYTES output `text_output` holding "ok".
    fn text_output_ok() -> Tensor {
        Tensor {
            name: "text_output".into(),
            datatype: DataType::Bytes,
            shape: vec![1],
            data: Bytes::from_static(b"\x02\x00\x00\x00ok"),
        }
    }

    #[test]
    fn reserved_names_keep_their_first_value_and_keys_come_sorted() {
        let response = InferResponse {
            model_name: "m".into(),
            model_version: 1,
            id: "42".into(),
            outputs: vec![
                text_output_ok(),
                Tensor {
                    name: "tag".into(),
                    datatype: DataType::Int32,
                    shape: vec![1],
                    data: Bytes::from_static(&[7, 0, 0, 0]),
                },
            ],
            parameters: Parameters::from_iter([
                ("model_name".to_owned(), Parameter::String("other".into())),
                ("tag".to_owned(), Parameter::Bool(true)),
            ]),
            in_shared_memory: Vec::new(),
        };
        let encoded = encode_generate_response(&response).unwrap();
        assert_eq!(
            String::from_utf8(encoded).unwrap(),
            r#"{"id":"42","model_name":"m","model_version":"1","tag":true,"text_output":"ok"}"#
        );
    }

    #[test]
    fn a_response_is_a_flat_object_with_lone_elements_unwrapped() {
        let response = InferResponse {
            model_name: "m".into(),
            model_version: 1,
            id: String::new(),
            outputs: vec![
                text_output_ok(),
                Tensor {
                    name: "pair".into(),
                    datatype: DataType::Int32,
                    shape: vec![2],
                    data: Bytes::from_static(&[1, 0, 0, 0, 2, 0, 0, 0]),
                },
            ],
            parameters: Parameters::new(),
            in_shared_memory: Vec::new(),
        };
        let encoded: Value =
            serde_json::from_slice(&encode_generate_response(&response).unwrap()).unwrap();
        assert_eq!(
            encoded,
            json!({"model_name": "m", "model_version": "1", "text_output": "ok", "pair": [1, 2]})
        );
    }
}
