//! Inputs as a model's config declares them, and the outputs this frontend
//! reads: values are encoded in the declared datatype and shaped to the
//! declared dims (with a batch of one when the model batches); BYTES in
//! Triton's framing.

use bytes::Bytes;
use nereid_core::model_config::{ModelConfig, ModelInput};
use nereid_core::tensor::{bytes_elements, push_bytes_element};
use nereid_core::{DataType, InferRequest, InferResponse, InputTensor, Tensor};

use super::error::ApiError;

/// A value this frontend sends to one input.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Texts(Vec<String>),
    Bool(bool),
    Int(i64),
    Float(f64),
}

/// A request to `model` with a value for each input it declares that
/// `value_for` knows; the others are left out (optional inputs).
pub fn request(
    model: &ModelConfig,
    value_for: impl Fn(&str) -> Option<Value>,
) -> Result<InferRequest, ApiError> {
    let mut inputs = Vec::new();
    for input in &model.input {
        match value_for(&input.name) {
            Some(value) => inputs.push(tensor(model, input, &value)?),
            None if !input.optional => {
                return Err(ApiError::server(format!(
                    "model '{}' requires input '{}', which the OpenAI frontend does not send",
                    model.name, input.name
                )));
            }
            None => {}
        }
    }
    Ok(InferRequest {
        model_name: model.name.clone(),
        inputs,
        ..InferRequest::default()
    })
}

fn tensor(model: &ModelConfig, input: &ModelInput, value: &Value) -> Result<InputTensor, ApiError> {
    let mismatch = || {
        ApiError::server(format!(
            "model '{}' declares input '{}' as {}, which cannot hold {}",
            model.name,
            input.name,
            input.data_type().as_str_name(),
            describe(value)
        ))
    };
    let datatype = DataType::from_config(input.data_type()).ok_or_else(mismatch)?;
    let (data, count) = encode(datatype, value).ok_or_else(mismatch)?;
    let mut shape = fit_shape(&input.dims, count).ok_or_else(|| {
        ApiError::server(format!(
            "model '{}' declares input '{}' with dims {:?}, which cannot hold {count} elements",
            model.name, input.name, input.dims
        ))
    })?;
    if model.max_batch_size > 0 {
        shape.insert(0, 1);
    }
    Ok(InputTensor {
        name: input.name.clone(),
        datatype,
        shape,
        data: Bytes::from(data),
        parameters: Default::default(),
    })
}

fn describe(value: &Value) -> &'static str {
    match value {
        Value::Texts(_) => "text",
        Value::Bool(_) => "a boolean",
        Value::Int(_) => "an integer",
        Value::Float(_) => "a number",
    }
}

/// The value's bytes in `datatype` and its element count; `None` when the
/// type cannot hold it.
fn encode(datatype: DataType, value: &Value) -> Option<(Vec<u8>, usize)> {
    match value {
        Value::Texts(texts) if datatype == DataType::Bytes => {
            let mut out = Vec::new();
            for text in texts {
                push_bytes_element(&mut out, text.as_bytes());
            }
            Some((out, texts.len()))
        }
        Value::Bool(b) if datatype == DataType::Bool => Some((vec![u8::from(*b)], 1)),
        Value::Int(v) => integer(datatype, *v).map(|bytes| (bytes, 1)),
        Value::Float(v) => float(datatype, *v).map(|bytes| (bytes, 1)),
        _ => None,
    }
}

fn integer(datatype: DataType, v: i64) -> Option<Vec<u8>> {
    Some(match datatype {
        DataType::Int32 => i32::try_from(v).ok()?.to_le_bytes().to_vec(),
        DataType::Int64 => v.to_le_bytes().to_vec(),
        DataType::Uint32 => u32::try_from(v).ok()?.to_le_bytes().to_vec(),
        DataType::Uint64 => u64::try_from(v).ok()?.to_le_bytes().to_vec(),
        // Integers sent as floats are exact well beyond any token count.
        DataType::Fp32 | DataType::Fp64 => return float(datatype, v as f64),
        _ => return None,
    })
}

fn float(datatype: DataType, v: f64) -> Option<Vec<u8>> {
    match datatype {
        DataType::Fp32 => Some((v as f32).to_le_bytes().to_vec()),
        DataType::Fp64 => Some(v.to_le_bytes().to_vec()),
        _ => None,
    }
}

/// `dims` with its variable (-1) dimensions sized so that the shape holds
/// `count` elements: the first takes what the fixed ones leave, any other
/// is 1. `None` when no such shape exists.
pub fn fit_shape(dims: &[i64], count: usize) -> Option<Vec<i64>> {
    let count = i64::try_from(count).ok()?;
    let fixed: i64 = dims.iter().filter(|d| **d >= 0).product();
    if dims.iter().all(|d| *d >= 0) {
        return (fixed == count).then(|| dims.to_vec());
    }
    if fixed == 0 || count % fixed != 0 {
        return None;
    }
    let mut first = true;
    let shape = dims
        .iter()
        .map(|&d| match d {
            d if d >= 0 => d,
            _ if first => {
                first = false;
                count / fixed
            }
            _ => 1,
        })
        .collect();
    Some(shape)
}

/// The named output of a response.
pub fn output<'a>(response: &'a InferResponse, name: &str) -> Option<&'a Tensor> {
    response.outputs.iter().find(|t| t.name == name)
}

