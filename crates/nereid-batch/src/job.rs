//! A job's run: what the output already holds, the records after it sent
//! to the engine (several to a request where the input allows) with a
//! bounded number in flight, results written one per record in input order
//! and committed as they go.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use futures::StreamExt;
use futures::stream::FuturesOrdered;
use nereid_core::model_config::ModelConfig;
use nereid_core::model_config::model_config::SchedulingChoice;
use nereid_core::{InferResponse, ModelVersion};
use nereid_engine::{Answer, Call, Engine};

use crate::BatchError;
use crate::format::Format;
use crate::progress::Progress;
use crate::read::{self, Group, InputFiles, Reading, Record, Source};
use crate::spec::ModelSpec;
use crate::split;
use crate::write::{self, CommitPolicy, Recovered, Sink};

/// What to run, on what, into what.
#[derive(Debug, Clone)]
pub struct Job {
    pub model: String,
    /// A number, a label, or `Latest`: the version the model's policy
    /// serves (the highest).
    pub version: ModelVersion,
    pub input: InputFiles,
    /// `None`: told from the input's name.
    pub input_format: Option<Format>,
    pub output: PathBuf,
    /// `None`: told from the output's name, else the input's format.
    pub output_format: Option<Format>,
    /// Records in flight at once; `None`: four times the model's
    /// `max_batch_size` (at least 64).
    pub concurrency: Option<usize>,
    /// Records in one request at most (Parquet, Arrow and `.npy` inputs of
    /// a model that batches), and at most `concurrency`; `None`: a quarter
    /// of the model's `max_batch_size` with a dynamic batcher, all of it
    /// without.
    pub group_rows: Option<usize>,
    /// Start over, discarding what the output holds.
    pub overwrite: bool,
    /// Draw the progress bar.
    pub progress: bool,
    pub commit: CommitPolicy,
    /// Records read from the input at a time.
    pub chunk_rows: usize,
}

/// How a job went.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Records in the input.
    pub total: u64,
    /// Records in the output (all of them unless interrupted).
    pub written: u64,
    /// Failed records in the output, those of earlier runs included.
    pub failures: u64,
    /// Records the output held before this run.
    pub resumed_from: u64,
    /// Records this run processed.
    pub processed: u64,
    pub seconds: f64,
    /// Stopped by a signal before every record was done.
    pub interrupted: bool,
    /// The output was already complete: nothing ran.
    pub already_done: bool,
    pub output_format: Format,
}

impl Summary {
    /// The line printed at the end, whether or not the bar was drawn.
    pub fn line(&self) -> String {
        if self.already_done {
            return format!(
                "nereid batch: nothing to do: the output already holds all {} records ({} failed)",
                self.total, self.failures
            );
        }
        let rate = if self.seconds > 0.0 {
            self.processed as f64 / self.seconds
        } else {
            0.0
        };
        let mut line = format!(
            "nereid batch: {} records ({} failed) in {:.1} s, {:.0} records/s",
            self.processed, self.failures, self.seconds, rate
        );
        if self.resumed_from > 0 {
            line.push_str(&format!(
                "; resumed after {} records already in the output",
                self.resumed_from
            ));
        }
        if self.interrupted {
            line.push_str(&format!(
                "; interrupted with {} of {} records written: run the same command again to resume",
                self.written, self.total
            ));
        }
        line
    }
}

/// Runs `job` on `engine`, whose model must be loaded. `stop` set (by a
/// signal) ends the run early: records in flight are written and committed
/// and the job can resume later.
pub async fn run(engine: &Engine, job: &Job, stop: Arc<AtomicBool>) -> Result<Summary, BatchError> {
    let started = Instant::now();
    let input_format = match (&job.input_format, &job.input) {
        (Some(format), _) => *format,
        (None, InputFiles::Named(_)) => Format::Npy,
        (None, InputFiles::Path(path)) => Format::of_path(path)?,
    };
    let output_format = match job.output_format {
        Some(format) => format,
        None => Format::of_path(&job.output)
            .ok()
            .filter(|_| job.output.extension().is_some())
            .unwrap_or(input_format),
    };
    let config = model_config(engine, job)?;
    let model = ModelSpec::from_config(&config, job.version.clone())?;
    write::check_outputs(output_format, &model)?;
    if job.overwrite {
        write::remove(&job.output)?;
    }
    let recovered = write::recover(&job.output, output_format)?;
    let concurrency = job
        .concurrency
        .unwrap_or_else(|| (4 * model.max_batch_size).max(64));
    let reading = Reading {
        start: recovered.records,
        chunk_rows: job.chunk_rows,
        group_rows: job
            .group_rows
            .unwrap_or_else(|| group_rows(&config))
            .clamp(1, concurrency),
    };
    let mut source = read::open(&job.input, input_format, &model, reading)?;
    let total = source.total();
    let summary = |progress: &Progress, interrupted, already_done| Summary {
        total,
        written: progress.done(),
        failures: progress.failures(),
        resumed_from: recovered.records,
        processed: progress.done() - recovered.records,
        seconds: started.elapsed().as_secs_f64(),
        interrupted,
        already_done,
        output_format,
    };
    check_recovered(job, recovered, total)?;
    let mut sink = write::open(&job.output, output_format, &model, recovered, job.commit)?;
    if recovered.records == total {
        // Everything is in: a finished output, or parts not yet made into
        // one (a job cut off while finishing).
        if !recovered.finished {
            sink.finish()?;
        }
        let progress = Progress::new(total, total, recovered.failures, false);
        return Ok(summary(&progress, false, true));
    }
    let mut progress = Progress::new(total, recovered.records, recovered.failures, job.progress);
    let flow = Flow {
        engine,
        concurrency,
        stop: &stop,
    };
    flow.drive(source.as_mut(), sink.as_mut(), &mut progress)
        .await?;
    progress.close();
    if progress.done() < total {
        sink.commit()?;
        return Ok(summary(&progress, true, false));
    }
    sink.finish()?;
    Ok(summary(&progress, false, false))
}

