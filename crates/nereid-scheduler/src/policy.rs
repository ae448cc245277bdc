//! The batcher's settings, read from a model config's `dynamic_batching`.
//! Every field of it is honoured; a model asking for a scheduler this crate
//! does not provide is refused with a reason naming the field.

use std::collections::HashMap;
use std::time::Duration;

use nereid_core::Error;
use nereid_core::model_config::model_queue_policy::TimeoutAction as CfgTimeoutAction;
use nereid_core::model_config::{ModelConfig, ModelQueuePolicy};

use crate::target::LatencyTarget;

/// The model parameter that turns on batching to a latency target, in
/// milliseconds, and the one that names the percentile it is meant for.
/// Triton's backends ignore parameters they do not know.
pub const TARGET_KEY: &str = nereid_core::model_config::LATENCY_TARGET_PARAMETER;
pub const PERCENTILE_KEY: &str = "nereid.latency_target_percentile";

/// Requests one priority level may hold when its policy sets no
/// `max_queue_size`: every queue is bounded.
pub const DEFAULT_MAX_QUEUE_SIZE: usize = 16_384;

/// What happens to a request whose queue timeout expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutAction {
    /// Answer it with an error.
    Reject,
    /// Keep it, behind every request that has not timed out.
    Delay,
}

/// Triton's `ModelQueuePolicy` for one priority level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelPolicy {
    pub timeout_action: TimeoutAction,
    /// `None`: requests wait as long as needed unless they set a timeout
    /// the policy allows.
    pub default_timeout: Option<Duration>,
    pub allow_timeout_override: bool,
    pub max_queue_size: usize,
}

impl Default for LevelPolicy {
    fn default() -> Self {
        LevelPolicy::from_config(None)
    }
}

impl LevelPolicy {
    fn from_config(policy: Option<&ModelQueuePolicy>) -> LevelPolicy {
        let Some(p) = policy else {
            return LevelPolicy {
                timeout_action: TimeoutAction::Reject,
                default_timeout: None,
                allow_timeout_override: false,
                max_queue_size: DEFAULT_MAX_QUEUE_SIZE,
            };
        };
        LevelPolicy {
            timeout_action: match p.timeout_action() {
                CfgTimeoutAction::Reject => TimeoutAction::Reject,
                CfgTimeoutAction::Delay => TimeoutAction::Delay,
            },
            default_timeout: (p.default_timeout_microseconds > 0)
                .then(|| Duration::from_micros(p.default_timeout_microseconds)),
            allow_timeout_override: p.allow_timeout_override,
            max_queue_size: if p.max_queue_size == 0 {
                DEFAULT_MAX_QUEUE_SIZE
            } else {
                p.max_queue_size as usize
            },
        }
    }

    /// How long a request may wait in the queue. As in Triton, a request's
    /// own timeout (where the policy allows it) only ever shortens the
    /// default: it never extends it, and a level without a default timeout
    /// lets requests wait as long as needed whatever they ask.
    pub fn timeout(&self, requested: Option<Duration>) -> Option<Duration> {
        let default = self.default_timeout?;
        match requested {
            Some(t) if self.allow_timeout_override && !t.is_zero() => Some(t.min(default)),
            _ => Some(default),
        }
    }
}

/// Everything the batcher needs to know about one model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatcherConfig {
    pub model: String,
    /// Largest batch, counted in inferences; 1 for a model without a batch
    /// dimension.
    pub max_batch_size: u64,
    /// Ascending, each <= `max_batch_size`.
    pub preferred_batch_sizes: Vec<u64>,
    pub max_queue_delay: Duration,
    pub preserve_ordering: bool,
    /// Policy of level 1..=N at index 0..N; one level when priorities are off.
    pub levels: Vec<LevelPolicy>,
    /// Index into `levels` of the level for requests that ask for none.
    pub default_level: usize,
    /// Set by `nereid.latency_target_ms`: batches are sized and timed to
    /// the target instead of `max_queue_delay` and the preferred sizes
    /// (see `target.rs`).
    pub latency_target: Option<LatencyTarget>,
}

