//! gRPC `map<string, InferParameter>` <-> core [`Parameters`], and the
//! kinds Triton takes for request parameters.

use std::collections::HashMap;

use nereid_core::{Error, Parameter, Parameters};

use crate::inference::InferParameter;
use crate::inference::infer_parameter::ParameterChoice;

/// Converts a gRPC parameter map; `what` names its owner in errors ("the
/// request", "input 'INPUT0'"). A parameter without a value is refused.
pub fn parameters_from_proto(
    map: HashMap<String, InferParameter>,
    what: &str,
) -> Result<Parameters, Error> {
    map.into_iter()
        .map(|(key, value)| {
            let param = match value.parameter_choice {
                Some(ParameterChoice::BoolParam(b)) => Parameter::Bool(b),
                Some(ParameterChoice::Int64Param(i)) => Parameter::Int64(i),
                Some(ParameterChoice::Uint64Param(u)) => Parameter::Uint64(u),
                Some(ParameterChoice::DoubleParam(d)) => Parameter::Double(d),
                Some(ParameterChoice::StringParam(s)) => Parameter::String(s),
                None => {
                    return Err(Error::invalid_argument(format!(
                        "parameter '{key}' of {what} has no value"
                    )));
                }
            };
            Ok((key, param))
        })
        .collect()
}

/// The `triton_` request parameters Triton lets a client set.
const TRITON_RESERVED: &[&str] = &["triton_enable_empty_final_response"];

/// Checks each request-level parameter's kind as Triton's gRPC frontend
/// does, with its words: the parameters it interprets have their own kinds,
/// `triton_` names are reserved, and any other parameter may be an int64,
/// a bool, a string or a double, but not a uint64 (nor nothing).
pub fn check_request_parameters(map: &HashMap<String, InferParameter>) -> Result<(), Error> {
    map.iter()
        .try_for_each(|(key, value)| check_request_parameter(key, value.parameter_choice.as_ref()))
}

fn check_request_parameter(key: &str, value: Option<&ParameterChoice>) -> Result<(), Error> {
    if key.starts_with("triton_") && !TRITON_RESERVED.contains(&key) {
        return Err(Error::invalid_argument(format!(
            "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: {}",
            TRITON_RESERVED.join(" ")
        )));
    }
    if matches!((key, value), ("priority", Some(ParameterChoice::Int64Param(p))) if *p < 0) {
        return Err(Error::invalid_argument(
            "invalid value for 'priority', expected value >= 0.",
        ));
    }
    match wrong_kind(key, value) {
        None => Ok(()),
        Some(expected) => Err(Error::invalid_argument(format!(
            "invalid value type for '{key}' parameter, expected {expected}."
        ))),
    }
}

/// The kinds Triton names when `value` is not of a kind `key` takes.
fn wrong_kind(key: &str, value: Option<&ParameterChoice>) -> Option<&'static str> {
    use ParameterChoice::{BoolParam, DoubleParam, Int64Param, StringParam, Uint64Param};
    let (takes, expected) = match key {
        "sequence_id" => (
            matches!(value, Some(Int64Param(_) | StringParam(_))),
            "int64_param or string_param",
        ),
        "sequence_start" | "sequence_end" | "triton_enable_empty_final_response" => {
            (matches!(value, Some(BoolParam(_))), "bool_param")
        }
        "priority" => (
            matches!(value, Some(Int64Param(_) | Uint64Param(_))),
            "int64_param or uint64_param",
        ),
        "timeout" => (matches!(value, Some(Int64Param(_))), "int64_param"),
        _ => (
            matches!(
                value,
                Some(Int64Param(_) | BoolParam(_) | StringParam(_) | DoubleParam(_))
            ),
            "int64_param, bool_param, or string_param",
        ),
    };
    (!takes).then_some(expected)
}

