//! The HTTP/REST frontend: KServe v2 routes with Triton's extensions.
//! Handlers decode with `nereid-protocol`, call the engine, and encode;
//! every error leaves as `{"error": "..."}` with the status from
//! `nereid_edge::error`.
//!
//! Depends on the engine handle, the wire formats and what the network
//! frontends share (`nereid-edge`, `nereid-trace`): never on the
//! repository, the scheduler, a backend, the server or another frontend
//! (tests/python/test_architecture.py checks it).

mod compression;
mod connections;
mod cuda_shared_memory;
mod generate;
mod infer;
mod input_size;
mod logging;
mod model;
mod repository;
mod server;
mod shared_memory;
mod threads;
mod trace;
mod traffic;

use anyhow::Context;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::extract::FromRef;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use nereid_core::Error;
use nereid_core::ModelVersion;
use nereid_engine::Engine;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::decompression::RequestDecompressionLayer;
use tower_http::timeout::TimeoutBody;

use nereid_edge::handshake::TlsListener;
use nereid_edge::limits::Limits;
use nereid_edge::logging::LogControl;
use nereid_edge::restricted::{ApiGroup, Protocol, RestrictLayer, Restrictions, refusal};
use nereid_edge::{Endpoint, Frontend};
use nereid_trace::Tracer;
use threads::ConnectionThreads;

/// Builds the HTTP application; tests call it without a socket.
pub fn router(
    engine: Engine,
    log: LogControl,
    tracer: Tracer,
    limits: &Limits,
    restrictions: Restrictions,
) -> Router {
    let infer_state = infer::InferState {
        engine: engine.clone(),
        tracer: tracer.clone(),
    };
    // Only the infer route reads Content-Encoding, as in Triton; the
    // handler refuses the encodings this layer passes through.
    let infer_route = post(infer::infer)
        .with_state(infer_state)
        .layer(RequestDecompressionLayer::new().pass_through_unaccepted(true));
    let model_routes = Router::new()
        .route("/", get(model::metadata))
        .route("/ready", get(model::ready))
        .route("/config", get(model::config))
        .route("/stats", get(model::stats))
        .route("/infer", infer_route)
        .route("/generate", post(generate::generate))
        .route("/generate_stream", post(generate::generate_stream));
    Router::new()
        .route("/v2", get(server::metadata))
        .route("/v2/health/live", get(server::live))
        .route("/v2/health/ready", get(server::ready))
        .route("/v2/models/stats", get(model::all_stats))
        .route(
            "/v2/models/{model}/traffic",
            get(traffic::current).post(traffic::update),
        )
        .route(
            "/v2/models/{model}/traffic/rollback",
            post(traffic::rollback),
        )
        .route("/v2/repository/index", post(repository::index))
        .route("/v2/repository/models/{model}/load", post(repository::load))
        .route(
            "/v2/repository/models/{model}/unload",
            post(repository::unload),
        )
        .merge(logging::routes(log))
        .merge(trace::routes(engine.clone(), tracer))
        .nest("/v2/models/{model}", model_routes.clone())
        .nest("/v2/models/{model}/versions/{version}", model_routes)
        .merge(shared_memory::routes())
        .merge(cuda_shared_memory::routes("/v2/cudasharedmemory"))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(CatchPanicLayer::custom(panic_response))
        // The limit holds for the body the handler reads: after the infer
        // route's decompression.
        .layer(DefaultBodyLimit::max(limits.http_max_input_bytes))
        .layer(body_timeout(limits.http_read_timeout))
        // A declared length over the limit is answered before the body.
        .layer(axum::middleware::from_fn_with_state(
            limits.http_max_input_bytes,
            input_size::refuse_oversized,
        ))
        // Outermost: a refused request is answered before its body is read.
        .layer(RestrictLayer::new(
            restrictions,
            ApiGroup::of_http_path,
            refused,
        ))
        .with_state(engine)
}

/// Triton answers a restricted API without its header 403.
fn refused(header: &str) -> Response {
    error_response(StatusCode::FORBIDDEN, &refusal(Protocol::Http, header))
}

/// Serves the HTTP frontend on `endpoint` until `shutdown` completes, then
/// lets in-flight requests finish. Connections beyond the limit wait.
/// With TLS (HTTPS), the handshakes run beside the accepting.
pub async fn serve(
    frontend: Frontend,
    endpoint: Endpoint,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    // The listener sets TCP_NODELAY: small responses must not wait for
    // Nagle's algorithm.
    let head_timeout = frontend.limits.http_read_timeout;
    let app = router(
        frontend.engine,
        frontend.log,
        frontend.tracer,
        &frontend.limits,
        frontend.restrictions,
    );
    let threads = ConnectionThreads::start(frontend.limits.http_threads)
        .context("cannot start the HTTP connection threads")?;
    let listener = endpoint.connections.accept_from(endpoint.listener);
    match endpoint.tls {
        None => connections::serve(listener, app, head_timeout, threads, shutdown).await,
        Some(tls) => {
            let listener = TlsListener::new(listener, &tls, &[b"http/1.1"])?;
            connections::serve(listener, app, head_timeout, threads, shutdown).await
        }
    }
    Ok(())
}

