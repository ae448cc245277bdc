//! What a batch costs, learnt from the batches a model ran: a
//! recency-weighted least-squares line `cost(b) = a + c·b` over batch size
//! `b`, with the spread of the measurements around it. Plain numbers, no
//! clock: the planner (`target.rs`) feeds it and asks it.

use std::time::Duration;

/// The weight an observation keeps after each later one: the fit forgets
/// about half of what it saw in 35 batches, so it follows a model whose
/// cost drifts (a busier machine) within a second of load.
const DECAY: f64 = 0.98;

/// How many spreads (standard deviations) a pessimistic prediction adds:
/// about the 97.7th percentile of a normal spread.
const SPREADS: f64 = 2.0;

/// A measurement further above the line than this many spreads (or half
/// the prediction, when the spread is still small) counts as only that
/// far: one execution that stalled (the first of a new batch shape, which
/// grows ONNX Runtime's arena; a preempted thread) would otherwise skew
/// the line and inflate the spread for dozens of batches, and every
/// admission in that time with it. A cost that really rose still pulls
/// the line up, by that much a batch.
const OUTLIER_SPREADS: f64 = 4.0;
/// Observations before outliers are clipped: the first ones are the line.
const CLIP_AFTER: u64 = 8;

/// A recency-weighted linear fit of batch cost against batch size.
#[derive(Debug, Clone, Default)]
pub struct CostModel {
    /// Decayed sums: weights, sizes, costs (µs), sizes², sizes·costs.
    s0: f64,
    sx: f64,
    sy: f64,
    sxx: f64,
    sxy: f64,
    /// Decayed mean of the squared residuals against the fit before each
    /// observation, in µs².
    residual: f64,
    observations: u64,
}

/// The fitted line and its spread, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fit {
    /// Fixed cost of a batch.
    pub intercept_us: f64,
    /// Cost of each inference in it.
    pub per_inference_us: f64,
    /// Standard deviation of measured costs around the line.
    pub spread_us: f64,
}

impl CostModel {
    /// Adds one execution of `size` inferences that took `cost`.
    pub fn observe(&mut self, size: u64, cost: Duration) {
        let x = size.max(1) as f64;
        let mut y = cost.as_secs_f64() * 1e6;
        // Only a line fitted to two sizes or more says anything about the
        // spread; a guessed slope's error would count as noise.
        if let Some((a, c, true)) = self.line() {
            let predicted = a + c * x;
            if self.observations >= CLIP_AFTER {
                let allowed = (OUTLIER_SPREADS * self.residual.sqrt()).max(0.5 * predicted);
                y = y.min(predicted + allowed);
            }
            let error = y - predicted;
            self.residual = DECAY * self.residual + (1.0 - DECAY) * error * error;
        }
        self.s0 = DECAY * self.s0 + 1.0;
        self.sx = DECAY * self.sx + x;
        self.sy = DECAY * self.sy + y;
        self.sxx = DECAY * self.sxx + x * x;
        self.sxy = DECAY * self.sxy + x * y;
        self.observations += 1;
    }

    /// How many executions it has seen.
    pub fn observations(&self) -> u64 {
        self.observations
    }

    /// The line, or `None` before any execution. With one batch size seen
    /// so far the slope is unknown; the cost is then taken as proportional
    /// to the size, which over-estimates larger batches rather than
    /// under-estimating them.
    pub fn fit(&self) -> Option<Fit> {
        let (a, c, _) = self.line()?;
        Some(Fit {
            intercept_us: a,
            per_inference_us: c,
            spread_us: self.residual.sqrt(),
        })
    }

    /// Intercept and slope in µs, and whether the sizes seen vary enough
    /// to fit a slope (otherwise it is guessed).
    fn line(&self) -> Option<(f64, f64, bool)> {
        if self.observations == 0 {
            return None;
        }
        let (mean_x, mean_y) = (self.sx / self.s0, self.sy / self.s0);
        let variance_x = self.sxx / self.s0 - mean_x * mean_x;
        let sloped = variance_x > 1e-6 * mean_x * mean_x;
        let (mut a, mut c) = if sloped {
            let c = (self.sxy / self.s0 - mean_x * mean_y) / variance_x;
            (mean_y - c * mean_x, c)
        } else {
            (0.0, mean_y / mean_x)
        };
        // Larger batches never cost less, and no batch costs nothing.
        if c < 0.0 {
            (a, c) = (mean_y, 0.0);
        } else if a < 0.0 {
            (a, c) = (0.0, mean_y / mean_x);
        }
        Some((a, c, sloped))
    }

    /// The expected cost of a batch of `size`.
    pub fn predict(&self, size: u64) -> Option<Duration> {
        let fit = self.fit()?;
        Some(micros(
            fit.intercept_us + fit.per_inference_us * size as f64,
        ))
    }

