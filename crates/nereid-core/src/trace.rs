//! Request traces (Triton's trace extension): the timestamps, and at the
//! TENSORS level the tensors, of one sampled request on its way through a
//! frontend, the engine and an instance. A frontend samples a [`Trace`]
//! and puts it on the [`crate::InferRequest`]; whoever handles the request
//! records what it does. An ensemble's steps get child traces. When the
//! last handle of a root trace is dropped, its [`TraceRecord`] (with its
//! children's) goes to the [`TraceSink`] that sampled it.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use parking_lot::Mutex;

use crate::{DataType, Shape};

/// The points of a request's life a trace timestamps, named as Triton
/// names them in its trace files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    HttpRecvStart,
    HttpRecvEnd,
    HttpSendStart,
    HttpSendEnd,
    GrpcWaitreadStart,
    GrpcWaitreadEnd,
    GrpcSendStart,
    GrpcSendEnd,
    RequestStart,
    QueueStart,
    ComputeStart,
    ComputeInputEnd,
    ComputeOutputStart,
    ComputeEnd,
    InferResponseComplete,
    RequestEnd,
}

impl Activity {
    pub fn name(self) -> &'static str {
        match self {
            Activity::HttpRecvStart => "HTTP_RECV_START",
            Activity::HttpRecvEnd => "HTTP_RECV_END",
            Activity::HttpSendStart => "HTTP_SEND_START",
            Activity::HttpSendEnd => "HTTP_SEND_END",
            Activity::GrpcWaitreadStart => "GRPC_WAITREAD_START",
            Activity::GrpcWaitreadEnd => "GRPC_WAITREAD_END",
            Activity::GrpcSendStart => "GRPC_SEND_START",
            Activity::GrpcSendEnd => "GRPC_SEND_END",
            Activity::RequestStart => "REQUEST_START",
            Activity::QueueStart => "QUEUE_START",
            Activity::ComputeStart => "COMPUTE_START",
            Activity::ComputeInputEnd => "COMPUTE_INPUT_END",
            Activity::ComputeOutputStart => "COMPUTE_OUTPUT_START",
            Activity::ComputeEnd => "COMPUTE_END",
            Activity::InferResponseComplete => "INFER_RESPONSE_COMPLETE",
            Activity::RequestEnd => "REQUEST_END",
        }
    }

    /// Whether a frontend (rather than the engine) records it: it belongs
    /// to the request the client sent, not to an ensemble's steps.
    pub fn is_frontend(self) -> bool {
        matches!(
            self,
            Activity::HttpRecvStart
                | Activity::HttpRecvEnd
                | Activity::HttpSendStart
                | Activity::HttpSendEnd
                | Activity::GrpcWaitreadStart
                | Activity::GrpcWaitreadEnd
                | Activity::GrpcSendStart
                | Activity::GrpcSendEnd
                | Activity::InferResponseComplete
        )
    }
}

/// Where a traced tensor was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorActivity {
    /// An input, as the request entered the model's queue.
    QueueInput,
    /// An output, as the backend produced it.
    BackendOutput,
}

impl TensorActivity {
    pub fn name(self) -> &'static str {
        match self {
            TensorActivity::QueueInput => "TENSOR_QUEUE_INPUT",
            TensorActivity::BackendOutput => "TENSOR_BACKEND_OUTPUT",
        }
    }
}

/// What a trace records, in the order it happened.
#[derive(Debug, Clone, PartialEq)]
pub enum TraceEvent {
    /// `ns` on the monotonic clock ([`monotonic_ns`]).
    Timestamp { activity: Activity, ns: u64 },
    Tensor {
        activity: TensorActivity,
        name: String,
        datatype: DataType,
        shape: Shape,
        /// The raw little-endian data (or `BYTES` framing).
        data: bytes::Bytes,
    },
}

/// Which details a trace collects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TraceLevel {
    pub timestamps: bool,
    pub tensors: bool,
}

impl TraceLevel {
    pub fn is_off(self) -> bool {
        !self.timestamps && !self.tensors
    }
}

