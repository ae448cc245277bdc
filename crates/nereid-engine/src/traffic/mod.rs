//! Traffic management inside the server: version labels a request may
//! name where a version goes, weighted and sticky splits of the requests
//! that name no version, shadow copies to another version, and a fallback
//! model while a model's queue is too long. A model's settings come from
//! its `traffic.json`, the repository API's load parameters or Nereid's
//! traffic endpoint (see `nereid_repository::traffic` for the format) and
//! are swapped in whole: a label moves atomically, between two requests,
//! with nothing reloaded. Versions a label names, or named before its
//! last move (for a rollback), stay loaded whatever the version policy.

mod degrade;
mod shadow;
mod split;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nereid_core::{
    Error, InferRequest, InferResponse, InputTensor, ModelVersion, Parameter, Routing, Tensor,
};
use nereid_repository::traffic::{DEFAULT_STICKY_KEY, FileStamp, TrafficSpec};
use parking_lot::{Mutex, RwLock};
use tokio::sync::oneshot;

use crate::model::LoadedVersion;
use crate::registry::Registry;
use degrade::Degrade;
pub use shadow::ShadowCounts;
use shadow::{ShadowCounters, ShadowJob, ShadowQueue};
use split::Split;

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
struct ModelTraffic {
    state: RwLock<Arc<TrafficState>>,
    counters: Counters,
    degrade: Degrade,
    shadow: Mutex<Option<ShadowQueue>>,
}

