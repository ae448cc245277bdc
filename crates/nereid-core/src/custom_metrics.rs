//! Custom metrics: the metric families and metrics that models create
//! while the server runs (Triton's `TRITONSERVER_MetricFamily` and
//! `TRITONSERVER_Metric`, which a Python model reaches through
//! `pb_utils.MetricFamily`). The server has one [`CustomMetrics`]; its
//! metrics endpoint renders a [`CustomMetrics::snapshot`] beside its own
//! families.
//!
//! The rules, and the error messages, are Triton core's and those of the
//! prometheus-cpp registry it adds the families to:
//! - a family is known by its name for the server's lifetime. Creating it
//!   again gives another handle onto the same family (the first
//!   description stays) when the kind matches, and fails otherwise;
//! - a metric is known by its family and labels. Creating it again gives
//!   another handle onto the same series (a histogram keeps its first
//!   buckets); the series goes when its last handle does;
//! - removing a family handle removes the metric handles made through it
//!   (Triton's Python stub clears a family's metrics when the family
//!   object dies). A family without series is not rendered.
//!
//! One deliberate difference: a histogram refuses the label `le`, which
//! its bucket series use, and no family may take a name starting with
//! `nv_` or `nereid_`, which the server's own families use. Triton accepts
//! both and then serves an exposition that Prometheus cannot parse.

use std::collections::{BTreeMap, HashMap};

use parking_lot::Mutex;

use crate::{Error, ErrorKind};

/// Name prefixes of the server's own families.
const RESERVED_PREFIXES: [&str; 2] = ["nv_", "nereid_"];

/// What a family counts: Triton's `TRITONSERVER_MetricKind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetricKind {
    Counter,
    Gauge,
    Histogram,
}

impl MetricKind {
    /// The kind in Triton's words (`COUNTER`), as its messages name it.
    pub fn triton_name(self) -> &'static str {
        match self {
            MetricKind::Counter => "COUNTER",
            MetricKind::Gauge => "GAUGE",
            MetricKind::Histogram => "HISTOGRAM",
        }
    }

    /// The Prometheus `# TYPE` of the kind.
    pub fn prometheus_type(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        }
    }
}

/// A handle onto a family, from [`CustomMetrics::family`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FamilyId(pub u64);

/// A handle onto a metric (a series), from [`CustomMetrics::metric`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MetricId(pub u64);

/// Why a custom metrics call failed. The messages are Triton's, word for
/// word (models and their tests compare them); the variants carry what
/// was wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MetricError {
    #[error("Invalid metric name")]
    InvalidName(String),
    #[error(
        "Invalid metric name '{0}': names starting with 'nv_' or 'nereid_' are the server's own"
    )]
    ReservedName(String),
    #[error("Family name already exists with different type")]
    KindConflict { name: String, kind: MetricKind },
    #[error("Invalid label name")]
    InvalidLabel(String),
    #[error("Bucket Boundaries must be strictly sorted")]
    UnsortedBuckets(Vec<f64>),
    #[error("Bucket boundaries not found in Metric args.")]
    MissingBuckets,
    #[error("Unexpected args found in {} Metric constructor.", .0.prometheus_type())]
    UnexpectedBuckets(MetricKind),
    #[error(
        "TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by non-negative values."
    )]
    CounterDecrement(f64),
    #[error("TRITONSERVER_METRIC_KIND_{} does not support {operation}", .kind.triton_name())]
    Unsupported {
        kind: MetricKind,
        operation: &'static str,
    },
    /// The family handle was removed, or never given out.
    #[error("metric family {} does not exist (it was deleted)", .0.0)]
    UnknownFamily(FamilyId),
    /// The metric handle was removed (Triton: "invalidated").
    #[error("Could not {operation} metric value. Metric has been invalidated.")]
    UnknownMetric {
        id: MetricId,
        operation: &'static str,
    },
}

impl MetricError {
    /// The kind a client of the call sees, as Triton codes it.
    pub fn kind(&self) -> ErrorKind {
        match self {
            MetricError::Unsupported { .. } => ErrorKind::Unsupported,
            MetricError::UnknownFamily(_) | MetricError::UnknownMetric { .. } => {
                ErrorKind::Internal
            }
            _ => ErrorKind::InvalidArgument,
        }
    }
}

