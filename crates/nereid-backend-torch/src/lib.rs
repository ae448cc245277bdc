//! Nereid's TorchScript backend: Triton's `pytorch` backend (platform
//! `pytorch_libtorch`, file `model.pt`) on libtorch, through `tch` and a
//! small C++ shim (`shim.cpp`) for what `tch` does not expose: forward()'s
//! schema, InferenceMode and the JIT executor switches, byte-exact
//! `List[str]` values, and loading libtorch's CUDA half on demand.
//!
//! [`TorchBackend`] binds config inputs to forward()'s arguments by name,
//! by `<name>__<index>` or by config order, as Triton does; outputs by
//! `<name>__<index>` or order, from a tensor, a tuple or list of tensors, or
//! `List[str]` (BYTES). Triton's parameters (`INFERENCE_MODE`,
//! `DISABLE_OPTIMIZED_EXECUTION`, `ENABLE_JIT_*`, `ENABLE_WEIGHT_SHARING`,
//! the thread counts) are honoured.
//!
//! Building needs libtorch (`LIBTORCH`; see `scripts/setup-libtorch.sh`),
//! which is why the `nereid` binary takes this crate only with its `torch`
//! feature. Like the other backends, it depends on `nereid-core` only.

#[cfg(target_endian = "big")]
compile_error!("tensor data is little-endian on the wire and is handed to libtorch as is");

mod backend;
mod binding;
mod convert;
#[expect(
    unsafe_code,
    reason = "the C++ shim's interface; every unsafe block says why it holds"
)]
mod ffi;
mod instance;
mod settings;

pub use backend::TorchBackend;
pub use instance::TorchInstance;
