//! The backends this binary serves with. A backend that is not built in
//! (the TorchScript one without the `torch` feature, the SavedModel one
//! without `tensorflow`) or whose runtime does
//! not load (ONNX Runtime without its library) is still registered, as an
//! [`Unavailable`] one, so its models fail with the reason rather than an
//! "unknown platform".

use std::path::{Path, PathBuf};
use std::sync::Arc;

use nereid_backend_onnx::OnnxBackend;
use nereid_backend_python::PythonBackend;
use nereid_core::custom_metrics::CustomMetrics;
use nereid_core::{
    Backend, BackendError, Error, InferRequest, InferResponse, InferService, ModelInstance,
    ModelIo, ModelSource, ModelVersion,
};
use nereid_engine::{Answer, Call, Engine, EngineOptions, ModelControl};

use nereid_edge::model_control::{self, Param};

/// What the backends are made with (`--onnxruntime-library`,
/// `--backend-config python,python-path=...`).
#[derive(Debug, Clone)]
pub(crate) struct BackendSettings {
    pub onnxruntime_library: Option<PathBuf>,
    /// Where TensorFlow's C API is (`--tensorflow-library-dir`).
    pub tensorflow_library_dir: Option<PathBuf>,
    /// The interpreter Python models' workers run on.
    pub python: PathBuf,
}

/// The engine over every backend, the Python one connected to it (for
/// BLS and the repository calls models make). The server and `nereid
/// batch` both make theirs here; it must be called on a tokio runtime.
pub(crate) fn engine(
    options: EngineOptions,
    control: ModelControl,
    settings: &BackendSettings,
) -> Engine {
    let (all_backends, python, llm) = backends(settings);
    let engine = Engine::with_model_control(options, control, all_backends);
    connect_llm(llm, &engine);
    if let Some(python) = python {
        python.set_service(Arc::new(EngineService {
            engine: engine.clone(),
            runtime: tokio::runtime::Handle::current(),
        }));
    }
    engine
}

/// Every backend, in the order the repository tries them, and the Python
/// one again, to connect to the engine once it exists (for BLS).
fn backends(
    settings: &BackendSettings,
) -> (Vec<Arc<dyn Backend>>, Option<Arc<PythonBackend>>, Llm) {
    let (python, python_backend) = python(settings);
    let (llm, llm_backend) = llm();
    (
        vec![
            onnx(settings),
            torch(),
            python,
            tensorflow(settings),
            tensorrt(),
            llm,
        ],
        python_backend,
        llm_backend,
    )
}

#[cfg(feature = "llm")]
type Llm = Option<Arc<nereid_backend_llm::LlmBackend>>;
#[cfg(not(feature = "llm"))]
type Llm = Option<std::convert::Infallible>;

/// GGUF language models; their metrics join the server's custom families
/// once the engine exists.
#[cfg(feature = "llm")]
fn llm() -> (Arc<dyn Backend>, Llm) {
    let llm = Arc::new(nereid_backend_llm::LlmBackend::new());
    (Arc::clone(&llm) as Arc<dyn Backend>, Some(llm))
}

#[cfg(not(feature = "llm"))]
fn llm() -> (Arc<dyn Backend>, Llm) {
    let unavailable = Unavailable {
        name: "llamacpp",
        platform: "",
        default_model_filename: "model.gguf",
        reason: "this nereid is built without GGUF language models; build it with the `llm` \
                 feature (on by default; scripts/setup-llm.sh installs what it needs)"
            .to_owned(),
    };
    (Arc::new(unavailable), None)
}

#[cfg(feature = "llm")]
fn connect_llm(llm: Llm, engine: &Engine) {
    if let Some(llm) = llm {
        llm.set_metrics(Arc::clone(engine.custom_metrics()));
    }
}

#[cfg(not(feature = "llm"))]
fn connect_llm(_: Llm, _: &Engine) {}

/// TensorRT engines (`model.plan`) need libnvinfer, which no package
/// registry reachable from here serves; its models are UNAVAILABLE with
/// the reason (docs/compatibility.md says what a TensorRT machine needs).
fn tensorrt() -> Arc<dyn Backend> {
    let reason = match nereid_device::find_library(&nereid_device::LIBNVINFER) {
        Err(_) => "TensorRT runtime library (libnvinfer) not found".to_string(),
        Ok(found) => format!(
            "TensorRT runtime library ({found}) was found, but this nereid cannot run              TensorRT engines yet; convert the model to ONNX and serve it with              onnxruntime's TensorRT execution provider (gpu_execution_accelerator 'tensorrt')"
        ),
    };
    Arc::new(Unavailable {
        name: "tensorrt",
        platform: "tensorrt_plan",
        default_model_filename: "model.plan",
        reason,
    })
}

