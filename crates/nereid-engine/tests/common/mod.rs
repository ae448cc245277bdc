//! A fake backend whose model "files" say what to do, and helpers to write
//! models and requests. Words in a model file: `broken` fails the load,
//! `gate` makes each execution wait for the shared gate, `offset N` adds N
//! to every element (so a swapped model answers differently), `slow`
//! makes the load take 200 ms, `requestwise` makes the instance take
//! batches request by request (failing a request whose first value is
//! negative, and counting its executions in `Controls::request_wise_calls`),
//! `panicky` makes an execution whose first value is 666 panic (a faulty
//! backend), `gpu N` makes an instance on a GPU hold N bytes of the fake
//! device layer's memory (its ledger) while it lives.

#![allow(dead_code, reason = "each test binary uses part of the helpers")]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use nereid_core::backend::IoSpec;
use nereid_core::testing::map_int32;
use nereid_core::{
    Backend, BackendError, Batch, BatchRequest, DataType, InferRequest, InputTensor, ModelInstance,
    ModelIo, ModelSource, Parameters, RequestWise, Tensor,
};

pub struct FakeBackend {
    pub gate: crossbeam_channel::Receiver<()>,
    pub started: crossbeam_channel::Sender<()>,
    /// Instances alive now: loaded and not yet dropped.
    pub live: Arc<AtomicUsize>,
    /// (executions, requests) seen by request-wise instances.
    pub request_wise_calls: Arc<parking_lot::Mutex<Vec<usize>>>,
    /// What `Backend::compute_only` answers (false unless a test says).
    pub compute_only: bool,
    /// The name of the thread each execution ran on, in order.
    pub threads: Arc<parking_lot::Mutex<Vec<String>>>,
    /// The fake GPUs' memory, when instances may run on them
    /// (`Backend::gpu_capable` answers whether there is one).
    pub ledger: Option<Arc<nereid_device::FakeLedger>>,
}

struct FakeInstance {
    request_wise: Option<Arc<parking_lot::Mutex<Vec<usize>>>>,
    gated: bool,
    panicky: bool,
    offset: i32,
    gate: crossbeam_channel::Receiver<()>,
    started: crossbeam_channel::Sender<()>,
    live: Arc<AtomicUsize>,
    threads: Arc<parking_lot::Mutex<Vec<String>>>,
    /// Fake device memory it holds: the ledger, the GPU and the bytes.
    holds: Option<(Arc<nereid_device::FakeLedger>, u32, u64)>,
}

impl Drop for FakeInstance {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::SeqCst);
        if let Some((ledger, gpu, bytes)) = &self.holds {
            ledger.free(*gpu, *bytes);
        }
    }
}

impl Backend for FakeBackend {
    fn name(&self) -> &'static str {
        "fake"
    }
    fn platform(&self) -> &'static str {
        "fake_platform"
    }
    fn default_model_filename(&self) -> &'static str {
        "model.fake"
    }
    fn compute_only(&self) -> bool {
        self.compute_only
    }
    fn gpu_capable(&self) -> bool {
        self.ledger.is_some()
    }
    fn inspect(&self, _: &Path) -> Result<ModelIo, BackendError> {
        let spec = |name: &str| IoSpec::new(name, DataType::Int32, vec![-1, 2]);
        Ok(ModelIo {
            inputs: vec![spec("INPUT0")],
            outputs: vec![spec("OUTPUT0")],
        })
    }
    /// A model file that says `embeds <name>` carries a file of that name.
    fn embedded_file(&self, model_path: &Path, name: &str) -> Option<Vec<u8>> {
        let text = std::fs::read_to_string(model_path).ok()?;
        text.contains(&format!("embeds {name}"))
            .then(|| format!("{name} from inside the model file").into_bytes())
    }
    fn load(&self, source: &ModelSource) -> Result<Box<dyn ModelInstance>, BackendError> {
        let text = std::fs::read_to_string(&source.model_path)
            .map_err(|e| BackendError::Load(e.to_string()))?;
        if text.contains("broken") {
            return Err(BackendError::Load("this model file is broken".into()));
        }
        if text.contains("slow") {
            std::thread::sleep(Duration::from_millis(200));
        }
        let offset = text
            .split_whitespace()
            .skip_while(|w| *w != "offset")
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let gpu_bytes: u64 = text
            .split_whitespace()
            .skip_while(|w| *w != "gpu")
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let holds = match (&self.ledger, source.device) {
            (Some(ledger), nereid_core::Device::Gpu(id)) if gpu_bytes > 0 => {
                ledger.allocate(id, gpu_bytes);
                Some((Arc::clone(ledger), id, gpu_bytes))
            }
            _ => None,
        };
        self.live.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(FakeInstance {
            holds,
            request_wise: text
                .contains("requestwise")
                .then(|| Arc::clone(&self.request_wise_calls)),
            gated: text.contains("gate"),
            panicky: text.contains("panicky"),
            offset,
            gate: self.gate.clone(),
            started: self.started.clone(),
            live: Arc::clone(&self.live),
            threads: Arc::clone(&self.threads),
        }))
    }
}

impl ModelInstance for FakeInstance {
    fn as_request_wise(&mut self) -> Option<&mut dyn RequestWise> {
        if self.request_wise.is_some() {
            Some(self)
        } else {
            None
        }
    }

