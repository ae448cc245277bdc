//! Scanning folders and resolving models against fake backends.

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use common::{FakeBackend, spec, triton_qa_io, write_tree};
use nereid_core::model_config::model_config::SchedulingChoice;
use nereid_core::model_config::model_instance_group::Kind;
use nereid_core::{Backend, DataType, ModelIo};
use nereid_repository::{ModelEntry, ModelError, Repository, RepositoryError, ResolvedVersion};

fn backends() -> Vec<Arc<dyn Backend>> {
    vec![
        FakeBackend::onnx(triton_qa_io()),
        FakeBackend::torch(triton_qa_io()),
    ]
}

fn entry(root: &std::path::Path, name: &str) -> ModelEntry {
    ModelEntry {
        name: name.into(),
        path: root.join(name),
        duplicates: Vec::new(),
    }
}

const FULL_CONFIG: &str = r#"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT8 dims: [ 16 ] } ]
"#;

#[test]
fn scan_finds_model_folders_only() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    write_tree(
        a.path(),
        &[
            ("m1/config.pbtxt", ""),
            ("shared/1/model.onnx", ""),
            (".hidden/x", ""),
            ("README.md", ""),
        ],
    );
    write_tree(
        b.path(),
        &[("m2/1/model.pt", ""), ("shared/config.pbtxt", "")],
    );
    let repo = Repository::new(vec![a.path().into(), b.path().into()], false);
    let entries = repo.scan().unwrap();
    let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["m1", "m2", "shared"]);
    assert_eq!(entries[2].path, a.path().join("shared"));
    assert_eq!(entries[2].duplicates, vec![b.path().join("shared")]);

    let err = repo.resolve(&entries[2], &backends()).unwrap_err();
    assert!(matches!(err, ModelError::NotUnique { .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with("failed to poll model 'shared': not unique across all model repositories")
    );
}

#[test]
fn unreadable_root_is_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let repo = Repository::new(vec![dir.path().join("missing")], false);
    assert!(matches!(
        repo.scan(),
        Err(RepositoryError::UnreadableRoot { .. })
    ));
}

#[test]
fn resolves_versions_with_policy() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!("{FULL_CONFIG}\nversion_policy: {{ latest {{ num_versions: 2 }} }}");
    write_tree(
        dir.path(),
        &[
            ("m/config.pbtxt", &config),
            ("m/1/model.onnx", ""),
            ("m/2/model.onnx", ""),
            ("m/10/model.onnx", ""),
            ("m/010/model.onnx", ""),
            ("m/extra/model.onnx", ""),
        ],
    );
    let repo = Repository::new(vec![dir.path().into()], true);
    let model = repo.resolve(&entry(dir.path(), "m"), &backends()).unwrap();
    assert_eq!(model.name, "m");
    assert_eq!(model.backend.unwrap().name(), "onnxruntime");
    assert_eq!(model.config.platform, "onnxruntime_onnx");
    assert_eq!(model.config.default_model_filename, "model.onnx");
    let expected: Vec<ResolvedVersion> = [2, 10]
        .into_iter()
        .map(|v| ResolvedVersion {
            version: v,
            model_path: dir.path().join(format!("m/{v}/model.onnx")),
        })
        .collect();
    assert_eq!(model.versions, expected);
}

#[test]
fn specific_policy_skips_absent_versions() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!("{FULL_CONFIG}\nversion_policy: {{ specific {{ versions: [ 1, 3 ] }} }}");
    write_tree(
        dir.path(),
        &[
            ("m/config.pbtxt", &config),
            ("m/1/model.onnx", ""),
            ("m/2/model.onnx", ""),
        ],
    );
    let repo = Repository::new(vec![dir.path().into()], true);
    let model = repo.resolve(&entry(dir.path(), "m"), &backends()).unwrap();
    let versions: Vec<i64> = model.versions.iter().map(|v| v.version).collect();
    assert_eq!(versions, [1]);

    let config = format!("{FULL_CONFIG}\nversion_policy: {{ specific {{ versions: [ 3 ] }} }}");
    write_tree(dir.path(), &[("m/config.pbtxt", &config)]);
    let err = repo
        .resolve(&entry(dir.path(), "m"), &backends())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "at least one version must be available under the version policy of model 'm'"
    );
}

