//! What a config asks of a GPU instance's execution providers, with the
//! keys and meanings of Triton's ONNX Runtime backend:
//!
//! - model `parameters` `cudnn_conv_algo_search` (0 EXHAUSTIVE, 1
//!   HEURISTIC, 2 DEFAULT), `gpu_mem_limit` (bytes),
//!   `arena_extend_strategy` (0 kNextPowerOfTwo, 1 kSameAsRequested) and
//!   `do_copy_in_default_stream` set the CUDA provider's options;
//! - `optimization { execution_accelerators { gpu_execution_accelerator
//!   [ ... ] } }` entries named `cuda` pass their parameters to the CUDA
//!   provider as they are (`cudnn_conv_use_max_workspace`,
//!   `use_ep_level_unified_stream`, `enable_cuda_graph`, ...), and one named
//!   `tensorrt` puts ONNX Runtime's TensorRT provider before CUDA (see
//!   `tensorrt.rs`); any other name fails the load, as in Triton.
//!
//! One difference: Triton sets the four model parameters' defaults over a
//! `cuda` accelerator's values for the same keys whenever the config has any
//! `parameters`; here a model parameter wins only when it is set. The
//! defaults are ONNX Runtime's, the same as Triton's.

use std::collections::{BTreeMap, HashMap};

use nereid_core::BackendError;
use nereid_core::model_config::model_optimization_policy::execution_accelerators::Accelerator;
use nereid_core::model_config::{ModelConfig, parse_bool_parameter};

use super::tensorrt;

/// Execution provider options for a GPU instance, in ONNX Runtime's
/// spelling; the device is the instance's, set when the providers are built.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GpuSettings {
    pub(crate) cuda: BTreeMap<String, String>,
    /// The TensorRT provider's options, when a `tensorrt` accelerator asks
    /// for it.
    pub(crate) tensorrt: Option<BTreeMap<String, String>>,
}

/// The CUDA provider options Triton's backend reads from the model's own
/// `parameters`.
const MODEL_PARAMETERS: [&str; 4] = [
    "cudnn_conv_algo_search",
    "gpu_mem_limit",
    "arena_extend_strategy",
    "do_copy_in_default_stream",
];

/// `cuda` accelerator parameters Triton checks as booleans; the others go
/// to ONNX Runtime unchecked, which refuses what it does not know.
const CUDA_BOOL_PARAMETERS: [&str; 2] =
    ["do_copy_in_default_stream", "use_ep_level_unified_stream"];

impl GpuSettings {
    /// Reads the settings from `config`, naming the model in errors.
    pub(crate) fn from_config(config: &ModelConfig) -> Result<Self, BackendError> {
        let fail =
            |message: String| BackendError::Load(format!("model '{}': {message}", config.name));
        let mut settings = GpuSettings::default();
        for accelerator in gpu_accelerators(config) {
            let parameters = &accelerator.parameters;
            check_nul(parameters.iter()).map_err(fail)?;
            match accelerator.name.as_str() {
                "tensorrt" => {
                    settings.tensorrt = Some(tensorrt::options(parameters).map_err(fail)?)
                }
                "cuda" => cuda_accelerator(parameters, &mut settings.cuda).map_err(fail)?,
                name => {
                    return Err(fail(format!(
                        "unknown Execution Accelerator '{name}' is requested"
                    )));
                }
            }
        }
        for key in MODEL_PARAMETERS {
            if let Some(p) = config.parameters.get(key) {
                let value = model_parameter(key, p.string_value.trim()).map_err(fail)?;
                settings.cuda.insert(key.to_string(), value);
            }
        }
        Ok(settings)
    }
}

fn gpu_accelerators(config: &ModelConfig) -> impl Iterator<Item = &Accelerator> {
    config
        .optimization
        .iter()
        .filter_map(|o| o.execution_accelerators.as_ref())
        .flat_map(|e| &e.gpu_execution_accelerator)
}

/// ONNX Runtime takes options as C strings; a NUL would cut one short.
fn check_nul<'a>(mut pairs: impl Iterator<Item = (&'a String, &'a String)>) -> Result<(), String> {
    match pairs.find(|(k, v)| k.contains('\0') || v.contains('\0')) {
        Some((key, _)) => Err(format!(
            "accelerator parameter '{}' contains a NUL character",
            key.escape_default()
        )),
        None => Ok(()),
    }
}

/// A `cuda` accelerator's parameters, passed on as Triton passes them.
fn cuda_accelerator(
    parameters: &HashMap<String, String>,
    cuda: &mut BTreeMap<String, String>,
) -> Result<(), String> {
    for (key, value) in parameters {
        let value = value.trim();
        if value.is_empty() || key == "device_id" {
            // Triton skips empty values, and the device is the instance's.
            continue;
        }
        let value = if CUDA_BOOL_PARAMETERS.contains(&key.as_str()) {
            bool_option(key, value, "cuda Execution Accelerator parameter")?
        } else {
            value.to_string()
        };
        cuda.insert(key.clone(), value);
    }
    Ok(())
}

/// One of Triton's model parameters as the CUDA provider option of the
/// same name.
fn model_parameter(key: &str, value: &str) -> Result<String, String> {
    let choice = |choices: &[&str]| -> Result<String, String> {
        value
            .parse::<usize>()
            .ok()
            .and_then(|i| choices.get(i))
            .map(|c| c.to_string())
            .ok_or_else(|| {
                let expected: Vec<String> = choices
                    .iter()
                    .enumerate()
                    .map(|(i, c)| format!("{i} ({c})"))
                    .collect();
                format!(
                    "unsupported {key} value '{value}' is requested (expected {})",
                    expected.join(", ")
                )
            })
    };
    match key {
        "cudnn_conv_algo_search" => choice(&["EXHAUSTIVE", "HEURISTIC", "DEFAULT"]),
        "arena_extend_strategy" => choice(&["kNextPowerOfTwo", "kSameAsRequested"]),
        "gpu_mem_limit" => value
            .parse::<u64>()
            .map(|n| n.to_string())
            .map_err(|_| format!("parameter 'gpu_mem_limit' is '{value}', expected a byte count")),
        _ => bool_option(key, value, "parameter"),
    }
}

/// A boolean option in the spelling ONNX Runtime parses.
fn bool_option(key: &str, value: &str, what: &str) -> Result<String, String> {
    parse_bool_parameter(value)
        .map(|b| if b { "1" } else { "0" }.to_string())
        .ok_or_else(|| format!("{what} '{key}' is '{value}', expected 1/0, true/false, on/off"))
}

#[cfg(test)]
mod tests;
