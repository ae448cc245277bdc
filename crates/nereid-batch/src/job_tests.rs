//! A job's flow through a real engine, over a fake backend that adds one to
//! INT32 rows of 2 and fails every batch that holds a negative number (as
//! a runtime fails a whole run over one bad row).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use nereid_core::testing::{FnBackend, int32s as ints, map_int32};
use nereid_core::{BackendError, DataType, InputTensor};
use nereid_engine::EngineOptions;
use tokio::sync::mpsc;

use super::*;
use crate::npy::{self, Element};

/// An engine with model `m` loaded (INT32 rows of 2, `max_batch_size` 8,
/// one instance, `batching` its `dynamic_batching` block or nothing), and
/// the first dimension of every batch it runs.
fn engine(root: &Path, batching: &str) -> (Engine, mpsc::UnboundedReceiver<i64>) {
    std::fs::create_dir_all(root.join("m/1")).unwrap();
    std::fs::write(root.join("m/1/model.add_one"), "").unwrap();
    let config = format!(
        r#"backend: "add_one"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 2 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 2 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
{batching}
"#
    );
    std::fs::write(root.join("m/config.pbtxt"), config).unwrap();
    let (executions, seen) = mpsc::unbounded_channel();
    let options = EngineOptions {
        repositories: vec![root.to_path_buf()],
        mirrors: Vec::new(),
        strict_model_config: true,
        strict_readiness: nereid_engine::Readiness::Strict,
        response_cache: None,
        devices: Default::default(),
    };
    let add_one = FnBackend::new("add_one", move |batch| {
        let input = &batch.inputs[0];
        let _ = executions.send(input.shape[0]);
        if ints(&input.data).iter().any(|&v| v < 0) {
            return Err(BackendError::Execute("a negative number".into()));
        }
        Ok(vec![map_int32(input, "OUTPUT0", |v| v + 1)])
    });
    let engine = Engine::new(options, vec![Arc::new(add_one)]);
    engine.load_all().unwrap();
    (engine, seen)
}

fn drain(seen: &mut mpsc::UnboundedReceiver<i64>) -> Vec<i64> {
    let mut sizes = Vec::new();
    while let Ok(size) = seen.try_recv() {
        sizes.push(size);
    }
    sizes.sort_unstable();
    sizes
}

/// Groups handed out in one chunk.
struct Groups(Option<Vec<Group>>);

impl Source for Groups {
    fn total(&self) -> u64 {
        self.0.iter().flatten().map(|g| g.rows as u64).sum()
    }
    fn next_chunk(&mut self) -> Result<Option<Vec<Group>>, BatchError> {
        Ok(self.0.take())
    }
}

/// Every result written, in order.
#[derive(Default)]
struct Collect(Vec<Result<InferResponse, String>>);

impl Sink for Collect {
    fn write(&mut self, result: Result<InferResponse, String>) -> Result<bool, BatchError> {
        let failed = result.is_err();
        self.0.push(result);
        Ok(failed)
    }
    fn wants_commit(&self) -> bool {
        false
    }
    fn commit(&mut self) -> Result<(), BatchError> {
        Ok(())
    }
    fn finish(self: Box<Self>) -> Result<(), BatchError> {
        Ok(())
    }
}

/// A request of model `m` holding `rows`.
fn group(model: &ModelSpec, rows: &[[i32; 2]]) -> Group {
    let input = InputTensor {
        name: "INPUT0".into(),
        datatype: DataType::Int32,
        shape: vec![rows.len() as i64, 2],
        data: rows
            .iter()
            .flatten()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        parameters: Default::default(),
    };
    Group {
        rows: rows.len(),
        request: Ok(read::request(model, vec![input])),
    }
}

