//! The table of models the engine knows, with each version's state. Plain
//! data with sync methods; the engine holds it behind a lock.

use std::collections::BTreeMap;
use std::sync::Arc;

use nereid_core::Error;

use crate::model::LoadedVersion;

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
}

/// One model: a model-level failure reason, and its versions.
#[derive(Debug, Clone, Default)]
pub struct ModelEntry {
    /// Why the model as a whole is unavailable (bad config, no version).
    pub failure: Option<String>,
    pub versions: BTreeMap<i64, VersionEntry>,
}

/// A row of the repository index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    pub name: String,
    /// `None` for a model that failed before any version was known.
    pub version: Option<i64>,
    pub state: ModelState,
    pub reason: String,
}

/// Every model by name.
#[derive(Debug, Default)]
pub struct Registry {
    models: BTreeMap<String, ModelEntry>,
}

impl Registry {
    pub fn set(&mut self, name: String, entry: ModelEntry) {
        self.models.insert(name, entry);
    }

    /// The loaded version a request for `name` / `version` goes to: the one
    /// asked for, or the highest ready version.
    pub fn resolve(&self, name: &str, version: Option<i64>) -> Result<Arc<LoadedVersion>, Error> {
        let model = self
            .models
            .get(name)
            .ok_or_else(|| Error::not_found(unknown_model(name, version)))?;
        let loaded = match version {
            Some(v) => model
                .versions
                .get(&v)
                .and_then(|e| e.loaded.clone())
                .ok_or_else(|| {
                    if model.versions.contains_key(&v) {
                        Error::unavailable(format!(
                            "Request for unknown model: '{name}' version {v} is not at ready state"
                        ))
                    } else {
                        Error::not_found(unknown_model(name, version))
                    }
                })?,
            None => model
                .versions
                .values()
                .rev()
                .find_map(|e| e.loaded.clone())
                .ok_or_else(|| {
                    Error::unavailable(format!(
                        "Request for unknown model: '{name}' has no available versions"
                    ))
                })?,
        };
        Ok(loaded)
    }

    /// Whether `name` (at `version`, or any version) is ready.
    pub fn is_ready(&self, name: &str, version: Option<i64>) -> bool {
        self.resolve(name, version).is_ok()
    }

    /// Whether every known model has a ready version and no failure.
    pub fn all_ready(&self) -> bool {
        self.models.values().all(|m| {
            m.failure.is_none() && m.versions.values().all(|v| v.state == ModelState::Ready)
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

    /// The repository index, one row per version (or per failed model).
    pub fn index(&self) -> Vec<IndexEntry> {
        let mut rows = Vec::new();
        for (name, model) in &self.models {
            if let Some(reason) = &model.failure {
                rows.push(IndexEntry {
                    name: name.clone(),
                    version: None,
                    state: ModelState::Unavailable,
                    reason: reason.clone(),
                });
            }
            for (&version, v) in &model.versions {
                rows.push(IndexEntry {
                    name: name.clone(),
                    version: Some(version),
                    state: v.state,
                    reason: v.reason.clone(),
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
