//! Nereid's series for models that batch to a latency target
//! (`nereid.latency_target_ms`), per version: the requests shed
//! (`nereid_requests_shed_total`, also counted in Triton's
//! `nv_inference_request_failure{reason="REJECTED"}`), the batcher's last
//! choice and limit, and its learnt cost model. Versions without a target
//! have none of them.

use metrics::Recorder;
use metrics_exporter_prometheus::PrometheusBuilder;
use nereid_engine::stats::{TargetSnapshot, VersionActivity};

use super::METADATA;
use super::families::version_key;

const SHED: &str = "nereid_requests_shed_total";

type Read = fn(&TargetSnapshot) -> f64;

const GAUGES: [(&str, &str, Read); 7] = [
    (
        "nereid_batcher_wait_us",
        "How long the oldest request of the last batch waited in the queue, in microseconds",
        |t| t.wait_us,
    ),
    (
        "nereid_batcher_batch_size",
        "Inferences in the last batch the latency-target batcher sent",
        |t| t.batch_size as f64,
    ),
    (
        "nereid_batcher_batch_limit",
        "Largest batch whose predicted cost fits the latency budget now",
        |t| t.batch_limit as f64,
    ),
    (
        "nereid_batcher_budget_ratio",
        "Share of the latency target the batcher plans for, moved by observed misses",
        |t| t.budget_scale,
    ),
    (
        "nereid_batcher_cost_intercept_us",
        "Learnt fixed cost of a batch, in microseconds",
        |t| t.intercept_us,
    ),
    (
        "nereid_batcher_cost_per_inference_us",
        "Learnt cost of each inference in a batch, in microseconds",
        |t| t.per_inference_us,
    ),
    (
        "nereid_batcher_cost_spread_us",
        "Standard deviation of measured batch costs around the learnt line, in microseconds",
        |t| t.spread_us,
    ),
];

/// The series of every version with a latency target; empty when none
/// has one.
pub fn render(activity: &[VersionActivity]) -> String {
    let targeted: Vec<(&VersionActivity, TargetSnapshot)> = activity
        .iter()
        .filter_map(|a| a.latency_target.map(|t| (a, t)))
        .collect();
    if targeted.is_empty() {
        return String::new();
    }
    let recorder = PrometheusBuilder::new().build_recorder();
    recorder.describe_counter(
        SHED.into(),
        None,
        "Requests refused at once because the queue ahead could not serve them within the latency target"
            .into(),
    );
    for (a, t) in &targeted {
        recorder
            .register_counter(&version_key(SHED, &a.name, a.version), &METADATA)
            .absolute(t.shed);
    }
    for (name, help, read) in GAUGES {
        recorder.describe_gauge(name.into(), None, help.into());
        for (a, t) in &targeted {
            recorder
                .register_gauge(&version_key(name, &a.name, a.version), &METADATA)
                .set(read(t));
        }
    }
    recorder.handle().render()
}
