//! Raw inference requests: a body that is all input data, with no JSON
//! header (`Inference-Header-Content-Length: 0`, or an empty body). As in
//! Triton, the model's one input takes the whole body: datatype and dims
//! come from the config, a batching model gets a batch of 1, the one
//! variable-sized dimension is what the body's length makes it, and a
//! `BYTES` input is one element. Every output comes back, in binary.

use bytes::Bytes;
use nereid_core::model_config::{ModelConfig, ModelInput};
use nereid_core::tensor::push_bytes_element;
use nereid_core::{DataType, Error, InferRequest, InputTensor, ModelVersion, Parameters, Routing};

use super::infer_request::{DecodedRequest, OutputEncoding};

/// Decodes `body` as the data of the one input of `config`, the config of
/// `model` / `version`.
pub fn decode_raw_infer_request(
    model: &str,
    version: ModelVersion,
    body: Bytes,
    config: &ModelConfig,
) -> Result<DecodedRequest, Error> {
    let [input] = config.input.as_slice() else {
        return Err(invalid(format!(
            "Raw request must only have 1 input (found 1) to be deduced but got {} inputs in '{model}' model configuration",
            config.input.len()
        )));
    };
    let datatype = DataType::from_config(input.data_type()).ok_or_else(|| {
        invalid(format!(
            "raw input '{}' has no datatype a request can carry",
            input.name
        ))
    })?;
    let shape = raw_shape(input, datatype, config.max_batch_size != 0, body.len())?;
    let data = if datatype == DataType::Bytes {
        let mut framed = Vec::with_capacity(body.len() + 4);
        push_bytes_element(&mut framed, &body);
        Bytes::from(framed)
    } else {
        body
    };
    let input = InputTensor {
        name: input.name.clone(),
        datatype,
        shape,
        data,
        parameters: Parameters::new(),
    };
    let request = InferRequest {
        model_name: model.to_string(),
        id: String::new(),
        routing: Routing {
            version,
            ..Routing::default()
        },
        inputs: vec![input],
        outputs: Vec::new(),
        parameters: Parameters::new(),
        trace: None,
    };
    let encoding = OutputEncoding {
        default_binary: true,
        explicit: Vec::new(),
    };
    Ok(DecodedRequest { request, encoding })
}

/// The input's shape as Triton deduces it from `len` bytes of data.
fn raw_shape(
    input: &ModelInput,
    datatype: DataType,
    batching: bool,
    len: usize,
) -> Result<Vec<i64>, Error> {
    let batch = batching.then_some(1);
    let mut shape: Vec<i64> = batch
        .into_iter()
        .chain(input.dims.iter().copied())
        .collect();
    let mut variable = (0..shape.len()).filter(|&i| shape[i] == -1);
    let axis = variable.next();
    if variable.next().is_some() {
        return Err(invalid(format!(
            "The shape of the raw input '{}' can not be deduced because there are more than one variable-sized dimension",
            input.name
        )));
    }
    let fixed = input
        .dims
        .iter()
        .filter(|&&d| d != -1)
        .try_fold(1i64, |product, &d| product.checked_mul(d))
        .unwrap_or(0);
    if datatype == DataType::Bytes {
        if axis.is_some() || fixed != 1 {
            return Err(invalid(format!(
                "For BYTE datatype raw input '{}', the model must have input shape [1]",
                input.name
            )));
        }
        return Ok(shape);
    }
    if let Some(axis) = axis {
        let element = datatype.element_size().unwrap_or(1) as i64;
        let elements = (len as i64).checked_div(fixed).unwrap_or(0);
        shape[axis] = elements / element;
    }
    Ok(shape)
}

/// A raw request has no id, so Triton's core names it `<id_unknown>`.
fn invalid(message: String) -> Error {
    Error::invalid_argument(format!("[request id: <id_unknown>] {message}"))
}

#[cfg(test)]
mod tests {
    use nereid_core::model_config::DataType as ConfigType;

    use super::*;

    fn config(max_batch_size: i32, inputs: &[(ConfigType, &[i64])]) -> ModelConfig {
        ModelConfig {
            max_batch_size,
            input: inputs
                .iter()
                .enumerate()
                .map(|(i, (data_type, dims))| ModelInput {
                    name: format!("INPUT{i}"),
                    data_type: *data_type as i32,
                    dims: dims.to_vec(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn decode(config: &ModelConfig, body: &'static [u8]) -> Result<InputTensor, Error> {
        let decoded =
            decode_raw_infer_request("m", ModelVersion::Latest, Bytes::from_static(body), config)?;
        assert!(decoded.encoding.default_binary);
        assert!(decoded.request.outputs.is_empty());
        Ok(decoded.request.inputs.into_iter().next().unwrap())
    }

    #[test]
    fn the_body_fills_the_variable_dimension_after_a_batch_of_one() {
        let input = decode(&config(8, &[(ConfigType::TypeFp32, &[-1])]), &[0; 12]).unwrap();
        assert_eq!(
            (input.name.as_str(), input.datatype),
            ("INPUT0", DataType::Fp32)
        );
        assert_eq!(input.shape, vec![1, 3]);
        assert_eq!(input.data.len(), 12);
        let input = decode(&config(0, &[(ConfigType::TypeInt16, &[2, -1])]), &[0; 12]).unwrap();
        assert_eq!(input.shape, vec![2, 3]);
        let input = decode(&config(0, &[(ConfigType::TypeFp32, &[4])]), &[0; 5]).unwrap();
        assert_eq!(input.shape, vec![4], "the size is the engine's to check");
    }

    #[test]
    fn a_bytes_input_is_one_length_prefixed_element() {
        let input = decode(&config(4, &[(ConfigType::TypeString, &[1])]), b"hi").unwrap();
        assert_eq!(input.shape, vec![1, 1]);
        assert_eq!(&input.data[..], b"\x02\0\0\0hi");
        let e = decode(&config(4, &[(ConfigType::TypeString, &[-1])]), b"hi").unwrap_err();
        assert_eq!(
            e.message(),
            "[request id: <id_unknown>] For BYTE datatype raw input 'INPUT0', the model must have input shape [1]"
        );
    }

    #[test]
    fn a_model_of_several_inputs_or_variable_dimensions_is_refused_in_tritons_words() {
        let two = config(
            8,
            &[
                (ConfigType::TypeInt32, &[16]),
                (ConfigType::TypeInt32, &[16]),
            ],
        );
        assert_eq!(
            decode(&two, &[0; 64]).unwrap_err().message(),
            "[request id: <id_unknown>] Raw request must only have 1 input (found 1) to be deduced but got 2 inputs in 'm' model configuration"
        );
        let wild = config(0, &[(ConfigType::TypeFp32, &[-1, -1])]);
        assert_eq!(
            decode(&wild, &[0; 8]).unwrap_err().message(),
            "[request id: <id_unknown>] The shape of the raw input 'INPUT0' can not be deduced because there are more than one variable-sized dimension"
        );
    }
}
