//! An instance's generation metrics, under vLLM's names where vLLM has
//! one (`vllm:num_requests_running`, `vllm:time_to_first_token_seconds`,
//! ...) and `llm:` ones where it has none (KV blocks), labelled with the
//! model and version. They live in the server's custom metric families and
//! go when the instance does.

use std::sync::Arc;

use nereid_core::custom_metrics::{CustomMetrics, Labels, MetricId, MetricKind};

/// vLLM's buckets for time to first token, in seconds.
const TTFT_BUCKETS: [f64; 16] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
/// vLLM's buckets for time per output token, in seconds.
const TPOT_BUCKETS: [f64; 13] = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
];

/// The series, in the order [`FAMILIES`] lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Series {
    Running,
    Waiting,
    KvUsage,
    BlocksInUse,
    BlocksTotal,
    Preemptions,
    PromptTokens,
    GenerationTokens,
    PrefixQueries,
    PrefixHits,
    PrefixHitRate,
    TimeToFirstToken,
    TimePerOutputToken,
}

const FAMILIES: [(Series, &str, &str, MetricKind); 13] = [
    (
        Series::Running,
        "vllm:num_requests_running",
        "Sequences being decoded.",
        MetricKind::Gauge,
    ),
    (
        Series::Waiting,
        "vllm:num_requests_waiting",
        "Sequences waiting to run.",
        MetricKind::Gauge,
    ),
    (
        Series::KvUsage,
        "vllm:kv_cache_usage_perc",
        "Share of KV blocks running sequences hold (1 = full).",
        MetricKind::Gauge,
    ),
    (
        Series::BlocksInUse,
        "llm:kv_blocks_in_use",
        "KV blocks that running sequences hold.",
        MetricKind::Gauge,
    ),
    (
        Series::BlocksTotal,
        "llm:kv_blocks_total",
        "KV blocks in the cache.",
        MetricKind::Gauge,
    ),
    (
        Series::Preemptions,
        "vllm:num_preemptions_total",
        "Sequences preempted for lack of KV blocks.",
        MetricKind::Counter,
    ),
    (
        Series::PromptTokens,
        "vllm:prompt_tokens_total",
        "Prompt tokens of admitted requests.",
        MetricKind::Counter,
    ),
    (
        Series::GenerationTokens,
        "vllm:generation_tokens_total",
        "Tokens generated.",
        MetricKind::Counter,
    ),
    (
        Series::PrefixQueries,
        "vllm:prefix_cache_queries_total",
        "Prompt tokens looked up in the prefix cache.",
        MetricKind::Counter,
    ),
    (
        Series::PrefixHits,
        "vllm:prefix_cache_hits_total",
        "Prompt tokens found in the prefix cache.",
        MetricKind::Counter,
    ),
    (
        Series::PrefixHitRate,
        "llm:prefix_cache_hit_rate",
        "Share of prompt tokens found in the prefix cache since the instance started.",
        MetricKind::Gauge,
    ),
    (
        Series::TimeToFirstToken,
        "vllm:time_to_first_token_seconds",
        "Time from arrival to the first generated token.",
        MetricKind::Histogram,
    ),
    (
        Series::TimePerOutputToken,
        "vllm:time_per_output_token_seconds",
        "Time between generated tokens.",
        MetricKind::Histogram,
    ),
];

/// One instance's series.
pub struct Metrics {
    registry: Arc<CustomMetrics>,
    ids: Vec<MetricId>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("series", &self.ids.len())
            .finish()
    }
}

impl Metrics {
    /// The series of `model` (`version`, `instance`); `None` without a
    /// registry, or when a family cannot be made (logged).
    pub fn new(
        registry: Option<Arc<CustomMetrics>>,
        model: &str,
        version: i64,
        instance: &str,
    ) -> Option<Metrics> {
        let registry = registry?;
        let labels: Labels = [
            ("model".to_owned(), model.to_owned()),
            ("version".to_owned(), version.to_string()),
            ("instance".to_owned(), instance.to_owned()),
        ]
        .into();
        let mut ids = Vec::with_capacity(FAMILIES.len());
        for (series, name, help, kind) in FAMILIES {
            let buckets = match series {
                Series::TimeToFirstToken => Some(TTFT_BUCKETS.to_vec()),
                Series::TimePerOutputToken => Some(TPOT_BUCKETS.to_vec()),
                _ => None,
            };
            let made = registry
                .family(name, help, kind)
                .and_then(|family| registry.metric(family, labels.clone(), buckets));
            match made {
                Ok(id) => ids.push(id),
                Err(e) => {
                    tracing::warn!(metric = name, error = %e, "cannot make a language-model metric");
                    return None;
                }
            }
        }
        Some(Metrics { registry, ids })
    }

    /// `FAMILIES` lists the series in their declared order (a test checks).
    fn id(&self, series: Series) -> MetricId {
        self.ids[series as usize]
    }

    pub fn set(&self, series: Series, value: f64) {
        let _ = self.registry.set(self.id(series), value);
    }

    pub fn add(&self, series: Series, value: f64) {
        if value > 0.0 {
            let _ = self.registry.increment(self.id(series), value);
        }
    }

    pub fn observe(&self, series: Series, value: f64) {
        let _ = self.registry.observe(self.id(series), value);
    }
}

impl Drop for Metrics {
    fn drop(&mut self) {
        for id in &self.ids {
            self.registry.remove_metric(*id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_series_is_listed_once_in_its_declared_place() {
        for (index, (series, ..)) in FAMILIES.iter().enumerate() {
            assert_eq!(*series as usize, index, "{series:?}");
        }
    }
}
