//! The TorchScript backend on the committed test models
//! (`tests/models_torch/`, made by `scripts/make_torch_models.py`), through
//! the repository's own resolution, as the engine loads them.

#![expect(clippy::unwrap_used, reason = "test helpers may panic")]

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use nereid_backend_torch::TorchBackend;
use nereid_core::model_config::DataType as ConfigDataType;
use nereid_core::tensor::{bytes_elements, push_bytes_element};
use nereid_core::{
    Backend, BackendError, Batch, DataType, Device, ModelInstance, ModelSource, Tensor,
};
use nereid_repository::{Repository, ResolvedModel};

fn repository() -> Repository {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/models_torch");
    Repository::new(vec![root], false)
}

fn backends() -> Vec<Arc<dyn Backend>> {
    vec![Arc::new(TorchBackend::new())]
}

fn resolve(name: &str) -> ResolvedModel {
    let repo = repository();
    let entry = repo
        .scan()
        .unwrap()
        .into_iter()
        .find(|e| e.name == name)
        .unwrap_or_else(|| panic!("no test model {name}"));
    repo.resolve(&entry, &backends()).unwrap()
}

fn source(model: &ResolvedModel, device: Device) -> ModelSource {
    ModelSource {
        model_name: model.name.clone(),
        version: model.versions[0].version,
        model_path: model.versions[0].model_path.clone(),
        config: model.config.clone(),
        device,
        instance_index: 0,
        instance_name: format!("{}_0_0", model.name),
    }
}

fn load(name: &str) -> Box<dyn ModelInstance> {
    let model = resolve(name);
    let backend = model.backend.clone().unwrap();
    backend.load(&source(&model, Device::Cpu)).unwrap()
}

fn load_error(model: &ResolvedModel, device: Device) -> BackendError {
    match model.backend.clone().unwrap().load(&source(model, device)) {
        Ok(_) => panic!("model '{}' loaded", model.name),
        Err(e) => e,
    }
}

fn f32s(name: &str, shape: &[i64], values: &[f32]) -> Tensor {
    Tensor {
        name: name.into(),
        datatype: DataType::Fp32,
        shape: shape.to_vec(),
        data: values
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>()
            .into(),
    }
}

fn as_f32(t: &Tensor) -> Vec<f32> {
    t.data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn run(
    instance: &mut dyn ModelInstance,
    inputs: Vec<Tensor>,
    outputs: &[&str],
) -> Result<Vec<Tensor>, BackendError> {
    instance.execute(&Batch {
        inputs,
        outputs: outputs.iter().map(|s| s.to_string()).collect(),
    })
}

#[test]
fn inputs_bind_by_forward_argument_name() {
    let mut m = load("torch_forward_args");
    // The config lists y before x; forward(x, y) returns x - y.
    let out = run(
        m.as_mut(),
        vec![
            f32s("y", &[1, 2], &[10.0, 20.0]),
            f32s("x", &[1, 2], &[1.0, 2.0]),
        ],
        &[],
    )
    .unwrap();
    assert_eq!(as_f32(&out[0]), [-9.0, -18.0]);
    assert_eq!(out[0].shape, [1, 2]);
}

#[test]
fn inputs_bind_in_config_order_when_names_say_nothing() {
    let mut m = load("torch_strict_order");
    let out = run(
        m.as_mut(),
        vec![
            f32s("second", &[2, 2], &[1.0, 2.0, 3.0, 4.0]),
            f32s("first", &[2, 2], &[5.0; 4]),
        ],
        &[],
    )
    .unwrap();
    assert_eq!(out[0].name, "difference");
    assert_eq!(as_f32(&out[0]), [4.0, 3.0, 2.0, 1.0]);
}

#[test]
fn every_numeric_datatype_round_trips() {
    for (short, datatype, element) in [
        ("bool", DataType::Bool, 1),
        ("uint8", DataType::Uint8, 1),
        ("int8", DataType::Int8, 1),
        ("int16", DataType::Int16, 2),
        ("int32", DataType::Int32, 4),
        ("int64", DataType::Int64, 8),
        ("fp16", DataType::Fp16, 2),
        ("bf16", DataType::Bf16, 2),
        ("fp32", DataType::Fp32, 4),
        ("fp64", DataType::Fp64, 8),
    ] {
        let mut m = load(&format!("torch_identity_{short}"));
        let data: Vec<u8> = (0..2 * 3 * element)
            .map(|i| {
                if datatype == DataType::Bool {
                    (i % 2) as u8
                } else {
                    (i * 7 % 100) as u8
                }
            })
            .collect();
        let input = Tensor {
            name: "INPUT__0".into(),
            datatype,
            shape: vec![2, 3],
            data: Bytes::from(data.clone()),
        };
        let out = run(m.as_mut(), vec![input], &[]).unwrap();
        assert_eq!(
            (
                out[0].datatype,
                out[0].shape.as_slice(),
                out[0].data.as_ref()
            ),
            (datatype, &[2, 3][..], data.as_slice()),
            "{short}"
        );
    }
}

#[test]
fn tuple_outputs_are_found_by_index() {
    let mut m = load("torch_multi_output");
    let x = f32s(
        "INPUT__0",
        &[2, 4],
        &[1.0, -2.0, 3.0, -4.0, 0.5, 0.5, 0.5, 0.5],
    );
    let out = run(m.as_mut(), vec![x.clone()], &[]).unwrap();
    let names: Vec<&str> = out.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["OUT__2", "OUT__0", "OUT__1"]);
    assert_eq!(out[0].datatype, DataType::Bool);
    assert_eq!(out[0].data.as_ref(), [1, 0, 1, 0, 1, 1, 1, 1]);
    assert_eq!(as_f32(&out[1]), [2.0, -1.0, 4.0, -3.0, 1.5, 1.5, 1.5, 1.5]);
    assert_eq!(
        (out[2].datatype, out[2].shape.as_slice()),
        (DataType::Int64, &[2, 1][..])
    );
    let sums: Vec<i64> = out[2]
        .data
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(sums, [-2, 2]);
    let only = run(m.as_mut(), vec![x], &["OUT__1", "OUT__1"]).unwrap();
    assert_eq!(only.len(), 1, "an output asked for twice comes once");
}

