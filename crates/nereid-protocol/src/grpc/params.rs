//! gRPC `map<string, InferParameter>` <-> core [`Parameters`].

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

    #[test]
    fn a_parameter_without_value_is_refused() {
        let map = HashMap::from([("k".to_string(), InferParameter::default())]);
        let e = parameters_from_proto(map, "input 'X'").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert_eq!(e.message(), "parameter 'k' of input 'X' has no value");
    }
}
