//! The model manager: finds models in the repository, loads each version's
//! instances through a backend, tracks their states, validates and
//! dispatches requests, keeps statistics and the system shared memory
//! regions clients register (inputs read from them, outputs written into
//! them, whichever frontend the request came by). Frontends use [`Engine`]
//! in-process without knowing which backend serves a model.
//!
//! This crate must not depend on a wire format (HTTP, gRPC, JSON) nor on a
//! concrete backend: backends are handed in as `Arc<dyn Backend>`.
//!
//! Model control follows tritonserver's modes (none, poll, explicit): a
//! (re)load never fails a request, because a changed version is loaded
//! beside the serving one and swapped in when ready.

mod batch;
mod classify;
mod ensemble;
mod job;
mod lifecycle;
mod memory;
mod metadata;
mod mirrors;
mod model;
mod options;
mod plan;
mod poll;
mod registry;
mod routing;
mod sequence;
pub mod shared_memory;
mod source;
pub mod stats;
#[cfg(test)]
mod test_support;
pub mod traffic;
pub mod turns;
mod validate;
mod warmup;
mod watcher;
mod worker;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

pub use nereid_cache as cache;
use nereid_core::custom_metrics::CustomMetrics;
use nereid_core::model_config::ModelConfig;
use nereid_core::{Backend, Error, InferRequest, InferResponse};
use nereid_repository::Repository;
use parking_lot::{Mutex, RwLock};
use tracing::Instrument;

pub use batch::split_rows;
pub use job::Streamed;
pub use metadata::{ModelMetadata, TensorMetadata};
pub use model::LoadedVersion;
pub use options::{ControlMode, EngineOptions, LoadFailure, LoadRequest, ModelControl};
pub use registry::{IndexEntry, ModelState};
pub use routing::TrafficView;
pub use source::check_load_request;
pub use validate::{ValidatedRequest, validate};

use registry::Registry;

/// A condition of readiness that a part of the server outside the engine
/// owns; see [`Engine::add_readiness_check`].
pub type ReadinessCheck = Arc<dyn Fn() -> bool + Send + Sync>;
use shared_memory::SharedMemoryRegistry;
use source::Source;
use stats::StatsSnapshot;

/// What Triton answers to a load or unload outside explicit model control.
const NOT_EXPLICIT: &str = "explicit model load / unload is not allowed if polling is enabled";

/// Statistics of one model version.
#[derive(Debug, Clone)]
pub struct VersionStatistics {
    pub name: String,
    pub version: i64,
    pub stats: StatsSnapshot,
}

