//! One instance of a TorchScript model, driven by its instance thread.

use std::sync::Arc;

use nereid_core::{BackendError, Batch, DataType, ModelInstance, Tensor};

use crate::binding::{BoundInput, BoundOutput, InputPlan};
use crate::convert;
use crate::ffi::{Arg, Module, Output};
use crate::settings::Settings;

/// A loaded module (perhaps shared with the model's other instances on
/// the same device) and how batches map onto its forward().
#[derive(Debug)]
pub struct TorchInstance {
    /// "model 'm' version 1 instance 0", to prefix error messages.
    label: String,
    module: Arc<Module>,
    inputs: InputPlan,
    outputs: Vec<BoundOutput>,
    settings: Settings,
    /// CUDA device the inputs go to; None on the CPU.
    cuda: Option<u32>,
}

/// An input ready for forward(): an owned tensor or a string list
/// borrowed from the batch.
enum Prepared<'b> {
    Tensor(tch::Tensor),
    Strings(Vec<&'b [u8]>),
}

impl TorchInstance {
    pub(crate) fn new(
        label: String,
        module: Arc<Module>,
        inputs: InputPlan,
        outputs: Vec<BoundOutput>,
        settings: Settings,
        cuda: Option<u32>,
    ) -> Self {
        TorchInstance {
            label,
            module,
            inputs,
            outputs,
            settings,
            cuda,
        }
    }

    fn error(&self, message: impl std::fmt::Display) -> BackendError {
        BackendError::Execute(format!("{}: {message}", self.label))
    }

    fn bound_inputs(&self) -> &[BoundInput] {
        match &self.inputs {
            InputPlan::Positional(bound) | InputPlan::Dict(bound) => bound,
        }
    }

    /// The batch's inputs in forward()'s argument order.
    fn prepare<'b>(&self, batch: &'b Batch) -> Result<Vec<Prepared<'b>>, BackendError> {
        let mut bound: Vec<&BoundInput> = self.bound_inputs().iter().collect();
        bound.sort_by_key(|b| b.position);
        bound
            .into_iter()
            .map(|b| {
                let tensor = batch
                    .inputs
                    .iter()
                    .find(|t| t.name == b.name)
                    .ok_or_else(|| self.error(format_args!("input '{}' is missing", b.name)))?;
                if tensor.datatype != b.datatype {
                    return Err(self.error(format_args!(
                        "input '{}' is {}, model expects {}",
                        b.name, tensor.datatype, b.datatype
                    )));
                }
                if b.datatype == DataType::Bytes {
                    return convert::input_strings(tensor)
                        .map(Prepared::Strings)
                        .map_err(|e| self.error(e));
                }
                let value = convert::input_tensor(tensor).map_err(|e| self.error(e))?;
                let value = match self.cuda {
                    Some(d) => value
                        .f_to_device(tch::Device::Cuda(d as usize))
                        .map_err(|e| self.error(format_args!("input '{}': {e}", b.name)))?,
                    None => value,
                };
                Ok(Prepared::Tensor(value))
            })
            .collect()
    }

    /// The config outputs the batch asks for (all of them when it names
    /// none), each once.
    fn requested<'a>(&'a self, batch: &Batch) -> Result<Vec<&'a BoundOutput>, BackendError> {
        batch
            .requested(&self.outputs, |o| o.name.as_str())
            .map_err(|e| self.error(e))
    }
}

impl ModelInstance for TorchInstance {
    fn execute(&mut self, batch: &Batch) -> Result<Vec<Tensor>, BackendError> {
        let requested = self.requested(batch)?;
        let prepared = self.prepare(batch)?;
        let args: Vec<Arg<'_>> = prepared
            .iter()
            .map(|p| match p {
                Prepared::Tensor(t) => Arg::Tensor(t),
                Prepared::Strings(s) => Arg::Strings(s),
            })
            .collect();
        let dict_names: Option<Vec<&str>> = match &self.inputs {
            InputPlan::Dict(bound) => {
                let mut bound: Vec<&BoundInput> = bound.iter().collect();
                bound.sort_by_key(|b| b.position);
                Some(bound.iter().map(|b| b.name.as_str()).collect())
            }
            InputPlan::Positional(_) => None,
        };
        if let Some(enabled) = self.settings.tensor_fuser {
            tch::jit::f_set_tensor_expr_fuser_enabled(enabled).map_err(|e| self.error(e))?;
        }
        let results = self
            .module
            .forward(&args, dict_names.as_deref(), self.settings.exec)
            .map_err(|e| self.error(format_args!("PyTorch execute failure: {e}")))?;
        let count = results.len();
        if let Some(bad) = self.outputs.iter().find(|o| o.index >= count) {
            return Err(self.error(format_args!(
                "The output {} in the model configuration refers to an output index which doesn't exist. This model has {count} outputs",
                bad.name
            )));
        }
        requested
            .into_iter()
            .map(|output| {
                let value = results.get(output.index).map_err(|e| self.error(e))?;
                match value {
                    Output::Tensor(t) => convert::output_tensor(&output.name, output.datatype, &t),
                    Output::Strings(s) => {
                        convert::output_strings(&output.name, output.datatype, &s)
                    }
                }
                .map_err(|e| self.error(e))
            })
            .collect()
    }
}