impl From<MetricError> for Error {
    fn from(e: MetricError) -> Self {
        Error::new(e.kind(), e.to_string())
    }
}

/// One series' labels, sorted by name (prometheus-cpp keeps them so).
pub type Labels = BTreeMap<String, String>;

/// What a snapshot holds of one series.
#[derive(Debug, Clone, PartialEq)]
pub enum Sample {
    /// A counter's or gauge's value.
    Value(f64),
    /// A histogram: each bucket's upper bound with the count of
    /// observations at or below it (cumulative, `+Inf` not included), the
    /// count of all observations and their sum.
    Histogram {
        buckets: Vec<(f64, u64)>,
        count: u64,
        sum: f64,
    },
}

/// One family as the metrics endpoint renders it.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilySnapshot {
    pub name: String,
    pub description: String,
    pub kind: MetricKind,
    /// Its series, in label order.
    pub series: Vec<(Labels, Sample)>,
}

/// The server's custom metric families; see the module docs.
#[derive(Debug, Default)]
pub struct CustomMetrics {
    registry: Mutex<Registry>,
}

#[derive(Debug, Default)]
struct Registry {
    /// Every family ever created, in creation order.
    families: Vec<Family>,
    /// Family handles: the index of their family.
    family_handles: HashMap<FamilyId, usize>,
    metric_handles: HashMap<MetricId, MetricHandle>,
    next_id: u64,
}

#[derive(Debug)]
struct Family {
    name: String,
    description: String,
    kind: MetricKind,
    series: BTreeMap<Labels, Series>,
}

#[derive(Debug)]
struct MetricHandle {
    family_handle: FamilyId,
    family: usize,
    labels: Labels,
}

#[derive(Debug)]
struct Series {
    /// How many metric handles point at it.
    handles: usize,
    state: State,
}

#[derive(Debug)]
enum State {
    Value(f64),
    Histogram {
        bounds: Vec<f64>,
        /// Observations per bucket (not cumulative); one more than
        /// `bounds`, the last for those above every bound.
        counts: Vec<u64>,
        sum: f64,
    },
}

impl CustomMetrics {
    /// A handle onto the family `name`, created with `description` and
    /// `kind` unless it exists (then its kind must be `kind`).
    pub fn family(
        &self,
        name: &str,
        description: &str,
        kind: MetricKind,
    ) -> Result<FamilyId, MetricError> {
        check_metric_name(name)?;
        let mut registry = self.registry.lock();
        let index = match registry.families.iter().position(|f| f.name == name) {
            Some(index) if registry.families[index].kind != kind => {
                return Err(MetricError::KindConflict {
                    name: name.to_owned(),
                    kind,
                });
            }
            Some(index) => index,
            None => {
                registry.families.push(Family {
                    name: name.to_owned(),
                    description: description.to_owned(),
                    kind,
                    series: BTreeMap::new(),
                });
                registry.families.len() - 1
            }
        };
        let id = FamilyId(registry.next_id());
        registry.family_handles.insert(id, index);
        Ok(id)
    }

    /// A handle onto the series of `family` with `labels`, created (with
    /// `buckets`, which a histogram needs and the other kinds refuse)
    /// unless it exists.
    pub fn metric(
        &self,
        family: FamilyId,
        labels: Labels,
        buckets: Option<Vec<f64>>,
    ) -> Result<MetricId, MetricError> {
        let mut registry = self.registry.lock();
        let index = *registry
            .family_handles
            .get(&family)
            .ok_or(MetricError::UnknownFamily(family))?;
        let kind = registry.families[index].kind;
        for name in labels.keys() {
            check_label_name(name, kind)?;
        }
        let state = State::new(kind, buckets)?;
        let series = registry.families[index]
            .series
            .entry(labels.clone())
            .or_insert(Series { handles: 0, state });
        series.handles += 1;
        let id = MetricId(registry.next_id());
        registry.metric_handles.insert(
            id,
            MetricHandle {
                family_handle: family,
                family: index,
                labels,
            },
        );
        Ok(id)
    }

    /// Adds `value` to a counter (never negative) or a gauge.
    pub fn increment(&self, metric: MetricId, value: f64) -> Result<(), MetricError> {
        self.with_series(metric, "increment", |kind, state| match state {
            State::Value(_) if kind == MetricKind::Counter && value < 0.0 => {
                Err(MetricError::CounterDecrement(value))
            }
            State::Value(current) => {
                *current += value;
                Ok(())
            }
            State::Histogram { .. } => Err(unsupported(kind, "Increment")),
        })
    }

