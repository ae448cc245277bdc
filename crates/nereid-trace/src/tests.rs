use std::path::Path;

use nereid_core::Activity;
use nereid_core::trace::TraceLevel;

use super::settings::Update;
use super::*;

const TIMESTAMPS: TraceLevel = TraceLevel {
    timestamps: true,
    tensors: false,
};

fn tracer(file: &Path, values: Values) -> Tracer {
    Tracer::new(TraceOptions {
        values,
        file: file.display().to_string(),
        ..TraceOptions::default()
    })
    .unwrap()
}

fn shown(tracer: &Tracer, model: Option<&str>, key: &str) -> Shown {
    tracer
        .settings(model)
        .into_iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
        .unwrap()
}

/// Traces one request to `model` if it is sampled; whether it was.
fn request(tracer: &Tracer, model: &str) -> bool {
    let Some(trace) = tracer.sample(model, None) else {
        return false;
    };
    trace.set_model(model, 1, "");
    trace.record(Activity::RequestStart);
    trace.record(Activity::RequestEnd);
    true
}

fn read_array(path: &Path) -> Vec<serde_json::Value> {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn every_rate_th_request_is_traced_while_the_count_lasts() {
    let dir = tempfile::tempdir().unwrap();
    let tracer = tracer(
        &dir.path().join("t.json"),
        Values {
            level: TIMESTAMPS,
            rate: 2,
            count: 2,
            log_frequency: 0,
        },
    );
    let traced: Vec<bool> = (0..6).map(|_| request(&tracer, "m")).collect();
    assert_eq!(traced, [false, true, false, true, false, false]);
    assert_eq!(shown(&tracer, None, "trace_count"), Shown::One("0".into()));
    // The count ran out with every trace finished: they were written at once.
    let objects = read_array(&dir.path().join("t.json.0"));
    assert_eq!(objects.len(), 6, "{objects:?}");
}

#[test]
fn traces_go_out_log_frequency_at_a_time_and_the_rest_at_close() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    let tracer = tracer(
        &path,
        Values {
            level: TIMESTAMPS,
            rate: 1,
            count: -1,
            log_frequency: 2,
        },
    );
    for _ in 0..3 {
        assert!(request(&tracer, "m"));
    }
    assert_eq!(read_array(&dir.path().join("t.json.0")).len(), 6);
    assert!(!dir.path().join("t.json.1").exists());
    tracer.close();
    assert_eq!(read_array(&dir.path().join("t.json.1")).len(), 3);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    let tracer = self::tracer(
        &path,
        Values {
            level: TIMESTAMPS,
            rate: 1,
            ..Values::default()
        },
    );
    assert!(request(&tracer, "m"));
    assert!(request(&tracer, "m"));
    tracer.close();
    assert_eq!(read_array(&path).len(), 6);
}

#[test]
fn a_model_setting_overrides_and_null_goes_back_to_the_global_one() {
    let dir = tempfile::tempdir().unwrap();
    let tracer = tracer(&dir.path().join("t.json"), Values::default());
    assert!(!request(&tracer, "m"));
    let on = Update {
        level: Some(Some(TIMESTAMPS)),
        rate: Some(Some(1)),
        ..Update::default()
    };
    tracer.update(Some("m"), &on).unwrap();
    assert!(request(&tracer, "m"));
    assert!(!request(&tracer, "other"));
    assert_eq!(
        shown(&tracer, None, "trace_level"),
        Shown::List(vec!["OFF".into()])
    );
    // A global change reaches what the model does not name itself.
    let count = Update {
        count: Some(Some(5)),
        ..Update::default()
    };
    tracer.update(None, &count).unwrap();
    assert_eq!(
        shown(&tracer, Some("m"), "trace_count"),
        Shown::One("5".into())
    );
    assert_eq!(
        shown(&tracer, Some("m"), "trace_rate"),
        Shown::One("1".into())
    );
    let clear = Update {
        level: Some(None),
        rate: Some(None),
        ..Update::default()
    };
    tracer.update(Some("m"), &clear).unwrap();
    assert!(!request(&tracer, "m"));
    assert_eq!(
        shown(&tracer, Some("m"), "trace_rate"),
        Shown::One("1000".into())
    );
}

#[test]
fn a_setting_that_cannot_trace_is_refused_unless_it_is_off() {
    let tracer = Tracer::new(TraceOptions::default()).unwrap();
    let on = Update {
        level: Some(Some(TIMESTAMPS)),
        ..Update::default()
    };
    let err = tracer.update(None, &on).unwrap_err();
    assert_eq!(
        err.message(),
        "Attempting to set invalid trace setting :trace file name is not given"
    );
    let rate_zero = Update {
        rate: Some(Some(0)),
        ..Update::default()
    };
    tracer.update(None, &rate_zero).unwrap();
    assert_eq!(shown(&tracer, None, "trace_rate"), Shown::One("0".into()));
    assert!(!request(&tracer, "m"));
}