/// Records per request for a model that batches. With a dynamic batcher,
/// a quarter of `max_batch_size`: the engine's cost per request is then
/// shared by many records, while the batcher still makes full batches of
/// several requests (and of the shorter ones a null or an odd row leaves).
/// Without one each request runs alone, so it is a whole batch. A model
/// that does not batch has no batch dimension to put rows on.
fn group_rows(config: &ModelConfig) -> usize {
    let most = usize::try_from(config.max_batch_size).unwrap_or(0).max(1);
    match config.scheduling_choice {
        Some(SchedulingChoice::DynamicBatching(_)) => (most / 4).max(1),
        _ => most,
    }
}

/// How records flow from a source through the engine to a sink.
struct Flow<'a> {
    engine: &'a Engine,
    /// Records in flight at most (a request of more goes only alone).
    concurrency: usize,
    /// Set: no more records are sent; those in flight are written.
    stop: &'a AtomicBool,
}

impl Flow<'_> {
    /// Sends records until the source ends or `stop` is set, writing each
    /// result in input order and committing when the sink asks.
    async fn drive(
        &self,
        source: &mut dyn Source,
        sink: &mut dyn Sink,
        progress: &mut Progress,
    ) -> Result<(), BatchError> {
        let mut pending = FuturesOrdered::new();
        let mut buffered: VecDeque<Group> = VecDeque::new();
        let mut in_flight = 0;
        let mut exhausted = false;
        loop {
            while !exhausted && !self.stop.load(Ordering::Relaxed) {
                let Some(rows) = buffered.front().map(|g| g.rows) else {
                    match source.next_chunk()? {
                        Some(chunk) => buffered.extend(chunk),
                        None => exhausted = true,
                    }
                    continue;
                };
                if in_flight > 0 && in_flight + rows > self.concurrency {
                    break;
                }
                if let Some(group) = buffered.pop_front() {
                    in_flight += group.rows;
                    pending.push_back(infer_group(self.engine.clone(), group));
                }
            }
            let Some(results) = pending.next().await else {
                return Ok(());
            };
            in_flight -= results.len();
            for result in results {
                progress.record(sink.write(result)?);
                if sink.wants_commit() {
                    sink.commit()?;
                }
            }
        }
    }
}

/// One result per record of `group`, in order. A request of several rows
/// that fails as a whole (or whose answer does not cut into its rows) has
/// its rows run again one at a time, so that only the rows that fail are
/// failures, each with its own error.
async fn infer_group(engine: Engine, group: Group) -> Vec<Result<InferResponse, String>> {
    let rows = group.rows;
    let request = match group.request {
        Ok(request) if rows > 1 => request,
        alone => return vec![infer(&engine, alone).await],
    };
    let whole = infer(&engine, Ok(request.clone()))
        .await
        .and_then(|response| split::response(response, rows));
    let failure = match whole {
        Ok(responses) => return responses.into_iter().map(Ok).collect(),
        Err(failure) => failure,
    };
    let Ok(singles) = split::request(request, rows) else {
        return vec![Err(failure); rows];
    };
    let mut results = Vec::with_capacity(rows);
    for single in singles {
        results.push(infer(&engine, Ok(single)).await);
    }
    results
}

async fn infer(engine: &Engine, record: Record) -> Result<InferResponse, String> {
    engine
        .infer(record?, Call::one())
        .await
        .and_then(Answer::one)
        .map_err(|e| e.message().to_string())
}

/// The config of the job's model, which must answer each request once.
fn model_config(engine: &Engine, job: &Job) -> Result<Arc<ModelConfig>, BatchError> {
    let loaded = engine
        .version_number(&job.model, &job.version)
        .and_then(|version| engine.model(&job.model, version))
        .map_err(|e| BatchError::Model(e.message().to_string()))?;
    if loaded.is_decoupled() {
        return Err(BatchError::Model(format!(
            "model '{}' is decoupled (it may answer a request with any number of responses); \
             nereid batch runs models that answer each request once",
            job.model
        )));
    }
    Ok(Arc::clone(&loaded.config))
}

/// Refuses an output that cannot be this job's.
fn check_recovered(job: &Job, recovered: Recovered, total: u64) -> Result<(), BatchError> {
    let other = |what: String| {
        BatchError::output(
            &job.output,
            format!("{what}: it is not this job's output; remove it or pass --overwrite"),
        )
    };
    if recovered.records > total {
        return Err(other(format!(
            "holds {} records, more than the {total} of the input",
            recovered.records
        )));
    }
    if recovered.finished && recovered.records != total {
        return Err(other(format!(
            "is a finished output of {} records, the input has {total}",
            recovered.records
        )));
    }
    Ok(())
}

#[cfg(test)]
#[path = "job_tests.rs"]
mod tests;
