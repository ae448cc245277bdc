//! What the latency-target planner measures of the requests' arrivals:
//! the rate of those that come on their own (an open-loop stream), how
//! soon answered clients come back (closed loop), and every arrival of the
//! last target's length. The planner weighs these against the cost of a
//! batch to decide whether more requests are worth waiting for.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// How long clients are expected back after an answer before any came
/// back, and at least.
const RETURN_UNKNOWN: Duration = Duration::from_millis(5);
const RETURN_MIN: Duration = Duration::from_millis(1);
/// Answered clients whose mean return is within this many mean spacings
/// of arrivals are taken for clients coming back (see
/// `Arrivals::clients_come_back`).
const RETURN_SPACINGS: f64 = 4.0;

#[derive(Debug)]
pub(super) struct Arrivals {
    /// The target's length: the span of `recent`, and the longest gap
    /// still taken for part of a stream.
    window: Duration,
    /// Mean gap between arrivals no answer prompted, and the last one.
    mean_gap: Option<Duration>,
    /// Mean time from an answer to the arrival it prompted.
    mean_return: Option<Duration>,
    last_arrival: Option<Instant>,
    /// Every arrival within the last target's length, prompted or not:
    /// the rate the model must keep up with.
    recent: VecDeque<Instant>,
}

impl Arrivals {
    pub(super) fn new(window: Duration) -> Arrivals {
        Arrivals {
            window,
            mean_gap: None,
            mean_return: None,
            last_arrival: None,
            recent: VecDeque::new(),
        }
    }

    /// Notes an arrival; `prompted` when it answers for a client that was
    /// just answered (those are counted apart, as expected returns).
    pub(super) fn arrived(&mut self, now: Instant, prompted: bool) {
        self.recent.push_back(now);
        while self.recent.front().is_some_and(|&t| now - t > self.window) {
            self.recent.pop_front();
        }
        if prompted {
            return;
        }
        // A gap longer than the target is a pause, not part of a stream: the
        // stream's rate is learnt afresh from the next gaps.
        let gap = self.last_arrival.map(|last| now - last);
        self.mean_gap = match (gap, self.mean_gap) {
            (Some(gap), _) if gap > self.window => None,
            (Some(gap), None) => Some(gap),
            (Some(gap), Some(mean)) => Some(mean.mul_f64(0.9) + gap.mul_f64(0.1)),
            (None, mean) => mean,
        };
        self.last_arrival = Some(now);
    }

    /// An answered client came back `after` its answer.
    pub(super) fn returned(&mut self, after: Duration) {
        self.mean_return = Some(match self.mean_return {
            None => after,
            Some(mean) => mean.mul_f64(0.9) + after.mul_f64(0.1),
        });
    }

    /// How long after an answer its client is usually back by: four times
    /// the mean return (1 ms at least), 5 ms before any is seen.
    pub(super) fn usual_return(&self) -> Duration {
        self.mean_return
            .map_or(RETURN_UNKNOWN, |mean| (mean * 4).max(RETURN_MIN))
    }

    /// Until when the next unprompted arrival is due, when waiting for it
    /// pays: two mean gaps after the last one (an open-loop stream at that
    /// rate brings one by then six times in seven), if the gap is shorter
    /// than a batch's fixed cost, `fixed_us`. A longer wait would cost the
    /// requests waiting more than the execution it saves.
    pub(super) fn next_due(&self, fixed_us: f64) -> Option<Instant> {
        let gap = self.mean_gap?;
        (micros(gap) < fixed_us).then_some(self.last_arrival? + gap * 2)
    }

    /// The mean spacing of the arrivals within the last target's length,
    /// prompted by an answer or not, in µs; `None` with fewer than two.
    pub(super) fn recent_gap_us(&self, now: Instant) -> Option<f64> {
        // In arrival order: those older than the window come first.
        let start = self.recent.partition_point(|&t| now - t > self.window);
        let count = self.recent.len() - start;
        if count < 2 {
            return None;
        }
        let (first, last) = (self.recent[start], *self.recent.back()?);
        Some(micros(last - first) / (count - 1) as f64)
    }

    /// Whether the arrivals that follow answers are their clients coming
    /// back (closed-loop clients, who return together, within a few of
    /// the arrivals' mean spacings) rather than a stream that would have
    /// come anyway (open loop, where the n-th arrival after an answer
    /// comes n spacings later, about half a batch of spacings on average):
    /// only then are they worth waiting for once a batch keeps up.
    pub(super) fn clients_come_back(&self, now: Instant) -> bool {
        match (self.mean_return, self.recent_gap_us(now)) {
            (Some(back), Some(gap)) => micros(back) <= RETURN_SPACINGS * gap,
            _ => true,
        }
    }
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
