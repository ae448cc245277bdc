//! GPU and KIND_MODEL instances, and the IO-binding run path GPU instances
//! take, run here on the CPU provider. Where the library is the CPU build
//! (the usual case), GPU loads must fail with a reason.

use nereid_core::model_config::ModelOptimizationPolicy;
use nereid_core::model_config::model_optimization_policy::ExecutionAccelerators;
use nereid_core::model_config::model_optimization_policy::execution_accelerators::Accelerator;

use super::*;
use crate::gpu;
use crate::run::RunPath;

fn on_gpu(mut source: ModelSource, id: u32) -> ModelSource {
    source.device = Device::Gpu(id);
    source
}

/// Whether the loaded library is an `onnxruntime-gpu` build: that wheel
/// ships the CUDA provider beside the library.
fn library_has_cuda(backend: &OnnxBackend) -> bool {
    backend
        .library_path()
        .parent()
        .is_some_and(|dir| dir.join("libonnxruntime_providers_cuda.so").exists())
}

#[test]
fn gpu_capable_follows_the_library() {
    let Some(backend) = backend() else { return };
    assert_eq!(backend.gpu_capable(), library_has_cuda(&backend));
}

#[test]
fn a_gpu_instance_on_the_cpu_library_says_why_it_cannot_load() {
    let Some(backend) = backend() else { return };
    if backend.gpu_capable() {
        eprintln!("note: this ONNX Runtime has the CUDA provider; skipping the CPU-library check");
        return;
    }
    let err = backend
        .load(&on_gpu(source(example_model("simple", 1), &[]), 1))
        .err()
        .unwrap();
    let BackendError::Unsupported(message) = &err else {
        panic!("{err:?}")
    };
    let library = backend.library_path().display().to_string();
    for part in [
        "model 'test' version 1 instance 'test_0_0' on GPU 1: ",
        &format!(
            "the ONNX Runtime library at '{library}' was built without the CUDA execution provider"
        ),
        "install onnxruntime-gpu",
        "`make run GPU=1`",
        "KIND_CPU",
    ] {
        assert!(message.contains(part), "{message:?} lacks {part:?}");
    }
}

fn with_gpu_accelerator(
    mut source: ModelSource,
    name: &str,
    params: &[(&str, &str)],
) -> ModelSource {
    let accelerator = Accelerator {
        name: name.into(),
        parameters: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };
    source.config.optimization = Some(ModelOptimizationPolicy {
        execution_accelerators: Some(ExecutionAccelerators {
            gpu_execution_accelerator: vec![accelerator],
            ..Default::default()
        }),
        ..Default::default()
    });
    source
}

#[test]
fn a_tensorrt_accelerator_without_tensorrt_says_so() {
    let Some(backend) = backend() else { return };
    if gpu::tensorrt::find_runtime().is_ok() {
        eprintln!("note: libnvinfer loads here; skipping the missing-TensorRT check");
        return;
    }
    let trt = with_gpu_accelerator(
        on_gpu(source(example_model("simple", 1), &[]), 0),
        "tensorrt",
        &[("precision_mode", "FP16")],
    );
    let err = backend.load(&trt).err().unwrap();
    assert!(
        matches!(&err, BackendError::Unsupported(m)
            if m.contains("on GPU 0: TensorRT runtime library (libnvinfer) not found")),
        "{err:?}"
    );
}

#[test]
fn gpu_settings_are_checked_on_gpu_instances_only() {
    let Some(backend) = backend() else { return };
    let params = [("cudnn_conv_algo_search", "7")];
    let err = backend
        .load(&on_gpu(source(example_model("simple", 1), &params), 0))
        .err()
        .unwrap();
    assert_eq!(
        err,
        BackendError::Load(
            "model 'test': unsupported cudnn_conv_algo_search value '7' is requested \
             (expected 0 (EXHAUSTIVE), 1 (HEURISTIC), 2 (DEFAULT))"
                .into()
        )
    );
    let accelerated =
        with_gpu_accelerator(source(example_model("simple", 1), &params), "nope", &[]);
    backend
        .load(&accelerated)
        .expect("a CPU instance ignores GPU settings, as in Triton");
}

#[test]
fn kind_model_runs_on_cpu() {
    let Some(backend) = backend() else { return };
    let mut model = source(example_model("simple", 1), &[]);
    model.device = Device::Model;
    let mut instance = backend.load(&model).unwrap();
    let inputs = vec![
        tensor("INPUT0", DataType::Int32, &[1, 16], i32_bytes(0..16)),
        tensor("INPUT1", DataType::Int32, &[1, 16], i32_bytes([1; 16])),
    ];
    let out = instance.execute(&batch(inputs, &["OUTPUT0"])).unwrap();
    assert_eq!(out[0].data, Bytes::from(i32_bytes(1..17)));
}

/// A CPU instance of `path` taking `run_path`, on a session of its own as
/// a GPU instance's is (a pool of two threads is never shared).
fn instance(backend: &OnnxBackend, path: PathBuf, run_path: RunPath) -> crate::OnnxInstance {
    backend
        .load_instance(&source(path, &[("intra_op_thread_count", "2")]))
        .unwrap()
        .with_run_path(run_path)
}

