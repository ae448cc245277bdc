//! Metrics as each crate exposes its own: a crate turns what it counts
//! into [`Family`]s (name, help, kind, labelled values) and the server's
//! metrics endpoint collects them and writes them in Prometheus's text
//! format ([`render`]), knowing no crate's metric names.

use std::fmt::Write as _;

/// A family's Prometheus type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    /// Series `_bucket` (with `le`), `_sum` and `_count`, each a suffix
    /// of the family's name.
    Histogram,
}

/// One metric family and its series.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub series: Vec<Series>,
}

/// One series: its labels, in order, and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// What follows the family's name (a histogram's `_bucket`, `_sum`,
    /// `_count`); empty otherwise.
    pub suffix: &'static str,
    pub labels: Vec<(&'static str, String)>,
    pub value: f64,
}

impl Family {
    pub fn counter(name: &'static str, help: &'static str) -> Family {
        Family {
            name,
            help,
            kind: Kind::Counter,
            series: Vec::new(),
        }
    }

    pub fn gauge(name: &'static str, help: &'static str) -> Family {
        Family {
            name,
            help,
            kind: Kind::Gauge,
            series: Vec::new(),
        }
    }

    pub fn histogram(name: &'static str, help: &'static str) -> Family {
        Family {
            name,
            help,
            kind: Kind::Histogram,
            series: Vec::new(),
        }
    }

    /// Adds a series labelled `labels`.
    pub fn add(&mut self, labels: Vec<(&'static str, String)>, value: f64) {
        self.series.push(Series {
            suffix: "",
            labels,
            value,
        });
    }

    /// Adds one histogram labelled `labels`: `buckets` are the upper
    /// bounds and the observations at or under each (not cumulated yet);
    /// the `+Inf` bucket is `count`.
    pub fn add_histogram(
        &mut self,
        labels: Vec<(&'static str, String)>,
        buckets: &[(f64, u64)],
        sum: f64,
        count: u64,
    ) {
        let mut cumulated = 0;
        for &(bound, observed) in buckets {
            cumulated += observed;
            let mut with_le = labels.clone();
            with_le.push(("le", number(bound)));
            self.series.push(Series {
                suffix: "_bucket",
                labels: with_le,
                value: cumulated as f64,
            });
        }
        let mut with_le = labels.clone();
        with_le.push(("le", "+Inf".to_string()));
        self.series.push(Series {
            suffix: "_bucket",
            labels: with_le,
            value: count as f64,
        });
        self.series.push(Series {
            suffix: "_sum",
            labels: labels.clone(),
            value: sum,
        });
        self.series.push(Series {
            suffix: "_count",
            labels,
            value: count as f64,
        });
    }

    /// Adds a series labelled with a model and version, as Triton's
    /// per-version families are.
    pub fn add_version(&mut self, model: &str, version: i64, value: f64) {
        let labels = vec![
            ("model", model.to_string()),
            ("version", version.to_string()),
        ];
        self.add(labels, value);
    }
}

/// Writes `families` in Prometheus's text format; a family without a
/// series is left out.
pub fn render(families: &[Family], out: &mut String) {
    for family in families.iter().filter(|f| !f.series.is_empty()) {
        let kind = match family.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let _ = writeln!(out, "# HELP {} {}", family.name, family.help);
        let _ = writeln!(out, "# TYPE {} {kind}", family.name);
        for series in &family.series {
            out.push_str(family.name);
            out.push_str(series.suffix);
            if !series.labels.is_empty() {
                out.push('{');
                for (i, (name, value)) in series.labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{name}=\"{}\"", escape(value));
                }
                out.push('}');
            }
            let _ = writeln!(out, " {}", number(series.value));
        }
        out.push('\n');
    }
}

/// A value as Prometheus reads it: whole numbers without a fraction.
fn number(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if value.fract() == 0.0 && value.abs() < 9.007_199_254_740_992e15 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_render_in_prometheus_text() {
        let mut processed = Family::counter("x_total", "Things done");
        processed.add(vec![("topic", "in".into())], 7.0);
        let mut up = Family::gauge("x_up", "Whether it is up");
        up.add(Vec::new(), 1.0);
        let mut ratio = Family::gauge("x_ratio", "A share");
        ratio.add_version("m", 2, 0.25);
        let mut quoted = Family::gauge("x_label", "Odd labels");
        quoted.add(vec![("name", "a\"b\\c\nd".into())], f64::INFINITY);
        let empty = Family::counter("x_none", "Never seen");
        let mut out = String::new();
        render(&[processed, up, ratio, quoted, empty], &mut out);
        assert_eq!(
            out,
            "# HELP x_total Things done\n# TYPE x_total counter\nx_total{topic=\"in\"} 7\n\n\
             # HELP x_up Whether it is up\n# TYPE x_up gauge\nx_up 1\n\n\
             # HELP x_ratio A share\n# TYPE x_ratio gauge\nx_ratio{model=\"m\",version=\"2\"} 0.25\n\n\
             # HELP x_label Odd labels\n# TYPE x_label gauge\nx_label{name=\"a\\\"b\\\\c\\nd\"} +Inf\n\n"
        );
    }

    #[test]
    fn a_histogram_renders_cumulated_buckets_sum_and_count() {
        let mut seconds = Family::histogram("x_seconds", "How long");
        seconds.add_histogram(
            vec![("cause", "demand".into())],
            &[(0.05, 2), (0.5, 1)],
            0.4,
            4,
        );
        let mut out = String::new();
        render(&[seconds], &mut out);
        assert_eq!(
            out,
            "# HELP x_seconds How long\n# TYPE x_seconds histogram\n\
             x_seconds_bucket{cause=\"demand\",le=\"0.05\"} 2\n\
             x_seconds_bucket{cause=\"demand\",le=\"0.5\"} 3\n\
             x_seconds_bucket{cause=\"demand\",le=\"+Inf\"} 4\n\
             x_seconds_sum{cause=\"demand\"} 0.4\n\
             x_seconds_count{cause=\"demand\"} 4\n\n"
        );
    }
}
