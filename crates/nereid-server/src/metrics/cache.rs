//! The response cache's metrics, with Triton 2.51's names: per version
//! `nv_cache_num_hits_per_model`, `nv_cache_hit_duration_per_model`,
//! `nv_cache_num_misses_per_model`, `nv_cache_miss_duration_per_model`
//! (for versions the cache has seen), and for the whole local cache
//! `nv_cache_num_entries` and `nv_cache_util`. A Redis cache, whose size
//! is Redis's to report, has Nereid's `nereid_cache_errors_total` (by
//! `operation`: get, set, connect) and `nereid_cache_connected` instead.

use metrics::Recorder;
use metrics_exporter_prometheus::PrometheusBuilder;
use nereid_engine::VersionStatistics;
use nereid_engine::cache::CacheUsage;
use nereid_engine::stats::StatsSnapshot;

use super::METADATA;
use super::families::version_key;

type Read = fn(&StatsSnapshot) -> u64;

const PER_MODEL: [(&str, &str, Read); 4] = [
    (
        "nv_cache_num_hits_per_model",
        "Number of cache hits per model",
        |s| s.cache_hit.count,
    ),
    (
        "nv_cache_hit_duration_per_model",
        "Total cache hit duration per model, in microseconds",
        |s| s.cache_hit.ns / 1000,
    ),
    (
        "nv_cache_num_misses_per_model",
        "Number of cache misses per model",
        |s| s.cache_miss.count,
    ),
    (
        "nv_cache_miss_duration_per_model",
        "Total cache miss (insert+lookup) duration per model, in microseconds",
        |s| s.cache_miss.ns / 1000,
    ),
];

/// The cache's series; empty when the server has no cache.
pub fn render(usage: Option<CacheUsage>, stats: &[VersionStatistics]) -> String {
    let Some(usage) = usage else {
        return String::new();
    };
    let recorder = PrometheusBuilder::new().build_recorder();
    let cached: Vec<&VersionStatistics> = stats
        .iter()
        .filter(|v| v.stats.cache_hit.count + v.stats.cache_miss.count > 0)
        .collect();
    for (name, help, read) in PER_MODEL {
        recorder.describe_counter(name.into(), None, help.into());
        for v in &cached {
            let key = version_key(name, &v.name, v.version);
            recorder
                .register_counter(&key, &METADATA)
                .absolute(read(&v.stats));
        }
    }
    let mut text = recorder.handle().render();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    nereid_core::exposition::render(&usage.families(), &mut text);
    text
}

#[cfg(test)]
mod tests {
    use nereid_engine::cache::{LocalUsage, RedisHealth};

    use super::*;

    #[test]
    fn versions_the_cache_has_not_seen_have_no_series() {
        let usage = CacheUsage::Local(LocalUsage {
            entries: 3,
            bytes: 512,
            capacity: 1024,
        });
        let text = render(Some(usage), &[]);
        assert!(!text.contains("_per_model"), "{text}");
        assert!(text.contains("nv_cache_num_entries 3"), "{text}");
        assert!(text.contains("nv_cache_util 0.5"), "{text}");
        assert!(render(None, &[]).is_empty());
    }

    #[test]
    fn a_redis_cache_reports_its_errors_and_connection_not_a_size() {
        let health = RedisHealth {
            connected: false,
            get_errors: 2,
            set_errors: 1,
            connect_errors: 5,
        };
        let text = render(Some(CacheUsage::Redis(health)), &[]);
        assert!(
            text.contains(r#"nereid_cache_errors_total{operation="get"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"nereid_cache_errors_total{operation="connect"} 5"#),
            "{text}"
        );
        assert!(text.contains("nereid_cache_connected 0"), "{text}");
        assert!(!text.contains("nv_cache_util"), "{text}");
    }
}
