//! The OpenAI-compatible frontend (`--openai-port`), after Triton's
//! (`python/openai` in Triton's repository): `GET /v1/models`,
//! `GET /v1/models/{id}`, `POST /v1/completions`,
//! `POST /v1/chat/completions` (streamed as server-sent events or whole),
//! `POST /v1/embeddings` and `GET /health/ready`. Requests are mapped onto models that use the
//! tensor names of Triton's vLLM and TensorRT-LLM backends (see
//! `generate` and `embeddings`), sent through the engine, and answered in
//! OpenAI's shapes; errors in OpenAI's `{"error": {...}}` body.
//!
//! Like the other frontends it knows no backend: only model configs and
//! the engine's answers.
//!
//! Depends on the engine handle and `nereid-edge`: never on the
//! repository, the scheduler, a backend, the server or another frontend
//! (tests/python/test_architecture.py checks it).

mod auth;
mod chat;
mod completions;
mod embeddings;
mod error;
mod generate;
mod models;
#[cfg(test)]
mod router_tests;
mod schema;
mod stream;
mod template;
mod tensors;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{Method, StatusCode, Uri};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use nereid_core::InferRequest;
use nereid_engine::{Answer, Call, Engine};
use serde::de::DeserializeOwned;
use tokio::net::TcpListener;

pub use auth::ApiKey;
use error::ApiError;
use schema::{Completion, Usage};

/// Where the OpenAI frontend listens and what it asks of clients.
#[derive(Debug, Clone)]
pub struct OpenAiEndpoint {
    pub address: SocketAddr,
    /// When set, every request must carry `Authorization: Bearer <key>`.
    pub api_key: Option<ApiKey>,
}

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct OpenAi {
    engine: Engine,
    /// When the frontend started: the `created` time of every model.
    started: u64,
}

impl OpenAi {
    pub fn new(engine: Engine) -> OpenAi {
        OpenAi {
            engine,
            started: unix_seconds(),
        }
    }

    async fn infer(&self, request: InferRequest) -> Result<Answer, ApiError> {
        self.engine
            .infer(request, Call::stream())
            .await
            .map_err(|e| ApiError::engine(&e))
    }
}

/// The id, time and model name every object of one answer repeats.
#[derive(Debug, Clone)]
struct Reply {
    id: String,
    created: u64,
    model: String,
}

impl Reply {
    fn new(prefix: &str, model: String) -> Reply {
        Reply {
            id: new_id(prefix),
            created: unix_seconds(),
            model,
        }
    }

    /// The answer's envelope around `choices`, of the kind `object` names.
    fn envelope<C>(
        &self,
        object: &'static str,
        choices: Vec<C>,
        usage: Option<Usage>,
    ) -> Completion<C> {
        Completion {
            id: self.id.clone(),
            object,
            created: self.created,
            model: self.model.clone(),
            choices,
            system_fingerprint: None,
            usage,
        }
    }
}

/// A request body, or OpenAI's 400 saying what is wrong with it.
fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("the request body is not valid: {e}")))
}

fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// `<prefix>-<32 hex digits>`, unique within the process and unlikely to
/// repeat across processes.
fn new_id(prefix: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{prefix}-{:016x}{:016x}", hasher.finish(), nanos as u64)
}

/// Builds the application; tests call it without a socket.
pub fn router(state: OpenAi, api_key: Option<ApiKey>, max_body: usize) -> Router {
    let routes = Router::new()
        .route("/v1/models", get(models::list))
        .route("/v1/models/{id}", get(models::retrieve))
        .route("/v1/completions", post(completions::create))
        .route("/v1/chat/completions", post(chat::create))
        .route("/v1/embeddings", post(embeddings::create))
        .route("/health/ready", get(ready))
        .fallback(no_route)
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(state);
    match api_key {
        Some(key) => routes.layer(axum::middleware::from_fn_with_state(key, auth::check)),
        None => routes,
    }
}

/// Triton's frontend answers readiness on its own port too: 200 when the
/// server is ready, else 400 with its words.
async fn ready(State(state): State<OpenAi>) -> Result<StatusCode, ApiError> {
    if state.engine.is_ready() {
        return Ok(StatusCode::OK);
    }
    Err(ApiError::invalid(
        "Attached inference engine is not ready for inference requests.",
    ))
}

async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::no_route(method.as_str(), uri.path())
}

/// Serves the OpenAI frontend on `listener` until `shutdown` completes,
/// then lets open requests (and streams) finish.
pub async fn serve(
    state: OpenAi,
    api_key: Option<ApiKey>,
    max_body: usize,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    // Streamed tokens are small writes that must not wait for Nagle.
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY on an OpenAI connection");
        }
    });
    axum::serve(listener, router(state, api_key, max_body))
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}
