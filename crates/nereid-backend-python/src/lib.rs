//! Nereid's Python backend: Triton's `model.py` (`class TritonPythonModel`)
//! run in a Python worker process per instance, as Triton's stub does, so
//! instances run in parallel without sharing a GIL and a crashing model
//! never takes the server down.
//!
//! The worker program and the `triton_python_backend_utils` module models
//! import live in `python/` and ship inside the binary (`sources.rs`);
//! `python/README.md` is the protocol between server and worker: messages
//! in a shared-memory channel with the worker's stdin and stdout as its
//! doorbells (`channel.rs`), binary on the request path (`message.rs`) and
//! JSON otherwise (`frame.rs`), tensor bytes through shared-memory files
//! (`shm.rs`). A batch reaches the worker as one message listing its
//! requests, and comes back as one message answering each.
//!
//! Instances of every kind (`KIND_CPU`, `KIND_GPU`, `KIND_MODEL`) run the
//! same way: the kind and GPU id reach `initialize(args)` and the model
//! places itself, as in Triton; GPU tensors it returns are copied to host
//! memory by the worker (`python/nereid_pb/gpu.py`).
//!
//! A model's BLS calls (`pb_utils.InferenceRequest(...).exec()`), its
//! model control calls (`pb_utils.load_model`...) and its custom metrics
//! (`pb_utils.MetricFamily`) go through the server the backend is
//! connected to (`PythonBackend::set_service`); all but BLS travel on a
//! side channel served at any time (`side.rs`).
//! A model whose config names `EXECUTION_ENV_PATH` runs on the Python of
//! that environment (`environment.rs`).
//! A worker that dies is started again, up to a limit. Like the other backends, this crate depends on `nereid-core`
//! only.

mod backend;
mod bls;
mod channel;
mod codes;
mod environment;
mod frame;
mod instance;
mod link;
mod message;
mod open;
mod service;
mod shm;
mod side;
mod sources;
mod streams;
mod tensors;
mod worker;

pub use backend::PythonBackend;
pub use instance::PythonInstance;
