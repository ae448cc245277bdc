//! [`OnnxBackend`]: inspects `.onnx` files and creates CPU sessions.

use std::path::{Path, PathBuf};

use nereid_core::{Backend, BackendError, Device, IoSpec, ModelInstance, ModelIo, ModelSource};
use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;
use ort::value::Outlet;

use crate::convert;
use crate::instance::OnnxInstance;
use crate::runtime::{self, Runtime};
use crate::settings::SessionSettings;

/// The file a version folder holds when the config names none.
const DEFAULT_MODEL_FILENAME: &str = "model.onnx";

/// Triton's `onnxruntime` backend (platform `onnxruntime_onnx`) on top of a
/// dynamically loaded ONNX Runtime.
#[derive(Debug, Clone)]
pub struct OnnxBackend {
    runtime: Runtime,
}

impl OnnxBackend {
    /// Loads ONNX Runtime (once per process) from `lib_path`, or else from
    /// `ORT_DYLIB_PATH`, or else from `libonnxruntime.so` on the loader's
    /// search path. A missing or too old library is a
    /// [`BackendError::Runtime`] naming the path.
    pub fn new(lib_path: Option<PathBuf>) -> Result<Self, BackendError> {
        let library = runtime::library_path(lib_path);
        Ok(OnnxBackend {
            runtime: runtime::runtime(&library)?,
        })
    }

    /// The ONNX Runtime library this backend runs on.
    pub fn library_path(&self) -> &Path {
        &self.runtime.library
    }

    fn session_builder(&self) -> Result<ort::session::builder::SessionBuilder, ort::Error> {
        Session::builder(&self.runtime.environment)
    }
}

/// Triton reads `<path>/model.onnx` when the model path is a folder.
fn model_file(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join(DEFAULT_MODEL_FILENAME)
    } else {
        path.to_path_buf()
    }
}

fn io_spec(outlet: &Outlet, path: &Path) -> Result<IoSpec, BackendError> {
    let unsupported = || {
        BackendError::Unsupported(format!(
            "'{}': '{}' has type {:?}, which Triton cannot express",
            path.display(),
            outlet.name(),
            outlet.dtype()
        ))
    };
    let (ty, dims) = convert::tensor_type(outlet.dtype()).ok_or_else(unsupported)?;
    let datatype = convert::datatype_of(ty).ok_or_else(unsupported)?;
    Ok(IoSpec::new(outlet.name(), datatype, dims))
}

impl Backend for OnnxBackend {
    fn name(&self) -> &'static str {
        "onnxruntime"
    }

    fn platform(&self) -> &'static str {
        "onnxruntime_onnx"
    }

    fn default_model_filename(&self) -> &'static str {
        DEFAULT_MODEL_FILENAME
    }

    fn inspect(&self, model_path: &Path) -> Result<ModelIo, BackendError> {
        let path = model_file(model_path);
        let load_error = |e: ort::Error| {
            BackendError::Load(format!("cannot read ONNX model '{}': {e}", path.display()))
        };
        // Only the declared inputs and outputs are needed: skip optimisation
        // and keep the inspecting session off the thread pools.
        let session = self
            .session_builder()
            .and_then(|b| {
                b.with_optimization_level(GraphOptimizationLevel::Disable)
                    .map_err(Into::into)
            })
            .and_then(|b| b.with_intra_threads(1).map_err(Into::into))
            .and_then(|mut b| b.commit_from_file(&path))
            .map_err(load_error)?;
        Ok(ModelIo {
            inputs: session
                .inputs()
                .iter()
                .map(|o| io_spec(o, &path))
                .collect::<Result<_, _>>()?,
            outputs: session
                .outputs()
                .iter()
                .map(|o| io_spec(o, &path))
                .collect::<Result<_, _>>()?,
        })
    }

    fn load(&self, source: &ModelSource) -> Result<Box<dyn ModelInstance>, BackendError> {
        let label = format!("model '{}' version {}", source.model_name, source.version);
        if let Device::Gpu(id) = source.device {
            return Err(BackendError::Unsupported(format!(
                "{label}: instance {} asks for GPU {id}, but the ONNX Runtime backend runs on CPU only \
                 (use instance_group kind KIND_CPU)",
                source.instance_index
            )));
        }
        let path = model_file(&source.model_path);
        if !path.is_file() {
            return Err(BackendError::Load(format!(
                "{label}: model file '{}' does not exist",
                path.display()
            )));
        }
        let settings = SessionSettings::from_config(&source.config)?;
        let load_error = |e: ort::Error| {
            BackendError::Load(format!("{label}: cannot load '{}': {e}", path.display()))
        };
        let session = self
            .session_builder()
            .and_then(|b| settings.apply(b))
            .and_then(|mut b| b.commit_from_file(&path))
            .map_err(load_error)?;
        tracing::debug!(model = %source.model_name, version = source.version, instance = source.instance_index,
            path = %path.display(), ?settings, "created ONNX Runtime session");
        let instance = OnnxInstance::new(
            format!("{label} instance {}", source.instance_index),
            session,
            settings.run_config_entries,
        )?;
        Ok(Box::new(instance))
    }
}
