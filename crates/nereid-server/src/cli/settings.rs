//! The flags that carry `<name>,<key>=<value>` or `<key>=<value>`
//! settings, as tritonserver takes them: `--backend-config` and
//! `--metrics-config` (`--cache-config` has `cache.rs`).

use std::path::PathBuf;
use std::time::Duration;

use crate::metrics::MetricsOptions;

/// `<name>,<key>=<value>` split in three; `flag` and `what` name it in the
/// error.
pub(super) fn split_setting<'a>(
    flag: &str,
    what: &str,
    setting: &'a str,
) -> anyhow::Result<(&'a str, &'a str, &'a str)> {
    setting
        .split_once(',')
        .and_then(|(name, pair)| pair.split_once('=').map(|(k, v)| (name, k, v)))
        .ok_or_else(|| anyhow::anyhow!("{flag} {setting}: expected <{what}>,<key>=<value>"))
}

/// The interpreter `--backend-config=python,python-path=...` names.
pub(super) fn python_path(settings: &[String]) -> anyhow::Result<PathBuf> {
    let mut python = PathBuf::from("python3");
    for setting in settings {
        let (backend, key, value) = split_setting("--backend-config", "backend", setting)?;
        if (backend, key) == ("python", "python-path") {
            python = PathBuf::from(value);
        } else {
            tracing::warn!("--backend-config {setting}: not used by Nereid");
        }
    }
    Ok(python)
}

/// The metrics options `--metrics-config`, `--metrics-interval-ms` and
/// `--allow-cpu-metrics` ask for.
pub(super) fn metrics_options(
    settings: &[String],
    interval_ms: u64,
    cpu: bool,
    gpu: bool,
) -> anyhow::Result<MetricsOptions> {
    let mut options = MetricsOptions {
        interval: Duration::from_millis(interval_ms),
        cpu,
        gpu,
        ..MetricsOptions::default()
    };
    for setting in settings {
        let Some((key, value)) = setting.split_once('=') else {
            anyhow::bail!("--metrics-config {setting}: expected <key>=<value>");
        };
        match key {
            "counter_latencies" => options.counter_latencies = boolean(setting, value)?,
            "summary_latencies" => options.summary_latencies = boolean(setting, value)?,
            "summary_quantiles" => options.quantiles = quantiles(setting, value)?,
            "histogram_latencies" => options.histogram_latencies = boolean(setting, value)?,
            "histogram_buckets" => options.histogram_buckets = buckets(setting, value)?,
            _ => tracing::warn!("--metrics-config {setting}: not used by Nereid"),
        }
    }
    Ok(options)
}

fn boolean(setting: &str, value: &str) -> anyhow::Result<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => anyhow::bail!("--metrics-config {setting}: {value:?} is not a boolean"),
    }
}

/// `<quantile>:<error>,...` as tritonserver takes it; Nereid's summaries
/// use the quantiles (their error is the sketch's own).
fn quantiles(setting: &str, value: &str) -> anyhow::Result<Vec<f64>> {
    value
        .split(',')
        .map(|pair| {
            let quantile = pair.split(':').next().unwrap_or(pair);
            match quantile.trim().parse::<f64>() {
                Ok(q) if (0.0..=1.0).contains(&q) => Ok(q),
                _ => anyhow::bail!("--metrics-config {setting}: {pair:?} is not <quantile>:<error> with a quantile in 0..1"),
            }
        })
        .collect()
}

/// `<bound>,...`: the histograms' bucket bounds in milliseconds, each
/// above the one before (Nereid's key; Triton sets its one histogram's
/// buckets in a model's config).
fn buckets(setting: &str, value: &str) -> anyhow::Result<Vec<f64>> {
    let bounds = value
        .split(',')
        .map(|bound| match bound.trim().parse::<f64>() {
            Ok(ms) if ms.is_finite() && ms > 0.0 => Ok(ms),
            _ => anyhow::bail!(
                "--metrics-config {setting}: {bound:?} is not a bucket bound in milliseconds above 0"
            ),
        })
        .collect::<anyhow::Result<Vec<f64>>>()?;
    if bounds.windows(2).any(|pair| pair[0] >= pair[1]) {
        anyhow::bail!("--metrics-config {setting}: bucket bounds must go up");
    }
    Ok(bounds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_config_names_the_python_interpreter() {
        assert_eq!(python_path(&[]).unwrap(), PathBuf::from("python3"));
        let set = [
            "python,python-path=/opt/py/bin/python".to_string(),
            "onnxruntime,x=1".to_string(),
        ];
        assert_eq!(
            python_path(&set).unwrap(),
            PathBuf::from("/opt/py/bin/python")
        );
        assert!(python_path(&["python".to_string()]).is_err());
    }

    #[test]
    fn metrics_flags() {
        let set = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let options = metrics_options(
            &set(&[
                "summary_latencies=true",
                "counter_latencies=false",
                "summary_quantiles=0.5:0.05,0.99:0.001",
            ]),
            500,
            false,
            true,
        )
        .unwrap();
        assert!(options.summary_latencies && !options.counter_latencies && !options.cpu);
        assert_eq!(options.quantiles, [0.5, 0.99]);
        assert_eq!(options.interval, Duration::from_millis(500));
        assert_eq!(
            metrics_options(&[], 2000, true, true).unwrap(),
            MetricsOptions::default()
        );
        let histograms = metrics_options(
            &set(&["histogram_latencies=true", "histogram_buckets=0.5, 1,2.5"]),
            2000,
            true,
            true,
        )
        .unwrap();
        assert!(histograms.histogram_latencies);
        assert_eq!(histograms.histogram_buckets, [0.5, 1.0, 2.5]);
        for bad in [
            "summary_latencies",
            "summary_latencies=maybe",
            "summary_quantiles=2:0.1",
            "histogram_latencies=sometimes",
            "histogram_buckets=",
            "histogram_buckets=1,x",
            "histogram_buckets=0,1",
            "histogram_buckets=5,1",
            "histogram_buckets=1,1",
            "histogram_buckets=1,inf",
        ] {
            let err = metrics_options(&set(&[bad]), 2000, true, true).unwrap_err();
            assert!(err.to_string().contains(bad), "{err}");
        }
    }
}
