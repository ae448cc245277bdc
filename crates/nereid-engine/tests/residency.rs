//! Residency on the fake device layer: models whose GPU instances hold fake
//! device memory load on demand under a per-GPU budget, and the least
//! recently used go when a load would pass it.

#![expect(clippy::unwrap_used, reason = "test code")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{InferOne, backend, request, write_model};
use nereid_device::{Devices, FakeGpus, FakeLedger};
use nereid_engine::{ControlMode, Engine, EngineOptions, ModelControl, ModelState};
use nereid_residency::{Budget, Options};

const GPU_CONFIG: &str = r#"
backend: "fake"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 2 ] } ]
instance_group [ { kind: KIND_GPU count: 1 gpus: [ 0 ] } ]
"#;

fn engine(root: &std::path::Path, ledger: &Arc<FakeLedger>, budget: &[&str]) -> Engine {
    let (mut backend, _controls) = backend();
    backend.ledger = Some(Arc::clone(ledger));
    let gpus = FakeGpus::with_count(1).with_ledger(Arc::clone(ledger));
    let options = EngineOptions {
        repositories: vec![root.to_path_buf()],
        mirrors: Vec::new(),
        strict_model_config: false,
        strict_readiness: nereid_engine::Readiness::Strict,
        response_cache: None,
        devices: Devices::with_layer(Arc::new(gpus)),
    };
    let budget: Vec<String> = budget.iter().map(|b| b.to_string()).collect();
    let control = ModelControl {
        mode: ControlMode::OnDemand,
        poll_interval: Duration::ZERO,
        residency: Options {
            budget: Budget::parse(&budget).unwrap(),
            ..Options::default()
        },
        ..Default::default()
    };
    let engine = Engine::with_model_control(options, control, vec![Arc::new(backend)]);
    engine.load_all().unwrap();
    engine
}

fn state(engine: &Engine, model: &str) -> Option<ModelState> {
    engine
        .index()
        .into_iter()
        .find(|row| row.name == model)
        .and_then(|row| row.state)
}

/// Waits until GPU 0 holds at most `budget` bytes: an evicted model's
/// instances go after the load that evicted it has returned (eviction
/// never waits for them), so on a busy machine that can take a moment.
async fn settles_within_budget(ledger: &FakeLedger, budget: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while ledger.used(0) > budget && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(ledger.used(0) <= budget, "{} bytes held", ledger.used(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_budget_evicts_the_least_recently_used_model_on_that_gpu() {
    let root = tempfile::tempdir().unwrap();
    for name in ["g1", "g2", "g3"] {
        write_model(root.path(), name, GPU_CONFIG, "gpu 100");
    }
    let ledger = Arc::new(FakeLedger::default());
    let engine = engine(root.path(), &ledger, &["0:250"]);
    assert_eq!(ledger.used(0), 0, "nothing loads at startup");
    engine.infer_one(request("g1", &[1, 2])).await.unwrap();
    engine.infer_one(request("g2", &[1, 2])).await.unwrap();
    assert_eq!(ledger.used(0), 200);
    let g1 = engine.index().into_iter().find(|r| r.name == "g1").unwrap();
    assert!(g1.memory_bytes.is_some());

    // g3's first load on the GPU cannot be sized before: it loads, and the
    // budget is kept after it, the least recently used (g1) going.
    engine.infer_one(request("g3", &[1, 2])).await.unwrap();
    settles_within_budget(&ledger, 250).await;
    assert_eq!(state(&engine, "g1"), Some(ModelState::Unavailable));
    assert_eq!(state(&engine, "g2"), Some(ModelState::Ready));

    // g1 again: its size is known now, so g2 (least recent) goes first.
    engine.infer_one(request("g1", &[1, 2])).await.unwrap();
    settles_within_budget(&ledger, 250).await;
    assert_eq!(state(&engine, "g2"), Some(ModelState::Unavailable));
    assert_eq!(state(&engine, "g3"), Some(ModelState::Ready));
    assert_eq!(state(&engine, "g1"), Some(ModelState::Ready));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_larger_than_the_gpu_budget_is_refused_with_its_size() {
    let root = tempfile::tempdir().unwrap();
    write_model(root.path(), "big", GPU_CONFIG, "gpu 300");
    write_model(root.path(), "small", GPU_CONFIG, "gpu 100");
    let ledger = Arc::new(FakeLedger::default());
    let engine = engine(root.path(), &ledger, &["0:250"]);
    // The first load is measured, then found over the budget with nothing
    // to evict; the next is refused before loading.
    engine.infer_one(request("big", &[1, 2])).await.unwrap();
    engine.unload_model("big", false).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    engine.infer_one(request("small", &[1, 2])).await.unwrap();
    let error = engine.infer_one(request("big", &[1, 2])).await.unwrap_err();
    assert!(
        error
            .message()
            .contains("model 'big' needs at least 300 bytes")
            && error.message().contains("gpu0 memory budget of 250 bytes"),
        "{error:?}"
    );
    assert_eq!(state(&engine, "small"), Some(ModelState::Ready));
}
