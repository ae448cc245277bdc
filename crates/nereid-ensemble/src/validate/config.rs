//! The checks that need only the ensemble's own config: Triton's
//! `ValidateEnsembleSchedulingConfig` and the ensemble parts of
//! `ValidateModelConfig` (core/src/model_config_utils.cc).

use nereid_core::model_config::ModelConfig;
use nereid_core::model_config::model_ensembling::Step;

use super::flow::FlowGraph;
use super::{ENSEMBLE_PLATFORM, steps};
use crate::EnsembleError;

/// Checks that need only the ensemble's own config, in Triton's order.
///
/// Any config may be passed: one that is neither on the ensemble platform
/// nor sets `ensemble_scheduling` passes. In Triton's `ValidateModelConfig`
/// the generic checks (`max_batch_size`, dynamic and sequence batching)
/// come between the backend check made here first and the scheduling
/// checks made here after it, so a config failing both kinds is reported
/// by whichever the caller runs first.
pub fn check_config(config: &ModelConfig) -> Result<(), EnsembleError> {
    let on_platform = config.platform == ENSEMBLE_PLATFORM;
    let model = || config.name.clone();
    if on_platform && !config.backend.is_empty() {
        return Err(EnsembleError::HasBackend { model: model() });
    }
    match steps(config) {
        Some(_) if !on_platform => {
            Err(EnsembleError::SchedulingWithoutEnsemblePlatform { model: model() })
        }
        Some(steps) => check_scheduling(config, steps),
        None if on_platform => Err(EnsembleError::SchedulingNotSet { model: model() }),
        None => Ok(()),
    }
}

/// Triton's `ValidateEnsembleSchedulingConfig` past the platform check.
fn check_scheduling(config: &ModelConfig, steps: &[Step]) -> Result<(), EnsembleError> {
    let model = || config.name.clone();
    if !config.instance_group.is_empty() {
        return Err(EnsembleError::InstanceGroupSet { model: model() });
    }
    if config.optimization.is_some() {
        return Err(EnsembleError::OptimizationSet { model: model() });
    }
    if !config.model_warmup.is_empty() {
        return Err(EnsembleError::WarmupSet { model: model() });
    }
    if steps.is_empty() {
        return Err(EnsembleError::NoSteps { model: model() });
    }
    let mut graph = FlowGraph::build(&config.name, steps)?;
    graph.check_flow(config)
}

#[cfg(test)]
mod tests {
    use nereid_repository::parse_config_text;

    use super::*;

    const STEP: &str = r#"ensemble_scheduling { step [ { model_name: "m" model_version: -1
        input_map { key: "i" value: "data" } output_map { key: "o" value: "prob" } } ] }
        input [ { name: "data" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "prob" data_type: TYPE_FP32 dims: [ 1 ] } ]"#;

    fn check(text: &str) -> Result<(), EnsembleError> {
        check_config(&parse_config_text(text).unwrap())
    }

    #[test]
    fn a_plain_model_passes_and_a_minimal_ensemble_passes() {
        assert_eq!(check(r#"name: "m" platform: "onnxruntime_onnx""#), Ok(()));
        assert_eq!(
            check(&format!(r#"name: "e" platform: "ensemble" {STEP}"#)),
            Ok(())
        );
    }

    #[test]
    fn the_backend_is_checked_before_the_scheduling() {
        let err = check(r#"name: "e" platform: "ensemble" backend: "onnxruntime""#).unwrap_err();
        assert_eq!(err, EnsembleError::HasBackend { model: "e".into() });
        let err = check(r#"name: "e" platform: "ensemble""#).unwrap_err();
        assert_eq!(err, EnsembleError::SchedulingNotSet { model: "e".into() });
        let err = check(&format!(r#"name: "e" platform: "onnxruntime_onnx" {STEP}"#)).unwrap_err();
        assert_eq!(
            err,
            EnsembleError::SchedulingWithoutEnsemblePlatform { model: "e".into() }
        );
    }

    #[test]
    fn groups_then_optimization_then_warmup_then_steps() {
        let all = format!(
            r#"name: "e" platform: "ensemble" {STEP} instance_group [ {{ kind: KIND_CPU }} ]
            optimization {{ priority: PRIORITY_MAX }} model_warmup [ {{ }} ]"#
        );
        assert!(matches!(
            check(&all),
            Err(EnsembleError::InstanceGroupSet { .. })
        ));
        let no_group = format!(
            r#"name: "e" platform: "ensemble" {STEP} optimization {{ priority: PRIORITY_MAX }} model_warmup [ {{ }} ]"#
        );
        assert!(matches!(
            check(&no_group),
            Err(EnsembleError::OptimizationSet { .. })
        ));
        let warmup = format!(r#"name: "e" platform: "ensemble" {STEP} model_warmup [ {{ }} ]"#);
        assert!(matches!(
            check(&warmup),
            Err(EnsembleError::WarmupSet { .. })
        ));
        let no_steps = r#"name: "e" platform: "ensemble" ensemble_scheduling { }"#;
        assert!(matches!(
            check(no_steps),
            Err(EnsembleError::NoSteps { .. })
        ));
    }
}