    /// Sets a gauge.
    pub fn set(&self, metric: MetricId, value: f64) -> Result<(), MetricError> {
        self.with_series(metric, "set", |kind, state| match state {
            State::Value(current) if kind == MetricKind::Gauge => {
                *current = value;
                Ok(())
            }
            _ => Err(unsupported(kind, "Set")),
        })
    }

    /// Records one observation in a histogram.
    pub fn observe(&self, metric: MetricId, value: f64) -> Result<(), MetricError> {
        // Triton's message for a missing metric says "set" here too.
        self.with_series(metric, "set", |kind, state| match state {
            State::Histogram {
                bounds,
                counts,
                sum,
            } => {
                // The first bucket whose bound is at least the value
                // (prometheus-cpp's lower_bound).
                let bucket = bounds.partition_point(|&bound| bound < value);
                counts[bucket] += 1;
                *sum += value;
                Ok(())
            }
            State::Value(_) => Err(unsupported(kind, "Observe")),
        })
    }

    /// A counter's or gauge's value.
    pub fn value(&self, metric: MetricId) -> Result<f64, MetricError> {
        self.with_series(metric, "get", |kind, state| match state {
            State::Value(current) => Ok(*current),
            State::Histogram { .. } => Err(unsupported(kind, "Value")),
        })
    }

    /// Drops a metric handle; its series goes with its last handle.
    pub fn remove_metric(&self, metric: MetricId) {
        self.registry.lock().remove_metric(metric);
    }

    /// Drops a family handle and the metric handles made through it. The
    /// family itself stays known (its name keeps its kind).
    pub fn remove_family(&self, family: FamilyId) {
        let mut registry = self.registry.lock();
        if registry.family_handles.remove(&family).is_none() {
            return;
        }
        let made: Vec<MetricId> = registry
            .metric_handles
            .iter()
            .filter(|(_, handle)| handle.family_handle == family)
            .map(|(&id, _)| id)
            .collect();
        for metric in made {
            registry.remove_metric(metric);
        }
    }

    /// The families that have series, in creation order.
    pub fn snapshot(&self) -> Vec<FamilySnapshot> {
        self.registry
            .lock()
            .families
            .iter()
            .filter(|family| !family.series.is_empty())
            .map(|family| FamilySnapshot {
                name: family.name.clone(),
                description: family.description.clone(),
                kind: family.kind,
                series: family
                    .series
                    .iter()
                    .map(|(labels, series)| (labels.clone(), series.state.sample()))
                    .collect(),
            })
            .collect()
    }

    fn with_series<T>(
        &self,
        metric: MetricId,
        operation: &'static str,
        apply: impl FnOnce(MetricKind, &mut State) -> Result<T, MetricError>,
    ) -> Result<T, MetricError> {
        let mut registry = self.registry.lock();
        let unknown = MetricError::UnknownMetric {
            id: metric,
            operation,
        };
        let Some(handle) = registry.metric_handles.get(&metric) else {
            return Err(unknown);
        };
        let (index, labels) = (handle.family, handle.labels.clone());
        let family = &mut registry.families[index];
        let kind = family.kind;
        match family.series.get_mut(&labels) {
            Some(series) => apply(kind, &mut series.state),
            None => Err(unknown),
        }
    }
}

impl Registry {
    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn remove_metric(&mut self, metric: MetricId) {
        let Some(handle) = self.metric_handles.remove(&metric) else {
            return;
        };
        let series = &mut self.families[handle.family].series;
        if let Some(entry) = series.get_mut(&handle.labels) {
            entry.handles -= 1;
            if entry.handles == 0 {
                series.remove(&handle.labels);
            }
        }
    }
}

impl State {
    fn new(kind: MetricKind, buckets: Option<Vec<f64>>) -> Result<State, MetricError> {
        match (kind, buckets) {
            (MetricKind::Histogram, None) => Err(MetricError::MissingBuckets),
            (MetricKind::Histogram, Some(bounds)) => {
                // Strictly increasing (prometheus-cpp refuses equal bounds too).
                if bounds.windows(2).any(|pair| pair[0] >= pair[1]) {
                    return Err(MetricError::UnsortedBuckets(bounds));
                }
                Ok(State::Histogram {
                    counts: vec![0; bounds.len() + 1],
                    bounds,
                    sum: 0.0,
                })
            }
            (kind, Some(_)) => Err(MetricError::UnexpectedBuckets(kind)),
            (_, None) => Ok(State::Value(0.0)),
        }
    }

