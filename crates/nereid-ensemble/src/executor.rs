//! Runs an ensemble's steps as a DAG: a step starts as soon as every
//! ensemble tensor it reads exists, so independent steps run at the same
//! time, each through its composing model's own scheduler (the engine's
//! [`Composer`]). Tensors pass between steps as shared `Bytes`, never
//! copied. Dropping the future of [`Pipeline::run`] drops the steps in
//! flight, which abandons their requests, and starts no more.
//!
//! An ensemble with a decoupled step runs with [`Pipeline::run_stream`]:
//! every response of that step runs the steps after it on its outputs,
//! and every run that completes the outputs is one response of the
//! ensemble, as in Triton.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;

use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::{BoxStream, FuturesUnordered, StreamExt};
use nereid_core::model_config::ModelConfig;
use nereid_core::{Error, ErrorKind, InferRequest, InferResponse, InputTensor, RequestedOutput};
use nereid_core::{ModelVersion, Parameters, Routing, Tensor, Trace};

/// The answer of one composing model.
pub type StepFuture = Pin<Box<dyn Future<Output = Result<InferResponse, Error>> + Send>>;

/// The responses of a decoupled composing model, as they come (a final
/// flag sent alone gives none).
pub type StepStream = BoxStream<'static, Result<InferResponse, Error>>;

/// How an ensemble reaches the models it composes: the engine's own
/// inference, by model name and version, through each model's scheduler.
pub trait Composer: Send + Sync {
    fn infer(&self, request: InferRequest) -> StepFuture;

    /// Runs `request` on a decoupled model: its responses.
    fn infer_stream(&self, request: InferRequest) -> StepStream;

    /// Whether the model a step names is decoupled.
    fn is_decoupled(&self, model: &str, version: &ModelVersion) -> bool;
}

/// The prefix of an ensemble parameter that names a step's version by a
/// label: `version_label:<model>` → `<label>` (Triton ignores it).
pub const STEP_LABEL_PREFIX: &str = "version_label:";

/// Where [`Pipeline::run_stream`] sends the ensemble's responses, each
/// marked when it is known to be the last.
pub type Emit<'a> = dyn FnMut(Result<InferResponse, Error>, bool) + Send + 'a;

/// One step: the model it runs and which ensemble tensors (by index) it
/// reads and writes under which of the model's tensor names.
#[derive(Debug, Clone)]
struct PlannedStep {
    model: String,
    /// The step's version, or a label (from the ensemble's
    /// `version_label:<model>` parameter) that the engine resolves each
    /// time the step runs.
    version: ModelVersion,
    /// (model input name, ensemble tensor)
    inputs: Vec<(String, usize)>,
    /// (model output name, ensemble tensor)
    outputs: Vec<(String, usize)>,
}

/// An ensemble's steps, ready to run. Built from a config that passed
/// [`crate::check_config`].
#[derive(Debug, Clone)]
pub struct Pipeline {
    name: String,
    version: i64,
    tensors: Vec<String>,
    steps: Vec<PlannedStep>,
    /// The ensemble's outputs in config order: (name, tensor).
    outputs: Vec<(String, usize)>,
}

impl Pipeline {
    pub fn new(config: &ModelConfig, version: i64) -> Pipeline {
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut tensors = Vec::new();
        let mut id = |name: &str| -> usize {
            *index.entry(name.to_string()).or_insert_with(|| {
                tensors.push(name.to_string());
                tensors.len() - 1
            })
        };
        for input in &config.input {
            id(&input.name);
        }
        let mut steps = Vec::new();
        for step in crate::validate::steps(config).unwrap_or_default() {
            let map = |pairs: Vec<(&str, &str)>, id: &mut dyn FnMut(&str) -> usize| {
                pairs
                    .into_iter()
                    .map(|(model_tensor, tensor)| (model_tensor.to_string(), id(tensor)))
                    .collect()
            };
            let label = config
                .parameters
                .get(&format!("{STEP_LABEL_PREFIX}{}", step.model_name))
                .map(|p| p.string_value.clone())
                .filter(|l| !l.is_empty());
            let version = match label {
                Some(label) => ModelVersion::Label(label),
                None => ModelVersion::from((step.model_version >= 0).then_some(step.model_version)),
            };
            steps.push(PlannedStep {
                model: step.model_name.clone(),
                version,
                inputs: map(crate::validate::sorted(&step.input_map), &mut id),
                outputs: map(crate::validate::sorted(&step.output_map), &mut id),
            });
        }
        let outputs = config
            .output
            .iter()
            .map(|o| (o.name.clone(), id(&o.name)))
            .collect();
        Pipeline {
            name: config.name.clone(),
            version,
            tensors,
            steps,
            outputs,
        }
    }

