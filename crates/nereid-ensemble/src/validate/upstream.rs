//! The checks against the composing models, in the order Triton's model
//! repository manager makes them: availability when it connects the
//! dependency graph, then loaded versions (`CheckNode`), then tensors
//! (`ValidateEnsembleConfig` in core/src/ensemble_scheduler/ensemble_utils.cc).

use std::collections::BTreeSet;
use std::sync::Arc;

use nereid_core::model_config::ModelConfig;
use nereid_core::model_config::model_ensembling::Step;

use super::decoupled::any_decoupled;
use super::steps;
use super::tensors::TensorGraph;
use crate::EnsembleError;

/// What the engine knows of the model a step names.
#[derive(Debug, Clone)]
pub enum Composing {
    /// A loaded, ready version: its complete config.
    Loaded(Arc<ModelConfig>),
    /// The model is known but the version the step requires is not loaded
    /// (for version -1: no version of it is loaded).
    VersionNotLoaded,
    /// No such model, or it is not available.
    Missing,
    /// The model is known but its own config or dependencies were refused;
    /// the reason is that error's message.
    Invalid(String),
    /// The model is known but loading it failed; the reason is that error's
    /// message.
    LoadFailed(String),
}

/// What the composition checks learn about a valid ensemble.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Composition {
    /// A decoupled composing model is reachable from the ensemble's inputs.
    /// Triton then makes the ensemble itself decoupled: the engine sets
    /// `model_transaction_policy.decoupled` on the ensemble's config.
    pub decoupled: bool,
}

/// Every step names a model that `exists`. Triton reports only the first
/// step's model that is missing, and does so before looking for cycles.
pub fn check_available(
    config: &ModelConfig,
    exists: &dyn Fn(&str) -> bool,
) -> Result<(), EnsembleError> {
    let Some(steps) = steps(config) else {
        return Ok(());
    };
    match steps.iter().find(|step| !exists(&step.model_name)) {
        Some(step) => Err(EnsembleError::NotAvailable {
            ensemble: config.name.clone(),
            models: step.model_name.clone(),
        }),
        None => Ok(()),
    }
}

/// Checks against the composing models: missing and not-loaded models and
/// versions, then each step's tensors against its model's config, then
/// decoupled branching. `composing` is called with (model name, version).
pub fn check_composition(
    config: &ModelConfig,
    composing: &dyn Fn(&str, i64) -> Composing,
) -> Result<(), EnsembleError> {
    compose(config, composing).map(|_| ())
}

/// [`check_composition`], also returning what the engine must apply to the
/// ensemble's config when it passes.
pub fn compose(
    config: &ModelConfig,
    composing: &dyn Fn(&str, i64) -> Composing,
) -> Result<Composition, EnsembleError> {
    let Some(steps) = steps(config) else {
        return Ok(Composition::default());
    };
    check_available(config, &|name| {
        !matches!(composing(name, -1), Composing::Missing)
    })?;
    check_versions(config, steps, composing)?;
    let mut graph = TensorGraph::new(config);
    for step in steps {
        let model = loaded_config(&config.name, &step.model_name, composing)?;
        check_batch_size(config, step, &model)?;
        graph.map_step(&config.name, step, &model)?;
    }
    let decoupled = any_decoupled(&config.name, &mut graph)?;
    Ok(Composition { decoupled })
}

/// Triton's `CheckNode`: each composing model (in first-use order) has a
/// loaded version, and every version a step names is loaded. Among several
/// missing versions of one model Triton names the largest.
fn check_versions(
    config: &ModelConfig,
    steps: &[Step],
    composing: &dyn Fn(&str, i64) -> Composing,
) -> Result<(), EnsembleError> {
    let mut models: Vec<(&str, BTreeSet<i64>)> = Vec::new();
    for step in steps {
        match models.iter_mut().find(|(name, _)| *name == step.model_name) {
            Some((_, versions)) => {
                versions.insert(step.model_version);
            }
            None => models.push((&step.model_name, BTreeSet::from([step.model_version]))),
        }
    }
    for (model, versions) in models {
        loaded_config(&config.name, model, composing)?;
        let missing = versions
            .into_iter()
            .filter(|&v| v != -1)
            .rfind(|&v| !matches!(composing(model, v), Composing::Loaded(_)));
        if let Some(version) = missing {
            return Err(EnsembleError::VersionNotLoaded {
                ensemble: config.name.clone(),
                model: model.to_owned(),
                version,
            });
        }
    }
    Ok(())
}

/// The config of `model`'s latest loaded version: Triton checks every step
/// against that one, whatever version the step names.
fn loaded_config(
    ensemble: &str,
    model: &str,
    composing: &dyn Fn(&str, i64) -> Composing,
) -> Result<Arc<ModelConfig>, EnsembleError> {
    let ensemble = ensemble.to_owned();
    let model = model.to_owned();
    match composing(&model, -1) {
        Composing::Loaded(config) => Ok(config),
        Composing::VersionNotLoaded => Err(EnsembleError::NoLoadedVersion { ensemble, model }),
        Composing::Missing => Err(EnsembleError::NotAvailable {
            ensemble,
            models: model,
        }),
        Composing::Invalid(reason) => Err(EnsembleError::ComposingInvalid {
            ensemble,
            model,
            reason,
        }),
        Composing::LoadFailed(reason) => Err(EnsembleError::ComposingLoadFailed {
            ensemble,
            model,
            reason,
        }),
    }
}