    /// The margin [`CostModel::pessimistic`] adds to a prediction.
    pub fn margin(&self) -> Option<Duration> {
        let fit = self.fit()?;
        Some(micros(SPREADS * fit.spread_us))
    }

    /// A cost that a batch of `size` rarely exceeds: the expected one plus
    /// two spreads.
    pub fn pessimistic(&self, size: u64) -> Option<Duration> {
        let fit = self.fit()?;
        let mean = fit.intercept_us + fit.per_inference_us * size as f64;
        Some(micros(mean + SPREADS * fit.spread_us))
    }
}

/// Whole microseconds: the planner needs no finer, and round numbers keep
/// its choices exact.
fn micros(us: f64) -> Duration {
    Duration::from_micros(us.clamp(0.0, 1e12).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: f64) -> Duration {
        Duration::from_secs_f64(v / 1000.0)
    }

    #[test]
    fn recovers_a_line_from_exact_costs() {
        let mut model = CostModel::default();
        assert_eq!(model.fit(), None);
        for size in [1, 4, 2, 8, 16, 3] {
            model.observe(size, ms(5.0 + 0.5 * size as f64));
        }
        let fit = model.fit().unwrap();
        assert!((fit.intercept_us - 5000.0).abs() < 1.0, "{fit:?}");
        assert!((fit.per_inference_us - 500.0).abs() < 0.1, "{fit:?}");
        assert!(fit.spread_us < 1.0, "{fit:?}");
        let predicted = model.predict(32).unwrap().as_secs_f64() * 1e3;
        assert!((predicted - 21.0).abs() < 0.01, "{predicted}");
    }

    #[test]
    fn one_size_seen_scales_in_proportion() {
        let mut model = CostModel::default();
        model.observe(4, ms(8.0));
        model.observe(4, ms(8.0));
        assert_eq!(model.predict(4), Some(ms(8.0)));
        assert_eq!(model.predict(8), Some(ms(16.0)));
    }

    #[test]
    fn follows_a_cost_that_changed() {
        let mut model = CostModel::default();
        for i in 0..200 {
            model.observe(1 + i % 8, ms(1.0 + 1.0 * (1 + i % 8) as f64));
        }
        for i in 0..200 {
            model.observe(1 + i % 8, ms(2.0 + 3.0 * (1 + i % 8) as f64));
        }
        let fit = model.fit().unwrap();
        assert!((fit.intercept_us - 2000.0).abs() < 100.0, "{fit:?}");
        assert!((fit.per_inference_us - 3000.0).abs() < 50.0, "{fit:?}");
    }

    #[test]
    fn noise_widens_the_pessimistic_cost() {
        let mut model = CostModel::default();
        for i in 0..400u64 {
            // Alternates every cycle of sizes, so the line cannot absorb it.
            let jitter = if (i / 4) % 2 == 0 { 1.0 } else { -1.0 };
            model.observe(1 + i % 4, ms(4.0 + (1 + i % 4) as f64 + jitter));
        }
        let mean = model.predict(2).unwrap();
        let high = model.pessimistic(2).unwrap();
        let spread = model.fit().unwrap().spread_us;
        assert!((spread - 1000.0).abs() < 150.0, "{spread}");
        assert!(high > mean + ms(1.5), "{mean:?} {high:?}");
    }

    #[test]
    fn one_stalled_execution_moves_the_line_and_the_spread_only_a_little() {
        let mut model = CostModel::default();
        for i in 0..40u64 {
            let jitter = if i % 2 == 0 { 0.2 } else { -0.2 };
            model.observe(1 + i % 8, ms(4.0 + 0.5 * (1 + i % 8) as f64 + jitter));
        }
        let before = model.fit().unwrap();
        // A batch of 4 (6 ms expected) that took 150 ms.
        model.observe(4, ms(150.0));
        let after = model.fit().unwrap();
        assert!(after.spread_us < 1000.0, "{before:?} then {after:?}");
        let predicted = model.predict(4).unwrap().as_secs_f64() * 1e3;
        assert!(predicted < 6.5, "{predicted} ms");
        // A cost that really rose is followed, a clipped step at a time.
        for i in 0..200u64 {
            model.observe(1 + i % 8, ms(12.0 + 1.5 * (1 + i % 8) as f64));
        }
        let predicted = model.predict(4).unwrap().as_secs_f64() * 1e3;
        assert!((predicted - 18.0).abs() < 1.0, "{predicted} ms");
    }

    #[test]
    fn a_falling_cost_is_never_fitted_below_zero() {
        let mut model = CostModel::default();
        model.observe(1, ms(10.0));
        model.observe(8, ms(2.0));
        let fit = model.fit().unwrap();
        assert_eq!(fit.per_inference_us, 0.0);
        assert!(fit.intercept_us > 0.0);
    }
}
