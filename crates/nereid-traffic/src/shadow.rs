//! Shadow traffic: copies of a share of a model's requests run on another
//! version, beside the answers the clients get. A copy waits in a bounded
//! queue and is dropped (and counted) when the queue is full; one worker
//! per model runs them one at a time, so the shadow never holds more than
//! one execution and never delays an answer. Its outcome is compared with
//! the answer the client got and reported, never returned.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use nereid_core::{DataType, Error, InferRequest, InferResponse, Tensor};
use tokio::sync::{mpsc, oneshot};

use super::{RouteObserver, Served, ShadowOutcome, ShadowRecord};

/// How shadow copies fared, per model.
#[derive(Debug, Default)]
pub struct ShadowCounters {
    pub matched: AtomicU64,
    pub mismatched: AtomicU64,
    pub failed: AtomicU64,
    pub dropped: AtomicU64,
}

/// A snapshot of [`ShadowCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShadowCounts {
    pub matched: u64,
    pub mismatched: u64,
    pub failed: u64,
    pub dropped: u64,
}

impl ShadowCounters {
    pub fn snapshot(&self) -> ShadowCounts {
        ShadowCounts {
            matched: self.matched.load(Ordering::Relaxed),
            mismatched: self.mismatched.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }
}

/// One copy to run: the request, the version it runs on, and where the
/// client's answer will arrive for the comparison.
pub struct ShadowJob<V> {
    pub request: InferRequest,
    pub shadow: Arc<V>,
    pub primary_version: i64,
    pub tolerance: f64,
    pub answer: oneshot::Receiver<Result<InferResponse, String>>,
}

/// The sending side of a model's shadow queue.
pub struct ShadowQueue<V> {
    sender: mpsc::Sender<ShadowJob<V>>,
    capacity: usize,
}

impl<V> Clone for ShadowQueue<V> {
    fn clone(&self) -> Self {
        ShadowQueue {
            sender: self.sender.clone(),
            capacity: self.capacity,
        }
    }
}

impl<V: Served> ShadowQueue<V> {
    /// Starts the worker on the current runtime; `None` outside one.
    pub fn start(
        model: String,
        capacity: usize,
        counters: Arc<ShadowCounters>,
        observer: Arc<dyn RouteObserver>,
    ) -> Option<ShadowQueue<V>> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (sender, receiver) = mpsc::channel(capacity);
        runtime.spawn(run(model, receiver, counters, observer));
        Some(ShadowQueue { sender, capacity })
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Queues `job`, or drops it when the queue is full; `false` if dropped.
    pub fn offer(&self, job: ShadowJob<V>, counters: &ShadowCounters) -> bool {
        let queued = self.sender.try_send(job).is_ok();
        if !queued {
            counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
        queued
    }
}

impl<V: Served> std::fmt::Debug for ShadowJob<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShadowJob")
            .field("model", &self.request.model_name)
            .field("shadow", &self.shadow.version())
            .finish_non_exhaustive()
    }
}

