//! The table of models the engine knows, with each version's state. Plain
//! data with sync methods; the engine holds it behind a lock. Loading
//! happens elsewhere: the registry only swaps finished handles in and out.

use std::collections::BTreeMap;
use std::sync::Arc;

use nereid_core::Error;

use crate::model::LoadedVersion;

/// Triton's reason for a version that was unloaded on purpose; such a
/// version does not make the server unready.
pub const UNLOADED: &str = "unloaded";

/// A version's lifecycle state, named as Triton's repository index names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelState {
    Loading,
    Ready,
    Unavailable,
    Unloading,
}

impl ModelState {
    pub fn as_str(self) -> &'static str {
        match self {
            ModelState::Loading => "LOADING",
            ModelState::Ready => "READY",
            ModelState::Unavailable => "UNAVAILABLE",
            ModelState::Unloading => "UNLOADING",
        }
    }
}

/// One version of a model: its state and, when ready, the loaded handle.
#[derive(Debug, Clone)]
pub struct VersionEntry {
    pub state: ModelState,
    pub reason: String,
    pub loaded: Option<Arc<LoadedVersion>>,
    /// Fingerprint of the version folder when this handle was loaded, so a
    /// later look can tell whether its files changed.
    pub fingerprint: Option<u64>,
}

impl VersionEntry {
    pub fn ready(loaded: Arc<LoadedVersion>, fingerprint: Option<u64>) -> VersionEntry {
        VersionEntry {
            state: ModelState::Ready,
            reason: String::new(),
            loaded: Some(loaded),
            fingerprint,
        }
    }

    pub fn unavailable(reason: impl Into<String>) -> VersionEntry {
        VersionEntry {
            state: ModelState::Unavailable,
            reason: reason.into(),
            loaded: None,
            fingerprint: None,
        }
    }

    /// The handle requests go to: the loaded one, unless one of its
    /// instances can serve no more.
    pub fn serving(&self) -> Option<&Arc<LoadedVersion>> {
        self.loaded.as_ref().filter(|l| l.failure().is_none())
    }

    /// The state and reason the index and readiness show.
    pub fn shown(&self) -> (ModelState, &str) {
        match self.loaded.as_ref().and_then(|l| l.failure()) {
            Some(failure) => (ModelState::Unavailable, failure),
            None => (self.state, &self.reason),
        }
    }

    pub fn loading() -> VersionEntry {
        VersionEntry {
            state: ModelState::Loading,
            reason: String::new(),
            loaded: None,
            fingerprint: None,
        }
    }
}

/// One model: why its last load failed, if it did, and its versions.
#[derive(Debug, Clone, Default)]
pub struct ModelEntry {
    /// Why the last load of the model failed as a whole (bad config, no
    /// version) or, when older versions keep serving, why its reload did.
    pub failure: Option<String>,
    pub versions: BTreeMap<i64, VersionEntry>,
    /// A folder written from a load request's file contents; kept while
    /// the model is known so a reload can read it again.
    pub files: Option<Arc<tempfile::TempDir>>,
}

impl ModelEntry {
    /// A model that failed before any version could be tried.
    pub fn failed(reason: impl Into<String>) -> ModelEntry {
        ModelEntry {
            failure: Some(reason.into()),
            ..ModelEntry::default()
        }
    }

    fn serving(&self) -> bool {
        self.versions.values().any(|v| v.serving().is_some())
    }

    /// Triton's strict readiness for one model: it has a version state,
    /// and every version is ready or was unloaded on purpose.
    fn is_ready(&self) -> bool {
        if self.versions.is_empty() {
            return self.failure.is_none();
        }
        self.versions.values().all(|v| match v.shown() {
            (ModelState::Ready, _) => true,
            (_, reason) => reason == UNLOADED,
        })
    }
}

/// A row of the repository index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    pub name: String,
    /// `None` for a model that failed before any version was known, or
    /// that is in the repository but not loaded.
    pub version: Option<i64>,
    /// `None` for a model in the repository that was never loaded
    /// (explicit model control), as Triton lists it: name only.
    pub state: Option<ModelState>,
    pub reason: String,
    /// The version labels that name this version (Nereid's).
    pub labels: Vec<String>,
    /// The memory a loaded version holds, as measured (Nereid's).
    pub memory_bytes: Option<u64>,
}

/// Every model by name.
#[derive(Debug, Default)]
pub struct Registry {
    models: BTreeMap<String, ModelEntry>,
}

impl Registry {
    /// Puts `entry` in place of the model's current one and hands the
    /// previous one back, so the caller drops it outside the lock.
    pub fn set(&mut self, name: String, entry: ModelEntry) -> Option<ModelEntry> {
        self.models.insert(name, entry)
    }

    pub fn remove(&mut self, name: &str) -> Option<ModelEntry> {
        self.models.remove(name)
    }

    pub fn get(&self, name: &str) -> Option<&ModelEntry> {
        self.models.get(name)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.models.contains_key(name)
    }

