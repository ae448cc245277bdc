//! Traffic management inside the server: version labels a request may
//! name where a version goes, weighted and sticky splits of the requests
//! that name no version, shadow copies to another version, and a fallback
//! model while a model's queue is too long. A model's settings come from
//! its `traffic.json`, the repository API's load parameters or Nereid's
//! traffic endpoint (see `nereid_repository::traffic` for the format) and
//! are swapped in whole: a label moves atomically, between two requests,
//! with nothing reloaded. Versions a label names, or named before its
//! last move (for a rollback), stay loaded whatever the version policy.
//!
//! The engine's loaded versions and registry come in through the
//! [`Served`] and [`Versions`] traits: this crate must not depend on the
//! engine, a wire format, a frontend or a backend.

mod degrade;
mod route;
mod shadow;
mod split;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use nereid_core::exposition::Family;
use nereid_core::{Error, InferRequest, InferResponse, InputTensor, Parameter, Tensor};
use nereid_repository::traffic::{DEFAULT_STICKY_KEY, FileStamp, TrafficSpec};
use parking_lot::{Mutex, RwLock};

use degrade::Degrade;
pub use route::{Route, Watch, unknown_label};
pub use shadow::ShadowCounts;
use shadow::{ShadowCounters, ShadowQueue};
use split::Split;

/// A loaded version as traffic management sees it: its number, how its
/// queue fares (for the fallback), and a way to run a shadow copy on it.
/// The engine's loaded versions implement it.
pub trait Served: Send + Sync + 'static {
    fn version(&self) -> i64;
    /// Requests queued so far, and the nanoseconds they waited in all.
    fn queued(&self) -> (u64, u64);
    /// Requests accepted and not yet executing.
    fn pending(&self) -> u64;
    /// Runs `request` (a shadow copy) on this version.
    fn infer(&self, request: InferRequest) -> BoxFuture<'_, Result<InferResponse, Error>>;
}

/// The loaded versions, as traffic management looks them up (the
/// engine's registry).
pub trait Versions<V> {
    /// The version of `model` that serves `version` (`None`: the policy's).
    fn resolve(&self, model: &str, version: Option<i64>) -> Result<Arc<V>, Error>;
    /// As [`Versions::resolve`], for `model`'s own versions only: never an
    /// ensemble's readiness through its composing models.
    fn resolve_own(&self, model: &str, version: Option<i64>) -> Result<Arc<V>, Error>;
}

/// The response parameter that marks an answer a fallback model gave; its
/// value names the model the request was for.
pub const FALLBACK_PARAMETER: &str = "fallback_from";

/// One request to a model with traffic settings, for the route log.
#[derive(Debug, Clone)]
pub struct RouteRecord {
    pub model: String,
    /// The version that answered (of `fallback` when it is set).
    pub version: i64,
    /// The label of that version, if one names it.
    pub label: Option<String>,
    /// How the version was chosen.
    pub routed_by: RoutedBy,
    pub request_id: String,
    /// The sticky key the request carried.
    pub key: Option<String>,
    /// The fallback model that answered instead.
    pub fallback: Option<String>,
    pub latency: Duration,
    /// The error the client got, if it got one.
    pub error: Option<String>,
    /// Inputs and outputs, for the sampled share of requests.
    pub tensors: Option<(Vec<InputTensor>, Vec<Tensor>)>,
}

/// How a request's version was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoutedBy {
    /// The request named the version (or a label of it).
    Request,
    /// The split, by the request's sticky key.
    Key,
    /// The split, at random by weight.
    Weight,
    /// The model's own version policy (no split is set).
    Policy,
    /// The model's queue was too long: the fallback model answered.
    Fallback,
}

impl RoutedBy {
    pub fn as_str(self) -> &'static str {
        match self {
            RoutedBy::Request => "request",
            RoutedBy::Key => "key",
            RoutedBy::Weight => "weight",
            RoutedBy::Policy => "policy",
            RoutedBy::Fallback => "fallback",
        }
    }
}

/// One shadow copy's outcome.
#[derive(Debug, Clone)]
pub struct ShadowRecord {
    pub model: String,
    pub primary_version: i64,
    pub shadow_version: i64,
    pub request_id: String,
    /// How long the shadow took.
    pub latency: Duration,
    pub outcome: ShadowOutcome,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ShadowOutcome {
    Match,
    Mismatch {
        output: String,
        detail: String,
    },
    /// The shadow failed.
    Failed(String),
    /// The shadow answered where the served version failed.
    PrimaryFailed(String),
}

/// Where route and shadow records go (the server's route log).
pub trait RouteObserver: Send + Sync {
    fn routed(&self, record: RouteRecord);
    fn shadowed(&self, record: ShadowRecord);
    /// Records dropped because the observer fell behind; `None` when
    /// records go nowhere.
    fn dropped(&self) -> Option<u64> {
        None
    }
}

/// Records go nowhere.
struct Unobserved;

impl RouteObserver for Unobserved {
    fn routed(&self, _: RouteRecord) {}
    fn shadowed(&self, _: ShadowRecord) {}
}

/// A model's settings as applied to its loaded versions.
#[derive(Debug, Clone, Default)]
pub struct TrafficState {
    pub spec: TrafficSpec,
    /// The version each label named before its last move: where a
    /// rollback takes it back to.
    pub previous: BTreeMap<String, i64>,
    /// The traffic file these settings came from, when they did.
    stamp: Option<FileStamp>,
    split: Option<Split>,
}

impl TrafficState {
    /// The traffic file these settings came from, when they did.
    pub fn stamp(&self) -> Option<FileStamp> {
        self.stamp
    }

