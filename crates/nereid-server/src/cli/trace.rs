//! `--trace-config` as tritonserver takes it (`<setting>=<value>` for the
//! global settings, `<mode>,<setting>=<value>` for a mode's own), and the
//! older `--trace-*` flags it replaced.

use nereid_trace::settings::parse_level_flag;
use nereid_trace::{TraceMode, TraceOptions};

/// tritonserver's deprecated tracing flags, still accepted.
#[derive(Debug, Default, clap::Args)]
pub struct OldTraceFlags {
    /// Deprecated: `--trace-config triton,file=PATH`.
    #[arg(long, value_name = "PATH", hide = true)]
    pub trace_file: Option<String>,
    /// Deprecated: `--trace-config level=LEVEL`.
    #[arg(long, value_name = "LEVEL", hide = true)]
    pub trace_level: Vec<String>,
    /// Deprecated: `--trace-config rate=N`.
    #[arg(long, value_name = "N", hide = true)]
    pub trace_rate: Option<String>,
    /// Deprecated: `--trace-config count=N`.
    #[arg(long, value_name = "N", hide = true)]
    pub trace_count: Option<String>,
    /// Deprecated: `--trace-config triton,log-frequency=N`.
    #[arg(long, value_name = "N", hide = true)]
    pub trace_log_frequency: Option<String>,
}

/// The tracing `--trace-config` and the older flags ask for; the older
/// flags go first, so `--trace-config` wins.
pub(super) fn trace_options(
    settings: &[String],
    old: &OldTraceFlags,
) -> anyhow::Result<TraceOptions> {
    let mut options = TraceOptions::default();
    let mut levels = Levels::default();
    let old_settings = old
        .trace_file
        .iter()
        .map(|v| ("triton", "file", v))
        .chain(old.trace_level.iter().map(|v| ("", "level", v)))
        .chain(old.trace_rate.iter().map(|v| ("", "rate", v)))
        .chain(old.trace_count.iter().map(|v| ("", "count", v)))
        .chain(
            old.trace_log_frequency
                .iter()
                .map(|v| ("triton", "log-frequency", v)),
        );
    for (mode, key, value) in old_settings {
        apply(&mut options, &mut levels, mode, key, value)
            .map_err(|e| anyhow::anyhow!("--trace-{key} {value}: {e}"))?;
    }
    for setting in settings {
        let (mode, pair) = match setting.split_once(',') {
            Some((mode, pair)) if !mode.contains('=') => (mode, pair),
            _ => ("", setting.as_str()),
        };
        let Some((key, value)) = pair.split_once('=') else {
            anyhow::bail!("--trace-config {setting}: expected [<mode>,]<setting>=<value>");
        };
        apply(&mut options, &mut levels, mode, key, value)
            .map_err(|e| anyhow::anyhow!("--trace-config {setting}: {e}"))?;
    }
    if let Some(level) = levels.0 {
        options.values.level = level;
    }
    Ok(options)
}

/// Levels given so far: each `level=` adds one, `level=OFF` clears them.
#[derive(Default)]
struct Levels(Option<nereid_core::trace::TraceLevel>);