#[test]
fn list_outputs_work_like_tuples() {
    let mut m = load("torch_list_output");
    let out = run(
        m.as_mut(),
        vec![f32s("INPUT__0", &[1, 3], &[1.0, 2.0, 3.0])],
        &["TRIPLE"],
    )
    .unwrap();
    assert_eq!(as_f32(&out[0]), [3.0, 6.0, 9.0]);
}

#[test]
fn strings_pass_byte_exact() {
    let mut m = load("torch_strings");
    let elements: [&[u8]; 4] = [b"hello", b"", b"nul\0inside", b"\xff\xfe raw"];
    let mut data = Vec::new();
    for e in elements {
        push_bytes_element(&mut data, e);
    }
    let input = Tensor {
        name: "INPUT__0".into(),
        datatype: DataType::Bytes,
        shape: vec![4],
        data: data.into(),
    };
    let out = run(m.as_mut(), vec![input], &[]).unwrap();
    assert_eq!(
        (out[0].datatype, out[0].shape.as_slice()),
        (DataType::Bytes, &[4][..])
    );
    let back: Vec<&[u8]> = bytes_elements(&out[0].data)
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(back, elements);
    let lengths: Vec<i64> = out[1]
        .data
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(&lengths[..3], [5, 0, 10]);
}

#[test]
fn a_dict_argument_gets_inputs_by_name() {
    let mut m = load("torch_dict_input");
    let out = run(
        m.as_mut(),
        vec![
            f32s("b", &[1, 2], &[1.0, 1.0]),
            f32s("a", &[1, 2], &[5.0, 7.0]),
        ],
        &[],
    )
    .unwrap();
    assert_eq!(as_f32(&out[0]), [4.0, 6.0]);
}

#[test]
fn triton_parameters_are_honoured_with_shared_weights() {
    let model = resolve("torch_parameters");
    let backend = model.backend.clone().unwrap();
    let mut instances: Vec<_> = (0..2)
        .map(|i| {
            backend
                .load(&ModelSource {
                    instance_index: i,
                    ..source(&model, Device::Cpu)
                })
                .unwrap()
        })
        .collect();
    for m in &mut instances {
        let out = run(
            m.as_mut(),
            vec![
                f32s("x", &[1, 2], &[3.0, 3.0]),
                f32s("y", &[1, 2], &[1.0, 2.0]),
            ],
            &[],
        )
        .unwrap();
        assert_eq!(as_f32(&out[0]), [2.0, 1.0]);
    }
}

