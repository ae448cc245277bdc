//! Triton's `ModelConfig` and friends, generated from
//! `proto/model_config.proto` (package `inference`).

#![expect(clippy::all, reason = "generated code")]

include!(concat!(env!("OUT_DIR"), "/inference.rs"));

/// The encoded `FileDescriptorSet` of `model_config.proto`, for reflection
/// (text format and JSON) over the types above.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/model_config.fds"));

/// Full protobuf name of the `ModelConfig` message.
pub const MODEL_CONFIG_MESSAGE: &str = "inference.ModelConfig";

/// The model parameter that turns on batching to a latency target, in
/// milliseconds (the scheduler's; the ONNX backend reads it too, to stop
/// its threads spinning while the batcher waits). Triton's backends ignore
/// parameters they do not know.
pub const LATENCY_TARGET_PARAMETER: &str = "nereid.latency_target_ms";

/// A boolean model parameter (`parameters { key: "..." value: {
/// string_value: "on" } }`) in the spellings Triton's backends accept
/// (`ParseBoolValue`): true/false, 1/0, on/off, yes/no, in any case.
pub fn parse_bool_parameter(value: &str) -> Option<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "on" | "yes" => Some(true),
        "false" | "0" | "off" | "no" => Some(false),
        _ => None,
    }
}
