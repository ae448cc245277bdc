//! Nereid's traffic endpoint: `GET /v2/models/{m}/traffic` shows a model's
//! labels, split, shadow and fallback; `POST` with a JSON body changes
//! them (fields it names replace the current ones, labels merge, `null`
//! clears); `POST .../traffic/rollback` with `{"label": "stable"}` moves
//! a label back to the version it named before its last move.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::Response;
use nereid_core::Error;
use nereid_engine::{Engine, TrafficView};
use serde_json::{Value, json};

use axum::Json;
use axum::response::IntoResponse;

use super::ApiError;

/// The label a rollback moves when the body names none.
const DEFAULT_ROLLBACK_LABEL: &str = "stable";

pub async fn current(
    State(engine): State<Engine>,
    Path(model): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(view_json(&engine.traffic(&model)?)).into_response())
}

pub async fn update(
    State(engine): State<Engine>,
    Path(model): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let update = std::str::from_utf8(&body)
        .map_err(|_| Error::invalid_argument("the traffic settings must be UTF-8 JSON"))?;
    let view = engine.update_traffic(&model, update).await?;
    Ok(Json(view_json(&view)).into_response())
}

pub async fn rollback(
    State(engine): State<Engine>,
    Path(model): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let label = if body.is_empty() {
        DEFAULT_ROLLBACK_LABEL.to_string()
    } else {
        let body: Value = serde_json::from_slice(&body)
            .map_err(|e| Error::invalid_argument(format!("the body is not JSON: {e}")))?;
        match body.get("label") {
            None => DEFAULT_ROLLBACK_LABEL.to_string(),
            Some(Value::String(label)) => label.clone(),
            Some(_) => return Err(Error::invalid_argument("'label' must be a string").into()),
        }
    };
    let view = engine.rollback_label(&model, &label).await?;
    Ok(Json(view_json(&view)).into_response())
}

/// The settings in force, with what they resolve to: `previous` (where a
/// rollback goes) and `shares` (each version's share of the requests
/// that name no version).
fn view_json(view: &TrafficView) -> Value {
    let state = &view.state;
    let shares: serde_json::Map<String, Value> = state
        .shares()
        .into_iter()
        .map(|(version, share)| (version.to_string(), json!(share)))
        .collect();
    json!({
        "model": view.model,
        "settings": state.spec.to_json(),
        "previous": state.previous,
        "shares": shares,
    })
}
