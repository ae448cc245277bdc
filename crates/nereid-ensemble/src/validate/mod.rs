//! Triton's ensemble checks, pure and synchronous, in Triton's order.
//!
//! Triton checks an ensemble in stages, and the first failing stage is the
//! error it reports; the engine calls these in the same order:
//!
//! 1. [`check_config`]: the ensemble's own config, as part of Triton's
//!    `ValidateModelConfig` (after its generic batching checks).
//! 2. [`check_available`]: every step names a model the repository has.
//! 3. [`find_cycle`]: no ensemble depends on itself.
//! 4. [`check_composition`]: once the composing models are loaded, their
//!    versions, and the ensemble's tensors against their configs.

mod config;
mod cycle;
mod decoupled;
mod flow;
mod tensors;
mod upstream;

use std::collections::{HashMap, HashSet};

use nereid_core::model_config::ModelConfig;
use nereid_core::model_config::model_config::SchedulingChoice;
use nereid_core::model_config::model_ensembling::Step;

pub use config::check_config;
pub use cycle::find_cycle;
pub use upstream::{Composing, Composition, check_available, check_composition, compose};

/// The `platform` of an ensemble.
pub const ENSEMBLE_PLATFORM: &str = "ensemble";

/// The steps of `config`, or none when it has no `ensemble_scheduling`.
pub(crate) fn steps(config: &ModelConfig) -> Option<&[Step]> {
    match &config.scheduling_choice {
        Some(SchedulingChoice::EnsembleScheduling(ensembling)) => Some(&ensembling.step),
        _ => None,
    }
}

/// The (model name, version) pairs the steps use, in step order, without
/// duplicates. Empty for a model that is not an ensemble.
pub fn dependencies(config: &ModelConfig) -> Vec<(String, i64)> {
    let mut seen = HashSet::new();
    steps(config)
        .unwrap_or_default()
        .iter()
        .map(|step| (step.model_name.clone(), step.model_version))
        .filter(|pair| seen.insert(pair.clone()))
        .collect()
}

/// A step's map as (composing model tensor, ensemble tensor) pairs.
/// Triton walks protobuf maps in no defined order; sorting by the composing
/// model's tensor name makes the first error reported the same every time.
pub(crate) fn sorted(map: &HashMap<String, String>) -> Vec<(&str, &str)> {
    let mut pairs: Vec<(&str, &str)> = map.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    pairs.sort_unstable();
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependencies_keep_step_order_without_duplicates() {
        let config = nereid_repository::parse_config_text(
            r#"
            name: "e" platform: "ensemble"
            ensemble_scheduling { step [
              { model_name: "b" model_version: -1 input_map { key: "i" value: "x" } output_map { key: "o" value: "y" } },
              { model_name: "a" model_version: 2 input_map { key: "i" value: "y" } output_map { key: "o" value: "z" } },
              { model_name: "b" model_version: -1 input_map { key: "i" value: "z" } output_map { key: "o" value: "w" } },
              { model_name: "b" model_version: 3 input_map { key: "i" value: "w" } output_map { key: "o" value: "v" } }
            ] }"#,
        )
        .unwrap();
        assert_eq!(
            dependencies(&config),
            vec![("b".into(), -1), ("a".into(), 2), ("b".into(), 3)]
        );
        assert!(dependencies(&ModelConfig::default()).is_empty());
    }
}
