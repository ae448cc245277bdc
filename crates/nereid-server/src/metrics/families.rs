//! The counters and gauges, set from the engine's statistics at scrape
//! time into a recorder made for that scrape, so that an unloaded model's
//! series disappear with it, as in Triton.

use metrics::{Key, Label, Recorder};
use metrics_exporter_prometheus::PrometheusBuilder;
use nereid_engine::VersionStatistics;
use nereid_engine::stats::{StatsSnapshot, VersionActivity};

use super::cpu::CpuReading;
use super::{METADATA, MetricsOptions};

/// One per-version counter: name, help, how to read it from a snapshot,
/// and whether it is a latency (`counter_latencies` switches those).
struct Counter {
    name: &'static str,
    help: &'static str,
    value: fn(&StatsSnapshot) -> u64,
    latency: bool,
}

const COUNTERS: &[Counter] = &[
    Counter {
        name: "nv_inference_request_success",
        help: "Number of successful inference requests, all batch sizes",
        value: |s| s.success.count,
        latency: false,
    },
    Counter {
        name: "nereid_inference_request_cancelled",
        help: "Number of requests dropped before they ran because their client went away",
        value: |s| s.cancelled,
        latency: false,
    },
    Counter {
        name: "nereid_sequence_reaped",
        help: "Number of sequences released for being idle longer than max_sequence_idle_microseconds",
        value: |s| s.sequences_reaped,
        latency: false,
    },
    Counter {
        name: "nv_inference_count",
        help: "Number of inferences performed (does not include cached requests)",
        value: |s| s.inference_count,
        latency: false,
    },
    Counter {
        name: "nv_inference_exec_count",
        help: "Number of model executions performed (does not include cached requests)",
        value: |s| s.execution_count,
        latency: false,
    },
    Counter {
        name: "nv_inference_request_duration_us",
        help: "Cumulative inference request duration in microseconds (includes cached requests)",
        value: |s| (s.success.ns + s.fail.ns) / 1000,
        latency: true,
    },
    Counter {
        name: "nv_inference_queue_duration_us",
        help: "Cumulative inference queuing duration in microseconds (includes cached requests)",
        value: |s| s.queue.ns / 1000,
        latency: true,
    },
    Counter {
        name: "nv_inference_compute_input_duration_us",
        help: "Cumulative compute input duration in microseconds (does not include cached requests)",
        value: |s| s.compute_input.ns / 1000,
        latency: true,
    },
    Counter {
        name: "nv_inference_compute_infer_duration_us",
        help: "Cumulative compute inference duration in microseconds (does not include cached requests)",
        value: |s| s.compute_infer.ns / 1000,
        latency: true,
    },
    Counter {
        name: "nv_inference_compute_output_duration_us",
        help: "Cumulative inference compute output duration in microseconds (does not include cached requests)",
        value: |s| s.compute_output.ns / 1000,
        latency: true,
    },
];

const PENDING: &str = "nv_inference_pending_request_count";
const FAILURE: &str = "nv_inference_request_failure";

/// The `model` and `version` labels Triton puts on per-version series.
pub fn version_key(name: &'static str, model: &str, version: i64) -> Key {
    let labels = vec![
        Label::new("model", model.to_string()),
        Label::new("version", version.to_string()),
    ];
    Key::from_parts(name, labels)
}

/// The text of every counter and gauge.
pub fn render(
    options: &MetricsOptions,
    stats: &[VersionStatistics],
    activity: &[VersionActivity],
    cpu: Option<CpuReading>,
) -> String {
    let recorder = PrometheusBuilder::new().build_recorder();
    let counters = COUNTERS
        .iter()
        .filter(|c| options.counter_latencies || !c.latency);
    for counter in counters {
        recorder.describe_counter(counter.name.into(), None, counter.help.into());
        for v in stats {
            let key = version_key(counter.name, &v.name, v.version);
            recorder
                .register_counter(&key, &METADATA)
                .absolute((counter.value)(&v.stats));
        }
    }
    failures(&recorder, activity);
    recorder.describe_gauge(
        PENDING.into(),
        None,
        "Instantaneous number of pending requests awaiting execution per-model.".into(),
    );
    for a in activity {
        let key = version_key(PENDING, &a.name, a.version);
        recorder
            .register_gauge(&key, &METADATA)
            .set(a.pending as f64);
    }
    if let Some(cpu) = cpu {
        cpu_gauges(&recorder, cpu);
    }
    recorder.handle().render()
}

/// `nv_inference_request_failure`, one series per Triton reason.
fn failures(recorder: &impl Recorder, activity: &[VersionActivity]) {
    recorder.describe_counter(
        FAILURE.into(),
        None,
        "Number of failed inference requests, all batch sizes".into(),
    );
    for a in activity {
        let f = a.failures;
        let reasons = [
            ("REJECTED", f.rejected),
            ("CANCELED", f.canceled),
            ("BACKEND", f.backend),
            ("OTHER", f.other),
        ];
        for (reason, count) in reasons {
            let labels = vec![
                Label::new("model", a.name.clone()),
                Label::new("version", a.version.to_string()),
                Label::new("reason", reason),
            ];
            recorder
                .register_counter(&Key::from_parts(FAILURE, labels), &METADATA)
                .absolute(count);
        }
    }
}

fn cpu_gauges(recorder: &impl Recorder, cpu: CpuReading) {
    let gauges = [
        (
            "nv_cpu_utilization",
            "CPU utilization rate [0.0 - 1.0]",
            cpu.utilization,
        ),
        (
            "nv_cpu_memory_total_bytes",
            "CPU total memory (RAM), in bytes",
            cpu.memory_total_bytes as f64,
        ),
        (
            "nv_cpu_memory_used_bytes",
            "CPU used memory (RAM), in bytes",
            cpu.memory_used_bytes as f64,
        ),
    ];
    for (name, help, value) in gauges {
        recorder.describe_gauge(name.into(), None, help.into());
        recorder
            .register_gauge(&Key::from_name(name), &METADATA)
            .set(value);
    }
}
