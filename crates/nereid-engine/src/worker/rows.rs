//! A batch run as rows: the requests' inputs gathered into one tensor
//! each, executed once, and the outputs scattered back per request; a
//! sequence batch has one row per slot (idle slots as READY-false rows).

use std::time::Instant;

use nereid_core::{Error, ModelInstance, Tensor};
use nereid_scheduler::SlotPermit;

use super::answer::{ComputeStamps, answer, record_execution};
use super::{Outcome, WorkerContext, guarded};
use crate::batch::{gather, scatter};
use crate::job::Job;
use crate::sequence::SequenceSetup;
use crate::stats::{ComputeTimes, FailureReason};
use crate::validate::ValidatedRequest;

/// Runs `jobs` as one batch of rows on `instance` and answers each.
pub(super) fn run_rows(
    instance: &mut dyn ModelInstance,
    ctx: &WorkerContext,
    jobs: Vec<Job>,
    permit: Option<SlotPermit>,
) -> Outcome {
    let started = Instant::now();
    // A sequence batch runs as rows, one per slot; otherwise each job is
    // its own row.
    let rows = ctx
        .sequence
        .as_deref()
        .map(|setup| sequence_rows(setup, &jobs));
    let requests: Vec<&ValidatedRequest> = match &rows {
        Some((rows, _)) => rows.iter().collect(),
        None => jobs.iter().map(|j| &j.request).collect(),
    };
    let batch = gather(&requests, ctx.batching);
    let gathered = Instant::now();
    let mut outcome = Outcome::Ran;
    let result = guarded(ctx, || instance.execute(&batch))
        .inspect_err(|_| outcome = Outcome::Panicked)
        .and_then(|r| r.map_err(Error::from));
    drop(batch);
    // The instance is free again: the batcher may send it the next batch
    // while this one is answered, and a client's next request, sent on
    // this answer, finds the instance idle. A sequence batch keeps its
    // permit until its steps are answered: the sequence batcher then knows
    // which sequences will send their next step soon (`Strategy::Oldest`).
    let permit = match ctx.sequence {
        Some(_) => permit,
        None => {
            drop(permit);
            None
        }
    };
    let executed = Instant::now();
    let outputs = result
        .and_then(|outputs| scatter(&requests, outputs))
        .map(|per_row| match (&rows, ctx.sequence.as_deref()) {
            (Some((_, job_rows)), Some(setup)) => job_outputs(setup, &jobs, job_rows, per_row),
            _ => per_row,
        });
    let times = ComputeTimes {
        input: gathered - started,
        infer: executed - gathered,
        output: executed.elapsed(),
    };
    let stamps = ComputeStamps {
        started,
        inputs_ready: gathered,
        executed,
    };
    match outputs {
        Ok(per_request) => {
            record_execution(ctx, &jobs, times);
            for (job, outputs) in jobs.into_iter().zip(per_request) {
                answer(ctx, job, Ok(outputs), stamps, times);
            }
        }
        Err(e) => {
            tracing::warn!(model = %ctx.model_name, version = ctx.version, error = %e, "execution failed");
            for job in jobs {
                stamps.record(&job, &[]);
                if !job.detached {
                    ctx.stats
                        .record_failure_for(job.enqueued.elapsed(), FailureReason::Backend);
                }
                job.answer(Err(e.clone()));
            }
        }
    }
    drop(permit);
    outcome
}

/// The rows of a sequence batch: each job's step (controls and state
/// added) at its slot's row, and an idle row (READY false) for each slot
/// without a request; with the row of each job.
fn sequence_rows(setup: &SequenceSetup, jobs: &[Job]) -> (Vec<ValidatedRequest>, Vec<usize>) {
    let rows = jobs
        .iter()
        .filter_map(|j| j.sequence.as_ref()?.placement.as_ref())
        .map(|p| p.rows.max(p.row + 1))
        .max()
        .unwrap_or(0);
    let mut slots: Vec<Option<ValidatedRequest>> = vec![None; rows];
    let mut job_rows = Vec::with_capacity(jobs.len());
    for job in jobs {
        let Some(step) = &job.sequence else {
            // Never sent without a sequence; run it as a row of its own.
            job_rows.push(slots.len());
            slots.push(Some(job.request.clone()));
            continue;
        };
        let row = step.placement.as_ref().map_or(slots.len(), |p| p.row);
        if row >= slots.len() {
            slots.resize(row + 1, None);
        }
        slots[row] = Some(setup.step_row(&job.request, step));
        job_rows.push(row);
    }
    let like = &jobs[0].request;
    let rows = slots
        .into_iter()
        .map(|slot| slot.unwrap_or_else(|| setup.idle_row(like)))
        .collect();
    (rows, job_rows)
}

/// Each job's outputs from the outputs per row, the state outputs kept for
/// the sequence's next step.
fn job_outputs(
    setup: &SequenceSetup,
    jobs: &[Job],
    job_rows: &[usize],
    per_row: Vec<Vec<Tensor>>,
) -> Vec<Vec<Tensor>> {
    let mut per_row: Vec<Option<Vec<Tensor>>> = per_row.into_iter().map(Some).collect();
    jobs.iter()
        .zip(job_rows)
        .map(|(job, &row)| {
            let outputs = per_row
                .get_mut(row)
                .and_then(Option::take)
                .unwrap_or_default();
            match &job.sequence {
                Some(step) => setup.keep_state(step, outputs),
                None => outputs,
            }
        })
        .collect()
}
