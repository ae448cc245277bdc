//! The seam between a model version and the queues in front of its
//! instances, and the choice of scheduler a config makes. The direct
//! scheduler hands each request to the next idle instance on its own; the
//! dynamic batcher ([`crate::spawn`]) forms batches of several requests
//! and sends them the same way. Every scheduler kind, and the refusal of
//! the ones not implemented, lives in this crate.

use std::sync::Arc;
use std::time::Duration;

use nereid_core::Error;
use nereid_core::model_config::model_sequence_batching::StrategyOldest;
use nereid_core::model_config::{ModelConfig, ModelSequenceBatching};

use crate::work_queue::{TrySendError, WorkSender};
use crate::{
    BatcherConfig, BatcherHandle, DEFAULT_MAX_BACKLOG, Dispatch, Pending, ResponseOrder,
    SequenceBatcher, SequenceConfig, SequenceStep, Strategy,
};

/// Accepts requests for one model version and passes them to its
/// instances.
pub trait Scheduler<T>: Send + Sync + std::fmt::Debug {
    /// Queues `item` (or runs it, see [`Inline`]) or refuses it at once
    /// (`Unavailable` when full); never waits for room.
    fn submit(&self, item: T) -> Result<(), Error>;

    /// The latency-target planner's current choices, for a dynamic batcher
    /// with a latency target; `None` for every other scheduler.
    fn latency_target(&self) -> Option<crate::TargetSnapshot> {
        None
    }
}

/// A model's instances, when an idle one may run a request on the
/// submitting thread.
pub trait Inline<T>: Send + Sync + std::fmt::Debug {
    /// Runs `item` here and now, or gives it back.
    fn try_inline(&self, item: T) -> Option<T>;
}

/// The answer to a request a model cannot queue: its queue is full.
pub fn queue_full(model: &str) -> Error {
    Error::unavailable(format!(
        "inference request for model '{model}' rejected: the queue is full"
    ))
}

/// The answer to a request for a model version whose instances are gone.
pub fn unloading(model: &str) -> Error {
    Error::unavailable(format!("model '{model}' is unloading"))
}

/// One request per execution, to whichever instance is idle first: every
/// instance pulls from the same bounded queue. When nothing is queued and
/// the instances allow it, an idle instance runs the request at once on
/// the submitting thread ([`Inline`]).
pub struct DirectScheduler<T> {
    model: String,
    queue: WorkSender<Dispatch<T>>,
    inline: Arc<dyn Inline<T>>,
}

impl<T> std::fmt::Debug for DirectScheduler<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectScheduler")
            .field("model", &self.model)
            .field("inline", &self.inline)
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static> Scheduler<T> for DirectScheduler<T> {
    fn submit(&self, item: T) -> Result<(), Error> {
        let item = if self.queue.is_empty() {
            match self.inline.try_inline(item) {
                None => return Ok(()),
                Some(item) => item,
            }
        } else {
            item
        };
        let dispatch = Dispatch {
            items: vec![item],
            permit: None,
        };
        self.queue.try_send(dispatch).map_err(|e| match e {
            TrySendError::Full(_) => queue_full(&self.model),
            TrySendError::Disconnected(_) => unloading(&self.model),
        })
    }
}

/// Triton's dynamic batcher.
pub struct BatchingScheduler<T> {
    batcher: BatcherHandle<T>,
}

impl<T> std::fmt::Debug for BatchingScheduler<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchingScheduler")
            .field("model", &self.batcher.model)
            .finish_non_exhaustive()
    }
}

impl<T: Pending> Scheduler<T> for BatchingScheduler<T> {
    fn submit(&self, item: T) -> Result<(), Error> {
        self.batcher.submit(item)
    }

    fn latency_target(&self) -> Option<crate::TargetSnapshot> {
        self.batcher.target_gauges().map(|g| g.snapshot())
    }
}

/// What a config's scheduling block asks for, once checked. A scheduler
/// this crate does not implement is refused by [`plan`], naming the field.
#[derive(Debug, Clone)]
pub enum Plan {
    /// No scheduling block: one request per execution.
    Direct,
    /// `dynamic_batching`.
    Dynamic(BatcherConfig),
    /// `sequence_batching`, with either strategy.
    Sequence(SequenceConfig),
}

impl Plan {
    /// Whether each instance reads a queue of its own (a sequence's slot
    /// belongs to one instance) rather than all sharing one.
    pub fn queue_per_instance(&self) -> bool {
        matches!(self, Plan::Sequence(_))
    }
}

/// The plan of `config`.
pub fn plan(config: &ModelConfig) -> Result<Plan, Error> {
    use nereid_core::model_config::model_config::SchedulingChoice;
    if let Some(SchedulingChoice::SequenceBatching(sb)) = &config.scheduling_choice {
        return sequence_plan(config, sb).map(Plan::Sequence);
    }
    match BatcherConfig::from_model_config(config) {
        Ok(Some(batcher)) => Ok(Plan::Dynamic(batcher)),
        Ok(None) => Ok(Plan::Direct),
        Err(e) => Err(e.into()),
    }
}

