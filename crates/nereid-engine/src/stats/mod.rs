//! Per model-version statistics with Triton's meanings: counts and
//! cumulative nanoseconds for success, failure, queue, compute input,
//! compute infer and compute output, plus per-batch-size execution stats;
//! the requests waiting now; when summaries are wanted, each successful
//! request's latencies until the metrics endpoint takes them; and, when
//! histograms are, their buckets.

mod histogram;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

pub use nereid_scheduler::TargetSnapshot;

pub use histogram::{
    Histogram, HistogramSnapshot, LatencyHistograms, LatencyHistogramsSnapshot,
    set_latency_histograms,
};

/// A count and a cumulative duration.
#[derive(Debug, Default)]
pub struct DurationStat {
    count: AtomicU64,
    ns: AtomicU64,
}

impl DurationStat {
    pub fn record(&self, d: Duration) {
        self.record_n(1, d);
    }

    fn record_n(&self, n: u64, d: Duration) {
        self.count.fetch_add(n, Ordering::Relaxed);
        self.ns.fetch_add(saturating_ns(d), Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> DurationSnapshot {
        DurationSnapshot {
            count: self.count.load(Ordering::Relaxed),
            ns: self.ns.load(Ordering::Relaxed),
        }
    }
}

fn saturating_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A point-in-time copy of a [`DurationStat`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DurationSnapshot {
    pub count: u64,
    pub ns: u64,
}

/// The three compute phases of one execution.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ComputeTimes {
    pub input: Duration,
    pub infer: Duration,
    pub output: Duration,
}

#[derive(Debug, Default)]
struct BatchStat {
    compute_input: DurationSnapshot,
    compute_infer: DurationSnapshot,
    compute_output: DurationSnapshot,
}

/// Whether successful requests keep their latencies for summaries
/// (tritonserver's `--metrics-config summary_latencies=true`); one switch
/// for the process, as the flag is.
static SAMPLING: AtomicBool = AtomicBool::new(false);

/// Samples kept per version between two takes; beyond, new ones are
/// dropped rather than let memory grow while nobody takes them.
const MAX_SAMPLES: usize = 100_000;

/// Turns latency sampling on or off for every model version.
pub fn set_latency_sampling(on: bool) {
    SAMPLING.store(on, Ordering::Relaxed);
}

/// One successful request's latencies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LatencySample {
    pub request: Duration,
    pub queue: Duration,
    pub compute: ComputeTimes,
}

/// Why a request failed, as Triton's `reason` label on
/// `nv_inference_request_failure` says (its fourth, CANCELED, is
/// [`ModelStats::record_cancelled`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureReason {
    /// Refused by the scheduler: a full queue, a queue timeout or policy.
    Rejected,
    /// The backend failed executing it.
    Backend,
    /// Anything else (a request that fails validation, ...).
    Other,
}

/// Failed requests by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FailureCounts {
    pub rejected: u64,
    pub canceled: u64,
    pub backend: u64,
    pub other: u64,
}

/// What the metrics endpoint reads of a version besides its statistics.
#[derive(Debug, Clone, PartialEq)]
pub struct VersionActivity {
    pub name: String,
    pub version: i64,
    /// Requests accepted and not yet executing.
    pub pending: u64,
    /// Latencies sampled since the last take.
    pub samples: Vec<LatencySample>,
    pub failures: FailureCounts,
    /// The batcher's choices, for a model batching to a latency target.
    pub latency_target: Option<TargetSnapshot>,
}

/// Counts a request as pending until dropped (when it starts executing,
/// or leaves the queue any other way).
#[derive(Debug)]
pub struct PendingMark(Arc<ModelStats>);

impl Drop for PendingMark {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Live statistics of one model version.
#[derive(Debug, Default)]
pub struct ModelStats {
    success: DurationStat,
    fail: DurationStat,
    queue: DurationStat,
    compute_input: DurationStat,
    compute_infer: DurationStat,
    compute_output: DurationStat,
    cache_hit: DurationStat,
    cache_miss: DurationStat,
    inference_count: AtomicU64,
    execution_count: AtomicU64,
    last_inference_ms: AtomicU64,
    cancelled: AtomicU64,
    batches: Mutex<BTreeMap<u64, BatchStat>>,
    pending: AtomicU64,
    samples: Mutex<Vec<LatencySample>>,
    rejected: AtomicU64,
    backend_failures: AtomicU64,
    /// Made by the first request counted while histograms are on.
    histograms: OnceLock<LatencyHistograms>,
    /// Sequences the sequence batcher released for being idle; it counts
    /// them here itself.
    pub(crate) sequences_reaped: Arc<AtomicU64>,
}

impl ModelStats {
    /// One request answered successfully after `total` end to end, having
    /// waited `queue` and spent `compute` in its batch.
    pub fn record_success(&self, total: Duration, queue: Duration, compute: ComputeTimes) {
        self.success.record(total);
        self.queue.record(queue);
        self.compute_input.record(compute.input);
        self.compute_infer.record(compute.infer);
        self.compute_output.record(compute.output);
        self.touch();
        if let Some(histograms) = self.histograms() {
            histograms.record_success(total, queue, compute);
        }
        if SAMPLING.load(Ordering::Relaxed) {
            let mut samples = self.samples.lock();
            if samples.len() < MAX_SAMPLES {
                samples.push(LatencySample {
                    request: total,
                    queue,
                    compute,
                });
            }
        }
    }

