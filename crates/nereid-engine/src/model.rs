//! A loaded model version: its config, its instance workers behind a
//! scheduler, its statistics. Dropping the last handle closes the queue; the
//! workers finish what was queued, then drop their instances.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use nereid_core::model_config::ModelConfig;
use nereid_core::model_config::model_instance_group::Kind;
use nereid_core::{Backend, Device, Error, ErrorKind, InferRequest, InferResponse, ModelSource};
use tokio::sync::oneshot;

use nereid_ensemble::{Composer, Pipeline};
use nereid_scheduler::{BatcherConfig, ResponseOrder};

use crate::scheduler::job::Job;
use crate::scheduler::{BatchingScheduler, DirectScheduler, Scheduler};
use crate::stats::{ComputeTimes, FailureReason, ModelStats};
use crate::validate::validate;
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
        start_workers(backend, sources, ctx, &queue_rx)?;
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
            runner: Runner::Instances { scheduler, order },
        })
    }

    /// An ensemble's version: it has no instances of its own; its steps
    /// reach the models they name through `composer`.
    pub fn ensemble(
        config: Arc<ModelConfig>,
        version: i64,
        composer: Arc<dyn Composer>,
    ) -> LoadedVersion {
        let pipeline = Pipeline::new(&config, version);
        let models = pipeline.models().map(|(m, v)| (m.to_string(), v)).collect();
        LoadedVersion {
            version,
            config,
            stats: Arc::new(ModelStats::default()),
            failure: Arc::default(),
            runner: Runner::Ensemble {
                pipeline,
                composer,
                models,
            },
        }
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
    /// returned future abandons the request: a worker skips it.
    pub async fn infer(&self, request: InferRequest) -> Result<InferResponse, Error> {
        let enqueued = Instant::now();
        let request = match validate(&self.config, request) {
            Ok(r) => r,
            Err(e) => {
                self.stats.record_failure(enqueued.elapsed());
                return Err(e);
            }
        };
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
