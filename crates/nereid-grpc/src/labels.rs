//! Versions in gRPC calls: a `model_version` (or `version`) field may hold
//! a version label, which the engine reads as the version it names now;
//! any other string is parsed as Triton parses it (and refused as Triton
//! refuses it). The sticky key may come as `nereid-routing-key` metadata.

use nereid_core::Error;
use nereid_core::routing::ROUTING_HEADER;
use nereid_engine::Engine;
use nereid_protocol::grpc as wire;
use tonic::metadata::MetadataMap;

/// The version number `version` names for `model` now.
pub fn model_version(engine: &Engine, model: &str, version: &str) -> Result<Option<i64>, Error> {
    engine.version_number(model, &wire::parse_version(version)?)
}

/// The sticky key a call's `nereid-routing-key` metadata gives.
pub fn routing_key(metadata: &MetadataMap) -> Option<String> {
    let key = metadata.get(ROUTING_HEADER)?.to_str().ok()?;
    Some(key.to_string())
}
