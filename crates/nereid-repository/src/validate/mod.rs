//! Checks a normalized config the way Triton's `ValidateModelConfig`,
//! `ValidateInstanceGroup` and `ValidateModelIOConfig` do
//! (core/src/model_config_utils.cc), in that order, with Triton's messages.

mod io;
mod sequence;

use nereid_core::model_config::model_config::SchedulingChoice;
use nereid_core::model_config::model_instance_group::Kind;
use nereid_core::model_config::model_metrics::metric_control::MetricOptions;
use nereid_core::model_config::model_queue_policy::TimeoutAction;
use nereid_core::model_config::{
    ModelConfig, ModelDynamicBatching, ModelInstanceGroup, ModelMetrics, ModelQueuePolicy,
};

use crate::error::ConfigError;

pub(crate) const ENSEMBLE_PLATFORM: &str = "ensemble";
const TENSORRT_PLATFORM: &str = "tensorrt_plan";

/// Validates `config`; `gpus` are the GPU ids this server can use.
pub(crate) fn validate(config: &ModelConfig, gpus: &[u32]) -> Result<(), ConfigError> {
    let model = || config.name.clone();
    if config.max_batch_size < 0 {
        return Err(ConfigError::NegativeMaxBatchSize {
            model: model(),
            value: config.max_batch_size,
        });
    }
    validate_scheduler(config)?;
    let ensemble_scheduling = matches!(
        config.scheduling_choice,
        Some(SchedulingChoice::EnsembleScheduling(_))
    );
    if config.platform == ENSEMBLE_PLATFORM && !ensemble_scheduling {
        return Err(ConfigError::EnsembleWithoutScheduling { model: model() });
    }
    let decoupled = config
        .model_transaction_policy
        .as_ref()
        .is_some_and(|p| p.decoupled);
    if decoupled && config.response_cache.as_ref().is_some_and(|c| c.enable) {
        return Err(ConfigError::ResponseCacheUnsupported {
            model: model(),
            feature: "'decoupled' transaction policy",
        });
    }
    if let Some(metrics) = &config.model_metrics {
        validate_metrics(metrics).map_err(|message| ConfigError::ModelMetrics {
            model: model(),
            message,
        })?;
    }
    if !ensemble_scheduling {
        for group in &config.instance_group {
            validate_group(config, group, gpus).map_err(|message| ConfigError::InstanceGroup {
                model: model(),
                group: group.name.clone(),
                message,
            })?;
        }
    }
    io::validate_io(config)
}

/// The configured scheduler, and that only ensembles use the ensemble one.
fn validate_scheduler(config: &ModelConfig) -> Result<(), ConfigError> {
    let model = || config.name.clone();
    match &config.scheduling_choice {
        Some(SchedulingChoice::DynamicBatching(batching)) => validate_dynamic(config, batching),
        Some(SchedulingChoice::SequenceBatching(batcher)) => {
            if config.response_cache.as_ref().is_some_and(|c| c.enable) {
                return Err(ConfigError::ResponseCacheUnsupported {
                    model: model(),
                    feature: "sequence batching scheduler",
                });
            }
            sequence::validate_sequence(batcher, &config.name, config.max_batch_size).map_err(
                |message| ConfigError::SequenceBatching {
                    model: model(),
                    message,
                },
            )
        }
        Some(SchedulingChoice::EnsembleScheduling(_)) if config.platform != ENSEMBLE_PLATFORM => {
            Err(ConfigError::EnsembleSchedulingWithoutEnsemblePlatform { model: model() })
        }
        Some(SchedulingChoice::EnsembleScheduling(_)) | None => Ok(()),
    }
}

