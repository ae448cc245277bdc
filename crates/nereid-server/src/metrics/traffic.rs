//! Traffic management's metrics (Nereid's own names): the version each
//! label names (`nereid_version_label`), requests a fallback model
//! answered (`nereid_fallback_requests_total`), shadow copies by outcome
//! (`nereid_shadow_requests_total`) and route log lines dropped
//! (`nereid_route_log_dropped_total`). Requests per version are in
//! Triton's per-version families already.

use metrics::{Key, Label, Recorder};
use metrics_exporter_prometheus::PrometheusBuilder;
use nereid_engine::traffic::TrafficMetrics;

use super::METADATA;

/// The series; empty when no model has traffic settings.
pub fn render(models: &[TrafficMetrics], route_log_dropped: Option<u64>) -> String {
    if models.is_empty() && route_log_dropped.is_none() {
        return String::new();
    }
    let recorder = PrometheusBuilder::new().build_recorder();
    let model_key = |name: &'static str, model: &str, extra: Option<(&'static str, &str)>| {
        let mut labels = vec![Label::new("model", model.to_string())];
        labels.extend(extra.map(|(k, v)| Label::new(k, v.to_string())));
        Key::from_parts(name, labels)
    };
    let labels = "nereid_version_label";
    recorder.describe_gauge(
        labels.into(),
        None,
        "The version a model's version label names".into(),
    );
    let fallback = "nereid_fallback_requests_total";
    recorder.describe_counter(
        fallback.into(),
        None,
        "Requests for the model that its fallback model answered while its queue was too long"
            .into(),
    );
    let shadow = "nereid_shadow_requests_total";
    recorder.describe_counter(
        shadow.into(),
        None,
        "Shadow copies of the model's requests, by outcome (match, mismatch, failed, dropped)"
            .into(),
    );
    for m in models {
        for (label, &version) in &m.labels {
            recorder
                .register_gauge(
                    &model_key(labels, &m.model, Some(("label", label))),
                    &METADATA,
                )
                .set(version as f64);
        }
        recorder
            .register_counter(&model_key(fallback, &m.model, None), &METADATA)
            .absolute(m.fallback);
        for (outcome, count) in [
            ("match", m.shadow.matched),
            ("mismatch", m.shadow.mismatched),
            ("failed", m.shadow.failed),
            ("dropped", m.shadow.dropped),
        ] {
            recorder
                .register_counter(
                    &model_key(shadow, &m.model, Some(("outcome", outcome))),
                    &METADATA,
                )
                .absolute(count);
        }
    }
    if let Some(dropped) = route_log_dropped {
        let name = "nereid_route_log_dropped_total";
        recorder.describe_counter(
            name.into(),
            None,
            "Route log lines dropped because the writer fell behind".into(),
        );
        recorder
            .register_counter(&Key::from_name(name), &METADATA)
            .absolute(dropped);
    }
    recorder.handle().render()
}
