//! Completing a config from the model file (`--strict-model-config=false`,
//! Triton's default), as Triton's ONNX Runtime backend does in
//! `ModelState::AutoCompleteConfig`, `AutoCompleteMaxBatch` and
//! `AutoCompleteIO` (onnxruntime_backend/src/onnxruntime.cc), generalised to
//! any backend through `Backend::inspect`.
//!
//! One addition over Triton's ONNX Runtime backend: an input or output that
//! is listed but lacks `data_type` or `dims` is completed from the model
//! tensor of the same name (Triton's TensorRT and Python backends do this;
//! its ONNX Runtime backend leaves it to validation, which refuses it).

use nereid_core::model_config::model_config::SchedulingChoice;
use nereid_core::model_config::{
    DataType as ConfigDataType, ModelConfig, ModelDynamicBatching, ModelInput, ModelOutput,
    ModelTensorReshape,
};
use nereid_core::{IoSpec, ModelIo};

use crate::error::{ModelError, TensorKind};

/// Triton's default for `--backend-config=<backend>,default-max-batch-size`.
pub const DEFAULT_MAX_BATCH_SIZE: i32 = 4;

/// Whether autofill needs the model's inputs and outputs at all.
pub(crate) fn needs_model_io(config: &ModelConfig) -> bool {
    let incomplete = |data_type: i32, dims: &[i64]| {
        data_type == ConfigDataType::TypeInvalid as i32 || dims.is_empty()
    };
    missing_inputs(config)
        || config.output.is_empty()
        || config
            .input
            .iter()
            .any(|i| incomplete(i.data_type, &i.dims))
        || config
            .output
            .iter()
            .any(|o| incomplete(o.data_type, &o.dims))
}

fn missing_inputs(config: &ModelConfig) -> bool {
    config.input.is_empty() && config.batch_input.is_empty()
}

/// Completes `config` from `io`, what the model file declares.
pub(crate) fn autofill(
    config: &mut ModelConfig,
    io: &ModelIo,
    default_max_batch_size: i32,
) -> Result<(), ModelError> {
    let fill_inputs = missing_inputs(config);
    let fill_outputs = config.output.is_empty();
    if fill_inputs || fill_outputs {
        complete_max_batch(config, io, default_max_batch_size)?;
    }
    let max_batch_size = config.max_batch_size;
    if fill_inputs {
        config.input = io
            .inputs
            .iter()
            .map(|s| new_input(s, max_batch_size))
            .collect();
    }
    if fill_outputs {
        config.output = io
            .outputs
            .iter()
            .map(|s| new_output(s, max_batch_size))
            .collect();
    }
    complete_inputs(config, io)?;
    complete_outputs(config, io)
}

/// A model can batch when every input and output has a variable first
/// dimension. Then an unset `max_batch_size` becomes the default and, above
/// 1, an empty `dynamic_batching` is added unless a scheduler is configured.
fn complete_max_batch(
    config: &mut ModelConfig,
    io: &ModelIo,
    default: i32,
) -> Result<(), ModelError> {
    let mut specs = io.inputs.iter().chain(&io.outputs);
    // A model file that does not record shapes cannot say whether it
    // batches; the config's `max_batch_size` stands as written.
    if specs.clone().any(|spec| spec.dims.is_none()) {
        return Ok(());
    }
    let batchable = specs.all(|spec| spec.dims.as_ref().and_then(|d| d.first()) == Some(&-1));
    if !batchable {
        if config.max_batch_size != 0 {
            return Err(ModelError::BatchingUnsupported {
                model: config.name.clone(),
                max_batch_size: config.max_batch_size,
            });
        }
        return Ok(());
    }
    if config.max_batch_size == 0 {
        config.max_batch_size = default.max(0);
        tracing::warn!(
            model = %config.name,
            "autofilled max_batch_size to {} since batching is supported but no max_batch_size is specified in model configuration",
            config.max_batch_size
        );
    }
    if config.max_batch_size > 1 && config.scheduling_choice.is_none() {
        config.scheduling_choice = Some(SchedulingChoice::DynamicBatching(
            ModelDynamicBatching::default(),
        ));
    }
    Ok(())
}