    /// The models the steps run, for readiness.
    pub fn models(&self) -> impl Iterator<Item = (&str, Option<i64>)> {
        self.steps
            .iter()
            .map(|s| (s.model.as_str(), s.version.number()))
    }

    /// Runs `request` (already validated against the ensemble's config)
    /// and answers the outputs it asked for, every output when none.
    pub async fn run(
        &self,
        mut request: InferRequest,
        composer: &dyn Composer,
    ) -> Result<InferResponse, Error> {
        let mut values = self.initial_values(&mut request);
        let mut started = vec![false; self.steps.len()];
        let mut running = FuturesUnordered::new();
        loop {
            for (i, step) in self.steps.iter().enumerate() {
                if started[i] || step.inputs.iter().any(|(_, t)| values[*t].is_none()) {
                    continue;
                }
                started[i] = true;
                let step_request = self.step_request(step, &request, &values);
                let answer = composer.infer(step_request);
                running.push(async move { (i, answer.await) });
            }
            let Some((i, answer)) = running.next().await else {
                break;
            };
            let step = &self.steps[i];
            let response = answer.map_err(|e| self.step_failed(step, &e))?;
            self.store(step, response, &mut values)?;
        }
        self.respond(request.id, &request.outputs, &mut values)
    }

    /// Runs `request` on an ensemble with a decoupled step and sends each
    /// of its responses to `emit`, in order: one per response of the
    /// decoupled step that completes the outputs (the steps after it run
    /// once per response, one response after another). A failed response
    /// of the decoupled step is sent as an error and the next ones go on;
    /// any other failure ends the run with it. A response is marked last
    /// when the decoupled step had ended by the time it was made (as in
    /// Triton, where the final flag otherwise comes alone).
    pub async fn run_stream(
        &self,
        mut request: InferRequest,
        composer: &dyn Composer,
        emit: &mut Emit<'_>,
    ) -> Result<(), Error> {
        let values = self.initial_values(&mut request);
        let started = vec![false; self.steps.len()];
        self.branch(&request, composer, values, started, true, emit)
            .await
    }

    /// The ensemble tensors a request's inputs give.
    fn initial_values(&self, request: &mut InferRequest) -> Vec<Option<Tensor>> {
        let mut values: Vec<Option<Tensor>> = vec![None; self.tensors.len()];
        for input in std::mem::take(&mut request.inputs) {
            if let Some(slot) = self.tensors.iter().position(|t| *t == input.name) {
                values[slot] = Some(Tensor {
                    name: input.name,
                    datatype: input.datatype,
                    shape: input.shape,
                    data: input.data,
                });
            }
        }
        values
    }

