//! Loading and unloading: the engine made for a model control mode, the
//! startup load, and the repository API's load and unload (explicit
//! mode), each serialized per model and run on the blocking pool.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use nereid_core::{Backend, Error};
use nereid_repository::Repository;
use nereid_residency::LoadCause;
use parking_lot::{Mutex, RwLock};

use crate::handle::{Engine, Inner, Links};
use crate::memory::Janitor;
use crate::options::{ControlMode, EngineOptions, LoadFailure, LoadRequest, ModelControl};
use crate::registry::Registry;
use crate::shared_memory::SharedMemoryRegistry;
use crate::source::{self, Source};
use crate::traffic::Traffic;
use crate::watcher;

/// Residency's state, made for the engine's options: the host measured
/// from /proc, GPUs from the device layer.
fn residency(options: &EngineOptions, control: &ModelControl) -> nereid_residency::Residency {
    if control.mode == ControlMode::OnDemand || !control.residency.budget.is_empty() {
        crate::memory::map_large_blocks();
    }
    let devices = options.devices.clone();
    let meter = nereid_residency::ProcessMemory::new(move |id| {
        devices
            .gpu(id)
            .and_then(|gpu| devices.sample(gpu))
            .and_then(|sample| sample.memory_used_bytes)
    });
    nereid_residency::Residency::new(control.residency.clone(), Arc::new(meter))
}

/// What Triton answers to a load or unload outside explicit model control.
const NOT_EXPLICIT: &str = "explicit model load / unload is not allowed if polling is enabled";

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
            .map(nereid_cache::ResponseCache::new);
        let shared_memory = SharedMemoryRegistry::new(options.devices.clone());
        let residency = residency(&options, &control);
        Engine {
            inner: Arc::new(Inner {
                options,
                control,
                repository,
                backends,
                registry: RwLock::new(Registry::default()),
                locks: Mutex::new(HashMap::new()),
                watcher: Mutex::new(None),
                janitor: Janitor::start(),
                cache,
                shared_memory,
                links: Mutex::new(Links::default()),
                runtime: tokio::runtime::Handle::try_current().ok(),
                started: AtomicBool::new(false),
                residency,
                ready_once: AtomicBool::new(false),
                stopping: AtomicBool::new(false),
                in_flight: Arc::new(AtomicUsize::new(0)),
                custom_metrics: Arc::default(),
                traffic: Traffic::default(),
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
        failures.extend(self.load_many(
            dirs.into_iter().map(Source::repository).collect(),
            LoadCause::Startup,
        ));
        // Startup models are pinned: a budget they pass is only reported.
        self.inner
            .residency
            .enforce(&crate::resident::Resident(self), None);
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
        if !self.control_mode().takes_api_loads() || wanted.iter().any(|m| m == "*") {
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
            engine.inner.residency.forget_failure(&name);
            engine.measured_load(&name, LoadCause::Api, || {
                let found = engine.find_model(&name)?;
                let source = source::for_request(&name, request, found)?;
                // As Triton: an ensemble's composing models load with it.
                engine.load_composing(&source, &mut vec![name.clone()]);
                engine.inner.links.lock().loaded_explicitly(&name);
                engine.sync_model(source, true)
            })?;
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
    pub(crate) fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> tokio::task::JoinHandle<T> {
        match &self.inner.runtime {
            Some(runtime) => runtime.spawn_blocking(work),
            None => tokio::task::spawn_blocking(work),
        }
    }

    fn require_explicit(&self) -> Result<(), Error> {
        if self.control_mode().takes_api_loads() {
            Ok(())
        } else {
            Err(Error::unavailable(NOT_EXPLICIT))
        }
    }

    pub(crate) fn find_model(
        &self,
        name: &str,
    ) -> Result<Option<nereid_repository::ModelEntry>, Error> {
        self.refresh_for_load(name)?;
        Ok(self.inner.repository.entry(name))
    }

    pub fn begin_shutdown(&self) {
        self.inner.stopping.store(true, Ordering::SeqCst);
        drop(self.inner.watcher.lock().take());
    }
}
