//! `GET` and `POST /v2/logging`: Triton's logging extension over HTTP.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use nereid_core::Error;
use serde_json::Value;

use super::ApiError;
use nereid_edge::logging::{LogControl, LogSettings, SettingValue};

/// The logging routes, carrying their own state so that any router can
/// merge them.
pub fn routes<S: Clone + Send + Sync + 'static>(control: LogControl) -> Router<S> {
    Router::new()
        .route("/v2/logging", get(current).post(update))
        .with_state(control)
}

async fn current(State(control): State<LogControl>) -> Response {
    answer(&control.settings())
}

/// Changes the settings the body names; `null` values and unknown names
/// are ignored, as in Triton.
async fn update(State(control): State<LogControl>, body: Bytes) -> Result<Response, ApiError> {
    let changes = parse(&body)?;
    let settings = control.update(changes.iter().map(|(k, v)| (k.as_str(), v.clone())))?;
    Ok(answer(&settings))
}

fn answer(settings: &LogSettings) -> Response {
    axum::Json(settings).into_response()
}

/// The body's settings as protocol-neutral values.
fn parse(body: &[u8]) -> Result<Vec<(String, SettingValue)>, Error> {
    let json: Value = serde_json::from_slice(body).map_err(|e| {
        Error::invalid_argument(format!("failed to parse the request JSON buffer: {e}"))
    })?;
    let Value::Object(map) = json else {
        return Err(Error::invalid_argument(format!(
            "the log settings must be a JSON object, got {json}"
        )));
    };
    Ok(map
        .into_iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k, setting_value(v)))
        .collect())
}

fn setting_value(value: Value) -> SettingValue {
    match value {
        Value::Bool(b) => SettingValue::Bool(b),
        Value::String(s) => SettingValue::Str(s),
        Value::Number(ref n) => match n.as_u64() {
            Some(n) => SettingValue::Uint(n),
            None => SettingValue::Other(value.to_string()),
        },
        other => SettingValue::Other(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_become_setting_values() {
        let parsed = parse(
            br#"{"log_info":false,"log_verbose_level":3,"x":null,"log_format":"ISO8601","y":-1.5}"#,
        )
        .unwrap();
        assert!(parsed.contains(&("log_info".into(), SettingValue::Bool(false))));
        assert!(parsed.contains(&("log_verbose_level".into(), SettingValue::Uint(3))));
        assert!(parsed.contains(&("y".into(), SettingValue::Other("-1.5".into()))));
        assert!(!parsed.iter().any(|(k, _)| k == "x"));
        assert!(parse(b"[1]").is_err());
        assert!(parse(b"").is_err());
    }
}
