//! A model's BLS calls (`pb_utils.InferenceRequest(...).exec()`): each
//! `bls` frame runs through the server and is answered with a
//! `bls_response`, its outputs in a file of the server's that stays
//! unchanged until the worker's `bls_release`. Calls made during an
//! `execute` run on the instance thread; calls from a model's threads
//! between executes run on threads of their own, so a slow call never
//! holds up the responses of open requests.

use std::sync::Arc;

use nereid_core::{
    CorrelationId, InferRequest, InferResponse, InputTensor, ModelVersion, Parameter, Parameters,
    RequestedOutput, Routing, Sequence,
};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::frame::{ToWorker, send_json};
use crate::service::Service;
use crate::shm::{Arena, WorkerFiles};
use crate::tensors::{Reader, code_name, descriptor, parameters};

/// Room for the first call's answers; the arena grows past it as needed.
const ARENA_START: usize = 1 << 20;

pub(crate) struct Bls {
    service: Service,
    label: String,
    answers: Mutex<Answers>,
    /// The worker's files, to read a call's inputs from.
    files: Mutex<WorkerFiles>,
}

/// Where the answers' outputs go: reused from the start once the worker
/// has released every answer.
struct Answers {
    arena: Arena,
    unreleased: usize,
}

impl Bls {
    pub(crate) fn new(service: Service, label: String) -> std::io::Result<Self> {
        Ok(Bls {
            service,
            label,
            answers: Mutex::new(Answers {
                arena: Arena::new(ARENA_START)?,
                unreleased: 0,
            }),
            files: Mutex::new(WorkerFiles::default()),
        })
    }

    /// Runs the call of a `bls` frame and answers it on `stdin`.
    pub(crate) fn call(&self, frame: &Value, stdin: &ToWorker) {
        let response = self.run(&frame["request"], frame["decoupled"] == true);
        let answer = json!({"op": "bls_response", "tag": frame["tag"], "response": response});
        if let Err(e) = send_json(stdin, &answer) {
            tracing::warn!(worker = %self.label, error = %e, "a BLS answer could not be written");
        }
    }

    /// Runs the call on a thread of its own.
    pub(crate) fn call_on_thread(self: &Arc<Self>, frame: Value, stdin: ToWorker) {
        let bls = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("py-bls".into())
            .spawn(move || bls.call(&frame, &stdin));
        if let Err(e) = spawned {
            tracing::error!(worker = %self.label, error = %e, "no thread for a BLS call");
        }
    }

    /// The worker copied an answer's outputs (`bls_release`).
    pub(crate) fn released(&self) {
        let mut answers = self.answers.lock();
        answers.unreleased = answers.unreleased.saturating_sub(1);
        if answers.unreleased == 0 {
            answers.arena.reset();
        }
    }

    /// A new worker holds none of the answers.
    pub(crate) fn restarted(&self) {
        let mut answers = self.answers.lock();
        answers.unreleased = 0;
        answers.arena.reset();
        self.files.lock().prune();
    }

    /// How the call went, as a `bls_response`'s `response`: a failure is
    /// the call's answer, never the batch's. A `decoupled` call answers
    /// every response the model sent, in `responses`, once the last has
    /// come.
    fn run(&self, request: &Value, decoupled: bool) -> Value {
        let error = |message: String, code: &str| json!({"outputs": [], "error": {"message": message, "code": code}});
        let Some(service) = self.service.get().cloned() else {
            return error(
                "the server is not ready for BLS calls yet".into(),
                "UNAVAILABLE",
            );
        };
        let request = match self.request(request) {
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
                    Ok(response) => self.answer(&response),
                    Err(e) => failed(e),
                })
                .collect();
            return json!({"responses": responses, "error": null});
        }
        if service.is_decoupled(&model, &request.routing.version) {
            return error(
                format!(
                    "Model {model} is using the decoupled. The current BLS request call doesn't support models using the decoupled transaction policy. Please use 'decoupled=True' argument to the 'exec' or 'async_exec' calls for decoupled models.'"
                ),
                "INTERNAL",
            );
        }
        match service.infer_blocking(request) {
            Ok(response) => self.answer(&response),
            Err(e) => failed(e),
        }
    }

    /// One answer as the worker reads it, its outputs copied into the
    /// answers' arena.
    fn answer(&self, response: &InferResponse) -> Value {
        let mut answers = self.answers.lock();
        answers.unreleased += 1;
        let outputs: Result<Vec<Value>, std::io::Error> = response
            .outputs
            .iter()
            .map(|t| {
                let region = answers.arena.push(&t.data)?;
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
    fn request(&self, r: &Value) -> Result<InferRequest, nereid_core::BackendError> {
        let mut files = self.files.lock();
        let mut reader = Reader {
            files: &mut files,
            label: &self.label,
            hold: None,
        };
        let inputs = r["inputs"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|d| {
                reader.tensor(d).map(|t| InputTensor {
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
            id: r["request_id"].as_str().unwrap_or_default().to_owned(),
            routing: call_routing(r)?,
            inputs,
            outputs,
            parameters: call_parameters(&r["parameters"]),
            trace: None,
        })
    }
}

/// A BLS request's routing facts: its version (a number, or a label for
/// a model that has labels), correlation ID, flags and timeout.
fn call_routing(r: &Value) -> Result<Routing, nereid_core::BackendError> {
    // As for a number, 0 and below mean the latest.
    let version = match &r["model_version"] {
        Value::String(v) => match ModelVersion::parse(v) {
            Some(ModelVersion::Number(n)) if n <= 0 => ModelVersion::Latest,
            Some(version) => version,
            None => {
                return Err(nereid_core::BackendError::Request(
                    nereid_core::Error::invalid_argument(format!(
                        "model_version '{v}' is neither a version number nor a version label"
                    )),
                ));
            }
        },
        v => ModelVersion::from(v.as_i64().filter(|&v| v > 0)),
    };
    let id = match &r["correlation_id"] {
        Value::String(id) => CorrelationId::Str(id.clone()),
        id => CorrelationId::Int(id.as_u64().unwrap_or(0)),
    };
    let flags = r["flags"].as_u64().unwrap_or(0);
    let timeout = r["timeout"].as_u64().filter(|&t| t > 0);
    Ok(Routing {
        version,
        sequence: Sequence {
            id,
            start: flags & 1 != 0,
            end: flags & 2 != 0,
        },
        timeout: timeout.map(std::time::Duration::from_micros),
        ..Routing::default()
    })
}

/// A BLS request's parameters (the worker allows bool, int and str values).
fn call_parameters(parameters: &Value) -> Parameters {
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
