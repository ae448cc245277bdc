//! Tests against real ONNX Runtime and the models `scripts/make_models.py`
//! writes. They need `ORT_DYLIB_PATH`; without it they print a note and pass.

mod errors;
mod execute;
mod gpu;
mod shared;

use std::path::{Path, PathBuf};

use bytes::Bytes;
use nereid_core::tensor::{bytes_elements, push_bytes_element};
use nereid_core::{
    Backend, BackendError, Batch, DataType, Device, IoSpec, ModelInstance, ModelSource, Tensor,
};

use crate::{ORT_DYLIB_PATH, OnnxBackend};

pub(super) fn backend() -> Option<OnnxBackend> {
    if std::env::var_os(ORT_DYLIB_PATH).is_none() {
        eprintln!("note: {ORT_DYLIB_PATH} is not set; skipping a test that needs ONNX Runtime");
        return None;
    }
    Some(OnnxBackend::new(None).expect("ONNX Runtime loads from ORT_DYLIB_PATH"))
}

pub(super) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub(super) fn test_model(name: &str) -> PathBuf {
    repo_root()
        .join("tests/models")
        .join(name)
        .join("1/model.onnx")
}

pub(super) fn example_model(name: &str, version: i64) -> PathBuf {
    repo_root()
        .join("model_repository")
        .join(name)
        .join(version.to_string())
        .join("model.onnx")
}

pub(crate) use nereid_core::testing::config_with;

pub(super) fn source(path: PathBuf, params: &[(&str, &str)]) -> ModelSource {
    let config = config_with("test", params);
    ModelSource {
        model_name: "test".into(),
        version: 1,
        model_path: path,
        config,
        device: Device::Cpu,
        instance_index: 0,
        instance_name: "test_0_0".into(),
    }
}

pub(super) fn load(backend: &OnnxBackend, path: PathBuf) -> Box<dyn ModelInstance> {
    backend.load(&source(path, &[])).expect("model loads")
}

pub(super) fn tensor(
    name: &str,
    datatype: DataType,
    shape: &[i64],
    data: impl Into<Bytes>,
) -> Tensor {
    Tensor {
        name: name.into(),
        datatype,
        shape: shape.to_vec(),
        data: data.into(),
    }
}

pub(super) fn batch(inputs: Vec<Tensor>, outputs: &[&str]) -> Batch {
    Batch {
        inputs,
        outputs: outputs.iter().map(|s| s.to_string()).collect(),
    }
}

pub(super) fn i32_bytes(values: impl IntoIterator<Item = i32>) -> Vec<u8> {
    values.into_iter().flat_map(i32::to_le_bytes).collect()
}

pub(super) fn f32_bytes(values: impl IntoIterator<Item = f32>) -> Vec<u8> {
    values.into_iter().flat_map(f32::to_le_bytes).collect()
}

pub(super) fn f32_values(data: &[u8]) -> Vec<f32> {
    data.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub(super) fn spec(name: &str, datatype: DataType, dims: &[i64]) -> IoSpec {
    IoSpec::new(name, datatype, dims.to_vec())
}

pub(super) fn framed(elements: &[&[u8]]) -> Vec<u8> {
    let mut buf = Vec::new();
    for e in elements {
        push_bytes_element(&mut buf, e);
    }
    buf
}

#[test]
fn names_match_triton() {
    let Some(backend) = backend() else { return };
    assert_eq!(backend.name(), "onnxruntime");
    assert_eq!(backend.platform(), "onnxruntime_onnx");
    assert_eq!(backend.default_model_filename(), "model.onnx");
}

#[test]
fn inspect_reports_types_and_dynamic_dims() {
    let Some(backend) = backend() else { return };
    // A version folder stands for its model.onnx, as in Triton.
    let io = backend
        .inspect(&repo_root().join("tests/models/autofill_simple/1"))
        .unwrap();
    assert_eq!(
        io.inputs,
        vec![
            spec("INPUT0", DataType::Int32, &[-1, 16]),
            spec("INPUT1", DataType::Int32, &[-1, 16])
        ]
    );
    assert_eq!(
        io.outputs,
        vec![
            spec("OUTPUT0", DataType::Int32, &[-1, 16]),
            spec("OUTPUT1", DataType::Int32, &[-1, 16])
        ]
    );
    let io = backend.inspect(&test_model("identity_string")).unwrap();
    assert_eq!(io.inputs, vec![spec("INPUT0", DataType::Bytes, &[-1, -1])]);
    let io = backend
        .inspect(&example_model("add_sub_versions", 1))
        .unwrap();
    assert_eq!(io.outputs, vec![spec("OUTPUT0", DataType::Fp32, &[4])]);
}

#[test]
fn inspect_and_load_name_a_missing_file() {
    let Some(backend) = backend() else { return };
    let missing = repo_root().join("tests/models/nope/1/model.onnx");
    let err = backend.inspect(&missing).unwrap_err();
    assert!(
        matches!(&err, BackendError::Load(m) if m.contains("nope/1/model.onnx")),
        "{err:?}"
    );
    let err = backend.load(&source(missing, &[])).err().unwrap();
    assert!(
        matches!(&err, BackendError::Load(m) if m.contains("does not exist")),
        "{err:?}"
    );
}