    fn sample(&self) -> Sample {
        match self {
            State::Value(value) => Sample::Value(*value),
            State::Histogram {
                bounds,
                counts,
                sum,
            } => {
                let mut seen = 0;
                let buckets = bounds
                    .iter()
                    .zip(counts)
                    .map(|(&bound, &count)| {
                        seen += count;
                        (bound, seen)
                    })
                    .collect();
                Sample::Histogram {
                    buckets,
                    count: counts.iter().sum(),
                    sum: *sum,
                }
            }
        }
    }
}

fn unsupported(kind: MetricKind, operation: &'static str) -> MetricError {
    MetricError::Unsupported { kind, operation }
}

/// Prometheus' metric names: `[a-zA-Z_:][a-zA-Z0-9_:]*`, and not `__...`
/// (reserved for Prometheus' own use).
fn check_metric_name(name: &str) -> Result<(), MetricError> {
    let mut chars = name.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        && !name.starts_with("__");
    if !valid {
        return Err(MetricError::InvalidName(name.to_owned()));
    }
    if RESERVED_PREFIXES.iter().any(|p| name.starts_with(p)) {
        return Err(MetricError::ReservedName(name.to_owned()));
    }
    Ok(())
}

/// Prometheus' label names: `[a-zA-Z_][a-zA-Z0-9_]*`, not `__...`; a
/// histogram's buckets use `le`.
fn check_label_name(name: &str, kind: MetricKind) -> Result<(), MetricError> {
    let mut chars = name.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with("__")
        && !(kind == MetricKind::Histogram && name == "le");
    match valid {
        true => Ok(()),
        false => Err(MetricError::InvalidLabel(name.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn counters_only_go_up_and_gauges_go_anywhere() {
        let registry = CustomMetrics::default();
        let family = registry
            .family("requests", "d", MetricKind::Counter)
            .unwrap();
        let counter = registry
            .metric(family, labels(&[("a", "1")]), None)
            .unwrap();
        registry.increment(counter, 0.1).unwrap();
        registry.increment(counter, 0.2).unwrap();
        assert_eq!(registry.value(counter).unwrap(), 0.1 + 0.2);
        let err = registry.increment(counter, -1.0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by non-negative values."
        );
        for err in [
            registry.set(counter, 3.0).unwrap_err(),
            registry.observe(counter, 3.0).unwrap_err(),
        ] {
            assert_eq!(err.kind(), ErrorKind::Unsupported);
        }
        assert_eq!(
            registry.set(counter, 3.0).unwrap_err().to_string(),
            "TRITONSERVER_METRIC_KIND_COUNTER does not support Set"
        );

        let gauges = registry.family("load", "d", MetricKind::Gauge).unwrap();
        let gauge = registry.metric(gauges, Labels::new(), None).unwrap();
        registry.increment(gauge, 5.0).unwrap();
        registry.increment(gauge, -7.5).unwrap();
        assert_eq!(registry.value(gauge).unwrap(), -2.5);
        registry.set(gauge, 1e21).unwrap();
        assert_eq!(registry.value(gauge).unwrap(), 1e21);
        assert_eq!(
            registry.observe(gauge, 1.0).unwrap_err().to_string(),
            "TRITONSERVER_METRIC_KIND_GAUGE does not support Observe"
        );
    }

    #[test]
    fn histograms_count_into_buckets_at_or_above_the_value() {
        let registry = CustomMetrics::default();
        let family = registry
            .family("latency", "d", MetricKind::Histogram)
            .unwrap();
        let metric = registry
            .metric(family, labels(&[("x", "y")]), Some(vec![0.1, 1.0, 2.5]))
            .unwrap();
        for value in [0.05, 1.5, 6.0, 0.1] {
            registry.observe(metric, value).unwrap();
        }
        // The same labels are the same series, whatever the buckets.
        let again = registry
            .metric(family, labels(&[("x", "y")]), Some(vec![5.0]))
            .unwrap();
        registry.observe(again, 100.0).unwrap();
        let snapshot = registry.snapshot();
        assert_eq!(
            snapshot[0].series[0].1,
            Sample::Histogram {
                buckets: vec![(0.1, 2), (1.0, 2), (2.5, 3)],
                count: 5,
                sum: 0.05 + 1.5 + 6.0 + 0.1 + 100.0,
            }
        );
        for (operation, err) in [
            ("Value", registry.value(metric).unwrap_err()),
            ("Increment", registry.increment(metric, 1.0).unwrap_err()),
            ("Set", registry.set(metric, 1.0).unwrap_err()),
        ] {
            assert_eq!(
                err.to_string(),
                format!("TRITONSERVER_METRIC_KIND_HISTOGRAM does not support {operation}")
            );
        }
        // An empty bucket list is allowed: everything lands in +Inf.
        let empty = registry.metric(family, labels(&[("x", "e")]), Some(Vec::new()));
        assert!(empty.is_ok());
    }

    #[test]
    fn bad_buckets_names_and_labels_are_refused_in_tritons_words() {
        let registry = CustomMetrics::default();
        let histogram = registry.family("h", "d", MetricKind::Histogram).unwrap();
        let gauge = registry.family("g", "d", MetricKind::Gauge).unwrap();
        let cases = [
            (
                registry.metric(histogram, Labels::new(), Some(vec![2.0, 1.0])),
                "Bucket Boundaries must be strictly sorted",
            ),
            (
                registry.metric(histogram, Labels::new(), Some(vec![1.0, 1.0])),
                "Bucket Boundaries must be strictly sorted",
            ),
            (
                registry.metric(histogram, Labels::new(), None),
                "Bucket boundaries not found in Metric args.",
            ),
            (
                registry.metric(gauge, Labels::new(), Some(vec![1.0])),
                "Unexpected args found in gauge Metric constructor.",
            ),
            (
                registry.metric(gauge, labels(&[("1a", "x")]), None),
                "Invalid label name",
            ),
            (
                registry.metric(gauge, labels(&[("__a", "x")]), None),
                "Invalid label name",
            ),
            (
                registry.metric(histogram, labels(&[("le", "x")]), Some(vec![1.0])),
                "Invalid label name",
            ),
        ];
        for (result, message) in cases {
            assert_eq!(result.unwrap_err().to_string(), message);
        }
        assert!(registry.metric(gauge, labels(&[("le", "x")]), None).is_ok());
        for name in ["", "bad name", "__reserved", "1abc"] {
            let err = registry.family(name, "d", MetricKind::Counter).unwrap_err();
            assert_eq!(err.to_string(), "Invalid metric name", "{name:?}");
        }
        assert!(registry.family("a:b_c", "", MetricKind::Counter).is_ok());
        let err = registry
            .family("nv_inference_count", "d", MetricKind::Counter)
            .unwrap_err();
        assert!(matches!(err, MetricError::ReservedName(_)), "{err}");
    }

    #[test]
    fn a_name_keeps_its_first_kind_and_description() {
        let registry = CustomMetrics::default();
        let first = registry
            .family("dup", "first", MetricKind::Counter)
            .unwrap();
        let err = registry.family("dup", "x", MetricKind::Gauge).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Family name already exists with different type"
        );
        let second = registry
            .family("dup", "second", MetricKind::Counter)
            .unwrap();
        assert_ne!(first, second);
        let one = registry.metric(first, labels(&[("k", "1")]), None).unwrap();
        let two = registry
            .metric(second, labels(&[("k", "1")]), None)
            .unwrap();
        registry.increment(one, 7.5).unwrap();
        assert_eq!(registry.value(two).unwrap(), 7.5);
        // Removing the first family handle takes its metric handle, not
        // the series the second still holds.
        registry.remove_family(first);
        assert_eq!(registry.value(two).unwrap(), 7.5);
        assert!(matches!(
            registry.value(one),
            Err(MetricError::UnknownMetric { .. })
        ));
        let snapshot = registry.snapshot();
        assert_eq!(snapshot.len(), 1);
        assert_eq!(snapshot[0].description, "first");
        registry.remove_metric(two);
        assert!(registry.snapshot().is_empty());
        // The name still has its kind.
        assert!(registry.family("dup", "x", MetricKind::Gauge).is_err());
        assert!(matches!(
            registry.metric(first, Labels::new(), None),
            Err(MetricError::UnknownFamily(_))
        ));
    }
}
