//! The dynamic batcher inside the engine, with a fake backend that records
//! every batch it runs and can hold an execution until released.

#![expect(clippy::unwrap_used, reason = "test code")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender};
use nereid_core::testing::{FnBackend, int32s as ints, map_int32};
use nereid_core::{DataType, InferRequest, InputTensor, Parameters, Routing};
use nereid_engine::{Answer, Call, Engine, EngineOptions};
use parking_lot::Mutex;

/// A bound on every wait for the engine, not an expected time.
const WAIT: Duration = Duration::from_secs(60);

struct Harness {
    engine: Engine,
    batches: Arc<Mutex<Vec<i64>>>,
    release: Sender<()>,
    started: Receiver<()>,
}

fn harness(dynamic_batching: &str) -> (Harness, tempfile::TempDir) {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("rec");
    std::fs::create_dir_all(dir.join("1")).unwrap();
    std::fs::write(dir.join("1/model.recorder"), "").unwrap();
    let config = format!(
        r#"backend: "recorder"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 2 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 2 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
{dynamic_batching}
"#
    );
    std::fs::write(dir.join("config.pbtxt"), config).unwrap();
    let (release, gate) = crossbeam_channel::unbounded();
    let (started_tx, started) = crossbeam_channel::unbounded();
    let batches = Arc::new(Mutex::new(Vec::new()));
    // Doubles INPUT0 into OUTPUT0, records each batch's first dimension,
    // and holds each execution until released.
    let recorded = Arc::clone(&batches);
    let backend = FnBackend::new("recorder", move |batch| {
        let _ = started_tx.send(());
        let _ = gate.recv_timeout(WAIT);
        let input = &batch.inputs[0];
        recorded.lock().push(input.shape[0]);
        Ok(vec![map_int32(input, "OUTPUT0", |v| v * 2)])
    });
    let options = EngineOptions {
        repositories: vec![root.path().to_path_buf()],
        mirrors: Vec::new(),
        strict_model_config: true,
        strict_readiness: nereid_engine::Readiness::Strict,
        response_cache: None,
        devices: Default::default(),
    };
    let engine = Engine::new(options, vec![Arc::new(backend)]);
    engine.load_all().unwrap();
    assert!(engine.is_ready(), "{:?}", engine.index());
    (
        Harness {
            engine,
            batches,
            release,
            started,
        },
        root,
    )
}

fn request(values: &[i32], priority: Option<u64>) -> InferRequest {
    let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    InferRequest {
        model_name: "rec".into(),
        routing: Routing {
            priority: priority.unwrap_or(0),
            ..Routing::default()
        },
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

impl Harness {
    fn spawn(&self, values: &[i32], priority: Option<u64>) -> tokio::task::JoinHandle<Vec<u8>> {
        let engine = self.engine.clone();
        let request = request(values, priority);
        tokio::spawn(async move {
            engine
                .infer(request, Call::one())
                .await
                .and_then(Answer::one)
                .unwrap()
                .outputs[0]
                .data
                .to_vec()
        })
    }

    async fn wait_started(&self) {
        let started = self.started.clone();
        tokio::task::spawn_blocking(move || started.recv_timeout(WAIT).unwrap())
            .await
            .unwrap();
    }

    /// Waits until `n` requests are pending (accepted, not running):
    /// each is then in the batcher's channel or queue, and the batcher
    /// takes in its whole channel before it forms a batch. (A pause of a
    /// few milliseconds, which this replaces, could end before the
    /// spawned requests were sent on a busy machine.)
    async fn queued(&self, n: u64) {
        let pending = || {
            self.engine
                .activity()
                .iter()
                .find(|a| a.name == "rec")
                .map_or(0, |a| a.pending)
        };
        let deadline = Instant::now() + WAIT;
        while pending() < n {
            assert!(
                Instant::now() < deadline,
                "{} of {n} requests pending",
                pending()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_requests_run_together_and_answers_are_split_back() {
    let (h, _root) = harness("dynamic_batching { }");
    let first = h.spawn(&[1, 1], None);
    h.wait_started().await;
    let waiting: Vec<_> = (0..5)
        .map(|i| h.spawn(&[i, i + 10, i + 20, i + 30], None))
        .collect();
    h.queued(5).await;
    for _ in 0..3 {
        h.release.send(()).unwrap();
    }
    assert_eq!(ints(&first.await.unwrap()), [2, 2]);
    for (i, w) in waiting.into_iter().enumerate() {
        let i = i as i32;
        assert_eq!(
            ints(&w.await.unwrap()),
            [2 * i, 2 * i + 20, 2 * i + 40, 2 * i + 60]
        );
    }
    // 5 requests of 2 rows wait behind the first: 8 rows fit in one batch.
    assert_eq!(*h.batches.lock(), [1, 8, 2]);
    let stats = &h.engine.statistics(Some("rec"), None).unwrap()[0].stats;
    assert_eq!(stats.inference_count, 11);
    assert_eq!(stats.execution_count, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn higher_priority_runs_first_and_abandoned_requests_never_run() {
    let (h, _root) = harness(
        "dynamic_batching { max_queue_delay_microseconds: 0 priority_levels: 2 default_priority_level: 2 preferred_batch_size: [ 1 ] }",
    );
    let first = h.spawn(&[1, 1], None);
    h.wait_started().await;
    let low = h.spawn(&[2, 2], Some(2));
    let engine = h.engine.clone();
    let abandoned =
        tokio::spawn(async move { engine.infer(request(&[9, 9], Some(1)), Call::one()).await });
    let high = h.spawn(&[3, 3], Some(1));
    h.queued(3).await;
    abandoned.abort();
    let _ = abandoned.await;
    for _ in 0..3 {
        h.release.send(()).unwrap();
    }
    first.await.unwrap();
    high.await.unwrap();
    low.await.unwrap();
    assert_eq!(
        *h.batches.lock(),
        [1, 1, 1],
        "the abandoned request must not run"
    );
    let stats = &h.engine.statistics(Some("rec"), None).unwrap()[0].stats;
    assert_eq!(stats.cancelled, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_answers_unavailable_at_once() {
    let (h, _root) = harness("dynamic_batching { default_queue_policy { max_queue_size: 1 } }");
    let first = h.spawn(&[1, 1], None);
    h.wait_started().await;
    let queued = h.spawn(&[2, 2], None);
    h.queued(1).await;
    let refused = h
        .engine
        .infer(request(&[3, 3], None), Call::one())
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), nereid_core::ErrorKind::Unavailable);
    assert!(refused.message().contains("full"), "{refused}");
    h.release.send(()).unwrap();
    h.release.send(()).unwrap();
    first.await.unwrap();
    queued.await.unwrap();
}
