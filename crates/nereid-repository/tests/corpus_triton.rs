//! Triton's `qa/L0_model_config` cases: configs real Triton refuses (with
//! its error text) and configs it completes (with the config it renders).

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{FakeBackend, corpus_root, spec, triton_qa_io, write_tree};
use nereid_core::{Backend, DataType, ModelIo};
use nereid_repository::{ModelEntry, Repository, parse_config_text};

fn qa_dir() -> std::path::PathBuf {
    corpus_root().join("qa/L0_model_config")
}

/// Puts `config` in a fresh repository as model `name` with one version and
/// resolves it.
fn resolve_case(
    name: &str,
    config: &str,
    strict: bool,
    backends: &[Arc<dyn Backend>],
) -> Result<nereid_repository::ResolvedModel, nereid_repository::ModelError> {
    let dir = tempfile::tempdir().expect("temporary folder");
    let files = [
        (format!("{name}/config.pbtxt"), config),
        (format!("{name}/1/model.onnx"), ""),
    ];
    let files: Vec<(&str, &str)> = files.iter().map(|(p, c)| (p.as_str(), *c)).collect();
    write_tree(dir.path(), &files);
    let repo = Repository::new(vec![dir.path().into()], strict).with_gpus(vec![0]);
    let entry = ModelEntry {
        name: name.into(),
        path: dir.path().join(name),
        duplicates: vec![],
    };
    repo.resolve(&entry, backends)
}

/// Triton's `expected` files are regular expressions; these only escape brackets.
fn expected_text(path: &Path) -> String {
    std::fs::read_to_string(path)
        .expect("expected file")
        .trim()
        .replace("\\[", "[")
        .replace("\\]", "]")
}

#[test]
fn configs_triton_refuses_are_refused_with_tritons_message() {
    let cases_dir = qa_dir().join("noautofill_platform");
    let mut cases: Vec<_> = std::fs::read_dir(&cases_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    cases.sort();
    let mut checked = 0;
    let mut failures = Vec::new();
    for case in cases.iter().filter(|c| c.join("expected").is_file()) {
        let name = case.file_name().unwrap().to_str().unwrap();
        // Triton's test script substitutes the platform; these cases name
        // the backend where a platform belongs.
        let config = std::fs::read_to_string(case.join("config.pbtxt")).unwrap();
        let config = config.replace("platform: \"onnxruntime\"", "backend: \"onnxruntime\"");
        let expected = expected_text(&case.join("expected"));
        match resolve_case(name, &config, true, &[FakeBackend::onnx(triton_qa_io())]) {
            Ok(_) => failures.push(format!("{name}: accepted, Triton says: {expected}")),
            Err(err) if !err.to_string().contains(&expected) => {
                failures.push(format!("{name}:\n  ours:   {err}\n  Triton: {expected}"));
            }
            Err(_) => {}
        }
        checked += 1;
    }
    assert!(checked >= 50, "only {checked} cases found");
    assert!(
        failures.is_empty(),
        "{} of {checked} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn autofill_refusals() {
    let dir = qa_dir();
    let no_batch = ModelIo {
        inputs: vec![
            spec("INPUT0", DataType::Int32, &[16]),
            spec("INPUT1", DataType::Int32, &[16]),
        ],
        outputs: vec![
            spec("OUTPUT0", DataType::Int8, &[16]),
            spec("OUTPUT1", DataType::Int8, &[16]),
        ],
    };
    let cases: [(&str, ModelIo); 2] = [
        ("autofill_noplatform/onnx/bad_max_batch_size", no_batch),
        ("special_cases/invalid_platform", triton_qa_io()),
    ];
    for (case, io) in cases {
        let case = dir.join(case);
        let name = case.file_name().unwrap().to_str().unwrap();
        let config = std::fs::read_to_string(case.join("config.pbtxt")).unwrap();
        let err = resolve_case(name, &config, false, &[FakeBackend::onnx(io)]).unwrap_err();
        let expected = expected_text(&case.join("expected"));
        assert!(
            err.to_string().contains(&expected),
            "{name}:\n  ours:   {err}\n  Triton: {expected}"
        );
    }
}

#[test]
fn backend_cannot_be_determined() {
    for case in [
        "autofill_noplatform/common/no_version",
        "autofill_noplatform/custom/no_delimiter",
    ] {
        let case = qa_dir().join(case);
        let name = case.file_name().unwrap().to_str().unwrap();
        let config = std::fs::read_to_string(case.join("config.pbtxt")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        write_tree(dir.path(), &[(&format!("{name}/config.pbtxt"), &config)]);
        let repo = Repository::new(vec![dir.path().into()], false);
        let entry = ModelEntry {
            name: name.into(),
            path: dir.path().join(name),
            duplicates: vec![],
        };
        let err = repo
            .resolve(&entry, &[FakeBackend::onnx(triton_qa_io())])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            expected_text(&case.join("expected")),
            "{name}"
        );
    }
}

/// What real Triton rendered for these ONNX models (on a GPU machine, so
/// resolved here with one GPU) is exactly what we produce.
#[test]
fn autofilled_onnx_configs_match_triton() {
    let no_batch = ModelIo {
        inputs: vec![
            spec("INPUT0", DataType::Int32, &[16]),
            spec("INPUT1", DataType::Int32, &[16]),
        ],
        outputs: vec![
            spec("OUTPUT0", DataType::Int8, &[16]),
            spec("OUTPUT1", DataType::Int8, &[16]),
        ],
    };
    let fp16 = ModelIo {
        inputs: vec![spec("INPUT0", DataType::Fp16, &[-1, -1, -1])],
        outputs: vec![spec("OUTPUT0", DataType::Fp16, &[-1, -1, -1])],
    };
    let cases = [
        ("empty_config", triton_qa_io()),
        ("no_config", triton_qa_io()),
        ("no_config_no_batch", no_batch),
        ("cpu_instance", fp16),
    ];
    for (name, io) in cases {
        let case = qa_dir().join("autofill_noplatform_success/onnx").join(name);
        let config = std::fs::read_to_string(case.join("config.pbtxt")).unwrap_or_default();
        let ours = resolve_case(name, &config, false, &[FakeBackend::onnx(io)])
            .unwrap()
            .config;
        let triton =
            parse_config_text(&std::fs::read_to_string(case.join("expected")).unwrap()).unwrap();
        assert_eq!(ours, triton, "{name}");
    }
}

#[test]
fn pytorch_cpu_instance_matches_triton() {
    let case = qa_dir().join("autofill_noplatform_success/pytorch/cpu_instance");
    let config = std::fs::read_to_string(case.join("config.pbtxt")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_tree(
        dir.path(),
        &[
            ("cpu_instance/config.pbtxt", &config),
            ("cpu_instance/1/model.pt", ""),
        ],
    );
    let repo = Repository::new(vec![dir.path().into()], false).with_gpus(vec![0]);
    let entry = ModelEntry {
        name: "cpu_instance".into(),
        path: dir.path().join("cpu_instance"),
        duplicates: vec![],
    };
    let ours = repo
        .resolve(&entry, &[FakeBackend::torch(ModelIo::default())])
        .unwrap()
        .config;
    let triton =
        parse_config_text(&std::fs::read_to_string(case.join("expected")).unwrap()).unwrap();
    assert_eq!(ours, triton);
}
