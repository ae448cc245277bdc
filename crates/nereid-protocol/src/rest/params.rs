//! JSON `parameters` objects <-> core [`Parameters`].

use nereid_core::{Error, Parameter, Parameters};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

/// Converts a JSON `parameters` object; `what` names its owner in errors.
pub fn from_json(map: Map<String, Value>, what: &str) -> Result<Parameters, Error> {
    map.into_iter()
        .map(|(key, value)| {
            let param = match value {
                Value::Bool(b) => Parameter::Bool(b),
                Value::String(s) => Parameter::String(s),
                Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                    (Some(i), _, _) => Parameter::Int64(i),
                    (None, Some(u), _) => Parameter::Uint64(u),
                    (None, None, Some(f)) => Parameter::Double(f),
                    _ => return Err(bad(&key, what)),
                },
                Value::Null | Value::Array(_) | Value::Object(_) => return Err(bad(&key, what)),
            };
            Ok((key, param))
        })
        .collect()
}

/// Checks the sequence parameters every request may carry, whatever its
/// model, as Triton's HTTP frontend does: `sequence_id` an unsigned integer
/// or a string, `sequence_start` and `sequence_end` booleans. Triton's
/// words, which it answers with 500 and Nereid with 400 (the request is at
/// fault).
pub fn check_sequence(params: &Parameters) -> Result<(), Error> {
    match params.get("sequence_id") {
        None | Some(Parameter::Uint64(_) | Parameter::String(_)) => {}
        Some(Parameter::Int64(v)) if *v >= 0 => {}
        Some(_) => {
            return Err(Error::invalid_argument(
                "Unable to parse 'sequence_id': attempt to access JSON non-string as string",
            ));
        }
    }
    for key in ["sequence_start", "sequence_end"] {
        match params.get(key) {
            None | Some(Parameter::Bool(_)) => {}
            Some(_) => {
                return Err(Error::invalid_argument(format!(
                    "Unable to parse '{key}': attempt to access JSON non-boolean as boolean"
                )));
            }
        }
    }
    Ok(())
}

fn bad(key: &str, what: &str) -> Error {
    Error::invalid_argument(format!(
        "parameter '{key}' of {what} must be a boolean, a number or a string"
    ))
}

/// Serializes [`Parameters`] as a JSON object.
#[derive(Debug)]
pub struct JsonParameters<'a>(pub &'a Parameters);

impl Serialize for JsonParameters<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (key, value) in self.0 {
            match value {
                Parameter::Bool(b) => map.serialize_entry(key, b)?,
                Parameter::Int64(i) => map.serialize_entry(key, i)?,
                Parameter::Uint64(u) => map.serialize_entry(key, u)?,
                Parameter::Double(d) => map.serialize_entry(key, d)?,
                Parameter::String(s) => map.serialize_entry(key, s)?,
            }
        }
        map.end()
    }
}