/// Why a model's scheduling config cannot be honoured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("model '{model}': {field} is not supported yet")]
    Unsupported { model: String, field: &'static str },
    #[error("model '{model}': {field} {value} is invalid: {reason}")]
    Invalid {
        model: String,
        field: &'static str,
        value: String,
        reason: &'static str,
    },
}

impl From<ConfigError> for Error {
    /// A scheduling block the server cannot honour is the config's fault.
    fn from(e: ConfigError) -> Self {
        Error::invalid_argument(e.to_string())
    }
}

impl BatcherConfig {
    /// The batcher for `config`, `None` when it asks for no dynamic batching.
    pub fn from_model_config(config: &ModelConfig) -> Result<Option<BatcherConfig>, ConfigError> {
        reject_other_schedulers(config)?;
        let latency_target = latency_target(config)?;
        let Some(db) = dynamic_batching(config) else {
            if latency_target.is_some() {
                return Err(invalid(
                    &config.name,
                    "parameter",
                    TARGET_KEY,
                    "needs dynamic_batching",
                ));
            }
            return Ok(None);
        };
        let model = config.name.clone();
        let max_batch_size = u64::try_from(config.max_batch_size.max(1)).unwrap_or(1);
        let mut preferred = Vec::with_capacity(db.preferred_batch_size.len());
        for &p in &db.preferred_batch_size {
            match u64::try_from(p) {
                Ok(p) if p >= 1 && p <= max_batch_size => preferred.push(p),
                _ => {
                    return Err(invalid(
                        &model,
                        "dynamic_batching.preferred_batch_size",
                        p,
                        "must be between 1 and max_batch_size",
                    ));
                }
            }
        }
        preferred.sort_unstable();
        preferred.dedup();
        let (levels, default_level) = levels(&model, db)?;
        Ok(Some(BatcherConfig {
            model,
            max_batch_size,
            preferred_batch_sizes: preferred,
            max_queue_delay: Duration::from_micros(db.max_queue_delay_microseconds),
            preserve_ordering: db.preserve_ordering,
            levels,
            default_level,
            latency_target,
        }))
    }

    /// The level index a request with `priority` (0 = default) goes to.
    /// Like Triton, a priority outside 1..=levels means the default level.
    pub fn level_of(&self, priority: u64) -> usize {
        match usize::try_from(priority) {
            Ok(p) if p >= 1 && p <= self.levels.len() => p - 1,
            _ => self.default_level,
        }
    }
}

/// The latency target the config's parameters set, if any.
pub fn latency_target(config: &ModelConfig) -> Result<Option<LatencyTarget>, ConfigError> {
    let value = |key| config.parameters.get(key).map(|p| p.string_value.trim());
    let number = |key: &'static str,
                  text: &str,
                  range: std::ops::RangeInclusive<f64>,
                  reason: &'static str| {
        text.parse::<f64>()
            .ok()
            .filter(|v| range.contains(v))
            .ok_or_else(|| invalid(&config.name, key, format!("'{text}'"), reason))
    };
    let Some(text) = value(TARGET_KEY) else {
        if value(PERCENTILE_KEY).is_some() {
            return Err(invalid(
                &config.name,
                PERCENTILE_KEY,
                "set",
                "needs nereid.latency_target_ms",
            ));
        }
        return Ok(None);
    };
    let ms = number(
        TARGET_KEY,
        text,
        0.001..=3_600_000.0,
        "must be a number of milliseconds above 0 and at most an hour",
    )?;
    let percentile = match value(PERCENTILE_KEY) {
        None => 99.0,
        Some(text) => number(
            PERCENTILE_KEY,
            text,
            50.0..=99.999,
            "must be a percentile from 50 to 99.999",
        )?,
    };
    Ok(Some(LatencyTarget {
        target: Duration::from_secs_f64(ms / 1000.0),
        percentile_milli: (percentile * 1000.0).round() as u32,
    }))
}

