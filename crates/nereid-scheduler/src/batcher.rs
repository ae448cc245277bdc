//! The batcher actor: one tokio task per model version owns its
//! [`QueueState`]. Requests arrive through a bounded inbox. Each instance
//! is a slot; a batch leaves only with a slot reserved for it, so a busy
//! model pushes back on its queue instead of piling up batches, and the
//! actor wakes whenever a slot frees, so a waiting batch can go as soon as
//! waiting no longer makes it bigger.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use nereid_core::Error;
use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use crate::Pending;
use crate::policy::BatcherConfig;
use crate::queue::QueueState;
use crate::target::TargetGauges;

/// A batch on its way to an instance. The instance drops `permit` as soon
/// as its model has run (before answering), which frees its slot.
#[derive(Debug)]
pub struct Dispatch<T> {
    pub items: Vec<T>,
    pub permit: Option<SlotPermit>,
}

/// A model's instances seen as slots: how many run a batch now, how many
/// requests freed slots have finished since the batcher last looked, and a
/// signal each time one frees.
#[derive(Debug)]
struct Slots {
    total: usize,
    busy: AtomicUsize,
    finished: AtomicUsize,
    /// Batches the latency-target planner numbered, and when each came
    /// back.
    returned: Mutex<Vec<(u64, Instant)>>,
    freed: Notify,
}

impl Slots {
    fn busy(&self) -> usize {
        self.busy.load(Ordering::Acquire).min(self.total)
    }

    fn reserve(self: &Arc<Self>, requests: usize, batch: Option<u64>) -> SlotPermit {
        self.busy.fetch_add(1, Ordering::AcqRel);
        SlotPermit {
            release: Release::Slots {
                slots: Arc::clone(self),
                requests,
                batch,
            },
        }
    }
}

/// One instance's slot, reserved for a batch; dropping it frees the slot
/// and wakes the scheduler that sent the batch.
pub struct SlotPermit {
    release: Release,
}

enum Release {
    /// The dynamic batcher's slots.
    Slots {
        slots: Arc<Slots>,
        requests: usize,
        batch: Option<u64>,
    },
    /// Another scheduler's hook (the sequence batcher's).
    Call(Option<Box<dyn FnOnce() + Send>>),
}

impl std::fmt::Debug for SlotPermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotPermit").finish_non_exhaustive()
    }
}

impl SlotPermit {
    /// A permit whose release calls `release`.
    pub fn on_release(release: impl FnOnce() + Send + 'static) -> SlotPermit {
        SlotPermit {
            release: Release::Call(Some(Box::new(release))),
        }
    }
}

impl Drop for SlotPermit {
    fn drop(&mut self) {
        match &mut self.release {
            Release::Slots {
                slots,
                requests,
                batch,
            } => {
                if let Some(batch) = batch {
                    slots.returned.lock().push((*batch, Instant::now()));
                }
                slots.finished.fetch_add(*requests, Ordering::AcqRel);
                slots.busy.fetch_sub(1, Ordering::AcqRel);
                slots.freed.notify_one();
            }
            Release::Call(call) => {
                if let Some(call) = call.take() {
                    call();
                }
            }
        }
    }
}

/// The sending side of a model's batcher. Dropping it lets the batcher
/// dispatch what is queued, then stop.
#[derive(Debug)]
pub struct BatcherHandle<T> {
    /// Each request with the time it was submitted: its queue delay and
    /// timeout count from then, not from when the batcher got to it.
    inbox: mpsc::Sender<(T, Instant)>,
    pub(crate) model: String,
    /// The latency-target planner's gauges, when the config sets a target.
    pub(crate) target: Option<Arc<TargetGauges>>,
}

impl<T: Pending> BatcherHandle<T> {
    /// Queues `item` or refuses it at once; never blocks.
    pub fn submit(&self, item: T) -> Result<(), Error> {
        self.inbox
            .try_send((item, Instant::now()))
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => crate::queue_full(&self.model),
                mpsc::error::TrySendError::Closed(_) => crate::unloading(&self.model),
            })
    }

    /// The latency-target planner's gauges, when the config sets a target.
    pub fn target_gauges(&self) -> Option<&Arc<TargetGauges>> {
        self.target.as_ref()
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
    out: crate::work_queue::WorkSender<Dispatch<T>>,
) -> Result<BatcherHandle<T>, Error> {
    let runtime = runtime()?;
    let capacity: usize = config.levels.iter().map(|l| l.max_queue_size).sum();
    let (inbox, requests) = mpsc::channel(capacity.clamp(1, 1 << 16));
    let model = config.model.clone();
    let slots = Arc::new(Slots {
        total: instances.max(1),
        busy: AtomicUsize::new(0),
        finished: AtomicUsize::new(0),
        returned: Mutex::new(Vec::new()),
        freed: Notify::new(),
    });
    let state = QueueState::new(config);
    let target = state.target_gauges();
    let actor = Actor {
        state,
        requests,
        slots,
        out,
    };
    runtime.spawn(actor.run());
    Ok(BatcherHandle {
        inbox,
        model,
        target,
    })
}

struct Actor<T> {
    state: QueueState<T>,
    requests: mpsc::Receiver<(T, Instant)>,
    slots: Arc<Slots>,
    out: crate::work_queue::WorkSender<Dispatch<T>>,
}

