//! The model repository extension: index, load and unload. Load and
//! unload work in explicit model control only and answer as Triton does
//! otherwise (503, "explicit model load / unload is not allowed ...").

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use nereid_core::Error;
use nereid_engine::{Engine, ModelState};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ApiError;
use nereid_edge::model_control;

#[derive(Deserialize, Default)]
struct IndexRequest {
    #[serde(default)]
    ready: bool,
}

/// Triton's row: a model never loaded is its name alone.
#[derive(Serialize)]
struct IndexRow {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<&'static str>,
    #[serde(skip_serializing_if = "String::is_empty")]
    reason: String,
    /// Nereid's version labels naming this version.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    labels: Vec<String>,
    /// Nereid's: what a loaded version holds, as measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    memory_bytes: Option<u64>,
}

/// A load or unload body: `{"parameters": {...}}`, all optional.
#[derive(Deserialize, Default)]
struct ControlRequest {
    #[serde(default)]
    parameters: serde_json::Map<String, Value>,
}

/// `POST /v2/repository/index` with an optional `{"ready": bool}` body.
pub async fn index(State(engine): State<Engine>, body: Bytes) -> Result<Response, ApiError> {
    let request: IndexRequest = parse_body(&body)?;
    let rows: Vec<IndexRow> = engine
        .index()
        .into_iter()
        .filter(|row| !request.ready || row.state == Some(ModelState::Ready))
        .map(|row| IndexRow {
            name: row.name,
            version: row.version.map(|v| v.to_string()),
            state: row.state.map(ModelState::as_str),
            reason: row.reason,
            labels: row.labels,
            memory_bytes: row.memory_bytes,
        })
        .collect();
    Ok(Json(rows).into_response())
}

/// `POST /v2/repository/models/{model}/load`, optionally with `config`
/// and `file:<version>/<path>` (base64) parameters.
pub async fn load(
    State(engine): State<Engine>,
    Path(model): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request: ControlRequest = parse_body(&body)?;
    let params = model_control::load_params_from_json(&model, request.parameters)?;
    let request = model_control::load_request(&model, params)?;
    engine.load_model(&model, request).await?;
    Ok(empty_ok())
}

/// `POST /v2/repository/models/{model}/unload`, optionally with the
/// `unload_dependents` parameter.
pub async fn unload(
    State(engine): State<Engine>,
    Path(model): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request: ControlRequest = parse_body(&body)?;
    let params = model_control::params_from_json(request.parameters);
    let dependents = model_control::unload_dependents(&model, params)?;
    engine.unload_model(&model, dependents).await?;
    Ok(empty_ok())
}

/// An optional JSON body: empty (or whitespace) means the defaults.
fn parse_body<T: DeserializeOwned + Default>(body: &Bytes) -> Result<T, Error> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| {
        Error::invalid_argument(format!("failed to parse the request JSON buffer: {e}"))
    })
}

/// Triton answers a load or unload with 200 and an empty body.
fn empty_ok() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], "").into_response()
}
