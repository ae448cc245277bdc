//! The seam between the engine and the queues in front of a model's
//! instances. The default scheduler hands each request to the next idle
//! instance on its own; the dynamic batcher (crate `nereid-scheduler`)
//! forms batches of several requests and sends them the same way.

use nereid_core::Error;
use nereid_scheduler::work_queue::{TrySendError, WorkSender as Sender};
use nereid_scheduler::{BatcherHandle, Dispatch};

pub mod job;

use job::Job;

/// Accepts jobs for one model version and passes them to its instances.
pub trait Scheduler: Send + Sync + std::fmt::Debug {
    /// Queues a job or refuses it at once (`Unavailable` when full); never
    /// blocks.
    fn submit(&self, job: Job) -> Result<(), Error>;
}

/// One request per execution, to whichever instance is idle first: every
/// instance pulls from the same bounded queue.
#[derive(Debug)]
pub struct DirectScheduler {
    model: String,
    queue: Sender<Dispatch<Job>>,
}

impl DirectScheduler {
    pub fn new(model: String, queue: Sender<Dispatch<Job>>) -> Self {
        DirectScheduler { model, queue }
    }
}

impl Scheduler for DirectScheduler {
    fn submit(&self, job: Job) -> Result<(), Error> {
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
