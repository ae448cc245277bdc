//! Triton's PyTorch backend parameters, read from a model's config:
//! `parameters { key: "INFERENCE_MODE" value: { string_value: "false" } }`.
//!
//! Defaults are Triton's: optimized execution and inference mode on, cache
//! cleaning and weight sharing off, the JIT switches left as libtorch has
//! them. A known key with a value that does not parse fails the load, as in
//! Triton; unknown keys are ignored.

use nereid_core::model_config::ModelConfig;
use nereid_core::{BackendError, ParameterReader};

use crate::ffi::ExecOptions;

/// What a model's parameters ask of the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settings {
    pub(crate) exec: ExecOptions,
    /// `ENABLE_TENSOR_FUSER`; None leaves libtorch's setting alone.
    pub(crate) tensor_fuser: Option<bool>,
    /// Instances on the same device share one loaded module.
    pub(crate) weight_sharing: bool,
    /// Empty the CUDA caching allocator after each batch (GPU only).
    pub(crate) cache_cleaning: bool,
    /// `INTRA_OP_THREAD_COUNT`: libtorch's process-wide intra-op pool size.
    pub(crate) intra_op_threads: Option<i32>,
    /// `INTER_OP_THREAD_COUNT`: libtorch's process-wide inter-op pool size.
    pub(crate) inter_op_threads: Option<i32>,
    /// `ENABLE_NVFUSER`: nvFuser left PyTorch in 2.2; accepted and logged.
    pub(crate) nvfuser: Option<bool>,
}

impl Settings {
    pub(crate) fn from_config(config: &ModelConfig) -> Result<Self, BackendError> {
        let reader = ParameterReader::new(config);
        let disable_optimized = reader.flag("DISABLE_OPTIMIZED_EXECUTION")?;
        Ok(Settings {
            exec: ExecOptions {
                optimized_execution: !disable_optimized.unwrap_or(false),
                inference_mode: reader.flag("INFERENCE_MODE")?.unwrap_or(true),
                jit_profiling: reader.flag("ENABLE_JIT_PROFILING")?,
                jit_executor: reader.flag("ENABLE_JIT_EXECUTOR")?,
            },
            tensor_fuser: reader.flag("ENABLE_TENSOR_FUSER")?,
            weight_sharing: reader.flag("ENABLE_WEIGHT_SHARING")?.unwrap_or(false),
            cache_cleaning: reader.flag("ENABLE_CACHE_CLEANING")?.unwrap_or(false),
            intra_op_threads: threads(&reader, "INTRA_OP_THREAD_COUNT")?,
            inter_op_threads: threads(&reader, "INTER_OP_THREAD_COUNT")?,
            nvfuser: reader.flag("ENABLE_NVFUSER")?,
        })
    }
}

/// A thread count: a positive integer sets it, 0 or below leaves
/// libtorch's default (one thread per core).
fn threads(reader: &ParameterReader<'_>, key: &str) -> Result<Option<i32>, BackendError> {
    let Some(v) = reader.value(key) else {
        return Ok(None);
    };
    match v.parse::<i64>() {
        Ok(n) if n <= 0 => Ok(None),
        Ok(n) => i32::try_from(n)
            .map(Some)
            .map_err(|_| reader.bad(key, v, "a thread count")),
        Err(_) => Err(reader.bad(key, v, "an integer")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(params: &[(&str, &str)]) -> ModelConfig {
        nereid_core::testing::config_with("m", params)
    }

    #[test]
    fn defaults_are_tritons() {
        let s = Settings::from_config(&config(&[])).unwrap();
        assert!(s.exec.optimized_execution);
        assert!(s.exec.inference_mode);
        assert_eq!(s.exec.jit_profiling, None);
        assert_eq!(s.exec.jit_executor, None);
        assert!(!s.weight_sharing);
        assert!(!s.cache_cleaning);
        assert_eq!((s.intra_op_threads, s.inter_op_threads), (None, None));
    }

    #[test]
    fn reads_every_parameter() {
        let s = Settings::from_config(&config(&[
            ("DISABLE_OPTIMIZED_EXECUTION", "true"),
            ("INFERENCE_MODE", "False"),
            ("ENABLE_JIT_PROFILING", "0"),
            ("ENABLE_JIT_EXECUTOR", "yes"),
            ("ENABLE_WEIGHT_SHARING", "on"),
            ("ENABLE_CACHE_CLEANING", "1"),
            ("ENABLE_TENSOR_FUSER", "false"),
            ("INTRA_OP_THREAD_COUNT", "3"),
            ("INTER_OP_THREAD_COUNT", "0"),
            ("SOMETHING_ELSE", "whatever"),
        ]))
        .unwrap();
        assert!(!s.exec.optimized_execution);
        assert!(!s.exec.inference_mode);
        assert_eq!(s.exec.jit_profiling, Some(false));
        assert_eq!(s.exec.jit_executor, Some(true));
        assert!(s.weight_sharing);
        assert!(s.cache_cleaning);
        assert_eq!(s.tensor_fuser, Some(false));
        assert_eq!(s.intra_op_threads, Some(3));
        assert_eq!(s.inter_op_threads, None, "0 leaves libtorch's default");
    }

    #[test]
    fn bad_values_name_the_parameter() {
        let err = Settings::from_config(&config(&[("INFERENCE_MODE", "maybe")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "model 'm': parameter 'INFERENCE_MODE' is 'maybe', expected true/false, 1/0, on/off or yes/no"
        );
        let err = Settings::from_config(&config(&[("INTRA_OP_THREAD_COUNT", "two")])).unwrap_err();
        assert!(
            err.to_string().contains("'INTRA_OP_THREAD_COUNT' is 'two'"),
            "{err}"
        );
    }
}
