//! The plan a config's scheduling block makes: the sequence batcher's
//! strategy and slots as Triton reads them, and the refusal of what this
//! crate does not implement, in the order the fields are checked.

use std::time::Duration;

use nereid_core::ErrorKind;
use nereid_core::model_config::model_config::SchedulingChoice;
use nereid_core::model_config::model_sequence_batching::{
    StrategyChoice, StrategyDirect, StrategyOldest,
};
use nereid_core::model_config::{ModelDynamicBatching, ModelParameter, ModelSequenceBatching};

use super::*;
use crate::TARGET_KEY;

fn sequence(max_batch_size: i32, batching: ModelSequenceBatching) -> ModelConfig {
    ModelConfig {
        name: "s".into(),
        max_batch_size,
        scheduling_choice: Some(SchedulingChoice::SequenceBatching(batching)),
        ..Default::default()
    }
}

fn oldest(oldest: StrategyOldest) -> ModelSequenceBatching {
    ModelSequenceBatching {
        strategy_choice: Some(StrategyChoice::Oldest(oldest)),
        ..Default::default()
    }
}

fn sequence_config(config: &ModelConfig) -> SequenceConfig {
    match plan(config).unwrap() {
        Plan::Sequence(sequence) => sequence,
        other => panic!("a sequence plan, not {other:?}"),
    }
}

fn refusal(config: &ModelConfig) -> String {
    let error = plan(config).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    error.message().to_string()
}

#[test]
fn without_a_strategy_the_direct_one_runs_at_once_with_a_slot_per_batch_row() {
    let config = sequence(4, ModelSequenceBatching::default());
    let plan = plan(&config).unwrap();
    assert!(plan.queue_per_instance());
    let Plan::Sequence(sequence) = plan else {
        panic!("a sequence plan");
    };
    assert_eq!(sequence.model, "s");
    assert_eq!(
        sequence.strategy,
        Strategy::Direct {
            max_queue_delay: Duration::ZERO,
            minimum_slot_utilization: 0.0,
        }
    );
    assert_eq!(sequence.slots_per_instance, 4);
    // 0 asks for Triton's default of one second.
    assert_eq!(sequence.idle, Duration::from_secs(1));
    assert_eq!(sequence.max_backlog, DEFAULT_MAX_BACKLOG);
}

#[test]
fn the_direct_strategy_keeps_its_delay_and_utilization() {
    let config = sequence(
        0,
        ModelSequenceBatching {
            strategy_choice: Some(StrategyChoice::Direct(StrategyDirect {
                max_queue_delay_microseconds: 250,
                minimum_slot_utilization: 0.5,
            })),
            max_sequence_idle_microseconds: 7_000,
            ..Default::default()
        },
    );
    let sequence = sequence_config(&config);
    assert_eq!(
        sequence.strategy,
        Strategy::Direct {
            max_queue_delay: Duration::from_micros(250),
            minimum_slot_utilization: 0.5,
        }
    );
    // A model without batching still has one slot an instance.
    assert_eq!(sequence.slots_per_instance, 1);
    assert_eq!(sequence.idle, Duration::from_micros(7_000));
}

#[test]
fn the_oldest_strategy_sorts_its_preferred_sizes_and_counts_candidates() {
    let config = sequence(
        8,
        oldest(StrategyOldest {
            max_candidate_sequences: 6,
            preferred_batch_size: vec![4, 0, 2, -1, 4],
            max_queue_delay_microseconds: 100,
            preserve_ordering: false,
        }),
    );
    let sequence = sequence_config(&config);
    assert_eq!(
        sequence.strategy,
        Strategy::Oldest {
            max_batch_size: 8,
            preferred: vec![2, 4],
            max_queue_delay: Duration::from_micros(100),
        }
    );
    assert_eq!(sequence.slots_per_instance, 6);
}

#[test]
fn the_oldest_strategy_without_candidates_has_a_slot_per_batch_row() {
    let config = sequence(3, oldest(StrategyOldest::default()));
    assert_eq!(sequence_config(&config).slots_per_instance, 3);
}

#[test]
fn what_is_not_implemented_is_refused_naming_the_field_checked_first() {
    let mut config = sequence(
        2,
        ModelSequenceBatching {
            iterative_sequence: true,
            ..oldest(StrategyOldest {
                preserve_ordering: true,
                ..Default::default()
            })
        },
    );
    config.parameters.insert(
        TARGET_KEY.to_string(),
        ModelParameter {
            string_value: "50".into(),
        },
    );
    assert_eq!(
        refusal(&config),
        format!("model 's': {TARGET_KEY} works with dynamic_batching only, not sequence_batching")
    );
    config.parameters.clear();
    assert_eq!(
        refusal(&config),
        "model 's': sequence_batching.oldest.preserve_ordering is not supported yet"
    );
    config.scheduling_choice = Some(SchedulingChoice::SequenceBatching(ModelSequenceBatching {
        iterative_sequence: true,
        ..Default::default()
    }));
    assert_eq!(
        refusal(&config),
        "model 's': sequence_batching.iterative_sequence is not supported yet"
    );
}

#[test]
fn other_configs_plan_the_dynamic_batcher_or_none() {
    let dynamic = ModelConfig {
        name: "d".into(),
        max_batch_size: 8,
        scheduling_choice: Some(SchedulingChoice::DynamicBatching(
            ModelDynamicBatching::default(),
        )),
        ..Default::default()
    };
    assert!(matches!(plan(&dynamic).unwrap(), Plan::Dynamic(_)));
    assert!(matches!(
        plan(&ModelConfig::default()).unwrap(),
        Plan::Direct
    ));
}
