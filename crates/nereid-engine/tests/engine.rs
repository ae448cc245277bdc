//! The engine end to end over a temporary repository, with a fake backend
//! whose model "files" say what to do: identity, or block until released.

#![expect(clippy::unwrap_used, reason = "test helpers may panic")]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nereid_core::backend::IoSpec;
use nereid_core::{
    Backend, BackendError, Batch, DataType, ErrorKind, InferRequest, InputTensor, ModelInstance,
    ModelIo, ModelSource, Parameters, Tensor,
};
use nereid_engine::{Engine, EngineOptions, ModelState};

/// Copies INPUT0 to OUTPUT0. A model file containing "gate" makes each
/// execution wait for a message on the shared gate channel first; "broken"
/// fails the load.
struct FakeBackend {
    gate: crossbeam_channel::Receiver<()>,
    started: crossbeam_channel::Sender<()>,
}

struct FakeInstance {
    gated: bool,
    gate: crossbeam_channel::Receiver<()>,
    started: crossbeam_channel::Sender<()>,
}

impl Backend for FakeBackend {
    fn name(&self) -> &'static str {
        "fake"
    }
    fn platform(&self) -> &'static str {
        "fake_platform"
    }
    fn default_model_filename(&self) -> &'static str {
        "model.fake"
    }
    fn inspect(&self, _: &Path) -> Result<ModelIo, BackendError> {
        let spec = |name: &str| IoSpec {
            name: name.into(),
            datatype: DataType::Int32,
            dims: vec![-1, 2],
        };
        Ok(ModelIo {
            inputs: vec![spec("INPUT0")],
            outputs: vec![spec("OUTPUT0")],
        })
    }
    fn load(&self, source: &ModelSource) -> Result<Box<dyn ModelInstance>, BackendError> {
        let text = std::fs::read_to_string(&source.model_path)
            .map_err(|e| BackendError::Load(e.to_string()))?;
        if text.contains("broken") {
            return Err(BackendError::Load("this model file is broken".into()));
        }
        Ok(Box::new(FakeInstance {
            gated: text.contains("gate"),
            gate: self.gate.clone(),
            started: self.started.clone(),
        }))
    }
}

impl ModelInstance for FakeInstance {
    fn execute(&mut self, batch: &Batch) -> Result<Vec<Tensor>, BackendError> {
        if self.gated {
            let _ = self.started.send(());
            let _ = self.gate.recv_timeout(Duration::from_secs(10));
        }
        let input = &batch.inputs[0];
        Ok(vec![Tensor {
            name: "OUTPUT0".into(),
            ..input.clone()
        }])
    }
}

fn write_model(root: &Path, name: &str, config: &str, file: &str) {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("1")).unwrap();
    std::fs::write(dir.join("config.pbtxt"), config).unwrap();
    std::fs::write(dir.join("1/model.fake"), file).unwrap();
}

const CONFIG: &str = r#"
backend: "fake"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 2 ] } ]
"#;

struct Controls {
    release: crossbeam_channel::Sender<()>,
    started: crossbeam_channel::Receiver<()>,
}

fn engine(root: &Path) -> (Engine, Controls) {
    let (release, gate) = crossbeam_channel::unbounded();
    let (started_tx, started) = crossbeam_channel::unbounded();
    let options = EngineOptions {
        repositories: vec![root.to_path_buf()],
        strict_model_config: false,
        strict_readiness: true,
    };
    let engine = Engine::new(
        options,
        vec![Arc::new(FakeBackend {
            gate,
            started: started_tx,
        })],
    );
    engine.load_all().unwrap();
    (engine, Controls { release, started })
}

fn request(model: &str, values: &[i32]) -> InferRequest {
    let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    InferRequest {
        model_name: model.into(),
        inputs: vec![InputTensor {
            name: "INPUT0".into(),
            datatype: DataType::Int32,
            shape: vec![values.len() as i64 / 2, 2],
            data: Bytes::from(data),
            parameters: Parameters::new(),
        }],
        ..Default::default()
    }
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

    let response = engine.infer(request("good", &[1, 2, 3, 4])).await.unwrap();
    assert_eq!(response.outputs[0].shape, [2, 2]);
    assert_eq!(&response.outputs[0].data[..4], &1i32.to_le_bytes());

    let index = engine.index();
    let row = |name: &str| index.iter().find(|r| r.name == name).unwrap().clone();
    assert_eq!(row("good").state, ModelState::Ready);
    assert_eq!(row("broken_file").state, ModelState::Unavailable);
    assert!(
        row("broken_file")
            .reason
            .contains("this model file is broken"),
        "{:?}",
        row("broken_file")
    );
    assert_eq!(row("broken_config").state, ModelState::Unavailable);
    assert!(!row("broken_config").reason.is_empty());
    assert!(!engine.is_ready(), "strict readiness: a model failed");

    let err = engine
        .infer(request("broken_file", &[1, 2]))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    let err = engine.infer(request("nope", &[1, 2])).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
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
        async move { engine.infer(request("gated", &[1, 2])).await }
    });
    let started = controls.started.clone();
    tokio::task::spawn_blocking(move || started.recv_timeout(Duration::from_secs(10)))
        .await
        .unwrap()
        .expect("the first request started executing");
    let abandoned = engine.infer(request("gated", &[5, 6]));
    let timed_out = tokio::time::timeout(Duration::from_millis(50), abandoned).await;
    assert!(timed_out.is_err(), "the second request cannot have run yet");
    controls.release.send(()).unwrap();
    first.await.unwrap().unwrap();
    controls.release.send(()).unwrap();
    // A third request goes through after the abandoned one was skipped.
    let third = tokio::spawn({
        let engine = engine.clone();
        async move { engine.infer(request("gated", &[7, 8])).await }
    });
    third.await.unwrap().unwrap();
    let stats = &engine.statistics(Some("gated"), None).unwrap()[0].stats;
    assert_eq!(
        stats.execution_count, 2,
        "the abandoned request must not execute"
    );
    assert_eq!(stats.cancelled, 1);
}
