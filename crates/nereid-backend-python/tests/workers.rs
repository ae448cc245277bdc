//! The Python backend end to end below the engine: real worker processes
//! (on the project's .venv interpreter, which has numpy) running the
//! worker tests' models, resolved through the repository as the engine does.

#![expect(clippy::unwrap_used, reason = "test helpers may panic")]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use nereid_backend_python::PythonBackend;
use nereid_core::{
    Backend, BatchRequest, DataType, Device, InferRequest, InputTensor, ModelInstance, ModelSource,
};
use nereid_repository::{Repository, ResolvedModel};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn backend() -> Arc<dyn Backend> {
    let python = root().join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `make setup` first",
        python.display()
    );
    Arc::new(PythonBackend::new(python).unwrap())
}

/// A repository holding the worker tests' model `model` under `name`, with `config`.
fn repository(dir: &Path, name: &str, model: &str, config: &str) -> Repository {
    let source = root()
        .join("crates/nereid-backend-python/python/tests/models")
        .join(model)
        .join("1/model.py");
    std::fs::create_dir_all(dir.join(name).join("1")).unwrap();
    std::fs::copy(source, dir.join(name).join("1/model.py")).unwrap();
    std::fs::write(dir.join(name).join("config.pbtxt"), config).unwrap();
    Repository::new(vec![dir.to_path_buf()], false)
}

fn resolve(
    repo: &Repository,
    name: &str,
    backends: &[Arc<dyn Backend>],
) -> Result<ResolvedModel, String> {
    let entry = repo
        .scan()
        .unwrap()
        .into_iter()
        .find(|e| e.name == name)
        .unwrap();
    repo.resolve(&entry, backends).map_err(|e| e.to_string())
}

fn source(model: &ResolvedModel) -> ModelSource {
    ModelSource {
        model_name: model.name.clone(),
        version: 1,
        model_path: model.versions[0].model_path.clone(),
        config: model.config.clone(),
        device: Device::Cpu,
        instance_index: 0,
        instance_name: format!("{}_0_0", model.name),
    }
}

const ADD_SUB: &str = r#"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"#;

fn f32_input(name: &str, values: &[f32]) -> InputTensor {
    InputTensor {
        name: name.into(),
        datatype: DataType::Fp32,
        shape: vec![1, values.len() as i64],
        data: values
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>()
            .into(),
        parameters: Default::default(),
    }
}

