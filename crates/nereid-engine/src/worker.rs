//! Instance workers: one OS thread per model instance, so compute never
//! stalls the async reactor. Each thread loads its instance, reports the
//! outcome, then runs the batches the scheduler hands it until the queue's
//! last sender is gone. A batch runs gathered into one input per tensor
//! here, or request by request on an instance that takes it so
//! (`request_wise.rs`).
//!
//! Each instance sits in a slot its thread locks while it runs a batch. A
//! compute-only backend's instance whose executions are short may instead
//! run a request on the thread that received it, when its slot is idle and
//! nothing is queued ([`Instances::try_inline`]): the two thread hand-offs
//! that cost more than such an execution are skipped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use nereid_core::{Backend, Error, ModelInstance, ModelSource};
use nereid_scheduler::work_queue::WorkReceiver as Receiver;
use nereid_scheduler::{Dispatch, Pending};
use parking_lot::Mutex;

use crate::job::Job;
use crate::sequence::SequenceSetup;
use crate::stats::{FailureReason, ModelStats};
use crate::warmup::{self, WarmupSample};

mod answer;
mod request_wise;
mod rows;

use request_wise::run_requests;
use rows::run_rows;

/// Executions at most this long (on average) may run on the thread that
/// received the request: about what handing a request to an instance
/// thread and its answer back costs in CPU on a small machine
/// (docs/benchmarks.md, "Where the server's CPU goes").
pub const INLINE_BELOW: Duration = Duration::from_micros(100);

/// What every worker of one model version shares.
#[derive(Debug)]
pub struct WorkerContext {
    pub model_name: String,
    pub version: i64,
    pub batching: bool,
    pub stats: Arc<ModelStats>,
    /// Why the version can serve no more, once an instance says so.
    pub failure: Arc<OnceLock<String>>,
    /// Set for a model with `sequence_batching`.
    pub sequence: Option<Arc<SequenceSetup>>,
    /// What the version holds; its first batch is measured.
    pub footprint: Arc<crate::footprint::Footprint>,
    /// The config dims of the outputs that have a `reshape`: the model
    /// makes the reshape's shape, clients see these (as Triton answers).
    pub output_dims: Vec<(String, Vec<i64>)>,
}

/// One instance: `None` once it failed and could not be restarted.
type Slot = Mutex<Option<Box<dyn ModelInstance>>>;

/// A model version's instances, each in the slot its thread runs it from.
pub struct Instances {
    backend: Arc<dyn Backend>,
    ctx: Arc<WorkerContext>,
    slots: Vec<(Slot, ModelSource)>,
    /// Whether requests may run on the receiving thread at all.
    inline: bool,
    /// A moving average of an execution's duration in nanoseconds, from
    /// every execution; `u64::MAX` until the first.
    mean_nanos: AtomicU64,
}

impl std::fmt::Debug for Instances {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instances")
            .field("model", &self.ctx.model_name)
            .field("version", &self.ctx.version)
            .field("count", &self.slots.len())
            .field("inline", &self.inline)
            .finish_non_exhaustive()
    }
}

impl nereid_scheduler::Inline<Job> for Instances {
    /// Runs `job` here, on the caller's thread, when inline execution is
    /// allowed, executions have been short and an instance is idle; gives
    /// the job back otherwise. The caller checks first that nothing is
    /// queued, so a request never overtakes one that waits.
    fn try_inline(&self, job: Job) -> Option<Job> {
        if !self.inline || self.mean_nanos.load(Ordering::Relaxed) > INLINE_BELOW.as_nanos() as u64
        {
            return Some(job);
        }
        for (slot, source) in &self.slots {
            let Some(mut instance) = slot.try_lock() else {
                continue;
            };
            if instance.is_none() {
                continue;
            }
            let dispatch = Dispatch {
                items: vec![job],
                permit: None,
            };
            self.run(&mut instance, source, dispatch);
            return None;
        }
        Some(job)
    }
}

