//! `--metrics-config histogram_latencies=true`: Prometheus histograms of
//! each successful request's latencies, in milliseconds, named in the
//! style of Triton's `nv_inference_first_response_histogram_ms`. Each
//! family `X` has `X_bucket{le=...}`, `X_sum` and `X_count` series, so
//! that a p99 over replicas is `histogram_quantile(0.99, sum by (le)
//! (rate(X_bucket[1m])))`; the names keep clear of Triton's
//! `*_duration_us` counters and `*_summary_us` summaries beside them.

use std::fmt::Write as _;
use std::time::Duration;

use nereid_engine::VersionStatistics;
use nereid_engine::stats::{HistogramSnapshot, LatencyHistogramsSnapshot};

/// Bucket bounds in milliseconds when `histogram_buckets` names none:
/// steps of at most 1.5x from 2 ms to 1 s, where most requests fall, so
/// that `histogram_quantile`'s interpolation inside a bucket stays close.
pub const BUCKETS_MS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 50.0, 75.0, 100.0, 150.0,
    200.0, 300.0, 500.0, 750.0, 1000.0, 2500.0, 5000.0, 10000.0,
];

/// One family: name, help, and which histogram of a version it shows.
struct Family {
    name: &'static str,
    help: &'static str,
    read: fn(&LatencyHistogramsSnapshot) -> &HistogramSnapshot,
}

/// Help texts after those of Triton's summaries.
const FAMILIES: &[Family] = &[
    Family {
        name: "nv_inference_request_histogram_ms",
        help: "Histogram of inference request duration in milliseconds (includes cached requests)",
        read: |h| &h.request,
    },
    Family {
        name: "nv_inference_queue_histogram_ms",
        help: "Histogram of inference queuing duration in milliseconds (includes cached requests)",
        read: |h| &h.queue,
    },
    Family {
        name: "nv_inference_compute_input_histogram_ms",
        help: "Histogram of compute input duration in milliseconds (does not include cached requests)",
        read: |h| &h.compute_input,
    },
    Family {
        name: "nv_inference_compute_infer_histogram_ms",
        help: "Histogram of compute inference duration in milliseconds (does not include cached requests)",
        read: |h| &h.compute_infer,
    },
    Family {
        name: "nv_inference_compute_output_histogram_ms",
        help: "Histogram of compute output duration in milliseconds (does not include cached requests)",
        read: |h| &h.compute_output,
    },
];

/// The families' text, for the versions that counted a request while
/// histograms were on; empty when none did.
pub fn render(stats: &[VersionStatistics]) -> String {
    let counted: Vec<(&VersionStatistics, &LatencyHistogramsSnapshot)> = stats
        .iter()
        .filter_map(|v| v.stats.latency_histograms.as_ref().map(|h| (v, h)))
        .collect();
    let mut text = String::new();
    if counted.is_empty() {
        return text;
    }
    for family in FAMILIES {
        let name = family.name;
        let _ = writeln!(text, "# HELP {name} {}", family.help);
        let _ = writeln!(text, "# TYPE {name} histogram");
        for (version, histograms) in &counted {
            let labels = format!(
                "model=\"{}\",version=\"{}\"",
                escape(&version.name),
                version.version
            );
            series(&mut text, name, &labels, (family.read)(histograms));
        }
    }
    text
}

fn series(text: &mut String, name: &str, labels: &str, histogram: &HistogramSnapshot) {
    let bounds = histogram
        .bounds
        .iter()
        .map(|&b| milliseconds(b).to_string());
    let les = bounds.chain(std::iter::once("+Inf".to_string()));
    for (le, count) in les.zip(&histogram.cumulative) {
        let _ = writeln!(text, "{name}_bucket{{{labels},le=\"{le}\"}} {count}");
    }
    let sum = histogram.sum_ns as f64 / 1e6;
    let _ = writeln!(text, "{name}_sum{{{labels}}} {sum}");
    let _ = writeln!(text, "{name}_count{{{labels}}} {}", histogram.count());
}

fn milliseconds(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e6
}

/// A label value as the text format wants it.
fn escape(value: &str) -> String {
    value
        .replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', r"\n")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use nereid_engine::stats::{ComputeTimes, LatencyHistograms, StatsSnapshot};

    use super::*;

    fn version(name: &str, histograms: Option<&LatencyHistograms>) -> VersionStatistics {
        VersionStatistics {
            name: name.into(),
            version: 3,
            stats: StatsSnapshot {
                latency_histograms: histograms.map(LatencyHistograms::snapshot),
                ..StatsSnapshot::default()
            },
        }
    }

    #[test]
    fn each_family_has_buckets_sum_and_count() {
        let bounds: Arc<[Duration]> =
            Arc::from([Duration::from_micros(100), Duration::from_millis(5)].as_slice());
        let histograms = LatencyHistograms::new(&bounds);
        let compute = ComputeTimes {
            infer: Duration::from_millis(2),
            ..ComputeTimes::default()
        };
        histograms.record_success(Duration::from_millis(3), Duration::ZERO, compute);
        histograms.record_success(Duration::from_millis(7), Duration::ZERO, compute);
        let text = render(&[version("a\"b", Some(&histograms)), version("idle", None)]);
        let request = "nv_inference_request_histogram_ms";
        let labels = r#"model="a\"b",version="3""#;
        for line in [
            format!("# TYPE {request} histogram"),
            format!("{request}_bucket{{{labels},le=\"0.1\"}} 0"),
            format!("{request}_bucket{{{labels},le=\"5\"}} 1"),
            format!("{request}_bucket{{{labels},le=\"+Inf\"}} 2"),
            format!("{request}_sum{{{labels}}} 10"),
            format!("{request}_count{{{labels}}} 2"),
            format!("nv_inference_queue_histogram_ms_bucket{{{labels},le=\"0.1\"}} 2"),
            format!("nv_inference_compute_infer_histogram_ms_sum{{{labels}}} 4"),
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
        assert!(!text.contains("idle"));
        assert_eq!(text.matches("# TYPE").count(), FAMILIES.len());
    }

    #[test]
    fn nothing_until_a_version_counted() {
        assert_eq!(render(&[version("m", None)]), "");
    }
}