fn f32s(data: &[u8]) -> Vec<f32> {
    data.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// A `max_batch_size: 0` model `name`, FP32 `IN` to `OUT`, loaded by
/// `backends[0]` (which must outlive it: it holds the worker's sources):
/// the `faulty` fixture, with `code` as its model.py when given.
fn in_out_instance(
    backends: &[Arc<dyn Backend>],
    dir: &Path,
    name: &str,
    code: Option<&str>,
) -> Box<dyn ModelInstance> {
    let config = r#"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
"#;
    let repo = repository(dir, name, "faulty", config);
    if let Some(code) = code {
        std::fs::write(dir.join(name).join("1/model.py"), code).unwrap();
    }
    let model = resolve(&repo, name, backends).unwrap();
    backends[0].load(&source(&model)).unwrap()
}

/// One request to an [`in_out_instance`]: `values` as IN, and `mode` as
/// its parameter "mode".
fn run_in_out(
    instance: &mut Box<dyn ModelInstance>,
    mode: &str,
    values: &[f32],
) -> Result<Vec<nereid_core::Tensor>, nereid_core::BackendError> {
    let mut parameters = nereid_core::Parameters::new();
    parameters.insert("mode".into(), nereid_core::Parameter::String(mode.into()));
    let request = InferRequest {
        inputs: vec![InputTensor {
            shape: vec![values.len() as i64],
            ..f32_input("IN", values)
        }],
        parameters,
        ..Default::default()
    };
    let outputs = vec!["OUT".to_string()];
    let batch = [BatchRequest {
        request: &request,
        outputs: &outputs,
        cancelled: &|| false,
        responder: None,
    }];
    let wise = instance.as_request_wise().unwrap();
    wise.execute_requests(&batch).pop().unwrap()
}

#[test]
fn a_batch_runs_as_its_requests_in_one_worker_call() {
    let dir = tempfile::tempdir().unwrap();
    let backends = vec![backend()];
    let repo = repository(dir.path(), "add_sub", "add_sub", ADD_SUB);
    let model = resolve(&repo, "add_sub", &backends).unwrap();
    let mut instance = backends[0].load(&source(&model)).unwrap();
    let requests: Vec<InferRequest> = (0..3)
        .map(|i| InferRequest {
            id: format!("r{i}"),
            inputs: vec![
                f32_input("INPUT0", &[i as f32; 4]),
                f32_input("INPUT1", &[1.0, 2.0, 3.0, 4.0]),
            ],
            ..Default::default()
        })
        .collect();
    let outputs = vec!["OUTPUT0".to_string(), "OUTPUT1".to_string()];
    let batch: Vec<BatchRequest<'_>> = requests
        .iter()
        .map(|r| BatchRequest {
            request: r,
            outputs: &outputs,
            cancelled: &|| false,
            responder: None,
        })
        .collect();
    let results = instance.as_request_wise().unwrap().execute_requests(&batch);
    assert_eq!(results.len(), 3);
    for (i, result) in results.into_iter().enumerate() {
        let tensors = result.unwrap();
        let sum = tensors.iter().find(|t| t.name == "OUTPUT0").unwrap();
        let diff = tensors.iter().find(|t| t.name == "OUTPUT1").unwrap();
        let x = i as f32;
        assert_eq!(f32s(&sum.data), [x + 1.0, x + 2.0, x + 3.0, x + 4.0]);
        assert_eq!(f32s(&diff.data), [x - 1.0, x - 2.0, x - 3.0, x - 4.0]);
        assert_eq!(sum.shape, [1, 4]);
    }
}

#[test]
fn an_import_error_fails_the_load_with_the_tracebacks_last_line() {
    let dir = tempfile::tempdir().unwrap();
    let backends = vec![backend()];
    let repo = repository(dir.path(), "broken", "import_error", ADD_SUB);
    let model = resolve(&repo, "broken", &backends);
    let err = match model {
        Err(e) => e,
        Ok(model) => match backends[0].load(&source(&model)) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a model that cannot import loaded"),
        },
    };
    assert!(err.contains("Error"), "{err}");
    assert!(!err.contains("Traceback"), "only the last line: {err}");
}

#[test]
fn auto_complete_config_fills_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let backends = vec![backend()];
    let repo = repository(dir.path(), "auto", "auto_complete", "backend: \"python\"");
    let model = resolve(&repo, "auto", &backends).unwrap();
    assert!(
        !model.config.input.is_empty() && !model.config.output.is_empty(),
        "{:?}",
        model.config
    );
}

/// A packed environment as conda-pack makes one: `bin/activate` and a
/// `bin/python3` (here a script that runs the tests' own interpreter,
/// which has numpy).
fn packed_environment(model_dir: &std::path::Path) {
    let python = std::path::absolute(root().join(".venv/bin/python")).unwrap();
    let file = std::fs::File::create(model_dir.join("env.tar.gz")).unwrap();
    let mut archive = tar::Builder::new(flate2::write::GzEncoder::new(
        file,
        flate2::Compression::fast(),
    ));
    // It leaves a mark, so the test sees that it ran.
    let mark = model_dir.join("env-used");
    let script = format!(
        "#!/bin/sh\ntouch {}\nexec {} \"$@\"\n",
        mark.display(),
        python.display()
    );
    for (path, mode, data) in [
        ("bin/activate", 0o644, String::new()),
        ("bin/python3", 0o755, script),
    ] {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(mode);
        header.set_cksum();
        archive
            .append_data(&mut header, path, data.as_bytes())
            .unwrap();
    }
    archive.into_inner().unwrap().finish().unwrap();
}

#[test]
fn execution_env_path_runs_the_model_on_its_environments_python() {
    let dir = tempfile::tempdir().unwrap();
    let backends = vec![backend()];
    let config = format!(
        "{ADD_SUB}\nparameters {{ key: \"EXECUTION_ENV_PATH\" value: {{ string_value: \"$$TRITON_MODEL_DIRECTORY/env.tar.gz\" }} }}\n"
    );
    let repo = repository(dir.path(), "env", "add_sub", &config);
    packed_environment(&dir.path().join("env"));
    let model = resolve(&repo, "env", &backends).unwrap();
    assert!(model.config.parameters.contains_key("EXECUTION_ENV_PATH"));
    // Completing the config and loading ran the unpacked python3.
    std::fs::remove_file(dir.path().join("env/env-used")).unwrap();
    backends[0].load(&source(&model)).unwrap();
    assert!(dir.path().join("env/env-used").exists());
}

