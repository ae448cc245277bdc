//! The engine end to end over a temporary repository, with a fake backend
//! whose model "files" say what to do (see `common`).

#![expect(clippy::unwrap_used, reason = "test helpers may panic")]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{CONFIG, Controls, InferOne, request, write_model};
use nereid_core::ErrorKind;
use nereid_engine::{Engine, EngineOptions, ModelState};

fn engine(root: &Path) -> (Engine, Controls) {
    engine_with(root, false)
}

/// As `engine`, with the fake backend saying whether it only computes.
fn engine_with(root: &Path, compute_only: bool) -> (Engine, Controls) {
    let (mut backend, controls) = common::backend();
    backend.compute_only = compute_only;
    let options = EngineOptions {
        repositories: vec![root.to_path_buf()],
        mirrors: Vec::new(),
        strict_model_config: false,
        strict_readiness: nereid_engine::Readiness::Strict,
        response_cache: None,
        devices: Default::default(),
    };
    let engine = Engine::new(options, vec![Arc::new(backend)]);
    engine.load_all().unwrap();
    (engine, controls)
}

#[tokio::test]
async fn a_bad_model_does_not_stop_the_others() {
    let root = tempfile::tempdir().unwrap();
    write_model(root.path(), "good", CONFIG, "identity");
    write_model(root.path(), "broken_file", CONFIG, "broken");
    write_model(
        root.path(),
        "broken_config",
        "max_batch_size: -3 input [",
        "identity",
    );
    let (engine, _release) = engine(root.path());

    let response = engine
        .infer_one(request("good", &[1, 2, 3, 4]))
        .await
        .unwrap();
    assert_eq!(response.outputs[0].shape, [2, 2]);
    assert_eq!(&response.outputs[0].data[..4], &1i32.to_le_bytes());

    let index = engine.index();
    let row = |name: &str| index.iter().find(|r| r.name == name).unwrap().clone();
    assert_eq!(row("good").state, Some(ModelState::Ready));
    assert_eq!(row("broken_file").state, Some(ModelState::Unavailable));
    assert!(
        row("broken_file")
            .reason
            .contains("this model file is broken"),
        "{:?}",
        row("broken_file")
    );
    assert_eq!(row("broken_config").state, Some(ModelState::Unavailable));
    assert!(!row("broken_config").reason.is_empty());
    assert!(!engine.is_ready(), "strict readiness: a model failed");

    let err = engine
        .infer_one(request("broken_file", &[1, 2]))
        .await
        .unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::NotFound,
        "as Triton: no available versions"
    );
    let err = engine
        .infer_one(request("nope", &[1, 2]))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
}

/// Whether execution `i` ran on one of `model`'s instance threads.
fn on_instance_thread(controls: &Controls, model: &str, i: usize) -> bool {
    controls.threads.lock()[i].starts_with(&format!("{model}-1-"))
}

#[tokio::test]
async fn a_short_compute_only_execution_runs_on_the_receiving_thread() {
    let root = tempfile::tempdir().unwrap();
    write_model(root.path(), "quick", CONFIG, "panicky");
    let (engine, controls) = engine_with(root.path(), true);
    let mut served = 0;
    for i in 0..200 {
        let response = engine.infer_one(request("quick", &[i, 2])).await.unwrap();
        assert_eq!(common::first_output(&response), i);
        served += 1;
        if !on_instance_thread(&controls, "quick", served - 1) {
            break;
        }
    }
    // The first execution has no measured duration yet: it goes to an
    // instance thread; once executions have been short, a request that
    // finds an instance idle runs here.
    assert!(on_instance_thread(&controls, "quick", 0));
    assert!(
        !on_instance_thread(&controls, "quick", served - 1),
        "no execution ran on the receiving thread in {served} requests"
    );
    // A panic on this thread fails the request and restarts the instance,
    // as on the instance's own thread. On a busy machine an execution may
    // run long enough to send the next to the instance thread: the panic
    // is tried again until one ran here.
    let mut panics_inline = false;
    let mut panics = 0;
    for _ in 0..20 {
        let err = engine
            .infer_one(request("quick", &[666, 1]))
            .await
            .unwrap_err();
        assert!(err.message().contains("panicked: injected fault: 666"));
        served += 1;
        panics += 1;
        if !on_instance_thread(&controls, "quick", served - 1) {
            panics_inline = true;
            break;
        }
        // Short executions again, so that the next may run here.
        for i in 0..50 {
            engine.infer_one(request("quick", &[i, 2])).await.unwrap();
            served += 1;
        }
    }
    assert!(
        panics_inline,
        "no panicking execution ran on the receiving thread"
    );
    let ok = engine.infer_one(request("quick", &[5, 6])).await.unwrap();
    assert_eq!(common::first_output(&ok), 5);
    assert_eq!(controls.live.load(std::sync::atomic::Ordering::SeqCst), 1);
    let stats = &engine.statistics(Some("quick"), None).unwrap()[0].stats;
    // A panicked execution counts as a failure, not an execution.
    assert_eq!(stats.execution_count, (served - panics) as u64 + 1);
    assert_eq!(stats.fail.count, panics as u64);
}

