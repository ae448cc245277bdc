//! The engine's traffic API: reading and changing a model's version
//! labels, split, shadow and fallback (see [`crate::traffic`]), from its
//! `traffic.json`, a load request or Nereid's traffic endpoint.

use std::path::Path;
use std::sync::Arc;

use nereid_core::{Error, ModelVersion};
use nereid_repository::traffic::{
    FileStamp, TrafficError, TrafficSpec, read_traffic_file, traffic_file_stamp,
};

use crate::handle::Engine;
use crate::traffic::{RouteObserver, TrafficMetrics, TrafficState, unknown_label};

/// A model's traffic settings as they are in force.
#[derive(Debug, Clone)]
pub struct TrafficView {
    pub model: String,
    pub state: Arc<TrafficState>,
}

/// A traffic file read because it changed: its settings or why they are
/// refused, and its stamp (`None`: the file is gone).
pub(crate) type ChangedFile = (Result<TrafficSpec, TrafficError>, Option<FileStamp>);

impl Engine {
    /// Sends route and shadow records to `observer` (the route log).
    pub fn set_route_observer(&self, observer: Arc<dyn RouteObserver>) {
        self.inner.traffic.set_observer(observer);
    }

    /// The version number `version` names for `model` now (`None`: the
    /// latest); a label the model lacks answers as a request naming it is
    /// answered.
    pub fn version_number(
        &self,
        model: &str,
        version: &ModelVersion,
    ) -> Result<Option<i64>, Error> {
        match version {
            ModelVersion::Label(label) => self
                .inner
                .traffic
                .label_version(model, label)
                .map(Some)
                .ok_or_else(|| unknown_label(model, label, self.has_labels(model))),
            version => Ok(version.number()),
        }
    }

    /// Whether `model` has version labels.
    pub fn has_labels(&self, model: &str) -> bool {
        self.inner
            .traffic
            .state(model)
            .is_some_and(|s| !s.spec.labels.is_empty())
    }

    /// The traffic settings of a loaded model (empty when it has none).
    pub fn traffic(&self, model: &str) -> Result<TrafficView, Error> {
        self.model(model, None)?;
        Ok(TrafficView {
            model: model.to_string(),
            state: self.inner.traffic.state(model).unwrap_or_default(),
        })
    }

    /// Changes `model`'s settings by `update` (JSON, merged as
    /// [`TrafficSpec::merged`] says). Every version it names must be
    /// loaded; nothing is reloaded, and requests in flight finish on the
    /// version they were routed to.
    pub async fn update_traffic(&self, model: &str, update: &str) -> Result<TrafficView, Error> {
        let engine = self.clone();
        let (model, update) = (model.to_string(), update.to_string());
        self.blocking(move || engine.update_traffic_now(&model, &update))
            .await
            .map_err(|e| Error::internal(format!("the traffic task failed: {e}")))?
    }

    /// [`Engine::update_traffic`] on this thread, serialized with the
    /// model's loads by its lock.
    pub(crate) fn update_traffic_now(
        &self,
        model: &str,
        update: &str,
    ) -> Result<TrafficView, Error> {
        let lock = self.model_lock(model);
        let _serialized = lock.lock();
        self.model(model, None)?;
        let current = self.inner.traffic.state(model).unwrap_or_default();
        let spec = current.spec.merged(model, update)?;
        let registry = self.inner.registry.read();
        let state = self
            .inner
            .traffic
            .apply(model, spec, current.stamp(), &*registry)?;
        drop(registry);
        tracing::info!(model, labels = ?state.spec.labels, "traffic settings changed");
        self.warn_missing_fallback(model, &state.spec);
        Ok(TrafficView {
            model: model.to_string(),
            state,
        })
    }

    /// Moves `label` of `model` back to the version it named before its
    /// last move: instant, since that version stayed loaded.
    pub async fn rollback_label(&self, model: &str, label: &str) -> Result<TrafficView, Error> {
        let engine = self.clone();
        let (model, label) = (model.to_string(), label.to_string());
        self.blocking(move || {
            let lock = engine.model_lock(&model);
            let _serialized = lock.lock();
            engine.model(&model, None)?;
            let registry = engine.inner.registry.read();
            let state = engine.inner.traffic.rollback(&model, &label, &*registry)?;
            drop(registry);
            tracing::info!(model, label, labels = ?state.spec.labels, "label rolled back");
            Ok(TrafficView { model, state })
        })
        .await
        .map_err(|e| Error::internal(format!("the traffic task failed: {e}")))?
    }

    /// The labels and counters of every model with traffic settings.
    pub fn traffic_metrics(&self) -> Vec<TrafficMetrics> {
        self.inner.traffic.metrics()
    }

    /// Route log records dropped; `None` when there is no route log.
    pub fn route_log_dropped(&self) -> Option<u64> {
        self.inner.traffic.observer_dropped()
    }

    /// Reads `model`'s traffic file when it changed since its settings
    /// were applied: `None` when it did not.
    pub(crate) fn changed_traffic_file(&self, model: &str, dir: &Path) -> Option<ChangedFile> {
        let applied = self.inner.traffic.applied_stamp(model);
        let now = traffic_file_stamp(dir);
        if now == applied {
            return None;
        }
        match read_traffic_file(model, dir) {
            Ok(Some((spec, stamp))) => Some((Ok(spec), Some(stamp))),
            // Gone: the settings it gave go with it.
            Ok(None) => applied.map(|_| (Ok(TrafficSpec::default()), None)),
            Err(e) => Some((Err(e), now)),
        }
    }

    /// Puts the settings of a changed traffic file in force; refused ones
    /// are logged and the previous settings stay.
    pub(crate) fn apply_traffic_file(
        &self,
        model: &str,
        spec: Result<TrafficSpec, TrafficError>,
        stamp: Option<FileStamp>,
    ) {
        let applied = spec.map_err(Error::from).and_then(|spec| {
            let registry = self.inner.registry.read();
            self.inner.traffic.apply(model, spec, stamp, &*registry)
        });
        match applied {
            Ok(state) => {
                tracing::info!(model, labels = ?state.spec.labels, "traffic settings applied from traffic.json");
                self.warn_missing_fallback(model, &state.spec);
            }
            Err(e) => {
                tracing::error!(model, error = %e.message(), "traffic.json refused; the previous settings stay");
            }
        }
    }

    /// Warns when `spec`'s fallback model is neither loaded nor in the
    /// model repository: the settings stand, but no request can go to it.
    fn warn_missing_fallback(&self, model: &str, spec: &TrafficSpec) {
        let Some(fallback) = &spec.fallback else {
            return;
        };
        // The local scan only: a cloud repository's copy is as its last
        // refresh left it, and a load must not wait for a listing here.
        let known = self.model(&fallback.model, None).is_ok()
            || self
                .inner
                .repository
                .scan()
                .is_ok_and(|dirs| dirs.iter().any(|d| d.name == fallback.model));
        if !known {
            tracing::warn!(
                model,
                fallback = %fallback.model,
                "the fallback model is not in the model repository: until it is, requests stay on the model however long its queue"
            );
        }
    }

    /// Poll mode: applies a model's traffic file when only it changed.
    /// Skipped while the model loads (the load reads the file itself).
    pub(crate) fn refresh_traffic(&self, model: &str, dir: &Path) {
        if !self.inner.registry.read().contains(model) {
            return;
        }
        let lock = self.model_lock(model);
        let Some(_serialized) = lock.try_lock() else {
            return;
        };
        if let Some((spec, stamp)) = self.changed_traffic_file(model, dir) {
            self.apply_traffic_file(model, spec, stamp);
        }
    }
}