/// The model manager. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    options: EngineOptions,
    control: ModelControl,
    repository: Repository,
    backends: Vec<Arc<dyn Backend>>,
    registry: RwLock<Registry>,
    /// One lock per model name: loads and unloads of a model never overlap.
    locks: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// Poll mode's repository watcher, once started.
    watcher: Mutex<Option<watcher::Watcher>>,
    janitor: memory::Janitor,
    /// The response cache, when the server has one.
    cache: Option<cache::ResponseCache>,
    /// Regions registered through the shared memory extension, by any frontend.
    shared_memory: SharedMemoryRegistry,
    /// Which models ensembles loaded or unloaded on their own account.
    links: Mutex<ensemble::Links>,
    started: AtomicBool,
    stopping: AtomicBool,
    /// Requests accepted by [`Engine::infer`] and not yet answered, and
    /// streams not yet ended.
    in_flight: Arc<AtomicUsize>,
    /// The families and metrics models create (Triton's custom metrics).
    custom_metrics: Arc<CustomMetrics>,
    /// Version labels, splits, shadows and fallbacks of the models.
    traffic: traffic::Traffic,
    /// Conditions other parts of the server add to readiness (a Kafka
    /// consumer that has not joined its group yet).
    readiness: RwLock<Vec<ReadinessCheck>>,
    /// The runtime the engine was made on, when there was one: repository
    /// loads and unloads run on its blocking pool, whichever runtime the
    /// request came in on (a connection thread's may stop first).
    runtime: Option<tokio::runtime::Handle>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// An engine that loads every model at startup and never changes them
    /// (model control mode `none`).
    pub fn new(options: EngineOptions, backends: Vec<Arc<dyn Backend>>) -> Engine {
        Engine::with_model_control(options, ModelControl::default(), backends)
    }

    pub fn with_model_control(
        options: EngineOptions,
        control: ModelControl,
        backends: Vec<Arc<dyn Backend>>,
    ) -> Engine {
        let repository = Repository::new(options.repositories.clone(), options.strict_model_config)
            .with_gpus(options.devices.gpu_ids());
        let cache = options
            .response_cache
            .as_ref()
            .map(cache::ResponseCache::new);
        let shared_memory = SharedMemoryRegistry::new(options.devices.clone());
        Engine {
            inner: Arc::new(Inner {
                options,
                control,
                repository,
                backends,
                registry: RwLock::new(Registry::default()),
                locks: Mutex::new(HashMap::new()),
                watcher: Mutex::new(None),
                janitor: memory::Janitor::start(),
                cache,
                shared_memory,
                links: Mutex::new(ensemble::Links::default()),
                runtime: tokio::runtime::Handle::try_current().ok(),
                started: AtomicBool::new(false),
                stopping: AtomicBool::new(false),
                in_flight: Arc::new(AtomicUsize::new(0)),
                custom_metrics: Arc::default(),
                traffic: traffic::Traffic::default(),
                readiness: RwLock::new(Vec::new()),
            }),
        }
    }

    pub fn control_mode(&self) -> ControlMode {
        self.inner.control.mode
    }

    /// Startup: loads the models the control mode asks for (every model,
    /// or in explicit mode the `startup_models`), in parallel, and blocks
    /// until each has loaded or failed. A failed model is recorded
    /// UNAVAILABLE with its reason and returned; the others serve. In poll
    /// mode the repository is followed from then on. Errs only if a
    /// repository folder itself cannot be read.
    pub fn load_all(&self) -> Result<Vec<LoadFailure>, Error> {
        let copy_failures = self.refresh_mirrors(self.startup_scope());
        let dirs = self
            .inner
            .repository
            .scan()
            .map_err(|e| Error::internal(format!("cannot read the model repository: {e}")))?;
        let (dirs, mut failures) = self.startup_selection(dirs);
        failures.retain(|f| !copy_failures.iter().any(|c| c.model == f.model));
        failures.extend(copy_failures);
        let applied: BTreeMap<String, u64> = dirs
            .iter()
            .filter_map(|d| Some((d.name.clone(), watcher::fingerprint_entry(d).ok()?)))
            .collect();
        failures.extend(self.load_many(dirs.into_iter().map(Source::repository).collect()));
        self.inner.started.store(true, Ordering::SeqCst);
        if self.control_mode() == ControlMode::Poll && !self.inner.stopping.load(Ordering::SeqCst) {
            *self.inner.watcher.lock() = watcher::start(&self.inner, applied);
        }
        Ok(failures)
    }

    /// The model folders to load at startup, and the startup models that
    /// are not in the repository.
    fn startup_selection(
        &self,
        dirs: Vec<nereid_repository::ModelEntry>,
    ) -> (Vec<nereid_repository::ModelEntry>, Vec<LoadFailure>) {
        let wanted = &self.inner.control.startup_models;
        if self.control_mode() != ControlMode::Explicit || wanted.iter().any(|m| m == "*") {
            return (dirs, Vec::new());
        }
        let missing = wanted
            .iter()
            .filter(|m| !dirs.iter().any(|d| &d.name == *m))
            .map(|m| {
                let reason =
                    format!("failed to poll model '{m}': model not found in any model repository");
                tracing::error!("{reason}");
                LoadFailure {
                    model: m.clone(),
                    reason,
                }
            })
            .collect();
        let dirs = dirs
            .into_iter()
            .filter(|d| wanted.contains(&d.name))
            .collect();
        (dirs, missing)
    }

    /// The repository API's load: loads `name` (again), from its folder or
    /// from the request's config and files. The new versions load beside
    /// the serving ones and replace them when ready; on failure the old
    /// ones keep serving. Only in explicit model control.
    pub async fn load_model(&self, name: &str, request: LoadRequest) -> Result<(), Error> {
        self.require_explicit()?;
        let engine = self.clone();
        let name = name.to_string();
        self.blocking(move || {
            let traffic = request.traffic.clone();
            if let Some(update) = &traffic
                && request.config.is_none()
                && request.files.is_empty()
                && engine.model(&name, None).is_ok()
            {
                return engine.update_traffic_now(&name, update).map(drop);
            }
            let found = engine.find_model(&name)?;
            let source = source::for_request(&name, request, found)?;
            // As Triton: an ensemble's composing models load with it.
            engine.load_composing(&source, &mut vec![name.clone()]);
            engine.inner.links.lock().loaded_explicitly(&name);
            engine.sync_model(source, true)?;
            engine.reload_forced_dependents(&name);
            if let Some(update) = &traffic {
                engine.update_traffic_now(&name, update)?;
            }
            Ok(())
        })
        .await
        .map_err(|e| Error::internal(format!("the load task failed: {e}")))?
    }

    /// The repository API's unload. Requests in flight finish first. As in
    /// Triton, the ensembles that use the model are unloaded with it (and
    /// come back when it loads again); with `unload_dependents`, the
    /// composing models an ensemble pulled in are unloaded with it too.
    pub async fn unload_model(&self, name: &str, unload_dependents: bool) -> Result<(), Error> {
        self.require_explicit()?;
        let engine = self.clone();
        let name = name.to_string();
        self.blocking(move || engine.unload_cascade(&name, unload_dependents))
            .await
            .map_err(|e| Error::internal(format!("the unload task failed: {e}")))
    }

    /// Runs `work` on the engine's runtime's blocking pool.
    fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> tokio::task::JoinHandle<T> {
        match &self.inner.runtime {
            Some(runtime) => runtime.spawn_blocking(work),
            None => tokio::task::spawn_blocking(work),
        }
    }

    fn require_explicit(&self) -> Result<(), Error> {
        if self.control_mode() == ControlMode::Explicit {
            Ok(())
        } else {
            Err(Error::unavailable(NOT_EXPLICIT))
        }
    }

    fn find_model(&self, name: &str) -> Result<Option<nereid_repository::ModelEntry>, Error> {
        self.refresh_for_load(name)?;
        let dirs = self
            .inner
            .repository
            .scan()
            .map_err(|e| Error::internal(format!("cannot read the model repository: {e}")))?;
        Ok(dirs.into_iter().find(|d| d.name == name))
    }

    /// The server process is up and not shutting down.
    pub fn is_live(&self) -> bool {
        !self.inner.stopping.load(Ordering::SeqCst)
    }

    /// Startup has finished, the server is not shutting down and, with
    /// strict readiness, every model is ready.
    pub fn is_ready(&self) -> bool {
        let started = self.inner.started.load(Ordering::SeqCst)
            && !self.inner.stopping.load(Ordering::SeqCst);
        let models = !self.inner.options.strict_readiness || self.inner.registry.read().all_ready();
        // Apart from the registry's guard above: a check may read the
        // registry itself.
        started && models && self.inner.readiness.read().iter().all(|check| check())
    }

    /// Adds a condition to [`Engine::is_ready`]: the server is ready only
    /// while `check` answers true too. HTTP's and gRPC's readiness follow.
    pub fn add_readiness_check(&self, check: ReadinessCheck) {
        self.inner.readiness.write().push(check);
    }

    /// Marks the server as shutting down: readiness turns false and the
    /// repository is no longer followed.
    /// Requests accepted and not yet answered (BLS calls included).
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.load(Ordering::SeqCst)
    }

    pub fn begin_shutdown(&self) {
        self.inner.stopping.store(true, Ordering::SeqCst);
        drop(self.inner.watcher.lock().take());
    }

    pub fn model_ready(&self, name: &str, version: Option<i64>) -> bool {
        self.inner.registry.read().is_ready(name, version)
    }

    /// Whether a load or unload of `name` is under way (startup's, the
    /// repository API's, poll mode's): its instances may be initializing
    /// or warming up, and a call of theirs that waits for a load of
    /// `name` would wait for itself.
    pub fn is_loading(&self, name: &str) -> bool {
        let locks = self.inner.locks.lock();
        locks.get(name).is_some_and(|lock| lock.is_locked())
    }

    /// The custom metric families models create, for the metrics endpoint.
    pub fn custom_metrics(&self) -> &Arc<CustomMetrics> {
        &self.inner.custom_metrics
    }

    /// The ready version a request for `name` / `version` goes to.
    pub fn model(&self, name: &str, version: Option<i64>) -> Result<Arc<LoadedVersion>, Error> {
        self.inner.registry.read().resolve(name, version)
    }

    pub fn model_config(
        &self,
        name: &str,
        version: Option<i64>,
    ) -> Result<Arc<ModelConfig>, Error> {
        Ok(Arc::clone(&self.model(name, version)?.config))
    }

    /// The file `relative` of the folder of loaded model `name` (a cloud
    /// repository's local copy), for a frontend that reads a model's own
    /// files (the OpenAI frontend's chat template); `None` when the model
    /// has no such file. `relative` must stay inside the folder.
    pub fn model_file(&self, name: &str, relative: &str) -> Result<Option<Vec<u8>>, Error> {
        let inside = std::path::Path::new(relative)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if relative.is_empty() || !inside {
            return Err(Error::invalid_argument(format!(
                "'{relative}' is not a file inside a model's folder"
            )));
        }
        let path = self.model(name, None)?.folder.join(relative);
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::internal(format!(
                "cannot read {}: {e}",
                path.display()
            ))),
        }
    }

    pub fn model_metadata(&self, name: &str, version: Option<i64>) -> Result<ModelMetadata, Error> {
        let registry = self.inner.registry.read();
        let loaded = registry.resolve(name, version)?;
        let ready: Vec<i64> = registry
            .loaded()
            .filter(|(n, l)| *n == name && l.failure().is_none())
            .map(|(_, l)| l.version)
            .collect();
        let mut metadata = ModelMetadata::new(&loaded.config, &ready);
        if let Some(traffic) = self.inner.traffic.state(name) {
            metadata.labels = traffic.spec.labels.clone();
        }
        Ok(metadata)
    }

    /// Runs one inference: the one way in for every frontend. The request
    /// goes to the version it names (a number, or a label resolved now) or
    /// the one the model's traffic settings choose; inputs and outputs
    /// placed in shared memory are read from and written to their
    /// registered regions. A decoupled model's responses come as a stream,
    /// as they are made, when the call takes one ([`Call::stream`]); any
    /// other model's answer comes whole. Shared memory outputs are for
    /// single answers only.
    pub async fn infer(&self, request: InferRequest, call: Call) -> Result<Answer, Error> {
        let span = tracing::debug_span!(
            "infer",
            model = %request.model_name,
            version = tracing::field::Empty,
            id = %request.id,
            nested = call.nested,
            queue_us = tracing::field::Empty,
            compute_us = tracing::field::Empty,
        );
        self.infer_in(request, call).instrument(span).await
    }

    async fn infer_in(&self, mut request: InferRequest, call: Call) -> Result<Answer, Error> {
        if !call.nested && self.inner.stopping.load(Ordering::SeqCst) {
            return Err(Error::unavailable("the server is shutting down"));
        }
        let counted = InFlight::enter(&self.inner.in_flight);
        let route = self.route(&mut request)?;
        tracing::Span::current().record("version", route.version.version);
        let decoupled = route.version.is_decoupled();
        let refusal = match call.takes {
            Takes::Stream if decoupled => return self.stream_on(route.version, request, counted),
            Takes::Stream => None,
            Takes::One(refusal) => refusal,
        };
        let result = self.infer_on(route, request).await;
        match (decoupled, refusal) {
            // The caller's words for a model it cannot serve (Triton's).
            (true, Some(words)) => Err(Error::unsupported(words)),
            _ => result.map(Answer::One),
        }
    }

    /// Where `request` goes: the version it names, or the one its model's
    /// traffic settings choose (see [`traffic`]).
    fn route(&self, request: &mut InferRequest) -> Result<traffic::Route, Error> {
        self.inner
            .traffic
            .route(&self.inner.registry.read(), request)
    }

    /// Runs `request` on the version `route` chose, its shared memory
    /// inputs and outputs read and written.
    async fn infer_on(
        &self,
        mut route: traffic::Route,
        mut request: InferRequest,
    ) -> Result<InferResponse, Error> {
        let plan = self.inner.shared_memory.prepare(&mut request)?;
        let watch = route.watch(&request);
        let mut result = route.version.infer(request).await;
        watch.finish(route.version.version, &mut result);
        let mut response = result?;
        plan.write(&mut response)?;
        Ok(response)
    }

    /// Starts `request` on decoupled `model`: its responses as a stream.
    fn stream_on(
        &self,
        model: Arc<LoadedVersion>,
        mut request: InferRequest,
        counted: InFlight,
    ) -> Result<Answer, Error> {
        let plan = self.inner.shared_memory.prepare(&mut request)?;
        if !plan.is_empty() {
            return Err(Error::invalid_argument(format!(
                "model '{}' is decoupled: its outputs cannot go to shared memory regions",
                model.config.name
            )));
        }
        let responses = model.stream(request)?;
        Ok(Answer::Stream(ResponseStream {
            responses,
            in_flight: counted,
        }))
    }

    /// The response cache's state (how full a local one is, how a Redis
    /// one fares); `None` when the server has none.
    pub fn cache_usage(&self) -> Option<cache::CacheUsage> {
        self.inner.cache.as_ref().map(cache::ResponseCache::usage)
    }

    /// Connects the response cache when it is in Redis, checking that the
    /// server answers; the server does not start without it, as
    /// tritonserver. Without this call a Redis cache connects in the
    /// background on first use.
    pub async fn connect_cache(&self) -> Result<(), cache::ConnectError> {
        match &self.inner.cache {
            Some(cache) => cache.connect().await,
            None => Ok(()),
        }
    }

    /// The system shared memory regions clients registered.
    /// The GPUs this server uses (none on a CPU machine).
    pub fn devices(&self) -> &nereid_device::Devices {
        &self.inner.options.devices
    }

    pub fn shared_memory(&self) -> &SharedMemoryRegistry {
        &self.inner.shared_memory
    }

    /// Statistics of every ready version, of one model's, or of one version.
    pub fn statistics(
        &self,
        name: Option<&str>,
        version: Option<i64>,
    ) -> Result<Vec<VersionStatistics>, Error> {
        let registry = self.inner.registry.read();
        if let Some(name) = name {
            registry.resolve(name, version).map_err(|_| match version {
                None => {
                    Error::invalid_argument(format!("requested model '{name}' is not available"))
                }
                Some(_) => Error::invalid_argument(format!(
                    "requested model version is not available for model '{name}'"
                )),
            })?;
        }
        Ok(registry
            .loaded()
            .filter(|(n, l)| {
                name.is_none_or(|want| want == *n) && version.is_none_or(|v| v == l.version)
            })
            .map(|(n, l)| VersionStatistics {
                name: n.to_string(),
                version: l.version,
                stats: l.stats.snapshot(),
            })
            .collect())
    }

    /// Per loaded version: the requests waiting now and the latencies
    /// sampled since the last call (which takes them).
    pub fn activity(&self) -> Vec<stats::VersionActivity> {
        let registry = self.inner.registry.read();
        registry
            .loaded()
            .map(|(n, l)| stats::VersionActivity {
                name: n.to_string(),
                version: l.version,
                pending: l.stats.pending(),
                samples: l.stats.take_samples(),
                failures: l.stats.failures(),
                latency_target: l.latency_target(),
            })
            .collect()
    }

    /// The repository index: one row per known version, one per model
    /// that failed as a whole, and a name-only row for every model folder
    /// that was never loaded, sorted by name as Triton sorts it.
    pub fn index(&self) -> Vec<IndexEntry> {
        let dirs = self.inner.repository.scan().unwrap_or_default();
        let registry = self.inner.registry.read();
        let mut rows = registry.index();
        rows.extend(
            dirs.into_iter()
                .filter(|d| !registry.contains(&d.name))
                .map(|d| IndexEntry {
                    name: d.name,
                    version: None,
                    state: None,
                    reason: String::new(),
                    labels: Vec::new(),
                }),
        );
        drop(registry);
        for row in &mut rows {
            if let (Some(version), Some(traffic)) =
                (row.version, self.inner.traffic.state(&row.name))
            {
                row.labels = traffic
                    .spec
                    .labels
                    .iter()
                    .filter(|(_, v)| **v == version)
                    .map(|(l, _)| l.clone())
                    .collect();
            }
        }
        rows.sort_by(|a, b| a.name.cmp(&b.name));
        rows
    }
}