#[test]
fn missing_model_file_fails_the_model_naming_the_version() {
    let dir = tempfile::tempdir().unwrap();
    let config =
        format!("{FULL_CONFIG}\nplatform: \"onnxruntime_onnx\"\nversion_policy: {{ all {{}} }}");
    write_tree(
        dir.path(),
        &[
            ("m/config.pbtxt", &config),
            ("m/1/model.onnx", ""),
            ("m/2/weights.bin", ""),
        ],
    );
    let repo = Repository::new(vec![dir.path().into()], true);
    let err = repo
        .resolve(&entry(dir.path(), "m"), &backends())
        .unwrap_err();
    assert!(
        matches!(err, ModelError::MissingModelFile { version: 2, .. }),
        "{err}"
    );
}

#[test]
fn backend_resolution() {
    let dir = tempfile::tempdir().unwrap();
    write_tree(
        dir.path(),
        &[
            ("by_file/1/model.pt", ""),
            ("by_platform/config.pbtxt", "platform: \"pytorch_libtorch\""),
            ("by_platform/1/model.pt", ""),
            ("unknown_backend/config.pbtxt", "backend: \"tensorflow\""),
            (
                "unknown_platform/config.pbtxt",
                "platform: \"tensorflow_savedmodel\"",
            ),
            (
                "mismatch/config.pbtxt",
                "platform: \"onnxruntim\" default_model_filename: \"model.onnx\"",
            ),
            (
                "pair/config.pbtxt",
                "platform: \"pytorch_libtorch\" backend: \"onnxruntime\"",
            ),
            ("nothing/1/weights.bin", ""),
            ("custom.pytorch/1/model.pt", ""),
        ],
    );
    let repo = Repository::new(vec![dir.path().into()], false);
    let resolve = |name| repo.resolve(&entry(dir.path(), name), &backends());
    let by_file = resolve("by_file").unwrap();
    assert_eq!(
        (
            by_file.config.backend.as_str(),
            by_file.config.platform.as_str()
        ),
        ("pytorch", "pytorch_libtorch")
    );
    assert_eq!(resolve("by_platform").unwrap().config.backend, "pytorch");
    assert_eq!(
        resolve("custom.pytorch").unwrap().backend.unwrap().name(),
        "pytorch"
    );
    let err = resolve("unknown_backend").unwrap_err().to_string();
    assert_eq!(
        err,
        "unknown backend 'tensorflow' for model 'unknown_backend'; available backends: onnxruntime, pytorch"
    );
    let err = resolve("unknown_platform").unwrap_err().to_string();
    assert!(
        err.starts_with("unknown platform 'tensorflow_savedmodel' for model 'unknown_platform'"),
        "{err}"
    );
    let err = resolve("mismatch").unwrap_err().to_string();
    assert_eq!(
        err,
        "unexpected 'platform' and 'backend' pair, got:onnxruntim, onnxruntime"
    );
    let err = resolve("pair").unwrap_err().to_string();
    assert_eq!(
        err,
        "unexpected 'platform' and 'backend' pair, got:pytorch_libtorch, onnxruntime"
    );
    let err = resolve("nothing").unwrap_err().to_string();
    assert!(
        err.starts_with("Invalid model name: Could not determine backend for model 'nothing'"),
        "{err}"
    );
}

#[test]
fn name_must_match_folder() {
    let dir = tempfile::tempdir().unwrap();
    write_tree(
        dir.path(),
        &[
            ("m/config.pbtxt", "name: \"other\""),
            ("m/1/model.onnx", ""),
        ],
    );
    let repo = Repository::new(vec![dir.path().into()], false);
    let err = repo
        .resolve(&entry(dir.path(), "m"), &backends())
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "unexpected directory name 'm' for model 'other', directory name must equal model name"
    );
}

