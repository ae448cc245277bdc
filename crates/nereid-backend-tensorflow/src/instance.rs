//! One instance of a SavedModel: its session and the graph tensors its
//! config's inputs and outputs are bound to, driven by its instance thread.

use std::sync::Arc;

use bytes::Bytes;
use nereid_core::tensor::{bytes_elements, element_count, push_bytes_element};
use nereid_core::{BackendError, Batch, DataType, ModelInstance, Tensor};

use crate::ffi::{Api, OwnedTensor, Session, TF_STRING, TfOutput};
use crate::signature::{datatype, dtype};

/// A config tensor and the graph tensor behind its signature key.
#[derive(Debug, Clone)]
pub(crate) struct Bound {
    pub(crate) name: String,
    pub(crate) datatype: DataType,
    pub(crate) graph: TfOutput,
    /// The shape answered, after the batch dimension, for an output whose
    /// config has a `reshape`; `None`: the shape TensorFlow gives.
    pub(crate) reported_dims: Option<Vec<i64>>,
}

/// A loaded SavedModel instance.
#[derive(Debug)]
pub struct TensorflowInstance {
    /// "model 'm' version 1 instance 0", to prefix error messages.
    label: String,
    api: Arc<Api>,
    session: Session,
    inputs: Vec<Bound>,
    outputs: Vec<Bound>,
    /// The model batches: the first dimension of every tensor is the batch.
    batching: bool,
}

impl TensorflowInstance {
    pub(crate) fn new(
        label: String,
        api: Arc<Api>,
        session: Session,
        inputs: Vec<Bound>,
        outputs: Vec<Bound>,
        batching: bool,
    ) -> Self {
        TensorflowInstance {
            label,
            api,
            session,
            inputs,
            outputs,
            batching,
        }
    }

    fn error(&self, message: impl std::fmt::Display) -> BackendError {
        BackendError::Execute(format!("{}: {message}", self.label))
    }

    /// The batch's inputs as TensorFlow tensors, each with its graph tensor.
    fn feeds(&self, batch: &Batch) -> Result<Vec<(TfOutput, OwnedTensor)>, BackendError> {
        self.inputs
            .iter()
            .map(|bound| {
                let tensor = batch
                    .inputs
                    .iter()
                    .find(|t| t.name == bound.name)
                    .ok_or_else(|| self.error(format_args!("input '{}' is missing", bound.name)))?;
                if tensor.datatype != bound.datatype {
                    return Err(self.error(format_args!(
                        "input '{}' is {}, model expects {}",
                        bound.name, tensor.datatype, bound.datatype
                    )));
                }
                let value = if tensor.datatype == DataType::Bytes {
                    let elements = bytes_elements(&tensor.data)
                        .collect::<Result<Vec<&[u8]>, _>>()
                        .map_err(|e| self.error(format_args!("input '{}': {e}", bound.name)))?;
                    OwnedTensor::strings(&self.api, &tensor.shape, &elements)
                } else {
                    OwnedTensor::fixed(
                        &self.api,
                        dtype(tensor.datatype),
                        &tensor.shape,
                        &tensor.data,
                    )
                };
                let value =
                    value.map_err(|e| self.error(format_args!("input '{}': {e}", bound.name)))?;
                Ok((bound.graph, value))
            })
            .collect()
    }

    /// The config outputs the batch asks for (all of them when it names
    /// none), each once.
    fn requested<'a>(&'a self, batch: &Batch) -> Result<Vec<&'a Bound>, BackendError> {
        batch
            .requested(&self.outputs, |o| o.name.as_str())
            .map_err(|e| self.error(e))
    }

    /// A fetched tensor as the config output `bound` describes it.
    fn output(&self, bound: &Bound, value: &OwnedTensor) -> Result<Tensor, BackendError> {
        let produced = value.dtype();
        let data = if produced == TF_STRING && bound.datatype == DataType::Bytes {
            let mut framed = Vec::new();
            for element in value.string_elements() {
                push_bytes_element(&mut framed, element);
            }
            Bytes::from(framed)
        } else if datatype(produced) == Some(bound.datatype) {
            Bytes::copy_from_slice(value.data())
        } else {
            return Err(self.error(format_args!(
                "output '{}' is TensorFlow type {produced}, the config says {}",
                bound.name, bound.datatype
            )));
        };
        Ok(Tensor {
            name: bound.name.clone(),
            datatype: bound.datatype,
            shape: self.reported_shape(bound, value.dims()),
            data,
        })
    }

    /// The shape TensorFlow gave, or for an output with a `reshape` the
    /// config's dims after the batch dimension, a `-1` taking what the
    /// elements leave over (Triton's answer: a `[N]` output of a config
    /// with `dims: [1]` and `reshape: { shape: [] }` is answered `[N, 1]`).
    fn reported_shape(&self, bound: &Bound, produced: Vec<i64>) -> Vec<i64> {
        let Some(dims) = &bound.reported_dims else {
            return produced;
        };
        let batch = produced.first().copied().filter(|_| self.batching);
        let mut shape: Vec<i64> = batch.into_iter().chain(dims.iter().copied()).collect();
        if let Some(pos) = shape.iter().position(|&d| d < 0) {
            let total = element_count(&produced).unwrap_or(0);
            let known = shape.iter().filter(|&&d| d >= 0).product::<i64>().max(1);
            shape[pos] = total as i64 / known;
        }
        shape
    }
}

impl ModelInstance for TensorflowInstance {
    fn execute(&mut self, batch: &Batch) -> Result<Vec<Tensor>, BackendError> {
        let requested = self.requested(batch)?;
        let feeds = self.feeds(batch)?;
        let inputs: Vec<(TfOutput, &OwnedTensor)> = feeds.iter().map(|(o, t)| (*o, t)).collect();
        let fetches: Vec<TfOutput> = requested.iter().map(|b| b.graph).collect();
        let fetched = self
            .session
            .run(&inputs, &fetches)
            .map_err(|e| self.error(format_args!("TensorFlow execute failure: {e}")))?;
        // Outputs are copied out before the inputs go: an output may share
        // an input's buffer (an identity signature).
        let outputs = requested
            .iter()
            .zip(&fetched)
            .map(|(bound, value)| self.output(bound, value))
            .collect();
        drop(fetched);
        drop(feeds);
        outputs
    }
}
