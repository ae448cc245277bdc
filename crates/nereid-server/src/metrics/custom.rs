//! The custom metric families models create (`pb_utils.MetricFamily`), in
//! the text Triton serves for them (prometheus-cpp's): no `model` label,
//! values printed as C's `%.16g`, `Nan` and `±Inf`, a histogram as its
//! `_count`, `_sum` and cumulative `_bucket` series ending with
//! `le="+Inf"`.

use std::fmt::Write as _;

use nereid_core::custom_metrics::{FamilySnapshot, Labels, Sample};

/// The families' text; empty when no family has a series.
pub fn render(families: &[FamilySnapshot]) -> String {
    let mut text = String::new();
    for family in families {
        let name = &family.name;
        if !family.description.is_empty() {
            let _ = writeln!(text, "# HELP {name} {}", escape_help(&family.description));
        }
        let _ = writeln!(text, "# TYPE {name} {}", family.kind.prometheus_type());
        for (labels, sample) in &family.series {
            match sample {
                Sample::Value(value) => line(&mut text, name, labels, None, &number(*value)),
                Sample::Histogram {
                    buckets,
                    count,
                    sum,
                } => histogram(&mut text, name, labels, buckets, *count, *sum),
            }
        }
    }
    text
}

fn histogram(
    text: &mut String,
    name: &str,
    labels: &Labels,
    buckets: &[(f64, u64)],
    count: u64,
    sum: f64,
) {
    line(
        text,
        &format!("{name}_count"),
        labels,
        None,
        &count.to_string(),
    );
    line(text, &format!("{name}_sum"), labels, None, &number(sum));
    let bucket = format!("{name}_bucket");
    for (bound, seen) in buckets {
        line(
            text,
            &bucket,
            labels,
            Some(&number(*bound)),
            &seen.to_string(),
        );
    }
    line(text, &bucket, labels, Some("+Inf"), &count.to_string());
}

/// One series line: `name{k="v",...,le="bound"} value`, without braces
/// when there are no labels.
fn line(text: &mut String, name: &str, labels: &Labels, le: Option<&str>, value: &str) {
    text.push_str(name);
    let pairs = labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .chain(le.map(|bound| ("le", bound)));
    let mut first = true;
    for (key, label) in pairs {
        text.push(if first { '{' } else { ',' });
        first = false;
        let _ = write!(text, "{key}=\"{}\"", escape_label(label));
    }
    if !first {
        text.push('}');
    }
    let _ = writeln!(text, " {value}");
}

fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A value as C's `printf("%.16g")` prints it (prometheus-cpp's format),
/// with `Nan`, `+Inf` and `-Inf`.
fn number(value: f64) -> String {
    const DIGITS: i32 = 16;
    if value.is_nan() {
        return "Nan".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "+Inf" } else { "-Inf" }.to_owned();
    }
    let scientific = format!("{:.*e}", (DIGITS - 1) as usize, value);
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if !(-4..DIGITS).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!(
            "{}e{sign}{:02}",
            trim_fraction(mantissa),
            exponent.unsigned_abs()
        );
    }
    let decimals = (DIGITS - 1 - exponent) as usize;
    trim_fraction(&format!("{value:.decimals$}")).to_owned()
}

/// `1.2500` as `1.25`, `3.000` as `3` (what `%g` drops).
fn trim_fraction(text: &str) -> &str {
    if !text.contains('.') {
        return text;
    }
    text.trim_end_matches('0').trim_end_matches('.')
}

#[cfg(test)]
mod tests {
    use nereid_core::custom_metrics::MetricKind;

    use super::*;

    #[test]
    fn numbers_print_as_printf_g_with_16_digits() {
        for (value, text) in [
            (0.1 + 0.2, "0.3"),
            (1e21, "1e+21"),
            (1.5e-7, "1.5e-07"),
            (123456789012.5, "123456789012.5"),
            (1.0 / 3.0, "0.3333333333333333"),
            (0.0, "0"),
            (-2.5, "-2.5"),
            (2023.0, "2023"),
            (0.0001, "0.0001"),
            (1e15, "1000000000000000"),
            (1e16, "1e+16"),
            (f64::NAN, "Nan"),
            (f64::NEG_INFINITY, "-Inf"),
            (0.05 + 1.5 + 6.0 + 0.1 + 100.0, "107.65"),
        ] {
            assert_eq!(number(value), text, "{value:e}");
        }
    }

    #[test]
    fn families_render_as_triton_shows_them() {
        let labels = |pairs: &[(&str, &str)]| -> Labels {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let families = [
            FamilySnapshot {
                name: "probe_counter".into(),
                description: "a counter".into(),
                kind: MetricKind::Counter,
                series: vec![(
                    labels(&[("b", "2"), ("a", "q\"u\\o\nte")]),
                    Sample::Value(0.3),
                )],
            },
            FamilySnapshot {
                name: "probe_gauge".into(),
                description: String::new(),
                kind: MetricKind::Gauge,
                series: vec![(Labels::new(), Sample::Value(1e21))],
            },
            FamilySnapshot {
                name: "probe_hist".into(),
                description: "a histogram".into(),
                kind: MetricKind::Histogram,
                series: vec![(
                    labels(&[("x", "y")]),
                    Sample::Histogram {
                        buckets: vec![(0.1, 2), (1.0, 2)],
                        count: 5,
                        sum: 107.65,
                    },
                )],
            },
        ];
        assert_eq!(
            render(&families),
            "# HELP probe_counter a counter\n\
             # TYPE probe_counter counter\n\
             probe_counter{a=\"q\\\"u\\\\o\\nte\",b=\"2\"} 0.3\n\
             # TYPE probe_gauge gauge\n\
             probe_gauge 1e+21\n\
             # HELP probe_hist a histogram\n\
             # TYPE probe_hist histogram\n\
             probe_hist_count{x=\"y\"} 5\n\
             probe_hist_sum{x=\"y\"} 107.65\n\
             probe_hist_bucket{x=\"y\",le=\"0.1\"} 2\n\
             probe_hist_bucket{x=\"y\",le=\"1\"} 2\n\
             probe_hist_bucket{x=\"y\",le=\"+Inf\"} 5\n"
        );
        assert!(render(&[]).is_empty());
    }
}