#[test]
fn strict_needs_a_config_and_does_not_autofill() {
    let dir = tempfile::tempdir().unwrap();
    write_tree(
        dir.path(),
        &[
            ("m/1/model.onnx", ""),
            (
                "p/config.pbtxt",
                "max_batch_size: 4 input [ { name: \"INPUT0\" } ]",
            ),
            ("p/1/model.onnx", ""),
        ],
    );
    let repo = Repository::new(vec![dir.path().into()], true);
    let err = repo
        .resolve(&entry(dir.path(), "m"), &backends())
        .unwrap_err();
    assert!(matches!(err, ModelError::MissingConfig { .. }), "{err}");
    let err = repo
        .resolve(&entry(dir.path(), "p"), &backends())
        .unwrap_err()
        .to_string();
    assert_eq!(err, "model input 'INPUT0' must specify 'data_type' for p");
}

#[test]
fn autofill_from_the_newest_selected_version() {
    let dir = tempfile::tempdir().unwrap();
    write_tree(
        dir.path(),
        &[("m/1/model.onnx", ""), ("m/2/model.onnx", "")],
    );
    let repo = Repository::new(vec![dir.path().into()], false);
    let model = repo.resolve(&entry(dir.path(), "m"), &backends()).unwrap();
    let c = &model.config;
    assert_eq!((c.name.as_str(), c.max_batch_size), ("m", 4));
    let Some(SchedulingChoice::DynamicBatching(batching)) = &c.scheduling_choice else {
        panic!("{c:?}")
    };
    assert_eq!(batching.preferred_batch_size, [4]);
    assert_eq!(c.input.len(), 2);
    assert_eq!(c.input[0].dims, [16]);
    assert_eq!(
        (c.instance_group[0].kind(), c.instance_group[0].count),
        (Kind::Cpu, 2)
    );
    assert_eq!(
        model.versions.iter().map(|v| v.version).collect::<Vec<_>>(),
        [2]
    );
}

#[test]
fn autofill_completes_partial_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let config = r#"
        max_batch_size: 2
        input [ { name: "INPUT1" }, { name: "INPUT0" data_type: TYPE_INT32 } ]
        output [ { name: "OUTPUT1" dims: [ 16 ] } ]
    "#;
    write_tree(
        dir.path(),
        &[("m/config.pbtxt", config), ("m/1/model.onnx", "")],
    );
    let repo = Repository::new(vec![dir.path().into()], false);
    let c = repo
        .resolve(&entry(dir.path(), "m"), &backends())
        .unwrap()
        .config;
    let inputs: Vec<(&str, i32, Vec<i64>)> = c
        .input
        .iter()
        .map(|i| (i.name.as_str(), i.data_type, i.dims.clone()))
        .collect();
    let int32 = nereid_core::model_config::DataType::TypeInt32 as i32;
    assert_eq!(
        inputs,
        [("INPUT1", int32, vec![16]), ("INPUT0", int32, vec![16])]
    );
    assert_eq!(
        c.output[0].data_type,
        nereid_core::model_config::DataType::TypeInt8 as i32
    );
    assert!(
        c.scheduling_choice.is_none(),
        "inputs and outputs were listed: no max_batch_size autofill"
    );
}

#[test]
fn autofill_refuses_batching_for_a_model_that_cannot() {
    let io = ModelIo {
        inputs: vec![spec("INPUT0", DataType::Fp32, &[16])],
        outputs: vec![spec("OUTPUT0", DataType::Fp32, &[16])],
    };
    let dir = tempfile::tempdir().unwrap();
    write_tree(
        dir.path(),
        &[
            ("m/config.pbtxt", "max_batch_size: 1"),
            ("m/1/model.onnx", ""),
        ],
    );
    let repo = Repository::new(vec![dir.path().into()], false);
    let err = repo
        .resolve(&entry(dir.path(), "m"), &[FakeBackend::onnx(io)])
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("autofill failed for model 'm': model does not support batching while non-zero max_batch_size is specified"), "{err}");
}

