//! Why an ensemble is refused. Each variant is one of Triton's messages,
//! word for word (its oddities included), so clients and tests that match
//! Triton's text keep working.

use nereid_core::model_config::DataType;

/// An ensemble Triton would refuse, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnsembleError {
    // --- The ensemble's own config (model_config_utils.cc) ---
    #[error("Ensemble model '{model}' must have platform type 'ensemble' and empty backend type")]
    HasBackend { model: String },
    #[error("ensemble scheduling cannot be set for model '{model}' whose platform is not ensemble")]
    SchedulingWithoutEnsemblePlatform { model: String },
    #[error("ensemble scheduling must be set for ensemble {model} whose platform is ensemble")]
    SchedulingNotSet { model: String },
    #[error("instance group should not be specified for ensemble '{model}'")]
    InstanceGroupSet { model: String },
    #[error("optimization should not be specified for ensemble '{model}'")]
    OptimizationSet { model: String },
    #[error("model_warmup can not be specified for ensemble '{model}'")]
    WarmupSet { model: String },
    #[error("must specify 'step' for ensemble '{model}'")]
    NoSteps { model: String },
    /// `field` is `model_name`, `input_map` or `output_map`; `step` counts from 0.
    #[error("must specify '{field}' in step {step} of ensemble '{model}'")]
    StepFieldMissing {
        model: String,
        step: usize,
        field: &'static str,
    },
    #[error(
        "ensemble tensor '{tensor}' can appear in an output map only once for ensemble '{model}' step {step}"
    )]
    TensorWrittenTwice {
        model: String,
        tensor: String,
        step: usize,
    },
    // Triton's unbalanced quotes in the next two are deliberate.
    #[error("ensemble input '{input}' for ensemble {model}' is not used")]
    InputNotUsed { model: String, input: String },
    #[error("ensemble output '{output}' for ensemble {model}' is not used")]
    OutputNotUsed { model: String, output: String },
    #[error("output '{output}' for ensemble '{model}' is not written")]
    OutputNotWritten { model: String, output: String },
    /// `tensor` is the furthest unwritten tensor the output depends on.
    #[error(
        "output '{output}' for ensemble '{model}' is not written: at least one of its depending tensors, '{tensor}', is not connected"
    )]
    OutputNotConnected {
        model: String,
        output: String,
        tensor: String,
    },
    #[error("ensemble tensor '{tensor}' is unused in ensemble '{model}'")]
    TensorUnused { model: String, tensor: String },

    // --- The models it composes (model_repository_manager.cc) ---
    /// Triton names only the first step's model that it cannot find.
    #[error("ensemble {ensemble} contains models that are not available or ambiguous: {models}")]
    NotAvailable { ensemble: String, models: String },
    #[error("circular dependency between ensembles: {start} -> ... -> {last} -> {start}")]
    CircularDependency { start: String, last: String },
    #[error(
        "ensemble '{ensemble}' depends on '{model}' which is not valid. Model '{model}' failed with error: {reason}"
    )]
    ComposingInvalid {
        ensemble: String,
        model: String,
        reason: String,
    },
    #[error("ensemble '{ensemble}' depends on '{model}' which has no loaded version.")]
    NoLoadedVersion { ensemble: String, model: String },
    #[error(
        "ensemble '{ensemble}' depends on '{model}' which has no loaded version. Model '{model}' loading failed with error: {reason}"
    )]
    ComposingLoadFailed {
        ensemble: String,
        model: String,
        reason: String,
    },
    #[error(
        "ensemble '{ensemble}' depends on '{model}' whose required version {version} is not loaded."
    )]
    VersionNotLoaded {
        ensemble: String,
        model: String,
        version: i64,
    },

    // --- Its tensors against the composing configs (ensemble_utils.cc) ---
    #[error(
        "ensemble {ensemble} allows maximum batch size {ensemble_max}, but it contains model {model} which only allows maximum batch size to be {model_max}"
    )]
    BatchSizeTooLarge {
        ensemble: String,
        ensemble_max: i32,
        model: String,
        model_max: i32,
    },
    #[error(
        "in ensemble {ensemble}, ensemble tensor {tensor} is mapping to non-existing input {input} in model {model}"
    )]
    UnknownInput {
        ensemble: String,
        tensor: String,
        input: String,
        model: String,
    },
    #[error(
        "in ensemble {ensemble}, input {input} in model {model} is not mapped to any ensemble tensors"
    )]
    InputNotMapped {
        ensemble: String,
        input: String,
        model: String,
    },
    #[error(
        "in ensemble {ensemble}, ensemble tensor {tensor} is mapped from non-existing output {output} in model {model}"
    )]
    UnknownOutput {
        ensemble: String,
        tensor: String,
        output: String,
        model: String,
    },
    #[error(
        "in ensemble {ensemble}, multiple outputs in model {model} are mapped to the same ensemble tensor {tensor}"
    )]
    OutputsShareTensor {
        ensemble: String,
        model: String,
        tensor: String,
    },
    /// `first` is the tensor as first seen (the ensemble's own input or
    /// output, or an earlier step), `second` the step that disagrees.
    #[error(
        "in ensemble {ensemble}, ensemble tensor {tensor}: inconsistent data type: {} is inferred from model {} while {} is inferred from model {}",
        .first.data_type, .first.model, .second.data_type, .second.model
    )]
    InconsistentDataType {
        ensemble: String,
        tensor: String,
        first: Box<TensorOrigin>,
        second: Box<TensorOrigin>,
    },
    /// Shapes are shown with the batch dimension (-1) of batching models.
    #[error(
        "in ensemble {ensemble}, ensemble tensor {tensor}: inconsistent shape: {} is inferred from model {} while {} is inferred from model {}",
        dims_text(&.first.shape), .first.model, dims_text(&.second.shape), .second.model
    )]
    InconsistentShape {
        ensemble: String,
        tensor: String,
        first: Box<TensorOrigin>,
        second: Box<TensorOrigin>,
    },
    /// `model` is the step whose inputs disagree, or the ensemble itself
    /// when its outputs come from different decoupled steps.
    #[error(
        "in ensemble {ensemble}, step of model '{model}' receives inputs originated from different decoupled models"
    )]
    DecoupledBranching { ensemble: String, model: String },
}

