//! [`OnnxBackend`]: inspects `.onnx` files and creates sessions, on CPU or
//! (through ONNX Runtime's CUDA provider) on a GPU.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use nereid_core::{Backend, BackendError, Device, IoSpec, ModelInstance, ModelIo, ModelSource};
use ort::session::Session;
use ort::session::builder::{GraphOptimizationLevel, SessionBuilder};
use ort::value::Outlet;

use crate::convert;
use crate::gpu::{self, GpuSettings, Provider};
use crate::instance::OnnxInstance;
use crate::run::RunPath;
use crate::runtime::{self, Runtime};
use crate::settings::SessionSettings;
use crate::shared::{SessionKey, SharedCache};

/// The file a version folder holds when the config names none.
const DEFAULT_MODEL_FILENAME: &str = "model.onnx";

/// Triton's `onnxruntime` backend (platform `onnxruntime_onnx`) on top of a
/// dynamically loaded ONNX Runtime.
#[derive(Debug, Clone)]
pub struct OnnxBackend {
    runtime: Runtime,
    /// The sessions CPU instances share, one per version and settings.
    sessions: Arc<SharedCache<SessionKey, Session>>,
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
            sessions: Arc::default(),
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

    /// True when the loaded library has the CUDA execution provider (the
    /// `onnxruntime-gpu` build); whether CUDA itself loads shows only when
    /// a GPU instance does.
    fn gpu_capable(&self) -> bool {
        gpu::cuda_available()
    }

    /// A session runs the graph and nothing else.
    fn compute_only(&self) -> bool {
        true
    }

    fn load(&self, source: &ModelSource) -> Result<Box<dyn ModelInstance>, BackendError> {
        Ok(Box::new(self.load_instance(source)?))
    }
}

impl OnnxBackend {
    /// Creates one instance: on CPU, on the session its version's other
    /// instances run (made by the first of them); on a GPU, on a session of
    /// its own. `KIND_MODEL` runs on CPU, as in Triton's backend, which adds
    /// GPU providers for `KIND_GPU` only.
    pub(crate) fn load_instance(&self, source: &ModelSource) -> Result<OnnxInstance, BackendError> {
        let label = format!("model '{}' version {}", source.model_name, source.version);
        let path = model_file(&source.model_path);
        if !path.is_file() {
            return Err(BackendError::Load(format!(
                "{label}: model file '{}' does not exist",
                path.display()
            )));
        }
        let settings = SessionSettings::from_config(&source.config)?;
        let (session, run_path) = match source.device {
            Device::Cpu | Device::Model if settings.shareable() => {
                let key = SessionKey::new(&source.model_name, source.version, &path, &settings)
                    .map_err(|e| {
                        BackendError::Load(format!(
                            "{label}: cannot read '{}': {e}",
                            path.display()
                        ))
                    })?;
                let session = self.sessions.get_or_build(key, || {
                    self.new_session(source, &path, &settings, Vec::new(), &label)
                })?;
                (session, RunPath::Direct)
            }
            Device::Cpu | Device::Model => (
                Arc::new(self.new_session(source, &path, &settings, Vec::new(), &label)?),
                RunPath::Direct,
            ),
            Device::Gpu(id) => {
                let providers = self.gpu_providers(source, id, &label)?;
                let session = self.new_session(source, &path, &settings, providers, &label)?;
                (Arc::new(session), RunPath::IoBinding)
            }
        };
        OnnxInstance::new(
            format!("{label} instance {}", source.instance_index),
            session,
            settings.run_config_entries,
            run_path,
        )
    }

    /// A session of `path` with `settings` on `providers` (none: CPU).
    fn new_session(
        &self,
        source: &ModelSource,
        path: &Path,
        settings: &SessionSettings,
        providers: Vec<Provider>,
        label: &str,
    ) -> Result<Session, BackendError> {
        let load_error = |e: ort::Error| {
            BackendError::Load(format!("{label}: cannot load '{}': {e}", path.display()))
        };
        let builder = self.session_builder().map_err(load_error)?;
        // The GPU providers go first: ONNX Runtime gives each node to the
        // first provider registered that takes it, and the settings may
        // register the CPU one.
        let builder = register(builder, providers, source, label)?;
        let session = settings
            .apply(builder)
            .and_then(|mut b| b.commit_from_file(path))
            .map_err(load_error)?;
        tracing::debug!(model = %source.model_name, version = source.version, instance = %source.instance_name,
            device = ?source.device, path = %path.display(), ?settings, "created ONNX Runtime session");
        Ok(session)
    }

    /// A `KIND_GPU` instance's execution providers, or why it cannot have
    /// them. Its GPU settings are read here only: Triton ignores them on CPU.
    fn gpu_providers(
        &self,
        source: &ModelSource,
        id: u32,
        label: &str,
    ) -> Result<Vec<Provider>, BackendError> {
        let settings = GpuSettings::from_config(&source.config)?;
        gpu::providers(&settings, id, &self.runtime.library).map_err(|reason| {
            BackendError::Unsupported(format!(
                "{label} instance '{}' on GPU {id}: {reason}",
                source.instance_name
            ))
        })
    }
}

/// Registers `providers` in order, each one's failure failing the load:
/// a GPU instance must not quietly run on CPU.
fn register(
    mut builder: SessionBuilder,
    providers: Vec<Provider>,
    source: &ModelSource,
    label: &str,
) -> Result<SessionBuilder, BackendError> {
    for provider in providers {
        builder = builder
            .with_execution_providers([provider.dispatch])
            .map_err(|e| {
                BackendError::Load(format!(
                    "{label} instance '{}' on GPU {}: cannot use ONNX Runtime's {}: {}",
                    source.instance_name,
                    source.device.id(),
                    provider.name,
                    e.to_string().trim_end()
                ))
            })?;
    }
    Ok(builder)
}