impl<T: Pending> Actor<T> {
    async fn run(mut self) {
        let mut open = true;
        let mut arrived = None;
        loop {
            let now = Instant::now();
            // Answers first: a request that arrived meanwhile may come from
            // a client that was just answered, and must cancel its expected
            // return rather than precede it.
            let returned = std::mem::take(&mut *self.slots.returned.lock());
            for (batch, at) in returned {
                self.state.executed(batch, at);
            }
            let finished = self.slots.finished.swap(0, Ordering::AcqRel);
            if finished > 0 {
                self.state.answered(finished, now);
            }
            if let Some((item, submitted)) = arrived.take() {
                self.push(item, submitted);
            }
            while let Ok((item, submitted)) = self.requests.try_recv() {
                self.push(item, submitted);
            }
            // Looked at after every submission it holds, so a timeout that
            // passed on the way here is seen as passed.
            let now = Instant::now();
            let busy = self.slots.busy();
            let step = self.state.step(now, self.slots.total - busy, busy);
            for item in step.expired {
                item.reject(Error::unavailable("Request timeout expired"));
            }
            step.abandoned.into_iter().for_each(Pending::cancel);
            if let Some(items) = step.dispatch {
                let permit = Some(self.slots.reserve(items.len(), step.batch));
                if self.out.send(Dispatch { items, permit }).is_err() {
                    return; // every instance is gone
                }
                continue;
            }
            if !open && self.state.is_empty() {
                return;
            }
            // A freed slot can let a waiting batch go: with every instance
            // idle it waits only for the clients just answered.
            let watch_slots = busy > 0 && !self.state.is_empty();
            let wake = step.wake_at;
            let slots = Arc::clone(&self.slots);
            arrived = tokio::select! {
                item = self.requests.recv(), if open => item.map(Some).unwrap_or_else(|| {
                    open = false;
                    None
                }),
                () = tokio::time::sleep_until(wake.unwrap_or(now)), if wake.is_some() => None,
                () = slots.freed.notified(), if watch_slots => None,
            };
        }
    }

    fn push(&mut self, item: T, now: Instant) {
        if let Err((item, error)) = self.state.push(item, now) {
            item.reject(error);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::spawn;
    use crate::queue::tests::{config, overridable, req, with_timeout};

    /// With two instances and one busy, a lone request waits for company.
    /// When the busy instance frees, every instance is idle and the batch
    /// waits only for the client just answered to come back: once it has,
    /// waiting out the (here one minute) delay cannot make it bigger.
    #[test]
    fn a_waiting_batch_goes_when_the_answered_client_is_back() {
        let (out, batches) = crate::work_queue::unbounded();
        let handle = spawn(config(8, 60_000_000), 2, out).unwrap();
        handle.submit(req(1)).unwrap();
        let first = batches.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(first.items.len(), 1);
        handle.submit(req(2)).unwrap();
        assert!(batches.recv_timeout(Duration::from_millis(200)).is_err());
        drop(first.permit);
        assert!(batches.recv_timeout(Duration::from_millis(200)).is_err());
        handle.submit(req(3)).unwrap();
        let second = batches.recv_timeout(Duration::from_secs(10)).unwrap();
        let ids: Vec<u32> = second.items.iter().map(|r| r.id).collect();
        assert_eq!(ids, [2, 3]);
    }

    /// A request whose timeout passed between its submission and the
    /// batcher looking at it is rejected, even with every instance idle:
    /// the timeout counts from submission, as Triton's from enqueueing.
    #[test]
    fn a_timeout_that_passed_on_the_way_is_rejected_on_an_idle_model() {
        let (out, batches) = crate::work_queue::unbounded();
        let handle = spawn(overridable(Duration::from_secs(60)), 2, out).unwrap();
        let (rejected, rejections) = crossbeam_channel::unbounded();
        let mut hurried = with_timeout(1, Duration::from_micros(1));
        hurried.rejected = Some(rejected);
        handle.submit(hurried).unwrap();
        assert_eq!(rejections.recv_timeout(Duration::from_secs(10)), Ok(1));
        handle.submit(req(2)).unwrap();
        let batch = batches.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(batch.items.iter().map(|r| r.id).collect::<Vec<_>>(), [2]);
    }

    /// Right after a burst, with answered clients still expected back, a
    /// batch that reaches a preferred size (not the largest) goes at once
    /// instead of waiting (here a minute) for them.
    #[test]
    fn a_preferred_size_goes_at_once_after_a_burst() {
        let (out, batches) = crate::work_queue::unbounded();
        let mut c = config(8, 60_000_000);
        c.preferred_batch_sizes = vec![4, 8];
        let handle = spawn(c, 1, out).unwrap();
        let next = || batches.recv_timeout(Duration::from_secs(10)).unwrap();
        let ids = |d: &super::Dispatch<crate::queue::tests::Req>| -> Vec<u32> {
            d.items.iter().map(|r| r.id).collect()
        };
        for id in 1..=4 {
            handle.submit(req(id)).unwrap();
        }
        let first = next();
        assert_eq!(ids(&first), [1, 2, 3, 4]);
        for id in 5..=11 {
            handle.submit(req(id)).unwrap();
        }
        drop(first.permit);
        let second = next();
        assert_eq!(ids(&second), [5, 6, 7, 8]);
        drop(second.permit);
        // Three queued, clients expected back: one more arrival makes the
        // preferred size 4.
        handle.submit(req(12)).unwrap();
        assert_eq!(ids(&next()), [9, 10, 11, 12]);
    }
}