/// One view of an ensemble tensor (boxed in [`EnsembleError`] to keep
/// every `Result` small): the model it was inferred from, its
/// data type (Triton's name, e.g. `TYPE_FP32`) and its full shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorOrigin {
    pub model: String,
    pub data_type: String,
    pub shape: Vec<i64>,
}

/// Triton's `DataType_Name`; an unknown number is shown as the number.
pub(crate) fn data_type_name(value: i32) -> String {
    DataType::try_from(value).map_or_else(|_| value.to_string(), |t| t.as_str_name().to_owned())
}

/// Triton's `DimsListToString`: `[-1,16]`.
fn dims_text(dims: &[i64]) -> String {
    let parts: Vec<String> = dims.iter().map(i64::to_string).collect();
    format!("[{}]", parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_and_types_read_as_tritons() {
        let err = EnsembleError::InconsistentShape {
            ensemble: "e".into(),
            tensor: "t".into(),
            first: Box::new(TensorOrigin {
                model: "a".into(),
                data_type: data_type_name(DataType::TypeFp32 as i32),
                shape: vec![-1, 16],
            }),
            second: Box::new(TensorOrigin {
                model: "b".into(),
                data_type: data_type_name(99),
                shape: vec![],
            }),
        };
        assert_eq!(
            err.to_string(),
            "in ensemble e, ensemble tensor t: inconsistent shape: [-1,16] is inferred from model a while [] is inferred from model b"
        );
        assert_eq!(data_type_name(DataType::TypeFp32 as i32), "TYPE_FP32");
        assert_eq!(data_type_name(99), "99");
    }
}
