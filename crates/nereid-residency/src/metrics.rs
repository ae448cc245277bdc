//! What residency counts, as metric families.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use nereid_core::exposition::Family;
use parking_lot::Mutex;

use crate::budget::Place;
use crate::{LoadCause, Resident};

/// Upper bounds, in seconds, of the load and wait time buckets.
const SECONDS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

#[derive(Debug, Default)]
pub(crate) struct Counters {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    loads: HashMap<LoadCause, Histogram>,
    evictions: BTreeMap<String, u64>,
    waits: Histogram,
    failed_waits: u64,
}

#[derive(Debug, Clone, Default)]
struct Histogram {
    buckets: [u64; SECONDS.len()],
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, took: Duration) {
        let seconds = took.as_secs_f64();
        if let Some(i) = SECONDS.iter().position(|&bound| seconds <= bound) {
            self.buckets[i] += 1;
        }
        self.sum += seconds;
        self.count += 1;
    }

    fn add_to(&self, family: &mut Family, labels: Vec<(&'static str, String)>) {
        let buckets: Vec<(f64, u64)> = SECONDS.iter().copied().zip(self.buckets).collect();
        family.add_histogram(labels, &buckets, self.sum, self.count);
    }
}

impl Counters {
    pub(crate) fn loaded(&self, cause: LoadCause, took: Duration) {
        self.inner
            .lock()
            .loads
            .entry(cause)
            .or_default()
            .observe(took);
    }

    pub(crate) fn evicted(&self, models: &[String]) {
        let mut inner = self.inner.lock();
        for model in models {
            *inner.evictions.entry(model.clone()).or_default() += 1;
        }
    }

    pub(crate) fn waited(&self, took: Duration, loaded: bool) {
        let mut inner = self.inner.lock();
        inner.waits.observe(took);
        if !loaded {
            inner.failed_waits += 1;
        }
    }

    pub(crate) fn families(
        &self,
        resident: &[Resident],
        budgets: &[(Place, u64, Option<u64>)],
        loading: usize,
    ) -> Vec<Family> {
        let inner = self.inner.lock();
        let mut loads = Family::counter(
            "nereid_model_loads_total",
            "Model loads that succeeded, by cause (startup, api, poll, demand)",
        );
        let mut load_seconds = Family::histogram(
            "nereid_model_load_seconds",
            "Time to load a model, by cause",
        );
        for cause in [
            LoadCause::Startup,
            LoadCause::Api,
            LoadCause::Poll,
            LoadCause::Demand,
        ] {
            let seen = inner.loads.get(&cause).cloned().unwrap_or_default();
            let labels = vec![("cause", cause.as_str().to_string())];
            loads.add(labels.clone(), seen.count as f64);
            seen.add_to(&mut load_seconds, labels);
        }
        let mut evictions = Family::counter(
            "nereid_model_evictions_total",
            "Times a model was unloaded to keep within the memory budget",
        );
        for (model, count) in &inner.evictions {
            evictions.add(vec![("model", model.clone())], *count as f64);
        }
        let mut waits = Family::histogram(
            "nereid_model_load_wait_seconds",
            "Time requests waited for their model to load on demand",
        );
        inner.waits.add_to(&mut waits, Vec::new());
        let mut failed = Family::counter(
            "nereid_model_load_wait_failures_total",
            "Requests whose model did not load on demand (failed, backing off, or past their timeout)",
        );
        failed.add(Vec::new(), inner.failed_waits as f64);
        let mut in_progress = Family::gauge(
            "nereid_model_loads_in_progress",
            "Loads on demand running or waiting for a slot",
        );
        in_progress.add(Vec::new(), loading as f64);
        let mut families = vec![loads, load_seconds, evictions, waits, failed, in_progress];
        families.extend(memory_families(resident, budgets));
        families
    }
}

/// Each loaded version's bytes, each budget and the memory in use there.
fn memory_families(resident: &[Resident], budgets: &[(Place, u64, Option<u64>)]) -> Vec<Family> {
    let mut bytes = Family::gauge(
        "nereid_model_memory_bytes",
        "Memory a loaded model version holds, measured at its load and first requests",
    );
    for r in resident {
        bytes.add(
            vec![
                ("model", r.model.clone()),
                ("version", r.version.to_string()),
                ("place", r.place.to_string()),
            ],
            r.bytes as f64,
        );
    }
    let mut budget = Family::gauge(
        "nereid_memory_budget_bytes",
        "The memory budget of loaded models (--model-memory-budget)",
    );
    let mut used = Family::gauge(
        "nereid_memory_used_bytes",
        "Memory in use where a budget applies (the server's and its workers' resident memory, or a GPU's)",
    );
    for &(place, limit, in_use) in budgets {
        budget.add(vec![("place", place.to_string())], limit as f64);
        if let Some(in_use) = in_use {
            used.add(vec![("place", place.to_string())], in_use as f64);
        }
    }
    vec![bytes, budget, used]
}

#[cfg(test)]
mod tests {
    use nereid_core::exposition::render;

    use super::*;

    #[test]
    fn loads_evictions_and_waits_are_counted() {
        let counters = Counters::default();
        counters.loaded(LoadCause::Demand, Duration::from_millis(30));
        counters.loaded(LoadCause::Demand, Duration::from_millis(300));
        counters.evicted(&["a".into(), "a".into()]);
        counters.waited(Duration::from_millis(40), true);
        counters.waited(Duration::from_millis(1), false);
        let mut text = String::new();
        render(
            &counters.families(&[], &[(Place::Host, 100, Some(60))], 1),
            &mut text,
        );
        for line in [
            "nereid_model_loads_total{cause=\"demand\"} 2",
            "nereid_model_loads_total{cause=\"startup\"} 0",
            "nereid_model_load_seconds_bucket{cause=\"demand\",le=\"0.05\"} 1",
            "nereid_model_load_seconds_bucket{cause=\"demand\",le=\"0.5\"} 2",
            "nereid_model_evictions_total{model=\"a\"} 2",
            "nereid_model_load_wait_seconds_count 2",
            "nereid_model_load_wait_failures_total 1",
            "nereid_model_loads_in_progress 1",
            "nereid_memory_budget_bytes{place=\"host\"} 100",
            "nereid_memory_used_bytes{place=\"host\"} 60",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
    }
}