#[test]
fn an_environment_without_activate_is_refused_with_tritons_words() {
    let dir = tempfile::tempdir().unwrap();
    let backends = vec![backend()];
    let config = format!(
        "{ADD_SUB}\nparameters {{ key: \"EXECUTION_ENV_PATH\" value: {{ string_value: \"$$TRITON_MODEL_DIRECTORY\" }} }}\n"
    );
    let repo = repository(dir.path(), "env", "add_sub", &config);
    let err = resolve(&repo, "env", &backends).unwrap_err();
    assert!(
        err.contains("does not exist. The Python environment should contain an 'activate' script."),
        "{err}"
    );
}

#[test]
fn a_worker_that_dies_fails_its_batch_and_is_started_again() {
    let dir = tempfile::tempdir().unwrap();
    // A model that takes its process down, which a Python exception cannot.
    let dies = r#"import json, os
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        if json.loads(requests[0].parameters()).get("mode") == "exit":
            os._exit(3)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
"#;
    let backends = vec![backend()];
    let mut instance = in_out_instance(&backends, dir.path(), "faulty", Some(dies));
    let run =
        |instance: &mut Box<dyn ModelInstance>, mode: &str| run_in_out(instance, mode, &[1.0, 2.0]);
    let err = run(&mut instance, "exit").unwrap_err().to_string();
    assert!(
        err.contains("the Python worker exited") && err.contains("started again"),
        "{err}"
    );
    let out = run(&mut instance, "").unwrap();
    assert_eq!(
        f32s(&out[0].data),
        [1.0, 2.0],
        "the restarted worker answers"
    );
    run(&mut instance, "exit").unwrap_err();
    assert_eq!(instance.failure(), None, "two deaths are restarted");
    run(&mut instance, "exit").unwrap_err();
    let failure = instance.failure().unwrap_or_default();
    assert!(failure.contains("died 3 times"), "{failure}");
    let err = run(&mut instance, "").unwrap_err().to_string();
    assert!(
        err.contains("died 3 times"),
        "a worker that keeps dying is not restarted: {err}"
    );
}

#[test]
fn a_worker_that_breaks_the_channel_fails_its_batch_and_is_started_again() {
    let dir = tempfile::tempdir().unwrap();
    // A model that corrupts its own worker's answer: cut short, or naming
    // an output region far larger than the file it lies in.
    let breaks = r#"import json
import triton_python_backend_utils as pb_utils
from nereid_pb import messages, runtime

REGION = messages._REGION


class Lying:
    size = REGION.size
    unpack_from = REGION.unpack_from

    def pack(self, file, offset, size):
        return REGION.pack(file, offset, size + (1 << 40))


class TritonPythonModel:
    def execute(self, requests):
        messages._REGION = REGION
        mode = json.loads(requests[0].parameters()).get("mode")
        current = runtime.current()
        send = current.send_outputs
        if mode == "cut":
            def cut(kind, payload, blocks):
                current.send_outputs = send
                send(kind, payload[:-3], blocks)
            current.send_outputs = cut
        if mode == "oversize":
            messages._REGION = Lying()
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
"#;
    let backends = vec![backend()];
    let mut instance = in_out_instance(&backends, dir.path(), "broken", Some(breaks));
    let run =
        |instance: &mut Box<dyn ModelInstance>, mode: &str| run_in_out(instance, mode, &[1.0, 2.0]);
    let err = run(&mut instance, "cut").unwrap_err().to_string();
    assert!(
        err.contains("model 'broken'") && err.contains("started again"),
        "the worker is stopped, and the batch fails naming the model: {err}"
    );
    assert_eq!(f32s(&run(&mut instance, "").unwrap()[0].data), [1.0, 2.0]);
    let err = run(&mut instance, "oversize").unwrap_err().to_string();
    assert!(
        err.contains("model 'broken'")
            && err.contains("output 'OUT'")
            && err.contains("past the end"),
        "{err}"
    );
    assert_eq!(
        f32s(&run(&mut instance, "").unwrap()[0].data),
        [1.0, 2.0],
        "the worker goes on after an output it could not place"
    );
}

