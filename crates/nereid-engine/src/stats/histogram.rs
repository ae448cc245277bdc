//! Latency histograms (`--metrics-config histogram_latencies=true`): per
//! model version, bucket counts of each successful request's request,
//! queue and compute durations. They are counted with atomics as requests
//! end, so nothing is sampled or dropped, and because buckets add up,
//! Prometheus can sum them over replicas before `histogram_quantile`,
//! which the summaries' quantiles do not allow.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::RwLock;

use super::{ComputeTimes, saturating_ns};

/// Whether histograms are on; read on every request, so apart from the
/// bounds, which only a version's first request reads.
static ENABLED: AtomicBool = AtomicBool::new(false);
static BOUNDS: RwLock<Option<Arc<[Duration]>>> = RwLock::new(None);

/// Turns the latency histograms on, with these ascending bucket bounds,
/// or off. One setting for the process, as the flag is; a version that
/// already counts keeps the bounds it started with.
pub fn set_latency_histograms(bounds: Option<&[Duration]>) {
    *BOUNDS.write() = bounds.map(Arc::from);
    ENABLED.store(bounds.is_some(), Ordering::Relaxed);
}

pub(super) fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The bounds a version's histograms start with, when histograms are on.
pub(super) fn bounds() -> Option<Arc<[Duration]>> {
    BOUNDS.read().clone()
}

/// Durations counted into buckets.
#[derive(Debug)]
pub struct Histogram {
    bounds: Arc<[Duration]>,
    /// One count per bucket, not cumulative; the last, past every bound,
    /// is the `+Inf` bucket.
    counts: Box<[AtomicU64]>,
    sum_ns: AtomicU64,
}

impl Histogram {
    pub fn new(bounds: Arc<[Duration]>) -> Histogram {
        let counts = (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect();
        Histogram {
            bounds,
            counts,
            sum_ns: AtomicU64::new(0),
        }
    }

    pub fn record(&self, d: Duration) {
        // A Prometheus bucket holds what is at most its bound.
        let bucket = self.bounds.partition_point(|&bound| bound < d);
        if let Some(count) = self.counts.get(bucket) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        self.sum_ns.fetch_add(saturating_ns(d), Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut seen = 0;
        let cumulative = self
            .counts
            .iter()
            .map(|count| {
                seen += count.load(Ordering::Relaxed);
                seen
            })
            .collect();
        HistogramSnapshot {
            bounds: Arc::clone(&self.bounds),
            cumulative,
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
        }
    }
}

/// A point-in-time copy of a [`Histogram`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// The buckets' upper bounds, ascending; the `+Inf` bucket follows.
    pub bounds: Arc<[Duration]>,
    /// How many durations were at most each bound, then the total: one
    /// entry more than `bounds`. Read as one pass, so that it never
    /// decreases and the last entry is the count.
    pub cumulative: Vec<u64>,
    pub sum_ns: u64,
}

impl HistogramSnapshot {
    /// Every duration counted (the `+Inf` bucket).
    pub fn count(&self) -> u64 {
        self.cumulative.last().copied().unwrap_or(0)
    }
}

/// A version's five latency histograms, with the meanings of Triton's
/// latency counters and summaries.
#[derive(Debug)]
pub struct LatencyHistograms {
    request: Histogram,
    queue: Histogram,
    compute_input: Histogram,
    compute_infer: Histogram,
    compute_output: Histogram,
}

impl LatencyHistograms {
    pub fn new(bounds: &Arc<[Duration]>) -> LatencyHistograms {
        let histogram = || Histogram::new(Arc::clone(bounds));
        LatencyHistograms {
            request: histogram(),
            queue: histogram(),
            compute_input: histogram(),
            compute_infer: histogram(),
            compute_output: histogram(),
        }
    }

    pub fn record_success(&self, total: Duration, queue: Duration, compute: ComputeTimes) {
        self.request.record(total);
        self.queue.record(queue);
        self.compute_input.record(compute.input);
        self.compute_infer.record(compute.infer);
        self.compute_output.record(compute.output);
    }

    /// A response from the cache: a request that did not wait, and no
    /// compute (Triton's "includes cached requests" families only).
    pub fn record_cache_hit(&self, total: Duration) {
        self.request.record(total);
        self.queue.record(Duration::ZERO);
    }

    pub fn snapshot(&self) -> LatencyHistogramsSnapshot {
        LatencyHistogramsSnapshot {
            request: self.request.snapshot(),
            queue: self.queue.snapshot(),
            compute_input: self.compute_input.snapshot(),
            compute_infer: self.compute_infer.snapshot(),
            compute_output: self.compute_output.snapshot(),
        }
    }
}

/// A point-in-time copy of [`LatencyHistograms`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatencyHistogramsSnapshot {
    /// End to end, cached responses included.
    pub request: HistogramSnapshot,
    /// Waiting in the scheduler's queue; cached responses count as zero.
    pub queue: HistogramSnapshot,
    pub compute_input: HistogramSnapshot,
    pub compute_infer: HistogramSnapshot,
    pub compute_output: HistogramSnapshot,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_duration_counts_in_the_first_bucket_that_holds_it() {
        let h = Histogram::new(Arc::from([ms(1), ms(5), ms(10)].as_slice()));
        for d in [ms(0), ms(1), ms(2), ms(5), ms(11), ms(100)] {
            h.record(d);
        }
        let s = h.snapshot();
        // At most 1 ms: 0 and 1; at most 5: and 2, 5; at most 10: none more.
        assert_eq!(s.cumulative, [2, 4, 4, 6]);
        assert_eq!(s.count(), 6);
        assert_eq!(s.sum_ns, ms(119).as_nanos() as u64);
    }

    #[test]
    fn no_bounds_leave_one_bucket() {
        let h = Histogram::new(Arc::from(Vec::new()));
        h.record(ms(3));
        assert_eq!(h.snapshot().cumulative, [1]);
    }

    #[test]
    fn a_cache_hit_counts_in_request_and_queue_only() {
        let bounds: Arc<[Duration]> = Arc::from([ms(1)].as_slice());
        let h = LatencyHistograms::new(&bounds);
        h.record_cache_hit(ms(3));
        let compute = ComputeTimes {
            infer: ms(1),
            ..ComputeTimes::default()
        };
        h.record_success(ms(2), Duration::ZERO, compute);
        let s = h.snapshot();
        assert_eq!(s.request.cumulative, [0, 2]);
        assert_eq!(s.queue.cumulative, [2, 2]);
        assert_eq!(s.compute_infer.cumulative, [1, 1]);
        assert_eq!(s.compute_output.count(), 1);
    }
}