fn validate_dynamic(
    config: &ModelConfig,
    batching: &ModelDynamicBatching,
) -> Result<(), ConfigError> {
    let model = || config.name.clone();
    if config.max_batch_size == 0 {
        // Triton accepts this: its dynamic batcher clamps the batch to 1
        // (DynamicBatchScheduler: max_batch_size_ = max(1, max_batch_size)).
        tracing::warn!(model = %config.name, "dynamic_batching is set but max_batch_size is 0: requests are queued but never batched");
    }
    for &size in &batching.preferred_batch_size {
        if size <= 0 {
            return Err(ConfigError::PreferredBatchSizeNotPositive {
                model: model(),
                size,
            });
        }
        if size > config.max_batch_size {
            return Err(ConfigError::PreferredBatchSizeTooLarge {
                model: model(),
                size,
                max_batch_size: config.max_batch_size,
            });
        }
    }
    validate_priorities(config, batching)?;
    if batching.preserve_ordering {
        if batching.priority_levels > 1 {
            return Err(ConfigError::PreserveOrderingWithPriorities { model: model() });
        }
        let delays = |p: &ModelQueuePolicy| {
            p.default_timeout_microseconds != 0 && p.timeout_action() == TimeoutAction::Delay
        };
        if batching.default_queue_policy.as_ref().is_some_and(delays)
            || batching.priority_queue_policy.values().any(delays)
        {
            return Err(ConfigError::PreserveOrderingWithDelay { model: model() });
        }
    }
    Ok(())
}

/// The default level and every queue policy's level lie in `[1, levels]`.
fn validate_priorities(
    config: &ModelConfig,
    batching: &ModelDynamicBatching,
) -> Result<(), ConfigError> {
    let levels = batching.priority_levels;
    if levels == 0 {
        return Ok(());
    }
    let model = || config.name.clone();
    let default = batching.default_priority_level;
    if default == 0 || default > levels {
        return Err(ConfigError::DefaultPriorityOutOfRange {
            model: model(),
            levels,
            value: default,
        });
    }
    // Sorted so the error names the same level every time.
    let mut keys: Vec<u64> = batching.priority_queue_policy.keys().copied().collect();
    keys.sort_unstable();
    match keys.into_iter().find(|&k| k == 0 || k > levels) {
        Some(value) => Err(ConfigError::QueuePolicyPriorityOutOfRange {
            model: model(),
            levels,
            value,
        }),
        None => Ok(()),
    }
}

fn validate_metrics(metrics: &ModelMetrics) -> Result<(), String> {
    for control in &metrics.metric_control {
        let Some(identifier) = &control.metric_identifier else {
            return Err("metric control must specify 'metric_identifier'".to_owned());
        };
        if identifier.family.is_empty() {
            return Err("metric identifier must specify non-empty 'family'".to_owned());
        }
        let Some(MetricOptions::HistogramOptions(histogram)) = &control.metric_options else {
            return Err("metric control must specify 'histogram_options'".to_owned());
        };
        if histogram.buckets.is_empty() {
            return Err("histogram options must specify non-empty 'buckets'".to_owned());
        }
    }
    Ok(())
}

