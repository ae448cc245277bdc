//! A loaded model version: its config, its instance workers behind a
//! scheduler, its statistics. Dropping the last handle closes the queue; the
//! workers finish what was queued, then drop their instances.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use nereid_core::model_config::ModelConfig;
use nereid_core::{Activity, Error, ErrorKind, InferRequest, InferResponse, TensorActivity};
use tokio::sync::{mpsc, oneshot};

use nereid_ensemble::{Composer, Pipeline};
use nereid_scheduler::{ResponseOrder, Scheduler};

use crate::cache::{CacheScope, ResponseCache};
use crate::classify::{self, Labels};
use crate::job::{Job, Reply, Streamed};
use crate::sequence::SequenceSetup;
use crate::stats::{ComputeTimes, FailureReason, ModelStats};
use crate::validate::validate;

/// Requests each instance may have queued before new ones are refused.
mod load;

const QUEUE_PER_INSTANCE: usize = 1024;

/// One ready version of a model.
#[derive(Debug)]
pub struct LoadedVersion {
    pub version: i64,
    pub config: Arc<ModelConfig>,
    pub stats: Arc<ModelStats>,
    /// Set when an instance can serve no more (see `ModelInstance::failure`).
    failure: Arc<OnceLock<String>>,
    /// Class labels of the outputs, for classification.
    labels: Labels,
    /// This version's part of the response cache, when its config enables
    /// it and the server has one.
    cache: Option<CacheScope>,
    /// The model's folder (a cloud repository's local copy), whose own
    /// files a frontend may read ([`crate::Engine::model_file`]).
    pub folder: std::path::PathBuf,
    /// Where the files its model's format carries inside itself are read
    /// (see `Backend::embedded_file`); `None` for an ensemble.
    pub(crate) embedded: Option<Embedded>,
    /// What it holds, when it last ran, whether it may be evicted.
    pub(crate) footprint: Arc<crate::footprint::Footprint>,
    runner: Runner,
}

/// A loaded model file and the backend that reads what it carries.
#[derive(Clone)]
pub(crate) struct Embedded {
    pub backend: Arc<dyn nereid_core::Backend>,
    pub model_path: std::path::PathBuf,
}

impl std::fmt::Debug for Embedded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedded")
            .field("backend", &self.backend.name())
            .field("model_path", &self.model_path)
            .finish()
    }
}

impl nereid_traffic::Served for LoadedVersion {
    fn version(&self) -> i64 {
        self.version
    }

    fn queued(&self) -> (u64, u64) {
        let queue = self.stats.queue_time();
        (queue.count, queue.ns)
    }

    fn pending(&self) -> u64 {
        self.stats.pending()
    }

    fn infer(
        &self,
        request: InferRequest,
    ) -> futures::future::BoxFuture<'_, Result<InferResponse, Error>> {
        Box::pin(LoadedVersion::infer(self, request))
    }
}

/// What runs a version's requests.
enum Runner {
    /// Its own instances, behind a scheduler.
    Instances {
        scheduler: Box<dyn Scheduler<Job>>,
        /// Set when the config asks to `preserve_ordering`.
        order: Option<ResponseOrder>,
        /// Set for a model with `sequence_batching`.
        sequence: Option<Arc<SequenceSetup>>,
    },
    /// An ensemble's steps, each through its model's own scheduler.
    Ensemble {
        pipeline: Pipeline,
        composer: Arc<dyn Composer>,
        /// The models the steps use, for readiness.
        models: Vec<(String, Option<i64>)>,
    },
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Runner::Instances { scheduler, .. } => {
                f.debug_tuple("Instances").field(scheduler).finish()
            }
            Runner::Ensemble { pipeline, .. } => f.debug_tuple("Ensemble").field(pipeline).finish(),
        }
    }
}

impl LoadedVersion {
    /// Why the version can serve no more, once one of its instances said
    /// so; the registry then shows it UNAVAILABLE with this reason.
    pub fn failure(&self) -> Option<&str> {
        self.failure.get().map(String::as_str)
    }

    /// What the dynamic batcher chose and learnt, for a model batching to
    /// a latency target (`nereid.latency_target_ms`); `None` otherwise.
    pub fn latency_target(&self) -> Option<nereid_scheduler::TargetSnapshot> {
        match &self.runner {
            Runner::Instances { scheduler, .. } => scheduler.latency_target(),
            Runner::Ensemble { .. } => None,
        }
    }

    /// The models an ensemble's steps use; `None` for any other model.
    pub fn composing_models(&self) -> Option<&[(String, Option<i64>)]> {
        match &self.runner {
            Runner::Ensemble { models, .. } => Some(models),
            Runner::Instances { .. } => None,
        }
    }

