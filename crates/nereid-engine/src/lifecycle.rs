//! Loading, reloading and unloading models without failing a request. A
//! changed version is loaded beside the one that serves and swapped in
//! when ready; requests already holding the old handle finish on it, and
//! it is freed when the last of them drops it. A failed load leaves what
//! serves in place. Loads of one model are serialized by a per-model lock;
//! everything here blocks and runs on threads of its own.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use nereid_core::model_config::ModelConfig;
use nereid_core::{Backend, Error};
use nereid_ensemble::Composer;
use nereid_repository::ResolvedModel;

use crate::cache::ResponseCache;
use crate::handle::Engine;
use crate::model::LoadedVersion;
use crate::options::LoadFailure;
use crate::plan::{Plan, Serving, Target, plan, same_config};
use crate::registry::{ModelEntry, UNLOADED, VersionEntry};
use crate::source::Source;
use nereid_residency::LoadCause;

/// The outcome of loading one version.
type Loaded = Result<(LoadedVersion, Option<u64>), Error>;

impl Engine {
    /// Loads (or reloads) the model `source` describes. With `force`,
    /// versions whose files and config are unchanged are reloaded too.
    pub(crate) fn sync_model(&self, source: Source, force: bool) -> Result<(), Error> {
        let lock = self.model_lock(source.name());
        let _serialized = lock.lock();
        self.sync_locked(source, force)
    }

    fn sync_locked(&self, source: Source, force: bool) -> Result<(), Error> {
        let name = source.name().to_string();
        // Traffic settings whose file changed since they were applied; the
        // versions their labels name load with the model.
        let traffic = self.changed_traffic_file(&name, &source.entry.path);
        let mut pinned = self.inner.traffic.pinned(&name);
        if let Some((Ok(spec), _)) = &traffic {
            pinned.extend(spec.labels.values().copied());
        }
        let resolved = self.resolve_source(&source).and_then(|mut resolved| {
            if resolved.backend.is_none() {
                self.check_ensemble(&mut resolved.config)?;
            }
            resolved.pin_versions(&source.entry.path, &pinned);
            Ok(resolved)
        });
        let resolved = resolved.map_err(|reason| self.record_unavailable(&name, reason))?;
        let current = self
            .inner
            .registry
            .read()
            .get(&name)
            .cloned()
            .unwrap_or_default();
        let targets = targets(&resolved, &source.entry.path);
        let plan = plan_for(&current, &resolved.config, &targets, force);
        let fresh: Vec<i64> = plan
            .load
            .iter()
            .copied()
            .filter(|v| current.versions.get(v).is_none_or(|e| e.loaded.is_none()))
            .collect();
        self.inner.registry.write().mark_loading(&name, &fresh);
        let composer = crate::ensemble::EngineComposer::for_engine(self);
        let cache = self.inner.cache.as_ref();
        let results = load_versions(&resolved, &targets, &plan.load, &composer, cache)
            .into_iter()
            .map(|(v, result)| (v, result.map_err(|e| self.error_in_origins(e))))
            .collect();
        let (entry, retired, errors) = commit(current, &plan, results, &source);
        // Versions the policy drops that serve on because a successor failed.
        let kept: Vec<i64> = plan
            .retire
            .iter()
            .copied()
            .filter(|v| entry.versions.get(v).is_some_and(|e| e.loaded.is_some()))
            .collect();
        let replaced = self.inner.registry.write().set(name.clone(), entry);
        // Released outside the lock: requests still holding these finish first.
        drop(replaced);
        if let Some((spec, stamp)) = traffic {
            self.apply_traffic_file(&name, spec, stamp);
        }
        self.inner.janitor.retire(retired);
        for v in &plan.retire {
            if kept.contains(v) {
                tracing::warn!(model = %name, version = v, "a new version failed to load: this version, which the version policy drops, serves on");
            } else {
                tracing::info!(model = %name, version = v, "version unloaded");
            }
        }
        if errors.is_empty() {
            return Ok(());
        }
        let reasons: String = errors
            .iter()
            .map(|(v, e)| format!("version {v} is at UNAVAILABLE state: {e};\n"))
            .collect();
        Err(Error::invalid_argument(format!(
            "load failed for model '{name}': {reasons}"
        )))
    }

