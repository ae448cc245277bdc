//! The two levels a backend implements: [`Backend`] (one per runtime:
//! inspects model files, creates instances) and [`ModelInstance`] (one per
//! configured instance, driven synchronously by its own OS thread).

use std::path::PathBuf;
use std::sync::Arc;

use crate::custom_metrics::CustomMetrics;
use crate::model_config::ModelConfig;
use crate::{DataType, Error, InferRequest, InferResponse, ModelVersion, Shape, Tensor};

/// The server as a backend sees it: how one model calls another (Triton's
/// "business logic scripting", BLS, in Python models).
pub trait InferService: Send + Sync {
    /// Runs `request` through the server, as a client's would run, and
    /// waits for the answer. Called from instance threads, never from async
    /// code.
    fn infer_blocking(&self, request: InferRequest) -> Result<InferResponse, Error>;

    /// As [`InferService::infer_blocking`], for a model of any kind: every
    /// response, in order, once the last has come (Triton's BLS
    /// `exec(decoupled=True)`). A final flag sent alone is an empty
    /// response at the end; a model that is not decoupled gives its one.
    fn infer_all_blocking(
        &self,
        request: InferRequest,
    ) -> Result<Vec<Result<InferResponse, Error>>, Error>;

    /// Whether the ready model `name` (at `version`) is decoupled; false
    /// when there is none.
    fn is_decoupled(&self, name: &str, version: &ModelVersion) -> bool;

    /// The model repository API's load, as a model calls it (Triton's
    /// `pb_utils.load_model`): loads `name` again from its folder, or
    /// with `config` (a model config as JSON; empty: none) and `files`
    /// (contents by `file:<version>/<path>`). Waits until the load is
    /// done. Only in explicit model control, as in Triton.
    fn load_model(
        &self,
        name: &str,
        config: &str,
        files: Vec<(String, Vec<u8>)>,
    ) -> Result<(), Error>;

    /// The repository API's unload (`pb_utils.unload_model`). Returns once
    /// the model no longer takes requests; those in flight finish later.
    fn unload_model(&self, name: &str, unload_dependents: bool) -> Result<(), Error>;

    /// Whether `name` (`version`; `None`: any) is ready (`pb_utils.is_model_ready`).
    fn is_model_ready(&self, name: &str, version: Option<i64>) -> bool;

    /// Whether a load or unload of `name` is under way. A model's own
    /// instance must not wait for a load of its model that waits for the
    /// instance (its `initialize`, its warmup).
    fn is_loading(&self, name: &str) -> bool;

    /// The server's custom metric families.
    fn custom_metrics(&self) -> Arc<CustomMetrics>;
}

/// Why a backend could not load or run a model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The runtime library itself is missing or unusable.
    #[error("{0}")]
    Runtime(String),
    /// The model file could not be read or compiled.
    #[error("{0}")]
    Load(String),
    /// The model or config asks for something this backend does not do.
    #[error("{0}")]
    Unsupported(String),
    /// Running a batch failed.
    #[error("{0}")]
    Execute(String),
    /// One request's own failure, with the kind its client should see (a
    /// Python model's error response with a `TritonError` code).
    #[error("{0}")]
    Request(Error),
}

impl From<BackendError> for Error {
    /// A request's own failure keeps its kind; any other failure of the
    /// backend is the server's.
    fn from(e: BackendError) -> Self {
        match e {
            BackendError::Request(e) => e,
            other => Error::internal(other.to_string()),
        }
    }
}

impl BackendError {
    /// The error a request's client sees: a request's own error as it is,
    /// any other as an internal error with its message.
    pub fn into_request_error(self) -> crate::Error {
        match self {
            BackendError::Request(e) => e,
            other => crate::Error::internal(other.to_string()),
        }
    }
}

