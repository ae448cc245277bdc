//! The errors of this crate. Messages follow real Triton's wording where
//! Triton has one (so a user searching Triton's issues finds the answer),
//! and every variant carries the names and values a caller may need.

use std::fmt;
use std::path::PathBuf;

use nereid_core::BackendError;

/// A repository root could not be listed; nothing in it can be served.
#[derive(Debug, thiserror::Error)]
pub enum RepositoryError {
    #[error("cannot read model repository '{}': {source}", path.display())]
    UnreadableRoot {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// `config.pbtxt` is not valid protobuf text for `ModelConfig`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigParseError {
    /// The text does not parse; `line` and `column` are 1-based positions in
    /// the original file.
    #[error("{}{line}:{column}: {message}", path_prefix(path.as_ref()))]
    Syntax {
        path: Option<PathBuf>,
        line: usize,
        column: usize,
        message: String,
    },
    /// The embedded `model_config.proto` descriptor is unusable (a build bug).
    #[error("model configuration schema is unusable: {0}")]
    Schema(String),
}

fn path_prefix(path: Option<&PathBuf>) -> String {
    path.map(|p| format!("{}:", p.display()))
        .unwrap_or_default()
}

/// Whether a tensor is a model input or output, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorKind {
    Input,
    Output,
}

impl fmt::Display for TensorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TensorKind::Input => "input",
            TensorKind::Output => "output",
        })
    }
}

/// What is wrong with one `input` or `output` entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IoProblem {
    #[error("must specify 'name'")]
    MissingName,
    #[error("'{name}' must specify 'data_type'")]
    MissingDataType { name: String },
    #[error("'{name}' must specify 'dims'")]
    MissingDims { name: String },
    #[error("'{name}' dimension must be integer >= 1, or -1 to indicate a variable-size dimension")]
    BadDim { name: String, dim: i64 },
    #[error(
        "'{name}' cannot have empty reshape for non-batching model as scalar tensors are not supported"
    )]
    EmptyReshapeWithoutBatching { name: String },
    #[error(
        "'{name}' reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension"
    )]
    BadReshapeDim { name: String, dim: i64 },
    #[error("'{name}' has different size for dims and reshape")]
    ReshapeSizeMismatch {
        name: String,
        dims: Vec<i64>,
        reshape: Vec<i64>,
    },
    #[error("'{name}' has different number of variable-size dimensions for dims and reshape")]
    ReshapeVariableMismatch {
        name: String,
        dims: Vec<i64>,
        reshape: Vec<i64>,
    },
    #[error("'{name}' is specified more than once")]
    Duplicate { name: String },
    #[error("'{name}' NHWC/NCHW require 3 dims, got {dims}")]
    FormatNeedsThreeDims { name: String, dims: usize },
    #[error("'{name}' is a shape tensor, which is only supported for the TensorRT platform")]
    ShapeTensorNotTensorRt { name: String },
    #[error(
        "'{name}' uses non-linear IO format, which is only supported for the TensorRT platform"
    )]
    NonLinearFormatNotTensorRt { name: String },
    #[error("'{name}' uses non-linear IO format, which requires 3 dims, got {dims}")]
    NonLinearFormatNeedsThreeDims { name: String, dims: usize },
}

impl IoProblem {
    /// The offending value, appended after Triton's message.
    fn value_note(&self) -> String {
        match self {
            IoProblem::BadDim { dim, .. } | IoProblem::BadReshapeDim { dim, .. } => {
                format!(" (got {dim})")
            }
            IoProblem::ReshapeSizeMismatch { dims, reshape, .. }
            | IoProblem::ReshapeVariableMismatch { dims, reshape, .. } => {
                format!(" (dims {dims:?}, reshape {reshape:?})")
            }
            _ => String::new(),
        }
    }
}