    /// Records that `name` could not be read or resolved (its config, its
    /// versions): UNAVAILABLE with `reason`, as Triton words it.
    fn record_unavailable(&self, name: &str, reason: String) -> Error {
        tracing::error!(model = %name, error = %reason, "model unavailable");
        let replaced = self
            .inner
            .registry
            .write()
            .record_failure(name, reason.clone());
        drop(replaced);
        Error::internal(format!(
            "failed to load '{name}', failed to poll from model repository: {reason}"
        ))
    }

    fn resolve_source(&self, source: &Source) -> Result<ResolvedModel, String> {
        let repository = &self.inner.repository;
        let backends = &self.inner.backends;
        match &source.config {
            Some(config) => repository.resolve_with_config(&source.entry, config.clone(), backends),
            None => repository.resolve(&source.entry, backends),
        }
        .map_err(|e| self.in_origins(&e.to_string()))
    }

    /// Unloads every version of `name`: each shows UNAVAILABLE "unloaded";
    /// requests in flight finish first. Unknown models are fine, as in Triton.
    pub(crate) fn unload_now(&self, name: &str) {
        let lock = self.model_lock(name);
        let _serialized = lock.lock();
        let dropped = self.inner.registry.write().unload(name);
        self.inner.traffic.remove(name);
        if !dropped.is_empty() {
            tracing::info!(model = %name, "model unloaded");
        }
        self.inner.janitor.retire(dropped);
    }

    /// Forgets a model whose folder is gone, after draining it.
    pub(crate) fn remove_model(&self, name: &str) {
        let lock = self.model_lock(name);
        let _serialized = lock.lock();
        self.inner.traffic.remove(name);
        let Some(removed) = self.inner.registry.write().remove(name) else {
            return;
        };
        tracing::info!(model = %name, "model removed from the repository: unloaded");
        let loaded = removed.versions.into_values().filter_map(|v| v.loaded);
        self.inner.janitor.retire(loaded.collect());
    }

    /// Loads `sources`: every model in parallel, each on its own thread,
    /// then the ensembles among them, each after the ensembles it uses, so
    /// that an ensemble is checked against composing models already
    /// loaded. Ensembles that failed earlier and use one of the models
    /// loaded now are tried again, as Triton re-checks dependents.
    pub(crate) fn load_many(&self, sources: Vec<Source>, cause: LoadCause) -> Vec<LoadFailure> {
        let names: Vec<String> = sources.iter().map(|s| s.name().to_string()).collect();
        let failures = self.load_many_timed(sources, cause);
        self.settle_parallel_footprints(&names, cause);
        failures
    }

    fn load_many_timed(&self, sources: Vec<Source>, cause: LoadCause) -> Vec<LoadFailure> {
        let (mut ensembles, models): (Vec<Source>, Vec<Source>) = sources
            .into_iter()
            .partition(|s| self.source_is_ensemble(s));
        let loaded: Vec<String> = models.iter().map(|s| s.name().to_string()).collect();
        let mut failures = self.load_parallel(models, cause);
        ensembles.extend(self.failed_dependents(&loaded, &ensembles));
        while !ensembles.is_empty() {
            let names: Vec<String> = ensembles.iter().map(|s| s.name().to_string()).collect();
            let waits = |s: &Source| {
                self.source_config(s).is_some_and(|c| {
                    nereid_ensemble::dependencies(&c)
                        .iter()
                        .any(|(m, _)| m != s.name() && names.contains(m))
                })
            };
            // Those that use no ensemble still to load; all of them when
            // the rest wait on each other (a cycle, refused when checked).
            let (mut now, later): (Vec<Source>, Vec<Source>) =
                ensembles.into_iter().partition(|s| !waits(s));
            if now.is_empty() {
                now = later;
                ensembles = Vec::new();
            } else {
                ensembles = later;
            }
            failures.extend(self.load_parallel(now, cause));
        }
        failures.sort_by(|a, b| a.model.cmp(&b.model));
        failures
    }