#[tokio::test]
async fn a_request_that_fails_has_its_rows_retried_alone() {
    let root = tempfile::tempdir().unwrap();
    // Without a dynamic batcher each request runs alone: the retries of
    // one request cannot meet another's rows.
    let (engine, mut seen) = engine(root.path(), "");
    let model = ModelSpec::from_config(
        &engine.model("m", None).unwrap().config,
        ModelVersion::Latest,
    )
    .unwrap();
    let rows = [
        [0, 0],
        [1, 1],
        [2, 2],
        [3, 3],
        [4, 4],
        [-5, 5],
        [6, 6],
        [7, 7],
    ];
    let mut source = Groups(Some(vec![
        group(&model, &rows[..4]),
        Group::one(Err("a null cell".into())),
        group(&model, &rows[4..]),
    ]));
    let mut sink = Collect::default();
    let mut progress = Progress::new(9, 0, 0, false);
    let stop = AtomicBool::new(false);
    let flow = Flow {
        engine: &engine,
        concurrency: 64,
        stop: &stop,
    };
    flow.drive(&mut source, &mut sink, &mut progress)
        .await
        .unwrap();
    assert_eq!((progress.done(), progress.failures()), (9, 2));
    let results = sink.0;
    assert_eq!(results[4], Err("a null cell".into()));
    assert!(
        results[6]
            .as_ref()
            .unwrap_err()
            .contains("a negative number"),
        "{:?}",
        results[6]
    );
    let answered = [0, 1, 2, 3, 5, 7, 8].map(|i| results[i].as_ref().unwrap());
    for (response, row) in answered.iter().zip([0, 1, 2, 3, 4, 6, 7]) {
        assert_eq!(response.outputs[0].shape, [1, 2]);
        assert_eq!(ints(&response.outputs[0].data), rows[row].map(|v| v + 1));
    }
    // Two requests of 4; the one that failed again as its 4 rows.
    assert_eq!(drain(&mut seen), [1, 1, 1, 1, 4, 4]);
}

/// Writes `rows` as an INT32 `.npy` file.
fn write_npy(path: &Path, rows: &[[i32; 2]]) {
    let mut file = npy::header(Element::Fixed(DataType::Int32), &[rows.len(), 2]).unwrap();
    file.extend(rows.iter().flatten().flat_map(|v| v.to_le_bytes()));
    std::fs::write(path, file).unwrap();
}

#[tokio::test]
async fn a_resumed_npy_job_sends_requests_of_several_rows_and_writes_one_line_each() {
    let root = tempfile::tempdir().unwrap();
    let (engine, mut seen) = engine(root.path(), "");
    let rows: Vec<[i32; 2]> = (0..10)
        .map(|i| if i == 8 { [-1, 8] } else { [i, 10 * i] })
        .collect();
    let input = root.path().join("in.npy");
    write_npy(&input, &rows);
    // An earlier run wrote the first 3 records.
    let output = root.path().join("out.jsonl");
    std::fs::write(&output, "{\"outputs\":[]}\n".repeat(3)).unwrap();
    let job = Job {
        model: "m".into(),
        version: ModelVersion::Latest,
        input: InputFiles::Path(input),
        input_format: None,
        output: output.clone(),
        output_format: None,
        concurrency: Some(4),
        overwrite: false,
        progress: false,
        commit: CommitPolicy::default(),
        chunk_rows: 5,
        group_rows: Some(4),
    };
    let summary = run(&engine, &job, Arc::new(AtomicBool::new(false)))
        .await
        .unwrap();
    assert_eq!(
        (summary.total, summary.resumed_from, summary.processed),
        (10, 3, 7)
    );
    assert_eq!(summary.failures, 1);
    // Chunks of 5 from record 3: 3..7 and 7 in the first, 8..10 in the
    // second, which fails as a whole and runs again row by row.
    assert_eq!(drain(&mut seen), [1, 1, 1, 2, 4]);
    let text = std::fs::read_to_string(&output).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 10);
    for (i, line) in lines.iter().enumerate().skip(3) {
        if i == 8 {
            let error = line["error"].as_str().unwrap();
            assert!(error.contains("a negative number"), "{error}");
            continue;
        }
        let output = &line["outputs"][0];
        assert_eq!(output["shape"], serde_json::json!([1, 2]), "{line}");
        let want = rows[i].map(|v| v + 1);
        assert_eq!(output["data"], serde_json::json!(want), "{line}");
    }
}

#[test]
fn requests_hold_a_quarter_of_a_batch_for_a_batcher_and_a_whole_one_without() {
    let config = |max_batch_size: i32, batcher: bool| ModelConfig {
        max_batch_size,
        scheduling_choice: batcher.then(|| SchedulingChoice::DynamicBatching(Default::default())),
        ..Default::default()
    };
    let sizes = [(64, true), (8, true), (3, true), (64, false), (0, false)]
        .map(|(n, batcher)| group_rows(&config(n, batcher)));
    assert_eq!(sizes, [16, 2, 1, 64, 1]);
}