#[test]
fn a_worker_that_never_answers_a_cancelled_batch_is_stopped_and_started_again() {
    let dir = tempfile::tempdir().unwrap();
    let hangs = r#"import json, time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        if json.loads(requests[0].parameters()).get("mode") == "hang":
            while True:
                time.sleep(1)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
"#;
    let backends = vec![backend()];
    let mut instance = in_out_instance(&backends, dir.path(), "hangs", Some(hangs));
    let mut parameters = nereid_core::Parameters::new();
    parameters.insert("mode".into(), nereid_core::Parameter::String("hang".into()));
    let request = InferRequest {
        inputs: vec![f32_input("IN", &[1.0])],
        parameters,
        ..Default::default()
    };
    let outputs = vec!["OUT".to_string()];
    let started = std::time::Instant::now();
    let batch = [BatchRequest {
        request: &request,
        outputs: &outputs,
        // The client went away (or its time ran out) a moment in.
        cancelled: &|| started.elapsed() > std::time::Duration::from_millis(200),
        responder: None,
    }];
    let wise = instance.as_request_wise().unwrap();
    let err = wise
        .execute_requests(&batch)
        .pop()
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("model 'hangs'") && err.contains("every request of the batch was cancelled"),
        "{err}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    assert_eq!(
        f32s(&run_in_out(&mut instance, "", &[3.0]).unwrap()[0].data),
        [3.0],
        "the worker was started again"
    );
}

/// Whether `address` lies in a mapping of a worker's shared-memory file.
fn in_worker_file(address: usize) -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter(|l| l.contains("/nereid-py-"))
        .any(|line| {
            let range = line.split_whitespace().next().unwrap_or_default();
            let (start, end) = range.split_once('-').unwrap_or_default();
            let parse = |v| usize::from_str_radix(v, 16).unwrap_or(0);
            (parse(start)..parse(end)).contains(&address)
        })
}

#[test]
fn a_large_output_is_not_copied_and_stays_whole_while_the_server_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let backends = vec![backend()];
    let mut instance = in_out_instance(&backends, dir.path(), "echo", None);
    let mut run = |value: f32| {
        let out = run_in_out(&mut instance, "", &vec![value; 1 << 16]).unwrap();
        out.into_iter().next().unwrap().data
    };
    let first = run(1.0);
    assert!(
        in_worker_file(first.as_ptr() as usize),
        "the output is a view of the worker's file, not a copy"
    );
    for value in 2..20 {
        assert!(f32s(&run(value as f32)).iter().all(|&v| v == value as f32));
    }
    assert!(
        f32s(&first).iter().all(|&v| v == 1.0),
        "the first output's region was not reused while it was held"
    );
}

#[test]
fn a_client_that_stops_waiting_is_seen_by_is_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let backends = vec![backend()];
    let config = r#"
backend: "python"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
"#;
    let repo = repository(dir.path(), "cancellable", "cancellable", config);
    let model = resolve(&repo, "cancellable", &backends).unwrap();
    let mut instance = backends[0].load(&source(&model)).unwrap();
    let requests: Vec<InferRequest> = (0..2)
        .map(|i| InferRequest {
            inputs: vec![f32_input("IN", &[i as f32, 1.0])],
            ..Default::default()
        })
        .collect();
    let outputs = vec!["OUT".to_string()];
    // The first client goes away 100 ms into the execute; the model waits
    // for that (up to 2 minutes) and answers it CANCELLED, the other normally.
    let started = std::time::Instant::now();
    let gone = move || started.elapsed() > std::time::Duration::from_millis(100);
    let batch = [
        BatchRequest {
            request: &requests[0],
            outputs: &outputs,
            cancelled: &gone,
            responder: None,
        },
        BatchRequest {
            request: &requests[1],
            outputs: &outputs,
            cancelled: &|| false,
            responder: None,
        },
    ];
    let mut results = instance
        .as_request_wise()
        .unwrap()
        .execute_requests(&batch)
        .into_iter();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "the model saw the cancellation"
    );
    let first = results.next().unwrap().unwrap_err().to_string();
    assert!(first.contains("request cancelled"), "{first}");
    let second = results.next().unwrap().unwrap();
    assert_eq!(f32s(&second[0].data), [1.0, 1.0]);
}

const ECHO_ARGS: &str = r#"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "ARGS" data_type: TYPE_STRING dims: [ 1 ] }, { name: "REQUEST" data_type: TYPE_STRING dims: [ 1 ] } ]
"#;

