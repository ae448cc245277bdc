//! Inference requests and responses as the engine sees them, after a
//! frontend decoded the wire message.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::{DataType, Routing, Shape, Tensor, Trace};

/// A request, input or output parameter value (KServe v2 `parameters`).
#[derive(Debug, Clone, PartialEq)]
pub enum Parameter {
    Bool(bool),
    Int64(i64),
    Uint64(u64),
    Double(f64),
    String(String),
}

impl Parameter {
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Parameter::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The value as an integer, whichever integer type carried it.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Parameter::Int64(v) => Some(*v),
            Parameter::Uint64(v) => i64::try_from(*v).ok(),
            _ => None,
        }
    }
}

/// Named parameters, ordered so that responses echo them stably.
pub type Parameters = BTreeMap<String, Parameter>;

/// One input of a request: its data is the raw little-endian layout (or
/// `BYTES` framing), however it arrived on the wire.
#[derive(Debug, Clone, PartialEq)]
pub struct InputTensor {
    pub name: String,
    pub datatype: DataType,
    pub shape: Shape,
    pub data: Bytes,
    pub parameters: Parameters,
}

/// An output the client asked for, with its parameters (`binary_data`, ...).
#[derive(Debug, Clone, PartialEq)]
pub struct RequestedOutput {
    pub name: String,
    pub parameters: Parameters,
}

/// A decoded inference request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InferRequest {
    pub model_name: String,
    pub id: String,
    /// Which version, the sequence, sticky key, priority and timeout:
    /// typed here, never read out of `parameters`.
    pub routing: Routing,
    pub inputs: Vec<InputTensor>,
    /// Empty means "every output of the model".
    pub outputs: Vec<RequestedOutput>,
    pub parameters: Parameters,
    /// Set when the request was sampled for tracing.
    pub trace: Option<Trace>,
}

/// The answer to one request.
#[derive(Debug, Clone, PartialEq)]
pub struct InferResponse {
    pub model_name: String,
    pub model_version: i64,
    pub id: String,
    pub outputs: Vec<Tensor>,
    pub parameters: Parameters,
    /// Outputs whose data went into a shared memory region the request
    /// named: their `data` is empty and the frontends send none.
    pub in_shared_memory: Vec<String>,
}
