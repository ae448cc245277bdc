//! Batching to a latency target (`nereid.latency_target_ms`): instead of a
//! fixed queue delay, the batcher learns what a batch costs ([`CostModel`])
//! and, for each batch, waits for more requests while the oldest request's
//! time in the queue plus the batch's predicted cost stays within the
//! target's budget, unless the batch already keeps up with the arrivals;
//! requests that the queue ahead of them cannot serve in
//! time are refused at once with a hint of when to retry.
//!
//! The budget is the target times a factor that an AIMD controller
//! (`controller.rs`) moves from observed latencies, as Clipper moves its
//! batch size: down by a fraction when more requests miss the target than
//! the percentile allows, up by a small step after each batch otherwise.
//! Whether more requests are worth waiting for depends on how they arrive
//! (`arrivals.rs`: a stream's rate, clients coming back after answers).
//! This file's [`Planner`] weighs both against the cost model to decide
//! and to admit, and publishes what it chose for metrics (`gauges.rs`).
//! Plain state driven by `QueueState`; the clock comes in as arguments.

mod arrivals;
mod controller;
mod gauges;

use std::sync::Arc;
use std::time::Duration;

use nereid_core::Error;
use tokio::time::Instant;

use crate::cost::CostModel;
use arrivals::Arrivals;
use controller::{Controller, SCALE_MAX, scaled};
pub use gauges::{TargetGauges, TargetSnapshot};

/// The target a model's config sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatencyTarget {
    pub target: Duration,
    /// The share of requests meant to finish within it, in thousandths of
    /// a percent (99 % is 99,000).
    pub percentile_milli: u32,
}

impl LatencyTarget {
    /// The share of requests allowed to miss the target (0.01 for p99).
    fn miss_allowance(&self) -> f64 {
        1.0 - f64::from(self.percentile_milli) / 100_000.0
    }
}

/// A batch that left for an instance and has not come back.
#[derive(Debug)]
struct Running {
    id: u64,
    dispatched: Instant,
    inferences: u64,
    /// When each of its requests was submitted.
    submitted: Vec<Instant>,
}

/// What the planner says about the batch an idle instance could take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Send at most this many inferences now.
    Go { limit: u64 },
    /// Wait for more requests until then.
    Wait { until: Instant },
}

/// The candidate batch, as the queue sees it.
#[derive(Debug, Clone, Copy)]
pub struct Candidate {
    /// Inferences it holds.
    pub total: u64,
    /// The earliest due time among its requests (submission plus budget).
    pub due: Instant,
    /// Whether another request could still join it.
    pub can_grow: bool,
    /// Until when clients just answered are expected back, if any are.
    pub back_until: Option<Instant>,
}

/// The latency-target planner of one model.
#[derive(Debug)]
pub struct Planner {
    config: LatencyTarget,
    max_batch_size: u64,
    cost: CostModel,
    controller: Controller,
    arrivals: Arrivals,
    running: Vec<Running>,
    next_id: u64,
    gauges: Arc<TargetGauges>,
}

impl Planner {
    pub fn new(config: LatencyTarget, max_batch_size: u64) -> Planner {
        let gauges = Arc::new(TargetGauges::starting_at(SCALE_MAX));
        Planner {
            config,
            max_batch_size: max_batch_size.max(1),
            cost: CostModel::default(),
            controller: Controller::new(),
            arrivals: Arrivals::new(config.target),
            running: Vec::new(),
            next_id: 0,
            gauges,
        }
    }

    pub fn gauges(&self) -> Arc<TargetGauges> {
        Arc::clone(&self.gauges)
    }

    pub fn target(&self) -> Duration {
        self.config.target
    }

    /// How long a request with its own `timeout` may take, planned for:
    /// the target or the timeout, whichever is shorter, times the budget
    /// factor.
    pub fn budget(&self, timeout: Option<Duration>) -> Duration {
        let limit = timeout
            .filter(|t| !t.is_zero())
            .map_or(self.config.target, |t| t.min(self.config.target));
        scaled(limit, self.controller.scale())
    }

    /// Notes an arrival; `prompted` when it answers for a client that was
    /// just answered (those are counted apart, as expected returns).
    pub fn arrived(&mut self, now: Instant, prompted: bool) {
        self.arrivals.arrived(now, prompted);
    }

    /// An answered client came back `after` its answer.
    pub fn returned(&mut self, after: Duration) {
        self.arrivals.returned(after);
    }