    /// Whether the model answers through a stream of responses
    /// (`model_transaction_policy { decoupled: true }`, or an ensemble with
    /// a decoupled step).
    pub fn is_decoupled(&self) -> bool {
        self.config
            .model_transaction_policy
            .is_some_and(|p| p.decoupled)
    }

    /// Validates `request`, queues it and waits for its answer. Dropping the
    /// returned future abandons the request: a worker skips it. A traced
    /// request records its start, its inputs and its end here. A decoupled
    /// model's requests go through [`LoadedVersion::stream`].
    pub async fn infer(&self, request: InferRequest) -> Result<InferResponse, Error> {
        if self.is_decoupled() {
            self.stats.record_failure(Duration::ZERO);
            return Err(Error::unsupported(format!(
                "model '{}' is decoupled: its responses come as a stream (gRPC ModelStreamInfer, or HTTP generate_stream), not as one answer",
                self.config.name
            )));
        }
        let _active = self.footprint.enter();
        let Some(trace) = request.trace.clone() else {
            return self.serve(request).await;
        };
        trace.set_model(&self.config.name, self.version, &request.id);
        trace.record(Activity::RequestStart);
        for input in &request.inputs {
            trace.record_tensor(
                TensorActivity::QueueInput,
                &input.name,
                input.datatype,
                &input.shape,
                &input.data,
            );
        }
        let result = self.serve(request).await;
        trace.record(Activity::RequestEnd);
        result
    }

    async fn serve(&self, request: InferRequest) -> Result<InferResponse, Error> {
        let enqueued = Instant::now();
        let checked = classify::requested(&request)
            .and_then(|classes| Ok((validate(&self.config, request)?, classes)));
        let (request, classes) = match checked {
            Ok(checked) => checked,
            Err(e) => {
                self.stats.record_failure(enqueued.elapsed());
                return Err(e);
            }
        };
        let Some(cache) = &self.cache else {
            return self.run_and_classify(request, &classes, enqueued).await;
        };
        let lookup = Instant::now();
        let key = cache.key(&request.request);
        if let Some(mut response) = cache.get(&key).await {
            response.id.clone_from(&request.request.id);
            self.stats
                .record_cache_hit(enqueued.elapsed(), lookup.elapsed());
            return Ok(response);
        }
        let missed = lookup.elapsed();
        let response = self.run_and_classify(request, &classes, enqueued).await?;
        let insert = Instant::now();
        cache.insert(key, &response).await;
        self.stats.record_cache_miss(missed + insert.elapsed());
        Ok(response)
    }

    /// Turns on the response cache for this version (see the `nereid-cache` crate).
    pub(crate) fn with_cache(mut self, cache: &ResponseCache) -> LoadedVersion {
        self.cache = Some(cache.scope(&self.config.name, self.version));
        self
    }

    async fn run_and_classify(
        &self,
        request: crate::ValidatedRequest,
        classes: &[(String, usize)],
        enqueued: Instant,
    ) -> Result<InferResponse, Error> {
        let mut response = self.run(request, enqueued).await?;
        if !classes.is_empty() {
            let batching = self.config.max_batch_size > 0;
            classify::apply(&mut response, classes, &self.labels, batching)?;
        }
        Ok(response)
    }

    /// Validates `request` for a decoupled model and queues it; its
    /// responses arrive on the returned channel as the model sends them,
    /// the last one marked. Dropping the channel abandons the request: the
    /// model sees it cancelled.
    pub fn stream(
        &self,
        request: InferRequest,
    ) -> Result<mpsc::UnboundedReceiver<Streamed>, Error> {
        // A stream counts as use when it starts; it is not held in flight
        // (an unload lets its requests finish anyway).
        drop(self.footprint.enter());
        let enqueued = Instant::now();
        if let Some(trace) = &request.trace {
            trace.set_model(&self.config.name, self.version, &request.id);
            trace.record(Activity::RequestStart);
        }
        let checked = classify::requested(&request).and_then(|classes| {
            if classes.is_empty() {
                validate(&self.config, request)
            } else {
                Err(Error::invalid_argument(format!(
                    "classification is not supported for the responses of decoupled model '{}'",
                    self.config.name
                )))
            }
        });
        let request = checked.inspect_err(|_| self.stats.record_failure(enqueued.elapsed()))?;
        let (reply, responses) = mpsc::unbounded_channel();
        if let Runner::Ensemble {
            pipeline, composer, ..
        } = &self.runner
        {
            self.stream_ensemble(
                pipeline.clone(),
                Arc::clone(composer),
                request,
                reply,
                enqueued,
            );
            return Ok(responses);
        }
        self.submit(request, Reply::Stream(reply), enqueued)?;
        Ok(responses)
    }