/// A finished trace: one request's, with those of the requests it made
/// (an ensemble's steps), each with its own id and this one's as parent.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TraceRecord {
    pub id: u64,
    pub parent_id: Option<u64>,
    /// The model and version that served it; `None` when the request
    /// never reached one (an unknown model, a malformed request).
    pub model: Option<(String, i64)>,
    pub request_id: String,
    /// The W3C `traceparent` the client sent, for OpenTelemetry export.
    pub traceparent: Option<String>,
    pub events: Vec<TraceEvent>,
    pub children: Vec<TraceRecord>,
}

impl TraceRecord {
    /// When `activity` happened, if it was recorded.
    pub fn timestamp(&self, activity: Activity) -> Option<u64> {
        self.events.iter().find_map(|e| match e {
            TraceEvent::Timestamp { activity: a, ns } if *a == activity => Some(*ns),
            _ => None,
        })
    }
}

/// Receives finished root traces.
pub trait TraceSink: Send + Sync {
    fn finish(&self, record: TraceRecord);
}

/// A sampled request's trace. Cheap to clone; clones record into the same
/// trace.
#[derive(Clone)]
pub struct Trace {
    inner: Arc<Inner>,
}

struct Inner {
    level: TraceLevel,
    record: Mutex<TraceRecord>,
    /// Where the record goes when the last handle is dropped: a root's
    /// sink, or a child's parent.
    owner: Owner,
}

enum Owner {
    Sink(Arc<dyn TraceSink>),
    Parent(Trace),
}

/// Trace ids are unique in the process, as Triton's.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Trace {
    /// Starts a root trace whose record goes to `sink`.
    pub fn new(level: TraceLevel, sink: Arc<dyn TraceSink>) -> Trace {
        Trace::with_owner(level, None, Owner::Sink(sink))
    }

    /// A trace of a request this one's request makes (an ensemble step).
    pub fn child(&self) -> Trace {
        let parent_id = self.id();
        Trace::with_owner(
            self.inner.level,
            Some(parent_id),
            Owner::Parent(self.clone()),
        )
    }

    fn with_owner(level: TraceLevel, parent_id: Option<u64>, owner: Owner) -> Trace {
        let record = TraceRecord {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            parent_id,
            ..TraceRecord::default()
        };
        Trace {
            inner: Arc::new(Inner {
                level,
                record: Mutex::new(record),
                owner,
            }),
        }
    }

    pub fn id(&self) -> u64 {
        self.lock().id
    }

    pub fn level(&self) -> TraceLevel {
        self.inner.level
    }

    /// Whether the trace keeps tensors (the TENSORS level).
    pub fn wants_tensors(&self) -> bool {
        self.inner.level.tensors
    }

    /// Names the model and version serving the request, and its id.
    pub fn set_model(&self, name: &str, version: i64, request_id: &str) {
        let mut record = self.lock();
        record.model = Some((name.to_string(), version));
        record.request_id = request_id.to_string();
    }

    /// Keeps the client's W3C `traceparent` header.
    pub fn set_traceparent(&self, traceparent: String) {
        self.lock().traceparent = Some(traceparent);
    }

    /// Records `activity` as happening now.
    pub fn record(&self, activity: Activity) {
        self.record_at(activity, Instant::now());
    }

    /// Records `activity` as happening at `at`. Timestamps are kept only
    /// at the TIMESTAMPS level.
    pub fn record_at(&self, activity: Activity, at: Instant) {
        if self.inner.level.timestamps {
            let ns = monotonic_ns(at);
            self.lock()
                .events
                .push(TraceEvent::Timestamp { activity, ns });
        }
    }

    /// Records a tensor at the TENSORS level; `data` is shared, not copied.
    pub fn record_tensor(
        &self,
        activity: TensorActivity,
        name: &str,
        datatype: DataType,
        shape: &[i64],
        data: &bytes::Bytes,
    ) {
        if self.inner.level.tensors {
            self.lock().events.push(TraceEvent::Tensor {
                activity,
                name: name.to_string(),
                datatype,
                shape: shape.to_vec(),
                data: data.clone(),
            });
        }
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, TraceRecord> {
        self.inner.record.lock()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let record = std::mem::take(self.record.get_mut());
        match &self.owner {
            Owner::Sink(sink) => sink.finish(record),
            Owner::Parent(parent) => parent.lock().children.push(record),
        }
    }
}

