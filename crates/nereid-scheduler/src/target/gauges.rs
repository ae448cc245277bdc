//! What the latency-target planner publishes for metrics: its current
//! choices and cost model, written by the batcher as it plans and read at
//! scrape time without its lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nereid_core::exposition::Family;

use crate::cost::Fit;

/// The batcher's current choices and cost model, for metrics. Written by
/// the batcher, read at scrape time.
#[derive(Debug, Default)]
pub struct TargetGauges {
    shed: AtomicU64,
    /// f64 bits of each value.
    intercept_us: AtomicU64,
    per_inference_us: AtomicU64,
    spread_us: AtomicU64,
    budget_scale: AtomicU64,
    wait_us: AtomicU64,
    batch_size: AtomicU64,
    batch_limit: AtomicU64,
}

/// One reading of [`TargetGauges`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TargetSnapshot {
    /// Requests refused because they could not be served in time.
    pub shed: u64,
    /// The cost model: fixed cost per batch, cost per inference, spread.
    pub intercept_us: f64,
    pub per_inference_us: f64,
    pub spread_us: f64,
    /// The share of the target the batcher plans for now.
    pub budget_scale: f64,
    /// How long the last batch's oldest request waited in the queue.
    pub wait_us: f64,
    /// The last batch's size, in inferences.
    pub batch_size: u64,
    /// The largest batch the budget allows now.
    pub batch_limit: u64,
}

impl TargetSnapshot {
    /// Nereid's metric families for versions that batch to a latency
    /// target (`nereid.latency_target_ms`): the requests shed
    /// (`nereid_requests_shed_total`, also counted in Triton's
    /// `nv_inference_request_failure{reason="REJECTED"}`), the batcher's
    /// last choice and limit, and its learnt cost model; one series per
    /// (model, version, reading) of `targeted`.
    pub fn families(targeted: &[(&str, i64, TargetSnapshot)]) -> Vec<Family> {
        type Read = fn(&TargetSnapshot) -> f64;
        let mut shed = Family::counter(
            "nereid_requests_shed_total",
            "Requests refused at once because the queue ahead could not serve them within the latency target",
        );
        for (model, version, t) in targeted {
            shed.add_version(model, *version, t.shed as f64);
        }
        let gauges: [(&'static str, &'static str, Read); 7] = [
            (
                "nereid_batcher_wait_us",
                "How long the oldest request of the last batch waited in the queue, in microseconds",
                |t| t.wait_us,
            ),
            (
                "nereid_batcher_batch_size",
                "Inferences in the last batch the latency-target batcher sent",
                |t| t.batch_size as f64,
            ),
            (
                "nereid_batcher_batch_limit",
                "Largest batch whose predicted cost fits the latency budget now",
                |t| t.batch_limit as f64,
            ),
            (
                "nereid_batcher_budget_ratio",
                "Share of the latency target the batcher plans for, moved by observed misses",
                |t| t.budget_scale,
            ),
            (
                "nereid_batcher_cost_intercept_us",
                "Learnt fixed cost of a batch, in microseconds",
                |t| t.intercept_us,
            ),
            (
                "nereid_batcher_cost_per_inference_us",
                "Learnt cost of each inference in a batch, in microseconds",
                |t| t.per_inference_us,
            ),
            (
                "nereid_batcher_cost_spread_us",
                "Standard deviation of measured batch costs around the learnt line, in microseconds",
                |t| t.spread_us,
            ),
        ];
        let mut families = vec![shed];
        for (name, help, read) in gauges {
            let mut family = Family::gauge(name, help);
            for (model, version, t) in targeted {
                family.add_version(model, *version, read(t));
            }
            families.push(family);
        }
        families
    }
}

impl TargetGauges {
    pub fn snapshot(&self) -> TargetSnapshot {
        let f = |a: &AtomicU64| f64::from_bits(a.load(Ordering::Relaxed));
        TargetSnapshot {
            shed: self.shed.load(Ordering::Relaxed),
            intercept_us: f(&self.intercept_us),
            per_inference_us: f(&self.per_inference_us),
            spread_us: f(&self.spread_us),
            budget_scale: f(&self.budget_scale),
            wait_us: f(&self.wait_us),
            batch_size: self.batch_size.load(Ordering::Relaxed),
            batch_limit: self.batch_limit.load(Ordering::Relaxed),
        }
    }

    /// The gauges of a planner that has run nothing yet and plans for
    /// `budget_scale` of the target.
    pub(super) fn starting_at(budget_scale: f64) -> TargetGauges {
        let gauges = TargetGauges::default();
        store(&gauges.budget_scale, budget_scale);
        gauges
    }

    /// A batch of `size` inferences left, its oldest request having waited
    /// `wait`.
    pub(super) fn dispatched(&self, wait: Duration, size: u64) {
        store(&self.wait_us, wait.as_secs_f64() * 1e6);
        self.batch_size.store(size, Ordering::Relaxed);
    }

    /// A request was refused.
    pub(super) fn shed(&self) {
        self.shed.fetch_add(1, Ordering::Relaxed);
    }

    /// What the planner learnt from a batch that came back: its cost model
    /// (once it has one), budget factor and largest batch.
    pub(super) fn learnt(&self, fit: Option<Fit>, budget_scale: f64, batch_limit: u64) {
        if let Some(fit) = fit {
            store(&self.intercept_us, fit.intercept_us);
            store(&self.per_inference_us, fit.per_inference_us);
            store(&self.spread_us, fit.spread_us);
        }
        store(&self.budget_scale, budget_scale);
        self.batch_limit.store(batch_limit, Ordering::Relaxed);
    }
}

fn store(a: &AtomicU64, v: f64) {
    a.store(v.to_bits(), Ordering::Relaxed);
}
