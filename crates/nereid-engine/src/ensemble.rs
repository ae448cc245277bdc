//! Ensembles in the engine: Triton's checks of an ensemble against the
//! models it composes (made when it loads, with what the registry holds
//! then), and the [`Composer`] through which its steps reach those models'
//! own schedulers. Which version serves a step is looked up per request,
//! so a composing model that reloads never fails an ensemble request.

use std::collections::BTreeSet;
use std::sync::{Arc, Weak};

use futures::StreamExt;
use nereid_core::model_config::ModelConfig;
use nereid_core::{Error, InferRequest, ModelVersion};
use nereid_ensemble::{Composer, Composing, StepFuture, StepStream};
use tracing::Instrument;

use crate::handle::{Engine, Inner};
use crate::registry::Registry;

/// The engine seen by an ensemble's steps. Weak, so that a loaded
/// ensemble held by the registry does not keep the engine alive.
pub(crate) struct EngineComposer {
    inner: Weak<Inner>,
}

impl EngineComposer {
    pub(crate) fn for_engine(engine: &Engine) -> Arc<dyn Composer> {
        Arc::new(EngineComposer {
            inner: Arc::downgrade(&engine.inner),
        })
    }
}

impl Composer for EngineComposer {
    fn infer(&self, mut request: InferRequest) -> StepFuture {
        let inner = self.inner.upgrade();
        let span = tracing::debug_span!(
            "step",
            model = %request.model_name,
            version = tracing::field::Empty,
            queue_us = tracing::field::Empty,
            compute_us = tracing::field::Empty,
        );
        let run = async move {
            let inner = inner.ok_or_else(|| Error::unavailable("the server is shutting down"))?;
            // A step naming no version is routed by its model's traffic
            // settings, as a request from a client.
            let mut route = inner.traffic.route(&*inner.registry.read(), &mut request)?;
            tracing::Span::current().record("version", route.version.version);
            let watch = route.watch(&request);
            let mut result = route.version.infer(request).await;
            watch.finish(route.version.version, &mut result);
            result
        };
        Box::pin(run.instrument(span))
    }

    fn infer_stream(&self, request: InferRequest) -> StepStream {
        let responses = self
            .inner
            .upgrade()
            .ok_or_else(|| Error::unavailable("the server is shutting down"))
            .and_then(|inner| {
                let mut request = request;
                let route = inner.traffic.route(&*inner.registry.read(), &mut request)?;
                route.version.stream(request)
            });
        let responses = match responses {
            Ok(responses) => responses,
            Err(e) => return futures::stream::once(async move { Err(e) }).boxed(),
        };
        crate::infer::until_last(responses, ()).boxed()
    }

    fn is_decoupled(&self, model: &str, version: &ModelVersion) -> bool {
        self.inner.upgrade().is_some_and(|inner| {
            let version = match version {
                ModelVersion::Label(label) => inner.traffic.label_version(model, label),
                version => version.number(),
            };
            inner
                .registry
                .read()
                .resolve(model, version)
                .is_ok_and(|m| m.is_decoupled())
        })
    }
}

impl Engine {
    /// Triton's checks of the ensemble `config` (its own config, that its
    /// models exist, no cycle, then against the composing models loaded
    /// now), in Triton's order. Marks the ensemble decoupled when Triton
    /// would. The error is Triton's message.
    pub(crate) fn check_ensemble(&self, config: &mut ModelConfig) -> Result<(), String> {
        nereid_ensemble::check_config(config).map_err(|e| e.to_string())?;
        let known: BTreeSet<String> = self
            .inner
            .repository
            .scan()
            .unwrap_or_default()
            .into_iter()
            .map(|d| d.name)
            .chain(self.inner.registry.read().names())
            .collect();
        nereid_ensemble::check_available(config, &|m| known.contains(m))
            .map_err(|e| e.to_string())?;
        let cycle = nereid_ensemble::find_cycle(&config.name, &|m| self.ensemble_steps(config, m));
        if let Some(cycle) = cycle {
            return Err(cycle.to_string());
        }
        let registry = self.inner.registry.read();
        let composition = nereid_ensemble::compose(config, &|m, v| composing(&registry, m, v))
            .map_err(|e| e.to_string())?;
        if composition.decoupled {
            config
                .model_transaction_policy
                .get_or_insert_with(Default::default)
                .decoupled = true;
        }
        Ok(())
    }

    /// The models the ensemble `model`'s steps use (from its folder's
    /// config, or `checking` itself), `None` when it is not an ensemble.
    fn ensemble_steps(&self, checking: &ModelConfig, model: &str) -> Option<Vec<String>> {
        let names = |config: &ModelConfig| {
            let steps = nereid_ensemble::dependencies(config)
                .into_iter()
                .map(|(m, _)| m);
            Some(steps.collect())
        };
        if model == checking.name {
            return names(checking);
        }
        let config = self.read_config(model)?;
        (config.platform == nereid_ensemble::ENSEMBLE_PLATFORM).then(|| names(&config))?
    }

