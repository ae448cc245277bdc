//! The system shared memory extension over HTTP (`/v2/systemsharedmemory`);
//! the CUDA one's routes are in `cuda_shared_memory.rs`. Register
//! bodies are checked field by field so that a bad one gets Triton's
//! message; Triton answers a malformed or mistyped body with 500, Nereid
//! with 400, as for inference bodies.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use nereid_core::Error;
use nereid_engine::Engine;
use nereid_engine::shared_memory::RegionStatus;
use serde::Serialize;
use serde_json::{Map, Value};

use super::ApiError;

/// The shared memory routes, merged into the application's router.
pub fn routes() -> Router<Engine> {
    let system = "/v2/systemsharedmemory";
    Router::new()
        .route(&format!("{system}/status"), get(status_all))
        .route(&format!("{system}/region/{{name}}/status"), get(status_one))
        .route(
            &format!("{system}/region/{{name}}/register"),
            post(register),
        )
        .route(
            &format!("{system}/region/{{name}}/unregister"),
            post(unregister_one),
        )
        .route(&format!("{system}/unregister"), post(unregister_all))
}

/// A region as Triton's status lists it.
#[derive(Serialize)]
struct RegionJson {
    name: String,
    key: String,
    offset: u64,
    byte_size: u64,
}

impl From<RegionStatus> for RegionJson {
    fn from(r: RegionStatus) -> Self {
        RegionJson {
            name: r.name,
            key: r.key,
            offset: r.offset,
            byte_size: r.byte_size,
        }
    }
}

/// `GET /v2/systemsharedmemory/status`
pub async fn status_all(State(engine): State<Engine>) -> Result<Response, ApiError> {
    status(&engine, None)
}

/// `GET /v2/systemsharedmemory/region/{name}/status`
pub async fn status_one(
    State(engine): State<Engine>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    status(&engine, Some(&name))
}

fn status(engine: &Engine, name: Option<&str>) -> Result<Response, ApiError> {
    let regions = engine.shared_memory().status(name).map_err(Error::from)?;
    let rows: Vec<RegionJson> = regions.into_iter().map(RegionJson::from).collect();
    Ok(Json(rows).into_response())
}

/// `POST /v2/systemsharedmemory/region/{name}/register` with
/// `{"key": ..., "offset": ..., "byte_size": ...}`.
pub async fn register(
    State(engine): State<Engine>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    let body: Value = serde_json::from_slice(&body).map_err(|e| {
        Error::invalid_argument(format!("failed to parse the request JSON buffer: {e}"))
    })?;
    let fields = body.as_object();
    let key = required(fields, "key")?
        .as_str()
        .ok_or_else(|| Error::invalid_argument("attempt to access JSON non-string as string"))?;
    let offset = match fields.and_then(|f| f.get("offset")) {
        None => 0,
        Some(v) => unsigned(v)?,
    };
    let byte_size = unsigned(required(fields, "byte_size")?)?;
    engine
        .shared_memory()
        .register(&name, key, offset, byte_size)
        .map_err(Error::from)?;
    Ok(StatusCode::OK)
}

pub(super) fn required<'a>(
    fields: Option<&'a Map<String, Value>>,
    field: &str,
) -> Result<&'a Value, Error> {
    fields.and_then(|f| f.get(field)).ok_or_else(|| {
        Error::invalid_argument(format!(
            "Shared memory register request has no '{field}' field"
        ))
    })
}

pub(super) fn unsigned(value: &Value) -> Result<u64, Error> {
    value.as_u64().ok_or_else(|| {
        Error::invalid_argument("attempt to access JSON non-unsigned-integer as unsigned-integer")
    })
}

/// `POST /v2/systemsharedmemory/region/{name}/unregister`: an unknown
/// name is no error, as in Triton.
pub async fn unregister_one(State(engine): State<Engine>, Path(name): Path<String>) -> StatusCode {
    engine.shared_memory().unregister(&name);
    StatusCode::OK
}

/// `POST /v2/systemsharedmemory/unregister`
pub async fn unregister_all(State(engine): State<Engine>) -> StatusCode {
    engine.shared_memory().unregister_all();
    StatusCode::OK
}
