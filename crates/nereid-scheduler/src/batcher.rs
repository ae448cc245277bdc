//! The batcher actor: one tokio task per model version owns its
//! [`QueueState`]. Requests arrive through a bounded inbox; instance slots
//! are a semaphore, and a batch leaves only with a slot reserved for it, so
//! a busy model pushes back on its queue instead of piling up batches.

use std::sync::{Arc, OnceLock};

use nereid_core::Error;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::Instant;

use crate::Pending;
use crate::policy::BatcherConfig;
use crate::queue::QueueState;

/// A batch on its way to an instance. The instance drops `permit` when the
/// batch is done, which frees its slot.
#[derive(Debug)]
pub struct Dispatch<T> {
    pub items: Vec<T>,
    pub permit: Option<OwnedSemaphorePermit>,
}

/// The sending side of a model's batcher. Dropping it lets the batcher
/// dispatch what is queued, then stop.
#[derive(Debug)]
pub struct BatcherHandle<T> {
    inbox: mpsc::Sender<T>,
    model: String,
}

impl<T: Pending> BatcherHandle<T> {
    /// Queues `item` or refuses it at once; never blocks.
    pub fn submit(&self, item: T) -> Result<(), Error> {
        self.inbox.try_send(item).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => Error::unavailable(format!(
                "inference request for model '{}' rejected: the queue is full",
                self.model
            )),
            mpsc::error::TrySendError::Closed(_) => {
                Error::unavailable(format!("model '{}' is unloading", self.model))
            }
        })
    }
}

/// The runtime every batcher runs on: one thread of its own, so batch
/// timing never waits behind request handling, and models can be loaded
/// from any thread.
fn runtime() -> Result<&'static tokio::runtime::Handle, Error> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Handle, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .map_err(|e| format!("cannot start the batcher runtime: {e}"))?;
            let handle = runtime.handle().clone();
            std::thread::Builder::new()
                .name("nereid-batcher".into())
                .spawn(move || runtime.block_on(std::future::pending::<()>()))
                .map_err(|e| format!("cannot start the batcher thread: {e}"))?;
            Ok(handle)
        })
        .as_ref()
        .map_err(|e| Error::internal(e.clone()))
}

/// Starts the batcher of one model version. Batches go to `out`, which the
/// model's `instances` instance threads read.
pub fn spawn<T: Pending>(
    config: BatcherConfig,
    instances: usize,
    out: crossbeam_channel::Sender<Dispatch<T>>,
) -> Result<BatcherHandle<T>, Error> {
    let runtime = runtime()?;
    let capacity: usize = config.levels.iter().map(|l| l.max_queue_size).sum();
    let (inbox, requests) = mpsc::channel(capacity.clamp(1, 1 << 16));
    let model = config.model.clone();
    let slots = Arc::new(Semaphore::new(instances.max(1)));
    let actor = Actor {
        state: QueueState::new(config),
        requests,
        slots,
        instances: instances.max(1),
        out,
    };
    runtime.spawn(actor.run());
    Ok(BatcherHandle { inbox, model })
}

struct Actor<T> {
    state: QueueState<T>,
    requests: mpsc::Receiver<T>,
    slots: Arc<Semaphore>,
    instances: usize,
    out: crossbeam_channel::Sender<Dispatch<T>>,
}

impl<T: Pending> Actor<T> {
    async fn run(mut self) {
        let mut open = true;
        loop {
            let now = Instant::now();
            while let Ok(item) = self.requests.try_recv() {
                self.push(item, now);
            }
            let idle = self.slots.available_permits();
            let step = self.state.step(now, idle, self.instances - idle);
            for item in step.expired {
                item.reject(Error::unavailable("Request timeout expired"));
            }
            step.abandoned.into_iter().for_each(Pending::cancel);
            if let Some(items) = step.dispatch {
                let permit = Arc::clone(&self.slots).try_acquire_owned().ok();
                if self.out.send(Dispatch { items, permit }).is_err() {
                    return; // every instance is gone
                }
                continue;
            }
            if !open && self.state.is_empty() {
                return;
            }
            let need_slot = idle == 0 && !self.state.is_empty();
            let wake = step.wake_at;
            let slots = Arc::clone(&self.slots);
            let arrived = tokio::select! {
                item = self.requests.recv(), if open => item.map(Some).unwrap_or_else(|| {
                    open = false;
                    None
                }),
                () = tokio::time::sleep_until(wake.unwrap_or(now)), if wake.is_some() => None,
                permit = slots.acquire(), if need_slot => {
                    drop(permit);
                    None
                }
            };
            if let Some(item) = arrived {
                self.push(item, Instant::now());
            }
        }
    }

    fn push(&mut self, item: T, now: Instant) {
        if let Err((item, error)) = self.state.push(item, now) {
            item.reject(error);
        }
    }
}
