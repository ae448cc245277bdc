//! The AIMD controller of the latency target's budget: the share of the
//! target that the planner plans for, moved from the latencies the batcher
//! sees, as Clipper moves its batch size: down by a fraction when more
//! requests miss the target than the percentile allows, up by a small step
//! after each batch otherwise.

use std::time::Duration;

use tokio::time::Instant;

/// The budget factor's range and start: at most 80 % of the target is
/// planned for, which leaves room for what happens outside the batcher
/// (decoding, answering, the network, a client's own threads).
pub(super) const SCALE_MAX: f64 = 0.8;
/// A request misses, for the controller, when the batcher saw it take
/// longer than this share of the target: what the batcher does not see
/// still has to fit in the rest.
const MISS_AT: f64 = 0.9;
const SCALE_MIN: f64 = 0.2;
/// The controller's steps: a batch that used up the allowed misses cuts
/// the budget by this factor; any other batch adds this much back.
pub(super) const DECREASE: f64 = 0.85;
const INCREASE: f64 = 0.002;
/// Misses forgiven at most at once, in requests: the credit a long run of
/// good batches builds up.
const CREDIT_MAX: f64 = 2.0;

#[derive(Debug)]
pub(super) struct Controller {
    /// The budget factor.
    scale: f64,
    /// Misses still forgiven (see `CREDIT_MAX`).
    credit: f64,
}

impl Controller {
    pub(super) fn new() -> Controller {
        Controller {
            scale: SCALE_MAX,
            credit: CREDIT_MAX,
        }
    }

    /// The share of the target planned for now.
    pub(super) fn scale(&self) -> f64 {
        self.scale
    }

    /// A batch came back at `at` with requests submitted at `submitted`,
    /// against a `target` that `miss_allowance` of the requests may miss.
    pub(super) fn answered(
        &mut self,
        submitted: &[Instant],
        at: Instant,
        target: Duration,
        miss_allowance: f64,
    ) {
        let target = scaled(target, MISS_AT);
        let misses = submitted.iter().filter(|&&s| at - s > target).count();
        self.credit =
            (self.credit + miss_allowance * submitted.len() as f64 - misses as f64).min(CREDIT_MAX);
        if self.credit < 0.0 {
            self.scale = (self.scale * DECREASE).max(SCALE_MIN);
            self.credit = 0.0;
        } else {
            self.scale = (self.scale + INCREASE).min(SCALE_MAX);
        }
    }
}

/// `d` times `factor`, in whole microseconds.
pub(super) fn scaled(d: Duration, factor: f64) -> Duration {
    Duration::from_micros((d.as_micros() as f64 * factor).round() as u64)
}