/// Runs `batch` both ways and checks that they agree.
fn same_both_ways(backend: &OnnxBackend, path: PathBuf, batch: &Batch) -> Vec<Tensor> {
    let mut direct = instance(backend, path.clone(), RunPath::Direct);
    let mut bound = instance(backend, path, RunPath::IoBinding);
    let expected = direct.execute(batch).unwrap();
    let got = bound.execute(batch).unwrap();
    assert_eq!(got, expected);
    got
}

#[test]
fn the_io_binding_path_gives_what_the_direct_path_gives() {
    let Some(backend) = backend() else { return };
    let simple = || {
        vec![
            tensor("INPUT0", DataType::Int32, &[3, 16], i32_bytes(0..48)),
            tensor(
                "INPUT1",
                DataType::Int32,
                &[3, 16],
                i32_bytes((0..48).map(|i| 7 * i)),
            ),
        ]
    };
    let out = same_both_ways(&backend, example_model("simple", 1), &batch(simple(), &[]));
    assert_eq!(out.len(), 2, "no outputs named: all of them");
    let out = same_both_ways(
        &backend,
        example_model("simple", 1),
        &batch(simple(), &["OUTPUT1", "OUTPUT0"]),
    );
    let names: Vec<&str> = out.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["OUTPUT1", "OUTPUT0"], "in the order asked");
    assert_eq!(out[0].data, Bytes::from(i32_bytes((0..48).map(|i| -6 * i))));

    let strings = framed(&[b"", b"a\0b", &[0xff, 0x00], b"xyz"]);
    let text = batch(
        vec![tensor("INPUT0", DataType::Bytes, &[2, 2], strings.clone())],
        &[],
    );
    let out = same_both_ways(&backend, test_model("identity_string"), &text);
    assert_eq!(out[0].data, Bytes::from(strings));

    // An odd offset makes the input a copy rather than a borrowed view.
    let data = Bytes::from(f32_bytes([1.5, -2.0, 3.25, 0.0, 9.0])).slice(1..);
    let misaligned = vec![tensor("INPUT0", DataType::Fp32, &[1, 4], data.slice(..16))];
    same_both_ways(
        &backend,
        test_model("identity_fp32"),
        &batch(misaligned, &[]),
    );
    let fp16 = vec![tensor("INPUT0", DataType::Fp16, &[2, 3], vec![0x3cu8; 12])];
    same_both_ways(&backend, test_model("identity_fp16"), &batch(fp16, &[]));
}

#[test]
fn the_io_binding_path_fails_as_the_direct_path_does() {
    let Some(backend) = backend() else { return };
    let mut bound = instance(&backend, example_model("simple", 1), RunPath::IoBinding);
    let wrong_shape = vec![
        tensor("INPUT0", DataType::Int32, &[1, 8], i32_bytes(0..8)),
        tensor("INPUT1", DataType::Int32, &[1, 16], i32_bytes(0..16)),
    ];
    let err = bound.execute(&batch(wrong_shape, &[])).unwrap_err();
    assert!(
        matches!(&err, BackendError::Execute(m) if m.starts_with("model 'test' version 1 instance 0: ")),
        "{err:?}"
    );
    let missing = vec![tensor(
        "INPUT1",
        DataType::Int32,
        &[1, 16],
        i32_bytes(0..16),
    )];
    let err = bound.execute(&batch(missing, &[])).unwrap_err();
    assert!(
        matches!(&err, BackendError::Execute(m) if m.contains("input 'INPUT0' is missing")),
        "{err:?}"
    );
    // Still usable after a failed run.
    let good = vec![
        tensor("INPUT0", DataType::Int32, &[1, 16], i32_bytes(0..16)),
        tensor("INPUT1", DataType::Int32, &[1, 16], i32_bytes(0..16)),
    ];
    let out = bound.execute(&batch(good, &["OUTPUT1"])).unwrap();
    assert_eq!(out[0].data, Bytes::from(i32_bytes([0; 16])));
}

/// On a GPU machine with `onnxruntime-gpu` this runs `simple` on GPU 0
/// and checks it against CPU; anywhere else the load must fail, with the
/// model and GPU named, and not panic.
#[test]
fn a_gpu_instance_runs_as_the_cpu_one_does_or_says_why_not() {
    let Some(backend) = backend() else { return };
    let gpu = backend.load(&on_gpu(source(example_model("simple", 1), &[]), 0));
    let mut gpu = match gpu {
        Ok(instance) => instance,
        Err(err) => {
            eprintln!("note: no GPU instance here: {err}");
            assert!(
                err.to_string()
                    .starts_with("model 'test' version 1 instance 'test_0_0' on GPU 0: "),
                "{err:?}"
            );
            return;
        }
    };
    let mut cpu = load(&backend, example_model("simple", 1));
    let inputs = vec![
        tensor("INPUT0", DataType::Int32, &[2, 16], i32_bytes(0..32)),
        tensor(
            "INPUT1",
            DataType::Int32,
            &[2, 16],
            i32_bytes((0..32).rev()),
        ),
    ];
    let batch = batch(inputs, &["OUTPUT0", "OUTPUT1"]);
    assert_eq!(gpu.execute(&batch).unwrap(), cpu.execute(&batch).unwrap());
}
