//! KServe v2 REST bodies: the inference request (JSON, JSON plus the
//! binary tensor data extension, or raw input data) and response, and
//! Triton's JSON rendering of a model config.

mod generate;
mod infer_request;
mod infer_response;
mod json_data;
mod params;
mod raw_request;

pub use generate::{GenerateInput, decode_generate_request, encode_generate_response};
pub use infer_request::{
    DecodedRequest, OutputEncoding, decode_infer_request, inference_header_length,
};
pub use infer_response::{EncodedResponse, encode_infer_response};
pub use json_data::JsonData;
pub use nereid_core::config_json::{model_config_from_json, model_config_json};
pub use raw_request::decode_raw_infer_request;

/// The header that says how long the JSON part of a binary body is.
pub const HEADER_CONTENT_LENGTH: &str = "inference-header-content-length";