fn apply(
    options: &mut TraceOptions,
    levels: &mut Levels,
    mode: &str,
    key: &str,
    value: &str,
) -> anyhow::Result<()> {
    let number = |what: &str| -> anyhow::Result<i64> {
        value
            .parse::<i64>()
            .map_err(|_| anyhow::anyhow!("{what} must be a number, got '{value}'"))
    };
    match (mode, key) {
        ("", "level") => {
            let level = parse_level_flag(value)
                .ok_or_else(|| anyhow::anyhow!("unknown trace level '{value}'"))?;
            let mut now = levels.0.unwrap_or_default();
            if level.is_off() {
                now = level;
            }
            now.timestamps |= level.timestamps;
            now.tensors |= level.tensors;
            levels.0 = Some(now);
        }
        ("", "rate") => {
            options.values.rate = u32::try_from(number("the rate")?)
                .map_err(|_| anyhow::anyhow!("the rate must fit in 32 bits unsigned"))?;
        }
        ("", "count") => {
            let count = number("the count")?;
            options.values.count = match i32::try_from(count) {
                Ok(count) if count >= -1 => count,
                _ => anyhow::bail!("the count must be -1 or more"),
            };
        }
        ("", "mode") => {
            options.mode = match value {
                "triton" => TraceMode::Triton,
                "opentelemetry" => TraceMode::OpenTelemetry,
                _ => anyhow::bail!("the mode is 'triton' or 'opentelemetry', not '{value}'"),
            };
        }
        ("triton", "file") => options.file = value.to_string(),
        ("triton", "log-frequency" | "log_frequency") => {
            options.values.log_frequency = u32::try_from(number("the log frequency")?)
                .map_err(|_| anyhow::anyhow!("the log frequency must fit in 32 bits unsigned"))?;
        }
        ("opentelemetry", key) => options.otel.set(key, value)?,
        ("", _) => anyhow::bail!("not a trace setting: '{key}'"),
        ("triton", _) => anyhow::bail!("the triton mode's settings are 'file' and 'log-frequency'"),
        _ => anyhow::bail!("the trace modes are 'triton' and 'opentelemetry', not '{mode}'"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn options(settings: &[&str]) -> anyhow::Result<TraceOptions> {
        let settings: Vec<String> = settings.iter().map(|s| s.to_string()).collect();
        trace_options(&settings, &OldTraceFlags::default())
    }

    #[test]
    fn tritonservers_trace_config_forms() {
        let o = options(&[
            "triton,file=/tmp/t.json",
            "triton,log-frequency=50",
            "rate=100",
            "level=TIMESTAMPS",
            "level=TENSORS",
            "count=7",
        ])
        .unwrap();
        assert_eq!(o.file, "/tmp/t.json");
        assert_eq!(o.values.log_frequency, 50);
        assert_eq!(o.values.rate, 100);
        assert_eq!(o.values.count, 7);
        assert!(o.values.level.timestamps && o.values.level.tensors);
        assert_eq!(o.mode, TraceMode::Triton);
        let off = options(&["level=TIMESTAMPS", "level=OFF"]).unwrap();
        assert!(off.values.level.is_off());
    }

    #[test]
    fn opentelemetry_settings() {
        let o = options(&[
            "mode=opentelemetry",
            "opentelemetry,url=127.0.0.1:4318/v1/traces",
            "opentelemetry,resource=service.name=n",
            "opentelemetry,bsp_schedule_delay=100",
        ])
        .unwrap();
        assert_eq!(o.mode, TraceMode::OpenTelemetry);
        assert_eq!(o.otel.url, "127.0.0.1:4318/v1/traces");
        assert_eq!(o.otel.resource, [("service.name".into(), "n".into())]);
        assert_eq!(o.otel.bsp_schedule_delay, Duration::from_millis(100));
    }

    #[test]
    fn mistakes_name_the_setting() {
        for bad in [
            "level=LOUD",
            "rate=x",
            "count=-2",
            "mode=jaeger",
            "triton,url=x",
            "zipkin,url=x",
            "opentelemetry,nope=1",
            "frequency",
        ] {
            let err = options(&[bad]).unwrap_err().to_string();
            assert!(err.contains(bad), "{bad}: {err}");
        }
    }

    #[test]
    fn old_flags_are_read_and_trace_config_wins() {
        let old = OldTraceFlags {
            trace_file: Some("/a".into()),
            trace_level: vec!["TIMESTAMPS".into()],
            trace_rate: Some("5".into()),
            ..OldTraceFlags::default()
        };
        let o = trace_options(&["rate=9".to_string()], &old).unwrap();
        assert_eq!(o.file, "/a");
        assert_eq!(o.values.rate, 9);
        assert!(o.values.level.timestamps);
    }
}
