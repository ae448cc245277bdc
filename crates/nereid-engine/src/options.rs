//! How the engine is told to find, load and watch models, and what a
//! repository-API load may carry.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use nereid_core::model_config::ModelConfig;
use nereid_device::Devices;
use nereid_repository::Mirror;

use crate::cache::CacheConfig;

/// What `/v2/health/ready` asks of the models (`--strict-readiness`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Readiness {
    /// Triton's `true`: every model is ready, each time it is asked.
    #[default]
    Strict,
    /// Triton's `false`: the server is up, whatever its models.
    Started,
    /// Nereid's `startup`: ready once every model has a version serving;
    /// from then until shutdown, loads that fail (a broken upload) show in
    /// the model's own readiness and the repository index, not here. What
    /// a Kubernetes readiness probe wants: a new pod joins only when its
    /// models serve, and one bad file does not take every pod out at once.
    Startup,
}

/// tritonserver's `--model-control-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ControlMode {
    /// Load every model at startup; never change them afterwards.
    #[default]
    None,
    /// Load every model at startup, then follow the repository folders:
    /// new, changed and removed models are loaded, reloaded and unloaded.
    Poll,
    /// Load only the startup models; the repository API loads and unloads.
    Explicit,
    /// Nereid's: explicit, and a request for a model in the repository
    /// that is not loaded loads it (see `nereid_residency`).
    OnDemand,
}

impl ControlMode {
    /// Whether the repository API may load and unload (explicit and
    /// on-demand control).
    pub fn takes_api_loads(self) -> bool {
        matches!(self, ControlMode::Explicit | ControlMode::OnDemand)
    }
}

/// How the engine finds and treats models.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    pub repositories: Vec<PathBuf>,
    /// Repositories among `repositories` that are local copies of remote
    /// ones (cloud repositories): refreshed before each scan that may load.
    pub mirrors: Vec<Arc<dyn Mirror>>,
    /// Refuse to autofill missing config fields from the model file.
    pub strict_model_config: bool,
    /// What server readiness asks of the models.
    pub strict_readiness: Readiness,
    /// The response cache (`--cache-config local,size=N` or
    /// `--cache-config redis,...`); `None`: no cache, so
    /// `response_cache { enable: true }` has no effect.
    pub response_cache: Option<CacheConfig>,
    /// The GPUs instances may run on and CUDA shared memory may live on.
    pub devices: Devices,
}

/// When models load and unload: tritonserver's `--model-control-mode`,
/// `--load-model` and `--repository-poll-secs`.
#[derive(Debug, Clone)]
pub struct ModelControl {
    pub mode: ControlMode,
    /// Models to load at startup in explicit mode; `*` loads every model.
    pub startup_models: Vec<String>,
    /// Poll mode: how often the whole repository is rescanned, whatever
    /// the file watcher reported. Zero turns following the repository
    /// off, as in tritonserver.
    pub poll_interval: Duration,
    /// Loads on demand, the memory budget, pinning.
    pub residency: nereid_residency::Options,
}

impl Default for ModelControl {
    fn default() -> Self {
        ModelControl {
            mode: ControlMode::None,
            startup_models: Vec::new(),
            poll_interval: Duration::from_secs(15),
            residency: nereid_residency::Options::default(),
        }
    }
}

/// What a repository-API load may carry besides the model name.
#[derive(Debug, Clone, Default)]
pub struct LoadRequest {
    /// Used in place of the model's `config.pbtxt` (Triton's `config`
    /// parameter); autofilled and validated the same way.
    pub config: Option<ModelConfig>,
    /// File contents by path inside the model folder, e.g. `1/model.onnx`
    /// (Triton's `file:<path>` parameters). When given, the model is loaded
    /// from these files alone, and `config` is required.
    pub files: Vec<(String, Vec<u8>)>,
    /// Traffic settings to merge in after the load (Nereid's `traffic`
    /// parameter, JSON). With neither config nor files, a model that is
    /// loaded is not reloaded: only its settings change.
    pub traffic: Option<String>,
}

/// A model that failed to load at startup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadFailure {
    pub model: String,
    pub reason: String,
}
