//! The `tensorrt` GPU execution accelerator: Triton's parameter names and
//! their ONNX Runtime TensorRT provider options, and the check that the
//! TensorRT runtime (libnvinfer) can be loaded at all.

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use nereid_core::model_config::parse_bool_parameter;

/// How a parameter's value is checked before it reaches ONNX Runtime.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Bool,
    Int,
    /// A byte count (`max_workspace_size_bytes`).
    Bytes,
    Text,
}

/// Triton's accelerator parameters other than `precision_mode`: its name,
/// the TensorRT provider option it sets, and its kind.
const PARAMETERS: &[(&str, &str, Kind)] = &[
    (
        "max_workspace_size_bytes",
        "trt_max_workspace_size",
        Kind::Bytes,
    ),
    (
        "trt_max_partition_iterations",
        "trt_max_partition_iterations",
        Kind::Int,
    ),
    ("trt_min_subgraph_size", "trt_min_subgraph_size", Kind::Int),
    (
        "int8_calibration_table_name",
        "trt_int8_calibration_table_name",
        Kind::Text,
    ),
    (
        "int8_use_native_calibration_table",
        "trt_int8_use_native_calibration_table",
        Kind::Bool,
    ),
    ("trt_dla_enable", "trt_dla_enable", Kind::Bool),
    ("trt_dla_core", "trt_dla_core", Kind::Int),
    (
        "trt_engine_cache_enable",
        "trt_engine_cache_enable",
        Kind::Bool,
    ),
    ("trt_engine_cache_path", "trt_engine_cache_path", Kind::Text),
    (
        "trt_engine_cache_prefix",
        "trt_engine_cache_prefix",
        Kind::Text,
    ),
    ("trt_dump_subgraphs", "trt_dump_subgraphs", Kind::Bool),
    (
        "trt_force_sequential_engine_build",
        "trt_force_sequential_engine_build",
        Kind::Bool,
    ),
    (
        "trt_context_memory_sharing_enable",
        "trt_context_memory_sharing_enable",
        Kind::Bool,
    ),
    (
        "trt_layer_norm_fp32_fallback",
        "trt_layer_norm_fp32_fallback",
        Kind::Bool,
    ),
    (
        "trt_timing_cache_enable",
        "trt_timing_cache_enable",
        Kind::Bool,
    ),
    ("trt_timing_cache_path", "trt_timing_cache_path", Kind::Text),
    (
        "trt_force_timing_cache",
        "trt_force_timing_cache",
        Kind::Bool,
    ),
    (
        "trt_detailed_build_log",
        "trt_detailed_build_log",
        Kind::Bool,
    ),
    (
        "trt_build_heuristics_enable",
        "trt_build_heuristics_enable",
        Kind::Bool,
    ),
    ("trt_sparsity_enable", "trt_sparsity_enable", Kind::Bool),
    (
        "trt_builder_optimization_level",
        "trt_builder_optimization_level",
        Kind::Int,
    ),
    ("trt_auxiliary_streams", "trt_auxiliary_streams", Kind::Int),
    ("trt_tactic_sources", "trt_tactic_sources", Kind::Text),
    (
        "trt_extra_plugin_lib_paths",
        "trt_extra_plugin_lib_paths",
        Kind::Text,
    ),
    (
        "trt_profile_min_shapes",
        "trt_profile_min_shapes",
        Kind::Text,
    ),
    (
        "trt_profile_max_shapes",
        "trt_profile_max_shapes",
        Kind::Text,
    ),
    (
        "trt_profile_opt_shapes",
        "trt_profile_opt_shapes",
        Kind::Text,
    ),
    ("trt_cuda_graph_enable", "trt_cuda_graph_enable", Kind::Bool),
    (
        "trt_dump_ep_context_model",
        "trt_dump_ep_context_model",
        Kind::Bool,
    ),
    (
        "trt_ep_context_file_path",
        "trt_ep_context_file_path",
        Kind::Text,
    ),
    (
        "trt_ep_context_embed_mode",
        "trt_ep_context_embed_mode",
        Kind::Int,
    ),
];

/// The TensorRT provider options for an accelerator's `parameters`, or why
/// one of them is refused (the message Triton gives, without the model).
pub(crate) fn options(
    parameters: &HashMap<String, String>,
) -> Result<BTreeMap<String, String>, String> {
    // Sorted, so that of several bad parameters the same one is reported.
    let mut keys: Vec<&String> = parameters.keys().collect();
    keys.sort();
    let mut options = BTreeMap::new();
    for key in keys {
        let value = parameters[key].trim();
        if let Some((option, value)) = option(key, value)? {
            options.insert(option.to_string(), value);
        }
    }
    Ok(options)
}

/// One parameter as a provider option; `None` when it sets nothing
/// (`precision_mode` FP32, or an empty value, which Triton skips).
fn option(key: &str, value: &str) -> Result<Option<(&'static str, String)>, String> {
    if key == "precision_mode" {
        return precision(value);
    }
    let &(_, option, kind) = PARAMETERS
        .iter()
        .find(|(name, ..)| *name == key)
        .ok_or_else(|| {
            format!("unknown parameter '{key}' is provided for TensorRT Execution Accelerator")
        })?;
    if value.is_empty() {
        return Ok(None);
    }
    let bad = |expected: &str| {
        format!(
            "TensorRT Execution Accelerator parameter '{key}' is '{value}', expected {expected}"
        )
    };
    let value = match kind {
        Kind::Bool => parse_bool_parameter(value)
            .map(|b| if b { "1" } else { "0" }.to_string())
            .ok_or_else(|| bad("1/0, true/false, on/off"))?,
        Kind::Int => value
            .parse::<i32>()
            .map(|n| n.to_string())
            .map_err(|_| bad("an integer"))?,
        Kind::Bytes => value
            .parse::<u64>()
            .map(|n| n.to_string())
            .map_err(|_| bad("a byte count"))?,
        Kind::Text => value.to_string(),
    };
    Ok(Some((option, value)))
}