fn validate_group(
    config: &ModelConfig,
    group: &ModelInstanceGroup,
    gpus: &[u32],
) -> Result<(), String> {
    let prefix = format!("instance group {} of model {}", group.name, config.name);
    match group.kind() {
        Kind::Model if !group.gpus.is_empty() => {
            return Err(format!(
                "{prefix} has kind KIND_MODEL but specifies one or more GPUs"
            ));
        }
        Kind::Cpu if !group.gpus.is_empty() => {
            return Err(format!(
                "{prefix} has kind KIND_CPU but specifies one or more GPUs"
            ));
        }
        Kind::Gpu if gpus.is_empty() => {
            return Err(format!(
                "{prefix} has kind KIND_GPU but no GPUs are available"
            ));
        }
        Kind::Gpu if group.gpus.is_empty() => {
            return Err(format!("{prefix} has kind KIND_GPU but specifies no GPUs"));
        }
        Kind::Gpu => {
            let supported = |gid: &i32| u32::try_from(*gid).is_ok_and(|g| gpus.contains(&g));
            if let Some(gid) = group.gpus.iter().find(|g| !supported(g)) {
                let list: Vec<String> = gpus.iter().map(u32::to_string).collect();
                return Err(format!(
                    "{prefix} specifies invalid or unsupported gpu id {gid}. GPUs with at least the minimum required CUDA compute compatibility are: {}",
                    list.join(", ")
                ));
            }
        }
        Kind::Auto => return Err(format!("{prefix} has unexpected kind KIND_AUTO")),
        Kind::Model | Kind::Cpu => {}
    }
    if config.platform != TENSORRT_PLATFORM && !group.profile.is_empty() {
        return Err(format!(
            "{prefix} and platform {} specifies profile field which is only supported for TensorRT models",
            config.platform
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use nereid_core::model_config::ModelQueuePolicy;

    use super::*;

    fn batching_config(max_batch_size: i32, batching: ModelDynamicBatching) -> ModelConfig {
        ModelConfig {
            name: "m".into(),
            max_batch_size,
            scheduling_choice: Some(SchedulingChoice::DynamicBatching(batching)),
            ..Default::default()
        }
    }

    #[test]
    fn preferred_batch_size_limits() {
        let ok = ModelDynamicBatching {
            preferred_batch_size: vec![2, 4],
            ..Default::default()
        };
        assert_eq!(validate(&batching_config(4, ok), &[]), Ok(()));
        let big = ModelDynamicBatching {
            preferred_batch_size: vec![8],
            ..Default::default()
        };
        let err = validate(&batching_config(4, big), &[]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "dynamic batching preferred size must be <= max batch size for m (preferred_batch_size 8, max_batch_size 4)"
        );
        let zero = ModelDynamicBatching {
            preferred_batch_size: vec![0],
            ..Default::default()
        };
        assert!(matches!(
            validate(&batching_config(4, zero), &[]),
            Err(ConfigError::PreferredBatchSizeNotPositive { size: 0, .. })
        ));
    }

    #[test]
    fn dynamic_batching_without_max_batch_size_is_accepted() {
        assert_eq!(
            validate(&batching_config(0, ModelDynamicBatching::default()), &[]),
            Ok(())
        );
    }

    #[test]
    fn priorities() {
        let mut b = ModelDynamicBatching {
            priority_levels: 2,
            default_priority_level: 3,
            ..Default::default()
        };
        assert!(matches!(
            validate(&batching_config(4, b.clone()), &[]),
            Err(ConfigError::DefaultPriorityOutOfRange {
                levels: 2,
                value: 3,
                ..
            })
        ));
        b.default_priority_level = 1;
        b.priority_queue_policy
            .insert(5, ModelQueuePolicy::default());
        assert!(matches!(
            validate(&batching_config(4, b), &[]),
            Err(ConfigError::QueuePolicyPriorityOutOfRange { value: 5, .. })
        ));
    }

    #[test]
    fn negative_max_batch_size() {
        let config = ModelConfig {
            name: "m".into(),
            max_batch_size: -1,
            ..Default::default()
        };
        assert_eq!(
            validate(&config, &[]).unwrap_err().to_string(),
            "'max_batch_size' must be non-negative value for m (got -1)"
        );
    }

    #[test]
    fn gpu_groups_need_gpus() {
        let group = ModelInstanceGroup {
            name: "g".into(),
            kind: Kind::Gpu as i32,
            gpus: vec![1],
            ..Default::default()
        };
        let config = ModelConfig {
            name: "m".into(),
            instance_group: vec![group],
            ..Default::default()
        };
        let err = validate(&config, &[]).unwrap_err().to_string();
        assert_eq!(
            err,
            "instance group g of model m has kind KIND_GPU but no GPUs are available"
        );
        let err = validate(&config, &[0]).unwrap_err().to_string();
        assert!(
            err.starts_with(
                "instance group g of model m specifies invalid or unsupported gpu id 1."
            ),
            "{err}"
        );
        assert_eq!(validate(&config, &[0, 1]), Ok(()));
    }
}