/// A config that Triton's normalization and validation would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("model {kind} {problem} for {model}{}", problem.value_note())]
    Tensor {
        model: String,
        kind: TensorKind,
        problem: IoProblem,
    },
    #[error("'max_batch_size' must be non-negative value for {model} (got {value})")]
    NegativeMaxBatchSize { model: String, value: i32 },
    #[error("dynamic batching preferred size must be positive for {model} (got {size})")]
    PreferredBatchSizeNotPositive { model: String, size: i32 },
    #[error(
        "dynamic batching preferred size must be <= max batch size for {model} (preferred_batch_size {size}, max_batch_size {max_batch_size})"
    )]
    PreferredBatchSizeTooLarge {
        model: String,
        size: i32,
        max_batch_size: i32,
    },
    #[error("default priority level must be in range [1, {levels}] for {model} (got {value})")]
    DefaultPriorityOutOfRange {
        model: String,
        levels: u64,
        value: u64,
    },
    #[error(
        "priority queue policy must have priority level in range [1, {levels}] for {model} (got {value})"
    )]
    QueuePolicyPriorityOutOfRange {
        model: String,
        levels: u64,
        value: u64,
    },
    #[error("Only one priority level is allowed when 'preserve_ordering' is true for {model}")]
    PreserveOrderingWithPriorities { model: String },
    #[error(
        "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for {model}"
    )]
    PreserveOrderingWithDelay { model: String },
    /// A sequence batching rule; Triton's message, which names the model.
    #[error("{message}")]
    SequenceBatching { model: String, message: String },
    #[error(
        "Response Cache does not currently support model {model} with {feature}. Please disable the response cache."
    )]
    ResponseCacheUnsupported {
        model: String,
        feature: &'static str,
    },
    #[error("ensemble scheduling cannot be set for model '{model}' whose platform is not ensemble")]
    EnsembleSchedulingWithoutEnsemblePlatform { model: String },
    #[error("ensemble scheduling must be set for ensemble {model} whose platform is ensemble")]
    EnsembleWithoutScheduling { model: String },
    #[error("{message} for {model}")]
    BatchIo { model: String, message: String },
    #[error("{message}")]
    InstanceGroup {
        model: String,
        group: String,
        message: String,
    },
    #[error("{message} for {model}")]
    ModelMetrics { model: String, message: String },
}

/// Why one model cannot be served. The model's other state (other models,
/// other versions already serving) is unaffected.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(
        "failed to poll model '{name}': not unique across all model repositories ({})",
        paths_list(paths)
    )]
    NotUnique { name: String, paths: Vec<PathBuf> },
    #[error("cannot read '{}': {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("failed to parse model configuration: {0}")]
    Parse(#[from] ConfigParseError),
    #[error(
        "model configuration file '{}' not found (required with --strict-model-config=true)",
        path.display()
    )]
    MissingConfig { path: PathBuf },
    #[error(
        "unexpected directory name '{directory}' for model '{name}', directory name must equal model name"
    )]
    NameMismatch { directory: String, name: String },
    #[error("unknown backend '{backend}' for model '{model}'; available backends: {available}")]
    UnknownBackend {
        model: String,
        backend: String,
        available: String,
    },
    #[error("unknown platform '{platform}' for model '{model}'; available platforms: {available}")]
    UnknownPlatform {
        model: String,
        platform: String,
        available: String,
    },
    #[error("unexpected 'platform' and 'backend' pair, got:{platform}, {backend}")]
    PlatformBackendMismatch {
        model: String,
        platform: String,
        backend: String,
    },
    #[error(
        "Invalid model name: Could not determine backend for model '{model}' with no backend in model configuration. Expected model name of the form 'model.<backend_name>'."
    )]
    CannotDetermineBackend { model: String },
    #[error("failed to read inputs and outputs of '{}' for autofill: {source}", path.display())]
    Inspect { path: PathBuf, source: BackendError },
    /// The model's own config completion failed (a Python model's
    /// `auto_complete_config`, or its import); the reason is the model's,
    /// as Triton reports it.
    #[error("{source}")]
    AutoComplete { path: PathBuf, source: BackendError },
    #[error(
        "autofill failed for model '{model}': model does not support batching while non-zero max_batch_size is specified (max_batch_size {max_batch_size})"
    )]
    BatchingUnsupported { model: String, max_batch_size: i32 },
    #[error("unexpected inference {kind} '{name}', allowed {kind}s are: {}", allowed.join(", "))]
    UnknownTensor {
        model: String,
        kind: TensorKind,
        name: String,
        allowed: Vec<String>,
    },
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("at least one version must be available under the version policy of model '{model}'")]
    NoVersion { model: String },
    #[error(
        "failed to load '{model}' version {version}: model file '{}' not found",
        path.display()
    )]
    MissingModelFile {
        model: String,
        version: i64,
        path: PathBuf,
    },
    /// A file the config names would be read from outside the model's
    /// folder.
    #[error("model '{model}': {reason}")]
    OutsideModel { model: String, reason: String },
}

fn paths_list(paths: &[PathBuf]) -> String {
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    shown.join(", ")
}
