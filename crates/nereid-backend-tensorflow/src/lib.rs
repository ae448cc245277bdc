//! Nereid's TensorFlow SavedModel backend: Triton's `tensorflow` backend
//! (platform `tensorflow_savedmodel`, folder `model.savedmodel`) on
//! TensorFlow's C API, which `ffi.rs` looks up at run time in
//! `libtensorflow_cc.so.2` (from the `tensorflow-cpu` wheel; see
//! `scripts/setup-tensorflow.sh`). Nothing links at build time: the crate
//! builds anywhere, and a server without the library serves every other
//! model and says how to install it when a SavedModel loads.
//!
//! [`TensorflowBackend`] serves the signature Triton serves
//! (`serving_default`, or the one `TF_SIGNATURE_DEF` names), names inputs
//! and outputs by the signature's keys, batches along the first dimension,
//! maps `tf.string` to BYTES, and accepts TF Serving's layout (a version
//! folder holding `saved_model.pb` and `variables/` itself). Signatures
//! are read from `saved_model.pb` by `signature.rs`, so autofill needs no
//! library. Like the other backends, it depends on `nereid-core` only.

#[cfg(target_endian = "big")]
compile_error!("tensor data is little-endian on the wire and is handed to TensorFlow as is");

mod backend;
mod binding;
#[expect(
    unsafe_code,
    reason = "TensorFlow's C API; every unsafe block says why it holds"
)]
mod ffi;
mod instance;
mod settings;
mod signature;

pub use backend::TensorflowBackend;
pub use instance::TensorflowInstance;
