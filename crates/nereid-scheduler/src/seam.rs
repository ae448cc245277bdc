//! The seam between a model version and the queues in front of its
//! instances, and the choice of scheduler a config makes. The direct
//! scheduler hands each request to the next idle instance on its own; the
//! dynamic batcher ([`crate::spawn`]) forms batches of several requests
//! and sends them the same way. Every scheduler kind, and the refusal of
//! the ones not implemented, lives in this crate.

use std::sync::Arc;

use nereid_core::Error;
use nereid_core::model_config::ModelConfig;

use crate::work_queue::{TrySendError, WorkSender};
use crate::{BatcherConfig, BatcherHandle, Dispatch, Pending, ResponseOrder};

/// Accepts requests for one model version and passes them to its
/// instances.
pub trait Scheduler<T>: Send + Sync + std::fmt::Debug {
    /// Queues `item` (or runs it, see [`Inline`]) or refuses it at once
    /// (`Unavailable` when full); never waits for room.
    fn submit(&self, item: T) -> Result<(), Error>;
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
}

/// What a config's scheduling block asks for, once checked: the batcher's
/// settings, or none for the direct scheduler. A scheduler this crate does
/// not implement is refused here, naming the field.
pub fn plan(config: &ModelConfig) -> Result<Option<BatcherConfig>, Error> {
    BatcherConfig::from_model_config(config).map_err(|e| Error::invalid_argument(e.to_string()))
}

/// A started scheduler, and the response order to keep when the config
/// asks to `preserve_ordering`.
pub type Started<T> = (Box<dyn Scheduler<T>>, Option<ResponseOrder>);

/// Starts the scheduler `batching` (from [`plan`]) calls for, in front of
/// `instances` instances that read `queue`.
pub fn start<T: Pending>(
    model: &str,
    batching: Option<BatcherConfig>,
    instances: usize,
    queue: WorkSender<Dispatch<T>>,
    inline: Arc<dyn Inline<T>>,
) -> Result<Started<T>, Error> {
    Ok(match batching {
        Some(batcher) => {
            let order = batcher.preserve_ordering.then(ResponseOrder::default);
            let batcher = crate::spawn(batcher, instances, queue)?;
            (Box::new(BatchingScheduler { batcher }), order)
        }
        None => (
            Box::new(DirectScheduler {
                model: model.to_string(),
                queue,
                inline,
            }),
            None,
        ),
    })
}