    fn execute(&mut self, batch: &Batch) -> Result<Vec<Tensor>, BackendError> {
        let thread = std::thread::current()
            .name()
            .unwrap_or_default()
            .to_string();
        self.threads.lock().push(thread);
        if self.gated {
            let _ = self.started.send(());
            // Held until the test releases it (the bound only keeps a
            // failing test from hanging).
            let _ = self.gate.recv_timeout(Duration::from_secs(60));
        }
        let input = &batch.inputs[0];
        if self.panicky && input.data.starts_with(&666i32.to_le_bytes()) {
            panic!("injected fault: 666");
        }
        Ok(vec![map_int32(input, "OUTPUT0", |v| v + self.offset)])
    }
}

impl RequestWise for FakeInstance {
    fn execute_requests(
        &mut self,
        requests: &[BatchRequest<'_>],
    ) -> Vec<Result<Vec<Tensor>, BackendError>> {
        if let Some(calls) = &self.request_wise {
            calls.lock().push(requests.len());
        }
        requests
            .iter()
            .map(|r| {
                let input = &r.request.inputs[0];
                let first = i32::from_le_bytes([
                    input.data[0],
                    input.data[1],
                    input.data[2],
                    input.data[3],
                ]);
                if first < 0 {
                    return Err(BackendError::Execute(format!(
                        "request '{}' is negative",
                        r.request.id
                    )));
                }
                let batch = Batch {
                    inputs: vec![Tensor {
                        name: input.name.clone(),
                        datatype: input.datatype,
                        shape: input.shape.clone(),
                        data: input.data.clone(),
                    }],
                    outputs: r.outputs.to_vec(),
                };
                self.execute(&batch)
            })
            .collect()
    }
}

/// The gate's handles and the live-instance counter.
pub struct Controls {
    pub release: crossbeam_channel::Sender<()>,
    pub started: crossbeam_channel::Receiver<()>,
    pub live: Arc<AtomicUsize>,
    pub request_wise_calls: Arc<parking_lot::Mutex<Vec<usize>>>,
    pub threads: Arc<parking_lot::Mutex<Vec<String>>>,
}

pub fn backend() -> (FakeBackend, Controls) {
    let (release, gate) = crossbeam_channel::unbounded();
    let (started_tx, started) = crossbeam_channel::unbounded();
    let live = Arc::new(AtomicUsize::new(0));
    let request_wise_calls = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let threads = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let backend = FakeBackend {
        gate,
        started: started_tx,
        live: Arc::clone(&live),
        request_wise_calls: Arc::clone(&request_wise_calls),
        compute_only: false,
        threads: Arc::clone(&threads),
        ledger: None,
    };
    (
        backend,
        Controls {
            release,
            started,
            live,
            request_wise_calls,
            threads,
        },
    )
}

/// An engine over `root` with the fake backend, in model control `mode`
/// (startup models `startup`, polling every second).
pub fn engine(
    root: &Path,
    mode: nereid_engine::ControlMode,
    startup: &[&str],
) -> (nereid_engine::Engine, Controls) {
    let (backend, controls) = backend();
    let options = nereid_engine::EngineOptions {
        repositories: vec![root.to_path_buf()],
        mirrors: Vec::new(),
        strict_model_config: false,
        strict_readiness: nereid_engine::Readiness::Strict,
        response_cache: None,
        devices: Default::default(),
    };
    let control = nereid_engine::ModelControl {
        mode,
        startup_models: startup.iter().map(|s| s.to_string()).collect(),
        poll_interval: Duration::from_secs(1),
        ..Default::default()
    };
    let engine =
        nereid_engine::Engine::with_model_control(options, control, vec![Arc::new(backend)]);
    (engine, controls)
}

pub const CONFIG: &str = r#"
backend: "fake"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 2 ] } ]
"#;

/// Writes `<root>/<name>/config.pbtxt` and `<root>/<name>/1/model.fake`.
pub fn write_model(root: &Path, name: &str, config: &str, file: &str) {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("1")).unwrap();
    std::fs::write(dir.join("config.pbtxt"), config).unwrap();
    std::fs::write(dir.join("1/model.fake"), file).unwrap();
}

/// Writes `<root>/<name>/<version>/model.fake`.
pub fn write_version(root: &Path, name: &str, version: i64, file: &str) {
    let dir = root.join(name).join(version.to_string());
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("model.fake"), file).unwrap();
}

pub fn request(model: &str, values: &[i32]) -> InferRequest {
    let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    InferRequest {
        model_name: model.into(),
        inputs: vec![InputTensor {
            name: "INPUT0".into(),
            datatype: DataType::Int32,
            shape: vec![values.len() as i64 / 2, 2],
            data: Bytes::from(data),
            parameters: Parameters::new(),
        }],
        ..Default::default()
    }
}

/// The first element of OUTPUT0.
pub fn first_output(response: &nereid_core::InferResponse) -> i32 {
    let d = &response.outputs[0].data;
    i32::from_le_bytes([d[0], d[1], d[2], d[3]])
}

/// Polls `condition` every 20 ms until it holds or `timeout` passes.
pub async fn eventually(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    condition()
}

/// The engine as a client that takes one answer calls it.
pub trait InferOne {
    fn infer_one(
        &self,
        request: InferRequest,
    ) -> impl std::future::Future<Output = Result<nereid_core::InferResponse, nereid_core::Error>> + Send;
}

impl InferOne for nereid_engine::Engine {
    async fn infer_one(
        &self,
        request: InferRequest,
    ) -> Result<nereid_core::InferResponse, nereid_core::Error> {
        self.infer(request, nereid_engine::Call::one()).await?.one()
    }
}
