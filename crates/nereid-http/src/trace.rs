//! `GET`/`POST /v2/trace/setting` and `/v2/models/{m}/trace/setting`:
//! Triton's trace extension over HTTP.

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use nereid_engine::Engine;
use serde_json::{Map, Value};

use super::ApiError;
use nereid_edge::check_model;
use nereid_trace::settings::update_from_json;
use nereid_trace::{Shown, Tracer};

#[derive(Clone)]
struct TraceState {
    engine: Engine,
    tracer: Tracer,
}

/// The trace setting routes, carrying their own state so that any router
/// can merge them. The per-version path is not one of them, as in Triton.
pub fn routes<S: Clone + Send + Sync + 'static>(engine: Engine, tracer: Tracer) -> Router<S> {
    Router::new()
        .route("/v2/trace/setting", get(global).post(update_global))
        .route(
            "/v2/models/{model}/trace/setting",
            get(model).post(update_model),
        )
        .with_state(TraceState { engine, tracer })
}

async fn global(State(state): State<TraceState>) -> Response {
    answer(state.tracer.settings(None))
}

async fn update_global(State(state): State<TraceState>, body: Bytes) -> Result<Response, ApiError> {
    let update = update_from_json(&body)?;
    state.tracer.update(None, &update)?;
    Ok(answer(state.tracer.settings(None)))
}

async fn model(
    State(state): State<TraceState>,
    Path(model): Path<String>,
) -> Result<Response, ApiError> {
    check_model(&state.engine, &model)?;
    Ok(answer(state.tracer.settings(Some(&model))))
}

async fn update_model(
    State(state): State<TraceState>,
    Path(model): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    check_model(&state.engine, &model)?;
    let update = update_from_json(&body)?;
    state.tracer.update(Some(&model), &update)?;
    Ok(answer(state.tracer.settings(Some(&model))))
}

fn answer(settings: Vec<(&'static str, Shown)>) -> Response {
    let map: Map<String, Value> = settings
        .into_iter()
        .map(|(key, shown)| {
            let value = match shown {
                Shown::One(value) => Value::String(value),
                Shown::List(values) => values.into_iter().map(Value::String).collect(),
            };
            (key.to_string(), value)
        })
        .collect();
    axum::Json(map).into_response()
}