/// A batching composing model must take batches as large as the
/// ensemble's; a non-batching one may join a batching ensemble.
fn check_batch_size(
    config: &ModelConfig,
    step: &Step,
    model: &ModelConfig,
) -> Result<(), EnsembleError> {
    if model.max_batch_size != 0 && model.max_batch_size < config.max_batch_size {
        return Err(EnsembleError::BatchSizeTooLarge {
            ensemble: config.name.clone(),
            ensemble_max: config.max_batch_size,
            model: step.model_name.clone(),
            model_max: model.max_batch_size,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use nereid_repository::parse_config_text;

    use super::*;

    const ENSEMBLE: &str = r#"name: "e" platform: "ensemble" max_batch_size: 4
        ensemble_scheduling { step [
          { model_name: "a" model_version: -1 input_map { key: "X" value: "data" } output_map { key: "Y" value: "t" } },
          { model_name: "b" model_version: 3 input_map { key: "X" value: "t" } output_map { key: "Y" value: "prob" } },
          { model_name: "b" model_version: 5 input_map { key: "X" value: "t" } output_map { key: "Y" value: "prob2" } }
        ] }
        input [ { name: "data" data_type: TYPE_FP32 dims: [ 16 ] } ]
        output [ { name: "prob" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "prob2" data_type: TYPE_FP32 dims: [ 16 ] } ]"#;

    fn model(name: &str, max_batch_size: i32, dims: &str) -> Arc<ModelConfig> {
        Arc::new(
            parse_config_text(&format!(
                r#"name: "{name}" max_batch_size: {max_batch_size}
                input [ {{ name: "X" data_type: TYPE_FP32 dims: {dims} }} ]
                output [ {{ name: "Y" data_type: TYPE_FP32 dims: {dims} }} ]"#
            ))
            .unwrap(),
        )
    }

    /// `a` and `b` loaded (b in `b_versions`), batching up to `b_max`.
    fn lookup(b_versions: &'static [i64], b_max: i32) -> impl Fn(&str, i64) -> Composing {
        let a = model("a", 8, "[ 16 ]");
        let b = model("b", b_max, "[ 16 ]");
        move |name, version| match name {
            "a" => Composing::Loaded(a.clone()),
            "b" if version == -1 || b_versions.contains(&version) => Composing::Loaded(b.clone()),
            "b" => Composing::VersionNotLoaded,
            _ => Composing::Missing,
        }
    }

    fn run(composing: &dyn Fn(&str, i64) -> Composing) -> Result<Composition, EnsembleError> {
        compose(&parse_config_text(ENSEMBLE).unwrap(), composing)
    }

    #[test]
    fn a_complete_composition_passes() {
        assert_eq!(
            run(&lookup(&[3, 5], 4)),
            Ok(Composition { decoupled: false })
        );
    }

    #[test]
    fn the_largest_missing_version_is_named() {
        let err = run(&lookup(&[], 4)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "ensemble 'e' depends on 'b' whose required version 5 is not loaded."
        );
        let err = run(&lookup(&[5], 4)).unwrap_err();
        assert!(matches!(
            err,
            EnsembleError::VersionNotLoaded { version: 3, .. }
        ));
    }

    #[test]
    fn the_first_missing_model_is_named_before_anything_else() {
        let err = run(&|name, _| match name {
            "a" => Composing::Missing,
            _ => Composing::Invalid("bad".into()),
        })
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "ensemble e contains models that are not available or ambiguous: a"
        );
        let config = parse_config_text(ENSEMBLE).unwrap();
        assert!(check_available(&config, &|name| name == "a").is_err());
        assert_eq!(check_available(&config, &|_| true), Ok(()));
    }

    #[test]
    fn composing_models_that_did_not_load_are_named_with_their_reason() {
        let with = |state: Composing| {
            let a = model("a", 8, "[ 16 ]");
            run(&move |name, _| match name {
                "a" => Composing::Loaded(a.clone()),
                _ => state.clone(),
            })
            .unwrap_err()
            .to_string()
        };
        assert_eq!(
            with(Composing::Invalid("oops".into())),
            "ensemble 'e' depends on 'b' which is not valid. Model 'b' failed with error: oops"
        );
        assert_eq!(
            with(Composing::LoadFailed("no file".into())),
            "ensemble 'e' depends on 'b' which has no loaded version. Model 'b' loading failed with error: no file"
        );
        assert_eq!(
            with(Composing::VersionNotLoaded),
            "ensemble 'e' depends on 'b' which has no loaded version."
        );
    }

    #[test]
    fn a_smaller_batching_model_is_refused_and_a_non_batching_one_is_not() {
        let err = run(&lookup(&[3, 5], 2)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "ensemble e allows maximum batch size 4, but it contains model b which only allows maximum batch size to be 2"
        );
        // b then takes [-1, 16] without a batch dimension: the same shape.
        let a = model("a", 8, "[ 16 ]");
        let b = model("b", 0, "[ -1, 16 ]");
        let composing = move |name: &str, _| match name {
            "a" => Composing::Loaded(a.clone()),
            _ => Composing::Loaded(b.clone()),
        };
        assert_eq!(run(&composing), Ok(Composition::default()));
    }

    #[test]
    fn maps_must_name_the_composing_models_tensors() {
        let a = model("a", 8, "[ 16 ]");
        let other = Arc::new(
            parse_config_text(
                r#"name: "b" max_batch_size: 8
                input [ { name: "X" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "Z" data_type: TYPE_FP32 dims: [ 16 ] } ]
                output [ { name: "W" data_type: TYPE_FP32 dims: [ 16 ] } ]"#,
            )
            .unwrap(),
        );
        let composing = move |name: &str, _| match name {
            "a" => Composing::Loaded(a.clone()),
            _ => Composing::Loaded(other.clone()),
        };
        let err = run(&composing).unwrap_err();
        assert_eq!(
            err.to_string(),
            "in ensemble e, input Z in model b is not mapped to any ensemble tensors"
        );
    }
}
