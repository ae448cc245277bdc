//! The schedulers in front of a model's instances, and the choice a config
//! makes among them ([`plan`], [`start`]): the direct scheduler, and
//! Triton's dynamic batcher. In the batcher, requests wait in bounded
//! per-priority queues governed by Triton's queue policies; batches are
//! formed from requests of the same non-batch shape and handed to an idle
//! model instance. The queue logic ([`QueueState`]) is a plain struct with
//! sync methods, driven by an async actor ([`spawn`]) that owns it. With a
//! latency target in the config, a planner learns each batch's cost and
//! sizes and times batches to the target, refusing at once what it cannot
//! serve in time.
//!
//! This crate knows nothing about wire formats, backends or the engine's
//! request type: it schedules anything that implements [`Pending`].

mod batcher;
mod cost;
mod ordering;
mod policy;
mod queue;
mod seam;
mod sequence;
mod target;
pub mod work_queue;

pub use batcher::{BatcherHandle, Dispatch, SlotPermit, spawn};
pub use cost::{CostModel, Fit};
pub use ordering::{OrderTicket, ResponseOrder};
pub use policy::{
    BatcherConfig, ConfigError, LevelPolicy, PERCENTILE_KEY, TARGET_KEY, TimeoutAction,
    latency_target,
};
pub use queue::{QueueState, Step};
pub use seam::{
    BatchingScheduler, DirectScheduler, Inline, Plan, Scheduler, Started, plan, queue_full, start,
    unloading,
};
pub use sequence::{
    CorrelationId, DEFAULT_MAX_BACKLOG, Farewell, Placement, SequenceBatcher, SequenceConfig,
    SequenceState, SequenceStep, Strategy,
};
pub use target::{LatencyTarget, TargetGauges, TargetSnapshot};

use std::time::Duration;

use nereid_core::Error;

/// A request waiting to be batched.
pub trait Pending: Send + 'static {
    /// How many inferences it carries (its batch dimension).
    fn batch_size(&self) -> u64;
    /// Equal for requests that may share a batch (same inputs, datatypes
    /// and non-batch dimensions).
    fn shape_key(&self) -> u64;
    /// The request's `priority` parameter; 0 asks for the default level.
    fn priority(&self) -> u64;
    /// The request's own `timeout` parameter, if it gave one.
    fn timeout(&self) -> Option<Duration>;
    /// Whether its client stopped waiting.
    fn is_abandoned(&self) -> bool;
    /// Answers it with `error` without running it.
    fn reject(self, error: Error);
    /// Drops it because its client went away.
    fn cancel(self);
}