    /// Counts one more pending request, until the mark is dropped.
    pub fn mark_pending(self: &Arc<Self>) -> PendingMark {
        self.pending.fetch_add(1, Ordering::Relaxed);
        PendingMark(Arc::clone(self))
    }

    /// How many requests were counted queued, and for how long in all.
    pub fn queue_time(&self) -> DurationSnapshot {
        self.queue.snapshot()
    }

    /// Requests accepted and not yet executing.
    pub fn pending(&self) -> u64 {
        self.pending.load(Ordering::Relaxed)
    }

    /// The latencies sampled since the last call.
    pub fn take_samples(&self) -> Vec<LatencySample> {
        std::mem::take(&mut *self.samples.lock())
    }

    /// One request answered from the response cache after `total`, `lookup`
    /// of it spent finding the answer. As in Triton it counts as a success
    /// (and in the queue figures, with no wait), but not in compute.
    pub fn record_cache_hit(&self, total: Duration, lookup: Duration) {
        self.success.record(total);
        self.queue.record(Duration::ZERO);
        self.cache_hit.record(lookup);
        self.touch();
        if let Some(histograms) = self.histograms() {
            histograms.record_cache_hit(total);
        }
    }

    /// The latency histograms, made on first use, while they are on.
    fn histograms(&self) -> Option<&LatencyHistograms> {
        if !histogram::enabled() {
            return None;
        }
        if let Some(histograms) = self.histograms.get() {
            return Some(histograms);
        }
        let bounds = histogram::bounds()?;
        Some(
            self.histograms
                .get_or_init(|| LatencyHistograms::new(&bounds)),
        )
    }

    /// One request the response cache could not answer; `lookup` covers
    /// looking for it and inserting the new answer.
    pub fn record_cache_miss(&self, lookup: Duration) {
        self.cache_miss.record(lookup);
    }

    /// One request that failed, for a reason other than those
    /// [`ModelStats::record_failure_for`] names.
    pub fn record_failure(&self, total: Duration) {
        self.fail.record(total);
        self.touch();
    }

    /// One request that failed for `reason`.
    pub fn record_failure_for(&self, total: Duration, reason: FailureReason) {
        match reason {
            FailureReason::Rejected => self.rejected.fetch_add(1, Ordering::Relaxed),
            FailureReason::Backend => self.backend_failures.fetch_add(1, Ordering::Relaxed),
            FailureReason::Other => 0,
        };
        self.record_failure(total);
    }

    /// Failed requests by reason; OTHER is every failure not counted
    /// under another reason.
    pub fn failures(&self) -> FailureCounts {
        let rejected = self.rejected.load(Ordering::Relaxed);
        let backend = self.backend_failures.load(Ordering::Relaxed);
        let all = self.fail.snapshot().count;
        FailureCounts {
            rejected,
            canceled: self.cancelled.load(Ordering::Relaxed),
            backend,
            other: all.saturating_sub(rejected + backend),
        }
    }

    /// A request dropped before it ran because its client went away.
    pub fn record_cancelled(&self) {
        self.cancelled.fetch_add(1, Ordering::Relaxed);
    }

    /// One execution of a batch of `batch_size` inferences.
    pub fn record_execution(&self, batch_size: u64, compute: ComputeTimes) {
        self.execution_count.fetch_add(1, Ordering::Relaxed);
        self.inference_count
            .fetch_add(batch_size, Ordering::Relaxed);
        let mut batches = self.batches.lock();
        let entry = batches.entry(batch_size).or_default();
        add(&mut entry.compute_input, compute.input);
        add(&mut entry.compute_infer, compute.infer);
        add(&mut entry.compute_output, compute.output);
    }

