//! Inputs, outputs and batch inputs/outputs, as Triton's `ValidateIOShape`,
//! `ValidateModelInput`, `ValidateModelOutput` and `ValidateBatchIO`
//! (core/src/model_config_utils.cc).

use std::collections::BTreeSet;

use nereid_core::model_config::{
    BatchInput, BatchOutput, DataType, ModelConfig, ModelInput, ModelOutput, ModelTensorReshape,
    batch_input, batch_output, model_input,
};

use crate::error::{ConfigError, IoProblem, TensorKind};

const TENSORRT_PLATFORM: &str = "tensorrt_plan";
const WILDCARD_DIM: i64 = -1;

/// The fields `ValidateIOShape` looks at, common to inputs and outputs.
struct Tensor<'a> {
    name: &'a str,
    data_type: i32,
    dims: &'a [i64],
    reshape: Option<&'a ModelTensorReshape>,
    is_shape_tensor: bool,
    is_non_linear_format_io: bool,
}

impl<'a> From<&'a ModelInput> for Tensor<'a> {
    fn from(io: &'a ModelInput) -> Self {
        Tensor {
            name: &io.name,
            data_type: io.data_type,
            dims: &io.dims,
            reshape: io.reshape.as_ref(),
            is_shape_tensor: io.is_shape_tensor,
            is_non_linear_format_io: io.is_non_linear_format_io,
        }
    }
}

impl<'a> From<&'a ModelOutput> for Tensor<'a> {
    fn from(io: &'a ModelOutput) -> Self {
        Tensor {
            name: &io.name,
            data_type: io.data_type,
            dims: &io.dims,
            reshape: io.reshape.as_ref(),
            is_shape_tensor: io.is_shape_tensor,
            is_non_linear_format_io: io.is_non_linear_format_io,
        }
    }
}

pub(super) fn validate_io(config: &ModelConfig) -> Result<(), ConfigError> {
    let wrap = |kind| {
        move |problem| ConfigError::Tensor {
            model: config.name.clone(),
            kind,
            problem,
        }
    };
    let mut seen = BTreeSet::new();
    for input in &config.input {
        check_tensor(&input.into(), config).map_err(wrap(TensorKind::Input))?;
        check_format(input).map_err(wrap(TensorKind::Input))?;
        unique(&mut seen, &input.name).map_err(wrap(TensorKind::Input))?;
    }
    let mut seen = BTreeSet::new();
    for output in &config.output {
        check_tensor(&output.into(), config).map_err(wrap(TensorKind::Output))?;
        unique(&mut seen, &output.name).map_err(wrap(TensorKind::Output))?;
    }
    validate_batch_io(config).map_err(|message| ConfigError::BatchIo {
        model: config.name.clone(),
        message,
    })
}

fn unique<'a>(seen: &mut BTreeSet<&'a str>, name: &'a str) -> Result<(), IoProblem> {
    if seen.insert(name) {
        Ok(())
    } else {
        Err(IoProblem::Duplicate {
            name: name.to_owned(),
        })
    }
}

fn check_tensor(io: &Tensor<'_>, config: &ModelConfig) -> Result<(), IoProblem> {
    let name = || io.name.to_owned();
    if io.name.is_empty() {
        return Err(IoProblem::MissingName);
    }
    if io.data_type == DataType::TypeInvalid as i32 {
        return Err(IoProblem::MissingDataType { name: name() });
    }
    if io.dims.is_empty() {
        return Err(IoProblem::MissingDims { name: name() });
    }
    if io.reshape.is_some_and(|r| r.shape.is_empty()) && config.max_batch_size == 0 {
        return Err(IoProblem::EmptyReshapeWithoutBatching { name: name() });
    }
    if let Some(&dim) = io.dims.iter().find(|&&d| d < 1 && d != WILDCARD_DIM) {
        return Err(IoProblem::BadDim { name: name(), dim });
    }
    if let Some(reshape) = io.reshape {
        check_reshape(io, &reshape.shape)?;
    }
    let platform = config.platform.as_str();
    if io.is_shape_tensor && platform != TENSORRT_PLATFORM {
        return Err(IoProblem::ShapeTensorNotTensorRt { name: name() });
    }
    if io.is_non_linear_format_io {
        if platform != TENSORRT_PLATFORM {
            return Err(IoProblem::NonLinearFormatNotTensorRt { name: name() });
        }
        if io.dims.len() != 3 {
            return Err(IoProblem::NonLinearFormatNeedsThreeDims {
                name: name(),
                dims: io.dims.len(),
            });
        }
    }
    Ok(())
}

