//! The route log (`--route-log FILE`): one JSON line per request to a
//! model with traffic settings (which version answered, how it was
//! chosen, its latency, and for a sampled share its inputs and outputs),
//! and one per shadow comparison. It is what an offline analysis reads to
//! decide whether one version beats another. Lines are written on a
//! thread of their own from a bounded queue: a full queue drops lines
//! (counted in `nereid_route_log_dropped_total`), never a request.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};
use nereid_core::{DataType, InputTensor, Tensor};
use nereid_engine::traffic::{RouteObserver, RouteRecord, ShadowOutcome, ShadowRecord};
use nereid_protocol::rest::JsonData;
use serde::Serialize;

/// Lines that may wait for the writer.
const QUEUE: usize = 65_536;
/// How long written lines may sit in the buffer.
const FLUSH_EVERY: Duration = Duration::from_millis(200);

/// The route log's sending side.
#[derive(Debug, Clone)]
pub struct RouteLog {
    lines: Sender<Line>,
    dropped: Arc<AtomicU64>,
}

enum Line {
    Route(Box<RouteRecord>, SystemTime),
    Shadow(Box<ShadowRecord>, SystemTime),
}

impl RouteLog {
    /// Opens `path` for appending and starts the writer thread.
    pub fn open(path: &Path) -> anyhow::Result<RouteLog> {
        let file = File::options()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot open the route log {}", path.display()))?;
        let (lines, received) = crossbeam_channel::bounded(QUEUE);
        std::thread::Builder::new()
            .name("route-log".into())
            .spawn(move || write_lines(BufWriter::new(file), &received))
            .context("cannot start the route log's thread")?;
        Ok(RouteLog {
            lines,
            dropped: Arc::default(),
        })
    }

    fn send(&self, line: Line) {
        if let Err(TrySendError::Full(_)) = self.lines.try_send(line) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl RouteObserver for RouteLog {
    fn routed(&self, record: RouteRecord) {
        self.send(Line::Route(Box::new(record), SystemTime::now()));
    }

    fn shadowed(&self, record: ShadowRecord) {
        self.send(Line::Shadow(Box::new(record), SystemTime::now()));
    }

    fn dropped(&self) -> Option<u64> {
        Some(self.dropped.load(Ordering::Relaxed))
    }
}

/// Writes lines until every sender is gone, flushing at least every
/// [`FLUSH_EVERY`] while lines come and whenever they pause.
fn write_lines(mut out: BufWriter<File>, lines: &Receiver<Line>) {
    loop {
        let line = match lines.recv_timeout(FLUSH_EVERY) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => {
                let _ = out.flush();
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let written = match &line {
            Line::Route(record, at) => serde_json::to_writer(&mut out, &route_json(record, *at)),
            Line::Shadow(record, at) => serde_json::to_writer(&mut out, &shadow_json(record, *at)),
        };
        if let Err(e) = written
            .map_err(std::io::Error::from)
            .and_then(|()| out.write_all(b"\n"))
        {
            tracing::warn!(error = %e, "cannot write the route log");
        }
        if lines.is_empty() {
            let _ = out.flush();
        }
    }
    let _ = out.flush();
}

#[derive(Serialize)]
struct RouteJson<'a> {
    time: f64,
    kind: &'static str,
    model: &'a str,
    version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    label: Option<&'a str>,
    routed_by: &'static str,
    id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fallback: Option<&'a str>,
    latency_us: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    inputs: Option<Vec<TensorJson<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    outputs: Option<Vec<TensorJson<'a>>>,
}

#[derive(Serialize)]
struct ShadowJson<'a> {
    time: f64,
    kind: &'static str,
    model: &'a str,
    version: String,
    shadow_version: String,
    id: &'a str,
    shadow_latency_us: u64,
    outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<&'a str>,
}

/// A tensor as the KServe v2 JSON tensor object; FP16 and BF16, which
/// JSON does not carry, without their data.
#[derive(Serialize)]
struct TensorJson<'a> {
    name: &'a str,
    datatype: &'static str,
    shape: &'a [i64],
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<JsonData<'a>>,
}