impl Instances {
    /// Runs a dispatch on one slot's instance, restarting it after a panic.
    fn run(
        &self,
        instance: &mut Option<Box<dyn ModelInstance>>,
        source: &ModelSource,
        dispatch: Dispatch<Job>,
    ) {
        let ctx = self.ctx.as_ref();
        let Some(serving) = instance.as_mut() else {
            // The instance could not be restarted: the version is
            // UNAVAILABLE; what was already queued gets the reason.
            let reason = ctx.failure.get().cloned().unwrap_or_default();
            fail_dispatch(ctx, dispatch, &Error::unavailable(reason));
            return;
        };
        let first = ctx.footprint.first_batch();
        let started = Instant::now();
        let outcome = run_batch(serving.as_mut(), ctx, dispatch);
        self.note_duration(started.elapsed());
        if let Some(before) = first {
            ctx.footprint.grew_from(before);
        }
        if let Outcome::Panicked = outcome {
            *instance = restart(self.backend.as_ref(), source, ctx);
            return;
        }
        if ctx.failure.get().is_none()
            && let Some(reason) = serving.failure()
        {
            tracing::error!(model = %source.model_name, version = source.version, instance = source.instance_index, %reason, "the instance can serve no more; the version is UNAVAILABLE until it is loaded again");
            let _ = ctx.failure.set(reason);
        }
    }

    /// Folds one execution into the moving average (weight 1/8).
    fn note_duration(&self, took: Duration) {
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let _ = self
            .mean_nanos
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |mean| {
                Some(if mean == u64::MAX {
                    nanos
                } else {
                    mean - mean / 8 + nanos / 8
                })
            });
    }
}

/// Starts one worker thread per source, each reading its queue in
/// `queues` (the same one for all, or one each); returns the instances
/// once every one has loaded and run the `warmup` samples, or the first
/// error (the started threads then exit). The samples are freed once every
/// instance ran them.
pub fn start_workers(
    backend: &Arc<dyn Backend>,
    sources: Vec<ModelSource>,
    ctx: Arc<WorkerContext>,
    warmup: Vec<WarmupSample>,
    queues: Vec<Receiver<Dispatch<Job>>>,
) -> Result<Arc<Instances>, Error> {
    let warmup: Arc<[WarmupSample]> = warmup.into();
    let (loaded_tx, loaded_rx) = crossbeam_channel::bounded(sources.len());
    let count = sources.len();
    let instances = Arc::new(Instances {
        backend: Arc::clone(backend),
        inline: backend.compute_only(),
        ctx,
        slots: sources
            .into_iter()
            .map(|source| (Mutex::new(None), source))
            .collect(),
        mean_nanos: AtomicU64::new(u64::MAX),
    });
    for (index, batches) in queues.into_iter().enumerate().take(count) {
        let source = &instances.slots[index].1;
        let name = format!(
            "{}-{}-{}",
            source.model_name, source.version, source.instance_index
        );
        let instances = Arc::clone(&instances);
        let warmup = Arc::clone(&warmup);
        let loaded_tx = loaded_tx.clone();
        thread::Builder::new()
            .name(name)
            .spawn(move || {
                let (slot, source) = &instances.slots[index];
                let instance = prepare(instances.backend.as_ref(), source, &instances.ctx, warmup);
                run_worker(&instances, slot, source, instance, &batches, &loaded_tx);
            })
            .map_err(|e| Error::internal(format!("cannot start an instance thread: {e}")))?;
    }
    drop(loaded_tx);
    for _ in 0..count {
        match loaded_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(Error::internal("an instance thread exited while loading")),
        }
    }
    Ok(instances)
}

/// Loads an instance and runs the warmup samples on it.
fn prepare(
    backend: &dyn Backend,
    source: &ModelSource,
    ctx: &WorkerContext,
    warmup: Arc<[WarmupSample]>,
) -> Result<Box<dyn ModelInstance>, Error> {
    let prepared = backend
        .load(source)
        .map_err(|e| e.to_string())
        .and_then(|mut instance| {
            warmup::run(instance.as_mut(), &warmup, ctx.batching, &ctx.stats)
                .map_err(|e| e.message().to_string())?;
            Ok(instance)
        });
    prepared.map_err(|e| {
        Error::internal(format!(
            "failed to load '{}' version {}: {e}",
            source.model_name, source.version
        ))
    })
}

