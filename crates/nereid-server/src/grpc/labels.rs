//! Version labels in gRPC requests: a `model_version` (or `version`) field
//! that holds a label of the model is read as the version it names now;
//! any other string is parsed as Triton parses it (and refused as Triton
//! refuses it). The sticky key may come as `nereid-routing-key` metadata.

use nereid_core::Error;
use nereid_engine::Engine;
use nereid_engine::traffic::ROUTING_HEADER;
use nereid_protocol::grpc as wire;
use nereid_protocol::inference::ModelInferRequest;
use nereid_repository::traffic::is_label;
use tonic::metadata::MetadataMap;

/// The version `version` names for `model`.
pub fn model_version(engine: &Engine, model: &str, version: &str) -> Result<Option<i64>, Error> {
    if is_label(version)
        && let Ok(v) = engine.label_version(model, version)
    {
        return Ok(Some(v));
    }
    wire::parse_model_version(version)
}

/// Puts the version a label names in place of the label.
pub fn resolve_label(engine: &Engine, request: &mut ModelInferRequest) {
    if is_label(&request.model_version)
        && let Ok(v) = engine.label_version(&request.model_name, &request.model_version)
    {
        request.model_version = v.to_string();
    }
}

/// The sticky key a call's `nereid-routing-key` metadata gives.
pub fn routing_key(metadata: &MetadataMap) -> Option<String> {
    let key = metadata.get(ROUTING_HEADER)?.to_str().ok()?;
    Some(key.to_string())
}
