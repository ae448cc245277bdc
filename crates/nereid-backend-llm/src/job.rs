//! One generation request as the runner takes it: what a client's tensors
//! and parameters ask for, checked before anything is queued.

use std::sync::Arc;
use std::time::Instant;

use nereid_core::tensor::bytes_elements;
use nereid_core::{BatchRequest, DataType, Error, InferRequest, Parameter, Responder};
use nereid_generation::sampling::SamplingParams;
use serde_json::{Map, Value};

use crate::respond::{
    EXCLUDE_INPUT, FINISH_REASON, INPUT_TOKENS, OUTPUT_TOKENS, RETURN_CUMULATIVE_LOGPROB,
    RETURN_FINISH_REASON, RETURN_INPUT_TOKENS, RETURN_LOGPROBS, RETURN_OUTPUT_TOKENS,
    SAMPLING_PARAMETERS, STREAM, TEXT_INPUT, TEXT_OUTPUT,
};

/// A request to generate.
pub struct Job {
    pub prompt: String,
    /// The prompt's tokens, filled by the instance; the runner hands them
    /// to the scheduler.
    pub tokens: Vec<u32>,
    pub params: SamplingParams,
    /// One response per piece of text (else one at the end).
    pub stream: bool,
    /// Whether the prompt is left out of `text_output`.
    pub exclude_input: bool,
    /// The outputs each response carries, by name.
    pub outputs: Outputs,
    pub responder: Arc<dyn Responder>,
    pub arrived: Instant,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("tokens", &self.tokens.len())
            .field("params", &self.params)
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

/// Which outputs a response carries: those the client asked for (all when
/// it named none), the additional ones only when their `return_*` flag is
/// set, as Triton's vLLM backend sends them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outputs {
    pub text: bool,
    pub finish_reason: bool,
    pub input_tokens: bool,
    pub output_tokens: bool,
}

impl Job {
    /// Reads `request`; its prompt is tokenized later.
    pub fn read(request: &BatchRequest<'_>) -> Result<Job, Error> {
        let infer = request.request;
        let responder = request
            .responder
            .clone()
            .ok_or_else(|| Error::invalid_argument("a llamacpp model must be decoupled"))?;
        for flag in [RETURN_LOGPROBS, RETURN_CUMULATIVE_LOGPROB] {
            if flag_input(infer, flag)?.unwrap_or(false) {
                return Err(Error::unsupported(format!(
                    "'{flag}' is not supported by the llamacpp backend"
                )));
            }
        }
        let asked = |name: &str| request.outputs.iter().any(|o| o == name);
        let flag = |name: &str| flag_input(infer, name).map(|f| f.unwrap_or(false));
        let outputs = Outputs {
            text: asked(TEXT_OUTPUT),
            finish_reason: asked(FINISH_REASON) && flag(RETURN_FINISH_REASON)?,
            input_tokens: asked(INPUT_TOKENS) && flag(RETURN_INPUT_TOKENS)?,
            output_tokens: asked(OUTPUT_TOKENS) && flag(RETURN_OUTPUT_TOKENS)?,
        };
        Ok(Job {
            prompt: prompt(infer)?,
            tokens: Vec::new(),
            params: sampling(infer)?,
            stream: flag(STREAM)?,
            exclude_input: flag(EXCLUDE_INPUT)?,
            outputs,
            responder,
            arrived: Instant::now(),
        })
    }
}

fn input<'a>(request: &'a InferRequest, name: &str) -> Option<&'a nereid_core::InputTensor> {
    request.inputs.iter().find(|i| i.name == name)
}

fn prompt(request: &InferRequest) -> Result<String, Error> {
    let text = bytes_input(request, TEXT_INPUT)?
        .ok_or_else(|| Error::invalid_argument(format!("input '{TEXT_INPUT}' is required")))?;
    String::from_utf8(text)
        .map_err(|_| Error::invalid_argument(format!("input '{TEXT_INPUT}' is not UTF-8 text")))
}

/// The first element of a `BYTES` input.
fn bytes_input(request: &InferRequest, name: &str) -> Result<Option<Vec<u8>>, Error> {
    let Some(tensor) = input(request, name) else {
        return Ok(None);
    };
    if tensor.datatype != DataType::Bytes {
        return Err(Error::invalid_argument(format!(
            "input '{name}' must be BYTES"
        )));
    }
    match bytes_elements(&tensor.data).next() {
        Some(Ok(element)) => Ok(Some(element.to_vec())),
        Some(Err(e)) => Err(Error::invalid_argument(format!("input '{name}': {e}"))),
        None => Err(Error::invalid_argument(format!("input '{name}' is empty"))),
    }
}

/// The first element of a `BOOL` input.
fn flag_input(request: &InferRequest, name: &str) -> Result<Option<bool>, Error> {
    let Some(tensor) = input(request, name) else {
        return Ok(None);
    };
    match (tensor.datatype, tensor.data.first()) {
        (DataType::Bool, Some(&b)) => Ok(Some(b != 0)),
        (DataType::Bool, None) => Err(Error::invalid_argument(format!("input '{name}' is empty"))),
        _ => Err(Error::invalid_argument(format!(
            "input '{name}' must be BOOL"
        ))),
    }
}

/// `sampling_parameters` when the request has it, else the request's own
/// parameters (Triton's vLLM backend reads either; the generate
/// extension's `parameters` arrive as the latter).
fn sampling(request: &InferRequest) -> Result<SamplingParams, Error> {
    let invalid =
        |e: nereid_generation::sampling::BadParameter| Error::invalid_argument(e.to_string());
    if let Some(json) = bytes_input(request, SAMPLING_PARAMETERS)? {
        let text = String::from_utf8_lossy(&json);
        return SamplingParams::from_json(&text).map_err(invalid);
    }
    let map: Map<String, Value> = request
        .parameters
        .iter()
        .map(|(k, v)| (k.clone(), parameter_json(v)))
        .collect();
    SamplingParams::from_map(&map, false).map_err(invalid)
}

fn parameter_json(value: &Parameter) -> Value {
    match value {
        Parameter::Bool(b) => Value::Bool(*b),
        Parameter::Int64(n) => Value::from(*n),
        Parameter::Uint64(n) => Value::from(*n),
        Parameter::Double(x) => Value::from(*x),
        Parameter::String(s) => Value::String(s.clone()),
    }
}