#[tokio::test]
async fn a_backend_that_is_not_compute_only_always_runs_on_its_instance_threads() {
    let root = tempfile::tempdir().unwrap();
    write_model(root.path(), "plain", CONFIG, "identity");
    let (engine, controls) = engine(root.path());
    for i in 0..3 {
        engine.infer_one(request("plain", &[i, 2])).await.unwrap();
    }
    assert!((0..3).all(|i| on_instance_thread(&controls, "plain", i)));
}

#[tokio::test]
async fn an_abandoned_request_never_runs() {
    let root = tempfile::tempdir().unwrap();
    write_model(root.path(), "gated", CONFIG, "gate");
    let (engine, controls) = engine(root.path());
    assert!(engine.is_ready());

    // The first request occupies the only instance; the second is dropped
    // (its client went away) while it waits in the queue.
    let first = tokio::spawn({
        let engine = engine.clone();
        async move { engine.infer_one(request("gated", &[1, 2])).await }
    });
    let started = controls.started.clone();
    tokio::task::spawn_blocking(move || started.recv_timeout(Duration::from_secs(60)))
        .await
        .unwrap()
        .expect("the first request started executing");
    let abandoned = engine.infer_one(request("gated", &[5, 6]));
    let timed_out = tokio::time::timeout(Duration::from_millis(50), abandoned).await;
    assert!(timed_out.is_err(), "the second request cannot have run yet");
    controls.release.send(()).unwrap();
    first.await.unwrap().unwrap();
    controls.release.send(()).unwrap();
    // A third request goes through after the abandoned one was skipped.
    let third = tokio::spawn({
        let engine = engine.clone();
        async move { engine.infer_one(request("gated", &[7, 8])).await }
    });
    third.await.unwrap().unwrap();
    let stats = &engine.statistics(Some("gated"), None).unwrap()[0].stats;
    assert_eq!(
        stats.execution_count, 2,
        "the abandoned request must not execute"
    );
    assert_eq!(stats.cancelled, 1);
}

#[tokio::test]
async fn a_panicking_backend_fails_its_batch_and_the_instance_restarts() {
    let root = tempfile::tempdir().unwrap();
    write_model(root.path(), "faulty", CONFIG, "panicky");
    write_model(root.path(), "other", CONFIG, "identity");
    let (engine, controls) = engine(root.path());
    let err = engine
        .infer_one(request("faulty", &[666, 1]))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Internal);
    assert!(
        err.message()
            .contains("model 'faulty' version 1 panicked: injected fault: 666"),
        "{}",
        err.message()
    );
    // The instance was replaced: the next request is served, and the other
    // model never noticed.
    let ok = engine.infer_one(request("faulty", &[1, 2])).await.unwrap();
    assert_eq!(common::first_output(&ok), 1);
    assert!(engine.infer_one(request("other", &[3, 4])).await.is_ok());
    assert_eq!(controls.live.load(std::sync::atomic::Ordering::SeqCst), 2);
    let stats = engine.statistics(Some("faulty"), None).unwrap();
    assert_eq!(stats[0].stats.fail.count, 1);
}

#[tokio::test]
async fn an_instance_that_cannot_restart_makes_the_version_unavailable() {
    let root = tempfile::tempdir().unwrap();
    write_model(root.path(), "faulty", CONFIG, "panicky");
    let (engine, _controls) = engine(root.path());
    // The restart after the panic reads the model file again: now broken.
    std::fs::write(root.path().join("faulty/1/model.fake"), "panicky broken").unwrap();
    assert!(
        engine
            .infer_one(request("faulty", &[666, 1]))
            .await
            .is_err()
    );
    // The restart is tried once the failed batch has been answered.
    let row = || {
        engine
            .index()
            .into_iter()
            .find(|r| r.name == "faulty")
            .unwrap()
    };
    let unavailable = common::eventually(Duration::from_secs(60), || {
        row().state == Some(ModelState::Unavailable)
    })
    .await;
    assert!(unavailable, "{:?}", row());
    let row = row();
    assert!(
        row.reason.contains("panicked and could not be restarted"),
        "{}",
        row.reason
    );
    assert!(engine.infer_one(request("faulty", &[1, 2])).await.is_err());
}

