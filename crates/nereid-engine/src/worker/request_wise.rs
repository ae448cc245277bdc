//! Batches of a request-wise instance (one that takes a batch as its
//! requests, as Triton's Python backend does): each request gets its own
//! answer, and a decoupled model's request may stay open after the
//! execution, answered from the instance's other threads through a
//! responder it keeps.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nereid_core::{
    BackendError, BatchRequest, Error, InferResponse, Parameters, RequestWise, Responder, Tensor,
};
use nereid_scheduler::SlotPermit;

use super::answer::{ComputeStamps, answer, record_execution};
use super::{Outcome, WorkerContext, guarded};
use crate::batch::pick;
use crate::job::{Job, Streamed};
use crate::stats::{ComputeTimes, FailureReason};

/// Runs a batch on a request-wise instance: each request gets its own
/// answer, so one failing request leaves the others theirs. A decoupled
/// request may stay open after the execution: the instance keeps its
/// responder and answers it later, while this thread takes the next batch.
pub(super) fn run_requests(
    instance: &mut dyn RequestWise,
    ctx: &WorkerContext,
    jobs: Vec<Job>,
    permit: Option<SlotPermit>,
) -> Outcome {
    let started = Instant::now();
    let cancelled: Vec<_> = jobs.iter().map(|j| move || j.is_abandoned()).collect();
    let responders: Vec<Option<Arc<StreamResponder>>> = jobs
        .iter()
        .map(|job| {
            job.stream()
                .map(|stream| Arc::new(StreamResponder::new(ctx, job, stream)))
        })
        .collect();
    let requests: Vec<BatchRequest<'_>> = jobs
        .iter()
        .zip(&cancelled)
        .zip(&responders)
        .map(|((j, cancelled), responder)| BatchRequest {
            request: &j.request.request,
            outputs: &j.request.outputs,
            cancelled,
            responder: responder
                .as_ref()
                .map(|r| Arc::clone(r) as Arc<dyn Responder>),
        })
        .collect();
    let mut outcome = Outcome::Ran;
    let mut results = match guarded(ctx, || instance.execute_requests(&requests)) {
        Ok(results) => results,
        Err(e) => {
            outcome = Outcome::Panicked;
            requests
                .iter()
                .map(|_| Err(BackendError::Request(e.clone())))
                .collect()
        }
    };
    drop(requests);
    drop(permit);
    let executed = Instant::now();
    if results.len() != jobs.len() {
        let e = BackendError::Execute(format!(
            "model '{}' answered {} of {} requests",
            ctx.model_name,
            results.len(),
            jobs.len()
        ));
        results = jobs.iter().map(|_| Err(e.clone())).collect();
    }
    let times = ComputeTimes {
        input: Duration::ZERO,
        infer: executed - started,
        output: executed.elapsed(),
    };
    record_execution(ctx, &jobs, times);
    // A request-wise instance has no separate input stage.
    let stamps = ComputeStamps {
        started,
        inputs_ready: started,
        executed,
    };
    for ((job, result), responder) in jobs.into_iter().zip(results).zip(responders) {
        let outputs = result.map_err(Error::from);
        match responder {
            None => {
                let outputs = outputs.and_then(|outputs| pick(&job.request.outputs, outputs));
                answer(ctx, job, outputs, stamps, times);
            }
            Some(responder) => end_stream(ctx, job, outputs.map(drop), responder, stamps, times),
        }
    }
    outcome
}

/// Where a decoupled model's responses to one job go: each becomes an
/// [`InferResponse`] on the job's stream, holding the outputs the request
/// asked for that the response has. Dropped by its last holder without a
/// final flag, it sends the flag alone.
struct StreamResponder {
    model_name: String,
    version: i64,
    id: String,
    wanted: Vec<String>,
    stream: tokio::sync::mpsc::UnboundedSender<Streamed>,
    finished: AtomicBool,
}

impl StreamResponder {
    fn new(
        ctx: &WorkerContext,
        job: &Job,
        stream: &tokio::sync::mpsc::UnboundedSender<Streamed>,
    ) -> Self {
        StreamResponder {
            model_name: ctx.model_name.clone(),
            version: ctx.version,
            id: job.request.request.id.clone(),
            wanted: job.request.outputs.clone(),
            stream: stream.clone(),
            finished: AtomicBool::new(false),
        }
    }

    fn is_finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }
}

impl Responder for StreamResponder {
    fn send(&self, response: Option<Result<Vec<Tensor>, Error>>, last: bool) {
        let was_finished = match last {
            true => self.finished.swap(true, Ordering::AcqRel),
            false => self.is_finished(),
        };
        if was_finished {
            tracing::warn!(model = %self.model_name, "a response after the final flag was dropped");
            return;
        }
        let response = response.map(|outputs| {
            outputs.map(|mut outputs| {
                outputs.retain(|t| self.wanted.contains(&t.name));
                outputs.sort_by_key(|t| self.wanted.iter().position(|n| *n == t.name));
                InferResponse {
                    model_name: self.model_name.clone(),
                    model_version: self.version,
                    id: self.id.clone(),
                    outputs,
                    parameters: Parameters::new(),
                    in_shared_memory: Vec::new(),
                }
            })
        });
        let _ = self.stream.send(Streamed { response, last });
    }

    fn is_cancelled(&self) -> bool {
        self.stream.is_closed()
    }
}

impl Drop for StreamResponder {
    fn drop(&mut self) {
        if !self.is_finished() {
            let _ = self.stream.send(Streamed {
                response: None,
                last: true,
            });
        }
    }
}

/// Ends a decoupled model's job after its execution: counts it, and when
/// the execution failed before the final flag, sends the error as the
/// last response. A request the instance still holds stays open; one it
/// let go without a final flag gets the flag alone (see
/// [`StreamResponder`]'s drop).
fn end_stream(
    ctx: &WorkerContext,
    job: Job,
    result: Result<(), Error>,
    responder: Arc<StreamResponder>,
    stamps: ComputeStamps,
    times: ComputeTimes,
) {
    stamps.record(&job, &[]);
    if job.detached {
        return;
    }
    match result {
        Ok(()) => {
            ctx.stats
                .record_success(job.enqueued.elapsed(), stamps.started - job.enqueued, times);
            job.record_times(stamps.started - job.enqueued, &times);
        }
        Err(e) => {
            ctx.stats
                .record_failure_for(job.enqueued.elapsed(), FailureReason::Backend);
            if responder.is_finished() {
                tracing::warn!(model = %ctx.model_name, error = %e, "a decoupled model failed after its final response");
            } else {
                responder.send(Some(Err(e)), true);
            }
        }
    }
}
