//! The vocabulary every other Nereid crate speaks: data types, shapes,
//! tensors, inference requests and responses, the protocol-neutral error
//! kind, Triton's `ModelConfig` (generated from `proto/model_config.proto`)
//! and the traits a backend implements.
//!
//! This crate must not depend on any other Nereid crate, on a wire
//! protocol (HTTP, gRPC) or on a runtime (tokio, ONNX Runtime, libtorch).
//! The one exception to "no wire format" is `config_json`: Triton's own
//! JSON rendering of a `ModelConfig`, which the REST frontend, the
//! repository API's config override and the Python backend all need, and
//! which depends only on the config's descriptor.

pub mod backend;
pub mod config_json;
pub mod custom_metrics;
pub mod datatype;
pub mod error;
pub mod exposition;
pub mod model_config;
pub mod request;
pub mod routing;
pub mod shared_memory;
pub mod tensor;
#[cfg(feature = "testing")]
pub mod testing;
pub mod trace;

pub use backend::{
    Backend, BackendError, Batch, BatchRequest, Device, InferService, IoSpec, ModelInstance,
    ModelIo, ModelSource, ParameterReader, RequestWise, Responder,
};
pub use datatype::DataType;
pub use error::{Error, ErrorKind};
pub use request::{
    InferRequest, InferResponse, InputTensor, Parameter, Parameters, RequestedOutput,
};
pub use routing::{CorrelationId, ModelVersion, Routing, Sequence};
pub use shared_memory::SharedMemoryRef;
pub use tensor::{Shape, Tensor};
pub use trace::{Activity, TensorActivity, Trace};
