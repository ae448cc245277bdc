//! Every ensemble case of Triton's `qa/L0_model_config`: the ensembles real
//! Triton refuses are refused with its message, and those it loads pass.
//!
//! How Triton's test script (qa/L0_model_config/test.sh) sets the cases up,
//! and how it is modelled here:
//! - `autofill_noplatform/ensemble/<case>` and its `_success` twin: the case
//!   folder is a whole model repository (or one model, when it holds a
//!   `config.pbtxt` itself). The script creates a version folder `1` in
//!   every model of these cases and no other, so each composing model has
//!   version 1 on disk and its version policy chooses among {1}. Composing
//!   models are the other configs as written; a composing ensemble counts
//!   as loaded when its config is.
//! - A refused case passes when Triton's server log would match: every
//!   ensemble we refuse is refused with the text of one of the case's
//!   `expected*` files, and at least one is refused.
//! - `noautofill_platform/<case>`: the script deletes every `platform:`
//!   line and appends `platform: "<trial>"`; `expected_ensemble` is the
//!   message for the trial `ensemble`. Nothing touches `backend` (no case
//!   sets one).

#![expect(clippy::unwrap_used, reason = "test: a panic is a test failure")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nereid_core::model_config::model_version_policy::PolicyChoice;
use nereid_core::model_config::{ModelConfig, model_config::SchedulingChoice};
use nereid_ensemble::{
    Composing, EnsembleError, check_available, check_config, compose, find_cycle,
};
use nereid_repository::parse_config_text;

/// Relative to this crate, so the test needs no environment variable.
const QA_DIR: &str = "../../tests/corpus/triton-configs/qa/L0_model_config";

/// The version folders Triton's test script creates in every model.
const VERSIONS_ON_DISK: &[i64] = &[1];

fn qa_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(QA_DIR);
    assert!(
        dir.is_dir(),
        "the Triton config corpus is missing at {}",
        dir.display()
    );
    dir
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

fn name_of(path: &Path) -> String {
    path.file_name().unwrap().to_str().unwrap().to_owned()
}

fn parse(path: &Path) -> ModelConfig {
    let text = std::fs::read_to_string(path).unwrap();
    parse_config_text(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Triton's `expected` files are grep patterns; only these escapes occur.
fn expected_text(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .replace("\\[", "[")
        .replace("\\]", "]")
        .replace("\\.", ".")
}

/// Every `expected*` file directly in `dir`.
fn expectations(dir: &Path) -> Vec<String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && name_of(p).starts_with("expected"))
        .collect();
    files.sort();
    files.iter().map(|p| expected_text(p)).collect()
}

/// The models of a case folder, by folder name.
fn models_of(case: &Path) -> BTreeMap<String, ModelConfig> {
    if case.join("config.pbtxt").is_file() {
        return BTreeMap::from([(name_of(case), parse(&case.join("config.pbtxt")))]);
    }
    subdirs(case)
        .into_iter()
        .filter(|dir| dir.join("config.pbtxt").is_file())
        .map(|dir| (name_of(&dir), parse(&dir.join("config.pbtxt"))))
        .collect()
}

fn is_ensemble(config: &ModelConfig) -> bool {
    config.platform == nereid_ensemble::ENSEMBLE_PLATFORM
}

/// The versions of `config` that load from [`VERSIONS_ON_DISK`].
fn loaded_versions(config: &ModelConfig) -> Vec<i64> {
    let mut on_disk = VERSIONS_ON_DISK.to_vec();
    on_disk.sort_unstable_by(|a, b| b.cmp(a));
    let policy = config
        .version_policy
        .as_ref()
        .and_then(|p| p.policy_choice.as_ref());
    match policy {
        Some(PolicyChoice::All(_)) => on_disk,
        Some(PolicyChoice::Specific(s)) => on_disk
            .into_iter()
            .filter(|v| s.versions.contains(v))
            .collect(),
        Some(PolicyChoice::Latest(l)) => {
            on_disk.into_iter().take(l.num_versions as usize).collect()
        }
        None => on_disk.into_iter().take(1).collect(),
    }
}

/// What the engine would know of `name` at `version` in this case.
fn composing(models: &BTreeMap<String, ModelConfig>, name: &str, version: i64) -> Composing {
    let Some(config) = models.get(name) else {
        return Composing::Missing;
    };
    let versions = loaded_versions(config);
    let loaded = if version == -1 {
        !versions.is_empty()
    } else {
        versions.contains(&version)
    };
    if loaded {
        Composing::Loaded(Arc::new(config.clone()))
    } else {
        Composing::VersionNotLoaded
    }
}

fn steps_of(models: &BTreeMap<String, ModelConfig>, name: &str) -> Option<Vec<String>> {
    match &models.get(name)?.scheduling_choice {
        Some(SchedulingChoice::EnsembleScheduling(e)) => {
            Some(e.step.iter().map(|s| s.model_name.clone()).collect())
        }
        _ => None,
    }
}