    fn touch(&self) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let ms = u64::try_from(now.as_millis()).unwrap_or(u64::MAX);
        self.last_inference_ms.store(ms, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        let batches = self.batches.lock();
        StatsSnapshot {
            success: self.success.snapshot(),
            fail: self.fail.snapshot(),
            queue: self.queue.snapshot(),
            compute_input: self.compute_input.snapshot(),
            compute_infer: self.compute_infer.snapshot(),
            compute_output: self.compute_output.snapshot(),
            cache_hit: self.cache_hit.snapshot(),
            cache_miss: self.cache_miss.snapshot(),
            inference_count: self.inference_count.load(Ordering::Relaxed),
            execution_count: self.execution_count.load(Ordering::Relaxed),
            last_inference_ms: self.last_inference_ms.load(Ordering::Relaxed),
            cancelled: self.cancelled.load(Ordering::Relaxed),
            sequences_reaped: self.sequences_reaped.load(Ordering::Relaxed),
            latency_histograms: self.histograms.get().map(LatencyHistograms::snapshot),
            batches: batches
                .iter()
                .map(|(&batch_size, b)| BatchSnapshot {
                    batch_size,
                    compute_input: b.compute_input,
                    compute_infer: b.compute_infer,
                    compute_output: b.compute_output,
                })
                .collect(),
        }
    }
}

fn add(s: &mut DurationSnapshot, d: Duration) {
    s.count += 1;
    s.ns = s.ns.saturating_add(saturating_ns(d));
}

/// Executions of one batch size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchSnapshot {
    pub batch_size: u64,
    pub compute_input: DurationSnapshot,
    pub compute_infer: DurationSnapshot,
    pub compute_output: DurationSnapshot,
}

/// A point-in-time copy of [`ModelStats`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub success: DurationSnapshot,
    pub fail: DurationSnapshot,
    pub queue: DurationSnapshot,
    pub compute_input: DurationSnapshot,
    pub compute_infer: DurationSnapshot,
    pub compute_output: DurationSnapshot,
    /// Requests answered from the response cache, and the time it took.
    pub cache_hit: DurationSnapshot,
    /// Requests the cache could not answer, and the time spent on it.
    pub cache_miss: DurationSnapshot,
    pub inference_count: u64,
    pub execution_count: u64,
    /// Milliseconds since the epoch of the last request; 0 if none.
    pub last_inference_ms: u64,
    pub cancelled: u64,
    /// Sequences released for being idle (`max_sequence_idle_microseconds`).
    pub sequences_reaped: u64,
    /// The latency histograms, once histograms are on and a request was
    /// counted in them.
    pub latency_histograms: Option<LatencyHistogramsSnapshot>,
    pub batches: Vec<BatchSnapshot>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executions_count_inferences_per_batch() {
        let stats = ModelStats::default();
        let t = ComputeTimes {
            input: Duration::from_micros(1),
            ..Default::default()
        };
        stats.record_execution(4, t);
        stats.record_execution(1, t);
        stats.record_execution(4, t);
        let s = stats.snapshot();
        assert_eq!(s.execution_count, 3);
        assert_eq!(s.inference_count, 9);
        assert_eq!(s.batches.len(), 2);
        assert_eq!(s.batches[1].batch_size, 4);
        assert_eq!(
            s.batches[1].compute_input,
            DurationSnapshot { count: 2, ns: 2000 }
        );
    }

    #[test]
    fn failures_are_counted_by_reason() {
        let stats = ModelStats::default();
        let d = Duration::from_micros(5);
        stats.record_failure(d);
        stats.record_failure_for(d, FailureReason::Rejected);
        stats.record_failure_for(d, FailureReason::Backend);
        stats.record_failure_for(d, FailureReason::Backend);
        stats.record_cancelled();
        let f = stats.failures();
        assert_eq!(
            f,
            FailureCounts {
                rejected: 1,
                canceled: 1,
                backend: 2,
                other: 1
            }
        );
        assert_eq!(stats.snapshot().fail.count, 4);
    }

    #[test]
    fn pending_marks_count_until_dropped() {
        let stats = Arc::new(ModelStats::default());
        let a = stats.mark_pending();
        let b = stats.mark_pending();
        assert_eq!(stats.pending(), 2);
        drop(a);
        assert_eq!(stats.pending(), 1);
        drop(b);
        assert_eq!(stats.pending(), 0);
    }

    #[test]
    fn samples_are_kept_only_when_sampling_and_taken_once() {
        let stats = ModelStats::default();
        let ms = Duration::from_millis(1);
        set_latency_sampling(true);
        stats.record_success(ms, ms, ComputeTimes::default());
        set_latency_sampling(false);
        stats.record_success(ms, ms, ComputeTimes::default());
        let taken = stats.take_samples();
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].request, ms);
        assert!(stats.take_samples().is_empty());
    }

    #[test]
    fn histograms_count_while_they_are_on() {
        let stats = ModelStats::default();
        let ms = Duration::from_millis(1);
        stats.record_success(ms, ms, ComputeTimes::default());
        assert_eq!(stats.snapshot().latency_histograms, None);
        set_latency_histograms(Some(&[ms, 2 * ms]));
        stats.record_success(ms, ms, ComputeTimes::default());
        stats.record_cache_hit(3 * ms, ms);
        set_latency_histograms(None);
        stats.record_success(ms, ms, ComputeTimes::default());
        let histograms = stats.snapshot().latency_histograms.unwrap();
        assert_eq!(histograms.request.cumulative, [1, 1, 2]);
        assert_eq!(histograms.queue.cumulative, [2, 2, 2]);
        assert_eq!(histograms.compute_infer.count(), 1);
    }
}