fn run_worker(
    instances: &Instances,
    slot: &Slot,
    source: &ModelSource,
    instance: Result<Box<dyn ModelInstance>, Error>,
    batches: &Receiver<Dispatch<Job>>,
    loaded: &Sender<Result<(), Error>>,
) {
    match instance {
        Ok(instance) => *slot.lock() = Some(instance),
        Err(e) => {
            let _ = loaded.send(Err(e));
            return;
        }
    }
    if loaded.send(Ok(())).is_err() {
        // Another instance failed to load: the version never serves.
        drop(slot.lock().take());
        return;
    }
    tracing::debug!(model = %source.model_name, version = source.version, instance = source.instance_index, "instance ready");
    let footprint = &instances.ctx.footprint;
    footprint.instance_started();
    while let Ok(dispatch) = batches.recv() {
        instances.run(&mut slot.lock(), source, dispatch);
    }
    // Dropped here, on its own thread, once the queue is closed; no request
    // can reach it inline any more (the scheduler is gone with the queue).
    drop(slot.lock().take());
    footprint.instance_stopped();
    tracing::debug!(model = %source.model_name, version = source.version, instance = source.instance_index, "instance stopped");
}

/// Loads a fresh instance in place of one that panicked; when that fails
/// the version is UNAVAILABLE with the reason.
fn restart(
    backend: &dyn Backend,
    source: &ModelSource,
    ctx: &WorkerContext,
) -> Option<Box<dyn ModelInstance>> {
    match backend.load(source) {
        Ok(instance) => {
            tracing::warn!(model = %source.model_name, version = source.version, instance = source.instance_index, "instance restarted after a panic");
            Some(instance)
        }
        Err(e) => {
            let reason = format!(
                "instance {} of '{}' version {} panicked and could not be restarted: {e}",
                source.instance_index, source.model_name, source.version
            );
            tracing::error!(%reason, "the version is UNAVAILABLE until it is loaded again");
            let _ = ctx.failure.set(reason);
            None
        }
    }
}

/// Answers every job of a dispatch with `error`.
fn fail_dispatch(ctx: &WorkerContext, dispatch: Dispatch<Job>, error: &Error) {
    for job in dispatch.items {
        if !job.detached {
            ctx.stats
                .record_failure_for(job.enqueued.elapsed(), FailureReason::Backend);
        }
        job.answer(Err(error.clone()));
    }
}

/// How a batch went for the instance.
enum Outcome {
    Ran,
    /// The backend panicked: its requests failed and the instance is not
    /// trusted any more.
    Panicked,
}

/// Runs `f` on the instance, turning a panic into an error naming the
/// model.
fn guarded<T>(ctx: &WorkerContext, f: impl FnOnce() -> T) -> Result<T, Error> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".into());
        tracing::error!(model = %ctx.model_name, version = ctx.version, panic = %what, "the backend panicked; failing its batch and restarting the instance");
        Error::internal(format!(
            "model '{}' version {} panicked: {what}",
            ctx.model_name, ctx.version
        ))
    })
}

fn run_batch(
    instance: &mut dyn ModelInstance,
    ctx: &WorkerContext,
    dispatch: Dispatch<Job>,
) -> Outcome {
    let Dispatch { items, permit } = dispatch;
    let (mut jobs, abandoned): (Vec<Job>, Vec<Job>) =
        items.into_iter().partition(|j| !j.is_abandoned());
    abandoned.into_iter().for_each(Pending::cancel);
    jobs.iter_mut().for_each(Job::start);
    if jobs.is_empty() {
        return Outcome::Ran;
    }
    let span = batch_span(ctx, &jobs);
    let _batch = span.enter();
    let Some(request_wise) = instance.as_request_wise() else {
        return run_rows(instance, ctx, jobs, permit);
    };
    if let Some(setup) = ctx.sequence.as_deref() {
        for job in &mut jobs {
            if let Some(step) = &job.sequence {
                setup.add_controls(&mut job.request.request, step);
            }
        }
    }
    run_requests(request_wise, ctx, jobs, permit)
}

/// The span of one batch, which follows from its requests' spans.
fn batch_span(ctx: &WorkerContext, jobs: &[Job]) -> tracing::Span {
    let span = tracing::debug_span!("batch", model = %ctx.model_name, version = ctx.version, size = jobs.len());
    for job in jobs {
        span.follows_from(&job.span);
    }
    span
}