#[test]
fn gpus_turn_auto_groups_into_gpu_groups() {
    let dir = tempfile::tempdir().unwrap();
    write_tree(
        dir.path(),
        &[("m/config.pbtxt", FULL_CONFIG), ("m/1/model.onnx", "")],
    );
    let repo = Repository::new(vec![dir.path().into()], true).with_gpus(vec![0, 1]);
    let group = &repo
        .resolve(&entry(dir.path(), "m"), &backends())
        .unwrap()
        .config
        .instance_group[0];
    assert_eq!(
        (
            group.name.as_str(),
            group.kind(),
            group.count,
            group.gpus.clone()
        ),
        ("m", Kind::Gpu, 1, vec![0, 1])
    );
}

#[test]
fn parse_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    write_tree(
        dir.path(),
        &[
            ("m/config.pbtxt", "name: \"m\"\nmax_batch_size: \"x\""),
            ("m/1/model.onnx", ""),
        ],
    );
    let repo = Repository::new(vec![dir.path().into()], false);
    let err = repo
        .resolve(&entry(dir.path(), "m"), &backends())
        .unwrap_err()
        .to_string();
    let path: PathBuf = dir.path().join("m/config.pbtxt");
    assert!(
        err.starts_with(&format!(
            "failed to parse model configuration: {}:2:17: ",
            path.display()
        )),
        "{err}"
    );
}

/// A backend whose models complete their own config, as Triton's Python
/// backend does: it sets `max_batch_size` and adds one input and output,
/// or refuses a model file that says "refuse".
struct SelfCompleting;

impl Backend for SelfCompleting {
    fn name(&self) -> &'static str {
        "python"
    }
    fn platform(&self) -> &'static str {
        ""
    }
    fn default_model_filename(&self) -> &'static str {
        "model.py"
    }
    fn inspect(&self, _: &std::path::Path) -> Result<ModelIo, nereid_core::BackendError> {
        panic!("a self-completing backend is never inspected")
    }
    fn auto_complete(
        &self,
        config: &nereid_core::model_config::ModelConfig,
        model_path: &std::path::Path,
    ) -> Option<Result<nereid_core::model_config::ModelConfig, nereid_core::BackendError>> {
        use nereid_core::model_config::{DataType as T, ModelInput, ModelOutput};
        if std::fs::read_to_string(model_path)
            .unwrap_or_default()
            .contains("refuse")
        {
            return Some(Err(nereid_core::BackendError::Load(
                "auto_complete_config raised".into(),
            )));
        }
        let mut config = config.clone();
        config.max_batch_size = 8;
        config.input.push(ModelInput {
            name: "IN".into(),
            data_type: T::TypeFp32 as i32,
            dims: vec![4],
            ..Default::default()
        });
        config.output.push(ModelOutput {
            name: "OUT".into(),
            data_type: T::TypeFp32 as i32,
            dims: vec![4],
            ..Default::default()
        });
        Some(Ok(config))
    }
    fn load(
        &self,
        _: &nereid_core::ModelSource,
    ) -> Result<Box<dyn nereid_core::ModelInstance>, nereid_core::BackendError> {
        Err(nereid_core::BackendError::Unsupported(
            "fake backend".into(),
        ))
    }
}

