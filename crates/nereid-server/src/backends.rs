//! The backends this binary serves with. A backend that is not built in
//! (the TorchScript one without the `torch` feature) or whose runtime does
//! not load (ONNX Runtime without its library) is still registered, as an
//! [`Unavailable`] one, so its models fail with the reason rather than an
//! "unknown platform".

use std::path::Path;
use std::sync::Arc;

use nereid_backend_onnx::OnnxBackend;
use nereid_core::{Backend, BackendError, ModelInstance, ModelIo, ModelSource};

use crate::server::ServerConfig;

/// Every backend, in the order the repository tries them.
pub(crate) fn backends(config: &ServerConfig) -> Vec<Arc<dyn Backend>> {
    vec![onnx(config), torch(), python(config)]
}

fn python(config: &ServerConfig) -> Arc<dyn Backend> {
    match nereid_backend_python::PythonBackend::new(config.python.clone()) {
        Ok(python) => Arc::new(python),
        Err(e) => {
            tracing::error!(error = %e, "the Python backend is not available; Python models will not load");
            Arc::new(Unavailable {
                name: "python",
                platform: "",
                default_model_filename: "model.py",
                reason: format!("the Python backend cannot unpack its worker: {e}"),
            })
        }
    }
}

fn onnx(config: &ServerConfig) -> Arc<dyn Backend> {
    match OnnxBackend::new(config.onnxruntime_library.clone()) {
        Ok(onnx) => Arc::new(onnx),
        Err(e) => {
            tracing::error!(error = %e, "ONNX Runtime is not available; ONNX models will not load");
            Arc::new(Unavailable {
                name: "onnxruntime",
                platform: "onnxruntime_onnx",
                default_model_filename: "model.onnx",
                reason: format!("ONNX Runtime is not available: {e}"),
            })
        }
    }
}

#[cfg(feature = "torch")]
fn torch() -> Arc<dyn Backend> {
    Arc::new(nereid_backend_torch::TorchBackend::new())
}

#[cfg(not(feature = "torch"))]
fn torch() -> Arc<dyn Backend> {
    Arc::new(Unavailable {
        name: "pytorch",
        platform: "pytorch_libtorch",
        default_model_filename: "model.pt",
        reason: "this nereid is built without TorchScript support; build it with \
                 `--features torch` (`make run TORCH=1` sets that up)"
            .to_owned(),
    })
}

/// A backend that is known but cannot run here; every model on it fails
/// to load with `reason`.
#[derive(Debug)]
struct Unavailable {
    name: &'static str,
    platform: &'static str,
    default_model_filename: &'static str,
    reason: String,
}

impl Backend for Unavailable {
    fn name(&self) -> &'static str {
        self.name
    }

    fn platform(&self) -> &'static str {
        self.platform
    }

    fn default_model_filename(&self) -> &'static str {
        self.default_model_filename
    }

    fn inspect(&self, _: &Path) -> Result<ModelIo, BackendError> {
        Err(BackendError::Unsupported(self.reason.clone()))
    }

    fn load(&self, _: &ModelSource) -> Result<Box<dyn ModelInstance>, BackendError> {
        Err(BackendError::Unsupported(self.reason.clone()))
    }
}