    /// Records why a load of `name` failed. Versions that serve keep
    /// serving; a model with nothing serving becomes that failure alone.
    pub fn record_failure(&mut self, name: &str, reason: String) -> Option<ModelEntry> {
        match self.models.get_mut(name) {
            Some(entry) if entry.serving() => {
                entry.failure = Some(reason);
                None
            }
            _ => self.set(name.to_string(), ModelEntry::failed(reason)),
        }
    }

    /// Marks the model unloaded: every version UNAVAILABLE "unloaded", as
    /// Triton shows it. Returns the handles that were serving, for the
    /// caller to drop outside the lock (in-flight requests still hold them).
    pub fn unload(&mut self, name: &str) -> Vec<Arc<LoadedVersion>> {
        let Some(entry) = self.models.get_mut(name) else {
            return Vec::new();
        };
        entry.failure = None;
        entry.files = None;
        let mut dropped = Vec::new();
        for version in entry.versions.values_mut() {
            dropped.extend(version.loaded.take());
            *version = VersionEntry::unavailable(UNLOADED);
        }
        dropped
    }

    /// Shows `versions` as LOADING while they load for the first time.
    pub fn mark_loading(&mut self, name: &str, versions: &[i64]) {
        let entry = self.models.entry(name.to_string()).or_default();
        for &v in versions {
            let row = entry
                .versions
                .entry(v)
                .or_insert_with(VersionEntry::loading);
            if row.loaded.is_none() {
                *row = VersionEntry::loading();
            }
        }
    }

    /// The loaded version a request for `name` / `version` goes to: the one
    /// asked for, or the highest ready version.
    pub fn resolve(&self, name: &str, version: Option<i64>) -> Result<Arc<LoadedVersion>, Error> {
        let loaded = self.resolve_own(name, version)?;
        if let Some(models) = loaded.composing_models() {
            check_composing_ready(self, name, models, 0)?;
        }
        Ok(loaded)
    }

    /// The names of every model known, loaded or not.
    pub fn names(&self) -> impl Iterator<Item = String> + '_ {
        self.models.keys().cloned()
    }

    /// Like [`Registry::resolve`], without looking at the models an
    /// ensemble composes.
    pub fn resolve_own(
        &self,
        name: &str,
        version: Option<i64>,
    ) -> Result<Arc<LoadedVersion>, Error> {
        let model = self
            .models
            .get(name)
            .ok_or_else(|| Error::not_found(unknown_model(name, version)))?;
        match version {
            Some(v) => match model.versions.get(&v) {
                Some(entry) => entry.serving().cloned().ok_or_else(|| {
                    Error::unavailable(format!(
                        "Request for unknown model: '{name}' version {v} is not at ready state"
                    ))
                }),
                None => Err(Error::not_found(unknown_model(name, version))),
            },
            None => model
                .versions
                .values()
                .rev()
                .find_map(|e| e.serving().cloned())
                .ok_or_else(|| {
                    Error::not_found(format!(
                        "Request for unknown model: '{name}' has no available versions"
                    ))
                }),
        }
    }

    /// Whether `name` (at `version`, or any version) is ready.
    pub fn is_ready(&self, name: &str, version: Option<i64>) -> bool {
        self.resolve(name, version).is_ok()
    }

    /// Triton's strict readiness: every known model has a version state,
    /// and each version is READY or was unloaded on purpose.
    pub fn all_ready(&self) -> bool {
        self.models.values().all(ModelEntry::is_ready)
    }

    /// What `Readiness::Startup` asks: every model is ready as
    /// [`Registry::all_ready`] has it, or has a version serving (a failed
    /// new version beside a serving one does not count).
    pub fn all_serving(&self) -> bool {
        self.models.values().all(|m| {
            m.is_ready()
                || m.versions
                    .values()
                    .any(|v| v.shown().0 == ModelState::Ready)
        })
    }

    /// Every ready version of every model, for statistics.
    pub fn loaded(&self) -> impl Iterator<Item = (&str, &Arc<LoadedVersion>)> {
        self.models.iter().flat_map(|(name, m)| {
            m.versions
                .values()
                .filter_map(move |v| v.loaded.as_ref().map(|l| (name.as_str(), l)))
        })
    }

    /// The repository index, one row per version (or per failed model). A
    /// failed reload's reason shows on the versions that keep serving.
    pub fn index(&self) -> Vec<IndexEntry> {
        let mut rows = Vec::new();
        for (name, model) in &self.models {
            if let Some(reason) = &model.failure
                && model.versions.is_empty()
            {
                rows.push(IndexEntry {
                    name: name.clone(),
                    version: None,
                    state: Some(ModelState::Unavailable),
                    reason: reason.clone(),
                    labels: Vec::new(),
                    memory_bytes: None,
                });
            }
            for (&version, v) in &model.versions {
                let (state, reason) = v.shown();
                let reason = match (&model.failure, state) {
                    (Some(failure), ModelState::Ready) => format!("reload failed: {failure}"),
                    _ => reason.to_owned(),
                };
                rows.push(IndexEntry {
                    name: name.clone(),
                    version: Some(version),
                    state: Some(state),
                    reason,
                    labels: Vec::new(),
                    memory_bytes: v.loaded.as_ref().map(|l| l.memory_bytes()),
                });
            }
        }
        rows
    }
}