#[test]
fn an_exception_in_forward_fails_the_batch_with_its_message() {
    let mut m = load("torch_raises");
    let err = run(m.as_mut(), vec![f32s("INPUT__0", &[2], &[1.0, -1.0])], &[]).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, BackendError::Execute(_)));
    assert!(
        text.contains("PyTorch execute failure") && text.contains("negative input"),
        "{text}"
    );
    let ok = run(m.as_mut(), vec![f32s("INPUT__0", &[2], &[1.0, 2.0])], &[]).unwrap();
    assert_eq!(as_f32(&ok[0]), [1.0, 2.0], "the instance keeps working");
}

#[test]
fn scalar_outputs_and_wrong_sizes_are_refused() {
    let mut m = load("torch_scalar_output");
    let err = run(m.as_mut(), vec![f32s("INPUT__0", &[2], &[1.0, 2.0])], &[]).unwrap_err();
    assert!(
        err.to_string()
            .contains("output 'OUTPUT__0' is a scalar which is not supported."),
        "{err}"
    );
    let mut m = load("torch_identity_fp32");
    let short = Tensor {
        data: Bytes::from_static(&[0; 4]),
        ..f32s("INPUT__0", &[1, 2], &[])
    };
    let err = run(m.as_mut(), vec![short], &[]).unwrap_err();
    assert!(
        err.to_string()
            .contains("has 4 bytes, shape [1, 2] of FP32 needs 8"),
        "{err}"
    );
}

#[test]
fn an_output_of_another_type_than_the_config_says_is_an_error() {
    let mut model = resolve("torch_identity_fp32");
    model.config.output[0].data_type = ConfigDataType::TypeInt64 as i32;
    let mut m = model
        .backend
        .clone()
        .unwrap()
        .load(&source(&model, Device::Cpu))
        .unwrap();
    let err = run(m.as_mut(), vec![f32s("INPUT__0", &[1, 1], &[1.0])], &[]).unwrap_err();
    assert!(
        err.to_string().contains("configuration expects datatype TYPE_INT64 for output 'OUTPUT__0', model provides TYPE_FP32"),
        "{err}"
    );
}

#[test]
fn a_file_libtorch_cannot_read_fails_the_load_with_its_message() {
    let err = load_error(&resolve("torch_bad_file"), Device::Cpu);
    let text = err.to_string();
    assert!(matches!(err, BackendError::Load(_)));
    assert!(
        text.contains("failed to load model 'torch_bad_file'") && text.contains("zip archive"),
        "{text}"
    );
}

#[test]
fn a_missing_config_fills_input_names_and_asks_for_the_rest() {
    let repo = repository();
    let entry = repo
        .scan()
        .unwrap()
        .into_iter()
        .find(|e| e.name == "torch_no_config")
        .unwrap();
    let err = repo.resolve(&entry, &backends()).unwrap_err().to_string();
    assert!(err.contains("'x' must specify 'data_type'"), "{err}");
}

#[test]
fn a_gpu_instance_without_a_usable_gpu_fails_with_the_reason() {
    if tch::Cuda::is_available() {
        return;
    }
    let model = resolve("torch_identity_fp32");
    let err = load_error(&model, Device::Gpu(0));
    let text = err.to_string();
    assert!(matches!(err, BackendError::Unsupported(_)));
    assert!(
        text.contains("instance 0 asks for GPU 0, but") && text.contains("KIND_CPU"),
        "{text}"
    );
}

#[test]
fn a_kind_model_instance_keeps_the_devices_the_module_was_saved_on() {
    // The module was saved on the CPU, so KIND_MODEL runs it there, with
    // its inputs prepared on the CPU, as Triton's PyTorch backend does.
    let model = resolve("torch_identity_fp32");
    let backend = model.backend.clone().unwrap();
    let mut m = backend.load(&source(&model, Device::Model)).unwrap();
    let out = run(
        m.as_mut(),
        vec![f32s("INPUT__0", &[1, 2], &[1.5, -2.0])],
        &[],
    )
    .unwrap();
    assert_eq!(out[0].data, f32s("x", &[1, 2], &[1.5, -2.0]).data);
}
