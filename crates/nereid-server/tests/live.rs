//! The server started in-process on ports the OS picks, serving the
//! example repository through ONNX Runtime (`ORT_DYLIB_PATH`, set by
//! `make test`), driven over real sockets.

#![expect(clippy::unwrap_used, reason = "test code")]

use std::path::PathBuf;
use std::time::Duration;

use nereid_engine::{EngineOptions, ModelControl};
use nereid_server::{RunningServer, ServerConfig};
use serde_json::{Value, json};

/// The interpreter for the repository's Python model: the project's venv
/// (it has numpy, which the worker needs) when it is set up.
fn python() -> PathBuf {
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
    if venv.exists() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

async fn start() -> (RunningServer, String) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../model_repository");
    let any = "127.0.0.1:0".parse().unwrap();
    let config = ServerConfig {
        engine: EngineOptions {
            repositories: vec![root],
            mirrors: Vec::new(),
            strict_model_config: false,
            strict_readiness: nereid_engine::Readiness::Strict,
            response_cache: None,
            devices: Default::default(),
        },
        model_control: ModelControl::default(),
        exit_on_error: true,
        http: Some(any),
        grpc: Some(any),
        metrics: Some(any),
        metrics_options: Default::default(),
        exit_timeout: Duration::from_secs(5),
        onnxruntime_library: std::env::var_os("ORT_DYLIB_PATH").map(PathBuf::from),
        tensorflow_library_dir: std::env::var_os("TENSORFLOW_DIR").map(PathBuf::from),
        python: python(),
        logging: Default::default(),
        trace: Default::default(),
        limits: Default::default(),
        restricted: Default::default(),
        tls: Default::default(),
        openai: None,
        route_log: None,
        kafka: None,
    };
    let mut server = nereid_server::start(config).await.unwrap();
    server.wait_loaded().await.unwrap();
    let base = format!("http://{}", server.http_addr().unwrap());
    (server, base)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_the_example_repository_and_stops_cleanly() {
    let (server, base) = start().await;
    assert!(
        server.engine().is_ready(),
        "index: {:?}",
        server.engine().index()
    );
    let http = reqwest::Client::new();
    assert_eq!(
        http.get(format!("{base}/v2/health/ready"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    let body = json!({
        "id": "live-1",
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": (0..16).collect::<Vec<i32>>()},
            {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": vec![2; 16]},
        ],
        "outputs": [{"name": "OUTPUT1"}],
    });
    let response = http
        .post(format!("{base}/v2/models/simple/infer"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["id"], "live-1");
    assert_eq!(answer["outputs"].as_array().unwrap().len(), 1);
    assert_eq!(
        answer["outputs"][0]["data"],
        json!((0..16).map(|v| v - 2).collect::<Vec<i32>>())
    );

    let bad = http
        .post(format!("{base}/v2/models/simple/infer"))
        .body("{")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let error: Value = bad.json().await.unwrap();
    assert!(
        error["error"].as_str().unwrap().contains("failed to parse"),
        "{error}"
    );

    let metrics_url = format!("http://{}/metrics", server.metrics_addr().unwrap());
    let metrics = http
        .get(metrics_url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("nv_inference_request_success{model=\"simple\",version=\"1\"} 1"),
        "{metrics}"
    );

    let grpc_addr = server.grpc_addr().unwrap();
    server.shutdown().await.unwrap();
    assert!(
        tokio::net::TcpStream::connect(grpc_addr).await.is_err(),
        "gRPC still accepts after shutdown"
    );
}
