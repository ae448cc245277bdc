//! One loaded ONNX Runtime session, driven by its instance thread.

use std::borrow::Cow;
use std::sync::Arc;

use nereid_core::{BackendError, Batch, DataType, ModelInstance, Tensor};
use ort::session::Session;

use crate::convert;
use crate::run::{self, Inputs, RunPath};

/// A model input as the session declares it.
#[derive(Debug, Clone)]
struct InputSpec {
    name: String,
    datatype: DataType,
}

/// An instance of an ONNX model: its session (on CPU, the one its
/// version's other instances run as well) and what it takes and gives.
#[derive(Debug)]
pub struct OnnxInstance {
    /// "model 'm' version 1 instance 0", to prefix error messages.
    label: String,
    session: Arc<Session>,
    inputs: Vec<InputSpec>,
    outputs: Vec<String>,
    /// Run config entries from the model's parameters, set on every run.
    run_config: Vec<(String, String)>,
    run_path: RunPath,
}

impl OnnxInstance {
    pub(crate) fn new(
        label: String,
        session: Arc<Session>,
        run_config: Vec<(String, String)>,
        run_path: RunPath,
    ) -> Result<Self, BackendError> {
        let inputs = session
            .inputs()
            .iter()
            .map(|outlet| {
                let datatype = convert::tensor_type(outlet.dtype())
                    .and_then(|(ty, _)| convert::datatype_of(ty))
                    .ok_or_else(|| {
                        BackendError::Unsupported(format!(
                            "{label}: input '{}' has type {:?}, which Triton cannot express",
                            outlet.name(),
                            outlet.dtype()
                        ))
                    })?;
                Ok(InputSpec {
                    name: outlet.name().to_string(),
                    datatype,
                })
            })
            .collect::<Result<_, BackendError>>()?;
        let outputs = session
            .outputs()
            .iter()
            .map(|o| o.name().to_string())
            .collect();
        Ok(OnnxInstance {
            label,
            session,
            inputs,
            outputs,
            run_config,
            run_path,
        })
    }

    /// The session this instance runs on.
    #[cfg(test)]
    pub(crate) fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// Runs batches the other way from now on: lets a test take a CPU
    /// session through the GPU instances' IO-binding path.
    #[cfg(test)]
    pub(crate) fn with_run_path(mut self, run_path: RunPath) -> Self {
        self.run_path = run_path;
        self
    }

    fn execute_error(&self, message: impl std::fmt::Display) -> BackendError {
        BackendError::Execute(format!("{}: {message}", self.label))
    }

    /// Checks each input against the session and wraps it for ONNX Runtime.
    fn input_values<'b>(&self, batch: &'b Batch) -> Result<Inputs<'b>, BackendError> {
        for spec in &self.inputs {
            if !batch.inputs.iter().any(|t| t.name == spec.name) {
                return Err(self.execute_error(format_args!("input '{}' is missing", spec.name)));
            }
        }
        batch
            .inputs
            .iter()
            .map(|tensor| {
                let spec = self
                    .inputs
                    .iter()
                    .find(|s| s.name == tensor.name)
                    .ok_or_else(|| {
                        self.execute_error(format_args!("model has no input '{}'", tensor.name))
                    })?;
                if spec.datatype != tensor.datatype {
                    return Err(self.execute_error(format_args!(
                        "input '{}' is {}, model expects {}",
                        tensor.name, tensor.datatype, spec.datatype
                    )));
                }
                convert::check_size(tensor).map_err(|e| self.execute_error(e))?;
                let value = convert::input_value(tensor).map_err(|e| {
                    self.execute_error(format_args!("input '{}': {e}", tensor.name))
                })?;
                Ok((Cow::Borrowed(tensor.name.as_str()), value))
            })
            .collect()
    }
}

/// The outputs to compute: those `batch` names (once each), or all of the
/// model's when it names none.
fn output_names<'a>(
    outputs: &'a [String],
    batch: &Batch,
    label: &str,
) -> Result<Vec<&'a str>, BackendError> {
    if batch.outputs.is_empty() {
        return Ok(outputs.iter().map(String::as_str).collect());
    }
    let mut names: Vec<&str> = Vec::with_capacity(batch.outputs.len());
    for name in &batch.outputs {
        let known = outputs.iter().find(|o| *o == name).ok_or_else(|| {
            BackendError::Execute(format!("{label}: model has no output '{name}'"))
        })?;
        if !names.contains(&known.as_str()) {
            names.push(known);
        }
    }
    Ok(names)
}

impl ModelInstance for OnnxInstance {
    fn execute(&mut self, batch: &Batch) -> Result<Vec<Tensor>, BackendError> {
        let inputs = self.input_values(batch)?;
        let names = output_names(&self.outputs, batch, &self.label)?;
        run::run(
            self.run_path,
            &mut self.session,
            inputs,
            &names,
            &self.run_config,
        )
        .map_err(|e| BackendError::Execute(format!("{}: {e}", self.label)))
    }
}
