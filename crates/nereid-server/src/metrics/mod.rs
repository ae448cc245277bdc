//! Prometheus metrics on their own port, with Triton's metric names and
//! `model` / `version` labels: counters from the engine's statistics at
//! scrape time, the pending-request gauge, latency summaries and
//! histograms when asked for, and CPU and GPU gauges refreshed every metrics interval. The text format
//! is `metrics-exporter-prometheus`'s; the custom metric families models
//! create follow, in prometheus-cpp's text as Triton serves them. Models
//! batching to a latency target add Nereid's shed counter and batcher
//! gauges (`target.rs`).

mod cache;
mod cpu;
mod custom;
mod families;
mod histograms;
mod summaries;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use nereid_core::exposition::Family;
use nereid_engine::Engine;
use nereid_engine::stats::{TargetSnapshot, VersionActivity};
use nereid_kafka::KafkaStatus;
use parking_lot::Mutex;
use tokio::net::TcpListener;

use cpu::{CpuMonitor, CpuReading};
pub use histograms::BUCKETS_MS;
use nereid_device::metrics::{GpuMonitor, GpuReading};
pub use summaries::QUANTILES;
use summaries::Summaries;

/// Where every series says it was recorded.
const METADATA: metrics::Metadata<'static> =
    metrics::Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// tritonserver's `--metrics-interval-ms`, `--metrics-config`,
/// `--allow-cpu-metrics` and `--allow-gpu-metrics`.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsOptions {
    /// How often the CPU gauges are refreshed.
    pub interval: Duration,
    /// The `*_duration_us` counters (`counter_latencies`, default true).
    pub counter_latencies: bool,
    /// The `*_summary_us` summaries (`summary_latencies`, default false).
    pub summary_latencies: bool,
    /// The summaries' quantiles (`summary_quantiles`).
    pub quantiles: Vec<f64>,
    /// The `*_histogram_ms` histograms (`histogram_latencies`, default
    /// false).
    pub histogram_latencies: bool,
    /// The histograms' bucket bounds in milliseconds, ascending
    /// (`histogram_buckets`).
    pub histogram_buckets: Vec<f64>,
    /// The `nv_cpu_*` gauges.
    pub cpu: bool,
    /// The `nv_gpu_*` gauges and `nv_energy_consumption`.
    pub gpu: bool,
}

impl Default for MetricsOptions {
    fn default() -> Self {
        MetricsOptions {
            interval: Duration::from_millis(2000),
            counter_latencies: true,
            summary_latencies: false,
            quantiles: QUANTILES.to_vec(),
            histogram_latencies: false,
            histogram_buckets: BUCKETS_MS.to_vec(),
            cpu: true,
            gpu: true,
        }
    }
}

/// What the scrape handler and the refresh task share.
#[derive(Debug, Clone)]
struct Metrics {
    engine: Engine,
    kafka: Option<KafkaStatus>,
    options: Arc<MetricsOptions>,
    summaries: Option<Arc<Summaries>>,
    cpu: Arc<Mutex<Option<CpuReading>>>,
    gpus: Arc<Mutex<Vec<GpuReading>>>,
}

pub async fn serve(
    engine: Engine,
    kafka: Option<KafkaStatus>,
    options: MetricsOptions,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let summaries = match options.summary_latencies {
        true => Some(Arc::new(Summaries::new(&options.quantiles)?)),
        false => None,
    };
    nereid_engine::stats::set_latency_sampling(summaries.is_some());
    let buckets: Vec<Duration> = options
        .histogram_buckets
        .iter()
        .map(|&ms| Duration::from_nanos((ms * 1e6).round() as u64))
        .collect();
    nereid_engine::stats::set_latency_histograms(options.histogram_latencies.then_some(&buckets));
    let metrics = Metrics {
        engine,
        kafka,
        options: Arc::new(options),
        summaries,
        cpu: Arc::default(),
        gpus: Arc::default(),
    };
    let refresh = tokio::spawn(refresh(metrics.clone()));
    let app = Router::new()
        .route("/metrics", get(scrape))
        .with_state(metrics);
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await;
    refresh.abort();
    served?;
    Ok(())
}

/// Every interval: reads the CPU and the GPUs, and moves the latency
/// samples into the summaries so that they do not pile up between scrapes.
async fn refresh(metrics: Metrics) {
    let mut monitor = CpuMonitor::default();
    let mut gpus = GpuMonitor::default();
    let mut tick = tokio::time::interval(metrics.options.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if metrics.options.cpu {
            *metrics.cpu.lock() = monitor.read();
        }
        if metrics.options.gpu {
            *metrics.gpus.lock() = gpus.read(metrics.engine.devices());
        }
        if let Some(summaries) = &metrics.summaries {
            summaries.record(&metrics.engine.activity());
        }
    }
}

async fn scrape(State(metrics): State<Metrics>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        metrics.render(),
    )
}

impl Metrics {
    fn render(&self) -> String {
        let stats = self.engine.statistics(None, None).unwrap_or_default();
        let activity = self.engine.activity();
        let cpu = match self.options.cpu {
            true => *self.cpu.lock(),
            false => None,
        };
        let mut text = families::render(&self.options, &stats, &activity, cpu);
        append(
            &mut text,
            &exposed(&nereid_device::metrics::families(&self.gpus.lock())),
        );
        append(&mut text, &cache::render(self.engine.cache_usage(), &stats));
        if let Some(summaries) = &self.summaries {
            summaries.record(&activity);
            append(&mut text, &summaries.render());
        }
        append(&mut text, &histograms::render(&stats));
        append(&mut text, &exposed(&self.crate_families(&activity)));
        append(
            &mut text,
            &custom::render(&self.engine.custom_metrics().snapshot()),
        );
        text
    }

    /// The families the Kafka frontend, traffic management and the
    /// latency-target batcher expose, each named by its own crate.
    fn crate_families(&self, activity: &[VersionActivity]) -> Vec<Family> {
        let mut families = Vec::new();
        if let Some(kafka) = &self.kafka {
            families.extend(kafka.snapshot().families());
        }
        let traffic = self.engine.traffic_metrics();
        let dropped = self.engine.route_log_dropped();
        if !traffic.is_empty() || dropped.is_some() {
            families.extend(nereid_engine::traffic::families(&traffic, dropped));
        }
        let targeted: Vec<(&str, i64, TargetSnapshot)> = activity
            .iter()
            .filter_map(|a| Some((a.name.as_str(), a.version, a.latency_target?)))
            .collect();
        families.extend(TargetSnapshot::families(&targeted));
        families.extend(self.engine.residency_families());
        families
    }
}

/// `families` in Prometheus's text format.
fn exposed(families: &[Family]) -> String {
    let mut text = String::new();
    nereid_core::exposition::render(families, &mut text);
    text
}

/// Adds one family block's text after another's.
fn append(text: &mut String, block: &str) {
    if block.is_empty() {
        return;
    }
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(block);
}
