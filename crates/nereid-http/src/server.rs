//! Server-level routes: health and server metadata.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use nereid_engine::Engine;
use serde::Serialize;

use nereid_edge::info;

pub async fn live(State(engine): State<Engine>) -> StatusCode {
    if engine.is_live() {
        StatusCode::OK
    } else {
        StatusCode::BAD_REQUEST
    }
}

/// Triton answers 400 with an empty body while not ready.
pub async fn ready(State(engine): State<Engine>) -> StatusCode {
    if engine.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::BAD_REQUEST
    }
}

pub async fn metadata(State(engine): State<Engine>) -> Response {
    Json(ServerMetadata {
        name: info::SERVER_NAME,
        version: info::SERVER_VERSION,
        extensions: info::extensions(&engine),
    })
    .into_response()
}

/// Server metadata with its keys in Triton's order.
#[derive(Serialize)]
struct ServerMetadata {
    name: &'static str,
    version: &'static str,
    extensions: Vec<&'static str>,
}
