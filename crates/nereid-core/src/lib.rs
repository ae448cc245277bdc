//! The vocabulary every other Nereid crate speaks: data types, shapes,
//! tensors, inference requests and responses, the protocol-neutral error
//! kind, Triton's `ModelConfig` (generated from `proto/model_config.proto`)
//! and the traits a backend implements.
//!
//! This crate must not depend on any other Nereid crate, on a wire format
//! (HTTP, gRPC, JSON) or on a runtime (tokio, ONNX Runtime, libtorch).

pub mod backend;
pub mod config_json;
pub mod datatype;
pub mod error;
pub mod model_config;
pub mod request;
pub mod shared_memory;
pub mod tensor;
pub mod trace;

pub use backend::{
    Backend, BackendError, Batch, BatchRequest, Device, InferService, IoSpec, ModelInstance,
    ModelIo, ModelSource, RequestWise,
};
pub use datatype::DataType;
pub use error::{Error, ErrorKind};
pub use request::{
    InferRequest, InferResponse, InputTensor, Parameter, Parameters, RequestedOutput,
};
pub use shared_memory::SharedMemoryRef;
pub use tensor::{Shape, Tensor};
pub use trace::{Activity, TensorActivity, Trace};