fn python(settings: &BackendSettings) -> (Arc<dyn Backend>, Option<Arc<PythonBackend>>) {
    match PythonBackend::new(settings.python.clone()) {
        Ok(python) => {
            let python = Arc::new(python);
            (Arc::clone(&python) as Arc<dyn Backend>, Some(python))
        }
        Err(e) => {
            tracing::error!(error = %e, "the Python backend is not available; Python models will not load");
            let unavailable = Unavailable {
                name: "python",
                platform: "",
                default_model_filename: "model.py",
                reason: format!("the Python backend cannot unpack its worker: {e}"),
            };
            (Arc::new(unavailable), None)
        }
    }
}

/// The engine as a Python model reaches it: BLS calls, the model
/// repository calls and custom metrics.
struct EngineService {
    engine: Engine,
    runtime: tokio::runtime::Handle,
}

impl InferService for EngineService {
    fn infer_blocking(&self, request: InferRequest) -> Result<InferResponse, Error> {
        let call = Call::one().nested();
        self.runtime
            .block_on(self.engine.infer(request, call))
            .and_then(Answer::one)
    }

    fn is_decoupled(&self, name: &str, version: &ModelVersion) -> bool {
        self.engine
            .version_number(name, version)
            .and_then(|version| self.engine.model(name, version))
            .is_ok_and(|m| m.is_decoupled())
    }

    fn load_model(
        &self,
        name: &str,
        config: &str,
        files: Vec<(String, Vec<u8>)>,
    ) -> Result<(), Error> {
        let mut params = Vec::with_capacity(files.len() + 1);
        if !config.is_empty() {
            params.push(("config".to_owned(), Param::Text(config.to_owned())));
        }
        params.extend(
            files
                .into_iter()
                .map(|(key, bytes)| (key, Param::Bytes(bytes))),
        );
        let request = model_control::load_request(name, params)?;
        self.runtime.block_on(self.engine.load_model(name, request))
    }

    fn unload_model(&self, name: &str, unload_dependents: bool) -> Result<(), Error> {
        self.runtime
            .block_on(self.engine.unload_model(name, unload_dependents))
    }

    fn is_model_ready(&self, name: &str, version: Option<i64>) -> bool {
        self.engine.model_ready(name, version)
    }

    fn is_loading(&self, name: &str) -> bool {
        self.engine.is_loading(name)
    }

    fn custom_metrics(&self) -> Arc<CustomMetrics> {
        Arc::clone(self.engine.custom_metrics())
    }

    fn infer_all_blocking(
        &self,
        request: InferRequest,
    ) -> Result<Vec<Result<InferResponse, Error>>, Error> {
        self.runtime.block_on(async {
            let (model, version, id) = (
                request.model_name.clone(),
                request.routing.version.clone(),
                request.id.clone(),
            );
            let mut stream = match self.engine.infer(request, Call::stream().nested()).await? {
                Answer::One(response) => return Ok(vec![Ok(response)]),
                Answer::Stream(stream) => stream,
            };
            let mut responses = Vec::new();
            while let Some(streamed) = stream.next().await {
                match streamed.response {
                    Some(response) => responses.push(response),
                    None => responses.push(Ok(InferResponse {
                        model_name: model.clone(),
                        model_version: version.number().unwrap_or(-1),
                        id: id.clone(),
                        outputs: Vec::new(),
                        parameters: Default::default(),
                        in_shared_memory: Vec::new(),
                    })),
                }
                if streamed.last {
                    break;
                }
            }
            Ok(responses)
        })
    }
}

fn onnx(settings: &BackendSettings) -> Arc<dyn Backend> {
    match OnnxBackend::new(settings.onnxruntime_library.clone()) {
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

/// SavedModels; the library loads with the first of them, and without it
/// they fail to load with how to install it.
#[cfg(feature = "tensorflow")]
fn tensorflow(settings: &BackendSettings) -> Arc<dyn Backend> {
    Arc::new(nereid_backend_tensorflow::TensorflowBackend::new(
        settings.tensorflow_library_dir.clone(),
    ))
}

#[cfg(not(feature = "tensorflow"))]
fn tensorflow(settings: &BackendSettings) -> Arc<dyn Backend> {
    if let Some(dir) = &settings.tensorflow_library_dir {
        tracing::warn!(dir = %dir.display(), "--tensorflow-library-dir is ignored: this nereid is built without the `tensorflow` feature");
    }
    Arc::new(Unavailable {
        name: "tensorflow",
        platform: "tensorflow_savedmodel",
        default_model_filename: "model.savedmodel",
        reason: "this nereid is built without TensorFlow SavedModel support; build it with \
                 the `tensorflow` feature (on by default)"
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
