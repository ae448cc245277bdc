//! A model's BLS calls (`pb_utils.InferenceRequest(...).exec()`): each
//! binary `bls` message runs through the server and is answered with a
//! `bls_response`, its outputs in a file of the server's that stays
//! unchanged until the worker's `bls_release`. Calls made during an
//! `execute` run on the instance thread; calls from a model's threads
//! between executes run on threads of their own, so a slow call never
//! holds up the responses of open requests.

use std::sync::Arc;

use nereid_core::{
    CorrelationId, Error, InferRequest, InferResponse, InputTensor, ModelVersion, Parameters,
    RequestedOutput, Routing, Sequence,
};
use parking_lot::Mutex;

use crate::codes::number_of_kind;
use crate::frame::ToWorker;
use crate::message::{self, BLS_RESPONSE, BlsCall, Body, Out};
use crate::service::Service;
use crate::shm::{Arena, WorkerFiles};

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

    /// Runs the call of a `bls` message and answers it on `to`.
    pub(crate) fn call(&self, payload: &[u8], to: &ToWorker) {
        let Some(tag) = message::bls_tag(payload) else {
            tracing::warn!(worker = %self.label, "a BLS message without a tag was dropped");
            return;
        };
        let answers = match message::bls_call(payload) {
            Ok(call) => self.run(call),
            Err(e) => vec![Err(Error::invalid_argument(e.to_string()))],
        };
        let answer = self.answer(tag, answers);
        if let Err(e) = to.lock().send(BLS_RESPONSE, &answer) {
            tracing::warn!(worker = %self.label, error = %e, "a BLS answer could not be written");
        }
    }

    /// Runs the call on a thread of its own.
    pub(crate) fn call_on_thread(self: &Arc<Self>, payload: Vec<u8>, to: ToWorker) {
        let bls = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("py-bls".into())
            .spawn(move || bls.call(&payload, &to));
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

    /// How the call went: its response, or every response the model sent
    /// for a `decoupled` call, in order; a failure is the call's answer,
    /// never the batch's.
    fn run(&self, call: BlsCall) -> Vec<Result<InferResponse, Error>> {
        let Some(service) = self.service.get().cloned() else {
            return vec![Err(Error::unavailable(
                "the server is not ready for BLS calls yet",
            ))];
        };
        let decoupled = call.decoupled;
        let request = match self.request(call) {
            Ok(request) => request,
            Err(e) => return vec![Err(e)],
        };
        let model = request.model_name.clone();
        // Triton's words for a failed BLS call.
        let failed = |e: Error| {
            Error::new(
                e.kind(),
                format!(
                    "Model {model} - Error when running inference: {}",
                    e.message()
                ),
            )
        };
        if decoupled {
            return match service.infer_all_blocking(request) {
                Ok(responses) => responses.into_iter().map(|r| r.map_err(failed)).collect(),
                Err(e) => vec![Err(failed(e))],
            };
        }
        if service.is_decoupled(&model, &request.routing.version) {
            return vec![Err(Error::internal(format!(
                "Model {model} is using the decoupled. The current BLS request call doesn't support models using the decoupled transaction policy. Please use 'decoupled=True' argument to the 'exec' or 'async_exec' calls for decoupled models.'"
            )))];
        }
        vec![service.infer_blocking(request).map_err(failed)]
    }

    /// A `bls_response` message: the call's tag and its answers, their
    /// outputs copied into the answers' arena.
    fn answer(&self, tag: u64, answers: Vec<Result<InferResponse, Error>>) -> Vec<u8> {
        let mut arena = self.answers.lock();
        arena.unreleased += 1;
        let mut body = Body::default();
        body.out.len(answers.len());
        for answer in answers {
            let placed = answer.and_then(|response| {
                let placed: Result<Vec<_>, std::io::Error> = response
                    .outputs
                    .into_iter()
                    .map(|t| {
                        let region = arena.arena.push(&t.data)?;
                        Ok((t, region))
                    })
                    .collect();
                let placed = placed.map_err(|e| {
                    Error::internal(format!("cannot place the answer in shared memory: {e}"))
                })?;
                Ok((response.parameters, placed))
            });
            match placed {
                Ok((parameters, outputs)) => {
                    body.out.u8(0).parameters(&parameters).len(outputs.len());
                    for (t, region) in outputs {
                        body.tensor(&t.name, t.datatype, &t.shape, &region);
                    }
                }
                Err(e) => {
                    body.out.u8(1).str(e.message()).u8(number_of_kind(e.kind()));
                }
            }
        }
        let mut head = Out::default();
        head.u64(tag);
        body.finish(head)
    }

    /// The server request a `bls` message describes, its inputs read out
    /// of the worker's arena.
    fn request(&self, call: BlsCall) -> Result<InferRequest, Error> {
        let mut files = self.files.lock();
        let inputs = call
            .inputs
            .into_iter()
            .map(|(name, datatype, shape, region)| {
                let data = files.read(&region).map_err(|e| {
                    Error::invalid_argument(format!("{}: input '{name}': {e}", self.label))
                })?;
                Ok(InputTensor {
                    name,
                    datatype,
                    shape,
                    data: data.into(),
                    parameters: Parameters::new(),
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let outputs = call
            .outputs
            .into_iter()
            .map(|name| RequestedOutput {
                name,
                parameters: Parameters::new(),
            })
            .collect();
        Ok(InferRequest {
            model_name: call.model_name,
            id: call.request_id,
            routing: call_routing(
                &call.version,
                &call.correlation_id,
                call.flags,
                call.timeout_us,
            )?,
            inputs,
            outputs,
            parameters: call.parameters,
            trace: None,
        })
    }
}

/// A BLS request's routing facts: its version (a number, or a label for
/// a model that has labels), correlation ID, flags and timeout.
fn call_routing(
    version: &Result<i64, String>,
    id: &CorrelationId,
    flags: u32,
    timeout_us: u64,
) -> Result<Routing, Error> {
    // As for a number, 0 and below mean the latest.
    let version = match version {
        Err(label) => match ModelVersion::parse(label) {
            Some(ModelVersion::Number(n)) if n <= 0 => ModelVersion::Latest,
            Some(version) => version,
            None => {
                return Err(Error::invalid_argument(format!(
                    "model_version '{label}' is neither a version number nor a version label"
                )));
            }
        },
        Ok(n) => ModelVersion::from(Some(*n).filter(|&v| v > 0)),
    };
    Ok(Routing {
        version,
        sequence: Sequence {
            id: id.clone(),
            start: flags & 1 != 0,
            end: flags & 2 != 0,
        },
        timeout: (timeout_us > 0).then(|| std::time::Duration::from_micros(timeout_us)),
        ..Routing::default()
    })
}
