//! `--metrics-config summary_latencies=true`: Prometheus summaries of each
//! successful request's latencies, in microseconds, over a sliding
//! window, kept in one recorder for the server's life.

use std::num::NonZeroU32;
use std::time::Duration;

use metrics::Recorder;
use metrics_exporter_prometheus::{BuildError, PrometheusBuilder, PrometheusRecorder};
use nereid_engine::stats::{LatencySample, VersionActivity};

use super::METADATA;
use super::families::version_key;

/// Triton's quantiles.
pub const QUANTILES: &[f64] = &[0.5, 0.9, 0.95, 0.99, 0.999];

/// The window a summary's quantiles cover (prometheus-cpp's default,
/// which Triton keeps), rolled in `AGE_BUCKETS` steps.
const MAX_AGE: Duration = Duration::from_secs(60);
const AGE_BUCKETS: u32 = 5;

/// One summary: name, help, and which latency of a sample it shows.
struct Summary {
    name: &'static str,
    help: &'static str,
    value: fn(&LatencySample) -> Duration,
}

/// Names and help texts as Triton 2.51 writes them (its compute ones say
/// "Cumulative" too).
const SUMMARIES: &[Summary] = &[
    Summary {
        name: "nv_inference_request_summary_us",
        help: "Summary of inference request duration in microseconds (includes cached requests)",
        value: |s| s.request,
    },
    Summary {
        name: "nv_inference_queue_summary_us",
        help: "Summary of inference queuing duration in microseconds (includes cached requests)",
        value: |s| s.queue,
    },
    Summary {
        name: "nv_inference_compute_input_summary_us",
        help: "Cumulative compute input duration in microseconds (does not include cached requests)",
        value: |s| s.compute.input,
    },
    Summary {
        name: "nv_inference_compute_infer_summary_us",
        help: "Cumulative compute inference duration in microseconds (does not include cached requests)",
        value: |s| s.compute.infer,
    },
    Summary {
        name: "nv_inference_compute_output_summary_us",
        help: "Cumulative inference compute output duration in microseconds (does not include cached requests)",
        value: |s| s.compute.output,
    },
];

/// The summaries' recorder.
pub struct Summaries {
    recorder: PrometheusRecorder,
}

impl std::fmt::Debug for Summaries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Summaries").finish_non_exhaustive()
    }
}

impl Summaries {
    /// Summaries with these quantiles (each in 0..=1).
    pub fn new(quantiles: &[f64]) -> Result<Summaries, BuildError> {
        let buckets = NonZeroU32::new(AGE_BUCKETS).unwrap_or(NonZeroU32::MIN);
        let recorder = PrometheusBuilder::new()
            .set_quantiles(quantiles)?
            .set_bucket_duration(MAX_AGE / AGE_BUCKETS)?
            .set_bucket_count(buckets)
            .build_recorder();
        for summary in SUMMARIES {
            recorder.describe_histogram(summary.name.into(), None, summary.help.into());
        }
        Ok(Summaries { recorder })
    }

    /// Adds the samples each version took since the last call.
    pub fn record(&self, activity: &[VersionActivity]) {
        for v in activity.iter().filter(|v| !v.samples.is_empty()) {
            for summary in SUMMARIES {
                let key = version_key(summary.name, &v.name, v.version);
                let histogram = self.recorder.register_histogram(&key, &METADATA);
                for sample in &v.samples {
                    histogram.record((summary.value)(sample).as_secs_f64() * 1e6);
                }
            }
        }
    }

    pub fn render(&self) -> String {
        self.recorder.handle().render()
    }
}