    /// Runs the steps not yet `started` from `values` on; a decoupled
    /// step forks a branch per response once the other running steps are
    /// done. A branch that runs out of steps answers, when it has the
    /// outputs; `last` when no other branch can follow it.
    fn branch<'a>(
        &'a self,
        request: &'a InferRequest,
        composer: &'a dyn Composer,
        mut values: Vec<Option<Tensor>>,
        mut started: Vec<bool>,
        last: bool,
        emit: &'a mut Emit<'_>,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            let mut running = FuturesUnordered::new();
            let mut streaming: Vec<(usize, StepStream)> = Vec::new();
            loop {
                for (i, step) in self.steps.iter().enumerate() {
                    if started[i] || step.inputs.iter().any(|(_, t)| values[*t].is_none()) {
                        continue;
                    }
                    started[i] = true;
                    let step_request = self.step_request(step, request, &values);
                    if composer.is_decoupled(&step.model, &step.version) {
                        streaming.push((i, composer.infer_stream(step_request)));
                    } else {
                        let answer = composer.infer(step_request);
                        running.push(async move { (i, answer.await) });
                    }
                }
                if let Some((i, answer)) = running.next().await {
                    let step = &self.steps[i];
                    let response = answer.map_err(|e| self.step_failed(step, &e))?;
                    self.store(step, response, &mut values)?;
                    continue;
                }
                let Some((i, responses)) = streaming.pop() else {
                    break;
                };
                if !streaming.is_empty() {
                    return Err(Error::unsupported(format!(
                        "in ensemble '{}', two decoupled steps run at once; Nereid streams through one at a time",
                        self.name
                    )));
                }
                let step = &self.steps[i];
                let mut responses = responses.peekable();
                while let Some(answer) = responses.next().await {
                    // The step's end known already: this is its last.
                    let ended = matches!(
                        std::pin::Pin::new(&mut responses).peek().now_or_never(),
                        Some(None)
                    );
                    let forked =
                        answer
                            .map_err(|e| self.step_failed(step, &e))
                            .and_then(|response| {
                                let mut forked = values.clone();
                                self.store(step, response, &mut forked).map(|()| forked)
                            });
                    match forked {
                        Ok(forked) => {
                            let last = last && ended;
                            self.branch(request, composer, forked, started.clone(), last, emit)
                                .await?;
                        }
                        Err(e) => emit(Err(e), last && ended),
                    }
                }
                return Ok(());
            }
            emit(
                self.respond(request.id.clone(), &request.outputs, &mut values),
                last,
            );
            Ok(())
        })
    }

    fn step_request(
        &self,
        step: &PlannedStep,
        request: &InferRequest,
        values: &[Option<Tensor>],
    ) -> InferRequest {
        let inputs = step
            .inputs
            .iter()
            .filter_map(|(name, t)| {
                let tensor = values[*t].as_ref()?;
                Some(InputTensor {
                    name: name.clone(),
                    datatype: tensor.datatype,
                    shape: tensor.shape.clone(),
                    data: tensor.data.clone(),
                    parameters: Parameters::new(),
                })
            })
            .collect();
        let outputs = step
            .outputs
            .iter()
            .map(|(name, _)| RequestedOutput {
                name: name.clone(),
                parameters: Parameters::new(),
            })
            .collect();
        InferRequest {
            model_name: step.model.clone(),
            id: request.id.clone(),
            // The sequence, priority, timeout and sticky key carry over, as
            // Triton's ensemble scheduler carries them to each step.
            routing: Routing {
                version: step.version.clone(),
                ..request.routing.clone()
            },
            inputs,
            outputs,
            parameters: request.parameters.clone(),
            // Each step is traced as a child of the ensemble's request.
            trace: request.trace.as_ref().map(Trace::child),
        }
    }

    fn store(
        &self,
        step: &PlannedStep,
        response: InferResponse,
        values: &mut [Option<Tensor>],
    ) -> Result<(), Error> {
        let mut produced: HashMap<String, Tensor> = response
            .outputs
            .into_iter()
            .map(|t| (t.name.clone(), t))
            .collect();
        for (name, t) in &step.outputs {
            let Some(mut tensor) = produced.remove(name) else {
                return Err(Error::internal(format!(
                    "in ensemble '{}', model '{}' did not produce output '{name}'",
                    self.name, step.model
                )));
            };
            tensor.name.clone_from(&self.tensors[*t]);
            values[*t] = Some(tensor);
        }
        Ok(())
    }

    fn respond(
        &self,
        id: String,
        requested: &[RequestedOutput],
        values: &mut [Option<Tensor>],
    ) -> Result<InferResponse, Error> {
        let mut wanted: Vec<&str> = if requested.is_empty() {
            self.outputs.iter().map(|(name, _)| name.as_str()).collect()
        } else {
            requested.iter().map(|o| o.name.as_str()).collect()
        };
        // An output asked for twice is answered once, as Triton does.
        let mut seen = std::collections::HashSet::new();
        wanted.retain(|name| seen.insert(*name));
        let mut outputs = Vec::with_capacity(wanted.len());
        for name in wanted {
            let tensor = self
                .outputs
                .iter()
                .find(|(n, _)| n == name)
                .and_then(|(_, t)| values[*t].clone());
            let Some(tensor) = tensor else {
                return Err(Error::internal(format!(
                    "in ensemble '{}', no step produced output '{name}'",
                    self.name
                )));
            };
            outputs.push(tensor);
        }
        Ok(InferResponse {
            model_name: self.name.clone(),
            model_version: self.version,
            id,
            outputs,
            parameters: Parameters::new(),
            in_shared_memory: Vec::new(),
        })
    }

    /// A step's error, kept of its kind, naming the ensemble and the model.
    fn step_failed(&self, step: &PlannedStep, error: &Error) -> Error {
        let message = format!(
            "in ensemble '{}', step model '{}' failed: {}",
            self.name,
            step.model,
            error.message()
        );
        // The ensemble exists: a composing model that does not is its fault.
        let kind = match error.kind() {
            ErrorKind::NotFound => ErrorKind::Unavailable,
            kind => kind,
        };
        Error::new(kind, message)
    }
}

#[cfg(test)]
#[path = "executor_tests.rs"]
mod tests;