fn dynamic_batching(
    config: &ModelConfig,
) -> Option<&nereid_core::model_config::ModelDynamicBatching> {
    use nereid_core::model_config::model_config::SchedulingChoice;
    match &config.scheduling_choice {
        Some(SchedulingChoice::DynamicBatching(db)) => Some(db),
        _ => None,
    }
}

fn reject_other_schedulers(config: &ModelConfig) -> Result<(), ConfigError> {
    use nereid_core::model_config::model_config::SchedulingChoice;
    let field = match &config.scheduling_choice {
        Some(SchedulingChoice::SequenceBatching(_)) => "sequence_batching",
        Some(SchedulingChoice::EnsembleScheduling(_)) => "ensemble_scheduling",
        _ => return Ok(()),
    };
    Err(ConfigError::Unsupported {
        model: config.name.clone(),
        field,
    })
}

fn levels(
    model: &str,
    db: &nereid_core::model_config::ModelDynamicBatching,
) -> Result<(Vec<LevelPolicy>, usize), ConfigError> {
    let default = LevelPolicy::from_config(db.default_queue_policy.as_ref());
    if db.priority_levels == 0 {
        if !db.priority_queue_policy.is_empty() {
            return Err(invalid(
                model,
                "dynamic_batching.priority_queue_policy",
                "set",
                "needs priority_levels",
            ));
        }
        return Ok((vec![default], 0));
    }
    let count = usize::try_from(db.priority_levels)
        .unwrap_or(usize::MAX)
        .min(1 << 16);
    if db.default_priority_level == 0 || db.default_priority_level > db.priority_levels {
        return Err(invalid(
            model,
            "dynamic_batching.default_priority_level",
            db.default_priority_level,
            "must be between 1 and priority_levels",
        ));
    }
    let by_level: &HashMap<u64, ModelQueuePolicy> = &db.priority_queue_policy;
    if let Some(level) = by_level.keys().find(|&&l| l == 0 || l > db.priority_levels) {
        return Err(invalid(
            model,
            "dynamic_batching.priority_queue_policy",
            level,
            "names a level outside 1..=priority_levels",
        ));
    }
    let levels = (1..=count as u64)
        .map(|l| {
            by_level
                .get(&l)
                .map_or_else(|| default.clone(), |p| LevelPolicy::from_config(Some(p)))
        })
        .collect();
    Ok((levels, (db.default_priority_level - 1) as usize))
}

