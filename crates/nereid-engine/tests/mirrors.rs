//! Mirrored repositories (the copies of cloud repositories) as the engine
//! sees them, with a fake mirror that writes model folders when asked to
//! refresh: what startup and explicit loads have it copy, a copy that
//! fails recorded as a failed load while the others serve, a store out of
//! reach, and errors about copied files naming the objects.

#![expect(clippy::unwrap_used, reason = "test code")]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{CONFIG, InferOne, first_output, request, write_model};
use nereid_engine::{ControlMode, Engine, EngineOptions, LoadRequest, ModelControl, ModelState};
use nereid_repository::{CopyFailure, Mirror, MirrorError, Scope};
use parking_lot::Mutex;

/// A store of models (name -> the fake model file) copied into a folder.
#[derive(Debug)]
struct FakeMirror {
    root: tempfile::TempDir,
    store: Mutex<BTreeMap<String, (String, String)>>,
    failing: Mutex<BTreeSet<String>>,
    unreachable: AtomicBool,
    /// The scopes asked for, `None` for all.
    asked: Mutex<Vec<Option<Vec<String>>>>,
}

impl FakeMirror {
    fn new() -> Arc<FakeMirror> {
        Arc::new(FakeMirror {
            root: tempfile::tempdir().unwrap(),
            store: Mutex::default(),
            failing: Mutex::default(),
            unreachable: AtomicBool::new(false),
            asked: Mutex::default(),
        })
    }

    fn put(&self, name: &str, config: &str, file: &str) {
        let entry = (config.to_string(), file.to_string());
        self.store.lock().insert(name.to_string(), entry);
    }
}

impl Mirror for FakeMirror {
    fn root(&self) -> &Path {
        self.root.path()
    }

    fn origin(&self) -> &str {
        "s3://bucket/models"
    }

    fn refresh(&self, scope: Scope<'_>) -> Result<Vec<CopyFailure>, MirrorError> {
        self.asked.lock().push(match scope {
            Scope::All => None,
            Scope::Models(names) => Some(names.to_vec()),
        });
        if self.unreachable.load(Ordering::SeqCst) {
            return Err("cannot list s3://bucket/models: connection refused".into());
        }
        let mut failures = Vec::new();
        for (name, (config, file)) in self.store.lock().iter() {
            if !scope.includes(name) {
                continue;
            }
            if self.failing.lock().contains(name) {
                let error = format!("cannot copy s3://bucket/models/{name}/1/model.fake: reset");
                let model = name.clone();
                failures.push(CopyFailure {
                    model,
                    error: error.into(),
                });
                continue;
            }
            write_model(self.root.path(), name, config, file);
        }
        Ok(failures)
    }

    fn close(&self) {}
}

fn engine(mirror: &Arc<FakeMirror>, mode: ControlMode, startup: &[&str]) -> Engine {
    let (backend, _controls) = common::backend();
    let options = EngineOptions {
        repositories: vec![mirror.root().to_path_buf()],
        mirrors: vec![Arc::clone(mirror) as Arc<dyn Mirror>],
        strict_model_config: false,
        strict_readiness: nereid_engine::Readiness::Strict,
        response_cache: None,
        devices: Default::default(),
    };
    let control = ModelControl {
        mode,
        startup_models: startup.iter().map(|s| s.to_string()).collect(),
        poll_interval: Duration::from_secs(1),
        ..Default::default()
    };
    Engine::with_model_control(options, control, vec![Arc::new(backend)])
}

fn reason(engine: &Engine, name: &str) -> Option<(Option<ModelState>, String)> {
    engine
        .index()
        .into_iter()
        .find(|r| r.name == name && r.version.is_none())
        .map(|r| (r.state, r.reason))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_copies_every_model_and_a_failed_copy_fails_that_model_alone() {
    let mirror = FakeMirror::new();
    mirror.put("a", CONFIG, "offset 1");
    mirror.put("b", CONFIG, "offset 2");
    mirror.failing.lock().insert("b".into());
    let engine = engine(&mirror, ControlMode::None, &[]);
    let failures = engine.load_all().unwrap();
    assert_eq!(mirror.asked.lock().as_slice(), [None]);
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].model, "b");
    assert_eq!(
        failures[0].reason,
        "cannot copy s3://bucket/models/b/1/model.fake: reset"
    );
    let shown = reason(&engine, "b").unwrap();
    assert_eq!(shown.0, Some(ModelState::Unavailable));
    assert!(shown.1.contains("s3://bucket/models/b/1/model.fake"));
    assert_eq!(
        first_output(&engine.infer_one(request("a", &[1, 2])).await.unwrap()),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_out_of_reach_fails_startup_with_its_words() {
    let mirror = FakeMirror::new();
    mirror.unreachable.store(true, Ordering::SeqCst);
    let failures = engine(&mirror, ControlMode::None, &[]).load_all().unwrap();
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].model, "");
    assert!(failures[0].reason.contains("connection refused"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_loads_copy_what_they_load() {
    let mirror = FakeMirror::new();
    mirror.put("a", CONFIG, "offset 1");
    mirror.put("b", CONFIG, "offset 2");
    let engine = engine(&mirror, ControlMode::Explicit, &["a"]);
    assert!(engine.load_all().unwrap().is_empty());
    assert_eq!(mirror.asked.lock()[0], Some(vec!["a".to_string()]));
    assert!(!mirror.root().join("b").exists(), "not copied at startup");

    engine
        .load_model("b", LoadRequest::default())
        .await
        .unwrap();
    assert_eq!(mirror.asked.lock()[1], Some(vec!["b".to_string()]));
    assert_eq!(
        first_output(&engine.infer_one(request("b", &[1, 2])).await.unwrap()),
        3
    );

    mirror.failing.lock().insert("b".into());
    let err = engine
        .load_model("b", LoadRequest::default())
        .await
        .unwrap_err();
    assert_eq!(
        err.message(),
        "failed to load 'b': cannot copy s3://bucket/models/b/1/model.fake: reset"
    );
    assert_eq!(
        first_output(&engine.infer_one(request("b", &[1, 2])).await.unwrap()),
        3,
        "the copy it has serves on"
    );
    mirror.unreachable.store(true, Ordering::SeqCst);
    let err = engine
        .load_model("a", LoadRequest::default())
        .await
        .unwrap_err();
    assert!(err.message().contains("connection refused"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_about_copied_files_name_the_objects() {
    let mirror = FakeMirror::new();
    mirror.put("broken", "backend: \"fake\"\ninput [", "offset 1");
    let engine = engine(&mirror, ControlMode::None, &[]);
    let failures = engine.load_all().unwrap();
    assert_eq!(failures.len(), 1);
    let root = mirror.root().display().to_string();
    assert!(
        failures[0]
            .reason
            .contains("s3://bucket/models/broken/config.pbtxt"),
        "{}",
        failures[0].reason
    );
    assert!(!failures[0].reason.contains(&root), "no local path");
}
