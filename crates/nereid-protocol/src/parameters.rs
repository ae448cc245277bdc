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