#[test]
fn a_backend_may_let_its_models_complete_their_config() {
    let root = tempfile::tempdir().unwrap();
    write_tree(
        root.path(),
        &[
            ("py/config.pbtxt", "backend: \"python\""),
            ("py/1/model.py", "fine"),
            ("no/config.pbtxt", "backend: \"python\""),
            ("no/1/model.py", "refuse"),
        ],
    );
    let backends: Vec<Arc<dyn Backend>> = vec![Arc::new(SelfCompleting)];
    let repo = Repository::new(vec![root.path().to_path_buf()], false);
    let model = repo.resolve(&entry(root.path(), "py"), &backends).unwrap();
    assert_eq!(model.config.max_batch_size, 8);
    assert_eq!(model.config.input[0].name, "IN");
    let err = repo
        .resolve(&entry(root.path(), "no"), &backends)
        .unwrap_err();
    assert!(
        err.to_string().contains("auto_complete_config raised"),
        "{err}"
    );
    let strict = Repository::new(vec![root.path().to_path_buf()], true);
    let model = strict
        .resolve(&entry(root.path(), "py"), &backends)
        .unwrap();
    assert_eq!(
        (model.config.max_batch_size, model.config.input.len()),
        (0, 0),
        "strict: nothing is completed"
    );
}

/// A backend like the SavedModel one: its model may fill the version
/// folder itself (TF Serving's layout), and what it declares depends on
/// the config (the signature its parameters name).
struct FillsVersionFolder;

impl Backend for FillsVersionFolder {
    fn name(&self) -> &'static str {
        "tensorflow"
    }
    fn platform(&self) -> &'static str {
        "tensorflow_savedmodel"
    }
    fn default_model_filename(&self) -> &'static str {
        "model.savedmodel"
    }
    fn model_path(&self, version_dir: &std::path::Path, file: &str) -> PathBuf {
        if version_dir.join("saved_model.pb").is_file() {
            version_dir.to_path_buf()
        } else {
            version_dir.join(file)
        }
    }
    fn inspect(&self, _: &std::path::Path) -> Result<ModelIo, nereid_core::BackendError> {
        panic!("inspect_for is what the repository calls")
    }
    fn inspect_for(
        &self,
        config: &nereid_core::model_config::ModelConfig,
        model_path: &std::path::Path,
    ) -> Result<ModelIo, nereid_core::BackendError> {
        assert!(
            model_path.join("saved_model.pb").is_file(),
            "{model_path:?}"
        );
        let output = match config.parameters.get("TF_SIGNATURE_DEF") {
            Some(p) => p.string_value.clone(),
            None => "y".to_owned(),
        };
        Ok(ModelIo {
            inputs: vec![spec("x", DataType::Fp32, &[-1, 4])],
            outputs: vec![spec(&output, DataType::Fp32, &[-1, 3])],
        })
    }
    fn load(
        &self,
        _: &nereid_core::ModelSource,
    ) -> Result<Box<dyn nereid_core::ModelInstance>, nereid_core::BackendError> {
        Err(nereid_core::BackendError::Unsupported("fake".into()))
    }
}

#[test]
fn a_backend_may_keep_its_model_in_the_version_folder_and_inspect_by_config() {
    let root = tempfile::tempdir().unwrap();
    write_tree(
        root.path(),
        &[
            ("served/1/saved_model.pb", ""),
            ("served/2/saved_model.pb", ""),
            ("served/2/variables/variables.index", ""),
            (
                "named/config.pbtxt",
                "parameters { key: \"TF_SIGNATURE_DEF\" value: { string_value: \"z\" } }",
            ),
            ("named/1/model.savedmodel/saved_model.pb", ""),
        ],
    );
    let mut all = backends();
    all.push(Arc::new(FillsVersionFolder));
    let repo = Repository::new(vec![root.path().into()], false);
    let served = repo.resolve(&entry(root.path(), "served"), &all).unwrap();
    assert_eq!(
        served.config.platform, "tensorflow_savedmodel",
        "chosen by what version 2 holds"
    );
    assert_eq!(
        served.versions,
        vec![ResolvedVersion {
            version: 2,
            model_path: root.path().join("served/2"),
        }]
    );
    assert_eq!(served.config.max_batch_size, 4);
    let named = repo.resolve(&entry(root.path(), "named"), &all).unwrap();
    assert_eq!(
        named.config.output[0].name, "z",
        "inspected with the config's parameters"
    );
    assert_eq!(
        named.versions[0].model_path,
        root.path().join("named/1/model.savedmodel")
    );
}