    /// The config in `model`'s folder as written, if it has a readable one.
    pub(crate) fn read_config(&self, model: &str) -> Option<ModelConfig> {
        let repository = &self.inner.repository;
        let entry = repository
            .scan()
            .ok()?
            .into_iter()
            .find(|d| d.name == model)?;
        repository.read_model_config(&entry).ok()
    }

    /// Loads the models the ensemble `source` composes that are not ready
    /// (and theirs, for nested ensembles), before the ensemble itself.
    /// `seen` holds the models already on the way, so a cycle stops here
    /// (the ensemble's own check reports it). Failures show on the models.
    pub(crate) fn load_composing(&self, source: &crate::source::Source, seen: &mut Vec<String>) {
        let Some(config) = self.source_config(source) else {
            return;
        };
        for (model, _) in nereid_ensemble::dependencies(&config) {
            if seen.contains(&model) || self.inner.registry.read().is_ready(&model, None) {
                continue;
            }
            seen.push(model.clone());
            let Ok(Some(entry)) = self.find_model(&model) else {
                continue;
            };
            let dependency = crate::source::Source::repository(entry);
            self.load_composing(&dependency, seen);
            self.inner.links.lock().pulled_in.insert(model.clone());
            let _ = self.sync_model(dependency, false);
        }
    }

    /// The loaded ensembles that use `model`, directly or through other
    /// ensembles, outermost last.
    pub(crate) fn dependents(&self, model: &str) -> Vec<String> {
        let registry = self.inner.registry.read();
        let mut found: Vec<String> = Vec::new();
        let mut frontier = vec![model.to_string()];
        while let Some(used) = frontier.pop() {
            for (name, loaded) in registry.loaded() {
                let uses = loaded
                    .composing_models()
                    .is_some_and(|models| models.iter().any(|(m, _)| *m == used));
                if uses && !found.iter().any(|f| f == name) && name != model {
                    found.push(name.to_string());
                    frontier.push(name.to_string());
                }
            }
        }
        found
    }
}

impl Engine {
    /// Unloads `name` and, as Triton, every ensemble that uses it; with
    /// `unload_dependents` also the composing models `name` pulled in that
    /// no loaded ensemble still uses.
    pub(crate) fn unload_cascade(&self, name: &str, unload_dependents: bool) {
        let composing = self.composing_of(name);
        for dependent in self.dependents(name) {
            self.unload_now(&dependent);
            self.inner.links.lock().forced.insert(dependent);
        }
        self.unload_now(name);
        self.inner.links.lock().loaded_explicitly(name);
        if !unload_dependents {
            return;
        }
        for model in composing {
            let pulled_in = self.inner.links.lock().pulled_in.contains(&model);
            if pulled_in && self.dependents(&model).is_empty() {
                self.unload_cascade(&model, true);
            }
        }
    }

    /// The models the loaded ensemble `name`'s steps use.
    fn composing_of(&self, name: &str) -> Vec<String> {
        let registry = self.inner.registry.read();
        let Ok(loaded) = registry.resolve_own(name, None) else {
            return Vec::new();
        };
        let mut models: Vec<String> = loaded
            .composing_models()
            .unwrap_or_default()
            .iter()
            .map(|(m, _)| m.clone())
            .collect();
        models.dedup();
        models
    }

    /// Loads again the ensembles that were unloaded because they use
    /// `model`, now that it is back.
    pub(crate) fn reload_forced_dependents(&self, model: &str) {
        let forced: Vec<String> = self.inner.links.lock().forced.iter().cloned().collect();
        for ensemble in forced {
            let uses = self.read_config(&ensemble).is_some_and(|c| {
                nereid_ensemble::dependencies(&c)
                    .iter()
                    .any(|(m, _)| m == model)
            });
            if !uses {
                continue;
            }
            self.inner.links.lock().forced.remove(&ensemble);
            if let Ok(Some(entry)) = self.find_model(&ensemble) {
                let _ = self.sync_model(crate::source::Source::repository(entry), false);
                self.reload_forced_dependents(&ensemble);
            }
        }
    }
}

/// What the registry holds of the model a step names.
fn composing(registry: &Registry, model: &str, version: i64) -> Composing {
    let Some(entry) = registry.get(model) else {
        return Composing::Missing;
    };
    let loaded = if version < 0 {
        entry
            .versions
            .values()
            .rev()
            .find_map(|v| v.serving().cloned())
    } else {
        entry
            .versions
            .get(&version)
            .and_then(|v| v.serving().cloned())
    };
    match (loaded, &entry.failure) {
        (Some(loaded), _) => Composing::Loaded(Arc::clone(&loaded.config)),
        (None, Some(reason)) if entry.versions.is_empty() => Composing::Invalid(reason.clone()),
        (None, _) if version < 0 => match entry.versions.values().find(|v| !v.reason.is_empty()) {
            Some(v) => Composing::LoadFailed(v.reason.clone()),
            None => Composing::VersionNotLoaded,
        },
        (None, _) => Composing::VersionNotLoaded,
    }
}
