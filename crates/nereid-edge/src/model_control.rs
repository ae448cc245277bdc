//! The repository API's load and unload parameters, from either frontend:
//! `config` (a model config as JSON), `file:<version>/<path>` (file
//! contents; base64 over HTTP, bytes over gRPC), Nereid's `traffic`
//! (traffic settings as JSON, see docs/traffic.md) and `unload_dependents`.
//! Public so that fuzz and property tests can feed them any parameters.

use base64::Engine as _;
use nereid_core::Error;
use nereid_engine::LoadRequest;
use nereid_protocol::rest::model_config_from_json;
use serde_json::{Map, Value};

/// One parameter value, whichever wire it came over.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    Bool(bool),
    Int(i64),
    Text(String),
    Bytes(Vec<u8>),
    /// A value of some other type (a JSON object, a float), as sent.
    Other(String),
}

const FILE_PREFIX: &str = "file:";
/// Nereid's load parameter that sets traffic settings (labels, split...).
const TRAFFIC: &str = "traffic";

/// Builds the engine's load request from a load's parameters.
pub fn load_request(model: &str, params: Vec<(String, Param)>) -> Result<LoadRequest, Error> {
    let mut request = LoadRequest::default();
    for (key, value) in params {
        if key == "config" {
            let Param::Text(text) = value else {
                return Err(bad(
                    model,
                    "the 'config' parameter must be a string holding the model config as JSON",
                ));
            };
            let config = model_config_from_json(&text).map_err(|e| {
                bad(
                    model,
                    &format!("the 'config' parameter is not a valid model config: {e}"),
                )
            })?;
            request.config = Some(config);
        } else if let Some(path) = key.strip_prefix(FILE_PREFIX) {
            let Param::Bytes(contents) = value else {
                return Err(bad(
                    model,
                    &format!("'{key}' must hold the file's contents as bytes"),
                ));
            };
            request.files.push((path.to_string(), contents));
        } else if key == TRAFFIC {
            // A string holding JSON from either frontend; over HTTP the
            // object itself too.
            let (Param::Text(text) | Param::Other(text)) = value else {
                return Err(bad(
                    model,
                    "the 'traffic' parameter must hold the traffic settings as JSON",
                ));
            };
            request.traffic = Some(text);
        } else {
            return Err(bad(
                model,
                &format!(
                    "unexpected parameter '{key}'; a load takes 'config', 'file:<version>/<path>' and 'traffic'"
                ),
            ));
        }
    }
    Ok(request)
}

/// A load's JSON `parameters` object (the HTTP body) as [`Param`]s;
/// `file:` values are base64, as Triton and `tritonclient` send them.
pub fn load_params_from_json(
    model: &str,
    parameters: Map<String, Value>,
) -> Result<Vec<(String, Param)>, Error> {
    parameters
        .into_iter()
        .map(|(key, value)| load_param(model, key, value))
        .collect()
}

/// Any other JSON `parameters` object (an unload's) as [`Param`]s.
pub fn params_from_json(parameters: Map<String, Value>) -> Vec<(String, Param)> {
    parameters
        .into_iter()
        .map(|(key, value)| (key, json_param(value)))
        .collect()
}

fn load_param(model: &str, key: String, value: Value) -> Result<(String, Param), Error> {
    if key.starts_with(FILE_PREFIX)
        && let Value::String(text) = &value
    {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| bad(model, &format!("'{key}' is not valid base64: {e}")))?;
        return Ok((key, Param::Bytes(bytes)));
    }
    Ok((key, json_param(value)))
}

fn json_param(value: Value) -> Param {
    match value {
        Value::Bool(b) => Param::Bool(b),
        Value::Number(n) if n.is_i64() => Param::Int(n.as_i64().unwrap_or_default()),
        Value::String(s) => Param::Text(s),
        other => Param::Other(other.to_string()),
    }
}

/// Reads an unload's parameters: only `unload_dependents` (a bool).
pub fn unload_dependents(model: &str, params: Vec<(String, Param)>) -> Result<bool, Error> {
    let mut dependents = false;
    for (key, value) in params {
        match (key.as_str(), value) {
            ("unload_dependents", Param::Bool(b)) => dependents = b,
            ("unload_dependents", _) => {
                return Err(Error::invalid_argument(format!(
                    "failed to unload '{model}': 'unload_dependents' must be a bool"
                )));
            }
            (other, _) => {
                return Err(Error::invalid_argument(format!(
                    "failed to unload '{model}': unexpected parameter '{other}'; an unload takes 'unload_dependents'"
                )));
            }
        }
    }
    Ok(dependents)
}

fn bad(model: &str, why: &str) -> Error {
    Error::invalid_argument(format!("failed to load '{model}': {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(key: &str, value: Param) -> (String, Param) {
        (key.to_string(), value)
    }

    #[test]
    fn config_and_files() {
        let request = load_request(
            "m",
            vec![
                p(
                    "config",
                    Param::Text(r#"{"name": "m", "max_batch_size": 2}"#.into()),
                ),
                p("file:1/model.onnx", Param::Bytes(b"abc".to_vec())),
            ],
        )
        .unwrap();
        assert_eq!(request.config.unwrap().max_batch_size, 2);
        assert_eq!(
            request.files,
            [("1/model.onnx".to_string(), b"abc".to_vec())]
        );
        assert!(load_request("m", Vec::new()).unwrap().config.is_none());
    }

    #[test]
    fn bad_parameters_say_what_is_wrong() {
        for (params, fragment) in [
            (vec![p("config", Param::Bool(true))], "must be a string"),
            (
                vec![p("config", Param::Other("{}".into()))],
                "must be a string",
            ),
            (
                vec![p("config", Param::Text("{".into()))],
                "not a valid model config",
            ),
            (vec![p("file:1/x", Param::Text("x".into()))], "'file:1/x'"),
            (
                vec![p("foo", Param::Text("bar".into()))],
                "unexpected parameter 'foo'",
            ),
        ] {
            let err = load_request("m", params).unwrap_err();
            assert_eq!(err.kind(), nereid_core::ErrorKind::InvalidArgument);
            assert!(err.message().starts_with("failed to load 'm': "), "{err}");
            assert!(err.message().contains(fragment), "{err}");
        }
    }

    #[test]
    fn unload_parameters() {
        assert!(!unload_dependents("m", Vec::new()).unwrap());
        assert!(unload_dependents("m", vec![p("unload_dependents", Param::Bool(true))]).unwrap());
        assert!(unload_dependents("m", vec![p("unload_dependents", Param::Int(1))]).is_err());
        assert!(unload_dependents("m", vec![p("x", Param::Bool(true))]).is_err());
    }
}
