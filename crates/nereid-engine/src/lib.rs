//! The model manager: finds models in the repository, loads each version's
//! instances through a backend, tracks their states, validates and
//! dispatches requests, keeps statistics and the system shared memory
//! regions clients register (inputs read from them, outputs written into
//! them, whichever frontend the request came by). Frontends use [`Engine`]
//! in-process without knowing which backend serves a model.
//!
//! This crate must not depend on a wire format (HTTP, gRPC, JSON) nor on a
//! concrete backend: backends are handed in as `Arc<dyn Backend>`.
//!
//! Model control follows tritonserver's modes (none, poll, explicit): a
//! (re)load never fails a request, because a changed version is loaded
//! beside the serving one and swapped in when ready.

mod batch;
mod classify;
mod control;
mod ensemble;
mod footprint;
mod handle;
mod infer;
mod job;
mod lifecycle;
mod memory;
mod metadata;
mod mirrors;
mod model;
mod options;
mod plan;
mod poll;
mod registry;
mod resident;
mod routing;
mod sequence;
pub mod shared_memory;
mod source;
pub mod stats;
mod status;
#[cfg(test)]
mod test_support;
pub mod turns;
mod validate;
mod warmup;
mod watcher;
mod worker;

pub use nereid_cache as cache;
pub use nereid_traffic as traffic;

pub use batch::split_rows;
pub use handle::{Engine, ReadinessCheck};
pub use infer::{Answer, Call, ResponseStream, Takes};
pub use job::Streamed;
pub use metadata::{ModelMetadata, TensorMetadata};
pub use model::LoadedVersion;
pub use options::{ControlMode, EngineOptions, LoadFailure, LoadRequest, ModelControl, Readiness};
pub use registry::{IndexEntry, ModelState};
pub use resident::{KeptLoaded, PINNED_PARAMETER};
pub use routing::TrafficView;
pub use source::check_load_request;
pub use status::VersionStatistics;
pub use validate::{ValidatedRequest, validate};
