//! [`PythonBackend`]: Triton's `python` backend. Each instance is a worker
//! process running the model's `model.py`; a short-lived worker runs
//! `auto_complete_config` when configs may be completed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nereid_core::config_json::{model_config_from_json, model_config_json};
use nereid_core::model_config::ModelConfig;
use nereid_core::{Backend, BackendError, InferService, ModelInstance, ModelIo, ModelSource};
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::environment::Environments;
use crate::instance::PythonInstance;
use crate::service::Service;
use crate::side::SideContext;
use crate::worker::{Launch, Worker};

/// The file a version folder holds when the config names none.
const DEFAULT_MODEL_FILENAME: &str = "model.py";

/// How long `initialize` (and `auto_complete_config`) may take.
const START_TIMEOUT: Duration = Duration::from_secs(300);

/// Triton's Python backend on the interpreter `python`.
pub struct PythonBackend {
    python: PathBuf,
    /// The worker and `triton_python_backend_utils`, unpacked.
    sources: TempDir,
    /// The server, for models' BLS, model control and metrics calls.
    service: Service,
    /// Models' own environments (`EXECUTION_ENV_PATH`), unpacked.
    environments: Environments,
}

impl std::fmt::Debug for PythonBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PythonBackend")
            .field("python", &self.python)
            .finish_non_exhaustive()
    }
}

impl PythonBackend {
    /// Uses `python` (which needs numpy) for every worker.
    pub fn new(python: PathBuf) -> std::io::Result<Self> {
        Ok(PythonBackend {
            python,
            sources: crate::sources::unpack()?,
            service: Service::default(),
            environments: Environments::default(),
        })
    }

    /// Connects the backend to the server its models' BLS, model control
    /// and metrics calls go to (once; later calls are ignored). Until then
    /// such a call answers UNAVAILABLE.
    pub fn set_service(&self, service: Arc<dyn InferService>) {
        let _ = self.service.set(service);
    }
}

impl PythonBackend {
    /// The interpreter for a model whose file is `model_file`: its own
    /// environment's (`EXECUTION_ENV_PATH`), else the backend's.
    fn python_for(&self, config: &ModelConfig, model_file: &Path) -> Result<PathBuf, BackendError> {
        let model_dir = model_file
            .parent()
            .and_then(Path::parent)
            .unwrap_or(Path::new("."));
        let own = self
            .environments
            .python_for(config, model_dir)
            .map_err(|e| match e {
                BackendError::Load(message) => {
                    BackendError::Load(format!("model '{}': {message}", config.name))
                }
                other => other,
            })?;
        Ok(own.unwrap_or_else(|| self.python.clone()))
    }
}

fn config_json(config: &ModelConfig) -> Result<Value, BackendError> {
    let bytes = model_config_json(config).map_err(|e| BackendError::Load(e.to_string()))?;
    serde_json::from_slice(&bytes).map_err(|e| BackendError::Load(e.to_string()))
}

/// Triton's `args` for `initialize`: the instance's kind (`CPU`, `GPU`,
/// `MODEL`) and device id say where the model should place itself; the
/// backend moves nothing to a GPU.
fn initialize_args(source: &ModelSource) -> Result<Value, BackendError> {
    let config =
        model_config_json(&source.config).map_err(|e| BackendError::Load(e.to_string()))?;
    let version_dir = source.model_path.parent().unwrap_or(Path::new("."));
    let repository = version_dir.parent().unwrap_or(version_dir);
    Ok(json!({
        "model_config": String::from_utf8_lossy(&config),
        "model_instance_kind": source.device.kind_name(),
        "model_instance_name": source.instance_name,
        "model_instance_device_id": source.device.id().to_string(),
        "model_repository": repository,
        "model_version": source.version.to_string(),
        "model_name": source.model_name,
    }))
}

