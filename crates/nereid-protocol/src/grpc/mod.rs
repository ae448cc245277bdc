//! KServe v2 / Triton gRPC messages <-> `nereid_core` types: the inference
//! request (raw or typed tensor contents), the response, parameters and
//! model version strings. Pure functions, no I/O. Tensor bytes received in
//! `raw_input_contents` stay `Bytes` slices of the received message, and
//! output tensors go out in `raw_output_contents` without a copy.
//!
//! Conversions that need engine types (statistics, metadata, the repository
//! index) live in the server, since this crate must not depend on the engine.

mod contents;
mod params;
mod request;
mod response;

use nereid_core::routing::not_a_version_number;
use nereid_core::{Error, ModelVersion};

pub use params::{parameters_from_proto, parameters_to_proto};
pub use request::decode_infer_request;
pub use response::{encode_infer_response, stream_error_response};

/// Parses the `version` field of a gRPC request the way Triton does: empty
/// means "let the version policy choose" (`None`); anything else must be a
/// non-negative integer. Version 0 parses (like Triton's `stol`) and is then
/// simply not found.
pub fn parse_model_version(version: &str) -> Result<Option<i64>, Error> {
    match parse_version(version)? {
        ModelVersion::Number(v) => Ok(Some(v)),
        ModelVersion::Latest => Ok(None),
        ModelVersion::Label(_) => Err(not_a_version_number(version)),
    }
}

/// A `model_version` field as a request's version: empty, a number (as
/// [`parse_model_version`] reads it) or a version label, resolved by the
/// engine.
pub fn parse_version(version: &str) -> Result<ModelVersion, Error> {
    if nereid_core::routing::is_label(version) {
        return Ok(ModelVersion::Label(version.to_string()));
    }
    if version.is_empty() {
        return Ok(ModelVersion::Latest);
    }
    match version.parse::<i64>() {
        Ok(v) if v >= 0 => Ok(ModelVersion::Number(v)),
        Ok(_) => Err(Error::invalid_argument(format!(
            "invalid model version specified '{version}' , version should be an integral value > 0"
        ))),
        Err(_) => Err(not_a_version_number(version)),
    }
}

#[cfg(test)]
mod tests {
    use nereid_core::ErrorKind;

    use super::*;

    #[test]
    fn version_strings() {
        assert_eq!(parse_model_version(""), Ok(None));
        assert_eq!(parse_model_version("3"), Ok(Some(3)));
        assert_eq!(parse_model_version("0"), Ok(Some(0)));
        let e = parse_model_version("abc").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert_eq!(
            e.message(),
            "failed to get model version from specified version string 'abc' (details: stol), version should be an integral value > 0"
        );
        let e = parse_model_version("-1").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert_eq!(
            e.message(),
            "invalid model version specified '-1' , version should be an integral value > 0"
        );
        for bad in ["1.5", " 1", "1abc", "99999999999999999999"] {
            assert_eq!(
                parse_model_version(bad).map_err(|e| e.kind()),
                Err(ErrorKind::InvalidArgument),
                "{bad}"
            );
        }
    }
}