/// `dims` and `reshape` must hold the same number of elements; with
/// variable-size dimensions, each run between `-1`s must match.
fn check_reshape(io: &Tensor<'_>, reshape: &[i64]) -> Result<(), IoProblem> {
    let name = io.name.to_owned();
    if let Some(&dim) = reshape.iter().find(|&&d| d < 1 && d != WILDCARD_DIM) {
        return Err(IoProblem::BadReshapeDim { name, dim });
    }
    let dims_size = element_count(io.dims);
    let reshape_size = element_count(reshape);
    // An empty reshape (a scalar) matches dims holding exactly one element.
    let mismatch = || IoProblem::ReshapeSizeMismatch {
        name: io.name.to_owned(),
        dims: io.dims.to_vec(),
        reshape: reshape.to_vec(),
    };
    if dims_size != reshape_size && (reshape_size != 0 || dims_size != 1) {
        return Err(mismatch());
    }
    if dims_size == WILDCARD_DIM {
        let dims_runs = runs(io.dims);
        let reshape_runs = runs(reshape);
        if dims_runs.len() != reshape_runs.len() {
            return Err(IoProblem::ReshapeVariableMismatch {
                name,
                dims: io.dims.to_vec(),
                reshape: reshape.to_vec(),
            });
        }
        if dims_runs != reshape_runs {
            return Err(mismatch());
        }
    }
    Ok(())
}

/// Triton's `GetElementCount`: -1 when any dimension is variable, 0 for
/// no dimensions, else the product.
fn element_count(dims: &[i64]) -> i64 {
    if dims.is_empty() {
        return 0;
    }
    if dims.contains(&WILDCARD_DIM) {
        return WILDCARD_DIM;
    }
    dims.iter().fold(1i64, |acc, &d| acc.saturating_mul(d))
}

/// Element counts of the runs of fixed dimensions between `-1`s.
fn runs(dims: &[i64]) -> Vec<i64> {
    dims.split(|&d| d == WILDCARD_DIM)
        .map(|run| run.iter().fold(1i64, |acc, &d| acc.saturating_mul(d)))
        .collect()
}

fn check_format(input: &ModelInput) -> Result<(), IoProblem> {
    let image = matches!(
        input.format(),
        model_input::Format::Nhwc | model_input::Format::Nchw
    );
    if image && input.dims.len() != 3 {
        return Err(IoProblem::FormatNeedsThreeDims {
            name: input.name.clone(),
            dims: input.dims.len(),
        });
    }
    Ok(())
}

fn validate_batch_io(config: &ModelConfig) -> Result<(), String> {
    let inputs: BTreeSet<&str> = config.input.iter().map(|i| i.name.as_str()).collect();
    let outputs: BTreeSet<&str> = config.output.iter().map(|o| o.name.as_str()).collect();
    for batch_input in &config.batch_input {
        check_batch_input(batch_input, &inputs)?;
    }
    for batch_output in &config.batch_output {
        check_batch_output(batch_output, &inputs, &outputs)?;
    }
    Ok(())
}

