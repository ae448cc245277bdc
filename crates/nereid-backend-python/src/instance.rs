//! One instance of a Python model: its worker, and the shared memory the
//! two exchange tensors through. A batch goes to the worker as its list of
//! requests (`execute(requests)`), and each request gets its own answer.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use nereid_core::{
    BackendError, Batch, BatchRequest, DataType, InferRequest, InferService, InputTensor,
    ModelInstance, Parameter, Parameters, RequestWise, RequestedOutput, Tensor,
};
use serde_json::{Map, Value, json};

use crate::shm::{Arena, Region, WorkerFiles};
use crate::streams::{Streams, reschedule_refused, rescheduled};
use crate::worker::{Launch, Worker, WorkerError};

/// A worker that died this many times within [`DEATH_WINDOW`] is not
/// started again: the model's requests fail until it is reloaded.
const MAX_DEATHS: usize = 3;
const DEATH_WINDOW: Duration = Duration::from_secs(60);

/// How long a restarted worker may take to initialize.
const RESTART_TIMEOUT: Duration = Duration::from_secs(300);

/// How long one `execute` may take before the worker is given up on.
const EXECUTE_TIMEOUT: Duration = Duration::from_secs(3600);

/// How often a running `execute` is checked for requests whose clients
/// stopped waiting, which the worker is then told of (`is_cancelled()`).
const CANCEL_POLL: Duration = Duration::from_millis(20);

/// Room for the first batch's inputs; the arena grows past it as needed.
const ARENA_START: usize = 1 << 20;

/// The server, for BLS calls; set once the engine exists.
pub(crate) type Service = Arc<OnceLock<Arc<dyn InferService>>>;

pub struct PythonInstance {
    label: String,
    worker: Worker,
    launch: Launch,
    /// When the worker died, for the restart limit.
    deaths: Vec<Instant>,
    arena: Arena,
    /// Where BLS answers' outputs go for the worker to copy.
    bls_arena: Arena,
    files: WorkerFiles,
    next_id: u64,
    service: Service,
}

impl std::fmt::Debug for PythonInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PythonInstance")
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

impl PythonInstance {
    pub(crate) fn new(
        launch: Launch,
        worker: Worker,
        service: Service,
    ) -> Result<Self, BackendError> {
        let label = launch.side.label.clone();
        let shm_error =
            |e| BackendError::Load(format!("{label}: cannot create shared memory: {e}"));
        let arena = Arena::new(ARENA_START).map_err(shm_error)?;
        let bls_arena = Arena::new(ARENA_START).map_err(shm_error)?;
        Ok(PythonInstance {
            label,
            worker,
            launch,
            deaths: Vec::new(),
            arena,
            bls_arena,
            files: WorkerFiles::default(),
            next_id: 0,
            service,
        })
    }

    fn fail(&self, message: impl std::fmt::Display) -> BackendError {
        BackendError::Execute(format!("{}: {message}", self.label))
    }

