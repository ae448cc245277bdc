use nereid_core::model_config::ModelOptimizationPolicy;
use nereid_core::model_config::model_optimization_policy::ExecutionAccelerators;

use super::*;

fn config(params: &[(&str, &str)]) -> ModelConfig {
    crate::tests::config_with("m", params)
}

fn with_accelerators(
    mut config: ModelConfig,
    accelerators: &[(&str, &[(&str, &str)])],
) -> ModelConfig {
    let gpu_execution_accelerator = accelerators
        .iter()
        .map(|(name, params)| Accelerator {
            name: name.to_string(),
            parameters: params
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        })
        .collect();
    config.optimization = Some(ModelOptimizationPolicy {
        execution_accelerators: Some(ExecutionAccelerators {
            gpu_execution_accelerator,
            ..Default::default()
        }),
        ..Default::default()
    });
    config
}

fn cuda(settings: &GpuSettings) -> Vec<(&str, &str)> {
    settings
        .cuda
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

fn error(config: &ModelConfig) -> String {
    GpuSettings::from_config(config).unwrap_err().to_string()
}

#[test]
fn no_settings_leave_onnx_runtime_defaults() {
    let settings = GpuSettings::from_config(&config(&[("intra_op_thread_count", "2")])).unwrap();
    assert_eq!(settings, GpuSettings::default());
}

#[test]
fn model_parameters_set_cuda_options() {
    let settings = GpuSettings::from_config(&config(&[
        ("cudnn_conv_algo_search", "1"),
        ("gpu_mem_limit", "4294967296"),
        ("arena_extend_strategy", "1"),
        ("do_copy_in_default_stream", "false"),
    ]))
    .unwrap();
    assert_eq!(
        cuda(&settings),
        vec![
            ("arena_extend_strategy", "kSameAsRequested"),
            ("cudnn_conv_algo_search", "HEURISTIC"),
            ("do_copy_in_default_stream", "0"),
            ("gpu_mem_limit", "4294967296"),
        ]
    );
    assert_eq!(settings.tensorrt, None);
    for (value, expected) in [("0", "EXHAUSTIVE"), ("1", "HEURISTIC"), ("2", "DEFAULT")] {
        let settings =
            GpuSettings::from_config(&config(&[("cudnn_conv_algo_search", value)])).unwrap();
        assert_eq!(cuda(&settings), vec![("cudnn_conv_algo_search", expected)]);
    }
    let settings = GpuSettings::from_config(&config(&[("arena_extend_strategy", "0")])).unwrap();
    assert_eq!(
        cuda(&settings),
        vec![("arena_extend_strategy", "kNextPowerOfTwo")]
    );
}

#[test]
fn bad_model_parameters_name_the_model_and_value() {
    for (key, value, expected) in [
        (
            "cudnn_conv_algo_search",
            "3",
            "unsupported cudnn_conv_algo_search value '3' is requested (expected 0 (EXHAUSTIVE), 1 (HEURISTIC), 2 (DEFAULT))",
        ),
        (
            "cudnn_conv_algo_search",
            "HEURISTIC",
            "unsupported cudnn_conv_algo_search value 'HEURISTIC'",
        ),
        (
            "arena_extend_strategy",
            "-1",
            "unsupported arena_extend_strategy value '-1'",
        ),
        (
            "gpu_mem_limit",
            "4G",
            "parameter 'gpu_mem_limit' is '4G', expected a byte count",
        ),
        (
            "do_copy_in_default_stream",
            "sometimes",
            "parameter 'do_copy_in_default_stream' is 'sometimes', expected 1/0",
        ),
    ] {
        let err = error(&config(&[(key, value)]));
        assert!(err.starts_with("model 'm': "), "{err}");
        assert!(err.contains(expected), "{key}={value}: {err}");
    }
}

#[test]
fn cuda_accelerator_parameters_pass_through() {
    let c = with_accelerators(
        config(&[]),
        &[(
            "cuda",
            &[
                ("cudnn_conv_use_max_workspace", "1"),
                ("use_ep_level_unified_stream", "true"),
                ("enable_cuda_graph", "0"),
                ("device_id", "5"),
                ("prefer_nhwc", ""),
            ],
        )],
    );
    let settings = GpuSettings::from_config(&c).unwrap();
    assert_eq!(
        cuda(&settings),
        vec![
            ("cudnn_conv_use_max_workspace", "1"),
            ("enable_cuda_graph", "0"),
            ("use_ep_level_unified_stream", "1"),
        ],
        "the device is the instance's; empty values are skipped"
    );
    let c = with_accelerators(
        config(&[]),
        &[("cuda", &[("use_ep_level_unified_stream", "2")])],
    );
    assert!(
        error(&c).contains("'use_ep_level_unified_stream' is '2', expected 1/0"),
        "{}",
        error(&c)
    );
}

#[test]
fn a_model_parameter_wins_over_the_cuda_accelerator() {
    let c = with_accelerators(
        config(&[("cudnn_conv_algo_search", "2")]),
        &[(
            "cuda",
            &[
                ("cudnn_conv_algo_search", "HEURISTIC"),
                ("gpu_mem_limit", "1024"),
            ],
        )],
    );
    let settings = GpuSettings::from_config(&c).unwrap();
    assert_eq!(
        cuda(&settings),
        vec![
            ("cudnn_conv_algo_search", "DEFAULT"),
            ("gpu_mem_limit", "1024")
        ]
    );
}

#[test]
fn tensorrt_accelerator_is_read() {
    let c = with_accelerators(
        config(&[]),
        &[(
            "tensorrt",
            &[
                ("precision_mode", "FP16"),
                ("max_workspace_size_bytes", "1073741824"),
            ],
        )],
    );
    let settings = GpuSettings::from_config(&c).unwrap();
    let trt = settings.tensorrt.unwrap();
    assert_eq!(trt.get("trt_fp16_enable").map(String::as_str), Some("1"));
    assert_eq!(
        trt.get("trt_max_workspace_size").map(String::as_str),
        Some("1073741824")
    );
    let c = with_accelerators(config(&[]), &[("tensorrt", &[])]);
    assert_eq!(
        GpuSettings::from_config(&c).unwrap().tensorrt,
        Some(BTreeMap::new())
    );
    let c = with_accelerators(config(&[]), &[("tensorrt", &[("precision_mode", "FP4")])]);
    assert_eq!(
        error(&c),
        "model 'm': unsupported precision mode 'FP4' is requested (expected FP32, FP16, BF16 or INT8)"
    );
}

#[test]
fn unknown_accelerators_and_nul_characters_are_refused() {
    let c = with_accelerators(config(&[]), &[("openvino", &[])]);
    assert_eq!(
        error(&c),
        "model 'm': unknown Execution Accelerator 'openvino' is requested"
    );
    let c = with_accelerators(config(&[]), &[("cuda", &[("gpu_mem_limit", "1\0")])]);
    assert!(
        error(&c).contains("'gpu_mem_limit' contains a NUL character"),
        "{}",
        error(&c)
    );
}
