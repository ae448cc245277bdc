//! The model manager: finds models in the repository, loads each version's
//! instances through a backend, tracks their states, validates and
//! dispatches requests, and keeps statistics. Frontends use [`Engine`]
//! in-process without knowing which backend serves a model.
//!
//! This crate must not depend on a wire format (HTTP, gRPC, JSON) nor on a
//! concrete backend: backends are handed in as `Arc<dyn Backend>`.

mod batch;
mod metadata;
mod model;
mod registry;
mod scheduler;
pub mod stats;
mod validate;
mod worker;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use nereid_core::model_config::ModelConfig;
use nereid_core::{Backend, Error, InferRequest, InferResponse};
use nereid_repository::Repository;
use parking_lot::RwLock;

pub use metadata::{ModelMetadata, TensorMetadata};
pub use model::LoadedVersion;
pub use registry::{IndexEntry, ModelState};
pub use validate::{ValidatedRequest, validate};

use registry::{ModelEntry, Registry, VersionEntry};
use stats::StatsSnapshot;

/// How the engine finds and treats models.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    pub repositories: Vec<PathBuf>,
    /// Refuse to autofill missing config fields from the model file.
    pub strict_model_config: bool,
    /// Report ready only when every model is ready.
    pub strict_readiness: bool,
}

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
    repository: Repository,
    backends: Vec<Arc<dyn Backend>>,
    registry: RwLock<Registry>,
    started: AtomicBool,
    stopping: AtomicBool,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl Engine {
    pub fn new(options: EngineOptions, backends: Vec<Arc<dyn Backend>>) -> Engine {
        let repository = Repository::new(options.repositories.clone(), options.strict_model_config);
        Engine {
            inner: Arc::new(Inner {
                options,
                repository,
                backends,
                registry: RwLock::new(Registry::default()),
                started: AtomicBool::new(false),
                stopping: AtomicBool::new(false),
            }),
        }
    }

    /// Loads every model in the repositories, in parallel; blocks until
    /// each has loaded or failed. A failed model is recorded UNAVAILABLE
    /// with its reason; the others serve. Errs only if a repository folder
    /// itself cannot be read.
    pub fn load_all(&self) -> Result<(), Error> {
        let dirs = self
            .inner
            .repository
            .scan()
            .map_err(|e| Error::internal(format!("cannot read the model repository: {e}")))?;
        std::thread::scope(|scope| {
            for dir in &dirs {
                scope.spawn(move || {
                    let entry = self.load_model(dir);
                    self.inner.registry.write().set(dir.name.clone(), entry);
                });
            }
        });
        self.inner.started.store(true, Ordering::SeqCst);
        Ok(())
    }

    fn load_model(&self, dir: &nereid_repository::ModelEntry) -> ModelEntry {
        let resolved = match self.inner.repository.resolve(dir, &self.inner.backends) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(model = %dir.name, error = %e, "model unavailable");
                return ModelEntry {
                    failure: Some(e.to_string()),
                    ..ModelEntry::default()
                };
            }
        };
        let config = Arc::new(resolved.config);
        let mut entry = ModelEntry::default();
        for v in resolved.versions {
            let loaded = LoadedVersion::load(
                &resolved.backend,
                Arc::clone(&config),
                v.version,
                v.model_path,
            );
            let version = match loaded {
                Ok(l) => {
                    tracing::info!(model = %dir.name, version = v.version, "model ready");
                    VersionEntry {
                        state: ModelState::Ready,
                        reason: String::new(),
                        loaded: Some(Arc::new(l)),
                    }
                }
                Err(e) => {
                    tracing::error!(model = %dir.name, version = v.version, error = %e, "model version unavailable");
                    VersionEntry {
                        state: ModelState::Unavailable,
                        reason: e.to_string(),
                        loaded: None,
                    }
                }
            };
            entry.versions.insert(v.version, version);
        }
        if entry.versions.is_empty() {
            entry.failure = Some(format!("model '{}' has no version to load", dir.name));
        }
        entry
    }

    /// The server process is up and not shutting down.
    pub fn is_live(&self) -> bool {
        !self.inner.stopping.load(Ordering::SeqCst)
    }

    /// Startup has finished, the server is not shutting down and, with
    /// strict readiness, every model is ready.
    pub fn is_ready(&self) -> bool {
        self.inner.started.load(Ordering::SeqCst)
            && !self.inner.stopping.load(Ordering::SeqCst)
            && (!self.inner.options.strict_readiness || self.inner.registry.read().all_ready())
    }

    /// Marks the server as shutting down: readiness turns false.
    pub fn begin_shutdown(&self) {
        self.inner.stopping.store(true, Ordering::SeqCst);
    }

    pub fn model_ready(&self, name: &str, version: Option<i64>) -> bool {
        self.inner.registry.read().is_ready(name, version)
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

    pub fn model_metadata(&self, name: &str, version: Option<i64>) -> Result<ModelMetadata, Error> {
        let registry = self.inner.registry.read();
        let loaded = registry.resolve(name, version)?;
        let ready: Vec<i64> = registry
            .loaded()
            .filter(|(n, _)| *n == name)
            .map(|(_, l)| l.version)
            .collect();
        Ok(ModelMetadata::new(&loaded.config, &ready))
    }

    /// Runs one inference on the model and version the request names.
    pub async fn infer(&self, request: InferRequest) -> Result<InferResponse, Error> {
        if self.inner.stopping.load(Ordering::SeqCst) {
            return Err(Error::unavailable("the server is shutting down"));
        }
        let model = self.model(&request.model_name, request.model_version)?;
        model.infer(request).await
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

    /// The repository index: one row per version, plus failed models.
    pub fn index(&self) -> Vec<IndexEntry> {
        self.inner.registry.read().index()
    }
}