    fn load_parallel(&self, sources: Vec<Source>, cause: LoadCause) -> Vec<LoadFailure> {
        let failures = parking_lot::Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for source in sources {
                let failures = &failures;
                scope.spawn(move || {
                    let model = source.name().to_string();
                    let started = std::time::Instant::now();
                    match self.sync_model(source, false) {
                        Ok(()) => self.inner.residency.loaded(cause, started.elapsed()),
                        Err(e) => failures.lock().push(LoadFailure {
                            model,
                            reason: e.message().to_string(),
                        }),
                    }
                });
            }
        });
        failures.into_inner()
    }

    /// The config a source will load, as written.
    pub(crate) fn source_config(&self, source: &Source) -> Option<ModelConfig> {
        match &source.config {
            Some(config) => Some(config.clone()),
            None => self.inner.repository.read_model_config(&source.entry).ok(),
        }
    }

    fn source_is_ensemble(&self, source: &Source) -> bool {
        self.source_config(source)
            .is_some_and(|c| c.platform == nereid_ensemble::ENSEMBLE_PLATFORM)
    }

    /// Known ensembles that have no ready version, use one of `models`, and
    /// are not among `pending` already: sources to try them again.
    fn failed_dependents(&self, models: &[String], pending: &[Source]) -> Vec<Source> {
        if models.is_empty() {
            return Vec::new();
        }
        let failed: Vec<String> = {
            let registry = self.inner.registry.read();
            registry
                .names()
                .filter(|n| !registry.is_ready(n, None))
                .filter(|n| !pending.iter().any(|s| s.name() == n))
                .collect()
        };
        let dirs = self.inner.repository.scan().unwrap_or_default();
        dirs.into_iter()
            .filter(|d| failed.contains(&d.name))
            .map(Source::repository)
            .filter(|s| {
                self.source_config(s).is_some_and(|c| {
                    nereid_ensemble::dependencies(&c)
                        .iter()
                        .any(|(m, _)| models.contains(m))
                })
            })
            .collect()
    }

    pub(crate) fn model_lock(&self, name: &str) -> Arc<parking_lot::Mutex<()>> {
        Arc::clone(self.inner.locks.lock().entry(name.to_string()).or_default())
    }
}

/// The versions `resolved` selects, with their folders' fingerprints now
/// (taken before loading, so a change during the load is seen later).
fn targets(resolved: &ResolvedModel, model_dir: &Path) -> Vec<Target> {
    resolved
        .versions
        .iter()
        .map(|v| Target {
            version: v.version,
            fingerprint: nereid_repository::fingerprint(&model_dir.join(v.version.to_string()))
                .ok(),
        })
        .collect()
}

fn plan_for(current: &ModelEntry, config: &ModelConfig, targets: &[Target], force: bool) -> Plan {
    let serving: BTreeMap<i64, Serving> = current
        .versions
        .iter()
        .filter_map(|(&v, e)| {
            // A version that can serve no more is loaded again.
            let loaded = e.serving()?;
            Some((
                v,
                Serving {
                    fingerprint: e.fingerprint,
                    same_config: same_config(&loaded.config, config),
                },
            ))
        })
        .collect();
    let known: BTreeSet<i64> = current.versions.keys().copied().collect();
    plan(&serving, &known, targets, force)
}