fn invalid(
    model: &str,
    field: &'static str,
    value: impl ToString,
    reason: &'static str,
) -> ConfigError {
    ConfigError::Invalid {
        model: model.to_string(),
        field,
        value: value.to_string(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use nereid_core::model_config::model_config::SchedulingChoice;
    use nereid_core::model_config::{ModelDynamicBatching, ModelSequenceBatching};

    use super::*;

    fn config(db: ModelDynamicBatching) -> ModelConfig {
        ModelConfig {
            name: "m".into(),
            max_batch_size: 8,
            scheduling_choice: Some(SchedulingChoice::DynamicBatching(db)),
            ..Default::default()
        }
    }

    #[test]
    fn reads_every_field() {
        let mut db = ModelDynamicBatching {
            preferred_batch_size: vec![8, 4],
            max_queue_delay_microseconds: 500,
            preserve_ordering: true,
            priority_levels: 2,
            default_priority_level: 2,
            default_queue_policy: Some(ModelQueuePolicy {
                max_queue_size: 3,
                ..Default::default()
            }),
            ..Default::default()
        };
        db.priority_queue_policy.insert(
            1,
            ModelQueuePolicy {
                timeout_action: 1,
                default_timeout_microseconds: 100,
                allow_timeout_override: true,
                max_queue_size: 0,
            },
        );
        let b = BatcherConfig::from_model_config(&config(db))
            .unwrap()
            .unwrap();
        assert_eq!(b.preferred_batch_sizes, [4, 8]);
        assert_eq!(b.max_queue_delay, Duration::from_micros(500));
        assert!(b.preserve_ordering);
        assert_eq!(b.levels.len(), 2);
        assert_eq!(b.levels[0].timeout_action, TimeoutAction::Delay);
        assert_eq!(
            b.levels[0].timeout(Some(Duration::from_micros(7))),
            Some(Duration::from_micros(7))
        );
        // A longer request timeout does not extend the default.
        assert_eq!(
            b.levels[0].timeout(Some(Duration::from_secs(7))),
            Some(Duration::from_micros(100))
        );
        assert_eq!(b.levels[1].max_queue_size, 3);
        assert_eq!(b.levels[1].timeout(Some(Duration::from_micros(7))), None);
        assert_eq!(b.level_of(0), 1);
        assert_eq!(b.level_of(1), 0);
        assert_eq!(b.level_of(9), 1);
    }

    fn with_parameters(db: Option<ModelDynamicBatching>, pairs: &[(&str, &str)]) -> ModelConfig {
        let batching = db.is_some();
        let mut c = config(db.unwrap_or_default());
        if !batching {
            c.scheduling_choice = None;
        }
        for (k, v) in pairs {
            c.parameters.insert(
                k.to_string(),
                nereid_core::model_config::ModelParameter {
                    string_value: v.to_string(),
                },
            );
        }
        c
    }

    #[test]
    fn reads_a_latency_target_and_its_percentile() {
        let db = Some(ModelDynamicBatching::default());
        let read = |pairs: &[(&str, &str)]| {
            BatcherConfig::from_model_config(&with_parameters(db.clone(), pairs))
                .map(|b| b.and_then(|b| b.latency_target))
        };
        assert_eq!(read(&[]), Ok(None));
        assert_eq!(
            read(&[(TARGET_KEY, " 12.5 ")]),
            Ok(Some(LatencyTarget {
                target: Duration::from_micros(12_500),
                percentile_milli: 99_000,
            }))
        );
        assert_eq!(
            read(&[(TARGET_KEY, "50"), (PERCENTILE_KEY, "99.9")]),
            Ok(Some(LatencyTarget {
                target: Duration::from_millis(50),
                percentile_milli: 99_900,
            }))
        );
        for (pairs, named) in [
            (&[(TARGET_KEY, "0")][..], TARGET_KEY),
            (&[(TARGET_KEY, "fast")][..], TARGET_KEY),
            (
                &[(TARGET_KEY, "50"), (PERCENTILE_KEY, "100")][..],
                PERCENTILE_KEY,
            ),
            (
                &[(PERCENTILE_KEY, "99")][..],
                "needs nereid.latency_target_ms",
            ),
        ] {
            let error = read(pairs).unwrap_err().to_string();
            assert!(error.contains(named), "{pairs:?}: {error}");
        }
        let without = with_parameters(None, &[(TARGET_KEY, "50")]);
        let error = BatcherConfig::from_model_config(&without).unwrap_err();
        assert!(
            error.to_string().contains("needs dynamic_batching"),
            "{error}"
        );
    }

    #[test]
    fn refuses_what_it_cannot_honour() {
        let bad = config(ModelDynamicBatching {
            preferred_batch_size: vec![16],
            ..Default::default()
        });
        assert!(
            BatcherConfig::from_model_config(&bad)
                .unwrap_err()
                .to_string()
                .contains("preferred_batch_size")
        );
        let bad = config(ModelDynamicBatching {
            priority_levels: 2,
            default_priority_level: 3,
            ..Default::default()
        });
        assert!(
            BatcherConfig::from_model_config(&bad)
                .unwrap_err()
                .to_string()
                .contains("default_priority_level")
        );
        let seq = ModelConfig {
            name: "s".into(),
            scheduling_choice: Some(SchedulingChoice::SequenceBatching(
                ModelSequenceBatching::default(),
            )),
            ..Default::default()
        };
        assert!(
            BatcherConfig::from_model_config(&seq)
                .unwrap_err()
                .to_string()
                .contains("sequence_batching")
        );
        assert_eq!(
            BatcherConfig::from_model_config(&ModelConfig::default()).unwrap(),
            None
        );
    }
}