/// The config's `dims` for a model tensor: without the batch dimension when
/// the config batches. No dimension left means a scalar: `dims: [1]`, with
/// an empty reshape when batching (Triton's `AutoCompleteIO`).
fn config_dims(model_dims: &[i64], max_batch_size: i32) -> (Vec<i64>, Option<ModelTensorReshape>) {
    let dims = if max_batch_size > 0 {
        model_dims.get(1..).unwrap_or_default()
    } else {
        model_dims
    };
    if dims.is_empty() {
        let reshape = (max_batch_size > 0).then(|| ModelTensorReshape { shape: Vec::new() });
        (vec![1], reshape)
    } else {
        (dims.to_vec(), None)
    }
}

/// The config's `data_type`, `dims` and `reshape` for what a model file
/// says of a tensor; what it does not say stays unset.
fn config_io(spec: &IoSpec, max_batch_size: i32) -> (i32, Vec<i64>, Option<ModelTensorReshape>) {
    let data_type = spec
        .datatype
        .map_or(ConfigDataType::TypeInvalid, |d| d.to_config()) as i32;
    let (dims, reshape) = spec
        .dims
        .as_ref()
        .map_or((Vec::new(), None), |d| config_dims(d, max_batch_size));
    (data_type, dims, reshape)
}

fn new_input(spec: &IoSpec, max_batch_size: i32) -> ModelInput {
    let (data_type, dims, reshape) = config_io(spec, max_batch_size);
    ModelInput {
        name: spec.name.clone(),
        data_type,
        dims,
        reshape,
        ..Default::default()
    }
}

fn new_output(spec: &IoSpec, max_batch_size: i32) -> ModelOutput {
    let (data_type, dims, reshape) = config_io(spec, max_batch_size);
    ModelOutput {
        name: spec.name.clone(),
        data_type,
        dims,
        reshape,
        ..Default::default()
    }
}

fn complete_inputs(config: &mut ModelConfig, io: &ModelIo) -> Result<(), ModelError> {
    let (model, max_batch_size) = (config.name.clone(), config.max_batch_size);
    for input in &mut config.input {
        let fields = Fields {
            data_type: &mut input.data_type,
            dims: &mut input.dims,
            reshape: &mut input.reshape,
        };
        complete(
            fields,
            &input.name,
            &io.inputs,
            TensorKind::Input,
            &model,
            max_batch_size,
        )?;
    }
    Ok(())
}

fn complete_outputs(config: &mut ModelConfig, io: &ModelIo) -> Result<(), ModelError> {
    let (model, max_batch_size) = (config.name.clone(), config.max_batch_size);
    for output in &mut config.output {
        let fields = Fields {
            data_type: &mut output.data_type,
            dims: &mut output.dims,
            reshape: &mut output.reshape,
        };
        complete(
            fields,
            &output.name,
            &io.outputs,
            TensorKind::Output,
            &model,
            max_batch_size,
        )?;
    }
    Ok(())
}

/// The completable fields of an input or output.
struct Fields<'a> {
    data_type: &'a mut i32,
    dims: &'a mut Vec<i64>,
    reshape: &'a mut Option<ModelTensorReshape>,
}

