//! The CUDA shared memory extension over HTTP (`/v2/cudasharedmemory`):
//! clients register device memory by its `cudaIpcMemHandle_t`, base64 in
//! `{"raw_handle": {"b64": ...}, "device_id": N, "byte_size": N}`.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use nereid_core::Error;
use nereid_engine::Engine;
use nereid_engine::shared_memory::CudaRegionStatus;
use serde::Serialize;
use serde_json::Value;

use super::ApiError;
use super::shared_memory::{required, unsigned};

/// The CUDA routes under `prefix`.
pub fn routes(prefix: &str) -> Router<Engine> {
    Router::new()
        .route(&format!("{prefix}/status"), get(status_all))
        .route(&format!("{prefix}/region/{{name}}/status"), get(status_one))
        .route(
            &format!("{prefix}/region/{{name}}/register"),
            post(register),
        )
        .route(
            &format!("{prefix}/region/{{name}}/unregister"),
            post(unregister_one),
        )
        .route(&format!("{prefix}/unregister"), post(unregister_all))
}

/// A CUDA region as Triton's status lists it.
#[derive(Serialize)]
struct RegionJson {
    name: String,
    device_id: u64,
    byte_size: u64,
}

impl From<CudaRegionStatus> for RegionJson {
    fn from(r: CudaRegionStatus) -> Self {
        RegionJson {
            name: r.name,
            device_id: r.device_id,
            byte_size: r.byte_size,
        }
    }
}

/// `GET /v2/cudasharedmemory/status`
async fn status_all(State(engine): State<Engine>) -> Result<Response, ApiError> {
    status(&engine, None)
}

/// `GET /v2/cudasharedmemory/region/{name}/status`
async fn status_one(
    State(engine): State<Engine>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    status(&engine, Some(&name))
}

fn status(engine: &Engine, name: Option<&str>) -> Result<Response, ApiError> {
    let regions = engine
        .shared_memory()
        .cuda_status(name)
        .map_err(Error::from)?;
    let rows: Vec<RegionJson> = regions.into_iter().map(RegionJson::from).collect();
    Ok(Json(rows).into_response())
}

/// `POST /v2/cudasharedmemory/region/{name}/register`. A machine without
/// a GPU says so before the body is read.
async fn register(
    State(engine): State<Engine>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    let registry = engine.shared_memory();
    registry.check_cuda().map_err(Error::from)?;
    let (handle, device_id, byte_size) = parse_register(&body)?;
    registry
        .register_cuda(&name, &handle, device_id, byte_size)
        .map_err(Error::from)?;
    Ok(StatusCode::OK)
}

/// The handle's bytes, the device id and the byte size, checked in
/// Triton's order with its messages.
fn parse_register(body: &[u8]) -> Result<(Vec<u8>, u64, u64), Error> {
    let body: Value = serde_json::from_slice(body).map_err(|e| {
        Error::invalid_argument(format!("failed to parse the request JSON buffer: {e}"))
    })?;
    let fields = body.as_object();
    let b64 = required(fields, "raw_handle")?
        .get("b64")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::invalid_argument("attempt to access JSON non-string as string"))?;
    let byte_size = unsigned(required(fields, "byte_size")?)?;
    let device_id = unsigned(required(fields, "device_id")?)?;
    let handle = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| Error::invalid_argument(format!("'raw_handle' is not valid base64: {e}")))?;
    if handle.len() != nereid_engine::shared_memory::IPC_HANDLE_BYTES {
        return Err(Error::invalid_argument(
            "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t",
        ));
    }
    Ok((handle, device_id, byte_size))
}

/// `POST /v2/cudasharedmemory/region/{name}/unregister`: an unknown name
/// is no error, as in Triton.
async fn unregister_one(State(engine): State<Engine>, Path(name): Path<String>) -> StatusCode {
    engine.shared_memory().unregister_cuda(&name);
    StatusCode::OK
}

/// `POST /v2/cudasharedmemory/unregister`
async fn unregister_all(State(engine): State<Engine>) -> StatusCode {
    engine.shared_memory().unregister_all_cuda();
    StatusCode::OK
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(value: Value) -> Vec<u8> {
        serde_json::to_vec(&value).unwrap()
    }

    #[test]
    fn register_bodies_are_checked_in_tritons_order() {
        let handle = base64::engine::general_purpose::STANDARD.encode([7u8; 64]);
        let good = body(
            serde_json::json!({"raw_handle": {"b64": handle}, "device_id": 1, "byte_size": 8}),
        );
        assert_eq!(parse_register(&good).unwrap(), (vec![7; 64], 1, 8));
        for (bad, message) in [
            (
                serde_json::json!({"device_id": 0, "byte_size": 8}),
                "no 'raw_handle' field",
            ),
            (
                serde_json::json!({"raw_handle": {}, "device_id": 0, "byte_size": 8}),
                "non-string",
            ),
            (
                serde_json::json!({"raw_handle": {"b64": handle}, "device_id": 0}),
                "no 'byte_size' field",
            ),
            (
                serde_json::json!({"raw_handle": {"b64": handle}, "byte_size": 8}),
                "no 'device_id' field",
            ),
            (
                serde_json::json!({"raw_handle": {"b64": "AAAA"}, "device_id": 0, "byte_size": 8}),
                "cudaIpcMemHandle_t",
            ),
            (
                serde_json::json!({"raw_handle": {"b64": "!!"}, "device_id": 0, "byte_size": 8}),
                "not valid base64",
            ),
        ] {
            let err = parse_register(&body(bad)).unwrap_err();
            assert!(err.message().contains(message), "{}", err.message());
        }
    }
}
