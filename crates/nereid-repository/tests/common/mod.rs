//! Shared by the integration tests: the Triton config corpus and a fake
//! backend that needs no runtime.

#![allow(dead_code, reason = "each test binary uses a different part")]
#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a panic is a test failure"
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use nereid_core::{Backend, BackendError, DataType, IoSpec, ModelInstance, ModelIo, ModelSource};

/// Triton's own `config.pbtxt` files (see its README.md). Relative to this
/// crate so the tests need no environment variable.
pub const CORPUS_DIR: &str = "../../tests/corpus/triton-configs";

/// The corpus folder; panics (never skips) when it is missing.
pub fn corpus_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(CORPUS_DIR);
    assert!(
        root.join("README.md").is_file(),
        "the Triton config corpus is missing at {}: these tests need it",
        root.display()
    );
    root
}

/// Every file under the corpus for which `keep` is true, sorted.
pub fn corpus_files(keep: impl Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![corpus_root()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if keep(&path) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// A backend that reads nothing: `inspect` returns the `ModelIo` it was
/// built with, whatever the file.
pub struct FakeBackend {
    pub name: &'static str,
    pub platform: &'static str,
    pub filename: &'static str,
    pub io: ModelIo,
}

impl FakeBackend {
    pub fn onnx(io: ModelIo) -> Arc<dyn Backend> {
        Arc::new(FakeBackend {
            name: "onnxruntime",
            platform: "onnxruntime_onnx",
            filename: "model.onnx",
            io,
        })
    }

    pub fn torch(io: ModelIo) -> Arc<dyn Backend> {
        Arc::new(FakeBackend {
            name: "pytorch",
            platform: "pytorch_libtorch",
            filename: "model.pt",
            io,
        })
    }
}

impl Backend for FakeBackend {
    fn name(&self) -> &'static str {
        self.name
    }
    fn platform(&self) -> &'static str {
        self.platform
    }
    fn default_model_filename(&self) -> &'static str {
        self.filename
    }
    /// Triton's reference answers came from its GPU build, whose backends
    /// all run on GPUs.
    fn gpu_capable(&self) -> bool {
        true
    }
    fn inspect(&self, model_path: &Path) -> Result<ModelIo, BackendError> {
        if model_path.exists() {
            Ok(self.io.clone())
        } else {
            Err(BackendError::Load(format!(
                "{} does not exist",
                model_path.display()
            )))
        }
    }
    fn load(&self, _: &ModelSource) -> Result<Box<dyn ModelInstance>, BackendError> {
        Err(BackendError::Unsupported("fake backend".into()))
    }
}

pub fn spec(name: &str, datatype: DataType, dims: &[i64]) -> IoSpec {
    IoSpec::new(name, datatype, dims.to_vec())
}

/// The model of Triton's `qa/L0_model_config` ONNX cases: two INT32 [-1,16]
/// inputs, two INT8 [-1,16] outputs.
pub fn triton_qa_io() -> ModelIo {
    ModelIo {
        inputs: vec![
            spec("INPUT0", DataType::Int32, &[-1, 16]),
            spec("INPUT1", DataType::Int32, &[-1, 16]),
        ],
        outputs: vec![
            spec("OUTPUT0", DataType::Int8, &[-1, 16]),
            spec("OUTPUT1", DataType::Int8, &[-1, 16]),
        ],
    }
}

/// Writes `files` (relative path -> contents) under `root`.
pub fn write_tree(root: &Path, files: &[(&str, &str)]) {
    for (rel, contents) in files {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }
}