fn complete(
    fields: Fields<'_>,
    name: &str,
    specs: &[IoSpec],
    kind: TensorKind,
    model: &str,
    max_batch_size: i32,
) -> Result<(), ModelError> {
    let missing_type = *fields.data_type == ConfigDataType::TypeInvalid as i32;
    if !missing_type && !fields.dims.is_empty() {
        return Ok(());
    }
    // An unnamed entry is left for validation to name the problem.
    if name.is_empty() {
        return Ok(());
    }
    let Some(spec) = specs.iter().find(|s| s.name == name) else {
        return Err(ModelError::UnknownTensor {
            model: model.to_owned(),
            kind,
            name: name.to_owned(),
            allowed: specs.iter().map(|s| s.name.clone()).collect(),
        });
    };
    if missing_type && let Some(datatype) = spec.datatype {
        *fields.data_type = datatype.to_config() as i32;
    }
    if fields.dims.is_empty()
        && let Some(model_dims) = &spec.dims
    {
        let (dims, reshape) = config_dims(model_dims, max_batch_size);
        *fields.dims = dims;
        if fields.reshape.is_none() {
            *fields.reshape = reshape;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use nereid_core::DataType;

    use super::*;

    fn spec(name: &str, datatype: DataType, dims: &[i64]) -> IoSpec {
        IoSpec::new(name, datatype, dims.to_vec())
    }

    fn batchable() -> ModelIo {
        ModelIo {
            inputs: vec![spec("IN", DataType::Fp32, &[-1, 3, 224])],
            outputs: vec![spec("OUT", DataType::Int64, &[-1])],
        }
    }

    fn named(name: &str) -> ModelConfig {
        ModelConfig {
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn empty_config_gets_batching_and_io() {
        let mut c = named("m");
        assert!(needs_model_io(&c));
        autofill(&mut c, &batchable(), DEFAULT_MAX_BATCH_SIZE).unwrap();
        assert_eq!(c.max_batch_size, 4);
        assert!(matches!(
            c.scheduling_choice,
            Some(SchedulingChoice::DynamicBatching(_))
        ));
        assert_eq!(c.input[0].dims, vec![3, 224]);
        assert_eq!(c.input[0].data_type, ConfigDataType::TypeFp32 as i32);
        // The output had only the batch dimension: a scalar per request.
        assert_eq!(c.output[0].dims, vec![1]);
        assert_eq!(
            c.output[0].reshape,
            Some(ModelTensorReshape { shape: vec![] })
        );
        assert!(!needs_model_io(&c));
    }

    #[test]
    fn max_batch_size_one_adds_no_batcher() {
        let mut c = named("m");
        c.max_batch_size = 1;
        autofill(&mut c, &batchable(), DEFAULT_MAX_BATCH_SIZE).unwrap();
        assert!(c.scheduling_choice.is_none());
    }

    #[test]
    fn fixed_first_dim_means_no_batching() {
        let io = ModelIo {
            inputs: vec![spec("IN", DataType::Fp32, &[1, 3])],
            outputs: vec![spec("OUT", DataType::Fp32, &[1])],
        };
        let mut c = named("m");
        autofill(&mut c, &io, DEFAULT_MAX_BATCH_SIZE).unwrap();
        assert_eq!(c.max_batch_size, 0);
        assert_eq!(c.input[0].dims, vec![1, 3]);
        assert_eq!(c.output[0].reshape, None);
        let mut c = named("m");
        c.max_batch_size = 8;
        let err = autofill(&mut c, &io, DEFAULT_MAX_BATCH_SIZE).unwrap_err();
        assert!(
            matches!(
                err,
                ModelError::BatchingUnsupported {
                    max_batch_size: 8,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn complete_config_is_untouched() {
        let mut c = named("m");
        c.input = vec![ModelInput {
            name: "IN".into(),
            data_type: 11,
            dims: vec![5],
            ..Default::default()
        }];
        c.output = vec![ModelOutput {
            name: "OUT".into(),
            data_type: 9,
            dims: vec![1],
            ..Default::default()
        }];
        assert!(!needs_model_io(&c));
        let before = c.clone();
        autofill(&mut c, &batchable(), DEFAULT_MAX_BATCH_SIZE).unwrap();
        assert_eq!(c, before);
    }

    #[test]
    fn partial_entries_are_completed_by_name() {
        let mut c = named("m");
        c.max_batch_size = 2;
        c.input = vec![ModelInput {
            name: "IN".into(),
            ..Default::default()
        }];
        c.output = vec![ModelOutput {
            name: "OUT".into(),
            dims: vec![1],
            ..Default::default()
        }];
        assert!(needs_model_io(&c));
        autofill(&mut c, &batchable(), DEFAULT_MAX_BATCH_SIZE).unwrap();
        assert_eq!(
            c.max_batch_size, 2,
            "max_batch_size autofill only runs when inputs or outputs are missing"
        );
        assert!(c.scheduling_choice.is_none());
        assert_eq!(
            (c.input[0].data_type, c.input[0].dims.clone()),
            (ConfigDataType::TypeFp32 as i32, vec![3, 224])
        );
        assert_eq!(
            (c.output[0].data_type, c.output[0].dims.clone()),
            (ConfigDataType::TypeInt64 as i32, vec![1])
        );
    }

    #[test]
    fn partial_entry_with_unknown_name() {
        let mut c = named("m");
        c.input = vec![ModelInput {
            name: "NOPE".into(),
            dims: vec![1],
            ..Default::default()
        }];
        let err = autofill(&mut c, &batchable(), DEFAULT_MAX_BATCH_SIZE).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unexpected inference input 'NOPE', allowed inputs are: IN"
        );
    }
}
