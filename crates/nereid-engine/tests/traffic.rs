//! Traffic management end to end with the fake backend (version v adds
//! 10·v, so an answer tells which version gave it): labels from
//! `traffic.json`, weighted and sticky splits, label moves and rollbacks
//! that reload nothing, versions labels keep loaded, shadows and
//! fallbacks.

#![expect(clippy::unwrap_used, reason = "test code")]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{
    CONFIG, Controls, InferOne, eventually, first_output, request, write_model, write_version,
};
use nereid_core::{InferRequest, ModelVersion, Parameter};
use nereid_engine::traffic::{RouteObserver, RouteRecord, RoutedBy, ShadowOutcome, ShadowRecord};
use nereid_engine::{ControlMode, Engine, LoadRequest};
use parking_lot::Mutex;

const WAIT: Duration = Duration::from_secs(60);
const ALL_VERSIONS: &str = "version_policy: { all: {} }";

fn engine(root: &Path, mode: ControlMode) -> (Engine, Controls) {
    common::engine(root, mode, &["*"])
}

/// `m` with versions 1..=n (version v adds 10·v) and `config` appended.
fn model(root: &Path, name: &str, n: i64, config: &str, traffic: Option<&str>) {
    write_model(root, name, &format!("{CONFIG}\n{config}"), "offset 10");
    for v in 2..=n {
        write_version(root, name, v, &format!("offset {}", 10 * v));
    }
    if let Some(traffic) = traffic {
        std::fs::write(root.join(name).join("traffic.json"), traffic).unwrap();
    }
}

/// The version that answered, from the answer (1 + 10·v).
async fn served(engine: &Engine, request: InferRequest) -> i64 {
    let response = engine.infer_one(request).await.unwrap();
    let version = i64::from(first_output(&response) - 1) / 10;
    assert_eq!(version, response.model_version);
    version
}

fn keyed(model: &str, key: &str) -> InferRequest {
    let mut r = request(model, &[1, 2]);
    r.routing.routing_key = Some(key.into());
    r
}

/// The version `label` of model `m` names now.
fn label(engine: &Engine, label: &str) -> Option<i64> {
    engine
        .version_number("m", &ModelVersion::Label(label.into()))
        .ok()
        .flatten()
}

#[derive(Default)]
struct Records {
    routes: Mutex<Vec<RouteRecord>>,
    shadows: Mutex<Vec<ShadowRecord>>,
}