#[tokio::test]
async fn implicit_state_on_a_backend_without_it_is_refused_with_the_reason() {
    let root = tempfile::tempdir().unwrap();
    let config = format!(
        "{CONFIG}sequence_batching {{ state [ {{ input_name: \"S_IN\" output_name: \"S_OUT\" \
         data_type: TYPE_INT32 dims: [ 1 ] }} ] }}"
    );
    write_model(root.path(), "stateful", &config, "identity");
    write_model(root.path(), "other", CONFIG, "identity");
    let (engine, _controls) = engine(root.path());
    let index = engine.index();
    let row = index.iter().find(|r| r.name == "stateful").unwrap();
    assert_eq!(row.state, Some(ModelState::Unavailable));
    assert!(
        row.reason.contains(
            "implicit state (sequence_batching.state) is supported for ONNX Runtime and PyTorch (TorchScript) models only"
        ),
        "{}",
        row.reason
    );
    assert!(engine.infer_one(request("other", &[1, 2])).await.is_ok());
}

#[tokio::test]
async fn a_frontend_reads_a_loaded_models_own_files_and_nothing_outside_them() {
    let root = tempfile::tempdir().unwrap();
    write_model(root.path(), "chat", CONFIG, "identity");
    std::fs::write(
        root.path().join("chat/chat_template.jinja"),
        "{{ messages }}",
    )
    .unwrap();
    std::fs::write(root.path().join("secret"), "no").unwrap();
    let (engine, _release) = engine(root.path());
    engine.load_all().unwrap();
    assert_eq!(
        engine.model_file("chat", "chat_template.jinja").unwrap(),
        Some(b"{{ messages }}".to_vec())
    );
    assert_eq!(
        engine.model_file("chat", "tokenizer_config.json").unwrap(),
        None
    );
    for outside in ["../secret", "/etc/passwd", "", "a/../../secret"] {
        let refused = engine.model_file("chat", outside).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::InvalidArgument, "{outside}");
    }
    assert_eq!(
        engine
            .model_file("nope", "chat_template.jinja")
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
}

#[tokio::test]
async fn an_output_with_a_reshape_answers_its_config_dims_as_triton_does() {
    let root = tempfile::tempdir().unwrap();
    let config = r#"
backend: "fake"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 2 ] reshape: { shape: [ 1, 2 ] } } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 2 ] reshape: { shape: [ 1, 2 ] } } ]
"#;
    write_model(root.path(), "reshaped", config, "");
    let (engine, _controls) = engine_with(root.path(), false);
    // The model gets [2, 1, 2] and answers the same shape; the client
    // sees the config's dims after the batch dimension.
    let response = engine
        .infer_one(request("reshaped", &[1, 2, 3, 4]))
        .await
        .unwrap();
    assert_eq!(response.outputs[0].shape, vec![2, 2]);
    assert_eq!(common::first_output(&response), 1);
}

#[tokio::test]
async fn a_file_the_model_folder_lacks_may_come_from_inside_the_model_file() {
    let root = tempfile::tempdir().unwrap();
    write_model(
        root.path(),
        "carrier",
        CONFIG,
        "identity embeds tokenizer_config.json",
    );
    let (engine, _release) = engine(root.path());
    let embedded = engine
        .model_file("carrier", "tokenizer_config.json")
        .unwrap();
    assert_eq!(
        embedded.as_deref(),
        Some(&b"tokenizer_config.json from inside the model file"[..])
    );
    assert_eq!(
        engine.model_file("carrier", "chat_template.jinja").unwrap(),
        None
    );
    // The folder's own file comes first.
    std::fs::write(root.path().join("carrier/tokenizer_config.json"), "{}").unwrap();
    let own = engine
        .model_file("carrier", "tokenizer_config.json")
        .unwrap();
    assert_eq!(own.as_deref(), Some(&b"{}"[..]));
}