fn check_batch_input(io: &BatchInput, inputs: &BTreeSet<&str>) -> Result<(), String> {
    let kind = batch_input::Kind::try_from(io.kind)
        .map_err(|_| format!("unknown batch input kind '{}'", io.kind))?;
    if io.source_input.len() != 1 {
        return Err(format!(
            "batch input kind '{}' expects 1 source input, got {}",
            kind.as_str_name(),
            io.source_input.len()
        ));
    }
    let data_type = io.data_type();
    if data_type != DataType::TypeInt32 && data_type != DataType::TypeFp32 {
        return Err(format!(
            "batch input data type must be TYPE_INT32 or TYPE_FP32, got {}",
            data_type.as_str_name()
        ));
    }
    known_sources(&io.source_input, inputs)
}

fn check_batch_output(
    io: &BatchOutput,
    inputs: &BTreeSet<&str>,
    outputs: &BTreeSet<&str>,
) -> Result<(), String> {
    let kind = batch_output::Kind::try_from(io.kind)
        .map_err(|_| format!("unknown batch output kind '{}'", io.kind))?;
    if io.source_input.len() != 1 {
        return Err(format!(
            "batch output kind '{}' expects 1 source input, got {}",
            kind.as_str_name(),
            io.source_input.len()
        ));
    }
    known_sources(&io.source_input, inputs)?;
    let mut targets = BTreeSet::new();
    for target in &io.target_name {
        if !outputs.contains(target.as_str()) {
            return Err(format!("unknown target output name '{target}'"));
        }
        if !targets.insert(target.as_str()) {
            return Err(format!(
                "target output name '{target}' can only be specified once"
            ));
        }
    }
    Ok(())
}

fn known_sources(sources: &[String], inputs: &BTreeSet<&str>) -> Result<(), String> {
    match sources.iter().find(|s| !inputs.contains(s.as_str())) {
        Some(unknown) => Err(format!("unknown source input name '{unknown}'")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reshape_check(dims: &[i64], reshape: &[i64]) -> Result<(), IoProblem> {
        let input = ModelInput {
            name: "x".into(),
            data_type: DataType::TypeFp32 as i32,
            dims: dims.to_vec(),
            reshape: Some(ModelTensorReshape {
                shape: reshape.to_vec(),
            }),
            ..Default::default()
        };
        let config = ModelConfig {
            max_batch_size: 8,
            ..Default::default()
        };
        check_tensor(&(&input).into(), &config)
    }

    #[test]
    fn reshape_rules() {
        assert!(reshape_check(&[2, 4], &[8]).is_ok());
        assert!(reshape_check(&[1], &[]).is_ok());
        assert!(reshape_check(&[2, 4, -1, 6], &[8, -1, 1, 6]).is_ok());
        assert!(matches!(
            reshape_check(&[2, 4], &[7]),
            Err(IoProblem::ReshapeSizeMismatch { .. })
        ));
        assert!(matches!(
            reshape_check(&[2], &[]),
            Err(IoProblem::ReshapeSizeMismatch { .. })
        ));
        assert!(matches!(
            reshape_check(&[2, -1], &[2]),
            Err(IoProblem::ReshapeSizeMismatch { .. })
        ));
        assert!(matches!(
            reshape_check(&[2, -1, 3], &[2, -1, -1, 3]),
            Err(IoProblem::ReshapeVariableMismatch { .. })
        ));
        assert!(matches!(
            reshape_check(&[2, -1], &[-1, 2]),
            Err(IoProblem::ReshapeSizeMismatch { .. })
        ));
        assert!(matches!(
            reshape_check(&[1], &[0]),
            Err(IoProblem::BadReshapeDim { dim: 0, .. })
        ));
    }

    #[test]
    fn element_counts() {
        assert_eq!(element_count(&[]), 0);
        assert_eq!(element_count(&[2, 3]), 6);
        assert_eq!(element_count(&[2, -1]), -1);
        assert_eq!(runs(&[2, 4, -1, 6]), vec![8, 6]);
        assert_eq!(runs(&[-1]), vec![1, 1]);
    }
}