/// One input or output the model file declares. `dims` include the batch
/// dimension when the model has one; `-1` means dynamic. A format that
/// does not record a tensor's type or shape (TorchScript records only
/// argument names) leaves them `None`, and autofill leaves them for the
/// config to give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IoSpec {
    pub name: String,
    pub datatype: Option<DataType>,
    pub dims: Option<Shape>,
}

impl IoSpec {
    /// A tensor whose type and shape the model file declares.
    pub fn new(name: impl Into<String>, datatype: DataType, dims: Shape) -> Self {
        IoSpec {
            name: name.into(),
            datatype: Some(datatype),
            dims: Some(dims),
        }
    }
}

/// What a model file says about its inputs and outputs (for autofill).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelIo {
    pub inputs: Vec<IoSpec>,
    pub outputs: Vec<IoSpec>,
}

/// Where an instance runs: its instance group's kind, with the GPU for
/// `KIND_GPU`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Cpu,
    /// The CUDA device ordinal, as the driver numbers the visible devices.
    Gpu(u32),
    /// `KIND_MODEL`: the model places itself (a TorchScript module saved
    /// with its tensors on their devices, a Python model that picks its
    /// own); the backend moves nothing.
    Model,
}

impl Device {
    /// Triton's name for the kind: `CPU`, `GPU` or `MODEL` (a Python
    /// model's `model_instance_kind`).
    pub fn kind_name(self) -> &'static str {
        match self {
            Device::Cpu => "CPU",
            Device::Gpu(_) => "GPU",
            Device::Model => "MODEL",
        }
    }

    /// The device id Triton reports for the instance: the GPU's, else 0.
    pub fn id(self) -> u32 {
        match self {
            Device::Gpu(id) => id,
            Device::Cpu | Device::Model => 0,
        }
    }
}

/// Everything a backend needs to create one instance of a model version.
#[derive(Debug, Clone)]
pub struct ModelSource {
    pub model_name: String,
    pub version: i64,
    /// The file (or folder) of this version that the backend loads.
    pub model_path: PathBuf,
    /// The complete (validated, filled) config.
    pub config: ModelConfig,
    pub device: Device,
    /// Index of this instance among the model's instances, for logs.
    pub instance_index: usize,
    /// Triton's instance name: `<instance group name>_<index in the group>`.
    pub instance_name: String,
}

/// A batch handed to an instance: one contiguous tensor per input, whose
/// first dimension is the batch when the model batches.
#[derive(Debug, Clone)]
pub struct Batch {
    pub inputs: Vec<Tensor>,
    /// Names of the outputs to compute.
    pub outputs: Vec<String>,
}

impl Batch {
    /// Of a model's `outputs` (named by `name`), the ones the batch asks
    /// for, each once, in the order asked; all of them when it names none.
    /// Errs with the first name the model does not have.
    pub fn requested<'a, T>(
        &self,
        outputs: &'a [T],
        name: impl Fn(&T) -> &str,
    ) -> Result<Vec<&'a T>, String> {
        if self.outputs.is_empty() {
            return Ok(outputs.iter().collect());
        }
        let mut chosen: Vec<&T> = Vec::with_capacity(self.outputs.len());
        for asked in &self.outputs {
            let output = outputs
                .iter()
                .find(|o| name(o) == asked)
                .ok_or_else(|| format!("model has no output '{asked}'"))?;
            if !chosen.iter().any(|c| name(c) == name(output)) {
                chosen.push(output);
            }
        }
        Ok(chosen)
    }
}

/// A model's config parameters as a backend reads its own (Triton's
/// `parameters { key: "..." value: { string_value: "..." } }`), naming the
/// model and the parameter in what it refuses.
#[derive(Debug, Clone, Copy)]
pub struct ParameterReader<'a> {
    config: &'a ModelConfig,
}

impl<'a> ParameterReader<'a> {
    pub fn new(config: &'a ModelConfig) -> Self {
        ParameterReader { config }
    }