    /// How long after an answer its client is still expected back: its
    /// usual return, never more than the budget. A client that went away
    /// then costs the batch that waited for it no more than that.
    pub fn return_horizon(&self) -> Duration {
        self.arrivals.usual_return().min(self.budget(None))
    }

    /// The smallest batch that keeps up with the arrivals of the last
    /// target's length: one whose cost is no more than the time as many
    /// take to arrive, `intercept / (gap - per inference)`. A batch that
    /// large goes without waiting for a stream's next arrivals: the batch
    /// after it gathers while it runs, and waiting for a larger one would
    /// leave the instance idle while every request in it ages. The
    /// largest batch when the arrivals come faster than any batch keeps
    /// up with, or their rate is not known yet.
    pub(crate) fn keep_up_size(&self, now: Instant) -> u64 {
        let (Some(gap), Some(fit)) = (self.arrivals.recent_gap_us(now), self.cost.fit()) else {
            return self.max_batch_size;
        };
        let spare = gap - fit.per_inference_us;
        // No fixed cost learnt (one batch size seen so far): nothing says
        // what a larger batch saves, and the waits stay as they were.
        if spare <= 0.0 || fit.intercept_us <= 0.0 {
            return self.max_batch_size;
        }
        // Less a hair, so that an exact fit is not rounded up.
        ((fit.intercept_us / spare - 1e-6).ceil() as u64).clamp(1, self.max_batch_size)
    }