/// Who makes a request, and what answers it takes.
#[derive(Debug, Clone, Copy)]
pub struct Call {
    /// Made by a request already accepted (a Python model's BLS call):
    /// served while the server drains, so that the request making it can
    /// finish.
    pub nested: bool,
    pub takes: Takes,
}

/// The answers a caller takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takes {
    /// One answer, or a decoupled model's responses as a stream.
    Stream,
    /// One answer. A decoupled model is refused: in these words (the
    /// frontend's, as Triton says them), or in the engine's own.
    One(Option<&'static str>),
}

impl Call {
    /// A client that takes one answer.
    pub fn one() -> Call {
        Call {
            nested: false,
            takes: Takes::One(None),
        }
    }

    /// A client that takes a decoupled model's responses as a stream.
    pub fn stream() -> Call {
        Call {
            nested: false,
            takes: Takes::Stream,
        }
    }

    /// A client that takes one answer and refuses a decoupled model with
    /// `words`.
    pub fn one_refusing(words: &'static str) -> Call {
        Call {
            nested: false,
            takes: Takes::One(Some(words)),
        }
    }

    /// The call, made by a request already accepted.
    pub fn nested(self) -> Call {
        Call {
            nested: true,
            ..self
        }
    }
}

/// What [`Engine::infer`] answers.
#[derive(Debug)]
pub enum Answer {
    /// The one answer of a model that is not decoupled.
    One(InferResponse),
    /// A decoupled model's responses.
    Stream(ResponseStream),
}