/// Every element of a BYTES output, joined, as text; `None` without the
/// output. Invalid UTF-8 is replaced rather than refused.
pub fn text(response: &InferResponse, name: &str) -> Result<Option<String>, ApiError> {
    let Some(tensor) = output(response, name) else {
        return Ok(None);
    };
    if tensor.datatype != DataType::Bytes {
        return Err(ApiError::server(format!(
            "model '{}' answered output '{name}' as {}, where the OpenAI frontend reads BYTES",
            response.model_name, tensor.datatype
        )));
    }
    let mut joined = Vec::new();
    for element in bytes_elements(&tensor.data) {
        let element = element.map_err(|e| {
            ApiError::server(format!(
                "output '{name}' of model '{}': {e}",
                response.model_name
            ))
        })?;
        joined.extend_from_slice(element);
    }
    Ok(Some(String::from_utf8_lossy(&joined).into_owned()))
}

/// The first element of an integer output, as a count; `None` without the
/// output or when it holds no non-negative integer.
pub fn count(response: &InferResponse, name: &str) -> Option<u64> {
    let tensor = output(response, name)?;
    let data = &tensor.data[..];
    match tensor.datatype {
        DataType::Int32 => u64::try_from(i32::from_le_bytes(*data.first_chunk()?)).ok(),
        DataType::Int64 => u64::try_from(i64::from_le_bytes(*data.first_chunk()?)).ok(),
        DataType::Uint32 => Some(u64::from(u32::from_le_bytes(*data.first_chunk()?))),
        DataType::Uint64 => Some(u64::from_le_bytes(*data.first_chunk()?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use nereid_core::model_config::DataType as ConfigType;

    use super::*;

    #[test]
    fn shapes_fit_the_declared_dims() {
        assert_eq!(fit_shape(&[1], 1), Some(vec![1]));
        assert_eq!(fit_shape(&[1, 1], 1), Some(vec![1, 1]));
        assert_eq!(fit_shape(&[-1], 3), Some(vec![3]));
        assert_eq!(fit_shape(&[1, -1], 3), Some(vec![1, 3]));
        assert_eq!(fit_shape(&[-1, -1], 2), Some(vec![2, 1]));
        assert_eq!(fit_shape(&[2, -1], 3), None);
        assert_eq!(fit_shape(&[1], 2), None);
        assert_eq!(fit_shape(&[], 1), Some(vec![]));
    }

    fn input(name: &str, data_type: ConfigType, dims: &[i64], optional: bool) -> ModelInput {
        let mut input = ModelInput {
            name: name.into(),
            dims: dims.to_vec(),
            optional,
            ..ModelInput::default()
        };
        input.set_data_type(data_type);
        input
    }

    fn model(max_batch_size: i32, inputs: Vec<ModelInput>) -> ModelConfig {
        ModelConfig {
            name: "llm".into(),
            max_batch_size,
            input: inputs,
            ..ModelConfig::default()
        }
    }

    #[test]
    fn values_take_the_declared_type_and_shape() {
        let config = model(
            8,
            vec![
                input("text_input", ConfigType::TypeString, &[1], false),
                input("max_tokens", ConfigType::TypeInt32, &[1], true),
                input("stop_words", ConfigType::TypeString, &[-1], true),
                input("temperature", ConfigType::TypeFp32, &[1], true),
                input("lora", ConfigType::TypeString, &[1], true),
            ],
        );
        let request = request(&config, |name| match name {
            "text_input" => Some(Value::Texts(vec!["hi".into()])),
            "max_tokens" => Some(Value::Int(7)),
            "stop_words" => Some(Value::Texts(vec!["a".into(), "b".into()])),
            "temperature" => Some(Value::Float(0.5)),
            _ => None,
        })
        .unwrap();
        let names: Vec<_> = request.inputs.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(
            names,
            ["text_input", "max_tokens", "stop_words", "temperature"]
        );
        assert_eq!(request.inputs[0].shape, [1, 1]);
        assert_eq!(&request.inputs[0].data[..], b"\x02\0\0\0hi");
        assert_eq!(request.inputs[1].datatype, DataType::Int32);
        assert_eq!(&request.inputs[1].data[..], 7i32.to_le_bytes());
        assert_eq!(request.inputs[2].shape, [1, 2]);
        assert_eq!(&request.inputs[3].data[..], 0.5f32.to_le_bytes());
    }

    #[test]
    fn a_required_input_without_a_value_or_a_wrong_type_is_an_error() {
        let config = model(0, vec![input("ids", ConfigType::TypeInt64, &[-1], false)]);
        let error = request(&config, |_| None).unwrap_err();
        assert!(error.message.contains("requires input 'ids'"), "{error:?}");
        let error = request(&config, |_| Some(Value::Bool(true))).unwrap_err();
        assert!(error.message.contains("TYPE_INT64"), "{error:?}");
        let error = request(&config, |_| Some(Value::Int(-1))).unwrap();
        assert_eq!(error.inputs[0].shape, [1]);
    }

    #[test]
    fn outputs_read_as_text_and_counts() {
        let mut data = Vec::new();
        push_bytes_element(&mut data, b"hello ");
        push_bytes_element(&mut data, b"world");
        let response = InferResponse {
            model_name: "llm".into(),
            model_version: 1,
            id: String::new(),
            outputs: vec![
                Tensor {
                    name: "text_output".into(),
                    datatype: DataType::Bytes,
                    shape: vec![2],
                    data: Bytes::from(data),
                },
                Tensor {
                    name: "num_output_tokens".into(),
                    datatype: DataType::Uint32,
                    shape: vec![1],
                    data: Bytes::from(3u32.to_le_bytes().to_vec()),
                },
            ],
            parameters: Default::default(),
            in_shared_memory: Vec::new(),
        };
        assert_eq!(
            text(&response, "text_output").unwrap().as_deref(),
            Some("hello world")
        );
        assert_eq!(text(&response, "other").unwrap(), None);
        assert_eq!(count(&response, "num_output_tokens"), Some(3));
        assert_eq!(count(&response, "num_input_tokens"), None);
        assert!(text(&response, "num_output_tokens").is_err());
    }
}
