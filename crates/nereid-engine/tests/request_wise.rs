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
    // The three requests fill max_batch_size (1 + 1 + 2 = 4), which sends
    // the batch at once; the long delay only makes sure that a loaded
    // machine cannot send the first of them alone.
    let config =
        format!("{CONFIG}\ndynamic_batching {{ max_queue_delay_microseconds: 10000000 }}\n");
    write_model(root.path(), "rw", &config, "requestwise");
    let (backend, controls) = common::backend();
    let options = EngineOptions {
        repositories: vec![root.path().to_path_buf()],
        mirrors: Vec::new(),
        strict_model_config: false,
        strict_readiness: true,
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