/// The sequence batcher `sb` asks for. A config with several fields this
/// crate does not implement is refused naming the first of them in this
/// order: the latency target, the strategy's, the rest.
fn sequence_plan(
    config: &ModelConfig,
    sb: &ModelSequenceBatching,
) -> Result<SequenceConfig, Error> {
    if config.parameters.contains_key(crate::policy::TARGET_KEY) {
        return Err(Error::invalid_argument(format!(
            "model '{}': {} works with dynamic_batching only, not sequence_batching",
            config.name,
            crate::policy::TARGET_KEY
        )));
    }
    let (strategy, slots) = sequence_strategy(config, sb)?;
    if sb.iterative_sequence {
        return Err(unsupported(
            &config.name,
            "sequence_batching.iterative_sequence",
        ));
    }
    let idle = match sb.max_sequence_idle_microseconds {
        0 => Duration::from_secs(1),
        us => Duration::from_micros(us),
    };
    Ok(SequenceConfig {
        model: config.name.clone(),
        strategy,
        slots_per_instance: slots,
        idle,
        max_backlog: DEFAULT_MAX_BACKLOG,
        reaped: Arc::default(),
    })
}

/// The strategy `sb` chooses and the sequence slots each instance gets
/// with it: one per batch row unless the oldest strategy sets its own.
fn sequence_strategy(
    config: &ModelConfig,
    sb: &ModelSequenceBatching,
) -> Result<(Strategy, usize), Error> {
    use nereid_core::model_config::model_sequence_batching::StrategyChoice;
    let max_batch_size = usize::try_from(config.max_batch_size.max(1)).unwrap_or(1);
    Ok(match &sb.strategy_choice {
        Some(StrategyChoice::Oldest(oldest)) => {
            oldest_strategy(&config.name, oldest, max_batch_size)?
        }
        Some(StrategyChoice::Direct(direct)) => (
            Strategy::Direct {
                max_queue_delay: Duration::from_micros(direct.max_queue_delay_microseconds),
                minimum_slot_utilization: direct.minimum_slot_utilization,
            },
            max_batch_size,
        ),
        None => (
            Strategy::Direct {
                max_queue_delay: Duration::ZERO,
                minimum_slot_utilization: 0.0,
            },
            max_batch_size,
        ),
    })
}

/// The oldest strategy, with `max_candidate_sequences` slots an instance
/// (a slot per batch row when it is not set).
fn oldest_strategy(
    model: &str,
    oldest: &StrategyOldest,
    max_batch_size: usize,
) -> Result<(Strategy, usize), Error> {
    if oldest.preserve_ordering {
        return Err(unsupported(
            model,
            "sequence_batching.oldest.preserve_ordering",
        ));
    }
    let mut preferred: Vec<usize> = oldest
        .preferred_batch_size
        .iter()
        .filter_map(|&p| usize::try_from(p).ok())
        .filter(|&p| p >= 1)
        .collect();
    preferred.sort_unstable();
    preferred.dedup();
    let candidates = usize::try_from(oldest.max_candidate_sequences)
        .ok()
        .filter(|&c| c > 0)
        .unwrap_or(max_batch_size);
    let strategy = Strategy::Oldest {
        max_batch_size,
        preferred,
        max_queue_delay: Duration::from_micros(oldest.max_queue_delay_microseconds),
    };
    Ok((strategy, candidates))
}

fn unsupported(model: &str, field: &str) -> Error {
    Error::invalid_argument(format!("model '{model}': {field} is not supported yet"))
}

/// A started scheduler, and the response order to keep when the config
/// asks to `preserve_ordering`.
pub type Started<T> = (Box<dyn Scheduler<T>>, Option<ResponseOrder>);

/// Starts the scheduler `plan` calls for, in front of `instances`
/// instances that read `queues`: one shared queue, or one per instance
/// when [`Plan::queue_per_instance`].
pub fn start<T: Pending + SequenceStep>(
    model: &str,
    plan: Plan,
    instances: usize,
    mut queues: Vec<WorkSender<Dispatch<T>>>,
    inline: Arc<dyn Inline<T>>,
    farewell: Option<crate::Farewell<T>>,
) -> Result<Started<T>, Error> {
    if let Plan::Sequence(config) = plan {
        let batcher = SequenceBatcher::start_with(config, queues, farewell)?;
        return Ok((Box::new(batcher), None));
    }
    let Some(queue) = queues.pop() else {
        return Err(Error::internal(format!(
            "model '{model}' has no instance queue"
        )));
    };
    Ok(match plan {
        Plan::Dynamic(batcher) => {
            let order = batcher.preserve_ordering.then(ResponseOrder::default);
            let batcher = crate::spawn(batcher, instances, queue)?;
            (Box::new(BatchingScheduler { batcher }), order)
        }
        Plan::Direct | Plan::Sequence(_) => (
            Box::new(DirectScheduler {
                model: model.to_string(),
                queue,
                inline,
            }),
            None,
        ),
    })
}

impl<T: SequenceStep> Scheduler<T> for SequenceBatcher<T> {
    fn submit(&self, item: T) -> Result<(), Error> {
        SequenceBatcher::submit(self, item)
    }
}

#[cfg(test)]
#[path = "seam_tests.rs"]
mod tests;