impl ModelTraffic {
    fn new(state: TrafficState) -> ModelTraffic {
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

/// Every model's traffic settings.
pub(crate) struct Traffic {
    models: RwLock<HashMap<String, Arc<ModelTraffic>>>,
    observer: RwLock<Arc<dyn RouteObserver>>,
}

impl Default for Traffic {
    fn default() -> Self {
        Traffic {
            models: RwLock::default(),
            observer: RwLock::new(Arc::new(Unobserved)),
        }
    }
}

/// Where a request goes, and what to do when it is answered.
pub(crate) struct Route {
    pub version: Arc<LoadedVersion>,
    note: Option<RouteNote>,
}

struct RouteNote {
    traffic: Arc<ModelTraffic>,
    observer: Arc<dyn RouteObserver>,
    model: String,
    label: Option<String>,
    routed_by: RoutedBy,
    key: Option<String>,
    fallback: Option<String>,
    started: Instant,
    log_tensors: bool,
    shadow: Option<ShadowTicket>,
}

/// A shadow copy about to be queued, waiting for the served answer.
struct ShadowTicket {
    version: Arc<LoadedVersion>,
    tolerance: f64,
}

impl Traffic {
    pub fn set_observer(&self, observer: Arc<dyn RouteObserver>) {
        *self.observer.write() = observer;
    }

    fn get(&self, model: &str) -> Option<Arc<ModelTraffic>> {
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
        registry: &Registry,
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
        registry: &Registry,
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

    /// Chooses the version `request` runs on: the one it names (by number
    /// or label), else by the split, else by the version policy; or the
    /// fallback model while the model's queue is too long. Sets the
    /// request's version (and model, for a fallback) to the choice.
    pub fn route(&self, registry: &Registry, request: &mut InferRequest) -> Result<Route, Error> {
        let Some(traffic) = self.get(&request.model_name) else {
            return plain(registry, request);
        };
        let state = Arc::clone(&traffic.state.read());
        let model = request.model_name.clone();
        if let ModelVersion::Label(label) = &request.routing.version {
            let version = state
                .spec
                .labels
                .get(label)
                .ok_or_else(|| unknown_label(&model, label, true))?;
            request.routing.version = ModelVersion::Number(*version);
        }
        let key = state.sticky_key(request);
        let (mut routed_by, fallback) = match request.routing.version {
            ModelVersion::Latest => choose(&traffic, &state, registry, request, key.as_deref()),
            _ => (RoutedBy::Request, None),
        };
        let version = match registry.resolve(&request.model_name, request.routing.version.number())
        {
            Ok(version) => version,
            // A version the split chose that cannot serve now (being
            // replaced): the policy's version serves instead.
            Err(_) if matches!(routed_by, RoutedBy::Key | RoutedBy::Weight) => {
                routed_by = RoutedBy::Policy;
                registry.resolve(&model, None)?
            }
            Err(e) => return Err(e),
        };
        request.routing.version = ModelVersion::Number(version.version);
        let shadow = match fallback {
            None => shadow_ticket(&state, registry, &model, version.version),
            Some(_) => None,
        };
        let log_tensors = state.spec.log_tensors > 0.0 && split::unit() < state.spec.log_tensors;
        let label = match &fallback {
            None => state.label_of(version.version).map(str::to_string),
            Some(_) => None,
        };
        Ok(Route {
            version,
            note: Some(RouteNote {
                observer: Arc::clone(&self.observer.read()),
                traffic,
                model,
                label,
                routed_by,
                key,
                fallback,
                started: Instant::now(),
                log_tensors,
                shadow,
            }),
        })
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

/// The version for a request that names none: the fallback model's while
/// the model's queue is too long, else the split's choice, else the
/// policy's. Sets the request's model and version; answers how it was
/// chosen and the fallback model, if that serves.
fn choose(
    traffic: &ModelTraffic,
    state: &TrafficState,
    registry: &Registry,
    request: &mut InferRequest,
    key: Option<&str>,
) -> (RoutedBy, Option<String>) {
    if let Some(spec) = &state.spec.fallback
        && let Ok(primary) = registry.resolve_own(&request.model_name, None)
        && traffic.degrade.is_degraded(&primary.stats, spec.queue_ms)
        && let Ok(version) = registry.resolve(&spec.model, None)
    {
        traffic.counters.fallback.fetch_add(1, Ordering::Relaxed);
        request.model_name.clone_from(&spec.model);
        request.routing.version = ModelVersion::Number(version.version);
        return (RoutedBy::Fallback, Some(spec.model.clone()));
    }
    let Some(split) = &state.split else {
        return (RoutedBy::Policy, None);
    };
    request.routing.version = ModelVersion::Number(split.choose(key));
    match key {
        Some(_) => (RoutedBy::Key, None),
        None => (RoutedBy::Weight, None),
    }
}

/// The shadow copy's version for a request `served` answers, when the
/// settings ask for one and the draw takes this request.
fn shadow_ticket(
    state: &TrafficState,
    registry: &Registry,
    model: &str,
    served: i64,
) -> Option<ShadowTicket> {
    let spec = state.spec.shadow.as_ref()?;
    let target = state.spec.version_of(&spec.version)?;
    let take = target != served && spec.fraction > 0.0 && split::unit() < spec.fraction;
    take.then(|| {
        registry
            .resolve_own(model, Some(target))
            .ok()
            .map(|v| ShadowTicket {
                version: v,
                tolerance: spec.tolerance,
            })
    })?
}

/// A request to a model without traffic settings.
fn plain(registry: &Registry, request: &InferRequest) -> Result<Route, Error> {
    let version = match &request.routing.version {
        ModelVersion::Label(label) => return Err(unknown_label(&request.model_name, label, false)),
        version => version.number(),
    };
    Ok(Route {
        version: registry.resolve(&request.model_name, version)?,
        note: None,
    })
}

/// The answer to a request naming `label`, which `model` does not have:
/// for a model with labels, that it has no such label; for one without,
/// Triton's words for a version that is not a number.
pub(crate) fn unknown_label(model: &str, label: &str, has_labels: bool) -> Error {
    if has_labels {
        Error::not_found(format!(
            "Request for unknown model: '{model}' has no version label '{label}'"
        ))
    } else {
        Error::invalid_argument(format!(
            "failed to get model version from specified version string '{label}' (details: stol), version should be an integral value > 0"
        ))
    }
}

/// What happens around a routed request's run: the shadow copy taken
/// before it, the record after it.
pub(crate) struct Watch {
    note: Option<RouteNote>,
    request_id: String,
    tensors: Option<Vec<InputTensor>>,
    answer: Option<oneshot::Sender<Result<InferResponse, String>>>,
}

impl Route {
    /// Takes what the record and the shadow need of `request` (its inputs
    /// read from shared memory already), and queues the shadow copy.
    pub fn watch(&mut self, request: &InferRequest) -> Watch {
        let Some(mut note) = self.note.take() else {
            return Watch {
                note: None,
                request_id: String::new(),
                tensors: None,
                answer: None,
            };
        };
        let tensors = note.log_tensors.then(|| request.inputs.clone());
        let answer = note.shadow.take().and_then(|ticket| {
            let queue = shadow_queue(&note)?;
            let (sender, receiver) = oneshot::channel();
            let job = ShadowJob {
                request: InferRequest {
                    trace: None,
                    routing: Routing {
                        version: ModelVersion::Number(ticket.version.version),
                        ..request.routing.clone()
                    },
                    ..request.clone()
                },
                primary_version: self.version.version,
                shadow: ticket.version,
                tolerance: ticket.tolerance,
                answer: receiver,
            };
            queue
                .offer(job, &note.traffic.counters.shadow)
                .then_some(sender)
        });
        Watch {
            note: Some(note),
            request_id: request.id.clone(),
            tensors,
            answer,
        }
    }
}

/// The model's shadow queue, started on first use (and again when the
/// queue's size changed).
fn shadow_queue(note: &RouteNote) -> Option<ShadowQueue> {
    let capacity = note.traffic.state.read().spec.shadow.as_ref()?.queue;
    let mut slot = note.traffic.shadow.lock();
    if slot.as_ref().is_none_or(|q| q.capacity() != capacity) {
        *slot = ShadowQueue::start(
            note.model.clone(),
            capacity,
            Arc::clone(&note.traffic.counters.shadow),
            Arc::clone(&note.observer),
        );
    }
    slot.clone()
}

impl Watch {
    /// Records the answer: the route log, the shadow's comparison, and the
    /// fallback mark in the response.
    pub fn finish(self, version: i64, result: &mut Result<InferResponse, Error>) {
        let Some(note) = self.note else {
            return;
        };
        if let (Some(_), Ok(response)) = (&note.fallback, result.as_mut()) {
            response.parameters.insert(
                FALLBACK_PARAMETER.to_string(),
                Parameter::String(note.model.clone()),
            );
        }
        if let Some(answer) = self.answer {
            let _ = answer.send(match result {
                Ok(response) => Ok(response.clone()),
                Err(e) => Err(e.message().to_string()),
            });
        }
        let tensors = self.tensors.map(|inputs| {
            let outputs = result
                .as_ref()
                .map(|r| r.outputs.clone())
                .unwrap_or_default();
            (inputs, outputs)
        });
        note.observer.routed(RouteRecord {
            model: note.model,
            version,
            label: note.label,
            routed_by: note.routed_by,
            request_id: self.request_id,
            key: note.key,
            fallback: note.fallback,
            latency: note.started.elapsed(),
            error: result.as_ref().err().map(|e| e.message().to_string()),
            tensors,
        });
    }
}