impl Backend for PythonBackend {
    fn name(&self) -> &'static str {
        "python"
    }

    /// Triton's Python models have a backend and no platform.
    fn platform(&self) -> &'static str {
        ""
    }

    fn default_model_filename(&self) -> &'static str {
        DEFAULT_MODEL_FILENAME
    }

    /// A Python model places itself (on `model_instance_device_id`), so as
    /// in Triton a GPU machine gives it `KIND_GPU` instances by default;
    /// one that ignores the GPU still runs.
    fn gpu_capable(&self) -> bool {
        true
    }

    fn inspect(&self, _: &Path) -> Result<ModelIo, BackendError> {
        Err(BackendError::Unsupported(
            "a Python model completes its config through auto_complete_config".into(),
        ))
    }

    fn auto_complete(
        &self,
        config: &ModelConfig,
        model_path: &Path,
    ) -> Option<Result<ModelConfig, BackendError>> {
        let run = || {
            let python = self.python_for(config, model_path)?;
            let label = format!("model '{}' (auto_complete_config)", config.name);
            let request = json!({"op": "auto_complete", "model_file": model_path, "config": config_json(config)?});
            let side = SideContext {
                model: config.name.clone(),
                label: label.clone(),
                service: Arc::clone(&self.service),
            };
            let (_worker, answer) = Worker::start(
                &python,
                self.sources.path(),
                &side,
                &request,
                "config",
                START_TIMEOUT,
            )
            .map_err(BackendError::Load)?;
            model_config_from_json(&answer["config"].to_string()).map_err(|e| {
                BackendError::Load(format!("{label}: the completed config is not valid: {e}"))
            })
        };
        Some(run())
    }

    fn load(&self, source: &ModelSource) -> Result<Box<dyn ModelInstance>, BackendError> {
        let label = format!(
            "model '{}' version {} instance {}",
            source.model_name, source.version, source.instance_index
        );
        let python = self.python_for(&source.config, &source.model_path)?;
        if !source.model_path.is_file() {
            return Err(BackendError::Load(format!(
                "{label}: unable to find '{}'",
                source.model_path.display()
            )));
        }
        let launch = Launch {
            python,
            sources: self.sources.path().to_path_buf(),
            initialize: json!({"op": "initialize", "model_file": source.model_path, "args": initialize_args(source)?}),
            side: SideContext {
                model: source.model_name.clone(),
                label,
                service: Arc::clone(&self.service),
            },
        };
        let max_open = max_open_requests(&source.config).map_err(BackendError::Load)?;
        let worker = launch.start(START_TIMEOUT).map_err(BackendError::Load)?;
        Ok(Box::new(PythonInstance::new(
            launch,
            worker,
            Arc::clone(&self.service),
            max_open,
        )?))
    }
}

/// The model parameter that bounds a decoupled model's open requests per
/// instance (sent to `execute`, final flag not yet sent); past it, requests
/// wait in the model's queue.
const MAX_OPEN_REQUESTS: &str = "nereid.max_open_requests";

/// Open requests per instance when the model does not say.
const DEFAULT_MAX_OPEN: usize = 1024;

fn max_open_requests(config: &ModelConfig) -> Result<usize, String> {
    let Some(parameter) = config.parameters.get(MAX_OPEN_REQUESTS) else {
        return Ok(DEFAULT_MAX_OPEN);
    };
    let value = parameter.string_value.trim();
    value
        .parse::<usize>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            format!(
                "model '{}': parameter {MAX_OPEN_REQUESTS} must be a positive whole number, not '{value}'",
                config.name
            )
        })
}

#[cfg(test)]
mod tests {
    use nereid_core::model_config::ModelParameter;

    use super::*;

    fn config(max_open: Option<&str>) -> ModelConfig {
        let mut config = ModelConfig {
            name: "m".into(),
            ..Default::default()
        };
        if let Some(value) = max_open {
            let value = ModelParameter {
                string_value: value.into(),
            };
            config.parameters.insert(MAX_OPEN_REQUESTS.into(), value);
        }
        config
    }

    #[test]
    fn the_open_request_bound_is_a_positive_number_or_the_default() {
        assert_eq!(max_open_requests(&config(None)), Ok(DEFAULT_MAX_OPEN));
        assert_eq!(max_open_requests(&config(Some(" 16 "))), Ok(16));
        for bad in ["0", "-1", "many", ""] {
            let error = max_open_requests(&config(Some(bad))).unwrap_err();
            assert!(
                error.contains("nereid.max_open_requests must be a positive whole number"),
                "{error}"
            );
        }
    }
}
