//! What the engine says about itself and its models: liveness and
//! readiness, a model's config, metadata and own files, statistics, the
//! repository index, the cache's and shared memory's state.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use nereid_core::Error;
use nereid_core::custom_metrics::CustomMetrics;
use nereid_core::model_config::ModelConfig;

use crate::handle::{Engine, ReadinessCheck};
use crate::metadata::ModelMetadata;
use crate::model::LoadedVersion;
use crate::options::Readiness;
use crate::registry::IndexEntry;
use crate::shared_memory::SharedMemoryRegistry;
use crate::stats::{self, StatsSnapshot};

/// Statistics of one model version.
#[derive(Debug, Clone)]
pub struct VersionStatistics {
    pub name: String,
    pub version: i64,
    pub stats: StatsSnapshot,
}

impl Engine {
    /// The server process is up and not shutting down.
    pub fn is_live(&self) -> bool {
        !self.inner.stopping.load(Ordering::SeqCst)
    }

    /// Startup has finished, the server is not shutting down and the
    /// models are as `--strict-readiness` asks ([`Readiness`]).
    pub fn is_ready(&self) -> bool {
        let started = self.inner.started.load(Ordering::SeqCst)
            && !self.inner.stopping.load(Ordering::SeqCst);
        let models = match self.inner.options.strict_readiness {
            Readiness::Strict => self.inner.registry.read().all_ready(),
            Readiness::Started => true,
            Readiness::Startup => {
                self.inner.ready_once.load(Ordering::SeqCst)
                    || (started && self.inner.registry.read().all_serving())
            }
        };
        // Apart from the registry's guard above: a check may read the
        // registry itself.
        let ready = started && models && self.inner.readiness.read().iter().all(|check| check());
        if ready {
            self.inner.ready_once.store(true, Ordering::SeqCst);
        }
        ready
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
    /// has no such file. A file the folder lacks may come from inside the
    /// model file itself (`Backend::embedded_file`). `relative` must stay
    /// inside the folder.
    pub fn model_file(&self, name: &str, relative: &str) -> Result<Option<Vec<u8>>, Error> {
        let inside = std::path::Path::new(relative)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if relative.is_empty() || !inside {
            return Err(Error::invalid_argument(format!(
                "'{relative}' is not a file inside a model's folder"
            )));
        }
        let loaded = self.model(name, None)?;
        let path = loaded.folder.join(relative);
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(loaded
                .embedded
                .as_ref()
                .and_then(|e| e.backend.embedded_file(&e.model_path, relative))),
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

    /// The response cache's state (how full a local one is, how a Redis
    /// one fares); `None` when the server has none.
    pub fn cache_usage(&self) -> Option<nereid_cache::CacheUsage> {
        self.inner
            .cache
            .as_ref()
            .map(nereid_cache::ResponseCache::usage)
    }

    /// Connects the response cache when it is in Redis, checking that the
    /// server answers; the server does not start without it, as
    /// tritonserver. Without this call a Redis cache connects in the
    /// background on first use.
    pub async fn connect_cache(&self) -> Result<(), nereid_cache::ConnectError> {
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
                    memory_bytes: None,
                }),
        );
        drop(registry);
        let measured = self.residency_shown();
        for row in &mut rows {
            if !measured {
                row.memory_bytes = None;
            }
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
