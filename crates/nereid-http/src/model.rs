//! Per-model routes: metadata, readiness, config, statistics.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use nereid_engine::stats::{BatchSnapshot, DurationSnapshot};
use nereid_engine::{Engine, TensorMetadata, VersionStatistics};
use serde::Serialize;

use super::{ApiError, ModelPath, error_response, json_response};

pub async fn metadata(State(engine): State<Engine>, path: ModelPath) -> Result<Response, ApiError> {
    let _kept = engine.load_on_request(&path.model, None).await?;
    let m = engine
        .model_metadata(&path.model, path.version)?
        .for_version(path.version);
    Ok(Json(MetadataJson {
        name: &m.name,
        versions: &m.versions,
        platform: &m.platform,
        inputs: m.inputs.iter().map(TensorJson::from).collect(),
        outputs: m.outputs.iter().map(TensorJson::from).collect(),
        labels: m
            .labels
            .iter()
            .map(|(label, version)| (label.as_str(), version.to_string()))
            .collect(),
    })
    .into_response())
}

/// Model metadata with its keys in Triton's order.
#[derive(Serialize)]
struct MetadataJson<'a> {
    name: &'a str,
    versions: &'a [String],
    platform: &'a str,
    inputs: Vec<TensorJson<'a>>,
    outputs: Vec<TensorJson<'a>>,
    /// Nereid's version labels, label → version (none: left out).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    labels: BTreeMap<&'a str, String>,
}

#[derive(Serialize)]
struct TensorJson<'a> {
    name: &'a str,
    datatype: &'a str,
    shape: &'a [i64],
}

impl<'a> From<&'a TensorMetadata> for TensorJson<'a> {
    fn from(t: &'a TensorMetadata) -> Self {
        TensorJson {
            name: &t.name,
            datatype: &t.datatype,
            shape: &t.shape,
        }
    }
}

/// Triton answers 400 `Model version not ready` for any model or version
/// that cannot serve.
pub async fn ready(State(engine): State<Engine>, path: ModelPath) -> Response {
    if engine.model_ready(&path.model, path.version) {
        StatusCode::OK.into_response()
    } else {
        error_response(StatusCode::BAD_REQUEST, "Model version not ready")
    }
}

pub async fn config(State(engine): State<Engine>, path: ModelPath) -> Result<Response, ApiError> {
    let _kept = engine.load_on_request(&path.model, None).await?;
    let config = engine.model_config(&path.model, path.version)?;
    Ok(json_response(nereid_protocol::rest::model_config_json(
        &config,
    )?))
}

pub async fn stats(State(engine): State<Engine>, path: ModelPath) -> Result<Response, ApiError> {
    let stats = engine.statistics(Some(&path.model), path.version)?;
    Ok(Json(StatsResponse::new(&stats)).into_response())
}

pub async fn all_stats(State(engine): State<Engine>) -> Result<Response, ApiError> {
    let stats = engine.statistics(None, None)?;
    Ok(Json(StatsResponse::new(&stats)).into_response())
}

#[derive(Serialize)]
struct StatsResponse {
    model_stats: Vec<ModelStatsJson>,
}

#[derive(Serialize)]
struct ModelStatsJson {
    name: String,
    version: String,
    last_inference: u64,
    inference_count: u64,
    execution_count: u64,
    inference_stats: InferenceStatsJson,
    response_stats: serde_json::Map<String, serde_json::Value>,
    batch_stats: Vec<BatchStatsJson>,
    memory_usage: Vec<serde_json::Value>,
}

#[derive(Serialize)]
struct InferenceStatsJson {
    success: Duration,
    fail: Duration,
    queue: Duration,
    compute_input: Duration,
    compute_infer: Duration,
    compute_output: Duration,
    cache_hit: Duration,
    cache_miss: Duration,
}

#[derive(Serialize)]
struct BatchStatsJson {
    batch_size: u64,
    compute_input: Duration,
    compute_infer: Duration,
    compute_output: Duration,
}

#[derive(Serialize)]
struct Duration {
    count: u64,
    ns: u64,
}

impl From<DurationSnapshot> for Duration {
    fn from(d: DurationSnapshot) -> Self {
        Duration {
            count: d.count,
            ns: d.ns,
        }
    }
}

impl StatsResponse {
    fn new(stats: &[VersionStatistics]) -> StatsResponse {
        let model_stats = stats
            .iter()
            .map(|v| {
                let s = &v.stats;
                ModelStatsJson {
                    name: v.name.clone(),
                    version: v.version.to_string(),
                    last_inference: s.last_inference_ms,
                    inference_count: s.inference_count,
                    execution_count: s.execution_count,
                    inference_stats: InferenceStatsJson {
                        success: s.success.into(),
                        fail: s.fail.into(),
                        queue: s.queue.into(),
                        compute_input: s.compute_input.into(),
                        compute_infer: s.compute_infer.into(),
                        compute_output: s.compute_output.into(),
                        cache_hit: s.cache_hit.into(),
                        cache_miss: s.cache_miss.into(),
                    },
                    response_stats: serde_json::Map::new(),
                    batch_stats: s.batches.iter().map(batch_json).collect(),
                    memory_usage: Vec::new(),
                }
            })
            .collect();
        StatsResponse { model_stats }
    }
}

fn batch_json(b: &BatchSnapshot) -> BatchStatsJson {
    BatchStatsJson {
        batch_size: b.batch_size,
        compute_input: b.compute_input.into(),
        compute_infer: b.compute_infer.into(),
        compute_output: b.compute_output.into(),
    }
}
