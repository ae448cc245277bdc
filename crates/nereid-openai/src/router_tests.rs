//! The application without a socket: the key, the error shapes, the
//! routes, over an engine with an empty repository.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use nereid_engine::{Engine, EngineOptions};
use serde_json::{Value, json};
use tower::ServiceExt;

use super::{ApiKey, OpenAi, router};

fn app(key: Option<&str>) -> (axum::Router, tempfile::TempDir) {
    let repository = tempfile::tempdir().unwrap();
    let options = EngineOptions {
        repositories: vec![repository.path().to_path_buf()],
        mirrors: Vec::new(),
        strict_model_config: false,
        strict_readiness: nereid_engine::Readiness::Strict,
        response_cache: None,
        devices: Default::default(),
    };
    let engine = Engine::new(options, Vec::new());
    let state = OpenAi::new(engine);
    (router(state, key.map(ApiKey::new), 1 << 20), repository)
}

async fn send(app: &axum::Router, request: Request<Body>) -> (StatusCode, Value) {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

fn get(path: &str, key: Option<&str>) -> Request<Body> {
    let mut request = Request::get(path);
    if let Some(key) = key {
        request = request.header(header::AUTHORIZATION, format!("Bearer {key}"));
    }
    request.body(Body::empty()).unwrap()
}

fn post(path: &str, body: &str) -> Request<Body> {
    Request::post(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap()
}

#[tokio::test]
async fn routes_answer_in_openais_shapes() {
    let (app, _repository) = app(None);
    let (status, body) = send(&app, get("/v1/models", None)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({"object": "list", "data": []}));
    // A model that does not exist: OpenAI's 404 on every route.
    let missing = json!({"error": {
        "message": "The model `m` does not exist.",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }});
    let (status, body) = send(&app, get("/v1/models/m", None)).await;
    assert_eq!((status, &body), (StatusCode::NOT_FOUND, &missing));
    let completion = r#"{"model": "m", "prompt": "hi"}"#;
    let (status, body) = send(&app, post("/v1/completions", completion)).await;
    assert_eq!((status, &body), (StatusCode::NOT_FOUND, &missing));
    let chat = r#"{"model": "m", "messages": [{"role": "user", "content": "hi"}]}"#;
    let (status, body) = send(&app, post("/v1/chat/completions", chat)).await;
    assert_eq!((status, &body), (StatusCode::NOT_FOUND, &missing));
    let embedding = r#"{"model": "m", "input": "hi"}"#;
    let (status, body) = send(&app, post("/v1/embeddings", embedding)).await;
    assert_eq!((status, &body), (StatusCode::NOT_FOUND, &missing));
    let (status, body) = send(&app, post("/v1/chat/completions", "{")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["type"], "invalid_request_error");
    let (status, body) = send(&app, post("/v1/embeddings", r#"{"model": "m"}"#)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("missing field `input`"),
        "{body}"
    );
    let (status, body) = send(&app, get("/v2/health/ready", None)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        body["error"]["message"],
        "Unknown request URL: GET /v2/health/ready"
    );
}

#[tokio::test]
async fn the_key_guards_every_route() {
    let (app, _repository) = app(Some("sk-1"));
    let (status, body) = send(&app, get("/v1/models", None)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"]["code"], "invalid_api_key");
    for path in ["/v1/models", "/health/ready", "/nowhere"] {
        let (status, _) = send(&app, get(path, Some("sk-2"))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
    }
    let (status, _) = send(&app, get("/v1/models", Some("sk-1"))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = send(&app, post("/v1/completions", "{}")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}
