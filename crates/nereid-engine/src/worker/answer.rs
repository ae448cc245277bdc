//! Answering a batch's requests: each job's answer, its statistics, its
//! span's times and its trace's compute stages.

use std::time::Instant;

use nereid_core::{Activity, Error, InferResponse, Parameters, Tensor, TensorActivity};

use super::WorkerContext;
use crate::job::Job;
use crate::stats::{ComputeTimes, FailureReason};

/// When a batch's compute stages happened, for the traces of its requests.
#[derive(Debug, Clone, Copy)]
pub(super) struct ComputeStamps {
    pub(super) started: Instant,
    pub(super) inputs_ready: Instant,
    pub(super) executed: Instant,
}

impl ComputeStamps {
    /// Records the compute stages, and the outputs at the TENSORS level,
    /// on the job's trace; the compute ends now.
    pub(super) fn record(&self, job: &Job, outputs: &[Tensor]) {
        let Some(trace) = &job.request.request.trace else {
            return;
        };
        trace.record_at(Activity::ComputeStart, self.started);
        trace.record_at(Activity::ComputeInputEnd, self.inputs_ready);
        trace.record_at(Activity::ComputeOutputStart, self.executed);
        for output in outputs {
            trace.record_tensor(
                TensorActivity::BackendOutput,
                &output.name,
                output.datatype,
                &output.shape,
                &output.data,
            );
        }
        trace.record(Activity::ComputeEnd);
    }
}

/// Answers one job of a batch, counting it.
pub(super) fn answer(
    ctx: &WorkerContext,
    job: Job,
    outputs: Result<Vec<Tensor>, Error>,
    stamps: ComputeStamps,
    times: ComputeTimes,
) {
    stamps.record(&job, outputs.as_deref().unwrap_or_default());
    let started = stamps.started;
    if job.detached {
        if let Err(e) = &outputs {
            tracing::warn!(model = %ctx.model_name, version = ctx.version, error = %e, "the END step of a reaped sequence failed");
        }
        return;
    }
    match outputs {
        Ok(mut outputs) => {
            reshape_outputs(ctx, &mut outputs);
            ctx.stats
                .record_success(job.enqueued.elapsed(), started - job.enqueued, times);
            job.record_times(started - job.enqueued, &times);
            let response = InferResponse {
                model_name: ctx.model_name.clone(),
                model_version: ctx.version,
                id: job.request.request.id.clone(),
                outputs,
                parameters: Parameters::new(),
                in_shared_memory: Vec::new(),
            };
            job.answer(Ok(response));
        }
        Err(e) => {
            ctx.stats
                .record_failure_for(job.enqueued.elapsed(), FailureReason::Backend);
            job.answer(Err(e));
        }
    }
}

/// Gives the outputs that have a `reshape` their config dims (after the
/// batch dimension when the model batches): the model made the reshape's
/// shape, and Triton answers the config's. A `-1` takes what the others
/// leave over.
fn reshape_outputs(ctx: &WorkerContext, outputs: &mut [Tensor]) {
    for output in outputs.iter_mut() {
        let Some((_, dims)) = ctx.output_dims.iter().find(|(n, _)| *n == output.name) else {
            continue;
        };
        let batch = if ctx.batching {
            output.shape.first().copied()
        } else {
            None
        };
        let mut shape: Vec<i64> = batch.into_iter().chain(dims.iter().copied()).collect();
        let total: i64 = output.shape.iter().product();
        if let Some(pos) = shape.iter().position(|&d| d < 0) {
            let known: i64 = shape.iter().filter(|&&d| d >= 0).product();
            shape[pos] = total.checked_div(known).unwrap_or(0);
        }
        // Dims that cannot hold the elements (two `-1`s, a model that
        // made another shape) leave the model's shape as it is.
        if shape.iter().product::<i64>() == total {
            output.shape = shape;
        }
    }
}

/// Counts an execution of `jobs` in the statistics, with the clients'
/// inferences: a step the server sent itself is left out, and a batch of
/// nothing else is not counted at all.
pub(super) fn record_execution(ctx: &WorkerContext, jobs: &[Job], times: ComputeTimes) {
    let inferences: u64 = jobs
        .iter()
        .filter(|j| !j.detached)
        .map(|j| j.request.batch_size)
        .sum();
    if inferences > 0 {
        ctx.stats.record_execution(inferences, times);
    }
}
