//! The `nereid` binary: the command line (tritonserver's flag names), the
//! wiring that builds the engine with its backends and starts the
//! frontends (`nereid-http`, `nereid-grpc`, `nereid-openai`, `nereid-kafka`)
//! on it, Prometheus metrics, the route log, and graceful shutdown. Built
//! as a library so tests start it in-process on ports the OS picks.
//! `nereid batch` runs a model over files (`nereid-batch`) on an engine
//! made as the server makes its own.
//!
//! The only crate that knows every other: frontends know the engine
//! handle, never a backend.

mod backends;
pub mod batch;
pub mod cli;
mod metrics;
mod route_log;
mod server;

pub use metrics::MetricsOptions;
pub use nereid_edge::limits::Limits;
pub use nereid_edge::tls::{EndpointTls, PemFile, ServerTls, TlsError, TlsFiles};
pub use nereid_edge::{info, logging, model_control, restricted};
pub use nereid_openai::{ApiKey, OpenAiEndpoint};
pub use nereid_trace as trace;
pub use server::{RestrictedApis, RunningServer, ServerConfig, start};
