//! Checks a config against the signature it is served by, as Triton's
//! TensorFlow backend does at load (`ValidateTensorflowModel`,
//! `CompareDims`): every config tensor names a signature key of its type
//! and a compatible shape, and the config has as many inputs as the
//! signature.

use nereid_core::BackendError;
use nereid_core::DataType;
use nereid_core::model_config::ModelConfig;

use crate::signature::{Signature, SignatureTensor};

/// A config tensor checked against the signature: its name, type and the
/// graph tensor behind its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Checked {
    pub(crate) name: String,
    pub(crate) datatype: DataType,
    pub(crate) graph_tensor: String,
    /// An output with a `reshape`: the config's dims, which the answer
    /// reports (after the batch dimension) in place of the shape the
    /// model gives, as Triton does.
    pub(crate) reported_dims: Option<Vec<i64>>,
}

/// The config's inputs and outputs, bound to the signature's tensors.
pub(crate) fn check(
    config: &ModelConfig,
    signature: &Signature,
) -> Result<(Vec<Checked>, Vec<Checked>), BackendError> {
    let model = &config.name;
    let batching = config.max_batch_size > 0;
    if config.input.len() != signature.inputs.len() {
        return Err(invalid(format!(
            "unable to load model '{model}', configuration expects {} inputs, model provides {}",
            config.input.len(),
            signature.inputs.len()
        )));
    }
    let inputs = config
        .input
        .iter()
        .map(|input| {
            let dims = input.reshape.as_ref().map_or(&input.dims, |r| &r.shape);
            let io = Io {
                model,
                direction: "input",
                batching,
            };
            io.check(signature, &input.name, input.data_type, dims)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let outputs = config
        .output
        .iter()
        .map(|output| {
            let dims = output.reshape.as_ref().map_or(&output.dims, |r| &r.shape);
            let io = Io {
                model,
                direction: "output",
                batching,
            };
            let checked = io.check(signature, &output.name, output.data_type, dims)?;
            Ok(Checked {
                reported_dims: output.reshape.as_ref().map(|_| output.dims.clone()),
                ..checked
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((inputs, outputs))
}

struct Io<'a> {
    model: &'a str,
    direction: &'static str,
    batching: bool,
}

impl Io<'_> {
    fn check(
        &self,
        signature: &Signature,
        name: &str,
        config_type: i32,
        dims: &[i64],
    ) -> Result<Checked, BackendError> {
        let tensors = match self.direction {
            "input" => &signature.inputs,
            _ => &signature.outputs,
        };
        let tensor = tensors.iter().find(|t| t.key == name).ok_or_else(|| {
            let allowed: Vec<&str> = tensors.iter().map(|t| t.key.as_str()).collect();
            invalid(format!(
                "unexpected inference {} '{name}', allowed {}s are: {}",
                self.direction,
                self.direction,
                allowed.join(", ")
            ))
        })?;
        let wanted = DataType::from_config(
            nereid_core::model_config::DataType::try_from(config_type).unwrap_or_default(),
        );
        if wanted != Some(tensor.datatype) {
            return Err(invalid(format!(
                "unable to load model '{}', configuration expects datatype {} for {} '{name}', model provides TYPE_{}",
                self.model,
                wanted.map_or("TYPE_INVALID".to_owned(), |d| format!(
                    "TYPE_{}",
                    config_name(d)
                )),
                self.direction,
                config_name(tensor.datatype)
            )));
        }
        self.compare_dims(tensor, dims)?;
        Ok(Checked {
            name: name.to_owned(),
            datatype: tensor.datatype,
            graph_tensor: tensor.tensor.clone(),
            reported_dims: None,
        })
    }

    /// Triton's `CompareDims`: a `-1` in the signature matches any size;
    /// a signature of unknown or zero rank takes the config's shape.
    fn compare_dims(&self, tensor: &SignatureTensor, dims: &[i64]) -> Result<(), BackendError> {
        let Some(model_dims) = tensor.dims.as_deref().filter(|d| !d.is_empty()) else {
            return Ok(());
        };
        let key = &tensor.key;
        let full: Vec<i64> = if self.batching {
            if model_dims.first() != Some(&-1) {
                return Err(invalid(format!(
                    "model '{}', tensor '{key}': for the model to support batching the shape should have at least 1 dimension and the first dimension must be -1; but shape expected by the model is {model_dims:?}",
                    self.model
                )));
            }
            std::iter::once(-1).chain(dims.iter().copied()).collect()
        } else {
            dims.to_vec()
        };
        let fits = model_dims.len() == full.len()
            && model_dims
                .iter()
                .zip(&full)
                .all(|(&m, &c)| m == -1 || m == c);
        if fits {
            return Ok(());
        }
        Err(invalid(format!(
            "model '{}', tensor '{key}': the model expects {} dimensions (shape {model_dims:?}) but the model configuration specifies {} dimensions (shape {full:?}{})",
            self.model,
            model_dims.len(),
            full.len(),
            if self.batching {
                ", with the batch dimension max_batch_size > 0 adds"
            } else {
                ""
            }
        )))
    }
}

/// `FP32` for `TYPE_FP32`: Triton's config names without the prefix;
/// `STRING` for BYTES, as configs write it.
fn config_name(datatype: DataType) -> &'static str {
    match datatype {
        DataType::Bytes => "STRING",
        other => other.wire_name(),
    }
}

fn invalid(message: String) -> BackendError {
    BackendError::Load(message)
}

#[cfg(test)]
mod tests {
    use nereid_core::model_config::{DataType as ConfigType, ModelInput, ModelOutput};

    use super::*;

    fn tensor(key: &str, datatype: DataType, dims: &[i64]) -> SignatureTensor {
        SignatureTensor {
            key: key.into(),
            tensor: format!("serving_default_{key}:0"),
            datatype,
            dims: Some(dims.to_vec()),
        }
    }

    fn signature() -> Signature {
        Signature {
            key: "serving_default".into(),
            inputs: vec![tensor("x", DataType::Fp32, &[-1, 4])],
            outputs: vec![tensor("y", DataType::Fp32, &[-1, 3])],
        }
    }

    fn config(max_batch_size: i32, input_dims: &[i64], input_type: ConfigType) -> ModelConfig {
        ModelConfig {
            name: "dense".into(),
            max_batch_size,
            input: vec![ModelInput {
                name: "x".into(),
                data_type: input_type as i32,
                dims: input_dims.to_vec(),
                ..Default::default()
            }],
            output: vec![ModelOutput {
                name: "y".into(),
                data_type: ConfigType::TypeFp32 as i32,
                dims: vec![3],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn binds_keys_to_graph_tensors() {
        let (inputs, outputs) =
            check(&config(8, &[4], ConfigType::TypeFp32), &signature()).unwrap();
        assert_eq!(inputs[0].graph_tensor, "serving_default_x:0");
        assert_eq!(outputs[0].name, "y");
    }

    #[test]
    fn refuses_what_triton_refuses() {
        let err = check(&config(8, &[5], ConfigType::TypeFp32), &signature()).unwrap_err();
        assert!(
            err.to_string()
                .contains("the model expects 2 dimensions (shape [-1, 4])"),
            "{err}"
        );
        let err = check(&config(8, &[4], ConfigType::TypeInt32), &signature()).unwrap_err();
        assert!(
            err.to_string().contains(
                "configuration expects datatype TYPE_INT32 for input 'x', model provides TYPE_FP32"
            ),
            "{err}"
        );
        let mut extra = config(8, &[4], ConfigType::TypeFp32);
        extra.output[0].name = "z".into();
        let err = check(&extra, &signature()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unexpected inference output 'z', allowed outputs are: y"
        );
        let mut no_batch = config(0, &[-1, 4], ConfigType::TypeFp32);
        no_batch.output[0].dims = vec![2, 3];
        assert!(
            check(&no_batch, &signature()).is_ok(),
            "-1 in the model matches any size"
        );
    }
}