/// The `args` the echo_args model's `initialize` got, as it reports them.
fn initialize_args(instance: &mut Box<dyn ModelInstance>) -> serde_json::Value {
    let request = InferRequest {
        inputs: vec![InputTensor {
            shape: vec![1],
            ..f32_input("INPUT0", &[1.0])
        }],
        ..Default::default()
    };
    echoed(instance, &request, "ARGS")
}

/// The JSON the echo_args model answers `request` with in `output`.
fn echoed(
    instance: &mut Box<dyn ModelInstance>,
    request: &InferRequest,
    output: &str,
) -> serde_json::Value {
    let outputs = vec![output.to_string()];
    let batch = [BatchRequest {
        request,
        outputs: &outputs,
        cancelled: &|| false,
        responder: None,
    }];
    let mut results = instance.as_request_wise().unwrap().execute_requests(&batch);
    let tensors = results.pop().unwrap().unwrap();
    // One BYTES element: a 4-byte length, then the JSON text.
    serde_json::from_slice(&tensors[0].data[4..]).unwrap()
}

#[test]
fn gpu_and_model_instances_load_and_tell_the_model_where_they_run() {
    let dir = tempfile::tempdir().unwrap();
    let backends = vec![backend()];
    assert!(backends[0].gpu_capable(), "Python models place themselves");
    let repo = repository(dir.path(), "echo", "echo_args", ECHO_ARGS);
    let model = resolve(&repo, "echo", &backends).unwrap();
    for (device, kind, id, name) in [
        (Device::Gpu(1), "GPU", "1", "echo_1"),
        (Device::Model, "MODEL", "0", "group_0"),
        (Device::Cpu, "CPU", "0", "echo_0_0"),
    ] {
        let source = ModelSource {
            device,
            instance_name: name.into(),
            ..source(&model)
        };
        let mut instance = backends[0].load(&source).unwrap();
        let args = initialize_args(&mut instance);
        assert_eq!(args["model_instance_kind"], kind, "{args}");
        assert_eq!(args["model_instance_device_id"], id, "{args}");
        assert_eq!(args["model_instance_name"], name, "{args}");
        assert_eq!(args["model_name"], "echo", "{args}");
    }
}

/// A request's routing facts reach the model as Triton's Python backend
/// gives them: `correlation_id()`, `flags()` and `timeout()`, and not as
/// parameters (Triton 2.51 answers `{"routing_key":"u1","custom":"x"}|7|1|500000`
/// for a request with sequence_id 7, sequence_start, priority 1, timeout
/// 500000 and those two parameters).
#[test]
fn routing_facts_reach_the_model_as_triton_gives_them() {
    let dir = tempfile::tempdir().unwrap();
    let backends = vec![backend()];
    let repo = repository(dir.path(), "echo", "echo_args", ECHO_ARGS);
    let model = resolve(&repo, "echo", &backends).unwrap();
    let mut instance = backends[0].load(&source(&model)).unwrap();
    let mut parameters = nereid_core::Parameters::new();
    parameters.insert("custom".into(), nereid_core::Parameter::String("x".into()));
    let request = InferRequest {
        inputs: vec![InputTensor {
            shape: vec![1],
            ..f32_input("INPUT0", &[1.0])
        }],
        routing: nereid_core::Routing {
            sequence: nereid_core::Sequence {
                id: nereid_core::CorrelationId::Int(7),
                start: true,
                end: false,
            },
            priority: 1,
            timeout: Some(std::time::Duration::from_micros(500_000)),
            ..Default::default()
        },
        parameters,
        ..Default::default()
    };
    let seen = echoed(&mut instance, &request, "REQUEST");
    assert_eq!(seen["correlation_id"], 7, "{seen}");
    assert_eq!(seen["flags"], 1, "{seen}");
    assert_eq!(seen["timeout"], 500_000, "{seen}");
    let parameters: serde_json::Value =
        serde_json::from_str(seen["parameters"].as_str().unwrap()).unwrap();
    assert_eq!(parameters, serde_json::json!({"custom": "x"}), "{seen}");
}

/// A `load_model` call: the model, its config and its files.
type Load = (String, String, Vec<(String, Vec<u8>)>);

