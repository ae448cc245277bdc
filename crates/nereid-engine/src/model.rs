//! A loaded model version: its config, its instance workers behind a
//! scheduler, its statistics. Dropping the last handle closes the queue; the
//! workers finish what was queued, then drop their instances.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use nereid_core::model_config::ModelConfig;
use nereid_core::model_config::model_instance_group::Kind;
use nereid_core::{
    Activity, Backend, Device, Error, ErrorKind, InferRequest, InferResponse, ModelSource,
    TensorActivity,
};
use tokio::sync::oneshot;

use nereid_ensemble::{Composer, Pipeline};
use nereid_scheduler::{BatcherConfig, ResponseOrder};

use crate::cache::{CacheScope, ResponseCache};
use crate::classify::{self, Labels};
use crate::scheduler::job::Job;
use crate::scheduler::{BatchingScheduler, DirectScheduler, Scheduler};
use crate::stats::{ComputeTimes, FailureReason, ModelStats};
use crate::validate::validate;
use crate::warmup;
use crate::worker::{WorkerContext, start_workers};

/// Requests each instance may have queued before new ones are refused.
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
    runner: Runner,
}

/// What runs a version's requests.
enum Runner {
    /// Its own instances, behind a scheduler.
    Instances {
        scheduler: Box<dyn Scheduler>,
        /// Set when the config asks to `preserve_ordering`.
        order: Option<ResponseOrder>,
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
    /// Starts every configured instance of `version`; blocks until all are
    /// loaded or one fails. A model with `dynamic_batching` gets a batcher.
    pub fn load(
        backend: &Arc<dyn Backend>,
        config: Arc<ModelConfig>,
        version: i64,
        model_path: std::path::PathBuf,
    ) -> Result<LoadedVersion, Error> {
        let batching = BatcherConfig::from_model_config(&config)
            .map_err(|e| Error::invalid_argument(e.to_string()))?;
        let model_dir = model_dir(&model_path, 2);
        let labels = Labels::load(&config, model_dir)?;
        let warmup = warmup::samples(&config, model_dir)?;
        let sources = instance_sources(&config, version, &model_path)?;
        let instances = sources.len();
        let (queue_tx, queue_rx) = crossbeam_channel::bounded(QUEUE_PER_INSTANCE * instances);
        let stats = Arc::new(ModelStats::default());
        let failure = Arc::new(OnceLock::new());
        let ctx = Arc::new(WorkerContext {
            model_name: config.name.clone(),
            version,
            batching: config.max_batch_size > 0,
            stats: Arc::clone(&stats),
            failure: Arc::clone(&failure),
        });
        start_workers(backend, sources, ctx, warmup, &queue_rx)?;
        let order = batching
            .as_ref()
            .filter(|b| b.preserve_ordering)
            .map(|_| ResponseOrder::default());
        let scheduler: Box<dyn Scheduler> = match batching {
            Some(batcher) => {
                let handle = nereid_scheduler::spawn(batcher, instances, queue_tx)?;
                Box::new(BatchingScheduler::new(handle))
            }
            None => Box::new(DirectScheduler::new(config.name.clone(), queue_tx)),
        };
        Ok(LoadedVersion {
            version,
            config,
            stats,
            failure,
            labels,
            cache: None,
            runner: Runner::Instances { scheduler, order },
        })
    }

    /// An ensemble's version: it has no instances of its own; its steps
    /// reach the models they name through `composer`.
    pub fn ensemble(
        config: Arc<ModelConfig>,
        version: i64,
        version_dir: &std::path::Path,
        composer: Arc<dyn Composer>,
    ) -> Result<LoadedVersion, Error> {
        let labels = Labels::load(&config, model_dir(version_dir, 1))?;
        let pipeline = Pipeline::new(&config, version);
        let models = pipeline.models().map(|(m, v)| (m.to_string(), v)).collect();
        Ok(LoadedVersion {
            version,
            config,
            stats: Arc::new(ModelStats::default()),
            failure: Arc::default(),
            labels,
            cache: None,
            runner: Runner::Ensemble {
                pipeline,
                composer,
                models,
            },
        })
    }

    /// Why the version can serve no more, once one of its instances said
    /// so; the registry then shows it UNAVAILABLE with this reason.
    pub fn failure(&self) -> Option<&str> {
        self.failure.get().map(String::as_str)
    }

    /// The models an ensemble's steps use; `None` for any other model.
    pub fn composing_models(&self) -> Option<&[(String, Option<i64>)]> {
        match &self.runner {
            Runner::Ensemble { models, .. } => Some(models),
            Runner::Instances { .. } => None,
        }
    }

    /// Validates `request`, queues it and waits for its answer. Dropping the
    /// returned future abandons the request: a worker skips it. A traced
    /// request records its start, its inputs and its end here.
    pub async fn infer(&self, request: InferRequest) -> Result<InferResponse, Error> {
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
        if let Some(hit) = cache.get(&key) {
            let mut response = InferResponse::clone(&hit);
            response.id.clone_from(&request.request.id);
            self.stats
                .record_cache_hit(enqueued.elapsed(), lookup.elapsed());
            return Ok(response);
        }
        let missed = lookup.elapsed();
        let response = self.run_and_classify(request, &classes, enqueued).await?;
        let insert = Instant::now();
        cache.insert(key, response.clone());
        self.stats.record_cache_miss(missed + insert.elapsed());
        Ok(response)
    }

    /// Turns on the response cache for this version (see `cache.rs`).
    pub(crate) fn with_cache(mut self, cache: &ResponseCache) -> LoadedVersion {
        self.cache = Some(cache.scope());
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

    async fn run(
        &self,
        request: crate::ValidatedRequest,
        enqueued: Instant,
    ) -> Result<InferResponse, Error> {
        let (scheduler, order) = match &self.runner {
            Runner::Instances { scheduler, order } => (scheduler, order),
            Runner::Ensemble {
                pipeline, composer, ..
            } => {
                return self
                    .run_ensemble(pipeline, composer.as_ref(), request, enqueued)
                    .await;
            }
        };
        if let Some(trace) = &request.request.trace {
            trace.record(Activity::QueueStart);
        }
        let (reply, answer) = oneshot::channel();
        let ticket = order.as_ref().map(ResponseOrder::ticket);
        let submitted = Job::new(request, reply, Arc::clone(&self.stats), ticket)
            .and_then(|job| scheduler.submit(job));
        if let Err(e) = submitted {
            let reason = match e.kind() {
                ErrorKind::Unavailable => FailureReason::Rejected,
                _ => FailureReason::Other,
            };
            self.stats.record_failure_for(enqueued.elapsed(), reason);
            return Err(e);
        }
        answer.await.map_err(|_| {
            Error::internal(format!("model '{}' dropped the request", self.config.name))
        })?
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

/// One `ModelSource` per instance the config's instance groups ask for.
fn instance_sources(
    config: &ModelConfig,
    version: i64,
    model_path: &std::path::Path,
) -> Result<Vec<ModelSource>, Error> {
    let mut devices = Vec::new();
    for group in &config.instance_group {
        let count = usize::try_from(group.count.max(1)).unwrap_or(1);
        match group.kind() {
            Kind::Gpu => {
                if group.gpus.is_empty() {
                    return Err(Error::invalid_argument(format!(
                        "instance group '{}' of model '{}' asks for KIND_GPU but no GPU is available",
                        group.name, config.name
                    )));
                }
                for &gpu in &group.gpus {
                    let gpu = u32::try_from(gpu).unwrap_or(0);
                    devices.extend(std::iter::repeat_n(Device::Gpu(gpu), count));
                }
            }
            Kind::Cpu | Kind::Auto | Kind::Model => {
                devices.extend(std::iter::repeat_n(Device::Cpu, count))
            }
        }
    }
    if devices.is_empty() {
        devices.push(Device::Cpu);
    }
    Ok(devices
        .into_iter()
        .enumerate()
        .map(|(instance_index, device)| ModelSource {
            model_name: config.name.clone(),
            version,
            model_path: model_path.to_path_buf(),
            config: config.clone(),
            device,
            instance_index,
        })
        .collect())
}

/// The model's folder: `levels` up from a version's model file (2) or
/// version folder (1). Labels and warmup files are named relative to it.
fn model_dir(path: &std::path::Path, levels: usize) -> &std::path::Path {
    path.ancestors().nth(levels).unwrap_or(path)
}