    /// The parameter's value, trimmed; `None` when the config has none.
    pub fn value(&self, key: &str) -> Option<&'a str> {
        self.config
            .parameters
            .get(key)
            .map(|p| p.string_value.trim())
    }

    /// The load error for `key`'s `value`, which is not `expected`.
    pub fn bad(&self, key: &str, value: &str, expected: &str) -> BackendError {
        BackendError::Load(format!(
            "model '{}': parameter '{key}' is '{value}', expected {expected}",
            self.config.name
        ))
    }

    /// A boolean parameter in the spellings Triton's backends accept.
    pub fn flag(&self, key: &str) -> Result<Option<bool>, BackendError> {
        self.value(key)
            .map(|v| {
                crate::model_config::parse_bool_parameter(v)
                    .ok_or_else(|| self.bad(key, v, "true/false, 1/0, on/off or yes/no"))
            })
            .transpose()
    }
}

/// A runtime (ONNX Runtime, libtorch, TensorRT) that can host models.
pub trait Backend: Send + Sync {
    /// Triton's backend name ("onnxruntime").
    fn name(&self) -> &'static str;

    /// Triton's platform name for this backend's models ("onnxruntime_onnx").
    fn platform(&self) -> &'static str;

    /// The file a version folder holds when the config names none.
    fn default_model_filename(&self) -> &'static str;

    /// Reads the model's declared inputs and outputs.
    fn inspect(&self, model_path: &std::path::Path) -> Result<ModelIo, BackendError>;

    /// What the model declares when served by `config`, which may be
    /// incomplete (a SavedModel's inputs are those of the signature its
    /// parameters choose). [`Backend::inspect`] by default.
    fn inspect_for(
        &self,
        _config: &ModelConfig,
        model_path: &std::path::Path,
    ) -> Result<ModelIo, BackendError> {
        self.inspect(model_path)
    }

    /// Where a version folder keeps the model the config names `file`:
    /// `<version_dir>/<file>` by default. A backend whose models may also
    /// fill the version folder itself (TF Serving's SavedModel layout)
    /// says so here.
    fn model_path(&self, version_dir: &std::path::Path, file: &str) -> PathBuf {
        version_dir.join(file)
    }

    /// A backend whose models complete their own config (Triton's Python
    /// backend calls `TritonPythonModel.auto_complete_config`) returns the
    /// completed config here; `None`, the default, means autofill from
    /// [`Backend::inspect`]. Called when configs may be completed
    /// (`--strict-model-config=false`), before defaults and validation.
    fn auto_complete(
        &self,
        _config: &ModelConfig,
        _model_path: &std::path::Path,
    ) -> Option<Result<ModelConfig, BackendError>> {
        None
    }

    /// A file that a model's own format carries inside itself, asked for by
    /// the name a frontend looks for in the model's folder (a GGUF file's
    /// chat template and special tokens as `tokenizer_config.json`); read
    /// only when the folder has no such file. `None`, the default: none.
    fn embedded_file(&self, _model_path: &std::path::Path, _name: &str) -> Option<Vec<u8>> {
        None
    }

    /// Whether this backend can run instances on GPUs on this machine
    /// (its runtime has CUDA). When it can and GPUs exist, a model whose
    /// config names no instance kind gets `KIND_GPU` instances, as in
    /// Triton; when it cannot, `KIND_CPU` ones. `false` by default.
    fn gpu_capable(&self) -> bool {
        false
    }

    /// Whether its instances only compute on what they are given: no I/O,
    /// no waiting on another process or thread. A short execution of such
    /// an instance may run on the thread that received the request rather
    /// than be handed to the instance's own thread (docs/scheduler.md,
    /// "Running on the receiving thread"). `false` by default.
    fn compute_only(&self) -> bool {
        false
    }

    /// Creates one instance, ready to execute.
    fn load(&self, source: &ModelSource) -> Result<Box<dyn ModelInstance>, BackendError>;
}

