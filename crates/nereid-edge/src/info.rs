//! What the server says about itself (`GET /v2`, gRPC `ServerMetadata`).

/// The server's name in metadata responses: Triton's, because clients
/// check it (Triton's own `simple_http_health_metadata.py` and
/// `simple_grpc_health_metadata.py` expect `triton`). Nereid says who it
/// is in its startup log line and `nereid --version`.
pub const SERVER_NAME: &str = "triton";

/// The server's version in metadata responses: Nereid's own.
pub const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The Triton protocol extensions this server really implements; an
/// extension is listed only once it works end to end.
pub const EXTENSIONS: &[&str] = &[
    "model_repository",
    "model_repository(unload_dependents)",
    "binary_tensor_data",
    "model_configuration",
    "statistics",
    "parameters",
    "classification",
    "sequence",
    "system_shared_memory",
    "logging",
    "trace",
];

/// [`EXTENSIONS`], with `cuda_shared_memory` where a GPU can hold a
/// region: the extension is there only where it works.
pub fn extensions(engine: &nereid_engine::Engine) -> Vec<&'static str> {
    let mut extensions = EXTENSIONS.to_vec();
    if engine.shared_memory().cuda_supported() {
        extensions.push("cuda_shared_memory");
    }
    extensions
}