/// All of Triton's checks of ensemble `name`, in Triton's order. Returns
/// whether it is decoupled.
fn evaluate(models: &BTreeMap<String, ModelConfig>, name: &str) -> Result<bool, EnsembleError> {
    let config = &models[name];
    check_config(config)?;
    check_available(config, &|m| models.contains_key(m))?;
    if let Some(err) = find_cycle(name, &|m| steps_of(models, m)) {
        return Err(err);
    }
    compose(config, &|m, v| composing(models, m, v)).map(|c| c.decoupled)
}

/// Checks a refused case; `None` when it behaves as Triton's log shows.
fn refused_case(case: &Path) -> Option<String> {
    let models = models_of(case);
    let expected = expectations(case);
    assert!(!expected.is_empty(), "{}: no expected file", case.display());
    let mut refusals = 0;
    for name in models.keys().filter(|n| is_ensemble(&models[*n])) {
        if let Err(err) = evaluate(&models, name) {
            refusals += 1;
            let text = err.to_string();
            if !expected.iter().any(|e| text.contains(e)) {
                return Some(format!(
                    "{name}:\n  ours:   {text}\n  Triton: {}",
                    expected.join("\n       or ")
                ));
            }
        }
    }
    (refusals == 0).then(|| format!("accepted, Triton says: {}", expected.join(" or ")))
}

/// Checks an accepted case: every ensemble passes, decoupled exactly when
/// the config Triton rendered (`<ensemble>/expected`) says so.
fn accepted_case(case: &Path) -> Option<String> {
    let models = models_of(case);
    if !models.values().any(is_ensemble) {
        return Some("no ensemble in the case".to_owned());
    }
    let mut failures = Vec::new();
    for name in models.keys().filter(|n| is_ensemble(&models[*n])) {
        let rendered = case.join(name).join("expected");
        let decoupled = rendered.is_file().then(|| {
            let config = parse(&rendered);
            config.model_transaction_policy.is_some_and(|p| p.decoupled)
        });
        match (evaluate(&models, name), decoupled) {
            (Err(err), _) => failures.push(format!("{name}: refused: {err}")),
            (Ok(ours), Some(triton)) if ours != triton => {
                failures.push(format!("{name}: decoupled {ours}, Triton renders {triton}"));
            }
            (Ok(_), _) => {}
        }
    }
    (!failures.is_empty()).then(|| failures.join("\n"))
}

/// Runs `check` on every case folder under `dir`; returns how many ran.
fn run_all(dir: &Path, check: fn(&Path) -> Option<String>, failures: &mut Vec<String>) -> usize {
    let cases = subdirs(dir);
    for case in &cases {
        if let Some(why) = check(case) {
            failures.push(format!(
                "{}: {why}",
                case.strip_prefix(qa_dir()).unwrap().display()
            ));
        }
    }
    cases.len()
}

#[test]
fn every_ensemble_case_behaves_as_triton() {
    let qa = qa_dir();
    let mut failures = Vec::new();
    let refused = run_all(
        &qa.join("autofill_noplatform/ensemble"),
        refused_case,
        &mut failures,
    );
    let accepted = run_all(
        &qa.join("autofill_noplatform_success/ensemble"),
        accepted_case,
        &mut failures,
    );
    let platform = noautofill_platform_cases(&qa.join("noautofill_platform"), &mut failures);
    // Every folder is a case: a case that could not be read panics above.
    assert!(
        refused >= 30 && accepted >= 4 && platform >= 40,
        "{refused} {accepted} {platform}"
    );
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from Triton:\n{}",
        failures.len(),
        refused + accepted + platform,
        failures.join("\n")
    );
}

/// The `noautofill_platform` cases with an `expected_ensemble` (all but
/// `ensemble_scheduling_set`, which is checked below with its `expected`
/// and a platform that is not `ensemble`).
fn noautofill_platform_cases(dir: &Path, failures: &mut Vec<String>) -> usize {
    let cases = subdirs(dir);
    let mut checked = 0;
    for case in &cases {
        let name = name_of(case);
        let mut config = parse(&case.join("config.pbtxt"));
        let (platform, expected) = if case.join("expected_ensemble").is_file() {
            ("ensemble", expected_text(&case.join("expected_ensemble")))
        } else if name == "ensemble_scheduling_set" {
            ("onnxruntime_onnx", expected_text(&case.join("expected")))
        } else {
            continue;
        };
        config.platform = platform.to_owned();
        checked += 1;
        match check_config(&config) {
            Err(err) if err.to_string().contains(&expected) => {}
            other => failures.push(format!(
                "noautofill_platform/{name}: {other:?}, Triton: {expected}"
            )),
        }
    }
    let with_ensemble_expectation = cases
        .iter()
        .filter(|c| c.join("expected_ensemble").is_file())
        .count();
    assert_eq!(
        checked,
        with_ensemble_expectation + 1,
        "noautofill_platform cases skipped"
    );
    checked
}