/// Loads the versions `load` names, in parallel.
fn load_versions(
    resolved: &ResolvedModel,
    targets: &[Target],
    load: &[i64],
    composer: &Arc<dyn Composer>,
    cache: Option<&ResponseCache>,
) -> Vec<(i64, Loaded)> {
    let config = Arc::new(resolved.config.clone());
    let cache = response_cache(&config, cache);
    std::thread::scope(|scope| {
        let handles: Vec<_> = resolved
            .versions
            .iter()
            .filter(|v| load.contains(&v.version))
            .map(|v| {
                let fingerprint = targets
                    .iter()
                    .find(|t| t.version == v.version)
                    .and_then(|t| t.fingerprint);
                let config = Arc::clone(&config);
                let backend: Option<&Arc<dyn Backend>> = resolved.backend.as_ref();
                let handle = scope.spawn(move || {
                    let loaded = match backend {
                        Some(backend) => {
                            LoadedVersion::load(backend, config, v.version, v.model_path.clone())?
                        }
                        None => LoadedVersion::ensemble(
                            config,
                            v.version,
                            &v.model_path,
                            Arc::clone(composer),
                        )?,
                    };
                    let loaded = match cache {
                        Some(cache) => loaded.with_cache(cache),
                        None => loaded,
                    };
                    Ok((loaded, fingerprint))
                });
                (v.version, handle)
            })
            .collect();
        handles
            .into_iter()
            .map(|(v, handle)| {
                let result = handle
                    .join()
                    .unwrap_or_else(|_| Err(Error::internal("the load thread panicked")));
                log_load(&resolved.name, v, &result);
                (v, result)
            })
            .collect()
    })
}

fn log_load(model: &str, version: i64, result: &Loaded) {
    match result {
        Ok(_) => tracing::info!(model, version, "model ready"),
        Err(e) => tracing::error!(model, version, error = %e, "model version unavailable"),
    }
}

/// Builds the model's next entry from its current one and the loads'
/// outcomes. Returns it, the handles to drop, and the failed versions.
fn commit(
    mut current: ModelEntry,
    plan: &Plan,
    results: Vec<(i64, Loaded)>,
    source: &Source,
) -> (ModelEntry, Vec<Arc<LoadedVersion>>, Vec<(i64, Error)>) {
    let mut next = ModelEntry {
        failure: None,
        versions: BTreeMap::new(),
        files: source.files.clone(),
    };
    let mut retired = Vec::new();
    let mut errors = Vec::new();
    for v in &plan.keep {
        if let Some(entry) = current.versions.remove(v) {
            // Back to the files it was loaded from: an old failure is moot.
            let reason = String::new();
            next.versions.insert(*v, VersionEntry { reason, ..entry });
        }
    }
    for (v, result) in results {
        let old = current.versions.remove(&v);
        let entry = match (result, old) {
            (Ok((loaded, fp)), old) => {
                retired.extend(old.and_then(|o| o.loaded));
                VersionEntry::ready(Arc::new(loaded), fp)
            }
            (Err(e), Some(old)) if old.loaded.is_some() => {
                let reason = format!("reload failed: {e}");
                errors.push((v, e));
                VersionEntry { reason, ..old }
            }
            (Err(e), _) => {
                let entry = VersionEntry::unavailable(e.message());
                errors.push((v, e));
                entry
            }
        };
        next.versions.insert(v, entry);
    }
    for v in &plan.retire {
        let Some(old) = current.versions.remove(v) else {
            continue;
        };
        let folder_gone = !source.entry.path.join(v.to_string()).exists();
        match old.loaded {
            // A version the policy dropped serves on until its successors loaded.
            Some(_) if !errors.is_empty() && !folder_gone => {
                next.versions.insert(*v, old);
            }
            Some(loaded) => {
                retired.push(loaded);
                next.versions
                    .insert(*v, VersionEntry::unavailable(UNLOADED));
            }
            None if old.reason == UNLOADED => {
                next.versions.insert(*v, old);
            }
            None => {}
        }
    }
    (next, retired, errors)
}

/// The cache a model's versions use: the server's, when the config enables
/// it. Enabled without a server cache, it is off, with a warning (Triton
/// does the same).
fn response_cache<'a>(
    config: &ModelConfig,
    cache: Option<&'a ResponseCache>,
) -> Option<&'a ResponseCache> {
    if !config.response_cache.as_ref().is_some_and(|c| c.enable) {
        return None;
    }
    if cache.is_none() {
        tracing::warn!(model = %config.name, "response_cache is enabled in the model's config, but the server has no cache (--cache-config local,size=N or redis,host=H,port=P): answers are not cached");
    }
    cache
}
