//! Model control end to end with the fake backend: explicit load and
//! unload, reloads that never fail a request, failed reloads that keep the
//! old version serving, config overrides and file contents.

#![expect(clippy::unwrap_used, reason = "test code")]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{
    CONFIG, InferOne, engine, eventually, first_output, request, write_model, write_version,
};
use nereid_core::ErrorKind;
use nereid_core::model_config::ModelConfig;
use nereid_engine::{ControlMode, Engine, IndexEntry, LoadRequest, ModelState};

const WAIT: Duration = Duration::from_secs(60);

fn row(engine: &Engine, name: &str, version: Option<i64>) -> Option<IndexEntry> {
    engine
        .index()
        .into_iter()
        .find(|r| r.name == name && r.version == version)
}

fn state(engine: &Engine, name: &str, version: i64) -> Option<ModelState> {
    row(engine, name, Some(version)).and_then(|r| r.state)
}

async fn answer(engine: &Engine, model: &str) -> i32 {
    first_output(&engine.infer_one(request(model, &[1, 2])).await.unwrap())
}

fn parse(text: &str) -> ModelConfig {
    nereid_repository::parse_config_text(text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_mode_loads_and_unloads_on_request() {
    let root = tempfile::tempdir().unwrap();
    write_model(root.path(), "a", CONFIG, "offset 1");
    write_model(root.path(), "b", CONFIG, "offset 2");
    write_model(root.path(), "bad", CONFIG, "broken");
    let (engine, controls) = engine(root.path(), ControlMode::Explicit, &["a", "nope"]);
    let failures = engine.load_all().unwrap();
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].model, "nope");
    assert_eq!(state(&engine, "a", 1), Some(ModelState::Ready));
    let b = row(&engine, "b", None).unwrap();
    assert_eq!(
        (b.state, b.reason.as_str()),
        (None, ""),
        "listed, not loaded"
    );
    assert!(engine.is_ready());

    engine
        .load_model("b", LoadRequest::default())
        .await
        .unwrap();
    assert_eq!(answer(&engine, "b").await, 3);
    engine.unload_model("a", false).await.unwrap();
    let a = row(&engine, "a", Some(1)).unwrap();
    assert_eq!(
        (a.state, a.reason.as_str()),
        (Some(ModelState::Unavailable), "unloaded")
    );
    let err = engine.infer_one(request("a", &[1, 2])).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(engine.is_ready(), "unloaded models do not make it unready");
    assert!(eventually(WAIT, || controls.live.load(Ordering::SeqCst) == 1).await);
    engine.unload_model("never-heard-of", true).await.unwrap();

    let err = engine
        .load_model("nope", LoadRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Internal);
    assert_eq!(
        err.message(),
        "failed to load 'nope', failed to poll from model repository"
    );
    let err = engine
        .load_model("bad", LoadRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(
        err.message()
            .starts_with("load failed for model 'bad': version 1 is at UNAVAILABLE state: "),
        "{err}"
    );
    assert!(!engine.is_ready(), "a failed model makes it unready");
}

#[tokio::test]
async fn loads_outside_explicit_mode_are_refused() {
    let root = tempfile::tempdir().unwrap();
    write_model(root.path(), "a", CONFIG, "");
    for mode in [ControlMode::None, ControlMode::Poll] {
        let (engine, _) = engine(root.path(), mode, &[]);
        for err in [
            engine
                .load_model("a", LoadRequest::default())
                .await
                .unwrap_err(),
            engine.unload_model("a", false).await.unwrap_err(),
        ] {
            assert_eq!(err.kind(), ErrorKind::Unavailable);
            assert_eq!(
                err.message(),
                "explicit model load / unload is not allowed if polling is enabled"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_swaps_without_failing_a_request() {
    let root = tempfile::tempdir().unwrap();
    write_model(root.path(), "m", CONFIG, "offset 0");
    write_model(root.path(), "g", CONFIG, "gate");
    let (engine, controls) = engine(root.path(), ControlMode::Explicit, &["*"]);
    assert!(engine.load_all().unwrap().is_empty());

    // A request executing on the old version when the swap happens.
    let held = tokio::spawn({
        let engine = engine.clone();
        async move { engine.infer_one(request("g", &[5, 6])).await }
    });
    let started = controls.started.clone();
    tokio::task::spawn_blocking(move || started.recv_timeout(WAIT))
        .await
        .unwrap()
        .unwrap();

    let failures = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let engine = engine.clone();
            let failures = Arc::clone(&failures);
            tokio::spawn(async move {
                let mut seen = Vec::new();
                for _ in 0..300 {
                    match engine.infer_one(request("m", &[1, 2])).await {
                        Ok(r) => seen.push(first_output(&r)),
                        Err(_) => drop(failures.fetch_add(1, Ordering::SeqCst)),
                    }
                    tokio::task::yield_now().await;
                }
                seen
            })
        })
        .collect();
    std::fs::write(root.path().join("m/1/model.fake"), "offset 100 slow").unwrap();
    std::fs::write(root.path().join("g/1/model.fake"), "offset 7").unwrap();
    engine
        .load_model("m", LoadRequest::default())
        .await
        .unwrap();
    engine
        .load_model("g", LoadRequest::default())
        .await
        .unwrap();
    controls.release.send(()).unwrap();
    let held = held.await.unwrap().unwrap();
    assert_eq!(first_output(&held), 5, "finished on the old version");
    for client in clients {
        let seen = client.await.unwrap();
        assert!(seen.iter().all(|v| *v == 1 || *v == 101), "{seen:?}");
    }
    assert_eq!(failures.load(Ordering::SeqCst), 0);
    assert_eq!(answer(&engine, "m").await, 101);
    assert_eq!(answer(&engine, "g").await, 8);
    assert!(
        eventually(WAIT, || controls.live.load(Ordering::SeqCst) == 2).await,
        "the old instances are dropped: {}",
        controls.live.load(Ordering::SeqCst)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_reload_keeps_the_old_version_serving() {
    let root = tempfile::tempdir().unwrap();
    write_model(root.path(), "m", CONFIG, "offset 1");
    let (engine, _) = engine(root.path(), ControlMode::Explicit, &["m"]);
    engine.load_all().unwrap();

    std::fs::write(root.path().join("m/1/model.fake"), "broken").unwrap();
    let err = engine
        .load_model("m", LoadRequest::default())
        .await
        .unwrap_err();
    assert!(err.message().contains("this model file is broken"), "{err}");
    assert_eq!(answer(&engine, "m").await, 2);
    let r = row(&engine, "m", Some(1)).unwrap();
    assert_eq!(r.state, Some(ModelState::Ready));
    assert!(r.reason.starts_with("reload failed: "), "{r:?}");
    assert!(engine.is_ready());

    std::fs::write(root.path().join("m/config.pbtxt"), "max_batch_size: [").unwrap();
    let err = engine
        .load_model("m", LoadRequest::default())
        .await
        .unwrap_err();
    assert!(
        err.message()
            .starts_with("failed to load 'm', failed to poll from model repository: "),
        "{err}"
    );
    assert_eq!(answer(&engine, "m").await, 2);

    std::fs::write(root.path().join("m/config.pbtxt"), CONFIG).unwrap();
    std::fs::write(root.path().join("m/1/model.fake"), "offset 3").unwrap();
    engine
        .load_model("m", LoadRequest::default())
        .await
        .unwrap();
    assert_eq!(answer(&engine, "m").await, 4);
    assert_eq!(row(&engine, "m", Some(1)).unwrap().reason, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_new_version_does_not_retire_the_old_one() {
    let root = tempfile::tempdir().unwrap();
    write_model(root.path(), "m", CONFIG, "offset 1");
    let (engine, _) = engine(root.path(), ControlMode::Explicit, &["m"]);
    engine.load_all().unwrap();
    write_version(root.path(), "m", 2, "broken");
    engine
        .load_model("m", LoadRequest::default())
        .await
        .unwrap_err();
    assert_eq!(state(&engine, "m", 2), Some(ModelState::Unavailable));
    assert_eq!(state(&engine, "m", 1), Some(ModelState::Ready));
    assert_eq!(answer(&engine, "m").await, 2, "version 1 still serves");

    write_version(root.path(), "m", 2, "offset 20");
    engine
        .load_model("m", LoadRequest::default())
        .await
        .unwrap();
    assert_eq!(answer(&engine, "m").await, 21);
    let old = row(&engine, "m", Some(1)).unwrap();
    assert_eq!(
        (old.state, old.reason.as_str()),
        (Some(ModelState::Unavailable), "unloaded")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_overrides_and_file_contents() {
    let root = tempfile::tempdir().unwrap();
    write_model(root.path(), "m", CONFIG, "offset 1");
    write_version(root.path(), "m", 2, "offset 2");
    let (engine, _) = engine(root.path(), ControlMode::Explicit, &[]);
    engine.load_all().unwrap();

    let all_versions = parse(&format!("{CONFIG}\nversion_policy: {{ all: {{}} }}"));
    let request = LoadRequest {
        config: Some(all_versions),
        files: Vec::new(),
        traffic: None,
    };
    engine.load_model("m", request).await.unwrap();
    assert_eq!(state(&engine, "m", 1), Some(ModelState::Ready));
    assert_eq!(state(&engine, "m", 2), Some(ModelState::Ready));

    let wrong_name = parse(&format!("name: \"other\"\n{CONFIG}"));
    let err = engine
        .load_model(
            "m",
            LoadRequest {
                config: Some(wrong_name),
                files: Vec::new(),
                traffic: None,
            },
        )
        .await
        .unwrap_err();
    assert!(err.message().contains("other"), "{err}");

    let request = LoadRequest {
        config: Some(parse(CONFIG)),
        files: vec![("3/model.fake".into(), b"offset 30".to_vec())],
        traffic: None,
    };
    engine.load_model("fresh", request).await.unwrap();
    assert_eq!(answer(&engine, "fresh").await, 31);
    assert_eq!(state(&engine, "fresh", 3), Some(ModelState::Ready));
}
