//! The model repository extension: the index is served; load and unload
//! come with model control modes and say so until then.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use nereid_core::Error;
use nereid_engine::{Engine, ModelState};
use serde::{Deserialize, Serialize};

use super::ApiError;

#[derive(Deserialize, Default)]
struct IndexRequest {
    #[serde(default)]
    ready: bool,
}

#[derive(Serialize)]
struct IndexRow {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<String>,
    state: &'static str,
    #[serde(skip_serializing_if = "String::is_empty")]
    reason: String,
}

/// `POST /v2/repository/index` with an optional `{"ready": bool}` body.
pub async fn index(State(engine): State<Engine>, body: Bytes) -> Result<Response, ApiError> {
    let request: IndexRequest = if body.iter().all(u8::is_ascii_whitespace) {
        IndexRequest::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            Error::invalid_argument(format!("failed to parse the request JSON buffer: {e}"))
        })?
    };
    let rows: Vec<IndexRow> = engine
        .index()
        .into_iter()
        .filter(|row| !request.ready || row.state == ModelState::Ready)
        .map(|row| IndexRow {
            name: row.name,
            version: row.version.map(|v| v.to_string()),
            state: row.state.as_str(),
            reason: row.reason,
        })
        .collect();
    Ok(Json(rows).into_response())
}

pub async fn not_implemented() -> ApiError {
    ApiError(Error::unsupported(
        "model load and unload are not implemented yet: models are loaded from the repository at startup",
    ))
}