/// The server as the side channel's calls see it: a metrics registry, and
/// loads recorded instead of made.
#[derive(Default)]
struct FakeServer {
    metrics: Arc<nereid_core::custom_metrics::CustomMetrics>,
    loads: parking_lot::Mutex<Vec<Load>>,
}

impl nereid_core::InferService for FakeServer {
    fn infer_blocking(
        &self,
        _: InferRequest,
    ) -> Result<nereid_core::InferResponse, nereid_core::Error> {
        Err(nereid_core::Error::unsupported("no BLS here"))
    }

    fn infer_all_blocking(
        &self,
        _: InferRequest,
    ) -> Result<Vec<Result<nereid_core::InferResponse, nereid_core::Error>>, nereid_core::Error>
    {
        Err(nereid_core::Error::unsupported("no BLS here"))
    }

    fn is_decoupled(&self, _: &str, _: &nereid_core::ModelVersion) -> bool {
        false
    }

    fn load_model(
        &self,
        name: &str,
        config: &str,
        files: Vec<(String, Vec<u8>)>,
    ) -> Result<(), nereid_core::Error> {
        let load = (name.to_owned(), config.to_owned(), files);
        self.loads.lock().push(load);
        Ok(())
    }

    fn unload_model(&self, _: &str, _: bool) -> Result<(), nereid_core::Error> {
        Ok(())
    }

    fn is_model_ready(&self, _: &str, _: Option<i64>) -> bool {
        true
    }

    /// Every model is being loaded: a model's call for itself is refused.
    fn is_loading(&self, _: &str) -> bool {
        true
    }

    fn custom_metrics(&self) -> Arc<nereid_core::custom_metrics::CustomMetrics> {
        Arc::clone(&self.metrics)
    }
}

#[test]
fn side_calls_reach_the_server_and_a_workers_metrics_go_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let python = PythonBackend::new(root().join(".venv/bin/python")).unwrap();
    let server = Arc::new(FakeServer::default());
    python.set_service(Arc::clone(&server) as Arc<dyn nereid_core::InferService>);
    let backends: Vec<Arc<dyn Backend>> = vec![Arc::new(python)];
    let config = r#"
backend: "python"
max_batch_size: 0
output [ { name: "RESULT" data_type: TYPE_STRING dims: [ 1 ] } ]
"#;
    let repo = repository(dir.path(), "server_calls", "server_calls", config);
    let model = resolve(&repo, "server_calls", &backends).unwrap();
    let mut instance = backends[0].load(&source(&model)).unwrap();
    // initialize made the family and its counter.
    let snapshot = server.metrics.snapshot();
    assert_eq!(snapshot[0].name, "requests_total");
    assert_eq!(
        snapshot[0].series[0].0,
        [("model".to_string(), "server_calls".to_string())].into()
    );
    let outputs = vec!["RESULT".to_string()];
    let mut run = |case: &str| {
        let mut parameters = nereid_core::Parameters::new();
        parameters.insert("case".into(), nereid_core::Parameter::String(case.into()));
        let request = InferRequest {
            parameters,
            ..Default::default()
        };
        let batch = [BatchRequest {
            request: &request,
            outputs: &outputs,
            cancelled: &|| false,
            responder: None,
        }];
        let result = instance.as_request_wise().unwrap().execute_requests(&batch);
        let tensors = result.into_iter().next().unwrap().unwrap();
        String::from_utf8_lossy(&tensors[0].data[4..]).into_owned()
    };
    assert_eq!(run("count"), "2.0");
    assert_eq!(run("count"), "4.0");
    assert_eq!(run("load"), "null");
    let refused = run("load_self");
    assert!(
        refused.contains("Failed to load model: Failed to process the request for model 'server_calls_0_0', message: model 'server_calls' is being loaded"),
        "{refused}"
    );
    let loads = server.loads.lock().clone();
    assert_eq!(loads.len(), 1);
    assert_eq!(
        (&*loads[0].0, &*loads[0].1),
        ("other", r#"{"backend": "python"}"#)
    );
    assert_eq!(
        loads[0].2,
        [
            ("file:1/model.py".to_string(), b"print('other')".to_vec()),
            ("file:1/empty.txt".to_string(), Vec::new()),
        ]
    );
    drop(instance);
    // The worker has exited; its side thread drops its metrics on the way out.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !server.metrics.snapshot().is_empty() {
        assert!(std::time::Instant::now() < deadline, "the metrics stayed");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