    /// The split in force: each version's share of the requests that
    /// name no version (empty without a split).
    pub fn shares(&self) -> Vec<(i64, f64)> {
        self.split
            .as_ref()
            .map(|s| s.shares().collect())
            .unwrap_or_default()
    }

    /// The label naming `version`, if any (the first by name).
    pub fn label_of(&self, version: i64) -> Option<&str> {
        self.spec
            .labels
            .iter()
            .find(|(_, v)| **v == version)
            .map(|(l, _)| l.as_str())
    }

    /// The sticky key of `request`: the parameter the settings name, or
    /// the request's own routing key.
    fn sticky_key(&self, request: &InferRequest) -> Option<String> {
        let named = match self.spec.sticky_key.as_deref() {
            Some(name) if name != DEFAULT_STICKY_KEY => request.parameters.get(name),
            _ => None,
        };
        match named {
            Some(Parameter::String(s)) => Some(s.clone()),
            Some(Parameter::Int64(v)) => Some(v.to_string()),
            Some(Parameter::Uint64(v)) => Some(v.to_string()),
            _ => request.routing.routing_key.clone(),
        }
    }

    /// Versions that must stay loaded: named by a label now or before.
    fn pinned(&self) -> impl Iterator<Item = i64> + '_ {
        self.spec
            .labels
            .values()
            .chain(self.previous.values())
            .copied()
    }
}

/// Counters of one model's traffic, kept across settings changes.
#[derive(Debug, Default)]
struct Counters {
    fallback: AtomicU64,
    shadow: Arc<ShadowCounters>,
}

/// One model's traffic: its settings, counters and running parts.
struct ModelTraffic<V> {
    state: RwLock<Arc<TrafficState>>,
    counters: Counters,
    degrade: Degrade,
    shadow: Mutex<Option<ShadowQueue<V>>>,
}

impl<V: Served> ModelTraffic<V> {
    fn new(state: TrafficState) -> ModelTraffic<V> {
        ModelTraffic {
            state: RwLock::new(Arc::new(state)),
            counters: Counters::default(),
            degrade: Degrade::default(),
            shadow: Mutex::new(None),
        }
    }
}

/// A model's labels and counters, for the metrics endpoint.
#[derive(Debug, Clone)]
pub struct TrafficMetrics {
    pub model: String,
    pub labels: BTreeMap<String, i64>,
    pub fallback: u64,
    pub shadow: ShadowCounts,
}

/// Traffic management's metric families (Nereid's own names): the version
/// each label names (`nereid_version_label`), requests a fallback model
/// answered (`nereid_fallback_requests_total`), shadow copies by outcome
/// (`nereid_shadow_requests_total`) and, when a route log is kept, its
/// lines dropped (`nereid_route_log_dropped_total`). Requests per version
/// are in Triton's per-version families already.
pub fn families(models: &[TrafficMetrics], route_log_dropped: Option<u64>) -> Vec<Family> {
    let mut labels = Family::gauge(
        "nereid_version_label",
        "The version a model's version label names",
    );
    let mut fallback = Family::counter(
        "nereid_fallback_requests_total",
        "Requests for the model that its fallback model answered while its queue was too long",
    );
    let mut shadow = Family::counter(
        "nereid_shadow_requests_total",
        "Shadow copies of the model's requests, by outcome (match, mismatch, failed, dropped)",
    );
    for m in models {
        for (label, &version) in &m.labels {
            let series = vec![("model", m.model.clone()), ("label", label.clone())];
            labels.add(series, version as f64);
        }
        fallback.add(vec![("model", m.model.clone())], m.fallback as f64);
        for (outcome, count) in [
            ("match", m.shadow.matched),
            ("mismatch", m.shadow.mismatched),
            ("failed", m.shadow.failed),
            ("dropped", m.shadow.dropped),
        ] {
            let series = vec![("model", m.model.clone()), ("outcome", outcome.to_string())];
            shadow.add(series, count as f64);
        }
    }
    let mut dropped = Family::counter(
        "nereid_route_log_dropped_total",
        "Route log lines dropped because the writer fell behind",
    );
    if let Some(count) = route_log_dropped {
        dropped.add(Vec::new(), count as f64);
    }
    vec![labels, fallback, shadow, dropped]
}

/// Every model's traffic settings.
pub struct Traffic<V> {
    models: RwLock<HashMap<String, Arc<ModelTraffic<V>>>>,
    observer: RwLock<Arc<dyn RouteObserver>>,
}

impl<V> std::fmt::Debug for Traffic<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Traffic")
            .field("models", &self.models.read().len())
            .finish_non_exhaustive()
    }
}

