//! The way of one request: the version it runs on (the one it names, by
//! number or label, else the fallback model's or the split's choice, else
//! the policy's), the shadow copy taken before it runs, and the record
//! after it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use nereid_core::{
    Error, InferRequest, InferResponse, InputTensor, ModelVersion, Parameter, Routing,
};
use tokio::sync::oneshot;

use super::shadow::{ShadowJob, ShadowQueue};
use super::{
    FALLBACK_PARAMETER, ModelTraffic, RouteObserver, RouteRecord, RoutedBy, Served, Traffic,
    TrafficState, Versions, split,
};

/// Where a request goes, and what to do when it is answered.
pub struct Route<V: Served> {
    pub version: Arc<V>,
    note: Option<RouteNote<V>>,
}

struct RouteNote<V: Served> {
    traffic: Arc<ModelTraffic<V>>,
    observer: Arc<dyn RouteObserver>,
    model: String,
    label: Option<String>,
    routed_by: RoutedBy,
    key: Option<String>,
    fallback: Option<String>,
    started: Instant,
    log_tensors: bool,
    shadow: Option<ShadowTicket<V>>,
}

/// A shadow copy about to be queued, waiting for the served answer.
struct ShadowTicket<V> {
    version: Arc<V>,
    tolerance: f64,
}

impl<V: Served> std::fmt::Debug for Route<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route")
            .field("version", &self.version.version())
            .finish_non_exhaustive()
    }
}

impl<V: Served> Traffic<V> {
    /// Chooses the version `request` runs on: the one it names (by number
    /// or label), else by the split, else by the version policy; or the
    /// fallback model while the model's queue is too long. Sets the
    /// request's version (and model, for a fallback) to the choice.
    pub fn route(
        &self,
        registry: &dyn Versions<V>,
        request: &mut InferRequest,
    ) -> Result<Route<V>, Error> {
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
        request.routing.version = ModelVersion::Number(version.version());
        let shadow = match fallback {
            None => shadow_ticket(&state, registry, &model, version.version()),
            Some(_) => None,
        };
        let log_tensors = state.spec.log_tensors > 0.0 && split::unit() < state.spec.log_tensors;
        let label = match &fallback {
            None => state.label_of(version.version()).map(str::to_string),
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
}

/// The version for a request that names none: the fallback model's while
/// the model's queue is too long, else the split's choice, else the
/// policy's. Sets the request's model and version; answers how it was
/// chosen and the fallback model, if that serves.
fn choose<V: Served>(
    traffic: &ModelTraffic<V>,
    state: &TrafficState,
    registry: &dyn Versions<V>,
    request: &mut InferRequest,
    key: Option<&str>,
) -> (RoutedBy, Option<String>) {
    if let Some(spec) = &state.spec.fallback
        && let Ok(primary) = registry.resolve_own(&request.model_name, None)
        && traffic.degrade.is_degraded(&*primary, spec.queue_ms)
        && let Ok(version) = registry.resolve(&spec.model, None)
    {
        traffic.counters.fallback.fetch_add(1, Ordering::Relaxed);
        request.model_name.clone_from(&spec.model);
        request.routing.version = ModelVersion::Number(version.version());
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
fn shadow_ticket<V: Served>(
    state: &TrafficState,
    registry: &dyn Versions<V>,
    model: &str,
    served: i64,
) -> Option<ShadowTicket<V>> {
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
fn plain<V: Served>(registry: &dyn Versions<V>, request: &InferRequest) -> Result<Route<V>, Error> {
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
pub fn unknown_label(model: &str, label: &str, has_labels: bool) -> Error {
    if has_labels {
        Error::not_found(format!(
            "Request for unknown model: '{model}' has no version label '{label}'"
        ))
    } else {
        nereid_core::routing::not_a_version_number(label)
    }
}

/// What happens around a routed request's run: the shadow copy taken
/// before it, the record after it.
pub struct Watch<V: Served> {
    note: Option<RouteNote<V>>,
    request_id: String,
    tensors: Option<Vec<InputTensor>>,
    answer: Option<oneshot::Sender<Result<InferResponse, String>>>,
}

impl<V: Served> std::fmt::Debug for Watch<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("request_id", &self.request_id)
            .finish_non_exhaustive()
    }
}

impl<V: Served> Route<V> {
    /// Takes what the record and the shadow need of `request` (its inputs
    /// read from shared memory already), and queues the shadow copy.
    pub fn watch(&mut self, request: &InferRequest) -> Watch<V> {
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
                        version: ModelVersion::Number(ticket.version.version()),
                        ..request.routing.clone()
                    },
                    ..request.clone()
                },
                primary_version: self.version.version(),
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
fn shadow_queue<V: Served>(note: &RouteNote<V>) -> Option<ShadowQueue<V>> {
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

impl<V: Served> Watch<V> {
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
