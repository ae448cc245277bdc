//! Nereid's ONNX Runtime backend: Triton's `onnxruntime` backend (platform
//! `onnxruntime_onnx`) implemented on the `ort` crate, with ONNX Runtime
//! loaded at run time from the shared library `ORT_DYLIB_PATH` names (the
//! one in the `onnxruntime` wheel), so building needs no native library.
//!
//! [`OnnxBackend`] reads a model's inputs and outputs for autofill and
//! creates sessions, one shared by a version's CPU instances (so its
//! weights are held once) and one per GPU instance, honouring Triton's ONNX Runtime
//! parameters (`intra_op_thread_count`, `inter_op_thread_count`,
//! `execution_mode`, `enable_mem_arena`, `enable_mem_pattern`, the graph
//! optimisation level). `KIND_CPU` and `KIND_MODEL` instances run on CPU;
//! `KIND_GPU` ones on ONNX Runtime's CUDA provider (and TensorRT's, when the
//! config names it), which takes the `onnxruntime-gpu` build of the library,
//! with Triton's CUDA and TensorRT settings and inputs and outputs bound
//! through an IO binding. [`OnnxInstance`] runs batches of raw
//! little-endian tensors; `BYTES` elements go through byte-exact, NUL and
//! 0xFF included.
//!
//! This crate depends on `nereid-core` and `nereid-device` only: it knows
//! nothing of the wire protocols, the scheduler or the engine.

#[cfg(target_endian = "big")]
compile_error!("tensor data is little-endian on the wire and is handed to ONNX Runtime as is");

mod backend;
mod convert;
mod gpu;
mod instance;
mod run;
mod runtime;
mod settings;
mod shared;
mod strings;

pub use backend::OnnxBackend;
pub use instance::OnnxInstance;
pub use runtime::ORT_DYLIB_PATH;

#[cfg(test)]
mod tests;
