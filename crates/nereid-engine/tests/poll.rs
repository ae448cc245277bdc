//! Poll mode with the fake backend: the engine follows the repository
//! folder (file events, then a rescan every second) and never loads a
//! folder still being written.

#![expect(clippy::unwrap_used, reason = "test code")]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{CONFIG, InferOne, eventually, first_output, request, write_model, write_version};
use nereid_core::ErrorKind;
use nereid_engine::{ControlMode, Engine, EngineOptions, ModelControl, ModelState};

const WAIT: Duration = Duration::from_secs(60);

fn poll_engine(root: &Path) -> Engine {
    let (backend, _) = common::backend();
    let options = EngineOptions {
        repositories: vec![root.to_path_buf()],
        mirrors: Vec::new(),
        strict_model_config: false,
        strict_readiness: nereid_engine::Readiness::Strict,
        response_cache: None,
        devices: Default::default(),
    };
    let control = ModelControl {
        mode: ControlMode::Poll,
        startup_models: Vec::new(),
        poll_interval: Duration::from_secs(1),
        ..Default::default()
    };
    let engine = Engine::with_model_control(options, control, vec![Arc::new(backend)]);
    assert!(engine.load_all().unwrap().is_empty());
    engine
}

fn state(engine: &Engine, name: &str, version: i64) -> Option<(ModelState, String)> {
    engine
        .index()
        .into_iter()
        .find(|r| r.name == name && r.version == Some(version))
        .and_then(|r| Some((r.state?, r.reason)))
}

/// The first output of an unversioned request, or `None` if it failed.
fn answer(engine: &Engine, model: &str) -> Option<i32> {
    let engine = engine.clone();
    let model = model.to_string();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(engine.infer_one(request(&model, &[1, 2])))
            .ok()
            .map(|r| first_output(&r))
    })
    .join()
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_mode_follows_the_repository() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path();
    write_model(root, "m", CONFIG, "offset 0");
    write_model(root, "gone", CONFIG, "");
    let engine = poll_engine(root);
    assert_eq!(answer(&engine, "m"), Some(1));

    // A changed model file is swapped in.
    std::fs::write(root.join("m/1/model.fake"), "offset 10").unwrap();
    assert!(eventually(WAIT, || answer(&engine, "m") == Some(11)).await);

    // A new version replaces the old under the default policy (latest 1).
    write_version(root, "m", 2, "offset 20");
    assert!(eventually(WAIT, || answer(&engine, "m") == Some(21)).await);
    assert!(
        eventually(WAIT, || state(&engine, "m", 1)
            == Some((ModelState::Unavailable, "unloaded".into())))
        .await
    );

    // A config change applies (and a removed model goes).
    let config = format!("{CONFIG}\nversion_policy: {{ all: {{}} }}");
    std::fs::write(root.join("m/config.pbtxt"), config).unwrap();
    assert!(
        eventually(WAIT, || state(&engine, "m", 1)
            .is_some_and(|s| s.0 == ModelState::Ready))
        .await
    );
    std::fs::remove_dir_all(root.join("gone")).unwrap();
    assert!(eventually(WAIT, || !engine.index().iter().any(|r| r.name == "gone")).await);
    let err = engine
        .infer_one(request("gone", &[1, 2]))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);

    // A removed version is drained and unloaded; the other serves on.
    std::fs::remove_dir_all(root.join("m/2")).unwrap();
    assert!(
        eventually(WAIT, || state(&engine, "m", 2)
            == Some((ModelState::Unavailable, "unloaded".into())))
        .await
    );
    assert_eq!(answer(&engine, "m"), Some(11));
    assert!(engine.is_ready());

    // A broken model shows why; fixed, it serves.
    write_model(root, "bad", CONFIG, "broken");
    assert!(
        eventually(WAIT, || state(&engine, "bad", 1)
            .is_some_and(|s| s.0 == ModelState::Unavailable))
        .await
    );
    assert!(state(&engine, "bad", 1).unwrap().1.contains("broken"));
    assert!(!engine.is_ready());
    assert_eq!(answer(&engine, "m"), Some(11), "the others are untouched");
    std::fs::write(root.join("bad/1/model.fake"), "offset 5").unwrap();
    assert!(eventually(WAIT, || answer(&engine, "bad") == Some(6)).await);
    assert!(engine.is_ready());
    engine.begin_shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_being_written_is_not_loaded_half_written() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path();
    write_model(root, "m", CONFIG, "offset 0");
    let engine = poll_engine(root);
    // A "copy" that is broken until its last write, 100 ms later: well
    // within the settling time, so the broken state is never loaded.
    write_model(root, "copied", CONFIG, "broken (half written)");
    std::thread::sleep(Duration::from_millis(100));
    std::fs::write(root.join("copied/1/model.fake"), "offset 3").unwrap();
    let mut saw_unavailable = false;
    let loaded = eventually(WAIT, || {
        let s = state(&engine, "copied", 1);
        saw_unavailable |= s.as_ref().is_some_and(|s| s.0 == ModelState::Unavailable);
        s.is_some_and(|s| s.0 == ModelState::Ready)
    })
    .await;
    assert!(loaded);
    assert!(!saw_unavailable, "the half-written file was loaded");
    assert_eq!(answer(&engine, "copied"), Some(4));
    engine.begin_shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubernetes_style_volume_swap_reloads() {
    // A ConfigMap/Secret volume: `m -> ..data/m`, `..data -> ..v1`; an
    // update writes `..v2` and renames a new `..data` link over the old one.
    use std::os::unix::fs::symlink;
    let root = tempfile::tempdir().unwrap();
    let root = root.path();
    write_model(&root.join("..v1"), "m", CONFIG, "offset 1");
    symlink("..v1", root.join("..data")).unwrap();
    symlink("..data/m", root.join("m")).unwrap();
    let engine = poll_engine(root);
    assert_eq!(answer(&engine, "m"), Some(2));

    write_model(&root.join("..v2"), "m", CONFIG, "offset 2");
    symlink("..v2", root.join("..data_tmp")).unwrap();
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    assert!(eventually(WAIT, || answer(&engine, "m") == Some(3)).await);
    engine.begin_shutdown();
}