    /// The `execute` frame for `requests`, their inputs copied into the arena.
    fn execute_frame(&mut self, requests: &[BatchRequest<'_>]) -> Result<Value, BackendError> {
        self.arena.reset();
        self.bls_arena.reset();
        self.files.prune();
        let mut entries = Vec::with_capacity(requests.len());
        for r in requests {
            self.next_id += 1;
            entries.push(self.request_entry(r.request, r.outputs, self.next_id)?);
        }
        Ok(json!({"op": "execute", "requests": entries}))
    }

    fn request_entry(
        &mut self,
        request: &InferRequest,
        outputs: &[String],
        id: u64,
    ) -> Result<Value, BackendError> {
        let inputs = request
            .inputs
            .iter()
            .map(|input| {
                let region = self.arena.push(&input.data).map_err(|e| {
                    self.fail(format_args!(
                        "cannot place input '{}' in shared memory: {e}",
                        input.name
                    ))
                })?;
                Ok(descriptor(
                    &input.name,
                    input.datatype,
                    &input.shape,
                    &region,
                ))
            })
            .collect::<Result<Vec<_>, BackendError>>()?;
        let (correlation_id, flags) = sequence_of(&request.parameters);
        Ok(json!({
            "id": id.to_string(),
            "request_id": request.id,
            "correlation_id": correlation_id,
            "flags": flags,
            "parameters": parameters(&request.parameters),
            "requested_output_names": outputs,
            "inputs": inputs,
        }))
    }

    /// Reads the worker's answer to an execute of `requests`, whose ids
    /// run up to `self.next_id`; meanwhile runs the worker's BLS calls,
    /// passes on the responses its response senders send, and tells it of
    /// requests whose clients stopped waiting. A decoupled model's batch
    /// is done once its execute has returned and every request has had
    /// its final flag, however late.
    fn answers(
        &mut self,
        requests: &[BatchRequest<'_>],
    ) -> Result<Vec<Result<Vec<Tensor>, BackendError>>, BackendError> {
        let count = requests.len();
        let first_id = self.next_id + 1 - count as u64;
        let mut told = vec![false; count];
        let mut streams = Streams::new(requests);
        let deadline = Instant::now() + EXECUTE_TIMEOUT;
        let mut answer: Option<Value> = None;
        loop {
            if let Some(frame) = &answer
                && (streams.all_final() || !frame["error"].is_null() || frame["op"] == "error")
            {
                break;
            }
            let cancelled: Vec<String> = (0u64..)
                .zip(requests)
                .zip(&mut told)
                .filter(|((_, r), told)| !**told && (r.cancelled)())
                .map(|((i, _), told)| {
                    *told = true;
                    (first_id + i).to_string()
                })
                .collect();
            if !cancelled.is_empty() {
                let cancel = json!({"op": "cancel", "request_ids": cancelled});
                self.worker.send(&cancel).map_err(|e| self.fail(e))?;
            }
            let wait = CANCEL_POLL.min(deadline.saturating_duration_since(Instant::now()));
            let frame = match self.worker.next(wait) {
                Ok(frame) => frame,
                Err(e) if e.is_timeout() && Instant::now() < deadline => continue,
                Err(e) if e.is_timeout() => {
                    self.worker.kill();
                    return Err(self.fail(format_args!(
                        "the Python worker did not answer within {EXECUTE_TIMEOUT:?} and was stopped"
                    )));
                }
                Err(e) => return Err(self.fail(e)),
            };
            match frame["op"].as_str() {
                Some("bls") => {
                    let response = self.bls(&frame["request"], frame["decoupled"] == true);
                    let answer =
                        json!({"op": "bls_response", "tag": frame["tag"], "response": response});
                    self.worker.send(&answer).map_err(|e| self.fail(e))?;
                }
                Some("bls_release") => {}
                Some("response") => {
                    let index = frame["id"]
                        .as_str()
                        .and_then(|id| id.parse::<u64>().ok())
                        .and_then(|id| id.checked_sub(first_id))
                        .filter(|&i| i < count as u64);
                    let Some(index) = index else {
                        tracing::warn!(worker = %self.label, id = %frame["id"], "a response for a request not in the running batch was dropped");
                        continue;
                    };
                    let response = match &frame["response"] {
                        Value::Null => None,
                        response => Some(self.response(response)),
                    };
                    streams.send(index as usize, response, frame["final"] == true);
                }
                _ if answer.is_none() => {
                    streams.release(&rescheduled(&frame, first_id, count));
                    answer = Some(frame);
                }
                _ => {
                    return Err(
                        self.fail(format_args!("the worker sent an unexpected frame: {frame}"))
                    );
                }
            }
        }
        let frame = answer.unwrap_or_default();
        if frame["op"] == "error" {
            return Err(self.fail(
                frame["message"]
                    .as_str()
                    .unwrap_or("the worker refused the batch"),
            ));
        }
        if let Some(message) = frame["error"]["message"].as_str() {
            return Err(BackendError::Execute(message.to_owned()));
        }
        let Some(responses) = frame["responses"].as_array() else {
            return Err(self.fail("the worker answered without responses"));
        };
        if responses.len() != count {
            return Err(self.fail(format_args!(
                "the worker answered {} of {count} requests",
                responses.len()
            )));
        }
        let rescheduled = rescheduled(&frame, first_id, count);
        Ok(responses
            .iter()
            .enumerate()
            .map(|(i, r)| match r {
                _ if rescheduled.contains(&i) => Err(reschedule_refused()),
                Value::Null => streams.result(i),
                r => self.response(r),
            })
            .collect())
    }

    fn response(&mut self, response: &Value) -> Result<Vec<Tensor>, BackendError> {
        if let Some(message) = response["error"]["message"].as_str() {
            let kind = kind_of(response["error"]["code"].as_str().unwrap_or_default());
            return Err(BackendError::Request(nereid_core::Error::new(
                kind, message,
            )));
        }
        response["outputs"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|d| self.output(d))
            .collect()
    }

    fn output(&mut self, d: &Value) -> Result<Tensor, BackendError> {
        let bad = || self.fail(format_args!("the worker sent a bad output descriptor: {d}"));
        let name = d["name"].as_str().ok_or_else(bad)?.to_owned();
        let datatype = d["datatype"]
            .as_str()
            .and_then(DataType::from_wire_name)
            .ok_or_else(bad)?;
        let shape: Vec<i64> = d["shape"]
            .as_array()
            .ok_or_else(bad)?
            .iter()
            .map(|v| v.as_i64().ok_or_else(bad))
            .collect::<Result<_, _>>()?;
        let region = Region {
            path: PathBuf::from(d["shm"]["path"].as_str().unwrap_or_default()),
            offset: d["shm"]["offset"].as_u64().ok_or_else(bad)? as usize,
            size: d["shm"]["size"].as_u64().ok_or_else(bad)? as usize,
        };
        let data = self
            .files
            .read(&region)
            .map_err(|e| self.fail(format_args!("output '{name}': {e}")))?;
        Ok(Tensor {
            name,
            datatype,
            shape,
            data: data.into(),
        })
    }

    /// Runs a model's BLS call through the server and says how it went, as
    /// a `bls_response`'s `response`: a failure is the call's answer, never
    /// the batch's. A `decoupled` call answers every response the model
    /// sent, in `responses`, once the last has come.
    fn bls(&mut self, request: &Value, decoupled: bool) -> Value {
        let error = |message: String, code: &str| json!({"outputs": [], "error": {"message": message, "code": code}});
        let Some(service) = self.service.get().cloned() else {
            return error(
                "the server is not ready for BLS calls yet".into(),
                "UNAVAILABLE",
            );
        };
        let request = match self.bls_request(request) {
            Ok(request) => request,
            Err(e) => return error(e.to_string(), "INVALID_ARG"),
        };
        let model = request.model_name.clone();
        // Triton's words for a failed BLS call.
        let failed = |e: nereid_core::Error| {
            let message = format!(
                "Model {model} - Error when running inference: {}",
                e.message()
            );
            error(message, code_name(e.kind()))
        };
        if decoupled {
            let responses = match service.infer_all_blocking(request) {
                Ok(responses) => responses,
                Err(e) => return failed(e),
            };
            let responses: Vec<Value> = responses
                .into_iter()
                .map(|r| match r {
                    Ok(response) => self.bls_answer(&response),
                    Err(e) => failed(e),
                })
                .collect();
            return json!({"responses": responses, "error": null});
        }
        if self
            .service
            .get()
            .is_some_and(|s| s.is_decoupled(&model, request.model_version))
        {
            return error(
                format!(
                    "Model {model} is using the decoupled. The current BLS request call doesn't support models using the decoupled transaction policy. Please use 'decoupled=True' argument to the 'exec' or 'async_exec' calls for decoupled models.'"
                ),
                "INTERNAL",
            );
        }
        match service.infer_blocking(request) {
            Ok(response) => self.bls_answer(&response),
            Err(e) => failed(e),
        }
    }

    /// One BLS answer as the worker reads it, its outputs copied into the
    /// BLS arena.
    fn bls_answer(&mut self, response: &nereid_core::InferResponse) -> Value {
        let outputs: Result<Vec<Value>, std::io::Error> = response
            .outputs
            .iter()
            .map(|t| {
                let region = self.bls_arena.push(&t.data)?;
                Ok(descriptor(&t.name, t.datatype, &t.shape, &region))
            })
            .collect();
        match outputs {
            Ok(outputs) => {
                json!({"outputs": outputs, "error": null, "parameters": parameters(&response.parameters)})
            }
            Err(e) => json!({"outputs": [], "error": {
                "message": format!("cannot place the answer in shared memory: {e}"),
                "code": "INTERNAL",
            }}),
        }
    }

    /// The server request a `bls` frame describes, its inputs read out of
    /// the worker's arena.
    fn bls_request(&mut self, r: &Value) -> Result<InferRequest, BackendError> {
        let inputs = r["inputs"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|d| {
                self.output(d).map(|t| InputTensor {
                    name: t.name,
                    datatype: t.datatype,
                    shape: t.shape,
                    data: t.data,
                    parameters: Parameters::new(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let outputs = r["requested_output_names"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter_map(Value::as_str)
            .map(|name| RequestedOutput {
                name: name.to_owned(),
                parameters: Parameters::new(),
            })
            .collect();
        Ok(InferRequest {
            model_name: r["model_name"].as_str().unwrap_or_default().to_owned(),
            model_version: r["model_version"].as_i64().filter(|&v| v > 0),
            id: r["request_id"].as_str().unwrap_or_default().to_owned(),
            inputs,
            outputs,
            parameters: bls_parameters(&r["parameters"]),
            trace: None,
        })
    }
}

/// A BLS request's parameters (the worker allows bool, int and str values).
fn bls_parameters(parameters: &Value) -> Parameters {
    let Some(map) = parameters.as_object() else {
        return Parameters::new();
    };
    map.iter()
        .filter_map(|(k, v)| {
            let v = match v {
                Value::Bool(b) => Parameter::Bool(*b),
                Value::String(s) => Parameter::String(s.clone()),
                Value::Number(n) => match (n.as_i64(), n.as_u64()) {
                    (Some(i), _) => Parameter::Int64(i),
                    (None, Some(u)) => Parameter::Uint64(u),
                    (None, None) => Parameter::Double(n.as_f64()?),
                },
                _ => return None,
            };
            Some((k.clone(), v))
        })
        .collect()
}

/// The error kind of a TritonError code name (INTERNAL for unknown ones).
fn kind_of(code: &str) -> nereid_core::ErrorKind {
    use nereid_core::ErrorKind as K;
    match code {
        "INVALID_ARG" => K::InvalidArgument,
        "NOT_FOUND" => K::NotFound,
        "UNAVAILABLE" => K::Unavailable,
        "UNSUPPORTED" => K::Unsupported,
        "ALREADY_EXISTS" => K::AlreadyExists,
        "CANCELLED" => K::Cancelled,
        _ => K::Internal,
    }
}

/// TritonError's code name for an error kind.
pub(crate) fn code_name(kind: nereid_core::ErrorKind) -> &'static str {
    use nereid_core::ErrorKind as K;
    match kind {
        K::InvalidArgument => "INVALID_ARG",
        K::NotFound => "NOT_FOUND",
        K::Unavailable => "UNAVAILABLE",
        K::Unsupported => "UNSUPPORTED",
        K::AlreadyExists => "ALREADY_EXISTS",
        K::Cancelled => "CANCELLED",
        K::Internal => "INTERNAL",
    }
}

fn descriptor(name: &str, datatype: DataType, shape: &[i64], region: &Region) -> Value {
    json!({
        "name": name,
        "datatype": datatype.wire_name(),
        "shape": shape,
        "shm": {"path": region.path, "offset": region.offset, "size": region.size},
    })
}

fn parameters(parameters: &nereid_core::Parameters) -> Value {
    let map: Map<String, Value> = parameters
        .iter()
        .map(|(k, v)| {
            let v = match v {
                Parameter::Bool(b) => json!(b),
                Parameter::Int64(i) => json!(i),
                Parameter::Uint64(u) => json!(u),
                Parameter::Double(d) => json!(d),
                Parameter::String(s) => json!(s),
            };
            (k.clone(), v)
        })
        .collect();
    Value::Object(map)
}

impl RequestWise for PythonInstance {
    fn execute_requests(
        &mut self,
        requests: &[BatchRequest<'_>],
    ) -> Vec<Result<Vec<Tensor>, BackendError>> {
        let answered = self.ensure_worker().and_then(|()| {
            self.execute_frame(requests)
                .and_then(|frame| self.worker.send(&frame).map_err(|e| self.fail(e)))
                .and_then(|()| self.answers(requests))
                .map_err(|e| self.note_death(e))
        });
        match answered {
            Ok(results) => results,
            Err(e) => requests.iter().map(|_| Err(e.clone())).collect(),
        }
    }
}

impl PythonInstance {
    /// Starts the worker again if it died, unless it keeps dying.
    fn ensure_worker(&mut self) -> Result<(), BackendError> {
        if self.worker.is_alive() {
            return Ok(());
        }
        let now = Instant::now();
        self.deaths
            .retain(|t| now.duration_since(*t) < DEATH_WINDOW);
        if let Some(reason) = self.failure() {
            return Err(BackendError::Execute(reason));
        }
        tracing::warn!(worker = %self.label, "restarting the Python worker");
        match self.launch.start(RESTART_TIMEOUT) {
            Ok(worker) => {
                self.worker = worker;
                Ok(())
            }
            Err(e) => {
                // A worker that cannot start again counts as one more death.
                self.deaths.push(Instant::now());
                Err(self.fail(format_args!("the Python worker cannot be restarted: {e}")))
            }
        }
    }

    /// After a failed batch: if the worker is gone, counts its death and
    /// says so in the error.
    fn note_death(&mut self, error: BackendError) -> BackendError {
        let Some(status) = self.worker.status() else {
            return error;
        };
        self.deaths.push(Instant::now());
        tracing::error!(worker = %self.label, %status, "the Python worker died");
        self.fail(format_args!(
            "the Python worker {status} while running this batch; it is started again for the next one"
        ))
    }
}

impl ModelInstance for PythonInstance {
    fn as_request_wise(&mut self) -> Option<&mut dyn RequestWise> {
        Some(self)
    }

    fn failure(&self) -> Option<String> {
        let now = Instant::now();
        let recent = self
            .deaths
            .iter()
            .filter(|t| now.duration_since(**t) < DEATH_WINDOW)
            .count();
        (recent >= MAX_DEATHS).then(|| {
            format!(
                "{}: the Python worker died {recent} times within {DEATH_WINDOW:?}; load the model again to restart it",
                self.label
            )
        })
    }

    /// A gathered batch runs as one request (the engine hands this backend
    /// its requests one by one instead, through `as_request_wise`).
    fn execute(&mut self, batch: &Batch) -> Result<Vec<Tensor>, BackendError> {
        let request = InferRequest {
            inputs: batch
                .inputs
                .iter()
                .map(|t| nereid_core::InputTensor {
                    name: t.name.clone(),
                    datatype: t.datatype,
                    shape: t.shape.clone(),
                    data: t.data.clone(),
                    parameters: Default::default(),
                })
                .collect(),
            ..Default::default()
        };
        let requests = [BatchRequest {
            request: &request,
            outputs: &batch.outputs,
            cancelled: &|| false,
            responder: None,
        }];
        self.execute_requests(&requests)
            .pop()
            .unwrap_or_else(|| Err(self.fail("no answer")))
    }
}

impl From<WorkerError> for BackendError {
    fn from(e: WorkerError) -> Self {
        BackendError::Execute(e.to_string())
    }
}

/// A request's correlation ID and Triton's request flags (1: sequence
/// start, 2: sequence end), from its sequence parameters, as the Python
/// backend's `correlation_id()` and `flags()` give them.
fn sequence_of(parameters: &nereid_core::Parameters) -> (serde_json::Value, u32) {
    use nereid_core::Parameter;
    let id = match parameters.get("sequence_id") {
        Some(Parameter::Uint64(v)) => json!(v),
        Some(Parameter::Int64(v)) => json!(v),
        Some(Parameter::String(v)) => json!(v),
        _ => json!(0),
    };
    let flag = |key: &str, bit: u32| match parameters.get(key) {
        Some(Parameter::Bool(true)) => bit,
        _ => 0,
    };
    (id, flag("sequence_start", 1) | flag("sequence_end", 2))
}
