//! A request's routing facts taken out of its parameters, once, the same
//! way for REST and gRPC (after each checked the kinds its wire allows):
//! `sequence_id`, `sequence_start`, `sequence_end`, `priority` and
//! `timeout` leave `parameters`, as in Triton, whose backends never see
//! them as parameters; `routing_key` is typed and stays, a parameter like
//! any other to the model.

use std::time::Duration;

use nereid_core::routing::ROUTING_KEY_PARAMETER;
use nereid_core::{CorrelationId, Error, ModelVersion, Parameter, Parameters, Routing, Sequence};

/// Takes the routing facts of a request for `version` out of `params`.
pub fn take_routing(params: &mut Parameters, version: ModelVersion) -> Result<Routing, Error> {
    let id = match params.remove("sequence_id") {
        None => CorrelationId::default(),
        Some(Parameter::Uint64(id)) => CorrelationId::Int(id),
        // gRPC's int64_param, taken as Triton takes it (as unsigned).
        Some(Parameter::Int64(id)) => CorrelationId::Int(id as u64),
        Some(Parameter::String(id)) => CorrelationId::Str(id),
        Some(_) => {
            return Err(Error::invalid_argument(
                "invalid value type for 'sequence_id' parameter, expected int64_param or string_param.",
            ));
        }
    };
    let sequence = Sequence {
        id,
        start: take_flag(params, "sequence_start")?,
        end: take_flag(params, "sequence_end")?,
    };
    let routing_key = match params.get(ROUTING_KEY_PARAMETER) {
        Some(Parameter::String(s)) => Some(s.clone()),
        Some(Parameter::Int64(v)) => Some(v.to_string()),
        Some(Parameter::Uint64(v)) => Some(v.to_string()),
        _ => None,
    };
    Ok(Routing {
        version,
        sequence,
        routing_key,
        priority: take_unsigned(params, "priority")?.unwrap_or(0),
        timeout: take_unsigned(params, "timeout")?.map(Duration::from_micros),
    })
}

fn take_flag(params: &mut Parameters, key: &str) -> Result<bool, Error> {
    match params.remove(key) {
        None => Ok(false),
        Some(Parameter::Bool(b)) => Ok(b),
        Some(_) => Err(Error::invalid_argument(format!(
            "invalid value type for '{key}' parameter, expected bool_param."
        ))),
    }
}

fn take_unsigned(params: &mut Parameters, key: &str) -> Result<Option<u64>, Error> {
    match params.remove(key) {
        None => Ok(None),
        Some(Parameter::Int64(v)) if v >= 0 => Ok(Some(v as u64)),
        Some(Parameter::Uint64(v)) => Ok(Some(v)),
        Some(other) => Err(Error::invalid_argument(format!(
            "parameter '{key}' must be a non-negative integer, got {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, Parameter)]) -> Parameters {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn routing_facts_leave_the_parameters_typed() {
        let mut p = params(&[
            ("sequence_id", Parameter::Int64(7)),
            ("sequence_start", Parameter::Bool(true)),
            ("priority", Parameter::Uint64(2)),
            ("timeout", Parameter::Int64(1500)),
            ("routing_key", Parameter::String("user-1".into())),
            ("temperature", Parameter::Double(0.5)),
        ]);
        let routing = take_routing(&mut p, ModelVersion::Number(3)).unwrap();
        assert_eq!(
            routing,
            Routing {
                version: ModelVersion::Number(3),
                sequence: Sequence {
                    id: CorrelationId::Int(7),
                    start: true,
                    end: false,
                },
                routing_key: Some("user-1".into()),
                priority: 2,
                timeout: Some(Duration::from_micros(1500)),
            }
        );
        let left: Vec<_> = p.keys().map(String::as_str).collect();
        assert_eq!(left, ["routing_key", "temperature"]);
    }

    #[test]
    fn wrong_kinds_are_refused_with_tritons_words() {
        let refused = |key: &str, value: Parameter| {
            take_routing(&mut params(&[(key, value)]), ModelVersion::Latest)
                .unwrap_err()
                .message()
                .to_string()
        };
        assert_eq!(
            refused("sequence_id", Parameter::Double(1.0)),
            "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."
        );
        assert_eq!(
            refused("sequence_end", Parameter::Int64(1)),
            "invalid value type for 'sequence_end' parameter, expected bool_param."
        );
        assert_eq!(
            refused("priority", Parameter::Int64(-1)),
            "parameter 'priority' must be a non-negative integer, got Int64(-1)"
        );
    }
}
