//! The `nereid` server: command line, HTTP/REST (axum) and gRPC (tonic)
//! frontends over one [`nereid_engine::Engine`], Prometheus metrics, and
//! graceful shutdown. Built as a library so tests start it in-process on
//! ports the OS picks.
//!
//! An OpenAI-compatible frontend serves text and embedding models on a
//! port of its own. `nereid batch` runs a model over files
//! (`nereid-batch`) on an engine made as the server makes its own.
//!
//! Frontends translate wire messages with `nereid-protocol` and call the
//! engine; they must not know which backend serves a model.

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