/// Fails a request whose body stops arriving for `timeout` (a slow or
/// stalled client), so that it cannot hold its connection for ever.
fn body_timeout(
    timeout: std::time::Duration,
) -> tower::util::MapRequestLayer<impl Fn(axum::extract::Request) -> axum::extract::Request + Clone>
{
    tower::util::MapRequestLayer::new(move |request: axum::extract::Request| {
        request.map(|body| axum::body::Body::new(TimeoutBody::new(timeout, body)))
    })
}

/// An error as the HTTP frontend answers it.
#[derive(Debug)]
pub struct ApiError(pub Error);

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError(e)
    }
}

impl IntoResponse for ApiError {
    /// The error's status and body, with `Retry-After` (whole seconds)
    /// when the error carries a retry hint.
    fn into_response(self) -> Response {
        let mut response = error_response(
            nereid_edge::error::http_status(self.0.kind()),
            self.0.message(),
        );
        if let Some(secs) = self.0.retry_after_secs() {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
        }
        response
    }
}

/// `{"error": message}` with `status`.
pub fn error_response(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({ "error": message }).to_string();
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// A JSON body that is already encoded.
pub fn json_response(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// A handler that panicked answers 500 naming the request's path; the
/// connection and the server go on.
fn panic_response(panic: Box<dyn std::any::Any + Send>) -> Response {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into());
    tracing::error!(panic = %what, "an HTTP request handler panicked");
    error_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        &format!("internal error: the request handler panicked: {what}"),
    )
}

async fn not_found() -> Response {
    error_response(StatusCode::NOT_FOUND, "Not Found")
}

async fn method_not_allowed() -> Response {
    error_response(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
}

/// The model and optional version named by a `/v2/models/{model}[/versions/{version}]` path.
#[derive(Debug)]
pub struct ModelPath {
    pub model: String,
    /// The version the path names: its number, or the version its label
    /// (`/versions/stable`) names at the time of the request.
    pub version: Option<i64>,
    /// The version as the path names it, for an inference, whose label the
    /// engine resolves when it routes the request.
    pub named: ModelVersion,
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for ModelPath
where
    Engine: axum::extract::FromRef<S>,
{
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        let axum::extract::Path(params) =
            axum::extract::Path::<Vec<(String, String)>>::from_request_parts(parts, state)
                .await
                .map_err(|_| not_found_response())?;
        let mut path = ModelPath {
            model: String::new(),
            version: None,
            named: ModelVersion::Latest,
        };
        for (key, value) in params {
            match key.as_str() {
                "model" => path.model = value,
                // Triton's routes only match positive integer versions;
                // Nereid's version labels go there too.
                "version" => match ModelVersion::parse(&value) {
                    Some(ModelVersion::Number(v)) if v > 0 => {
                        path.named = ModelVersion::Number(v);
                    }
                    Some(label @ ModelVersion::Label(_)) => path.named = label,
                    _ => return Err(not_found_response()),
                },
                _ => {}
            }
        }
        if let ModelVersion::Label(_) = path.named {
            let engine = Engine::from_ref(state);
            // A model without labels answers as Triton does.
            if !engine.has_labels(&path.model) {
                return Err(not_found_response());
            }
            path.version = engine
                .version_number(&path.model, &path.named)
                .map_err(|e| ApiError(e).into_response())?;
        } else {
            path.version = path.named.number();
        }
        Ok(path)
    }
}

fn not_found_response() -> Response {
    error_response(StatusCode::NOT_FOUND, "Not Found")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    async fn boom() -> &'static str {
        panic!("injected fault")
    }

    #[tokio::test]
    async fn a_panicking_handler_answers_500_and_the_router_serves_on() {
        let app = Router::new()
            .route("/boom", get(boom))
            .route("/fine", get(|| async { "fine" }))
            .layer(CatchPanicLayer::custom(panic_response));
        let get = |path: &str| {
            axum::http::Request::get(path)
                .body(axum::body::Body::empty())
                .unwrap()
        };
        let boom = app.clone().oneshot(get("/boom")).await.unwrap();
        assert_eq!(boom.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = axum::body::to_bytes(boom.into_body(), 1024).await.unwrap();
        assert!(
            String::from_utf8_lossy(&body).contains("panicked: injected fault"),
            "{body:?}"
        );
        let fine = app.oneshot(get("/fine")).await.unwrap();
        assert_eq!(fine.status(), StatusCode::OK);
    }

    #[test]
    fn a_retry_hint_is_sent_as_retry_after_in_whole_seconds() {
        let shed =
            Error::unavailable("later").with_retry_after(std::time::Duration::from_millis(2500));
        let response = ApiError(shed).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "3");
        let full = ApiError(Error::unavailable("full")).into_response();
        assert!(!full.headers().contains_key(header::RETRY_AFTER));
    }
}
