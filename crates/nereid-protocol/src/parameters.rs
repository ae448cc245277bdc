//! Request, input and output parameters that the wire protocols themselves
//! interpret, the same way over HTTP and gRPC, on core [`Parameters`].

use nereid_core::{Error, Parameter, Parameters};

/// Removes a boolean parameter; `what` names its owner in errors.
pub(crate) fn take_bool(
    params: &mut Parameters,
    key: &str,
    what: &str,
) -> Result<Option<bool>, Error> {
    match params.remove(key) {
        None => Ok(None),
        Some(Parameter::Bool(b)) => Ok(Some(b)),
        Some(_) => Err(Error::invalid_argument(format!(
            "parameter '{key}' of {what} must be a boolean"
        ))),
    }
}

/// Removes a non-negative integer parameter.
pub(crate) fn take_size(
    params: &mut Parameters,
    key: &str,
    what: &str,
) -> Result<Option<u64>, Error> {
    match params.remove(key) {
        None => Ok(None),
        Some(Parameter::Int64(v)) if v >= 0 => Ok(Some(v as u64)),
        Some(Parameter::Uint64(v)) => Ok(Some(v)),
        Some(_) => Err(Error::invalid_argument(format!(
            "parameter '{key}' of {what} must be a non-negative integer"
        ))),
    }
}

/// How a request came, for the words of Triton's errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    Rest,
    Grpc,
}

/// Checks the sequence parameters every request may carry, whatever its
/// model, as Triton's frontends do: `sequence_id` an unsigned integer (gRPC:
/// `int64_param`) or a string, `sequence_start` and `sequence_end` booleans.
/// Triton's words; over HTTP Triton answers them with 500, Nereid with 400
/// (the request is at fault).
pub(crate) fn check_sequence(params: &Parameters, wire: Wire) -> Result<(), Error> {
    let bad = |key: &str| {
        Error::invalid_argument(match (wire, key) {
            (Wire::Rest, "sequence_id") => {
                "Unable to parse 'sequence_id': attempt to access JSON non-string as string"
                    .to_string()
            }
            (Wire::Rest, _) => {
                format!("Unable to parse '{key}': attempt to access JSON non-boolean as boolean")
            }
            (Wire::Grpc, "sequence_id") => {
                "invalid value type for 'sequence_id' parameter, expected int64_param or string_param.".to_string()
            }
            (Wire::Grpc, _) => {
                format!("invalid value type for '{key}' parameter, expected bool_param.")
            }
        })
    };
    match params.get("sequence_id") {
        None | Some(Parameter::Uint64(_) | Parameter::String(_)) => {}
        Some(Parameter::Int64(v)) if *v >= 0 || wire == Wire::Grpc => {}
        Some(_) => return Err(bad("sequence_id")),
    }
    for key in ["sequence_start", "sequence_end"] {
        match params.get(key) {
            None | Some(Parameter::Bool(_)) => {}
            Some(_) => return Err(bad(key)),
        }
    }
    Ok(())
}
