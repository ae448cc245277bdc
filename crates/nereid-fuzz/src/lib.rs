//! What each fuzz target checks of Nereid's parsers of untrusted input,
//! one module per target: the HTTP infer body, JSON tensor data, `BYTES`
//! framing, gRPC `ModelInferRequest` conversion, `config.pbtxt` and the
//! repository API's load parameters. Each `check` takes arbitrary bytes and
//! panics only when a property fails: the parser panicked, answered with
//! something other than a clear client error, or broke an invariant.
//!
//! The cargo-fuzz targets in `fuzz/` call these functions on nightly; this
//! crate's tests call them on stable with proptest inputs and the committed
//! seeds, so a regression fails `cargo test` too. It must not be a
//! dependency of any other crate.

pub mod bytes_framing;
pub mod config_pbtxt;
pub mod grpc_infer_request;
pub mod http_infer_body;
pub mod json_tensor_data;
pub mod load_parameters;
mod models;

use nereid_core::{Error, ErrorKind};

/// A refused input must get a client error with a message, never an
/// internal one: an internal error means the parser lost its way.
#[track_caller]
fn assert_clear(error: &Error) {
    assert_eq!(
        error.kind(),
        ErrorKind::InvalidArgument,
        "not a client error: {error}"
    );
    assert!(!error.message().is_empty(), "an error without a message");
}

/// A fuzz target's check.
pub type Check = fn(&[u8]);

/// The fuzz targets, by name, as `fuzz/fuzz_targets/` and `fuzz/seeds/`
/// name them.
pub const TARGETS: [(&str, Check); 6] = [
    ("http_infer_body", http_infer_body::check),
    ("json_tensor_data", json_tensor_data::check),
    ("bytes_framing", bytes_framing::check),
    ("grpc_infer_request", grpc_infer_request::check),
    ("config_pbtxt", config_pbtxt::check),
    ("load_parameters", load_parameters::check),
];