async fn run<V: Served>(
    model: String,
    mut jobs: mpsc::Receiver<ShadowJob<V>>,
    counters: Arc<ShadowCounters>,
    observer: Arc<dyn RouteObserver>,
) {
    while let Some(job) = jobs.recv().await {
        let started = Instant::now();
        let request_id = job.request.id.clone();
        let shadow_version = job.shadow.version();
        let shadowed = job.shadow.infer(job.request).await;
        let latency = started.elapsed();
        // The client's answer; a request the client dropped has none.
        let Ok(primary) = job.answer.await else {
            continue;
        };
        let outcome = judge(primary, shadowed, job.tolerance);
        let counter = match &outcome {
            ShadowOutcome::Match => &counters.matched,
            ShadowOutcome::Mismatch { .. } => &counters.mismatched,
            ShadowOutcome::Failed(_) | ShadowOutcome::PrimaryFailed(_) => &counters.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        observer.shadowed(ShadowRecord {
            model: model.clone(),
            primary_version: job.primary_version,
            shadow_version,
            request_id,
            latency,
            outcome,
        });
    }
}

fn judge(
    primary: Result<InferResponse, String>,
    shadow: Result<InferResponse, Error>,
    tolerance: f64,
) -> ShadowOutcome {
    match (primary, shadow) {
        (_, Err(e)) => ShadowOutcome::Failed(e.message().to_string()),
        (Err(e), Ok(_)) => ShadowOutcome::PrimaryFailed(e),
        (Ok(primary), Ok(shadow)) => compare(&primary.outputs, &shadow.outputs, tolerance),
    }
}

/// Compares the shadow's outputs with the served ones: same names,
/// datatypes and shapes, and numbers within `tolerance` (other data equal).
pub fn compare(primary: &[Tensor], shadow: &[Tensor], tolerance: f64) -> ShadowOutcome {
    let mismatch = |output: &str, detail: String| ShadowOutcome::Mismatch {
        output: output.to_string(),
        detail,
    };
    for served in primary {
        let Some(other) = shadow.iter().find(|t| t.name == served.name) else {
            return mismatch(&served.name, "missing from the shadow's answer".into());
        };
        if other.datatype != served.datatype || other.shape != served.shape {
            return mismatch(
                &served.name,
                format!(
                    "{} {:?} served, {} {:?} from the shadow",
                    served.datatype.wire_name(),
                    served.shape,
                    other.datatype.wire_name(),
                    other.shape
                ),
            );
        }
        match max_difference(served, other) {
            Some(diff) if diff <= tolerance => {}
            Some(diff) => {
                return mismatch(&served.name, format!("elements differ by up to {diff}"));
            }
            None if served.data == other.data => {}
            None => return mismatch(&served.name, "the data differ".into()),
        }
    }
    ShadowOutcome::Match
}

/// The largest difference between two numeric tensors of one datatype and
/// shape; `None` for datatypes compared byte for byte.
fn max_difference(a: &Tensor, b: &Tensor) -> Option<f64> {
    let values = |t: &Tensor| -> Option<Vec<f64>> {
        let size = t.datatype.element_size()?;
        let read: fn(&[u8]) -> f64 = match t.datatype {
            DataType::Fp32 => |c| f64::from(f32::from_le_bytes(array(c))),
            DataType::Fp64 => |c| f64::from_le_bytes(array(c)),
            DataType::Int32 => |c| f64::from(i32::from_le_bytes(array(c))),
            DataType::Int64 => |c| i64::from_le_bytes(array(c)) as f64,
            _ => return None,
        };
        Some(t.data.chunks_exact(size).map(read).collect())
    };
    let (a, b) = (values(a)?, values(b)?);
    if a.len() != b.len() {
        return Some(f64::INFINITY);
    }
    Some(
        a.iter()
            .zip(&b)
            .map(|(x, y)| if x == y { 0.0 } else { (x - y).abs() })
            .fold(
                0.0,
                |m: f64, d| if d.is_nan() { f64::INFINITY } else { m.max(d) },
            ),
    )
}

/// The `N` bytes of an element (`chunks_exact` hands exactly `N`).
fn array<const N: usize>(chunk: &[u8]) -> [u8; N] {
    let mut element = [0; N];
    element.copy_from_slice(chunk);
    element
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn fp32(name: &str, values: &[f32]) -> Tensor {
        Tensor {
            name: name.into(),
            datatype: DataType::Fp32,
            shape: vec![values.len() as i64],
            data: Bytes::from(
                values
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect::<Vec<_>>(),
            ),
        }
    }

    #[test]
    fn outputs_match_within_the_tolerance() {
        let served = [fp32("y", &[1.0, 2.0])];
        assert_eq!(
            compare(&served, &[fp32("y", &[1.0, 2.0])], 0.0),
            ShadowOutcome::Match
        );
        assert_eq!(
            compare(&served, &[fp32("y", &[1.0, 2.001])], 0.01),
            ShadowOutcome::Match
        );
        let ShadowOutcome::Mismatch { output, detail } =
            compare(&served, &[fp32("y", &[1.0, 2.5])], 0.01)
        else {
            panic!("a difference of 0.5 passed");
        };
        assert_eq!(output, "y");
        assert!(detail.contains("0.5"), "{detail}");
        assert!(matches!(
            compare(&served, &[fp32("z", &[1.0, 2.0])], 0.0),
            ShadowOutcome::Mismatch { .. }
        ));
        assert!(matches!(
            compare(&served, &[fp32("y", &[1.0])], 0.0),
            ShadowOutcome::Mismatch { .. }
        ));
        assert!(matches!(
            compare(&served, &[fp32("y", &[1.0, f32::NAN])], 1.0),
            ShadowOutcome::Mismatch { .. }
        ));
    }
}