    /// Runs a decoupled ensemble's request in a task of its own, its
    /// responses to `reply`, then the final flag; the task stops when the
    /// receiver goes. Counted as one execution, as [`Self::run_ensemble`].
    fn stream_ensemble(
        &self,
        pipeline: Pipeline,
        composer: Arc<dyn Composer>,
        request: crate::ValidatedRequest,
        reply: mpsc::UnboundedSender<Streamed>,
        enqueued: Instant,
    ) {
        let stats = Arc::clone(&self.stats);
        let batch_size = request.batch_size;
        tokio::spawn(async move {
            let mut ended = false;
            let mut emit = |response, last| {
                ended |= last;
                let _ = reply.send(Streamed {
                    response: Some(response),
                    last,
                });
            };
            let run = pipeline.run_stream(request.request, composer.as_ref(), &mut emit);
            let result = tokio::select! {
                result = run => result,
                () = reply.closed() => return,
            };
            let last = match result {
                Ok(()) => {
                    let compute = ComputeTimes::default();
                    stats.record_execution(batch_size, compute);
                    stats.record_success(enqueued.elapsed(), Duration::ZERO, compute);
                    None
                }
                Err(e) => {
                    stats.record_failure(enqueued.elapsed());
                    Some(Err(e))
                }
            };
            // The final flag, unless it went with the last response.
            if !ended || last.is_some() {
                let _ = reply.send(Streamed {
                    response: last,
                    last: true,
                });
            }
        });
    }

    async fn run(
        &self,
        request: crate::ValidatedRequest,
        enqueued: Instant,
    ) -> Result<InferResponse, Error> {
        if let Runner::Ensemble {
            pipeline, composer, ..
        } = &self.runner
        {
            return self
                .run_ensemble(pipeline, composer.as_ref(), request, enqueued)
                .await;
        }
        let (reply, answer) = oneshot::channel();
        self.submit(request, Reply::Once(reply), enqueued)?;
        answer.await.map_err(|_| {
            Error::internal(format!("model '{}' dropped the request", self.config.name))
        })?
    }

    /// Queues `request` on the version's instances, its answer to `reply`.
    fn submit(
        &self,
        request: crate::ValidatedRequest,
        reply: Reply,
        enqueued: Instant,
    ) -> Result<(), Error> {
        let (scheduler, order, sequence) = match &self.runner {
            Runner::Instances {
                scheduler,
                order,
                sequence,
            } => (scheduler, order, sequence),
            Runner::Ensemble { .. } => {
                return Err(Error::internal(format!(
                    "ensemble '{}' has no queue of its own",
                    self.config.name
                )));
            }
        };
        if let Some(trace) = &request.request.trace {
            trace.record(Activity::QueueStart);
        }
        let ticket = order.as_ref().map(ResponseOrder::ticket);
        let steps = sequence
            .as_ref()
            .map(|setup| setup.request_of(&request))
            .transpose();
        let submitted = steps.and_then(|step| {
            let mut job = Job::new(request, reply, Arc::clone(&self.stats), ticket)?;
            job.sequence = step;
            scheduler.submit(job)
        });
        if let Err(e) = submitted {
            let reason = match e.kind() {
                ErrorKind::Unavailable => FailureReason::Rejected,
                _ => FailureReason::Other,
            };
            self.stats.record_failure_for(enqueued.elapsed(), reason);
            return Err(e);
        }
        Ok(())
    }
}

impl LoadedVersion {
    /// Runs the ensemble's steps. Its statistics count the request once,
    /// as one execution of its batch size; the composing models count
    /// their own executions.
    async fn run_ensemble(
        &self,
        pipeline: &Pipeline,
        composer: &dyn Composer,
        request: crate::ValidatedRequest,
        enqueued: Instant,
    ) -> Result<InferResponse, Error> {
        let batch_size = request.batch_size;
        if let Some(trace) = &request.request.trace {
            trace.record(Activity::QueueStart);
        }
        let result = pipeline.run(request.request, composer).await;
        match &result {
            Ok(_) => {
                let compute = ComputeTimes::default();
                self.stats.record_execution(batch_size, compute);
                self.stats
                    .record_success(enqueued.elapsed(), Duration::ZERO, compute);
            }
            Err(_) => self.stats.record_failure(enqueued.elapsed()),
        }
        result
    }
}