impl Answer {
    /// The one answer, for a call that takes one ([`Call::one`]), which a
    /// decoupled model never gives.
    pub fn one(self) -> Result<InferResponse, Error> {
        match self {
            Answer::One(response) => Ok(response),
            Answer::Stream(_) => Err(Error::internal(
                "a decoupled model's stream came to a call that takes one answer",
            )),
        }
    }
}

/// A decoupled model's responses to one request, as the model sends them;
/// the last is marked. Dropping it cancels the request (the model's
/// `is_cancelled()` turns true) and ends it for the drain.
#[derive(Debug)]
pub struct ResponseStream {
    responses: tokio::sync::mpsc::UnboundedReceiver<Streamed>,
    in_flight: InFlight,
}

impl ResponseStream {
    /// The next response; `None` after the last, or when the model lost
    /// the request without a final flag (its worker died).
    pub async fn next(&mut self) -> Option<Streamed> {
        self.responses.recv().await
    }

    /// The responses the model sent, errors included, up to the one with
    /// the final flag; a final flag sent alone gives none. The request
    /// stays in flight while the stream lives.
    pub fn responses(self) -> impl futures::Stream<Item = Result<InferResponse, Error>> + Send {
        until_last(self.responses, self.in_flight)
    }
}

/// The responses on `responses` up to the one with the final flag, the
/// flag-only ones left out; `held` lives as long as the stream.
fn until_last<H: Send + 'static>(
    responses: tokio::sync::mpsc::UnboundedReceiver<Streamed>,
    held: H,
) -> impl futures::Stream<Item = Result<InferResponse, Error>> + Send {
    futures::stream::unfold(
        (responses, held, false),
        |(mut responses, held, ended)| async move {
            if ended {
                return None;
            }
            loop {
                let streamed = responses.recv().await?;
                if let Some(response) = streamed.response {
                    return Some((response, (responses, held, streamed.last)));
                }
                if streamed.last {
                    return None;
                }
            }
        },
    )
}

/// Counts a request or stream in flight while it lives.
#[derive(Debug)]
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn enter(counter: &Arc<AtomicUsize>) -> InFlight {
        counter.fetch_add(1, Ordering::SeqCst);
        InFlight(Arc::clone(counter))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