impl<'a> TensorJson<'a> {
    fn new(name: &'a str, datatype: DataType, shape: &'a [i64], data: &'a [u8]) -> Self {
        let json = !matches!(datatype, DataType::Fp16 | DataType::Bf16);
        TensorJson {
            name,
            datatype: datatype.wire_name(),
            shape,
            data: json.then_some(JsonData { datatype, data }),
        }
    }
}

fn route_json(record: &RouteRecord, at: SystemTime) -> RouteJson<'_> {
    let inputs = record.tensors.as_ref().map(|(inputs, _)| {
        inputs
            .iter()
            .map(|t: &InputTensor| TensorJson::new(&t.name, t.datatype, &t.shape, &t.data))
            .collect()
    });
    let outputs = record.tensors.as_ref().map(|(_, outputs)| {
        outputs
            .iter()
            .map(|t: &Tensor| TensorJson::new(&t.name, t.datatype, &t.shape, &t.data))
            .collect()
    });
    RouteJson {
        time: seconds(at),
        kind: "route",
        model: &record.model,
        version: record.version.to_string(),
        label: record.label.as_deref(),
        routed_by: record.routed_by.as_str(),
        id: &record.request_id,
        key: record.key.as_deref(),
        fallback: record.fallback.as_deref(),
        latency_us: micros(record.latency),
        error: record.error.as_deref(),
        inputs,
        outputs,
    }
}

fn shadow_json(record: &ShadowRecord, at: SystemTime) -> ShadowJson<'_> {
    let (outcome, output, detail) = match &record.outcome {
        ShadowOutcome::Match => ("match", None, None),
        ShadowOutcome::Mismatch { output, detail } => {
            ("mismatch", Some(output.as_str()), Some(detail.as_str()))
        }
        ShadowOutcome::Failed(e) => ("shadow_failed", None, Some(e.as_str())),
        ShadowOutcome::PrimaryFailed(e) => ("primary_failed", None, Some(e.as_str())),
    };
    ShadowJson {
        time: seconds(at),
        kind: "shadow",
        model: &record.model,
        version: record.primary_version.to_string(),
        shadow_version: record.shadow_version.to_string(),
        id: &record.request_id,
        shadow_latency_us: micros(record.latency),
        outcome,
        output,
        detail,
    }
}

/// Seconds since the Unix epoch, to the microsecond.
fn seconds(at: SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| (d.as_micros() as f64) / 1e6)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use nereid_engine::traffic::RoutedBy;

    use super::*;

    #[test]
    fn a_route_line_holds_what_an_analysis_needs() {
        let record = RouteRecord {
            model: "m".into(),
            version: 4,
            label: Some("canary".into()),
            routed_by: RoutedBy::Key,
            request_id: "r1".into(),
            key: Some("user-7".into()),
            fallback: None,
            latency: Duration::from_micros(1500),
            error: None,
            tensors: Some((
                vec![InputTensor {
                    name: "X".into(),
                    datatype: DataType::Int32,
                    shape: vec![2],
                    data: Bytes::from_static(&[1, 0, 0, 0, 2, 0, 0, 0]),
                    parameters: Default::default(),
                }],
                Vec::new(),
            )),
        };
        let line = serde_json::to_value(route_json(&record, UNIX_EPOCH)).unwrap();
        assert_eq!(
            line,
            serde_json::json!({
                "time": 0.0, "kind": "route", "model": "m", "version": "4",
                "label": "canary", "routed_by": "key", "id": "r1", "key": "user-7",
                "latency_us": 1500,
                "inputs": [{"name": "X", "datatype": "INT32", "shape": [2], "data": [1, 2]}],
                "outputs": []
            })
        );
    }
}