/// One loaded copy of a model. Only ever used from one thread at a time.
pub trait ModelInstance: Send {
    /// Runs one batch and returns the requested outputs, batch dimension
    /// first when the model batches.
    fn execute(&mut self, batch: &Batch) -> Result<Vec<Tensor>, BackendError>;

    /// The instance's request-wise side, when it takes a batch as the
    /// requests that make it up rather than gathered into one [`Batch`]
    /// (Triton's Python backend hands `execute(requests)` a list). `None`,
    /// the default, means batches go through [`ModelInstance::execute`].
    fn as_request_wise(&mut self) -> Option<&mut dyn RequestWise> {
        None
    }

    /// Why the instance can run nothing more, once that is so (a Python
    /// worker that keeps dying); the engine then shows its model version
    /// UNAVAILABLE with this reason until the model is loaded again.
    /// `None`, the default, means it still serves.
    fn failure(&self) -> Option<String> {
        None
    }
}

/// One request of a batch, as a request-wise instance receives it.
#[derive(Clone)]
pub struct BatchRequest<'a> {
    pub request: &'a InferRequest,
    /// The outputs to return, in the order the client asked (every output
    /// of the model when it named none).
    pub outputs: &'a [String],
    /// Whether the client has stopped waiting for this request (closed its
    /// connection, cancelled the RPC); it may change while the batch runs.
    pub cancelled: &'a dyn Fn() -> bool,
    /// Where the responses go when the model is decoupled
    /// (`model_transaction_policy { decoupled: true }`): the instance
    /// sends them here as the model makes them, and its result for the
    /// request only says whether the execution failed. The instance may
    /// keep the responder past the execution, as Triton's decoupled models
    /// answer from other threads after `execute` returned: the request is
    /// open until its final flag, and ends with the flag alone when the
    /// last holder drops it without one. `None` for other models, which
    /// answer with their result.
    pub responder: Option<Arc<dyn Responder>>,
}

/// The way a decoupled model answers one request: any number of responses,
/// each with the outputs the client asked for or an error, then the final
/// flag (Triton's `TRITONSERVER_RESPONSE_COMPLETE_FINAL`), with the last
/// response or on its own. Nothing is sent after the final flag. Used from
/// any thread.
pub trait Responder: Send + Sync {
    /// Sends `response` (`None`: the final flag alone); `last` marks the
    /// request complete.
    fn send(&self, response: Option<Result<Vec<Tensor>, crate::Error>>, last: bool);

    /// Whether the client stopped waiting (closed its connection,
    /// cancelled the RPC); the model may stop early.
    fn is_cancelled(&self) -> bool;
}

impl std::fmt::Debug for BatchRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchRequest")
            .field("request", &self.request)
            .field("outputs", &self.outputs)
            .field("cancelled", &(self.cancelled)())
            .field("decoupled", &self.responder.is_some())
            .finish()
    }
}

/// An instance that runs a batch request by request and answers each on
/// its own, so one request's error does not fail the others.
pub trait RequestWise {
    /// Runs `requests` as one execution; returns one result per request,
    /// in order, each holding at least the outputs that request asked for.
    fn execute_requests(
        &mut self,
        requests: &[BatchRequest<'_>],
    ) -> Vec<Result<Vec<Tensor>, BackendError>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_asks_for_outputs_once_each_or_for_all() {
        let outputs = ["a", "b", "c"];
        let batch = |asked: &[&str]| Batch {
            inputs: Vec::new(),
            outputs: asked.iter().map(|s| s.to_string()).collect(),
        };
        fn name<'a>(o: &'a &str) -> &'a str {
            o
        }
        assert_eq!(
            batch(&[]).requested(&outputs, name).unwrap(),
            [&"a", &"b", &"c"]
        );
        assert_eq!(
            batch(&["c", "a", "c"]).requested(&outputs, name).unwrap(),
            [&"c", &"a"]
        );
        assert_eq!(
            batch(&["a", "z"]).requested(&outputs, name).unwrap_err(),
            "model has no output 'z'"
        );
    }
}