impl fmt::Debug for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Trace").field("id", &self.id()).finish()
    }
}

/// Two handles are equal when they record into the same trace.
impl PartialEq for Trace {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// `at` in nanoseconds of the monotonic clock (`CLOCK_MONOTONIC`, time
/// since boot), the clock Triton's trace files use.
pub fn monotonic_ns(at: Instant) -> u64 {
    static ANCHOR: OnceLock<(Instant, u64)> = OnceLock::new();
    let (anchor, anchor_ns) = *ANCHOR.get_or_init(|| {
        let now = Instant::now();
        let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        let ns = u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000
            + u64::try_from(ts.tv_nsec).unwrap_or(0);
        (now, ns)
    });
    let offset = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    match at.checked_duration_since(anchor) {
        Some(after) => anchor_ns.saturating_add(offset(after)),
        None => anchor_ns.saturating_sub(offset(anchor - at)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Collect(Mutex<Vec<TraceRecord>>);

    impl TraceSink for Collect {
        fn finish(&self, record: TraceRecord) {
            self.0.lock().push(record);
        }
    }

    const ALL: TraceLevel = TraceLevel {
        timestamps: true,
        tensors: true,
    };

    #[test]
    fn a_root_goes_to_its_sink_with_its_children_once_the_last_handle_drops() {
        let sink = Arc::new(Collect::default());
        let root = Trace::new(ALL, sink.clone());
        root.set_model("ens", 1, "r1");
        root.record(Activity::RequestStart);
        let child = root.child();
        child.set_model("step", 3, "");
        child.record(Activity::ComputeStart);
        let copy = root.clone();
        drop(root);
        drop(child);
        assert!(sink.0.lock().is_empty());
        copy.record(Activity::RequestEnd);
        drop(copy);
        let records = sink.0.lock();
        assert_eq!(records.len(), 1);
        let root = &records[0];
        assert_eq!(root.model, Some(("ens".into(), 1)));
        assert_eq!(root.request_id, "r1");
        assert_eq!(root.parent_id, None);
        assert_eq!(root.children.len(), 1);
        assert_eq!(root.children[0].parent_id, Some(root.id));
        assert_ne!(root.children[0].id, root.id);
        let start = root.timestamp(Activity::RequestStart).unwrap();
        let end = root.timestamp(Activity::RequestEnd).unwrap();
        assert!(start <= end);
        assert!(root.children[0].timestamp(Activity::ComputeStart).is_some());
    }

    #[test]
    fn the_level_decides_what_is_kept() {
        let sink = Arc::new(Collect::default());
        let only_tensors = TraceLevel {
            timestamps: false,
            tensors: true,
        };
        let trace = Trace::new(only_tensors, sink.clone());
        trace.record(Activity::RequestStart);
        trace.record_tensor(
            TensorActivity::QueueInput,
            "IN",
            DataType::Int32,
            &[1],
            &bytes::Bytes::from_static(&[1, 0, 0, 0]),
        );
        drop(trace);
        let records = sink.0.lock();
        assert_eq!(records[0].events.len(), 1);
        assert!(matches!(records[0].events[0], TraceEvent::Tensor { .. }));
    }

    #[test]
    fn the_clock_is_monotonic_and_since_boot() {
        let before = Instant::now();
        let after = before + std::time::Duration::from_micros(5);
        assert_eq!(monotonic_ns(after) - monotonic_ns(before), 5_000);
        let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        let now = monotonic_ns(Instant::now());
        let clock = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
        assert!(now.abs_diff(clock) < 1_000_000_000);
    }
}