    /// The largest batch whose pessimistic cost fits the budget.
    /// Against the largest budget, not the one the controller cut: a cut
    /// budget refuses more at the door, but smaller batches would only
    /// lower what the model serves while the queue is full (on a noisy
    /// machine, down to batches of one).
    fn batch_limit(&self) -> u64 {
        let budget = scaled(self.config.target, SCALE_MAX);
        let fits = |b: u64| self.cost.pessimistic(b).is_none_or(|c| c <= budget);
        if fits(self.max_batch_size) {
            return self.max_batch_size;
        }
        // Costs grow with size: the first size that does not fit bounds it.
        let (mut lo, mut hi) = (1, self.max_batch_size);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fits(mid) { lo = mid } else { hi = mid - 1 }
        }
        lo
    }

    fn pessimistic(&self, size: u64) -> Duration {
        self.cost.pessimistic(size).unwrap_or_default()
    }

    /// Whether to send the candidate now, and how much of it, or how long
    /// to wait for more.
    pub fn decide(&self, now: Instant, c: Candidate) -> Decision {
        if self.cost.observations() == 0 {
            return Decision::Go { limit: c.total };
        }
        // Never trimmed below the limit to hurry its oldest request: the
        // requests were admitted on the promise of full batches, and
        // smaller ones would make everything behind them later.
        let limit = self.batch_limit();
        if c.total >= limit || !c.can_grow {
            return Decision::Go { limit };
        }
        // A batch that keeps up waits only for clients coming back.
        let keeps_up = c.total >= self.keep_up_size(now);
        if keeps_up && !(c.back_until.is_some() && self.arrivals.clients_come_back(now)) {
            return Decision::Go { limit };
        }
        // The latest start of a batch one request larger.
        let Some(start) = c.due.checked_sub(self.pessimistic(c.total + 1)) else {
            return Decision::Go { limit };
        };
        let waited_for = if keeps_up {
            c.back_until.filter(|&t| t > now)
        } else {
            self.worth_waiting_until(now, c.back_until)
        };
        match waited_for {
            Some(until) if start > now => Decision::Wait {
                until: until.min(start),
            },
            _ => Decision::Go { limit },
        }
    }

    /// How long more requests may still come, if any may: clients just
    /// answered, the next of a stream of unprompted arrivals, the clients
    /// of batches running on other instances once answered. With none,
    /// waiting cannot make the batch bigger.
    fn worth_waiting_until(&self, now: Instant, back_until: Option<Instant>) -> Option<Instant> {
        let horizon = self.return_horizon();
        let running = self
            .running
            .iter()
            .map(|r| r.dispatched + self.cost.predict(r.inferences).unwrap_or_default() + horizon);
        let next_arrival = self
            .cost
            .fit()
            .and_then(|fit| self.arrivals.next_due(fit.intercept_us));
        [back_until, next_arrival]
            .into_iter()
            .flatten()
            .chain(running)
            .filter(|&t| t > now)
            .max()
    }

    /// Whether a request of `size` inferences, with `ahead` inferences
    /// queued before it, can finish within `budget` on `instances`
    /// instances; if not, about how long until it could (the Retry-After
    /// hint). No cost model yet: every request is taken; an idle model
    /// takes every request that has only the target as its deadline.
    pub fn admit(
        &self,
        now: Instant,
        size: u64,
        ahead: u64,
        budget: Duration,
        instances: usize,
    ) -> Result<(), Duration> {
        // Nothing queued or running, and no deadline of its own shorter
        // than the target's: refusing it would help no other request, and
        // running it is how a model that looks too slow (after a burst of
        // load skewed its costs) learns otherwise.
        let idle = ahead == 0 && self.running.is_empty();
        if self.cost.observations() == 0 || (idle && budget >= self.budget(None)) {
            return Ok(());
        }
        let finish = self.predicted_finish(now, ahead + size.max(1), instances);
        if finish <= budget {
            Ok(())
        } else {
            Err(finish - budget)
        }
    }

    /// When the last of `inferences` queued ones would be answered, from
    /// now: batches of the budget's size go to whichever instance frees
    /// first, the running batches first. Expected costs, plus one margin
    /// for their spread at the end: batches run one after the other do
    /// not all run slow, and a margin on each (two spreads a batch, which
    /// is what a noisy machine gets) counted a queue of three batches as
    /// late as a burst of nine.
    fn predicted_finish(&self, now: Instant, inferences: u64, instances: usize) -> Duration {
        let expected = |size| self.cost.predict(size).unwrap_or_default();
        let mut free: Vec<Duration> = self
            .running
            .iter()
            .map(|r| (r.dispatched + expected(r.inferences)).saturating_duration_since(now))
            .collect();
        free.resize(instances.max(free.len()).max(1), Duration::ZERO);
        let cap = self.batch_limit();
        let mut left = inferences;
        let mut finish = Duration::ZERO;
        while left > 0 {
            let batch = left.min(cap);
            left -= batch;
            let Some(slot) = free.iter_mut().min() else {
                break;
            };
            *slot += expected(batch);
            finish = *slot;
        }
        finish + self.cost.margin().unwrap_or_default()
    }

    /// Records a batch sent now; returns its id for the permit.
    pub fn dispatched(&mut self, now: Instant, inferences: u64, submitted: Vec<Instant>) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let oldest = submitted.iter().min().copied().unwrap_or(now);
        self.gauges.dispatched(now - oldest, inferences);
        self.running.push(Running {
            id,
            dispatched: now,
            inferences,
            submitted,
        });
        id
    }

    /// A batch came back at `at`: its cost feeds the model, its requests'
    /// latencies the controller. The model's first batch is its warm-up and
    /// teaches neither: ONNX Runtime's first run allocates its arena and
    /// packs its weights (ten times a warm run's cost on the MLP of the
    /// benchmark), and a cost line that starts there refused the clients
    /// of a load that began at 16 at once.
    pub fn executed(&mut self, id: u64, at: Instant) {
        let Some(i) = self.running.iter().position(|r| r.id == id) else {
            return;
        };
        let batch = self.running.swap_remove(i);
        if batch.id == 0 {
            return;
        }
        self.cost.observe(batch.inferences, at - batch.dispatched);
        self.controller.answered(
            &batch.submitted,
            at,
            self.config.target,
            self.config.miss_allowance(),
        );
        self.publish();
    }

    /// A request was refused.
    pub fn shed(&self) {
        self.gauges.shed();
    }

    fn publish(&self) {
        self.gauges
            .learnt(self.cost.fit(), self.controller.scale(), self.batch_limit());
    }
}

/// The answer to a request the queue cannot serve in time: about `late`
/// past its budget.
pub fn shed_error(model: &str, target: Duration, late: Duration) -> Error {
    let error = Error::unavailable(format!(
        "inference request for model '{model}' rejected: the requests queued ahead of it cannot be served within its latency target of {} ms (predicted {} ms late)",
        target.as_micros() as f64 / 1e3,
        late.as_micros().div_ceil(1000),
    ))
    .with_retry_after(late);
    let secs = error.retry_after_secs().unwrap_or(1);
    Error::unavailable(format!("{}; retry after {secs} s", error.message())).with_retry_after(late)
}

#[cfg(test)]
#[path = "target_tests.rs"]
mod tests;
