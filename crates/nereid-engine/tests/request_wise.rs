//! Instances that take a batch request by request (`RequestWise`, Triton's
//! Python backend contract): each request of a batch gets its own answer.

#![expect(clippy::unwrap_used, reason = "test helpers may panic")]

mod common;

use std::sync::Arc;

use common::{CONFIG, InferOne, request, write_model};
use nereid_engine::{Engine, EngineOptions};

#[tokio::test]
async fn each_request_of_a_batch_gets_its_own_answer() {
    let root = tempfile::tempdir().unwrap();
    // The three requests reach the preferred size (1 + 1 + 2 = 4), which
    // sends the batch at once. A preferred size below max_batch_size makes
    // a smaller batch wait out the long delay: without one, the batcher
    // sends a request at once when the model is idle and no client is
    // expected back, which on a loaded machine (the batcher seeing each
    // request before the next is queued) made batches of one.
    let config = format!(
        "{}\ndynamic_batching {{ preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 10000000 }}\n",
        CONFIG.replace("max_batch_size: 4", "max_batch_size: 8")
    );
    write_model(root.path(), "rw", &config, "requestwise");
    let (backend, controls) = common::backend();
    let options = EngineOptions {
        repositories: vec![root.path().to_path_buf()],
        mirrors: Vec::new(),
        strict_model_config: false,
        strict_readiness: nereid_engine::Readiness::Strict,
        response_cache: None,
        devices: Default::default(),
    };
    let engine = Engine::new(options, vec![Arc::new(backend)]);
    engine.load_all().unwrap();

    let mut bad = request("rw", &[-1, 5]);
    bad.id = "bad".into();
    let (a, b, c) = tokio::join!(
        engine.infer_one(request("rw", &[1, 2])),
        engine.infer_one(bad),
        engine.infer_one(request("rw", &[3, 4, 5, 6])),
    );
    assert_eq!(
        &a.unwrap().outputs[0].data[..],
        [1, 2].map(i32::to_le_bytes).concat()
    );
    let err = b.unwrap_err();
    assert!(err.message().contains("request 'bad' is negative"), "{err}");
    let c = c.unwrap();
    assert_eq!(c.outputs[0].shape, [2, 2]);
    assert_eq!(
        &c.outputs[0].data[..],
        [3, 4, 5, 6].map(i32::to_le_bytes).concat()
    );
    let calls = controls.request_wise_calls.lock().clone();
    assert_eq!(calls.iter().sum::<usize>(), 3, "{calls:?}");
    assert!(
        calls.iter().any(|&n| n > 1),
        "the requests were batched: {calls:?}"
    );
}
