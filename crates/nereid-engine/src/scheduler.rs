//! The seam between the engine and the queues in front of a model's
//! instances. The default scheduler hands each request to the next idle
//! instance on its own; the dynamic batcher (crate `nereid-scheduler`)
//! forms batches of several requests and sends them the same way.

use std::sync::Arc;

use nereid_core::Error;
use nereid_scheduler::work_queue::{TrySendError, WorkSender as Sender};
use nereid_scheduler::{BatcherHandle, Dispatch};

use crate::worker::Instances;

pub mod job;

use job::Job;

/// Accepts jobs for one model version and passes them to its instances.
pub trait Scheduler: Send + Sync + std::fmt::Debug {
    /// Queues a job or refuses it at once (`Unavailable` when full); never
    /// blocks.
    fn submit(&self, job: Job) -> Result<(), Error>;
}

/// One request per execution, to whichever instance is idle first: every
/// instance pulls from the same bounded queue. When nothing is queued and
/// the instances allow it, an idle instance runs the request at once on
/// the submitting thread (`Instances::try_inline`).
#[derive(Debug)]
pub struct DirectScheduler {
    model: String,
    queue: Sender<Dispatch<Job>>,
    instances: Arc<Instances>,
}

impl DirectScheduler {
    pub fn new(model: String, queue: Sender<Dispatch<Job>>, instances: Arc<Instances>) -> Self {
        DirectScheduler {
            model,
            queue,
            instances,
        }
    }
}

impl Scheduler for DirectScheduler {
    fn submit(&self, job: Job) -> Result<(), Error> {
        let job = if self.queue.is_empty() {
            match self.instances.try_inline(job) {
                None => return Ok(()),
                Some(job) => job,
            }
        } else {
            job
        };
        match self.queue.try_send(Dispatch {
            items: vec![job],
            permit: None,
        }) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(Error::unavailable(format!(
                "inference request for model '{}' rejected: the queue is full",
                self.model
            ))),
            Err(TrySendError::Disconnected(_)) => Err(Error::unavailable(format!(
                "model '{}' is unloading",
                self.model
            ))),
        }
    }
}

/// Triton's dynamic batcher, from `nereid-scheduler`.
#[derive(Debug)]
pub struct BatchingScheduler {
    batcher: BatcherHandle<Job>,
}

impl BatchingScheduler {
    pub fn new(batcher: BatcherHandle<Job>) -> Self {
        BatchingScheduler { batcher }
    }
}

impl Scheduler for BatchingScheduler {
    fn submit(&self, job: Job) -> Result<(), Error> {
        self.batcher.submit(job)
    }
}
