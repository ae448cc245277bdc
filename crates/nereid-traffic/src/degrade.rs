//! When a model's queue is too long, its requests go to its fallback
//! model. The signal is the mean time requests of the serving version
//! spent queued over the last look (every [`LOOK`]): past the threshold
//! the model degrades; it recovers once nothing waits for it or that mean
//! falls under half the threshold.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::Served;

/// How often the queue time is looked at.
const LOOK: Duration = Duration::from_millis(50);

#[derive(Debug, Default)]
pub struct Degrade {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    at: Option<Instant>,
    /// Queue-time count and total at the last look.
    count: u64,
    ns: u64,
    degraded: bool,
}

impl Degrade {
    /// Whether requests go to the fallback now, given the serving
    /// version's statistics and the threshold in milliseconds.
    pub fn is_degraded(&self, served: &dyn Served, threshold_ms: f64) -> bool {
        let now = Instant::now();
        let mut state = self.state.lock();
        if state.at.is_some_and(|at| now.duration_since(at) < LOOK) {
            return state.degraded;
        }
        let (queued, waited_ns) = served.queued();
        let (count, ns) = (
            queued.saturating_sub(state.count),
            waited_ns.saturating_sub(state.ns),
        );
        let first = state.at.is_none();
        state.at = Some(now);
        state.count = queued;
        state.ns = waited_ns;
        if first {
            return false;
        }
        let threshold_ns = threshold_ms * 1e6;
        state.degraded = if count == 0 {
            state.degraded && served.pending() > 0
        } else {
            let mean = ns as f64 / count as f64;
            if state.degraded {
                mean >= threshold_ns / 2.0
            } else {
                mean > threshold_ns
            }
        };
        state.degraded
    }
}