/// Triton's `precision_mode`: FP32 (TensorRT's default) sets nothing.
fn precision(value: &str) -> Result<Option<(&'static str, String)>, String> {
    let option = match value {
        "FP32" => return Ok(None),
        "FP16" => "trt_fp16_enable",
        "BF16" => "trt_bf16_enable",
        "INT8" => "trt_int8_enable",
        _ => {
            return Err(format!(
                "unsupported precision mode '{value}' is requested (expected FP32, FP16, BF16 or INT8)"
            ));
        }
    };
    Ok(Some((option, "1".to_string())))
}

/// Finds the TensorRT runtime, once per process: ONNX Runtime's own
/// failure, when its TensorRT provider cannot load libnvinfer, comes late
/// and says little, and a missing TensorRT is the usual reason.
pub(crate) fn find_runtime() -> Result<&'static str, String> {
    static FOUND: OnceLock<Result<&'static str, String>> = OnceLock::new();
    FOUND
        .get_or_init(|| probe(&nereid_device::LIBNVINFER))
        .clone()
}

/// The first of `names` the dynamic loader can open, or why none could.
pub(crate) fn probe(names: &[&'static str]) -> Result<&'static str, String> {
    nereid_device::find_library(names).map_err(|tried| {
        format!(
            "TensorRT runtime library (libnvinfer) not found ({tried}); \
             install TensorRT where the dynamic loader finds it (LD_LIBRARY_PATH), \
             or remove the 'tensorrt' gpu_execution_accelerator"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn pairs(options: &BTreeMap<String, String>) -> Vec<(&str, &str)> {
        options
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    #[test]
    fn triton_names_become_provider_options() {
        let options = options(&params(&[
            ("precision_mode", "FP16"),
            ("max_workspace_size_bytes", "1073741824"),
            ("trt_engine_cache_enable", "true"),
            ("trt_engine_cache_path", "/tmp/trt"),
            ("int8_use_native_calibration_table", "off"),
            ("int8_calibration_table_name", "calib.flatbuffers"),
            ("trt_builder_optimization_level", "3"),
            ("trt_profile_min_shapes", "INPUT0:1x16"),
            ("trt_timing_cache_path", ""),
        ]))
        .unwrap();
        assert_eq!(
            pairs(&options),
            vec![
                ("trt_builder_optimization_level", "3"),
                ("trt_engine_cache_enable", "1"),
                ("trt_engine_cache_path", "/tmp/trt"),
                ("trt_fp16_enable", "1"),
                ("trt_int8_calibration_table_name", "calib.flatbuffers"),
                ("trt_int8_use_native_calibration_table", "0"),
                ("trt_max_workspace_size", "1073741824"),
                ("trt_profile_min_shapes", "INPUT0:1x16"),
            ]
        );
    }

    #[test]
    fn every_triton_parameter_is_known() {
        for &(name, option, kind) in PARAMETERS {
            let value = match kind {
                Kind::Bool => "1",
                Kind::Int | Kind::Bytes => "2",
                Kind::Text => "x",
            };
            let options = options(&params(&[(name, value)])).unwrap();
            assert_eq!(
                options.get(option).map(String::as_str),
                Some(value),
                "{name}"
            );
        }
        for (mode, option) in [
            ("FP16", Some("trt_fp16_enable")),
            ("BF16", Some("trt_bf16_enable")),
            ("INT8", Some("trt_int8_enable")),
            ("FP32", None),
        ] {
            let options = options(&params(&[("precision_mode", mode)])).unwrap();
            assert_eq!(options.keys().next().map(String::as_str), option, "{mode}");
        }
    }

    #[test]
    fn bad_parameters_are_refused_as_triton_does() {
        for (key, value, expected) in [
            (
                "precision_mode",
                "FP8",
                "unsupported precision mode 'FP8' is requested",
            ),
            (
                "precision_mode",
                "fp16",
                "unsupported precision mode 'fp16'",
            ),
            (
                "max_workspace_size_bytes",
                "-1",
                "'max_workspace_size_bytes' is '-1', expected a byte count",
            ),
            (
                "trt_dla_core",
                "one",
                "'trt_dla_core' is 'one', expected an integer",
            ),
            (
                "trt_engine_cache_enable",
                "maybe",
                "'trt_engine_cache_enable' is 'maybe', expected 1/0",
            ),
            (
                "trt_fp16_enable",
                "1",
                "unknown parameter 'trt_fp16_enable' is provided for TensorRT Execution Accelerator",
            ),
        ] {
            let err = options(&params(&[(key, value)])).unwrap_err();
            assert!(err.contains(expected), "{key}={value}: {err}");
        }
    }

    #[test]
    fn a_missing_runtime_is_named() {
        let err = probe(&["libnereid-no-such-nvinfer.so.99"]).unwrap_err();
        assert!(
            err.contains("TensorRT runtime library (libnvinfer) not found"),
            "{err}"
        );
        assert!(err.contains("libnereid-no-such-nvinfer.so.99"), "{err}");
        assert!(err.contains("cannot open shared object file"), "{err}");
    }
}