impl RouteObserver for Records {
    fn routed(&self, record: RouteRecord) {
        self.routes.lock().push(record);
    }
    fn shadowed(&self, record: ShadowRecord) {
        self.shadows.lock().push(record);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_name_versions_and_keep_them_loaded() {
    let root = tempfile::tempdir().unwrap();
    // The policy alone would load version 3 only.
    model(
        root.path(),
        "m",
        3,
        "",
        Some(r#"{"labels": {"stable": 1, "canary": 2}}"#),
    );
    let (engine, _controls) = engine(root.path(), ControlMode::None);
    assert!(engine.load_all().unwrap().is_empty());
    assert_eq!(label(&engine, "stable").unwrap(), 1);
    assert!(label(&engine, "beta").is_none());
    for v in [1, 2, 3] {
        assert!(engine.model_ready("m", Some(v)), "version {v}");
    }
    let mut r = request("m", &[1, 2]);
    r.routing.version = ModelVersion::Label("canary".into());
    assert_eq!(served(&engine, r).await, 2);
    let mut r = request("m", &[1, 2]);
    r.routing.version = ModelVersion::Label("beta".into());
    let refused = engine.infer_one(r).await.unwrap_err();
    assert_eq!(
        refused.message(),
        "Request for unknown model: 'm' has no version label 'beta'"
    );
    // No split: the policy's version.
    assert_eq!(served(&engine, request("m", &[1, 2])).await, 3);
    let metadata = engine.model_metadata("m", None).unwrap();
    assert_eq!(
        metadata.labels,
        BTreeMap::from([("canary".into(), 2), ("stable".into(), 1)])
    );
    let labelled: Vec<_> = engine
        .index()
        .into_iter()
        .filter(|r| r.name == "m")
        .map(|r| (r.version, r.labels))
        .collect();
    assert_eq!(
        labelled,
        [
            (Some(1), vec!["stable".to_string()]),
            (Some(2), vec!["canary".to_string()]),
            (Some(3), vec![])
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_follows_its_weights_and_keys_stick() {
    let root = tempfile::tempdir().unwrap();
    model(
        root.path(),
        "m",
        2,
        ALL_VERSIONS,
        Some(r#"{"labels": {"stable": 1, "canary": 2}, "split": {"stable": 90, "canary": 10}}"#),
    );
    let (engine, _controls) = engine(root.path(), ControlMode::None);
    engine.load_all().unwrap();
    let records = Arc::new(Records::default());
    engine.set_route_observer(records.clone());
    let n = 10_000;
    let mut canary = 0;
    for _ in 0..n {
        if served(&engine, request("m", &[1, 2])).await == 2 {
            canary += 1;
        }
    }
    // Chi-square with one degree of freedom, under its 99.9999th percentile
    // (at the 99.9th a fair split failed one CI run: 894 of 10,000).
    let expected = [0.9 * n as f64, 0.1 * n as f64];
    let seen = [(n - canary) as f64, canary as f64];
    let chi2: f64 = seen
        .iter()
        .zip(expected)
        .map(|(s, e)| (s - e).powi(2) / e)
        .sum();
    assert!(chi2 < 23.93, "{canary} of {n} went to the canary");
    for user in 0..50 {
        let key = format!("user-{user}");
        let first = served(&engine, keyed("m", &key)).await;
        for _ in 0..5 {
            assert_eq!(served(&engine, keyed("m", &key)).await, first, "{key}");
        }
    }
    // A request that names its version is not split.
    let mut r = request("m", &[1, 2]);
    r.routing.version = ModelVersion::Number(2);
    assert_eq!(served(&engine, r).await, 2);
    let routes = records.routes.lock();
    assert_eq!(routes.len(), n + 50 * 6 + 1);
    let last = routes.last().unwrap();
    assert_eq!(
        (last.routed_by, last.label.as_deref()),
        (RoutedBy::Request, Some("canary"))
    );
    assert!(
        routes
            .iter()
            .any(|r| r.routed_by == RoutedBy::Key && r.key.is_some())
    );
    assert!(routes.iter().any(|r| r.routed_by == RoutedBy::Weight));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_move_and_roll_back_without_a_reload() {
    let root = tempfile::tempdir().unwrap();
    model(
        root.path(),
        "m",
        2,
        "",
        Some(r#"{"labels": {"stable": 1}, "split": {"stable": 1}}"#),
    );
    let (engine, controls) = engine(root.path(), ControlMode::None);
    engine.load_all().unwrap();
    let live = controls.live.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(served(&engine, request("m", &[1, 2])).await, 1);
    let view = engine
        .update_traffic("m", r#"{"labels": {"stable": 2}}"#)
        .await
        .unwrap();
    assert_eq!(view.state.previous["stable"], 1);
    assert_eq!(served(&engine, request("m", &[1, 2])).await, 2);
    let view = engine.rollback_label("m", "stable").await.unwrap();
    assert_eq!(view.state.spec.labels["stable"], 1);
    assert_eq!(view.state.previous["stable"], 2);
    assert_eq!(served(&engine, request("m", &[1, 2])).await, 1);
    assert_eq!(
        controls.live.load(std::sync::atomic::Ordering::SeqCst),
        live,
        "no instance was loaded or dropped"
    );
    // A label may name only a loaded version.
    let err = engine
        .update_traffic("m", r#"{"labels": {"stable": 7}}"#)
        .await
        .unwrap_err();
    assert!(err.message().contains("not loaded"), "{err}");
    assert!(engine.rollback_label("m", "canary").await.is_err());
    assert_eq!(label(&engine, "stable").unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_loads_carry_traffic_settings() {
    let root = tempfile::tempdir().unwrap();
    model(root.path(), "m", 2, ALL_VERSIONS, None);
    let (engine, controls) = engine(root.path(), ControlMode::Explicit);
    engine.load_all().unwrap();
    let live = controls.live.load(std::sync::atomic::Ordering::SeqCst);
    let load = |traffic: &str| LoadRequest {
        traffic: Some(traffic.into()),
        ..LoadRequest::default()
    };
    engine
        .load_model("m", load(r#"{"labels": {"stable": 2}}"#))
        .await
        .unwrap();
    assert_eq!(label(&engine, "stable").unwrap(), 2);
    assert_eq!(
        controls.live.load(std::sync::atomic::Ordering::SeqCst),
        live,
        "settings alone reload nothing"
    );
    let err = engine
        .load_model("m", load(r#"{"labels": {"stable": 9}}"#))
        .await
        .unwrap_err();
    assert!(err.message().contains("not loaded"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_traffic_file_applies_without_a_reload_in_poll_mode() {
    let root = tempfile::tempdir().unwrap();
    model(
        root.path(),
        "m",
        2,
        ALL_VERSIONS,
        Some(r#"{"labels": {"stable": 1}}"#),
    );
    let (engine, controls) = engine(root.path(), ControlMode::Poll);
    engine.load_all().unwrap();
    let live = controls.live.load(std::sync::atomic::Ordering::SeqCst);
    std::fs::write(
        root.path().join("m/traffic.json"),
        r#"{"labels": {"stable": 2, "old": 1}}"#,
    )
    .unwrap();
    assert!(eventually(WAIT, || label(&engine, "stable") == Some(2)).await);
    assert_eq!(label(&engine, "old").unwrap(), 1);
    assert_eq!(
        controls.live.load(std::sync::atomic::Ordering::SeqCst),
        live
    );
    // A bad file is refused; the settings in force stay.
    std::fs::write(
        root.path().join("m/traffic.json"),
        r#"{"labels": {"stable": 5}}"#,
    )
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(label(&engine, "stable").unwrap(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadows_are_compared_and_never_delay_answers() {
    let root = tempfile::tempdir().unwrap();
    model(
        root.path(),
        "m",
        2,
        ALL_VERSIONS,
        Some(
            r#"{"labels": {"stable": 1}, "split": {"stable": 1}, "shadow": {"version": "2", "fraction": 1.0, "queue": 4}}"#,
        ),
    );
    // Version 2 adds 20 where version 1 adds 10: every shadow mismatches.
    let (engine, _controls) = engine(root.path(), ControlMode::None);
    engine.load_all().unwrap();
    let records = Arc::new(Records::default());
    engine.set_route_observer(records.clone());
    for _ in 0..20 {
        assert_eq!(served(&engine, request("m", &[1, 2])).await, 1);
    }
    // Copies past the queue's 4 may be dropped; each is accounted for.
    let accounted = || {
        let counts = engine.traffic_metrics()[0].shadow;
        records.shadows.lock().len() as u64 + counts.dropped == 20
    };
    assert!(eventually(WAIT, accounted).await);
    let shadows = records.shadows.lock();
    assert!(!shadows.is_empty());
    assert!(shadows.iter().all(|s| {
        (s.primary_version, s.shadow_version) == (1, 2)
            && matches!(&s.outcome, ShadowOutcome::Mismatch { output, .. } if output == "OUTPUT0")
    }));
    let metrics = engine.traffic_metrics();
    assert_eq!(metrics[0].shadow.mismatched, shadows.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_shadow_drops_copies_and_answers_go_on() {
    let root = tempfile::tempdir().unwrap();
    write_model(
        root.path(),
        "m",
        &format!("{CONFIG}\n{ALL_VERSIONS}"),
        "offset 10",
    );
    // The shadow version blocks until released.
    write_version(root.path(), "m", 2, "offset 20 gate");
    std::fs::write(
        root.path().join("m/traffic.json"),
        r#"{"split": {"1": 1}, "shadow": {"version": "2", "fraction": 1.0, "queue": 2}}"#,
    )
    .unwrap();
    let (engine, controls) = engine(root.path(), ControlMode::None);
    engine.load_all().unwrap();
    for _ in 0..10 {
        let answer = tokio::time::timeout(WAIT, served(&engine, request("m", &[1, 2])));
        assert_eq!(answer.await.unwrap(), 1);
    }
    // One runs (blocked), two wait, the rest were dropped.
    let dropped = || engine.traffic_metrics()[0].shadow.dropped >= 7;
    assert!(
        eventually(WAIT, dropped).await,
        "{:?}",
        engine.traffic_metrics()[0].shadow
    );
    for _ in 0..10 {
        let _ = controls.release.send(());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_queue_sends_requests_to_the_fallback() {
    let root = tempfile::tempdir().unwrap();
    // `m` blocks until released, so requests queue; `small` answers.
    let one_at_a_time =
        format!("{CONFIG}\ndynamic_batching {{ max_queue_delay_microseconds: 0 }}\n")
            .replace("max_batch_size: 4", "max_batch_size: 1");
    write_model(root.path(), "m", &one_at_a_time, "offset 10 gate");
    write_model(root.path(), "small", CONFIG, "offset 500");
    std::fs::write(
        root.path().join("m/traffic.json"),
        r#"{"fallback": {"model": "small", "queue_ms": 20}}"#,
    )
    .unwrap();
    let (engine, controls) = engine(root.path(), ControlMode::None);
    engine.load_all().unwrap();
    // Build a queue: each request waits ~100 ms behind the gate.
    let mut waiting = Vec::new();
    for _ in 0..6 {
        let engine = engine.clone();
        waiting.push(tokio::spawn(async move {
            engine.infer_one(request("m", &[1, 2])).await
        }));
    }
    for _ in 0..3 {
        controls.started.recv_timeout(WAIT).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        controls.release.send(()).unwrap();
    }
    // The first look only takes a baseline.
    let _ = engine.infer_one(request("small", &[1, 2])).await;
    let mut fell_back = None;
    for _ in 0..40 {
        let mut r = request("m", &[1, 2]);
        r.id = "probe".into();
        let engine2 = engine.clone();
        let answer = tokio::time::timeout(Duration::from_millis(300), async move {
            engine2.infer_one(r).await
        })
        .await;
        if let Ok(Ok(response)) = answer
            && response.parameters.get("fallback_from") == Some(&Parameter::String("m".into()))
        {
            fell_back = Some(response);
            break;
        }
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    for _ in 0..50 {
        let _ = controls.release.send(());
    }
    let response = fell_back.expect("no request went to the fallback");
    assert_eq!(response.model_name, "small");
    assert_eq!(first_output(&response), 501);
    assert!(engine.traffic_metrics()[0].fallback >= 1);
    for w in waiting {
        w.await.unwrap().unwrap();
    }
}