/// Converts core [`Parameters`] to a gRPC parameter map.
pub fn parameters_to_proto(params: &Parameters) -> HashMap<String, InferParameter> {
    params
        .iter()
        .map(|(key, value)| {
            let choice = match value {
                Parameter::Bool(b) => ParameterChoice::BoolParam(*b),
                Parameter::Int64(i) => ParameterChoice::Int64Param(*i),
                Parameter::Uint64(u) => ParameterChoice::Uint64Param(*u),
                Parameter::Double(d) => ParameterChoice::DoubleParam(*d),
                Parameter::String(s) => ParameterChoice::StringParam(s.clone()),
            };
            let param = InferParameter {
                parameter_choice: Some(choice),
            };
            (key.clone(), param)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use nereid_core::ErrorKind;

    use super::*;

    fn p(choice: ParameterChoice) -> InferParameter {
        InferParameter {
            parameter_choice: Some(choice),
        }
    }

    #[test]
    fn every_kind_round_trips() {
        let map = HashMap::from([
            ("b".to_string(), p(ParameterChoice::BoolParam(true))),
            ("i".to_string(), p(ParameterChoice::Int64Param(-3))),
            ("u".to_string(), p(ParameterChoice::Uint64Param(u64::MAX))),
            ("d".to_string(), p(ParameterChoice::DoubleParam(0.5))),
            ("s".to_string(), p(ParameterChoice::StringParam("x".into()))),
        ]);
        let params = parameters_from_proto(map.clone(), "the request").unwrap();
        assert_eq!(params["b"], Parameter::Bool(true));
        assert_eq!(params["i"], Parameter::Int64(-3));
        assert_eq!(params["u"], Parameter::Uint64(u64::MAX));
        assert_eq!(params["d"], Parameter::Double(0.5));
        assert_eq!(params["s"], Parameter::String("x".into()));
        assert_eq!(parameters_to_proto(&params), map);
    }

    fn check(key: &str, choice: Option<ParameterChoice>) -> Result<(), String> {
        let map = HashMap::from([(
            key.to_string(),
            InferParameter {
                parameter_choice: choice,
            },
        )]);
        check_request_parameters(&map).map_err(|e| {
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
            e.message().to_string()
        })
    }

    #[test]
    fn request_parameters_have_the_kinds_triton_takes() {
        use ParameterChoice::*;
        let any = "int64_param, bool_param, or string_param.";
        assert_eq!(
            check("custom", Some(Uint64Param(7))).unwrap_err(),
            format!("invalid value type for 'custom' parameter, expected {any}")
        );
        assert!(check("custom", None).unwrap_err().ends_with(any));
        assert!(check("custom", Some(DoubleParam(0.5))).is_ok());
        assert!(check("priority", Some(Uint64Param(1))).is_ok());
        assert_eq!(
            check("priority", Some(Int64Param(-1))).unwrap_err(),
            "invalid value for 'priority', expected value >= 0."
        );
        assert!(
            check("priority", Some(StringParam("x".into())))
                .unwrap_err()
                .ends_with("expected int64_param or uint64_param.")
        );
        assert!(
            check("timeout", Some(Uint64Param(1)))
                .unwrap_err()
                .ends_with("expected int64_param.")
        );
        assert!(
            check("sequence_id", Some(Uint64Param(5)))
                .unwrap_err()
                .ends_with("expected int64_param or string_param.")
        );
        assert!(
            check("sequence_end", Some(Int64Param(1)))
                .unwrap_err()
                .ends_with("expected bool_param.")
        );
    }

    #[test]
    fn triton_names_are_reserved() {
        assert_eq!(
            check("triton_foo", Some(ParameterChoice::BoolParam(true))).unwrap_err(),
            "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: triton_enable_empty_final_response"
        );
        let key = "triton_enable_empty_final_response";
        assert!(check(key, Some(ParameterChoice::BoolParam(true))).is_ok());
        assert_eq!(
            check(key, Some(ParameterChoice::Int64Param(1))).unwrap_err(),
            format!("invalid value type for '{key}' parameter, expected bool_param.")
        );
    }

    #[test]
    fn a_parameter_without_value_is_refused() {
        let map = HashMap::from([("k".to_string(), InferParameter::default())]);
        let e = parameters_from_proto(map, "input 'X'").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert_eq!(e.message(), "parameter 'k' of input 'X' has no value");
    }
}