impl<V: Served> Default for Traffic<V> {
    fn default() -> Self {
        Traffic {
            models: RwLock::default(),
            observer: RwLock::new(Arc::new(Unobserved)),
        }
    }
}

impl<V: Served> Traffic<V> {
    pub fn set_observer(&self, observer: Arc<dyn RouteObserver>) {
        *self.observer.write() = observer;
    }

    fn get(&self, model: &str) -> Option<Arc<ModelTraffic<V>>> {
        self.models.read().get(model).cloned()
    }

    /// The settings of `model` now.
    pub fn state(&self, model: &str) -> Option<Arc<TrafficState>> {
        Some(Arc::clone(&self.get(model)?.state.read()))
    }

    /// The version `label` of `model` names now.
    pub fn label_version(&self, model: &str, label: &str) -> Option<i64> {
        self.state(model)?.spec.labels.get(label).copied()
    }

    /// The versions of `model` that labels keep loaded.
    pub fn pinned(&self, model: &str) -> BTreeSet<i64> {
        self.state(model)
            .map(|s| s.pinned().collect())
            .unwrap_or_default()
    }

    /// The traffic file stamp the settings of `model` came from.
    pub fn applied_stamp(&self, model: &str) -> Option<FileStamp> {
        self.state(model)?.stamp
    }

    /// Forgets `model`'s settings (it was unloaded or removed).
    pub fn remove(&self, model: &str) {
        self.models.write().remove(model);
    }

    /// Puts `spec` in force for `model`, checked against the versions
    /// `registry` has serving. Labels that move remember where they were.
    pub fn apply(
        &self,
        model: &str,
        spec: TrafficSpec,
        stamp: Option<FileStamp>,
        registry: &dyn Versions<V>,
    ) -> Result<Arc<TrafficState>, Error> {
        let current = self.state(model).unwrap_or_default();
        let serving = |name: &str, what: &str| -> Result<i64, Error> {
            let version = spec.version_of(name).ok_or_else(|| {
                Error::invalid_argument(format!("{what} names unknown label '{name}'"))
            })?;
            registry.resolve_own(model, Some(version)).map_err(|_| {
                Error::invalid_argument(format!(
                    "{what} names version {version} of model '{model}', which is not loaded: a label or weight may only name a loaded version"
                ))
            })?;
            Ok(version)
        };
        for (label, version) in &spec.labels {
            serving(&version.to_string(), &format!("label '{label}'"))?;
        }
        let mut weights = Vec::new();
        for (target, &weight) in &spec.split {
            weights.push((serving(target, "the split")?, weight));
        }
        if let Some(shadow) = &spec.shadow {
            serving(&shadow.version, "the shadow")?;
        }
        let mut previous = current.previous.clone();
        for (label, &version) in &current.spec.labels {
            match spec.labels.get(label) {
                Some(&now) if now != version => {
                    previous.insert(label.clone(), version);
                }
                Some(_) => {}
                None => {
                    previous.remove(label);
                }
            }
        }
        let state = Arc::new(TrafficState {
            split: Split::new(weights),
            spec,
            previous,
            stamp,
        });
        self.install(model, Arc::clone(&state));
        Ok(state)
    }

    /// Moves `label` back to the version it named before its last move.
    pub fn rollback(
        &self,
        model: &str,
        label: &str,
        registry: &dyn Versions<V>,
    ) -> Result<Arc<TrafficState>, Error> {
        let current = self.state(model).unwrap_or_default();
        let Some(&back) = current.previous.get(label) else {
            return Err(Error::invalid_argument(format!(
                "label '{label}' of model '{model}' has not moved: there is nothing to roll back to"
            )));
        };
        let mut spec = current.spec.clone();
        spec.labels.insert(label.to_string(), back);
        self.apply(model, spec, current.stamp, registry)
    }

    fn install(&self, model: &str, state: Arc<TrafficState>) {
        let empty = state.spec == TrafficSpec::default() && state.previous.is_empty();
        let mut models = self.models.write();
        match models.get(model) {
            Some(traffic) => {
                *traffic.state.write() = state;
                if empty {
                    models.remove(model);
                }
            }
            None if empty => {}
            None => {
                models.insert(
                    model.to_string(),
                    Arc::new(ModelTraffic::new((*state).clone())),
                );
            }
        }
    }

    /// Records the observer dropped; `None` without an observer.
    pub fn observer_dropped(&self) -> Option<u64> {
        self.observer.read().dropped()
    }

    /// The labels and counters of every model with traffic settings.
    pub fn metrics(&self) -> Vec<TrafficMetrics> {
        let mut rows: Vec<TrafficMetrics> = self
            .models
            .read()
            .iter()
            .map(|(model, traffic)| TrafficMetrics {
                model: model.clone(),
                labels: traffic.state.read().spec.labels.clone(),
                fallback: traffic.counters.fallback.load(Ordering::Relaxed),
                shadow: traffic.counters.shadow.snapshot(),
            })
            .collect();
        rows.sort_by(|a, b| a.model.cmp(&b.model));
        rows
    }
}