fn unknown_model(name: &str, version: Option<i64>) -> String {
    match version {
        Some(v) => format!("Request for unknown model: '{name}' version {v} is not found"),
        None => format!("Request for unknown model: '{name}' is not found"),
    }
}

impl nereid_traffic::Versions<LoadedVersion> for Registry {
    fn resolve(&self, model: &str, version: Option<i64>) -> Result<Arc<LoadedVersion>, Error> {
        Registry::resolve(self, model, version)
    }

    fn resolve_own(&self, model: &str, version: Option<i64>) -> Result<Arc<LoadedVersion>, Error> {
        Registry::resolve_own(self, model, version)
    }
}

/// Steps an ensemble may nest through other ensembles before the engine
/// stops following them (cycles are refused at load; this is a backstop).
const MAX_NESTING: usize = 32;

/// Checks that every model an ensemble's steps use (through nested
/// ensembles too) is ready; the error names the first that is not.
fn check_composing_ready(
    registry: &Registry,
    ensemble: &str,
    models: &[(String, Option<i64>)],
    depth: usize,
) -> Result<(), Error> {
    for (model, version) in models {
        let step = registry.resolve_own(model, *version).map_err(|e| {
            Error::unavailable(format!(
                "ensemble '{ensemble}' is not ready: composing model '{model}' is not: {}",
                e.message()
            ))
        })?;
        if let Some(nested) = step.composing_models()
            && depth < MAX_NESTING
        {
            check_composing_ready(registry, model, nested, depth + 1)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(rows: &[(i64, ModelState, &str)]) -> ModelEntry {
        let mut entry = ModelEntry::default();
        for &(v, state, reason) in rows {
            entry.versions.insert(
                v,
                VersionEntry {
                    state,
                    reason: reason.into(),
                    loaded: None,
                    fingerprint: None,
                },
            );
        }
        entry
    }

    #[test]
    fn strict_readiness_follows_triton() {
        let mut registry = Registry::default();
        assert!(
            registry.all_ready(),
            "nothing loaded (explicit mode) is ready"
        );
        registry.set("a".into(), model(&[(1, ModelState::Ready, "")]));
        registry.set("b".into(), model(&[(1, ModelState::Unavailable, UNLOADED)]));
        assert!(registry.all_ready(), "unloaded versions do not count");
        registry.set("c".into(), model(&[(2, ModelState::Loading, "")]));
        assert!(!registry.all_ready());
        registry.set(
            "c".into(),
            model(&[(2, ModelState::Unavailable, "bad file")]),
        );
        assert!(!registry.all_ready());
        registry.set("c".into(), ModelEntry::failed("bad config"));
        assert!(!registry.all_ready());
    }

    #[test]
    fn serving_readiness_forgives_a_failed_version_beside_a_serving_one() {
        let mut registry = Registry::default();
        registry.set("a".into(), model(&[(1, ModelState::Ready, "")]));
        assert!(registry.all_serving());
        registry.set(
            "a".into(),
            model(&[
                (1, ModelState::Ready, ""),
                (2, ModelState::Unavailable, "bad file"),
            ]),
        );
        assert!(!registry.all_ready());
        assert!(registry.all_serving(), "version 1 serves on");
        registry.set("b".into(), model(&[(1, ModelState::Loading, "")]));
        assert!(!registry.all_serving(), "b serves nothing yet");
        registry.set("b".into(), ModelEntry::failed("bad config"));
        assert!(!registry.all_serving());
    }

    #[test]
    fn a_failure_without_versions_is_one_row() {
        let mut registry = Registry::default();
        registry.record_failure("m", "bad config".into());
        let rows = registry.index();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].version, None);
        assert_eq!(rows[0].state, Some(ModelState::Unavailable));
        assert_eq!(rows[0].reason, "bad config");
        let err = registry.resolve("m", None).unwrap_err();
        assert_eq!(
            err.message(),
            "Request for unknown model: 'm' has no available versions"
        );
    }

    #[test]
    fn unload_marks_every_version() {
        let mut registry = Registry::default();
        registry.set(
            "m".into(),
            model(&[
                (1, ModelState::Ready, ""),
                (2, ModelState::Unavailable, "x"),
            ]),
        );
        assert!(registry.unload("m").is_empty());
        let rows = registry.index();
        assert!(
            rows.iter()
                .all(|r| r.state == Some(ModelState::Unavailable) && r.reason == UNLOADED),
            "{rows:?}"
        );
        assert!(registry.unload("nope").is_empty());
    }

    #[test]
    fn loading_rows_appear_beside_existing_ones() {
        let mut registry = Registry::default();
        registry.set("m".into(), model(&[(1, ModelState::Unavailable, UNLOADED)]));
        registry.mark_loading("m", &[1, 2]);
        let states: Vec<_> = registry.index().into_iter().map(|r| r.state).collect();
        assert_eq!(
            states,
            [Some(ModelState::Loading), Some(ModelState::Loading)]
        );
    }
}
